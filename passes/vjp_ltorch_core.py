"""VJP rules of ltorch's core ops (`thunder_ir.dialects.ltorch_core`: elementwise, reduction
and shape ops, ``topk``; ``cumsum``; ``index_add``, ``index_copy``), and the helpers every
ltorch rule module shares.

Why direct rules: these ops' decompositions are chains of prims (``broadcast_in_dim``,
``reshape``, ``slice``, ``pad``, ``convert_element_type``…) whose cotangents are more such
chains; the rules here emit one ltorch op per step instead, which executors run as single
torch calls. The rules of the ``nn`` ops and of the ``torch.call`` fallback are in
`thunder_ir.passes.vjp_ltorch`, which imports this module's helpers (the dependency points
one way, as between the two dialect modules); the conventions in that module's docstring
hold here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects import ltorch_index as I
from thunder_ir.dialects import ltorch_scan as S
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.symbols import (
    count_number,
    may_differ,
    must_equal,
    same_sizes,
    slice_indices,
    unbacked,
)
from thunder_ir.dialects.traits import has_no_derivative
from thunder_ir.dialects.types import TensorType, compute_dtype, ttype
from thunder_ir.passes.vjp import (
    Grad,
    is_differentiable_value,
    raising_rule,
    vjp,
)

Grads = list[Any]
Cts = list[SSAValue | None]
Outs = list[SSAValue]

# --------------------------------------------------------------------------- helpers



def cast_to(g: Grad, v: SSAValue, dtype: torch.dtype) -> SSAValue:
    return v if ttype(v).dtype == dtype else g.ltorch.to_dtype(v, dtype=dtype)


def upcast(g: Grad, v: SSAValue) -> SSAValue:
    """``v`` in its backward compute dtype (`compute_dtype`)."""
    return cast_to(g, v, compute_dtype(ttype(v).dtype))


def grad_as(g: Grad, v: SSAValue | None, operand: SSAValue | None) -> SSAValue | None:
    """``v`` as the cotangent of ``operand`` (its dtype), or ``None`` if it has none."""
    if v is None or operand is None or not is_differentiable_value(operand):
        return None
    return cast_to(g, v, ttype(operand).dtype)


def transpose_last(g: Grad, v: SSAValue) -> SSAValue:
    """Swaps the last two dims."""
    return g.ltorch.transpose(v, dim0=-2, dim1=-1)


def sum_dims(g: Grad, v: SSAValue, dims: Sequence[int]) -> SSAValue:
    """Sums ``dims`` away (none: ``v`` itself)."""
    return g.ltorch.sum(v, dim=tuple(dims)) if dims else v


def sum_to_shape(g: Grad, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`Grad.sum_to`, accumulating float16/bfloat16 in float32."""
    if same_sizes(ttype(v).sizes, shape):
        return v
    dtype = ttype(v).dtype
    return cast_to(g, g.sum_to(upcast(g, v), tuple(shape)), dtype)


def neg_inf(g: Grad) -> SSAValue:
    return g.const(-math.inf)


# zeros_like, ones_like and full_like carry the NoDerivative trait: their results are made
# like an operand, not from its values, and eager marks them as not requiring grad.


def no_derivative(aten_name: str) -> Any:
    """The rule of an op whose result requires grad in eager but whose derivative eager
    does not implement: the backward raises eager's error if a gradient flows through."""
    rule = raising_rule(f"derivative for {aten_name} is not implemented")
    rule.__doc__ = f"Raises eager's error: derivative for {aten_name} is not implemented."
    return rule


NO_DERIVATIVE_RULES: tuple[type[ThunderOp], ...] = (C.FloorDivideOp,)
"""ltorch ops whose results require grad in eager although it cannot differentiate them."""
for _op in NO_DERIVATIVE_RULES:
    vjp(_op)(no_derivative(f"aten::{_op.name.removeprefix('ltorch.')}"))


# --------------------------------------------------------------------------- core ops
#
# Elementwise, reduction and shape ops: their decompositions are chains of prims
# (broadcast_in_dim, reshape, slice, pad, convert_element_type…) whose cotangents are more
# such chains; these rules emit one ltorch op per step instead, which executors run as
# single torch calls.


