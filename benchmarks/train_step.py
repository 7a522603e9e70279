"""Training-step benchmark: thunder_ir vs eager vs torch.compile on the Llama-style model.

For each variant, in a fresh process (so peak memory and first-call costs are its own):
* time of the first step (trace/compile included), and of everything before it in the
  process (``setup_s``: the model built, ``thunder_ir.jit`` or ``torch.compile`` called,
  which loads the compiler) with the first step (``to_first_s``: setup and first step);
* steady-state step time (forward, backward, Adam step), median of timed steps;
* bytes saved for backward (torch's saved-tensor hooks see thunder_ir's residuals too);
* peak resident memory of the process (ru_maxrss), which holds the compiler too, and for
  ``thunder_ir:tiered`` its compile helper's own peak (``helper_rss_mb``; 0 when the
  compiles ran on a thread, or, for ``thunder_ir:auto``, once the helper has ended);
* the peak of a steady step's own memory above what the process held when the step began
  (``step_peak_mb``: activations, residuals, gradients), in one more process per variant
  whose allocations of 64 KiB and more are mapped one by one (`harness.step_peak_mib`;
  for ``thunder_ir:tiered`` and ``thunder_ir:auto``, once every kernel is in).

Prints every figure and the ratios to eager and to torch.compile. Usage::

    python benchmarks/train_step.py [--layers 4] [--embd 256] [--seq 256] [--batch 2]
                                    [--steps 10] [--variants eager,thunder_ir,torch.compile]
                                    [--interleaved]

glibc's malloc thresholds are pinned first (``benchmarks/harness.py``; all variants then
allocate alike, with a steady number of page faults a step, which is printed);
``--glibc-malloc-defaults`` leaves malloc alone.

``--cold`` gives each variant a fresh Inductor cache directory, so that first steps include
every compile (torch.compile and the ``torch_compile`` executor).

``--interleaved`` builds every variant in one process and times their steps in turn
(round-robin, the order rotating each round), so that a slow spell of the machine hits
all variants alike: the steady-step ratios it prints are the ones to quote on a shared
machine. It reports no first-step or memory figures (those need a process each).

``--lengths 96,112,128`` gives each step the next of these sequence lengths, in turn
(variable lengths: thunder_ir compiles a static program for the first and one symbolic
program for the others; torch.compile marks the length dynamic). ``--interleaved`` then
times a step of each length per variant and round, and waits for ``thunder_ir:auto``'s
two fused programs before timing.

``--autocast bf16`` runs every variant's forward and loss under
``torch.autocast("cpu", torch.bfloat16)`` (eager autocast, torch.compile with autocast,
thunder_ir with autocast).

``thunder_ir`` is ``jit(model, tiered=False)``: the program compiled at the first call,
which ``jit(model)`` runs until it tiers up. A variant ``thunder_ir+NAME`` puts executor
NAME (e.g. the ``torch_compile`` fusion executor) ahead of the default executors.
``thunder_ir:auto`` is ``jit(model)``, the default: the program tiers up once hot
(`thunder_ir.lowering.tier_up`). ``thunder_ir:tiered`` is ``jit(model,
tiered=True)``: the Inductor executor's regions run unfused until a background thread has
compiled them. Both also report the step after which every kernel was swapped in, the
seconds from the first step's start to then (``swap_step``, ``swap_s``; 0 for the others)
and how many compiled kernels lost to their unfused region when both were timed
(``kept_unfused``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import (  # noqa: E402
    MAPPED_ONE_BY_ONE,
    add_llama_args,
    llama_config,
    page_faults,
    pin_malloc,
    step_peak_mib,
)


def build(variant: str, a: argparse.Namespace) -> tuple[Callable[[], float], Any, Any]:
    """``(step, fn, idx)`` for one variant: ``step()`` runs forward, backward and an Adam
    step and returns the loss; ``fn(idx)`` is the (compiled) model's forward."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from models import LlamaGPT

    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    a.seq = max(lengths(a))
    cfg = llama_config(a, vocab_size=4096)
    model = LlamaGPT(cfg)
    if variant in TIERED:
        import thunder_ir

        fn = thunder_ir.jit(model, remat=a.remat, tiered=TIERED[variant])
    elif variant.startswith("thunder_ir"):
        import thunder_ir

        # "thunder_ir+torch_compile": that fusion executor first, then the defaults.
        extra = variant.partition("+")[2]
        executors = ([extra, *thunder_ir.get_default_executors()] if extra else None)
        fn = thunder_ir.jit(model, executors=executors, remat=a.remat, tiered=False)
    elif variant == "torch.compile":
        fn = torch.compile(model)
    elif variant == "thunderfx":  # torch.compile with thunder_ir as its backend
        from thunder_ir.dynamo import ThunderCompiler

        fn = torch.compile(model, backend=ThunderCompiler(remat=a.remat))
    else:
        fn = model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, cfg.vocab_size, (a.batch, n), generator=g),
             torch.randint(0, cfg.vocab_size, (a.batch, n), generator=g))
            for n in lengths(a)]
    idx = data[-1][0]
    turn = [0]

    def step() -> float:
        idx, tgt = data[turn[0] % len(data)]  # (``--lengths``: the next length each step)
        turn[0] += 1
        with autocast(a):
            logits = fn(idx)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    return step, fn, idx


