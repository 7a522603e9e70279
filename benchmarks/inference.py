"""Inference benchmark: thunder_ir vs eager vs torch.compile, from one run.

Measures:
* first-call (trace + compile) time of the Llama-style model;
* cached per-call time of ``x + 1`` on a (4,) tensor and of the LLaMAMLP on a tiny input;
* steady-state forward time of the Llama-style model.

Prints each figure and its ratio to eager and to torch.compile. Usage::

    python benchmarks/inference.py [--layers 4] [--embd 256] [--seq 256] [--no-compile]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import Config, LlamaGPT, LLaMAMLP

import thunder_ir


def per_call_us(fn: Callable[[], Any], min_time: float = 0.5) -> float:
    """Median per-call time in µs over repeated batches."""
    for _ in range(20):
        fn()
    n = 10
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t > 0.05:
            break
        n *= 2
    samples = []
    end = time.perf_counter() + min_time
    while time.perf_counter() < end or len(samples) < 5:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(samples)


def first_call_s(make: Callable[[], Callable[..., Any]], *args: Any) -> float:
    fn = make()
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def row(name: str, eager: float, ours: float, compiled: float | None, unit: str) -> None:
    c = f"{compiled:10.1f}" if compiled is not None else f"{'-':>10}"
    vs_c = f"{ours / compiled:8.2f}x" if compiled else f"{'-':>9}"
    print(f"{name:<34}{eager:10.1f}{ours:10.1f}{c}  {unit:<3}{ours / eager:8.2f}x{vs_c}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    a = ap.parse_args()
    torch.manual_seed(0)
    use_compile = not a.no_compile
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'':<34}{'eager':>10}{'thunder_ir':>10}{'compile':>10}      "
          f"{'vs eager':>8}{'vs comp.':>9}")

    # x + 1
    x = torch.randn(4)

    def add1(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    j = thunder_ir.jit(add1)
    c = torch.compile(add1) if use_compile else None
    eager = per_call_us(lambda: add1(x))
    ours = per_call_us(lambda: j(x))
    comp = per_call_us(lambda: c(x)) if c is not None else None  # type: ignore[misc]
    row("cached call: x + 1", eager, ours, comp, "µs")

    # LLaMAMLP, tiny input
    mlp = LLaMAMLP(64, 172).requires_grad_(False)
    xm = torch.randn(1, 4, 64)
    jm = thunder_ir.jit(mlp)
    cm = torch.compile(mlp) if use_compile else None
    eager = per_call_us(lambda: mlp(xm))
    ours = per_call_us(lambda: jm(xm))
    comp = per_call_us(lambda: cm(xm)) if cm is not None else None  # type: ignore[misc]
    row("cached call: LLaMAMLP (1x4x64)", eager, ours, comp, "µs")

    # Llama-style model
    cfg = Config(n_layer=a.layers, n_embd=a.embd, n_head=4, n_query_groups=2,
                 intermediate_size=int(a.embd * 2.6875), block_size=a.seq, vocab_size=512)
    model = LlamaGPT(cfg).eval().requires_grad_(False)
    idx = torch.randint(0, cfg.vocab_size, (a.batch, a.seq))
    ours_first = first_call_s(lambda: thunder_ir.jit(model), idx)
    comp_first = first_call_s(lambda: torch.compile(model), idx) if use_compile else None
    t = time.perf_counter()
    model(idx)
    eager_first = time.perf_counter() - t
    row(f"first call: Llama {a.layers}L/{a.embd}/{a.seq}", eager_first * 1e3, ours_first * 1e3,
        comp_first * 1e3 if comp_first else None, "ms")
    jl = thunder_ir.jit(model)
    cl = torch.compile(model) if use_compile else None
    eager = per_call_us(lambda: model(idx), 2.0) / 1e3
    ours = per_call_us(lambda: jl(idx), 2.0) / 1e3
    comp = per_call_us(lambda: cl(idx), 2.0) / 1e3 if cl is not None else None  # type: ignore[misc]
    row("steady forward: Llama", eager, ours, comp, "ms")
    tiny = torch.randint(0, cfg.vocab_size, (1, 4))
    eager = per_call_us(lambda: model(tiny))
    ours = per_call_us(lambda: jl(tiny))
    comp = per_call_us(lambda: cl(tiny)) if cl is not None else None  # type: ignore[misc]
    row("cached call: Llama, tiny input", eager, ours, comp, "µs")
    n_ops = len(list(thunder_ir.last_traces(jl)[0].ir.body.block.first_op.body.block.ops))
    print(f"(Llama trace: {n_ops} ops; first-call breakdown: " + ", ".join(
        f"{t.pass_name} {t.duration_s * 1e3:.0f} ms" for t in thunder_ir.last_traces(jl)) + ")")


if __name__ == "__main__":
    main()