def _lsum_to(g: Grad, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    """Sums a broadcast cotangent back to ``shape`` with ltorch ops (numpy broadcasting)."""
    vt = ttype(v)
    shape = tuple(shape)
    if same_sizes(vt.sizes, shape):
        return v
    lead = vt.rank - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                      if must_equal(s, 1) and may_differ(vt.sizes[lead + i], 1))
    out = g.ltorch.sum(v, dim=dims) if dims else v
    if not same_sizes(ttype(out).sizes, shape):
        out = g.ltorch.reshape(out, shape=shape)
    return out


def _operand_grad(g: Grad, v: SSAValue, operand: SSAValue) -> SSAValue | None:
    """``v`` summed to a (possibly broadcast) operand's shape in its dtype, or ``None`` for
    numbers and non-float tensors."""
    if not is_differentiable_value(operand):
        return None
    return grad_as(g, _lsum_to(g, v, ttype(operand).sizes), operand)


def _zeros(g: Grad, like: TensorType, shape: Sequence[int] | None = None) -> SSAValue:
    return g.ltorch.zeros(size=tuple(like.sizes if shape is None else shape),
                          dtype=like.dtype, device=like.dev)


def _via_decomposition(g: Grad, out: Outs, ct: Cts) -> list[Any]:
    """The general fallback: emits the op's decomposition into the backward program and
    back-propagates ``ct`` through it with the prims rules (as if the op had been
    decomposed before autodiff)."""
    from thunder_ir.dialects.base import Emitter, ThunderOp
    from thunder_ir.passes.decompositions import decompose_op, load_rules
    from thunder_ir.passes.vjp import Cotangents, backpropagate, load_vjp_rules

    op = out[0].owner
    assert isinstance(op, ThunderOp)
    load_rules()
    rules = load_vjp_rules()
    sub = Emitter()
    res = decompose_op(op, sub)
    res_list = res if isinstance(res, list) else [res]
    for o in sub.ops:
        g.emitter.insert(o)
    cts = Cotangents(g)
    for r, c in zip(res_list, ct):
        if c is not None:
            cts.accumulate(r, c)
    for o in reversed(sub.ops):
        if not any(r in cts for r in o.results) or has_no_derivative(o):
            continue
        backpropagate(g, o, rules[type(o)], cts, is_differentiable_value)
    result: list[Any] = []
    for vals in op.grouped_operands():
        if vals is None:
            result.append(None)
        elif isinstance(vals, list):
            result.append([cts.get(v) if is_differentiable_value(v) else None for v in vals])
        else:
            result.append(cts.get(vals) if is_differentiable_value(vals) else None)
    return result


def _ct0(ct: Cts) -> SSAValue:
    dy = ct[0]
    assert dy is not None
    return dy


@vjp(C.AddOp)
def add(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue, alpha: Any = None) -> Grads:
    """``da = ct``, ``db = alpha ct``, each summed to its operand's shape."""
    dy = _ct0(ct)
    db = dy if alpha is None or alpha == 1 else g.ltorch.mul(dy, g.const(alpha))
    return [_operand_grad(g, dy, a), _operand_grad(g, db, b)]


@vjp(C.SubOp)
def sub(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue, alpha: Any = None) -> Grads:
    """``da = ct``, ``db = -alpha ct``, each summed to its operand's shape."""
    dy = _ct0(ct)
    db = g.ltorch.neg(dy) if alpha is None or alpha == 1 else \
        g.ltorch.mul(dy, g.const(-alpha))
    return [_operand_grad(g, dy, a), _operand_grad(g, db, b)]


@vjp(C.MulOp)
def mul(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue) -> Grads:
    """``da = ct b``, ``db = ct a``, each summed to its operand's shape."""
    dy = _ct0(ct)
    da = g.ltorch.mul(dy, b) if is_differentiable_value(a) else None
    db = g.ltorch.mul(dy, a) if is_differentiable_value(b) else None
    return [None if da is None else _operand_grad(g, da, a),
            None if db is None else _operand_grad(g, db, b)]


