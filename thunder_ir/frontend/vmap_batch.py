"""``torch.vmap`` of an elementwise function inside traced code: one call on the whole
batch instead of one per slice.

Why: `thunder_ir.frontend.hops` maps a function slice by slice (each slice's ops traced
and the results stacked), which is eager's values for any function. For an elementwise
function that is ``n`` copies of the same ops on ``[...]``-sized slices, a ``select``
per slice and input, and a ``cat`` of the results. ``associative_scan``'s generic mode
(the Mamba scan of Jamba's layers under tracing) wraps its combine function in vmap at
every level of its tree: Jamba's forward held 133 ``getitem``s and 12 ``cat``s of that
kind, and their gradients (zero-padded slabs and ``cat``s again) split the backward's
kernel into 28 pieces where torch.compile's, which batches, has 16 (docs/fusion.md).

What is batched: after the first slice is traced as before, `batch_elementwise` looks at
its ops. If each is side-effect free and either depends on no slice (computed once on
the batch as on every slice) or is `Elementwise` with every operand that depends on a
slice of the result's rank (at least 1) — so that on the whole batch the mapped
dimension, moved to the front, lines up with the result's first dimension and every
other operand broadcasts against the rest as it did on a slice — and no in-place write
happened, the function is called once more on the inputs with their mapped dimension
moved to the front. That call's ops must be the first slice's, op for op (names,
properties, each operand the same op's result, the same input, or the same outside
value), each result ``n`` times larger along a new first dimension and of the same
dtype. Then its results are the stacked results: element ``[i, ...]`` of each batched op
is the op on elements ``[i, ...]`` of its batched operands and the shared ones, which is
what the op computed on slice ``i``; the values are bit for bit the slice-by-slice ones.
Otherwise (a function that branches on its input's rank, raises on the batch, writes in
place) the batch's ops are left unused (all side-effect free, or the trace is refused
clearly) and the remaining slices are traced one by one as before. The function runs
twice (a slice, the batch) where eager's vmap runs it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils import _pytree as pytree
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.traits import Elementwise, kind_of, side_effect_free
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend.errors import ThunderTraceError, user_location, where
from thunder_ir.frontend.proxy import TensorProxy


def ops_after(block: Block, start: Operation | None) -> list[Operation]:
    """The ops of ``block`` after ``start`` (all of them when ``start`` is None)."""
    op = start.next_op if start is not None else block.first_op
    out = []
    while op is not None:
        out.append(op)
        op = op.next_op
    return out


def _rank(v: SSAValue) -> int | None:
    t = v.type
    return len(t.sizes) if isinstance(t, TensorType) else None


def elementwise_on_slices(ops: Sequence[Operation], inputs: set[SSAValue]) -> bool:
    """Whether ``ops`` (one slice's trace, ``inputs`` its slices) compute the same on the
    batch with the mapped dimension in front: see the module's docstring."""
    batched = set(inputs)
    for op in ops:
        if op.regions or not side_effect_free(op):
            return False
        deps = [v in batched for v in op.operands]
        if not any(deps):
            continue
        if not isinstance(kind_of(op), Elementwise) or len(op.results) != 1:
            return False
        rank = _rank(op.results[0])
        if not rank or any(d and _rank(v) != rank for v, d in zip(op.operands, deps,
                                                                    strict=True)):
            return False
        batched.add(op.results[0])
    return True


def _dependent(ops: Sequence[Operation], inputs: set[SSAValue]) -> list[Operation]:
    """The ops of ``ops`` that depend on ``inputs``, in order."""
    dep = set(inputs)
    out = []
    for op in ops:
        if any(v in dep for v in op.operands):
            out.append(op)
            dep.update(op.results)
    return out


def _same_value(u: SSAValue, w: SSAValue, memo: dict[tuple[int, int], bool]) -> bool:
    """Whether ``u`` and ``w`` (neither depending on the slices) are the same value: the
    same SSA value, or the same side-effect-free op's result on the same values (a
    number constant made again)."""
    if u is w:
        return True
    a, b = u.owner, w.owner
    if not (isinstance(a, Operation) and isinstance(b, Operation)):
        return False
    key = (id(u), id(w))
    if key not in memo:
        memo[key] = (a.name == b.name and a.properties == b.properties
                     and u.type == w.type and side_effect_free(a) and side_effect_free(b)
                     and not a.regions and not b.regions
                     and a.results.index(u) == b.results.index(w)
                     and len(a.operands) == len(b.operands)
                     and all(_same_value(x, y, memo) for x, y in zip(a.operands,
                                                                     b.operands,
                                                                     strict=True)))
    return memo[key]


def _same_program(first: Sequence[Operation], first_inputs: Sequence[SSAValue | None],
                  batch: Sequence[Operation], batch_inputs: Sequence[SSAValue | None],
                  n: int) -> tuple[dict[SSAValue, SSAValue], set[SSAValue]] | None:
    """``first``'s values that depend on the slices -> ``batch``'s, if ``batch`` computes
    them op for op on the batch (each ``n`` times larger along a new first dimension),
    its other operands the same values; else None. Returns the map and its keys."""
    role: dict[SSAValue, SSAValue] = {v: b for v, b in zip(first_inputs, batch_inputs,
                                                            strict=True)
                                      if v is not None and b is not None}
    mine = _dependent(first, set(role))
    theirs = _dependent(batch, set(role.values()))
    if len(mine) != len(theirs):
        return None
    memo: dict[tuple[int, int], bool] = {}
    for a, b in zip(mine, theirs, strict=True):
        if (a.name != b.name or a.properties != b.properties
                or len(a.operands) != len(b.operands) or len(a.results) != len(b.results)):
            return None
        for u, w in zip(a.operands, b.operands, strict=True):
            if (role[u] is not w) if u in role else not _same_value(u, w, memo):
                return None
        for r, s in zip(a.results, b.results, strict=True):
            if not _batched_type(r, s, n):
                return None
            role[r] = s
    return role, set(role)


def _batched_type(r: SSAValue, s: SSAValue, n: int) -> bool:
    """Whether ``s`` has ``r``'s type with ``n`` in front."""
    a, b = r.type, s.type
    return (isinstance(a, TensorType) and isinstance(b, TensorType)
            and tuple(b.sizes) == (n, *a.sizes) and a.dtype == b.dtype
            and a.device == b.device)


def batch_elementwise(ctx: Any, func: Any, first_ops: Sequence[Operation],
                      sliced: Sequence[Any], flat_args: Sequence[Any],
                      flat_dims: Sequence[int | None], spec: Any, kwargs: dict[str, Any],
                      first: Any, n: int) -> list[Any] | None:
    """The first slice's results' leaves each batched (the mapped dimension in front;
    None where a leaf does not depend on the slices), from one call of ``func`` on the
    whole batch; None where that is not the slice-by-slice result (module docstring)."""
    slices = [x._value if d is not None and isinstance(x, TensorProxy) else None
              for x, d in zip(sliced, flat_dims, strict=True)]
    if n < 2 or not elementwise_on_slices(first_ops, {v for v in slices if v is not None}):
        return None
    leaves, _ = pytree.tree_flatten(first)
    if any(isinstance(leaf, TensorProxy) and leaf._value in slices for leaf in leaves):
        return None  # an input slice returned as it is: stacked, it is a copy
    moved = [x if d is None else x.movedim(d, 0) for x, d in zip(flat_args, flat_dims,
                                                                  strict=True)]
    block = ctx.build.block
    start = block.last_op
    writes = len(ctx.aliases.written)
    try:
        out = func(*pytree.tree_unflatten(moved, spec), **kwargs)
    except Exception:  # the batch took a path no slice took: slice by slice, as before
        out = None
    batch_ops = ops_after(block, start)
    same = None
    pure = all(side_effect_free(op) and not op.regions for op in batch_ops)
    if out is not None and pure and len(ctx.aliases.written) == writes:
        inputs = [x._value if s is not None else None for x, s in zip(moved, slices,
                                                                       strict=True)]
        same = _same_program(first_ops, slices, batch_ops, inputs, n)
    got, out_spec = pytree.tree_flatten(out)
    if same is not None and out_spec == pytree.tree_flatten(first)[1]:
        role, dep = same
        result: list[Any] = []
        for a, b in zip(leaves, got, strict=True):
            if isinstance(a, TensorProxy) != isinstance(b, TensorProxy):
                break
            if not isinstance(a, TensorProxy):
                result.append(None)
                continue
            if (role[a._value] is not b._value) if a._value in dep else not _same_value(
                    a._value, b._value, {}):
                break
            result.append(b if a._value in dep else None)
        else:
            return result
    if pure and len(ctx.aliases.written) == writes:
        return None  # the batch's ops are unused: dead code
    raise ThunderTraceError(
        f"{where(user_location())}: torch.vmap over a function that computes elementwise "
        "on a slice but writes or takes another path on the whole batch, inside the "
        "jitted function: thunder_ir cannot map it. Apply vmap to the jitted function "
        "instead, or call this part outside it.")


__all__ = ["batch_elementwise", "elementwise_on_slices", "ops_after"]
