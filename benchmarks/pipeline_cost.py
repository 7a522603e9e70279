"""Compile and call costs as best-of-N figures, which other processes on a shared machine
disturb least: inference first call and cached call, training first step and steady
step, on a 2-layer Llama (``docs/performance.md``, "One pipeline"). Usage::

    python benchmarks/pipeline_cost.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(_HERE), "tests"), _HERE]

import torch  # noqa: E402
from harness import llama_config, pin_malloc  # noqa: E402
from models import LlamaGPT  # noqa: E402

import thunder_ir  # noqa: E402


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    pin_malloc()
    torch.manual_seed(0)
    cfg = llama_config(argparse.Namespace(layers=2, embd=128, seq=32, batch=1),
                       vocab_size=512)
    idx = torch.randint(0, cfg.vocab_size, (1, 32))
    model = LlamaGPT(cfg).eval().requires_grad_(False)
    first, cached = [], []
    for _ in range(7):
        j = thunder_ir.jit(model)
        first.append(timed(lambda j=j: j(idx)))
        cached.append(min(timed(lambda j=j: j(idx)) for _ in range(200)))
    tmodel = LlamaGPT(cfg).train()
    tfirst, steps = [], []
    for _ in range(5):
        j = thunder_ir.jit(tmodel)
        tfirst.append(timed(lambda j=j: j(idx).sum().backward()))
        steps.append(statistics.median(
            timed(lambda j=j: j(idx).sum().backward()) for _ in range(20)))
    print(f"inference first call min {min(first) * 1e3:.1f} ms, "
          f"median {statistics.median(first) * 1e3:.1f} ms")
    print(f"inference cached call min {min(cached) * 1e6:.1f} us")
    print(f"training first step min {min(tfirst) * 1e3:.1f} ms, "
          f"median {statistics.median(tfirst) * 1e3:.1f} ms")
    print(f"training steady step min of medians {min(steps) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
