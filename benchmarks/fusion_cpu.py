"""The fuse pass's cost: ``fuse`` alone on synthetic prims programs of 1k to 20k ops
(linear layers, elementwise chains, row reductions and RNG draws), with a fusion executor
that takes every pure op but the matmuls. Prints ms, µs per op and the number of regions
(figures in ``docs/fusion.md``).

Whether fusion pays off on a real model is measured by ``benchmarks/train_step.py``
(variant ``thunder_ir+torch_compile``, ``--cold`` for a fresh Inductor cache). Usage::

    python benchmarks/fusion_cpu.py
"""

from __future__ import annotations

import time
from typing import Any


def scaling() -> None:
    """Times the fuse pass on synthetic programs (linear, elementwise chains, RNG)."""
    import gc

    import torch
    from xdsl.context import Context
    from xdsl.traits import Pure

    from thunder_ir.dialects import prims
    from thunder_ir.dialects.fusion import RegionOp
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import tensor_type
    from thunder_ir.lowering.executors import Executor
    from thunder_ir.passes.fuse import FusePass

    class Fuser(Executor):
        name = "bench_fuser"

        @property
        def is_fusion(self) -> bool:
            return True

        def can_fuse(self, op: Any) -> bool:
            return op.has_trait(Pure) and op.name not in ("prims.linear", "prims.matmul")

    t_ = tensor_type((4, 8), torch.float32)
    w_ = tensor_type((8, 8), torch.float32)
    for n in (1000, 5000, 10000, 20000):
        p = Program("forward", [t_, w_], ["x", "w"])
        P = p.emitter.ns(prims.OPS)
        x, w = p.args
        cur, prev, k = x, x, 0
        while len(p.block.ops) < n:
            k += 1
            cur = P.linear(cur, w, None)
            a_ = P.exp(cur)
            d = P.add(P.tanh(P.mul(a_, prev)), cur)
            if k % 7 == 0:
                d = P.mul(
                    d,
                    P.bernoulli(shape=(4, 8), p=0.5, device="cpu", dtype=torch.float32),
                )
            e = P.broadcast_in_dim(P.sum(d, dims=(1,)), shape=(4, 8), broadcast_dims=(0,))
            cur, prev = P.sub(d, e), a_
        m = p.finish([cur])
        n_ops = len(p.block.ops)
        gc.disable()
        t = time.perf_counter()
        FusePass((Fuser(),)).apply(Context(), m)
        dt = time.perf_counter() - t
        gc.enable()
        regions = sum(isinstance(op, RegionOp) for op in m.walk())
        print(
            f"{n_ops:>6} ops: fuse {dt * 1e3:7.1f} ms, {dt / n_ops * 1e6:5.1f} us/op, "
            f"{regions} regions"
        )


if __name__ == "__main__":
    scaling()
