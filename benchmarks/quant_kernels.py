"""The CPU products behind a quantized decode step, one row of activations (issue 55).

For square weights of each ``--hidden`` size, the milliseconds of ``x @ W.T`` with ``x``
one row: float32 ``mm``; ``aten._weight_int8pack_mm`` on float32 and on bfloat16
activations; the float32 int8 paths of ``quant.int8_linear`` (the fused product
`thunder_ir.dialects.quant_cpu.FUSED`, and `quant.dequantized_mm`, a block of rows at a
time); ``aten._weight_int4pack_mm_for_cpu`` on float32 and bfloat16 activations.

Each is timed "hot" (the same weight every call: it may sit in the cache) and
"streamed" (cycling through enough weights to fill ``--stream-mib`` of float32, more than
the last-level cache, as a model's layers do in a decode step). The variants are
interleaved and each figure is the median of ``--repeats`` rounds, so that a shared
machine's load touches them alike. Usage::

    OMP_NUM_THREADS=1 python benchmarks/quant_kernels.py [--hidden 1024 2048 4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from thunder_ir.dialects import quant as Q
from thunder_ir.dialects.quant_cpu import FUSED


def variants(x: torch.Tensor, w: torch.Tensor) -> dict[str, tuple[Callable[..., Any], tuple]]:
    """Each product and the operands it reads for the weight ``w``."""
    q, s = Q.int8_qparams(w)
    codes, sz = Q.int4_qparams(w, 32)
    packed = Q.int4_kernel_layout(codes)
    xb = x.bfloat16()

    def fused(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = FUSED.int8(x, q, s)
        assert y is not None, "no fused product here (Inductor could not compile)"
        return y

    return {
        "fp32 mm": (lambda w: torch.mm(x, w.t()), (w,)),
        "int8pack fp32 x": (lambda q, s: torch.ops.aten._weight_int8pack_mm(x, q, s), (q, s)),
        "int8pack bf16 x": (lambda q, s: torch.ops.aten._weight_int8pack_mm(xb, q, s),
                            (q, s.bfloat16())),
        "int8 fused (fp32 x)": (fused, (q, s)),
        "int8 dequantized_mm (fp32 x)": (lambda q, s: Q.dequantized_mm(x, q, s), (q, s)),
        "int4pack fp32 x": (lambda p, sz: torch.ops.aten._weight_int4pack_mm_for_cpu(
            x, p, 32, sz), (packed, sz)),
        "int4pack bf16 x": (lambda p, sz: torch.ops.aten._weight_int4pack_mm_for_cpu(
            xb, p, 32, sz), (packed, sz.bfloat16())),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, nargs="*", default=[1024, 2048, 4096])
    ap.add_argument("--stream-mib", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(f"{os.cpu_count()} cores, torch {torch.__version__}, threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")
    for h in a.hidden:
        count = max(2, a.stream_mib * 2**20 // (h * h * 4))
        x = torch.randn(1, h)
        sets = [variants(x, torch.randn(h, h)) for _ in range(count)]
        names = list(sets[0])
        for name in names:  # (compiles the fused product)
            fn, args = sets[0][name]
            fn(*args)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(a.repeats):
            for name in names:
                fn = sets[0][name][0]
                for mode, used in (("hot", sets[:1]), ("streamed", sets)):
                    calls = max(4, 2 * count if "int4pack fp32" not in name else count // 2)
                    t = time.perf_counter()
                    for i in range(calls):
                        fn(*used[i % len(used)][name][1])
                    times.setdefault((name, mode), []).append(
                        (time.perf_counter() - t) / calls)
        print(f"\nhidden {h} ({h * h * 4 / 2**20:.0f} MiB float32 a weight; streamed over "
              f"{count}), ms, median of {a.repeats}:")
        base = {m: statistics.median(times[("fp32 mm", m)]) for m in ("hot", "streamed")}
        for name in names:
            cells = []
            for mode in ("hot", "streamed"):
                med = statistics.median(times[(name, mode)])
                cells.append(f"{mode} {med * 1e3:7.3f} ({med / base[mode]:.2f}x)")
            print(f"  {name:<30} " + "   ".join(cells), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