def lengths(a: argparse.Namespace) -> list[int]:
    """The sequence lengths a step takes in turn: ``--lengths``, else ``--seq`` alone."""
    return [int(n) for n in a.lengths.split(",")] if a.lengths else [a.seq]


def autocast(a: argparse.Namespace) -> Any:
    """``torch.autocast("cpu", dtype)`` for ``--autocast bf16|fp16``, else a no-op."""
    import contextlib

    import torch

    if not a.autocast:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[a.autocast])


TIERED = {"thunder_ir:tiered": True, "thunder_ir:auto": "auto"}
"""The variants whose fused kernels come in while they run (``jit(model, tiered=...)``)."""


def _swapped(fn: Any, programs: int = 1) -> bool:
    """Whether every kernel of a tiered variant is in (``thunder_ir:auto``: its
    ``programs`` fused programs are swapped in, or one kept out)."""
    import thunder_ir

    status = thunder_ir.compile_status(fn)
    if fn._compiled.tier_up is not None:
        return bool(status["swapped"] >= programs or status["kept"])
    return bool(status["ready"])


def _programs(a: argparse.Namespace) -> int:
    """The programs a tiered variant swaps in: one per call structure (``--lengths``: the
    first length's static program and one symbolic program for the others)."""
    return 1 if len(lengths(a)) == 1 else 2


def run_variant(variant: str, a: argparse.Namespace) -> dict:
    import torch

    t = time.perf_counter()
    step, fn, idx = build(variant, a)
    setup = time.perf_counter() - t
    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    swap_step, swap_s, unfused = 0, 0.0, 0
    if variant in TIERED:  # steps until every kernel is swapped in
        import thunder_ir

        swap_step = 1
        while not _swapped(fn, _programs(a)) and swap_step < 100_000:
            step()
            swap_step += 1
        swap_s = time.perf_counter() - t
    for _ in range(2):
        step()
    if variant in TIERED:  # kernels that lost to their unfused region
        status = thunder_ir.compile_status(fn)
        unfused = status["unfused"]
        for name, f_ms, u_ms in status["timings"]:
            print(f"# {name}: fused {f_ms:.2f} ms, unfused {u_ms:.2f} ms", file=sys.stderr)
    times = []
    faults = page_faults()
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    faults = (page_faults() - faults) / a.steps

    storages: dict[int, int] = {}

    def pack(x: torch.Tensor) -> torch.Tensor:
        s = x.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x), autocast(a):
        logits = fn(idx)
    del logits
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    helper_rss = 0.0
    if variant in TIERED:  # the compile helper's own peak, if it ran
        from thunder_ir.lowering.tiered import helper_if_made

        helper = helper_if_made()
        helper_rss = (helper.peak_rss_mib() if helper is not None else None) or 0.0
    return {"setup_s": setup, "first_s": first, "to_first_s": setup + first,
            "step_ms": statistics.median(times) * 1e3,
            "saved_mb": sum(storages.values()) / 2**20, "faults": faults,
            "peak_rss_mb": peak_rss, "helper_rss_mb": helper_rss,
            "swap_step": swap_step, "swap_s": swap_s, "kept_unfused": unfused}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_llama_args(ap)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--variants", default="eager,thunder_ir,torch.compile")
    ap.add_argument("--autocast", choices=("", "bf16", "fp16"), default="",
                    help="run forward and loss under torch.autocast('cpu', that dtype)")
    ap.add_argument("--remat", default="auto", help="thunder_ir's remat policy")
    ap.add_argument("--lengths", default="",
                    help="sequence lengths a step takes in turn (variable lengths)")
    ap.add_argument("--interleaved", action="store_true",
                    help="time all variants in one process, in turn (steady step only)")
    ap.add_argument("--cold", action="store_true",
                    help="a fresh Inductor cache directory per variant")
    ap.add_argument("--glibc-malloc-defaults", action="store_true",
                    help="do not pin glibc's trim and mmap thresholds")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant and a.memory:  # a process of its own, started with MAPPED_ONE_BY_ONE
        step, fn, _ = build(a.variant, a)
        if a.variant in TIERED:  # the step once every kernel is in
            for _ in range(100_000):
                step()
                if _swapped(fn, _programs(a)):
                    break
        peak = step_peak_mib(step)
        print(json.dumps({"step_peak_mb": -1.0 if peak is None else peak}))
        return
    pinned = not a.glibc_malloc_defaults and pin_malloc()
    if a.variant:
        print(json.dumps(run_variant(a.variant, a)))
        return
    import torch

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"Llama {a.layers} layers, n_embd {a.embd}, seq {a.lengths or a.seq}, "
          f"batch {a.batch}; "
          f"malloc {'pinned' if pinned else 'glibc defaults'}")
    if a.interleaved:
        interleaved(a)
        return
    results: dict[str, dict] = {}
    for v in a.variants.split(","):
        cmd = [sys.executable, __file__, "--variant", v, "--layers", str(a.layers), "--embd",
               str(a.embd), "--seq", str(a.seq), "--batch", str(a.batch), "--steps",
               str(a.steps), "--remat", a.remat, "--autocast", a.autocast,
               "--lengths", a.lengths] + (
                   ["--glibc-malloc-defaults"] if a.glibc_malloc_defaults else [])
        env = dict(os.environ)
        if a.cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="train_step_inductor_")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(f"{v}: failed\n{out.stderr[-2000:]}")
            continue
        results[v] = json.loads(out.stdout.strip().splitlines()[-1])
        out = subprocess.run([*cmd, "--memory"], capture_output=True, text=True,
                             env={**env, **MAPPED_ONE_BY_ONE})
        results[v]["step_peak_mb"] = (json.loads(out.stdout.strip().splitlines()[-1])[
            "step_peak_mb"] if out.returncode == 0 else -1.0)
    keys = ("setup_s", "first_s", "to_first_s", "step_ms", "saved_mb", "peak_rss_mb",
            "step_peak_mb", "faults")
    if any(v in results for v in TIERED):
        keys += ("helper_rss_mb", "swap_step", "swap_s", "kept_unfused")
    report(results, keys)


