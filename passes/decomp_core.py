"""Decompositions of the core ltorch families (elementwise, reductions, scans, shape,
creation).

Shared helpers at the top build constants, dims and reshapes; torch's broadcasting and type
promotion are in `thunder_ir.passes.promotion`. Composite rules on float16/bfloat16
compute in float32 and round once at the end, as torch's kernels do (``opmath``);
``prims.sum`` accumulates in its operand's dtype, so reductions upcast the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects import ltorch_index as I
from thunder_ir.dialects import ltorch_scan as S
from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp
from thunder_ir.dialects.prims import ConstantOp, broadcast_shapes
from thunder_ir.dialects.symbols import count_number, range_len, same_sizes, slice_indices
from thunder_ir.dialects.types import (
    NumberType,
    TensorType,
    is_float,
    number_type,
    number_type_of,
    ttype,
)
from thunder_ir.passes.decompositions import Decomposer, decomposes
from thunder_ir.passes.promotion import (
    cast_number,
    default_float,
    elementwise_args,
    expand_to,
    opmath,
    result_dtype,
    to_dtype,
)

# --------------------------------------------------------------------------- helpers

def number_value(v: SSAValue) -> Any:
    """The Python value of a number made by ``prims.constant``; ``None`` otherwise."""
    owner = v.owner
    if isinstance(owner, ConstantOp):
        return owner.params()["value"]
    return None


def const(d: Decomposer, value: Any) -> SSAValue:
    """A ``prims.constant`` number."""
    return d.prims.constant(value=value)


def full(d: Decomposer, shape: Sequence[int], value: Any, dtype: torch.dtype,
         device: str) -> SSAValue:
    """``prims.full`` with ``value`` cast to ``dtype``'s kind."""
    return d.prims.full(shape=tuple(shape), fill_value=cast_number(value, dtype),
                        device=device, dtype=dtype)


def as_tensor(d: Decomposer, v: SSAValue, shape: Sequence[int], dtype: torch.dtype,
              device: str) -> SSAValue:
    """``v`` (tensor or number) as a tensor of this shape and dtype."""
    if isinstance(v.type, TensorType):
        return expand_to(d, to_dtype(d, v, dtype), shape)
    known = number_value(v)
    if known is not None:
        return full(d, shape, known, dtype, device)
    py = number_type_of(v).python_type
    if py is bool:
        t = d.prims.logical_or(full(d, shape, False, torch.bool, device), v)
    else:
        kind = torch.int64 if py is int else torch.float64
        t = d.prims.add(full(d, shape, 0, kind, device), v)
    return to_dtype(d, t, dtype)