@vjp(C.DivOp)
def div(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue,
        rounding_mode: str | None = None) -> Grads:
    """``da = ct / b``, ``db = -ct y / b`` on the result ``y``; rounded division has none."""
    if rounding_mode is not None:
        return [None, None]
    dy = _ct0(ct)
    da = g.ltorch.div(dy, b) if is_differentiable_value(a) else None
    db = None
    if is_differentiable_value(b):
        db = g.ltorch.neg(g.ltorch.div(g.ltorch.mul(dy, out[0]), b))
    return [None if da is None else _operand_grad(g, da, a),
            None if db is None else _operand_grad(g, db, b)]


@vjp(C.NegOp)
def neg(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``-ct``."""
    return [grad_as(g, g.ltorch.neg(_ct0(ct)), x)]


@vjp(C.PowOp)
def pow_(g: Grad, out: Outs, ct: Cts, x: SSAValue, e: SSAValue) -> Grads:
    """``dx = ct e x^(e-1)`` (zero where ``e == 0``), ``de = ct y log(x)`` (zero where
    ``x == 0`` and ``e >= 0``), as torch's ``pow_backward``."""
    lt = g.ltorch
    dy = _ct0(ct)
    dx = de = None
    if is_differentiable_value(x):
        if isinstance(e.type, TensorType):
            d = lt.mul(e, lt.pow(x, lt.sub(e, g.const(1))))
            d = lt.where(lt.eq(e, g.const(0)), g.const(0.0), d)
        else:
            ev = _number(e)
            d = g.const(0.0) if ev == 0 else lt.mul(lt.pow(x, g.const(ev - 1)), g.const(ev))
        dx = _operand_grad(g, lt.mul(dy, d), x)
    if is_differentiable_value(e):
        if not isinstance(x.type, TensorType):
            term = lt.mul(out[0], g.const(math.log(_number(x))))
        else:
            term = lt.mul(out[0], lt.log(x))
            zero = lt.logical_and(lt.eq(x, g.const(0)), lt.ge(e, g.const(0)))
            term = lt.where(zero, g.const(0.0), term)
        de = _operand_grad(g, lt.mul(dy, term), e)
    return [dx, de]


def _number(v: SSAValue) -> Any:
    """The Python number of a ``prims.constant``."""
    from thunder_ir.dialects.prims import ConstantOp

    op = v.owner
    assert isinstance(op, ConstantOp), f"expected a constant number, got {v}"
    return op.params()["value"]


@vjp(C.ExpOp)
def exp(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``ct * y`` on the result ``y``."""
    return [grad_as(g, g.ltorch.mul(_ct0(ct), out[0]), x)]


@vjp(C.SqrtOp)
def sqrt(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``ct / (2 y)`` on the result ``y``."""
    return [grad_as(g, g.ltorch.div(g.ltorch.mul(_ct0(ct), g.const(0.5)), out[0]), x)]


@vjp(C.RsqrtOp)
def rsqrt(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``-ct y³ / 2`` on the result ``y``."""
    lt = g.ltorch
    y = out[0]
    return [grad_as(g, lt.mul(lt.mul(_ct0(ct), g.const(-0.5)), lt.mul(lt.mul(y, y), y)), x)]


@vjp(C.WhereOp)
def where(g: Grad, out: Outs, ct: Cts, cond: SSAValue, a: SSAValue, b: SSAValue) -> Grads:
    """``ct`` where the condition holds to ``input``, elsewhere to ``other``."""
    lt = g.ltorch
    dy = _ct0(ct)
    da = db = None
    if is_differentiable_value(a):
        da = _operand_grad(g, lt.where(cond, dy, g.const(0.0)), a)
    if is_differentiable_value(b):
        db = _operand_grad(g, lt.where(cond, g.const(0.0), dy), b)
    return [None, da, db]


@vjp(C.MaskedFillOp)
def masked_fill(g: Grad, out: Outs, ct: Cts, x: SSAValue, mask: SSAValue,
                value: Any = None) -> Grads:
    """``ct`` where the mask is false."""
    if not is_differentiable_value(x):
        return [None, None]
    return [_operand_grad(g, g.ltorch.where(mask, g.const(0.0), _ct0(ct)), x), None]


@vjp(C.ClampOp)
def clamp(g: Grad, out: Outs, ct: Cts, x: SSAValue, min: Any = None, max: Any = None
          ) -> Grads:
    """``ct`` where ``min <= x <= max``, zero elsewhere (torch's ``clamp_backward``: an
    element at a bound passes its gradient)."""
    if not is_differentiable_value(x):
        return [None]
    lt = g.ltorch
    keep = None
    if min is not None:
        keep = lt.ge(x, g.const(min))
    if max is not None:
        below = lt.le(x, g.const(max))
        keep = below if keep is None else lt.logical_and(keep, below)
    dy = _ct0(ct)
    return [grad_as(g, dy if keep is None else lt.where(keep, dy, g.const(0.0)), x)]


@vjp(C.ToDtypeOp)
def to_dtype(g: Grad, out: Outs, ct: Cts, x: SSAValue, dtype: Any = None) -> Grads:
    """``ct`` converted back to the input's dtype (none from a non-float result)."""
    return [grad_as(g, ct[0], x)]


def _reduced_dims(rank: int, dim: Any) -> tuple[int, ...]:
    if dim is None or rank == 0:
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return tuple(range(rank))
    return tuple(sorted(d % rank for d in dims))


def _unreduce(g: Grad, dy: SSAValue, x: SSAValue, dim: Any, keepdim: Any) -> SSAValue:
    """``dy`` of a reduction over ``dim`` broadcast back to ``x``'s shape."""
    xt = ttype(x)
    dims = _reduced_dims(xt.rank, dim)
    kept = tuple(1 if i in dims else s for i, s in enumerate(xt.sizes))
    if not same_sizes(ttype(dy).sizes, kept):
        dy = g.ltorch.reshape(dy, shape=kept)
    if not same_sizes(kept, xt.sizes):
        dy = g.ltorch.expand(dy, size=xt.sizes)
    return dy


@vjp(C.SumOp)
def sum_(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: Any = None, keepdim: Any = None,
        dtype: Any = None) -> Grads:
    """``ct`` broadcast back over the summed dims."""
    if not is_differentiable_value(x):
        return [None]
    return [grad_as(g, _unreduce(g, _ct0(ct), x, dim, keepdim), x)]


@vjp(C.MeanOp)
def mean(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: Any = None, keepdim: Any = None,
         dtype: Any = None) -> Grads:
    """``ct / n`` broadcast back over the ``n`` averaged elements."""
    if not is_differentiable_value(x):
        return [None]
    xt = ttype(x)
    n = math.prod(xt.sizes[d] for d in _reduced_dims(xt.rank, dim))
    one = type(n) is int and n == 1  # a symbolic count is never decided (no guard)
    dy = _ct0(ct) if one else g.ltorch.div(_ct0(ct), g.const(count_number(n)))
    return [grad_as(g, _unreduce(g, dy, x, dim, keepdim), x)]


@vjp(C.TopkOp)
def topk(g: Grad, out: Outs, ct: Cts, x: SSAValue, k: int, dim: int = -1,
         largest: bool = True, sorted: bool = True) -> Grads:
    """The values' cotangent scattered into zeros at the selected positions (eager's
    ``value_selecting_reduction_backward``); the indices carry none."""
    if not is_differentiable_value(x) or ct[0] is None:
        return [None]
    xt = ttype(x)
    if xt.rank == 0:  # the element itself
        return [grad_as(g, ct[0], x)]
    zeros = g.prims.full(shape=xt.sizes, fill_value=0.0, device=xt.dev, dtype=xt.dtype)
    return [g.prims.scatter_add(zeros, out[1], ct[0], dim=dim % xt.rank)]


@vjp(S.CumsumOp)
def cumsum(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: int, dtype: Any = None) -> Grads:
    """The cotangent, cast to ``x``'s dtype, summed from the end (eager's
    ``cumsum_backward``: flip, ``cumsum``, flip; the cotangent itself where ``dim`` has
    one element)."""
    if not is_differentiable_value(x):
        return [None]
    xt = ttype(x)
    dy = cast_to(g, _ct0(ct), xt.dtype)
    if xt.rank == 0 or xt.sizes[dim % xt.rank] == 1 or 0 in xt.sizes:
        return [dy]
    d = dim % xt.rank
    rev = g.ltorch.cumsum(g.prims.flip(dy, dims=(d,)), dim=d)
    return [g.prims.flip(rev, dims=(d,))]


@vjp(I.IndexAddOp)
def index_add(g: Grad, out: Outs, ct: Cts, x: SSAValue, index: SSAValue, source: SSAValue,
              dim: int, alpha: Any = None) -> Grads:
    """Eager's: ``input`` gets the cotangent, ``source`` the cotangent's slices at
    ``index`` along ``dim`` (``index_select``) times ``alpha``, the index none. The slices
    have the index's length, so an unbacked count of routed tokens stays one symbol."""
    if not is_differentiable_value(x):
        return [None, None, None]
    dy = _ct0(ct)
    dsrc = g.prims.take(dy, index, dim=dim % ttype(x).rank)
    if alpha is not None and alpha != 1:
        dsrc = g.ltorch.mul(dsrc, g.const(alpha))
    return [grad_as(g, dy, x), None, grad_as(g, dsrc, source)]


@vjp(I.IndexCopyOp)
def index_copy(g: Grad, out: Outs, ct: Cts, x: SSAValue, index: SSAValue, source: SSAValue,
               dim: int) -> Grads:
    """Eager's: ``input`` gets the cotangent with the copied slices zeroed (an
    ``index_copy`` of zeros: no arithmetic touches the rest, NaNs and infinities
    included), ``source`` the cotangent's slices at ``index``, the index none."""
    if not is_differentiable_value(x):
        return [None, None, None]
    dy = _ct0(ct)
    d = dim % ttype(x).rank
    st = ttype(source)
    zeros = g.prims.full(shape=st.sizes, fill_value=0.0, device=st.dev, dtype=ttype(dy).dtype)
    dx = g.prims.index_copy(dy, index, zeros, dim=d)
    return [grad_as(g, dx, x), None, grad_as(g, g.prims.take(dy, index, dim=d), source)]


def reshape_back(g: Grad, out: Outs, ct: Cts, x: SSAValue, **_shape: Any) -> Grads:
    """``ct`` reshaped to the input's shape (reshape, view, flatten, unsqueeze, squeeze);
    ``ct`` itself for clone and contiguous."""
    if not is_differentiable_value(x):
        return [None]
    dy = _ct0(ct)
    if not same_sizes(ttype(dy).sizes, ttype(x).sizes):
        dy = g.ltorch.reshape(dy, shape=ttype(x).sizes)
    return [grad_as(g, dy, x)]


for _op in (C.ReshapeOp, C.ViewOp, C.FlattenOp, C.UnsqueezeOp, C.SqueezeOp, C.CloneOp,
            C.ContiguousOp):
    vjp(_op)(reshape_back)


@vjp(C.TransposeOp)
def transpose(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim0: int, dim1: int) -> Grads:
    """``ct`` with the same two dims swapped back."""
    if not is_differentiable_value(x):
        return [None]
    return [grad_as(g, g.ltorch.transpose(_ct0(ct), dim0=dim0, dim1=dim1), x)]


@vjp(C.PermuteOp)
def permute(g: Grad, out: Outs, ct: Cts, x: SSAValue, dims: Sequence[int]) -> Grads:
    """``ct`` permuted by the inverse permutation."""
    if not is_differentiable_value(x):
        return [None]
    rank = ttype(x).rank
    perm = [d % rank for d in dims] if rank else []
    inv = [0] * rank
    for i, d in enumerate(perm):
        inv[d] = i
    return [grad_as(g, g.ltorch.permute(_ct0(ct), dims=tuple(inv)), x)]


@vjp(C.ExpandOp)
def expand(g: Grad, out: Outs, ct: Cts, x: SSAValue, size: Any = None) -> Grads:
    """``ct`` summed over the expanded dims."""
    if not is_differentiable_value(x):
        return [None]
    return [_operand_grad(g, _ct0(ct), x)]


@vjp(C.CatOp)
def cat(g: Grad, out: Outs, ct: Cts, tensors: list[SSAValue], dim: Any = None) -> Grads:
    """``ct`` split back into the inputs' extents along ``dim`` (legacy empty 1-D inputs,
    which torch skips, get zeros)."""
    dy = _ct0(ct)
    rank = ttype(dy).rank
    d = (0 if dim is None else dim) % rank if rank else 0
    kept = [i for i, v in enumerate(tensors) if ttype(v).sizes != (0,) or ttype(v).rank == rank]
    grads: list[SSAValue | None] = [None] * len(tensors)
    if len(kept) == 1:
        pieces = [dy]
    else:
        sizes = tuple(ttype(tensors[i]).sizes[d] for i in kept)
        pieces = list(g.ltorch.split(dy, split_size_or_sections=sizes, dim=d))
    for i, piece in zip(kept, pieces):
        grads[i] = grad_as(g, piece, tensors[i])
    for i, v in enumerate(tensors):
        if i not in kept and is_differentiable_value(v):
            grads[i] = _zeros(g, ttype(v))
    return [grads]


def _join_cts(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: Any) -> Grads:
    """The cotangent of a split: the pieces' cotangents (zeros where absent) joined."""
    if not is_differentiable_value(x):
        return [None]
    rank = ttype(x).rank
    d = (0 if dim is None else dim) % rank
    pieces = [c if c is not None else _zeros(g, ttype(o)) for o, c in zip(out, ct)]
    dy = pieces[0] if len(pieces) == 1 else g.ltorch.cat(pieces, dim=d)
    return [grad_as(g, dy, x)]


@vjp(C.SplitOp)
def split(g: Grad, out: Outs, ct: Cts, x: SSAValue, split_size_or_sections: Any = None,
          dim: Any = None) -> Grads:
    """The pieces' cotangents (zeros where absent) concatenated along ``dim``."""
    return _join_cts(g, out, ct, x, dim)


@vjp(C.ChunkOp)
def chunk(g: Grad, out: Outs, ct: Cts, x: SSAValue, chunks: Any = None,
          dim: Any = None) -> Grads:
    """The pieces' cotangents (zeros where absent) concatenated along ``dim``."""
    return _join_cts(g, out, ct, x, dim)


def _basic_index(xt: TensorType, index: Any) -> tuple[list[tuple[int, int]], list[int]] | None:
    """For an index of ints, step-1 slices, ``None`` and ``...``: the ``(start, end)`` taken
    of each dim of ``x`` and the sliced region's shape; ``None`` for any other index."""
    items = list(index) if isinstance(index, tuple) else [index]
    if items.count(Ellipsis) > 1:
        return None
    consuming = [i for i in items if i is not None and i is not Ellipsis]
    if len(consuming) > xt.rank:
        return None
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k:k + 1] = [slice(None)] * (xt.rank - len(consuming))
    ranges = [(0, s) for s in xt.sizes]
    dim = 0
    for it in items:
        if it is None:
            continue
        if isinstance(it, bool) or not isinstance(it, int | slice):
            return None
        n = xt.sizes[dim]
        if isinstance(it, int):
            if not -n <= it < n:
                return None
            k = it + n if it < 0 else it
            ranges[dim] = (k, k + 1)
        else:
            lo, hi, st = slice_indices(it, n)
            if st != 1:
                return None
            ranges[dim] = (lo, torch.sym_max(lo, hi) if unbacked(lo, hi) else max(lo, hi))
        dim += 1
    return ranges, [hi - lo for lo, hi in ranges]


@vjp(C.GetitemOp)
def getitem(g: Grad, out: Outs, ct: Cts, x: SSAValue, indices: list[SSAValue],
            index: Any = None) -> Grads:
    """Basic indexing (ints, step-1 slices, ``None``, ``...``): ``ct`` reshaped to the
    sliced region and padded back with zeros (one ``prims.pad``). Other
    indices (tensors, strided slices) differentiate the op's decomposition."""
    if not is_differentiable_value(x):
        return [None, [None] * len(indices)]
    xt = ttype(x)
    basic = None if indices else _basic_index(xt, index)
    if basic is None:
        return _via_decomposition(g, out, ct)
    ranges, region = basic
    dy = _ct0(ct)
    if not same_sizes(ttype(dy).sizes, region):
        dy = g.ltorch.reshape(dy, shape=tuple(region))
    config = tuple((lo, n - hi, 0) for (lo, hi), n in zip(ranges, xt.sizes, strict=True))
    if any(may_differ(lo, 0) or may_differ(hi, 0) for lo, hi, _ in config):
        # One pad, not a cat with zeros per dim: a single pointwise op that fuses.
        dy = g.prims.pad(dy, padding_value=0.0, padding_config=config)
    return [grad_as(g, dy, x), []]

