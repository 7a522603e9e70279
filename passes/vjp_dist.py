"""VJP rules of the collectives (``dist``): each one's transpose.

A collective's cotangent is a collective too: an all-gather's is a reduce-scatter of the
cotangent (each process gets the sum of every process's cotangent of its rows), a
reduce-scatter's an all-gather, a summing all-reduce's a summing all-reduce. ``dist.wait``
passes its cotangent to the pending value it waited for, whose start op's rule then
starts the transposed collective and waits for it. (A later pass may move those starts
and waits, as for the forward's.) A broadcast has no rule: its cotangent would be a
reduction onto the source process, which no program here needs; autodiff names it.
"""

from __future__ import annotations

from typing import Any

from xdsl.ir import SSAValue

from thunder_ir.dialects import dist
from thunder_ir.passes.vjp import Grad, vjp


def _dist(g: Grad) -> Any:
    return g.emitter.ns(dist.OPS)


@vjp(dist.WaitOp)
def wait_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], pending: SSAValue
             ) -> list[Any]:
    return [ct[0]]


@vjp(dist.AllGatherOp)
def all_gather_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], x: SSAValue, *,
                   group: str, world: int, donated: bool = False) -> list[Any]:
    D = _dist(g)
    return [D.wait(D.reduce_scatter(ct[0], reduce="sum", group=group, world=world,
                                    donated=False))]


@vjp(dist.ReduceScatterOp)
def reduce_scatter_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None],
                       x: SSAValue, *, reduce: str, group: str, world: int,
                       donated: bool = False) -> list[Any]:
    if reduce != "sum":
        raise ValueError(f"dist.reduce_scatter with reduce={reduce!r} has no VJP rule "
                         "(only a sum's gradient is a collective)")
    D = _dist(g)
    return [D.wait(D.all_gather(ct[0], group=group, world=world, donated=False))]


@vjp(dist.AllReduceOp)
def all_reduce_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], x: SSAValue, *,
                   reduce: str, group: str, donated: bool = False) -> list[Any]:
    if reduce != "sum":
        raise ValueError(f"dist.all_reduce with reduce={reduce!r} has no VJP rule "
                         "(only a sum's gradient is a collective)")
    D = _dist(g)
    return [D.wait(D.all_reduce(ct[0], reduce="sum", group=group, donated=False))]
