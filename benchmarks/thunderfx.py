"""ThunderCompiler benchmark: the Llama-style training step through torch.compile with
thunder_ir as its backend, against eager, torch.compile (Inductor) and ``thunder_ir.jit``.

Same model, sizes and step as ``benchmarks/train_step.py`` (forward, cross-entropy,
backward, Adam). All four variants are built in one process; each variant's first step
(Dynamo, thunder_ir's trace or Inductor's compile included) is timed as it comes, with a
fresh Inductor cache directory for the whole run (so torch.compile's first step includes
its compile), then their steady steps are timed interleaved (round-robin, the order
rotating each round: a slow spell of the machine hits all alike). Prints the first-step
times and the steady-step ratios against eager, torch.compile and ``thunder_ir.jit``::

    python benchmarks/thunderfx.py [--layers 4] [--embd 256] [--seq 256] [--batch 2]
                                   [--seconds 20] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from harness import add_llama_args, pin_malloc, time_interleaved  # noqa: E402

VARIANTS = ("eager", "torch.compile", "thunder_ir", "thunderfx")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_llama_args(ap)
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="steady-step timing per variant, all rounds together")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--remat", default="auto", help="thunder_ir's remat policy")
    a = ap.parse_args()
    pinned = pin_malloc()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunderfx-bench-")
    import torch
    from train_step import build

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}; Llama-style {a.layers} layers x {a.embd}, "
          f"seq {a.seq}, batch {a.batch}; malloc pinned: {pinned}")
    steps = {}
    first = {}
    losses = {}
    for v in VARIANTS:
        step, _, _ = build(v, a)
        t = time.perf_counter()
        losses[v] = step()
        first[v] = time.perf_counter() - t
        steps[v] = step
        print(f"first step {v:>14}: {first[v]:8.2f} s (loss {losses[v]:.5f})", flush=True)
    for v in VARIANTS:  # the same model, seed and data: the same first loss
        assert abs(losses[v] - losses["eager"]) < 1e-3, (v, losses[v], losses["eager"])
    timings, others = time_interleaved(steps, "cpu", a.seconds, a.rounds)
    med = {v: timings[v].ms for v in VARIANTS}
    print(f"\n{'variant':>14} {'step ms':>9} {'/eager':>7} {'/torch.compile':>15} "
          f"{'/thunder_ir.jit':>16} {'first step s':>13}")
    for v in VARIANTS:
        print(f"{v:>14} {med[v]:9.2f} {med[v] / med['eager']:7.3f} "
              f"{med[v] / med['torch.compile']:15.3f} {med[v] / med['thunder_ir']:16.3f} "
              f"{first[v]:13.2f}")
    print(f"\nfirst step: thunderfx / torch.compile = "
          f"{first['thunderfx'] / first['torch.compile']:.3f}; steady step: thunderfx / "
          f"thunder_ir.jit = {med['thunderfx'] / med['thunder_ir']:.3f}")
    if others is not None:
        print(f"# other processes kept {others:.2f} CPUs busy meanwhile")


if __name__ == "__main__":
    main()
