"""A family's training step taken apart: forward, backward and the rest, and the tensors
saved for the backward, for eager, the tiered program (every kernel in) and
torch.compile, in one process.

Why: on the shared 2-core machine the wall-clock step of `benchmarks/models.py` swings by
2x with the other sessions' load. This script times each phase by the calling thread's
CPU time (``time.thread_time``: with one torch thread, the step's work, without the time
the thread waited for a core), round by round over every variant (interleaved), and
prints medians and 10th percentiles; it also counts the tensors each variant saves for
its backward (``saved_tensors_hooks``: the autograd Function of thunder_ir's program and
torch.compile's both save through it) and checks every loss and gradient sum against
eager's first. Usage::

    OMP_NUM_THREADS=1 python benchmarks/step_phases.py --family jamba [--rounds 600]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from harness import pin_malloc  # noqa: E402


def _quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[int(q * (len(xs) - 1))] * 1e3


def main() -> None:
    import torch
    from test_hf_families_next import FAMILIES as NEXT
    from test_hf_models import FAMILIES

    import thunder_ir

    ap = argparse.ArgumentParser()
    ap.add_argument("--family", default="jamba")
    ap.add_argument("--rounds", type=int, default=600)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    torch._inductor.config.fallback_random = True
    pin_malloc()
    build, inputs = {**FAMILIES, **NEXT}[a.family]
    torch.manual_seed(0)
    base = build().train()
    kw = inputs(16)

    def step(fn: Any, model: Any) -> Any:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        out = fn(**kw)
        out.loss.backward()
        return out.loss

    fns: dict[str, tuple[Any, Any]] = {}
    model = copy.deepcopy(base)
    jm = thunder_ir.jit(model, tiered=True)
    while True:  # until every kernel is in
        step(jm, model)
        status = thunder_ir.compile_status(jm, wait=None)
        if status["ready"]:
            break
    fns["tiered"] = (jm, model)
    model = copy.deepcopy(base)
    fns["torch.compile"] = (torch.compile(model), model)
    model = copy.deepcopy(base)
    fns["eager"] = (model, model)
    ref = None
    for name, (fn, model) in fns.items():
        for _ in range(3):
            loss = step(fn, model)
        grads = sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)
        ref = ref or (loss.item(), grads)
        assert abs(loss.item() - ref[0]) <= 1e-5 * abs(ref[0]), (name, loss.item(), ref)
        assert abs(grads - ref[1]) <= 1e-4 * abs(ref[1]), (name, grads, ref)
        count = [0, 0]

        def pack(t: torch.Tensor, count: list[int] = count) -> torch.Tensor:
            count[0] += 1
            count[1] += t.numel() * t.element_size()
            return t

        model.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = fn(**kw).loss
        loss.backward()
        print(f"{name:<14} saves {count[0]} tensors, {count[1] / 1024:.0f} KiB")
    times: dict[str, tuple[list[float], list[float], list[float]]] = {
        n: ([], [], []) for n in fns}
    for _ in range(a.rounds):
        for name, (fn, model) in fns.items():
            model.zero_grad(set_to_none=True)
            t0 = time.thread_time()
            out = fn(**kw)
            loss = out.loss
            t1 = time.thread_time()
            loss.backward()
            t2 = time.thread_time()
            del out, loss
            t3 = time.thread_time()
            fwd, bwd, total = times[name]
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            total.append(t3 - t0)
    print("thread CPU ms per step, median (10th percentile); each round runs every variant")
    ref_total = _quantile(times["torch.compile"][2], 0.5)
    for name, (fwd, bwd, total) in times.items():
        print(f"{name:<14} forward {_quantile(fwd, .5):.3f} ({_quantile(fwd, .1):.3f})  "
              f"backward {_quantile(bwd, .5):.3f} ({_quantile(bwd, .1):.3f})  "
              f"step {_quantile(total, .5):.3f} ({_quantile(total, .1):.3f}), "
              f"{_quantile(total, .5) / ref_total:.2f}x torch.compile")


if __name__ == "__main__":
    main()