LABELS = {"setup_s": "setup: model, jit (s)", "first_s": "first step (s)",
          "to_first_s": "setup and first step (s)", "step_ms": "steady step (ms)",
          "saved_mb": "saved for backward (MiB)", "peak_rss_mb": "peak RSS (MiB)",
          "helper_rss_mb": "helper's peak RSS (MiB)",
          "step_peak_mb": "step's own peak (MiB)",
          "faults": "page faults per step", "swap_step": "swapped in after step",
          "swap_s": "swapped in after (s)", "kept_unfused": "kernels kept unfused"}


def report(results: dict[str, dict], keys: tuple[str, ...]) -> None:
    """The figures, a column per variant, then each thunder_ir variant's ratios."""
    cols = list(results)
    w = max([15, *(len(c) + 2 for c in cols)])
    print(f"{'':<26}" + "".join(f"{c:>{w}}" for c in cols))
    for key in keys:
        print(f"{LABELS[key]:<26}" + "".join(f"{results[c][key]:>{w}.2f}" for c in cols))
    for name, ours in results.items():
        if not name.startswith("thunder_ir"):
            continue
        for base in ("eager", "torch.compile"):
            if base in results:
                print(f"{name} / {base}: " + ", ".join(
                    f"{k} {ours[k] / results[base][k]:.2f}x" for k in keys
                    if k not in ("faults", "swap_step", "swap_s", "kept_unfused",
                                 "helper_rss_mb")))


def interleaved(a: argparse.Namespace) -> None:
    """All variants in this process; each round times one step of each, in rotated order."""
    variants = a.variants.split(",")
    steps = {}
    for v in variants:
        steps[v], fn, _ = build(v, a)
        for _ in range(3 * len(lengths(a))):  # compile and warm up
            steps[v]()
        if v in TIERED:  # its fused programs are in
            for _ in range(100_000):
                if _swapped(fn, _programs(a)):
                    break
                steps[v]()
    times: dict[str, list[float]] = {v: [] for v in variants}
    faults = page_faults()
    for r in range(a.steps):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            for _ in lengths(a):  # (a step of each length, in turn)
                t = time.perf_counter()
                steps[v]()
                times[v].append(time.perf_counter() - t)
    per_step = (page_faults() - faults) / (a.steps * len(variants))
    print(f"interleaved: {a.steps} rounds, median step; {per_step:.0f} page faults a step")
    report({v: {"step_ms": statistics.median(ts) * 1e3} for v, ts in times.items()},
           ("step_ms",))


if __name__ == "__main__":
    main()
