"""Tier-up's hot threshold, measured: steps and seconds until the swap, and the step
before and after it, for thresholds of the default ``jit(model)`` on CPU.

Each setting runs in a fresh process that trains the Llama-style model (`tests/models.py`,
Adam, cross-entropy) with ``THUNDER_IR_TIER_UP_AFTER`` set to the threshold (``default``:
unset, so `HOT_SECONDS` and the memory of earlier runs, `lowering/tier_up_memory.py`)
until its program is swapped in, then 20 more steps. ``--cold`` gives the first process
of each setting a fresh Inductor cache directory, and ``--second`` runs each setting again
in a process sharing it (a second run of the same script). ``--lengths 96,112,128`` trains
over several sequence lengths in turn (a symbolic program from the second length on).

Prints, per run: the steps at which its programs went hot and at which each swapped in
its fused program, the step and the seconds (from the first step's start) at which the
last fused program was swapped in, the median unfused
step (steps 2 to 8) and the median fused step after the swap, the kernels compiled,
found in Inductor's FX graph cache (``cache_hits``) and loaded from thunder_ir's cache of
compiled regions without any compile (``loaded``), how many times the compile helper
process was started (``helper_starts``) and the CPU seconds it spent (``helper_cpu_s``,
its compilers included: about its wall time on an idle core)::

    python benchmarks/tier_up_threshold.py --after 0.5,default --cold --second
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import add_llama_args, llama_config, pin_malloc  # noqa: E402


def run_one(a: argparse.Namespace) -> dict[str, object]:
    """One process's run (``--child``)."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import logging

    import torch
    from models import LlamaGPT

    import thunder_ir
    from thunder_ir.lowering.tiered import helper_cpu_seconds, helper_starts

    hot: list[int] = []
    swaps: list[int] = []

    class Hot(logging.Handler):  # the step at which the program went hot
        def emit(self, record: logging.LogRecord) -> None:
            if " is hot (" in record.getMessage():
                hot.append(len(times))
            elif "the fused program runs from this call on" in record.getMessage():
                swaps.append(len(times))

    log = logging.getLogger("thunder_ir.tiered")
    log.setLevel(logging.INFO)
    log.addHandler(Hot())
    pin_malloc()
    torch.manual_seed(0)
    lengths = [int(n) for n in a.lengths.split(",")] if a.lengths else [a.seq]
    a.seq = max(lengths)
    cfg = llama_config(a, 512)
    model = LlamaGPT(cfg)
    jm = thunder_ir.jit(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = [(torch.randint(0, 512, (a.batch, n)), torch.randint(0, 512, (a.batch, n)))
            for n in lengths]

    def step(i: int) -> float:
        idx, tgt = data[i % len(data)]
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(jm(idx).flatten(0, 1), tgt.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    start = time.perf_counter()
    times: list[float] = []
    i, swap = 0, None
    while time.perf_counter() - start < a.max_seconds:
        times.append(step(i))
        i += 1
        if thunder_ir.compile_status(jm)["swapped"] >= (2 if len(lengths) > 1 else 1):
            swap = (i, time.perf_counter() - start)
            break
    fused = [step(i + k) for k in range(20)]
    status = thunder_ir.compile_status(jm)
    return {"after": a.after, "hot_steps": [h + 1 for h in hot],
            "swap_steps": [h + 1 for h in swaps],
            "swap_step": swap[0] if swap else None,
            "swap_s": round(swap[1], 1) if swap else None,
            "unfused_ms": round(statistics.median(times[1:8]) * 1e3, 2),
            "fused_ms": round(statistics.median(fused[5:]) * 1e3, 2),
            "compiled": status["compiled"], "cache_hits": status["cache_hits"],
            "loaded": status["loaded"], "helper_starts": helper_starts(),
            "helper_cpu_s": round(helper_cpu_seconds(), 1),
            "programs": thunder_ir.cache_misses(jm)}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_llama_args(ap)
    ap.set_defaults(layers=2, embd=128, seq=128, batch=2)
    ap.add_argument("--after", default="0.5,default",
                    help="thresholds in seconds, 'default' for THUNDER_IR_TIER_UP_AFTER unset")
    ap.add_argument("--lengths", default="", help="sequence lengths trained in turn")
    ap.add_argument("--cold", action="store_true", help="a fresh Inductor cache per setting")
    ap.add_argument("--second", action="store_true", help="each setting again, same cache")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(run_one(a)))
        return
    for after in a.after.split(","):
        env = {k: v for k, v in os.environ.items() if k != "THUNDER_IR_TIER_UP_AFTER"}
        env.setdefault("OMP_NUM_THREADS", "1")
        if after != "default":
            env["THUNDER_IR_TIER_UP_AFTER"] = after
        cache = tempfile.mkdtemp(prefix="tier_up_threshold_") if a.cold else None
        if cache:
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
        args = [sys.executable, __file__, "--child", "--after", after, "--layers",
                str(a.layers), "--embd", str(a.embd), "--seq", str(a.seq), "--batch",
                str(a.batch), "--lengths", a.lengths, "--max-seconds", str(a.max_seconds)]
        for run in ("first", "second") if a.second else ("first",):
            out = subprocess.run(args, env=env, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-2000:], file=sys.stderr)
                continue
            res = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"run": run, **res}))


if __name__ == "__main__":
    main()
