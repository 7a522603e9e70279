"""Executor benchmarks: LLaMAMLP forward and the seed's RoPE comparison.

Variants, each timed in the same run (median of repeated calls):

* LLaMAMLP forward: eager, torch.compile, thunder_ir with the default executors, and
  thunder_ir with each fusion executor that can run here (``torch_compile`` on CPU;
  ``nvfuser`` and ``triton`` on CUDA);
* RoPE (``apply_rope`` of the "Extending Thunder" example): eager, the custom Triton
  kernel registered through ``thunder_ir.extend`` (``examples/extend_rope.py``), and
  thunder_ir's default fusion. The Triton variants need CUDA: under the CPU interpreter a
  timing means nothing, so they are reported as skipped there.

Prints figures and ratios to eager and to torch.compile. On a GPU machine: run as is (it
picks ``cuda``). Usage::

    python benchmarks/executors.py [--device cpu|cuda] [--no-compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import thunder_ir  # noqa: E402
from thunder_ir.lowering.executors import get_all_executors  # noqa: E402


def median_ms(fn: Callable[[], Any], device: str, min_time: float = 1.0) -> float:
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(5):
        fn()
    sync()
    times = []
    end = time.perf_counter() + min_time
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def report(title: str, rows: dict[str, float | str]) -> None:
    print(f"\n{title}")
    eager = rows.get("eager")
    comp = rows.get("torch.compile")
    for name, v in rows.items():
        if isinstance(v, str):
            print(f"  {name:<34} {v}")
            continue
        ratios = []
        if isinstance(eager, float):
            ratios.append(f"{v / eager:.2f}x eager")
        if isinstance(comp, float):
            ratios.append(f"{v / comp:.2f}x torch.compile")
        print(f"  {name:<34} {v:9.3f} ms   {', '.join(ratios)}")


def fusion_executors() -> list[Any]:
    return [e for e in get_all_executors() if e.is_fusion]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    dev = a.device
    torch.manual_seed(0)
    torch.set_flush_denormal(True)
    name = torch.cuda.get_device_name() if dev == "cuda" else f"{os.cpu_count()}-core CPU"
    print(f"device: {name}, torch {torch.__version__}")

    # LLaMAMLP forward (smaller than the seed's 4096 -> 11008 on CPU).
    from models import LLaMAMLP

    n_embd, inter, tokens = (4096, 11008, 2048) if dev == "cuda" else (512, 1376, 256)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    mlp = LLaMAMLP(n_embd, inter).to(dev, dtype).requires_grad_(False)
    x = torch.randn(2, tokens, n_embd, device=dev, dtype=dtype)
    rows: dict[str, float | str] = {"eager": median_ms(lambda: mlp(x), dev)}
    if not a.no_compile:
        cm = torch.compile(mlp)
        rows["torch.compile"] = median_ms(lambda: cm(x), dev)
    jm = thunder_ir.jit(mlp)
    rows["thunder_ir (default executors)"] = median_ms(lambda: jm(x), dev)
    for ex in fusion_executors():
        label = f"thunder_ir + {ex.name}"
        if not ex.is_available() or (ex.name == "triton" and dev != "cuda"):
            rows[label] = "skipped: cannot run on this device"
            continue
        jf = thunder_ir.jit(mlp, executors=[ex])
        rows[label] = median_ms(lambda jf=jf: jf(x), dev)
    report(f"LLaMAMLP forward ({n_embd} -> {inter}, 2x{tokens} tokens, {dtype})", rows)

    # RoPE comparison.
    import extend_rope as R

    b, h, t, d = (8, 32, 2048, 128) if dev == "cuda" else (2, 8, 256, 64)
    q = torch.randn(b, h, t, d, device=dev, dtype=dtype)
    cos, sin = (c.to(dev, dtype) for c in R.rope_cache(t, d))
    rows = {"eager": median_ms(lambda: R.apply_rope(q, cos, sin), dev)}
    if not a.no_compile:
        cr = torch.compile(R.apply_rope)
        rows["torch.compile"] = median_ms(lambda: cr(q, cos, sin), dev)
    jr = thunder_ir.jit(R.apply_rope)
    rows["thunder_ir default fusion"] = median_ms(lambda: jr(q, cos, sin), dev)
    if dev == "cuda":
        parts = R.register("bench_ex")
        jk = thunder_ir.jit(R.apply_rope,
                            executors=(parts["executor"], *thunder_ir.get_default_executors()))
        rows["thunder_ir + custom Triton kernel"] = median_ms(lambda: jk(q, cos, sin), dev)
    else:
        rows["thunder_ir + custom Triton kernel"] = "skipped: needs CUDA (interpreter only)"
    report(f"RoPE ({b}x{h}x{t}x{d}, {dtype})", rows)


if __name__ == "__main__":
    main()