def norm_dim(dim: int, rank: int) -> int:
    """A non-negative dim; rank-0 tensors accept 0 and -1, as in torch."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"dim {dim} is out of range for a rank-{rank} tensor")
    return dim % r


def reduce_dims(rank: int, dim: Any) -> tuple[int, ...]:
    """The sorted dims a reduction over ``dim`` (None, an int or a tuple) reduces."""
    if rank == 0:
        return ()
    if dim is None:
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return tuple(range(rank))
    return tuple(sorted({norm_dim(x, rank) for x in dims}))


def keep_dims(d: Decomposer, v: SSAValue, in_shape: Sequence[int], dims: Sequence[int],
              keepdim: bool | None) -> SSAValue:
    """Puts size-1 dims back where a reduction removed them (``keepdim=True``)."""
    if not keepdim or not dims:
        return v
    return reshape(d, v, [1 if i in dims else s for i, s in enumerate(in_shape)])


def reshape(d: Decomposer, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    """``prims.reshape`` (no op when the shape already matches)."""
    if same_sizes(ttype(v).sizes, shape):
        return v
    return d.prims.reshape(v, shape=tuple(shape))


def tensor_of(*vals: SSAValue) -> TensorType:
    """The type of the first tensor among ``vals``."""
    return next(v.type for v in vals if isinstance(v.type, TensorType))


# --------------------------------------------------------------------------- elementwise


def _binary(d: Decomposer, prim: str, a: SSAValue, b: SSAValue,
            dtype: torch.dtype | None = None) -> SSAValue:
    a, b = elementwise_args(d, a, b, dtype=dtype)
    return getattr(d.prims, prim)(a, b)


def _scaled(d: Decomposer, a: SSAValue, b: SSAValue, alpha: Any) -> SSAValue:
    """``alpha * b`` for ``add``/``sub``, ``b`` already promoted and broadcast."""
    if isinstance(b.type, NumberType):
        known = number_value(b)
        if known is not None:
            return const(d, known * alpha)
        t = tensor_of(a)
        b = as_tensor(d, b, t.sizes, t.dtype, t.dev)
    return d.prims.mul(b, const(d, cast_number(alpha, ttype(b).dtype)))


def _add_sub(d: Decomposer, prim: str, a: SSAValue, b: SSAValue, alpha: Any) -> SSAValue:
    dtype = result_dtype(a.type, b.type)
    if dtype == torch.bool and prim == "add":  # bool + bool is logical or
        return _binary(d, "logical_or", a, b)
    if alpha is None or alpha == 1:
        return _binary(d, prim, a, b)
    a, b = elementwise_args(d, a, b, dtype=opmath(dtype))
    out = getattr(d.prims, prim)(a, _scaled(d, a, b, alpha))
    return to_dtype(d, out, dtype)


@decomposes(L.AddOp)
def add(d: Decomposer, a: SSAValue, b: SSAValue, alpha: Any = None) -> SSAValue:
    return _add_sub(d, "add", a, b, alpha)


@decomposes(L.SubOp)
def sub(d: Decomposer, a: SSAValue, b: SSAValue, alpha: Any = None) -> SSAValue:
    return _add_sub(d, "sub", a, b, alpha)


@decomposes(L.MulOp)
def mul(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    if result_dtype(a.type, b.type) == torch.bool:  # bool * bool is logical and
        return _binary(d, "logical_and", a, b)
    return _binary(d, "mul", a, b)


def _floor_div(d: Decomposer, a: SSAValue, b: SSAValue, dtype: torch.dtype) -> SSAValue:
    """Floor division as torch computes it (``c10::div_floor_*``)."""
    if not is_float(dtype):
        # a - (a mod b) is a multiple of b, so the truncating division is exact.
        a, b = elementwise_args(d, a, b, dtype=dtype)
        return d.prims.div(d.prims.sub(a, d.prims.remainder(a, b)), b)
    ct = opmath(dtype)
    a, b = elementwise_args(d, a, b, dtype=ct)
    t = tensor_of(a, b)
    a, b = (as_tensor(d, v, t.sizes, ct, t.dev) for v in (a, b))
    zero = const(d, 0.0)
    mod = d.prims.fmod(a, b)
    q = d.prims.div(d.prims.sub(a, mod), b)
    fix = d.prims.logical_and(d.prims.ne(mod, zero),
                              d.prims.ne(d.prims.lt(b, zero), d.prims.lt(mod, zero)))
    q = d.prims.sub(q, to_dtype(d, fix, ct))
    fl = d.prims.floor(q)
    fl = d.prims.add(fl, to_dtype(d, d.prims.gt(d.prims.sub(q, fl), const(d, 0.5)), ct))
    out = d.prims.where(d.prims.eq(b, zero), d.prims.div(a, b), fl)
    return to_dtype(d, out, dtype)


@decomposes(L.DivOp)
def div(d: Decomposer, a: SSAValue, b: SSAValue, rounding_mode: str | None = None
        ) -> SSAValue:
    dtype = result_dtype(a.type, b.type)
    if rounding_mode is None:
        return _binary(d, "div", a, b, dtype=default_float(dtype))
    if rounding_mode == "floor":
        return _floor_div(d, a, b, dtype)
    if rounding_mode != "trunc":
        raise ValueError(f"ltorch.div: rounding_mode must be None, 'trunc' or 'floor', "
                         f"got {rounding_mode!r}")
    if not is_float(dtype):
        return _binary(d, "div", a, b, dtype=dtype)  # prims.div truncates on ints
    out = d.prims.trunc(_binary(d, "div", a, b, dtype=opmath(dtype)))
    return to_dtype(d, out, dtype)


@decomposes(L.FloorDivideOp)
def floor_divide(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    return _floor_div(d, a, b, result_dtype(a.type, b.type))


@decomposes(L.PowOp)
def pow_rule(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    # torch takes sqrt/rsqrt fast paths for a number exponent of ±0.5, which differ from
    # pow at -inf (sqrt(-inf) is nan, pow(-inf, 0.5) is inf): follow eager.
    exponent = b.owner.params()["value"] if isinstance(b.owner, ConstantOp) else None
    if isinstance(a.type, TensorType) and type(exponent) is float and exponent in (0.5, -0.5):
        (x,) = elementwise_args(d, a, dtype=default_float(result_dtype(a.type, b.type)))
        return d.prims.sqrt(x) if exponent == 0.5 else d.prims.rsqrt(x)
    return _binary(d, "pow", a, b)


@decomposes(L.Atan2Op)
def atan2(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    return _binary(d, "atan2", a, b, dtype=default_float(result_dtype(a.type, b.type)))


def _rule(prim: str, op: type[ThunderOp]) -> None:
    """Registers the rule of a binary ltorch op that is promotion + one prim."""

    def rule(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
        return _binary(d, prim, a, b)

    rule.__name__ = prim
    decomposes(op)(rule)


for _prim, _op in (("eq", L.EqOp), ("ne", L.NeOp), ("lt", L.LtOp), ("le", L.LeOp),
                   ("gt", L.GtOp), ("ge", L.GeOp), ("bitwise_and", L.BitwiseAndOp),
                   ("bitwise_or", L.BitwiseOrOp), ("bitwise_xor", L.BitwiseXorOp),
                   ("logical_and", L.LogicalAndOp), ("logical_or", L.LogicalOrOp),
                   ("remainder", L.RemainderOp), ("fmod", L.FmodOp),
                   ("maximum", L.MaximumOp), ("minimum", L.MinimumOp)):
    _rule(_prim, _op)


def _float_unary(prim: str, op: type[ThunderOp]) -> None:
    """Registers the rule of a float function: int/bool input → default float dtype."""

    def rule(d: Decomposer, x: SSAValue) -> SSAValue:
        x = to_dtype(d, x, default_float(ttype(x).dtype))
        return getattr(d.prims, prim)(x)

    rule.__name__ = prim
    decomposes(op)(rule)


for _prim, _op in (("exp", L.ExpOp), ("exp2", L.Exp2Op), ("expm1", L.Expm1Op),
                   ("log", L.LogOp), ("log1p", L.Log1pOp), ("log2", L.Log2Op),
                   ("sin", L.SinOp), ("cos", L.CosOp), ("tan", L.TanOp), ("tanh", L.TanhOp),
                   ("asin", L.AsinOp), ("acos", L.AcosOp), ("atan", L.AtanOp),
                   ("sinh", L.SinhOp), ("cosh", L.CoshOp), ("sqrt", L.SqrtOp),
                   ("rsqrt", L.RsqrtOp), ("reciprocal", L.ReciprocalOp), ("erf", L.ErfOp),
                   ("erfc", L.ErfcOp)):
    _float_unary(_prim, _op)


def _same_unary(prim: str, op: type[ThunderOp], identity_on_ints: bool = False) -> None:
    """Registers the rule of a unary op that is one prim (identity on ints if asked)."""

    def rule(d: Decomposer, x: SSAValue) -> SSAValue:
        if identity_on_ints and not is_float(ttype(x).dtype):
            return x
        return getattr(d.prims, prim)(x)

    rule.__name__ = prim
    decomposes(op)(rule)


for _prim, _op, _ident in (("neg", L.NegOp, False), ("abs", L.AbsOp, False),
                           ("floor", L.FloorOp, True), ("ceil", L.CeilOp, True),
                           ("trunc", L.TruncOp, True), ("isnan", L.IsnanOp, False),
                           ("isinf", L.IsinfOp, False), ("isfinite", L.IsfiniteOp, False),
                           ("logical_not", L.LogicalNotOp, False),
                           ("bitwise_not", L.BitwiseNotOp, False)):
    _same_unary(_prim, _op, _ident)


@decomposes(L.SignOp)
def sign(d: Decomposer, x: SSAValue) -> SSAValue:
    if ttype(x).dtype == torch.bool:
        return x
    return d.prims.sign(x)


@decomposes(L.RoundOp)
def round_rule(d: Decomposer, x: SSAValue, decimals: int | None = None) -> SSAValue:
    dtype = ttype(x).dtype
    if not is_float(dtype):
        return x
    if not decimals:
        return d.prims.round(x)
    y = to_dtype(d, x, opmath(dtype))
    if decimals > 0:
        scale = const(d, 10.0 ** decimals)
        y = d.prims.div(d.prims.round(d.prims.mul(y, scale)), scale)
    else:
        scale = const(d, 10.0 ** -decimals)
        y = d.prims.mul(d.prims.round(d.prims.div(y, scale)), scale)
    return to_dtype(d, y, dtype)


# --------------------------------------------------------------------------- selection


@decomposes(L.WhereOp)
def where(d: Decomposer, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
    dtype = result_dtype(a.type, b.type)
    shapes = [v.type.sizes for v in (cond, a, b) if isinstance(v.type, TensorType)]
    shape = tuple(broadcast_shapes("ltorch.where", *shapes))
    dev = ttype(cond).dev
    cond = expand_to(d, to_dtype(d, cond, torch.bool), shape)
    if isinstance(a.type, NumberType) and isinstance(b.type, NumberType):
        a = as_tensor(d, a, shape, dtype, dev)
    a, b = (as_tensor(d, v, shape, dtype, dev) if isinstance(v.type, TensorType) else v
            for v in (a, b))
    return d.prims.where(cond, a, b)


@decomposes(L.MaskedFillOp)
def masked_fill(d: Decomposer, x: SSAValue, mask: SSAValue, value: Any) -> SSAValue:
    t = ttype(x)
    shape = tuple(broadcast_shapes("ltorch.masked_fill", t.sizes, ttype(mask).sizes))
    mask = expand_to(d, to_dtype(d, mask, torch.bool), shape)
    return d.prims.where(mask, const(d, cast_number(value, t.dtype)), expand_to(d, x, shape))


@decomposes(L.ClampOp)
def clamp(d: Decomposer, x: SSAValue, min: Any = None, max: Any = None) -> SSAValue:
    types = [x.type] + [number_type(type(v)) for v in (min, max) if v is not None]
    dtype = result_dtype(*types)
    x = to_dtype(d, x, dtype)
    if min is not None:
        x = d.prims.maximum(x, const(d, cast_number(min, dtype)))
    if max is not None:
        x = d.prims.minimum(x, const(d, cast_number(max, dtype)))
    return x


@decomposes(L.ToDtypeOp)
def to_dtype_rule(d: Decomposer, x: SSAValue, dtype: torch.dtype) -> SSAValue:
    return to_dtype(d, x, dtype)


# --------------------------------------------------------------------------- reductions


def _sum_dtype(dtype: torch.dtype, requested: torch.dtype | None) -> torch.dtype:
    if requested is not None:
        return requested
    return dtype if is_float(dtype) else torch.int64


@decomposes(L.SumOp)
def sum_rule(d: Decomposer, x: SSAValue, dim: Any = None, keepdim: bool | None = None,
        dtype: torch.dtype | None = None) -> SSAValue:
    t = ttype(x)
    out_dtype = _sum_dtype(t.dtype, dtype)
    dims = reduce_dims(t.rank, dim)
    y = d.prims.sum(to_dtype(d, to_dtype(d, x, out_dtype), opmath(out_dtype)), dims=dims)
    return keep_dims(d, to_dtype(d, y, out_dtype), t.sizes, dims, keepdim)


@decomposes(L.MeanOp)
def mean(d: Decomposer, x: SSAValue, dim: Any = None, keepdim: bool | None = None,
         dtype: torch.dtype | None = None) -> SSAValue:
    t = ttype(x)
    out_dtype = dtype or t.dtype
    if not is_float(out_dtype):
        raise TypeError(f"ltorch.mean: needs a floating-point dtype, got {out_dtype}")
    dims = reduce_dims(t.rank, dim)
    n = math.prod(t.sizes[i] for i in dims)
    y = d.prims.sum(to_dtype(d, to_dtype(d, x, out_dtype), opmath(out_dtype)), dims=dims)
    y = d.prims.div(y, const(d, count_number(n)))
    return keep_dims(d, to_dtype(d, y, out_dtype), t.sizes, dims, keepdim)


@decomposes(L.VarOp)
def var(d: Decomposer, x: SSAValue, dim: Any = None, correction: Any = None,
        keepdim: bool | None = None) -> SSAValue:
    t = ttype(x)
    correction = 1 if correction is None else correction
    if isinstance(correction, bool):  # a positional ``unbiased``
        correction = int(correction)
    dims = reduce_dims(t.rank, dim)
    y = to_dtype(d, x, opmath(t.dtype))
    if not dims:  # a 0-d input: the variance of its one element
        y = d.prims.var(reshape(d, y, (1,)), dims=(0,), correction=correction)
    else:
        y = d.prims.var(y, dims=dims, correction=correction)
    return keep_dims(d, to_dtype(d, y, t.dtype), t.sizes, dims, keepdim)


def _extreme(prim: str, op: type[ThunderOp]) -> None:
    """Registers amax/amin: one prim over the reduced dims."""

    def rule(d: Decomposer, x: SSAValue, dim: Any = (), keepdim: bool | None = None
             ) -> SSAValue:
        t = ttype(x)
        dims = reduce_dims(t.rank, dim)
        return keep_dims(d, getattr(d.prims, prim)(x, dims=dims), t.sizes, dims, keepdim)

    rule.__name__ = prim
    decomposes(op)(rule)


_extreme("amax", L.AmaxOp)
_extreme("amin", L.AminOp)


@decomposes(L.MaxOp)
def max_rule(d: Decomposer, x: SSAValue) -> SSAValue:
    return d.prims.amax(x, dims=tuple(range(ttype(x).rank)))


@decomposes(L.MinOp)
def min_rule(d: Decomposer, x: SSAValue) -> SSAValue:
    return d.prims.amin(x, dims=tuple(range(ttype(x).rank)))


@decomposes(L.ProdOp)
def prod(d: Decomposer, x: SSAValue, dim: int | None = None, keepdim: bool | None = None,
         dtype: torch.dtype | None = None) -> SSAValue:
    t = ttype(x)
    out_dtype = _sum_dtype(t.dtype, dtype)
    dims = reduce_dims(t.rank, dim)
    y = d.prims.prod(to_dtype(d, to_dtype(d, x, out_dtype), opmath(out_dtype)), dims=dims)
    return keep_dims(d, to_dtype(d, y, out_dtype), t.sizes, dims, keepdim)


def _arg(d: Decomposer, prim: str, x: SSAValue, dim: int) -> SSAValue:
    """argmax/argmin along one (non-negative) dim; bools compare as uint8."""
    if ttype(x).dtype == torch.bool:
        x = to_dtype(d, x, torch.uint8)
    return getattr(d.prims, prim)(x, dim=dim)


def _with_indices(prim: str, arg: str, op: type[ThunderOp]) -> None:
    """Registers max_dim/min_dim: the extreme value and its index along ``dim``."""

    def rule(d: Decomposer, x: SSAValue, dim: int, keepdim: bool | None = None
             ) -> list[SSAValue]:
        t = ttype(x)
        if t.rank == 0:
            norm_dim(dim, 0)
            return [x, full(d, (), 0, torch.int64, t.dev)]
        dims = (norm_dim(dim, t.rank),)
        values = getattr(d.prims, prim)(x, dims=dims)
        indices = _arg(d, arg, x, dims[0])
        return [keep_dims(d, values, t.sizes, dims, keepdim),
                keep_dims(d, indices, t.sizes, dims, keepdim)]

    rule.__name__ = f"{prim}_dim"
    decomposes(op)(rule)


_with_indices("amax", "argmax", L.MaxDimOp)
_with_indices("amin", "argmin", L.MinDimOp)


@decomposes(L.TopkOp)
def topk(d: Decomposer, x: SSAValue, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> list[SSAValue]:
    """``k`` rounds of selection along ``dim``, each taking the first untaken position of
    the extreme among the untaken elements; NaN counts as larger than any number, as in
    torch. ``O(k n)``: a fusion executor's alternative to the torch executor's kernel."""
    t = ttype(x)
    p = d.prims
    if t.rank == 0:  # torch: the element itself and index 0, for k 0 or 1
        return [x, full(d, (), 0, torch.int64, t.dev)]
    shape = t.sizes
    ax = norm_dim(dim, t.rank)
    rest = [i for i in range(t.rank) if i != ax]
    if t.dtype.is_floating_point:
        fill: Any = -math.inf if largest else math.inf
        nan = p.ne(x, x)
    else:
        info = torch.iinfo(t.dtype)
        fill, nan = (info.min if largest else info.max), None
    pos = p.broadcast_in_dim(p.iota(length=shape[ax], start=0, step=1, device=t.dev,
                                    dtype=torch.int64), shape=shape, broadcast_dims=[ax])
    taken = full(d, shape, False, torch.bool, t.dev)
    values, indices = [], []
    for _ in range(k):
        free = p.logical_not(taken)
        numbers = free if nan is None else p.logical_and(free, p.logical_not(nan))
        m = getattr(p, "amax" if largest else "amin")(
            p.where(numbers, x, const(d, fill)), dims=(ax,))
        hit = p.logical_and(numbers, p.eq(x, p.broadcast_in_dim(m, shape=shape,
                                                               broadcast_dims=rest)))
        if nan is not None:  # NaNs first when largest, last when smallest
            nans = p.logical_and(free, nan)
            use = _any(d, nans, ax) if largest else p.logical_not(_any(d, numbers, ax))
            hit = p.where(p.broadcast_in_dim(use, shape=shape, broadcast_dims=rest), nans, hit)
        i = keep_dims(d, p.argmax(p.convert_element_type(hit, dtype=torch.uint8), dim=ax),
                      shape, (ax,), True)
        taken = p.logical_or(taken, p.eq(pos, p.broadcast_in_dim(
            i, shape=shape, broadcast_dims=list(range(t.rank)))))
        values.append(p.gather(x, i, dim=ax))
        indices.append(i)
    if not values:
        empty = tuple(0 if j == ax else n for j, n in enumerate(shape))
        return [full(d, empty, 0, t.dtype, t.dev), full(d, empty, 0, torch.int64, t.dev)]
    if len(values) == 1:
        return [values[0], indices[0]]
    return [p.cat(values, dim=ax), p.cat(indices, dim=ax)]


def _any(d: Decomposer, mask: SSAValue, dim: int) -> SSAValue:
    """Whether ``mask`` holds a true element along ``dim`` (the dim reduced away)."""
    return d.prims.ne(d.prims.amax(d.prims.convert_element_type(mask, dtype=torch.uint8),
                                   dims=(dim,)), const(d, 0))


def _argext(prim: str, op: type[ThunderOp]) -> None:
    """Registers argmax/argmin: along ``dim``, or over the flattened tensor."""

    def rule(d: Decomposer, x: SSAValue, dim: int | None = None, keepdim: bool | None = None
             ) -> SSAValue:
        t = ttype(x)
        if dim is None:
            flat = reshape(d, x, (t.numel(),))
            y = _arg(d, prim, flat, 0)
            return reshape(d, y, (1,) * t.rank) if keepdim else y
        if t.rank == 0:
            norm_dim(dim, 0)
            return full(d, (), 0, torch.int64, t.dev)
        dims = (norm_dim(dim, t.rank),)
        return keep_dims(d, _arg(d, prim, x, dims[0]), t.sizes, dims, keepdim)

    rule.__name__ = prim
    decomposes(op)(rule)


_argext("argmax", L.ArgmaxOp)
_argext("argmin", L.ArgminOp)


@decomposes(S.CumsumOp)
def cumsum(d: Decomposer, x: SSAValue, dim: int, dtype: torch.dtype | None = None
           ) -> SSAValue:
    """A log-step prefix sum (Hillis and Steele): ``ceil(log2 n)`` rounds, each adding a
    copy shifted ``1, 2, 4, …`` places along ``dim`` (a ``prims.pad`` that crops its far
    end). Sums in float32 for float16/bfloat16 and rounds once, as eager's kernel
    accumulates; the order of the additions differs from eager's, so float results agree
    to rounding."""
    t = ttype(x)
    out_dtype = _sum_dtype(t.dtype, dtype)
    y = to_dtype(d, to_dtype(d, x, out_dtype), opmath(out_dtype))
    if t.rank == 0:
        return to_dtype(d, y, out_dtype)
    ax = norm_dim(dim, t.rank)
    n = t.sizes[ax]
    if not isinstance(n, int):
        raise ShapeError(f"{S.CumsumOp.name}: a symbolic size along dim {dim} has no "
                         "decomposition")
    zero = cast_number(0, opmath(out_dtype))
    shift = 1
    while shift < n:
        config = [(0, 0, 0)] * t.rank
        config[ax] = (shift, -shift, 0)
        y = d.prims.add(y, d.prims.pad(y, padding_value=zero, padding_config=tuple(config)))
        shift *= 2
    return to_dtype(d, y, out_dtype)


@decomposes(I.IndexAddOp)
def index_add(d: Decomposer, x: SSAValue, index: SSAValue, source: SSAValue, dim: int,
              alpha: Any = None) -> SSAValue:
    """``prims.index_add`` of the source scaled by ``alpha`` (in the dtype's compute type,
    rounded once, as eager's ``add_(source, alpha=alpha)`` per slice): sizes, the index's
    unbacked length included, stay as they are."""
    t = ttype(x)
    ax = norm_dim(dim, t.rank)
    if alpha is not None and alpha != 1:
        wide = to_dtype(d, source, opmath(t.dtype))
        scaled = d.prims.mul(wide, const(d, cast_number(alpha, opmath(t.dtype))))
        source = to_dtype(d, scaled, t.dtype)
    return d.prims.index_add(x, index, source, dim=ax)


@decomposes(I.IndexCopyOp)
def index_copy(d: Decomposer, x: SSAValue, index: SSAValue, source: SSAValue, dim: int
               ) -> SSAValue:
    """``prims.index_copy`` (eager's kernel): sizes, the index's unbacked length included,
    stay as they are."""
    return d.prims.index_copy(x, index, source, dim=norm_dim(dim, ttype(x).rank))


# --------------------------------------------------------------------------- shape ops


def _infer_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    """Resolves one -1 in a requested shape."""
    shape = tuple(shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        missing = numel // known if known else 0
        shape = tuple(missing if s == -1 else s for s in shape)
    return shape


@decomposes(L.ReshapeOp)
def reshape_rule(d: Decomposer, x: SSAValue, shape: Sequence[int]) -> SSAValue:
    return reshape(d, x, _infer_shape(shape, ttype(x).numel()))


@decomposes(L.ViewOp)
def view(d: Decomposer, x: SSAValue, size: Sequence[int]) -> SSAValue:
    return reshape_rule(d, x, size)


def permute_to(d: Decomposer, x: SSAValue, perm: Sequence[int]) -> SSAValue:
    """``prims.transpose`` (no op for the identity permutation)."""
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    return d.prims.transpose(x, permutation=perm)


@decomposes(L.PermuteOp)
def permute(d: Decomposer, x: SSAValue, dims: Sequence[int]) -> SSAValue:
    return permute_to(d, x, [norm_dim(i, ttype(x).rank) for i in dims])


@decomposes(L.TransposeOp)
def transpose(d: Decomposer, x: SSAValue, dim0: int, dim1: int) -> SSAValue:
    rank = ttype(x).rank
    a, b = norm_dim(dim0, rank), norm_dim(dim1, rank)
    perm = list(range(rank))
    if rank:
        perm[a], perm[b] = perm[b], perm[a]
    return permute_to(d, x, perm)


@decomposes(L.ContiguousOp)
def contiguous(d: Decomposer, x: SSAValue, memory_format: Any = None) -> SSAValue:
    return x  # values only: the program's outputs get eager's layout at its end


@decomposes(L.CloneOp)
def clone(d: Decomposer, x: SSAValue, memory_format: Any = None) -> SSAValue:
    return x


@decomposes(L.FlattenOp)
def flatten(d: Decomposer, x: SSAValue, start_dim: int | None = None,
            end_dim: int | None = None) -> SSAValue:
    t = ttype(x)
    if t.rank == 0:
        return reshape(d, x, (1,))
    s = norm_dim(0 if start_dim is None else start_dim, t.rank)
    e = norm_dim(-1 if end_dim is None else end_dim, t.rank)
    sizes = t.sizes
    return reshape(d, x, (*sizes[:s], math.prod(sizes[s:e + 1]), *sizes[e + 1:]))


@decomposes(L.UnsqueezeOp)
def unsqueeze(d: Decomposer, x: SSAValue, dim: int) -> SSAValue:
    sizes = list(ttype(x).sizes)
    sizes.insert(norm_dim(dim, len(sizes) + 1), 1)
    return reshape(d, x, sizes)


@decomposes(L.SqueezeOp)
def squeeze(d: Decomposer, x: SSAValue, dim: Any = None) -> SSAValue:
    t = ttype(x)
    if t.rank == 0:
        return x
    if dim is None:
        dims = tuple(range(t.rank))
    else:  # () squeezes nothing
        dims = tuple(norm_dim(i, t.rank) for i in ((dim,) if isinstance(dim, int) else dim))
    dims = tuple(sorted({i for i in dims if t.sizes[i] == 1}))
    if not dims:
        return x
    return d.prims.squeeze(x, dims=dims)


@decomposes(L.ExpandOp)
def expand(d: Decomposer, x: SSAValue, size: Sequence[int]) -> SSAValue:
    t = ttype(x)
    lead = len(size) - t.rank
    shape = tuple(t.sizes[i - lead] if s == -1 and i >= lead else s
                  for i, s in enumerate(size))
    return expand_to(d, x, shape)


def _slice_dim(d: Decomposer, x: SSAValue, dim: int, start: int, stop: int) -> SSAValue:
    sizes = ttype(x).sizes
    if start == 0 and stop == sizes[dim]:
        return x
    starts = [0] * len(sizes)
    ends = list(sizes)
    starts[dim], ends[dim] = start, stop
    return d.prims.slice(x, start_indices=starts, end_indices=ends)


def _pieces(d: Decomposer, x: SSAValue, dim: int, results: list[Any]) -> list[SSAValue]:
    """Slices ``x`` along ``dim`` into consecutive pieces of the result types' sizes."""
    out = []
    offset = 0
    for r in results:
        n = r.sizes[dim]
        out.append(_slice_dim(d, x, dim, offset, offset + n))
        offset += n
    return out


@decomposes(L.SplitOp)
def split(d: Decomposer, x: SSAValue, split_size_or_sections: Any, dim: int | None = None
          ) -> list[SSAValue]:
    dim = 0 if dim is None else dim
    results = L.SplitOp.infer(x.type, split_size_or_sections=split_size_or_sections, dim=dim)
    return _pieces(d, x, norm_dim(dim, ttype(x).rank), results)


@decomposes(L.ChunkOp)
def chunk(d: Decomposer, x: SSAValue, chunks: int, dim: int | None = None
          ) -> list[SSAValue]:
    dim = 0 if dim is None else dim
    results = L.ChunkOp.infer(x.type, chunks=chunks, dim=dim)
    return _pieces(d, x, norm_dim(dim, ttype(x).rank), results)


@decomposes(L.CatOp)
def cat(d: Decomposer, tensors: Sequence[SSAValue], dim: int | None = None) -> SSAValue:
    dtype = result_dtype(*(v.type for v in tensors))
    # torch skips legacy empty 1-D tensors when joining tensors of another rank.
    kept = [v for v in tensors if ttype(v).sizes != (0,)] or list(tensors[:1])
    rank = ttype(kept[0]).rank
    kept = [to_dtype(d, v, dtype) for v in kept]
    if len(kept) == 1:
        return kept[0]
    return d.prims.cat(kept, dim=norm_dim(0 if dim is None else dim, rank))


@decomposes(L.StackOp)
def stack(d: Decomposer, tensors: Sequence[SSAValue], dim: int | None = None) -> SSAValue:
    dim = norm_dim(0 if dim is None else dim, ttype(tensors[0]).rank + 1)
    return cat(d, [unsqueeze(d, v, dim) for v in tensors], dim)


def _expand_index(index: Any, rank: int) -> list[Any]:
    """The index as a list with ``...`` replaced by full slices."""
    items = list(index) if isinstance(index, tuple) else [index]
    consuming = [i for i in items if i is not None and i is not Ellipsis]
    n_ell = items.count(Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if len(consuming) > rank:
        raise IndexError(f"too many indices for a tensor of rank {rank}")
    if n_ell:
        k = items.index(Ellipsis)
        items[k:k + 1] = [slice(None)] * (rank - len(consuming))
    return items


def _gather_along(d: Decomposer, y: SSAValue, idx: list[SSAValue], dims: list[int]
                  ) -> SSAValue:
    """numpy advanced indexing of ``y`` by index tensors ``idx`` at ``dims``."""
    sizes = ttype(y).sizes
    bshape = tuple(broadcast_shapes("ltorch.getitem", *(ttype(i).sizes for i in idx)))
    lin = None
    for i, dim in zip(idx, dims):
        i = expand_to(d, to_dtype(d, i, torch.int64), bshape)
        n = sizes[dim]
        # negative indices count from the end
        i = d.prims.where(d.prims.lt(i, const(d, 0)), d.prims.add(i, const(d, n)), i)
        if lin is None:
            lin = i
        else:
            lin = d.prims.add(d.prims.mul(lin, const(d, n)), i)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if not adjacent:  # the indexed dims go first, in order
        rest = [k for k in range(len(sizes)) if k not in dims]
        y = permute_to(d, y, [*dims, *rest])
        dims = list(range(len(dims)))
        sizes = ttype(y).sizes
    k0, k1 = dims[0], dims[-1] + 1
    merged = math.prod(sizes[k0:k1])
    y = reshape(d, y, (*sizes[:k0], merged, *sizes[k1:]))
    n_idx = math.prod(bshape)
    if lin is None:  # pragma: no cover - at least one index
        raise IndexError("no index tensor")
    flat = reshape(d, lin, (n_idx,))
    if merged == 0 and n_idx:
        raise IndexError("ltorch.getitem: index into an empty dim")
    y = d.prims.take(y, flat, dim=k0)
    return reshape(d, y, (*sizes[:k0], *bshape, *sizes[k1:]))


@decomposes(L.GetitemOp)
def getitem(d: Decomposer, x: SSAValue, indices: Sequence[SSAValue], index: Any = None
            ) -> SSAValue:
    t = ttype(x)
    items = _expand_index(index, t.rank)
    starts, ends, steps = [0] * t.rank, list(t.sizes), [1] * t.rank
    out_shape: list[int] = []  # after basic indexing: ints dropped, Nones inserted
    adv: list[tuple[int, SSAValue]] = []  # (dim of out_shape, index tensor)
    dim = 0
    for it in items:
        if it is None:
            out_shape.append(1)
            continue
        if isinstance(it, OperandRef):
            v = indices[it]
            if v.type.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"ltorch.getitem: index tensors must be int64 or int32, got "
                                f"{v.type.dtype} (bool masks have data-dependent shapes)")
            adv.append((len(out_shape), v))
            out_shape.append(t.sizes[dim])
        elif isinstance(it, bool):
            raise TypeError("ltorch.getitem: bool indices are not supported")
        elif isinstance(it, int):
            n = t.sizes[dim]
            if not -n <= it < n:
                raise IndexError(f"index {it} is out of bounds for dim {dim} of size {n}")
            k = it + n if it < 0 else it  # (``it % n``, over a symbolic size too)
            starts[dim], ends[dim] = k, k + 1
        elif isinstance(it, slice):
            lo, hi, st = slice_indices(it, t.sizes[dim])
            if st < 1:
                raise ValueError("ltorch.getitem: slice steps must be positive")
            starts[dim], ends[dim], steps[dim] = lo, max(lo, hi), st
            out_shape.append(range_len(lo, hi, st))
        else:
            raise TypeError(f"ltorch.getitem: unsupported index {it!r}")
        dim += 1
    out_shape.extend(t.sizes[dim:])
    y = x
    if starts != [0] * t.rank or ends != list(t.sizes) or steps != [1] * t.rank:
        strides = steps if any(s != 1 for s in steps) else None
        y = d.prims.slice(y, start_indices=starts, end_indices=ends, strides=strides)
    y = reshape(d, y, out_shape)
    if adv:
        y = _gather_along(d, y, [v for _, v in adv], [k for k, _ in adv])
    return y


# --------------------------------------------------------------------------- creation


def _created(op: type[ThunderOp], **params: Any) -> TensorType:
    """The result type of a creation op (its shape rule, cached)."""
    return cast(TensorType, op.infer(**params))


@decomposes(L.ArangeOp)
def arange(d: Decomposer, start: Any = 0, end: Any = None, step: Any = 1,
           dtype: torch.dtype | None = None, device: str | None = None) -> SSAValue:
    rt = _created(L.ArangeOp, start=start, end=end, step=step, dtype=dtype, device=device)
    if end is None:
        start, end = 0, start
    start = 0 if start is None else start
    step = 1 if step is None else step
    n = rt.sizes[0]
    exact_int = not is_float(rt.dtype) and all(type(v) in (int, torch.SymInt)
                                               for v in (start, step))
    acc = torch.int64 if exact_int else torch.float64
    y = d.prims.iota(length=n, start=cast_number(start, acc), step=cast_number(step, acc),
                     device=rt.dev, dtype=acc)
    return to_dtype(d, y, rt.dtype)


def _fill(op: type[ThunderOp], value: Any) -> None:
    """Registers zeros/ones/empty: ``prims.full`` of a constant."""

    def rule(d: Decomposer, size: Sequence[int], dtype: torch.dtype | None = None,
             device: str | None = None) -> SSAValue:
        rt = _created(op, size=size, dtype=dtype, device=device)
        return full(d, rt.sizes, value, rt.dtype, rt.dev)

    rule.__name__ = op.name.split(".")[1]
    decomposes(op)(rule)


_fill(L.ZerosOp, 0)
_fill(L.OnesOp, 1)
_fill(L.EmptyOp, 0)


@decomposes(L.FullOp)
def full_rule(d: Decomposer, size: Sequence[int], fill_value: Any,
              dtype: torch.dtype | None = None, device: str | None = None) -> SSAValue:
    rt = _created(L.FullOp, size=size, fill_value=fill_value, dtype=dtype, device=device)
    return full(d, rt.sizes, fill_value, rt.dtype, rt.dev)


def _fill_like(op: type[ThunderOp], value: Any) -> None:
    """Registers zeros_like/ones_like."""

    def rule(d: Decomposer, x: SSAValue, dtype: torch.dtype | None = None,
             device: str | None = None) -> SSAValue:
        t = ttype(x)
        return full(d, t.sizes, value, dtype or t.dtype, device or t.dev)

    rule.__name__ = op.name.split(".")[1]
    decomposes(op)(rule)


_fill_like(L.ZerosLikeOp, 0)
_fill_like(L.OnesLikeOp, 1)


@decomposes(L.FullLikeOp)
def full_like(d: Decomposer, x: SSAValue, fill_value: Any, dtype: torch.dtype | None = None,
              device: str | None = None) -> SSAValue:
    t = ttype(x)
    return full(d, t.sizes, fill_value, dtype or t.dtype, device or t.dev)


def _triangle(d: Decomposer, x: SSAValue, diagonal: int | None, upper: bool) -> SSAValue:
    t = ttype(x)
    if t.rank < 2:
        raise ValueError(f"ltorch.{'triu' if upper else 'tril'}: input must be at least 2-D, "
                         f"got shape {t.sizes}")
    r, c = t.sizes[-2:]
    rows = d.prims.broadcast_in_dim(
        d.prims.iota(length=r, start=0, step=1, device=t.dev, dtype=torch.int64),
        shape=(r, c), broadcast_dims=(0,))
    cols = d.prims.broadcast_in_dim(
        d.prims.iota(length=c, start=0, step=1, device=t.dev, dtype=torch.int64),
        shape=(r, c), broadcast_dims=(1,))
    offset = d.prims.sub(cols, rows)
    k = const(d, diagonal or 0)
    keep = d.prims.ge(offset, k) if upper else d.prims.le(offset, k)
    keep = expand_to(d, keep, t.sizes)
    return d.prims.where(keep, x, const(d, cast_number(0, t.dtype)))


@decomposes(L.TriuOp)
def triu(d: Decomposer, x: SSAValue, diagonal: int | None = None) -> SSAValue:
    return _triangle(d, x, diagonal, upper=True)


@decomposes(L.TrilOp)
def tril(d: Decomposer, x: SSAValue, diagonal: int | None = None) -> SSAValue:
    return _triangle(d, x, diagonal, upper=False)
