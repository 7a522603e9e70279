"""Rematerialization: which forward values the backward saves, and which it recomputes.

Why: every value the backward reads from the forward is memory held from the forward
until the backward. Recomputing a cheap elementwise chain in the backward often saves far
more memory than it costs time (functorch's min-cut partitioner; JAX's ``remat``).

The decision is a minimum cut over real byte sizes (shape x itemsize). Each forward value
``v`` is an edge ``v_in -> v_out`` whose capacity is what saving ``v`` costs; data
dependencies and the backward's needs are infinite edges. Values the backward cannot
recompute (inputs, and results of ops the policy says are not recomputable: matmuls,
reductions, RNG, opaque torch calls) hang off the source. The policy asks each op's traits
(`thunder_ir.dialects.traits`), so a new op declared on a family base is recomputed as its
family is. The cheapest cut is the set of
values to save; everything on the sink side that the backward needs is recomputed there.

A `RematPolicy` says which ops may be recomputed. `MIN_CUT` recomputes every cheap
elementwise op; `SAVE_ALL` recomputes nothing; `AUTO` (the default of ``jit``) recomputes a
cheap op only where one of the program's fusion executors can fuse it, and views and
constants everywhere. Without a fusion executor every recomputed op is one more eager kernel, a
memory pass of its own (about 2.5% of a CPU Llama training step, for 27% fewer saved
bytes); inside a fused kernel the recomputation is nearly free.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.traits import (
    RESHAPE,
    RESTRIDE,
    ViewLike,
    cheap_to_recompute,
    free_to_recompute,
)
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.passes.min_cut import SINK, SOURCE, Edge, latest_min_cut


def cheap_elementwise(op: Operation) -> bool:
    """The default policy: recompute what is cheap to recompute (elementwise, view,
    creation and single-tensor movement ops: `traits.cheap_to_recompute`).

    A reshape of a transposed or expanded value is the exception: outside a fusion it
    is a copy, which costs a memory pass each time it is recomputed, so its result is
    saved instead (attention's ``transpose(...).reshape(...)``, grouped-query heads'
    ``expand(...).reshape(...)``). The ops say which they are (``ViewLike(RESHAPE)``,
    ``ViewLike(RESTRIDE)``).
    """
    if not cheap_to_recompute(op):
        return False
    view = op.get_trait(ViewLike)
    if view is not None and view.kind == RESHAPE:
        src = op.operands[0].owner
        if isinstance(src, Operation):
            src_view = src.get_trait(ViewLike)
            return src_view is None or src_view.kind != RESTRIDE
    return True


@dataclass(frozen=True)
class RematPolicy:
    """Which forward ops the backward may recompute instead of saving their results.

    With ``only_fused``, an op is recomputed only if it is free (`traits.free_to_recompute`:
    views and number constants) or a fusion executor the policy is `bound` to can fuse
    it."""

    name: str
    recomputable: Callable[[Operation], bool] = field(default=cheap_elementwise)
    only_fused: bool = False

    def bound(self, executors: Sequence[Any]) -> RematPolicy:
        """This policy for a program run by ``executors`` (an ``only_fused`` policy asks
        their fusion executors' ``can_fuse``)."""
        if not self.only_fused:
            return self
        fusers = tuple(e for e in executors if getattr(e, "is_fusion", False))
        base = self.recomputable

        def recomputable(op: Operation) -> bool:
            return base(op) and (free_to_recompute(op) or any(f.can_fuse(op) for f in fusers))

        return RematPolicy(self.name, recomputable)


MIN_CUT = RematPolicy("min-cut", cheap_elementwise)
SAVE_ALL = RematPolicy("save-all", lambda op: False)
AUTO = RematPolicy("auto", cheap_elementwise, only_fused=True)
POLICIES = {p.name: p for p in (AUTO, MIN_CUT, SAVE_ALL)}


def nbytes(v: SSAValue) -> int:
    """What saving ``v`` costs: shape x itemsize (8 for a number)."""
    t = v.type
    if isinstance(t, TensorType):
        return t.nbytes()
    if isinstance(t, NumberType):
        return 8
    return 0


@dataclass
class RematPlan:
    """``saved``: forward values handed to the backward, in a stable order.
    ``recompute``: forward ops the backward re-runs, in forward order."""

    saved: list[SSAValue]
    recompute: list[Operation]

    def saved_bytes(self) -> int:
        return sum(nbytes(v) for v in self.saved)


_NOTED: contextvars.ContextVar[list[tuple[int, list[tuple[str, str]]]] | None] = \
    contextvars.ContextVar("thunder_ir_remat_noted", default=None)


@contextlib.contextmanager
def plans_noted() -> Iterator[list[tuple[int, list[tuple[str, str]]]]]:
    """While open, each plan a split follows (`note_plan`) is noted as ``(saved bytes,
    [(op name, user's line) per recomputed op])`` (what `thunder_ir.examine` reports)."""
    noted: list[tuple[int, list[tuple[str, str]]]] = []
    token = _NOTED.set(noted)
    try:
        yield noted
    finally:
        _NOTED.reset(token)


def note_plan(plan: RematPlan) -> None:
    """Notes ``plan`` where `plans_noted` is open (else nothing)."""
    noted = _NOTED.get()
    if noted is not None:
        noted.append((plan.saved_bytes(),
                      [(op.name, location_text(op)) for op in plan.recompute]))


def plan_remat(fwd_args: Sequence[SSAValue], fwd_ops: Sequence[Operation],
               bwd_ops: Sequence[Operation], bwd_outputs: Sequence[SSAValue],
               policy: RematPolicy | str | None = None) -> RematPlan:
    """Chooses residuals and recomputation for a split (see the module doc)."""
    if isinstance(policy, str):
        policy = POLICIES[policy]
    policy = (policy or AUTO).bound(())  # a policy bound to executors is left as it is
    producer: dict[SSAValue, Operation] = {r: op for op in fwd_ops for r in op.results}
    fwd_values = set(fwd_args) | set(producer)
    needed: list[SSAValue] = []
    seen: set[SSAValue] = set()
    for op in bwd_ops:
        for o in op.operands:
            if o in fwd_values and o not in seen:
                seen.add(o)
                needed.append(o)
    for o in bwd_outputs:
        if o in fwd_values and o not in seen:
            seen.add(o)
            needed.append(o)
    if not needed:
        return RematPlan([], [])

    order = {v: i for i, v in enumerate(fwd_args)}
    for op in fwd_ops:
        for r in op.results:
            order[r] = len(order)

    if policy is SAVE_ALL or not any(policy.recomputable(op) for op in fwd_ops):
        return RematPlan(sorted(needed, key=order.__getitem__), [])

    # Only the part of the forward that the needed values depend on matters.
    relevant: set[SSAValue] = set()
    stack = list(needed)
    while stack:
        v = stack.pop()
        if v in relevant:
            continue
        relevant.add(v)
        src = producer.get(v)
        if src is not None and policy.recomputable(src):
            stack.extend(o for o in src.operands if o in fwd_values)

    # Each value is an edge ("in", v) -> ("out", v) of what saving it costs; None:
    # infinite. The source side of the cut closest to the sink recomputes least: among
    # cuts of equal cost, saving ``q * cos`` costs what saving ``q`` does when ``cos`` is
    # a constant, and only the later cut spares the backward the multiplication.
    edges: list[Edge] = []
    for v in relevant:
        vin, vout = ("in", v), ("out", v)
        src = producer.get(v)
        edges.append((vin, vout, 0 if src is None else nbytes(v)))
        if src is None or not policy.recomputable(src):
            edges.append((SOURCE, vin, None))
        else:
            for o in src.operands:
                if o in relevant:
                    edges.append((("out", o), vin, None))
    for v in needed:
        edges.append((("out", v), SINK, None))
    src_side = latest_min_cut(edges)
    saved = [v for v in relevant if ("in", v) in src_side and ("out", v) not in src_side]
    recompute_values = {v for v in relevant if ("in", v) not in src_side}
    recompute_ops: list[Operation] = []
    seen_ops: set[Operation] = set()
    for op in fwd_ops:
        if op not in seen_ops and any(r in recompute_values for r in op.results):
            seen_ops.add(op)
            recompute_ops.append(op)
    return RematPlan(sorted(saved, key=order.__getitem__), recompute_ops)
