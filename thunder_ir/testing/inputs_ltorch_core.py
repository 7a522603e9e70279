"""Input strategies of the core ltorch ops (`thunder_ir.dialects.ltorch_core`) and of
``index_add`` and ``index_copy`` (`thunder_ir.dialects.ltorch_index`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects import ltorch_index as I
from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.types import (
    is_float,
)
from thunder_ir.testing.inputs import (
    ANY_KIND,
    BOOL_KIND,
    FLOAT_KIND,
    INT_KIND,
    NUMERIC_KIND,
    InputSpec,
    OpSample,
    binary_pair,
    broadcast_of,
    dims_of,
    distinct_positions,
    domain_tensor,
    draw_data,
    draw_p_number,
    either_sign_dim,
    index_tensor,
    reduced_count,
    register_inputs,
    short_name,
    values,
    with_specials,
)

# --------------------------------------------------------------------------- ltorch: binary

_BITWISE = (L.BitwiseAndOp, L.BitwiseOrOp, L.BitwiseXorOp)
_LT_DIVIDES = (L.DivOp, L.RemainderOp, L.FmodOp, L.FloorDivideOp)
_ANY_DTYPE_BINARY = (L.LogicalAndOp, L.LogicalOrOp, L.EqOp, L.NeOp, L.MaximumOp, L.MinimumOp,
                     L.AddOp, L.MulOp, L.LtOp, L.LeOp, L.GtOp, L.GeOp)


def _lt_binary_kind(op: type[ThunderOp]) -> frozenset[torch.dtype]:
    if op in _BITWISE:
        return INT_KIND | BOOL_KIND
    if op in _ANY_DTYPE_BINARY:
        return ANY_KIND
    return NUMERIC_KIND


def _lt_binary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op, name = spec.op, short_name(spec.op)
    kind = _lt_binary_kind(op)
    shape = spec.shape(draw)
    a_dtype = spec.dtype(draw, kind)
    b_dtype = spec.dtype(draw, kind)
    b_shape = broadcast_of(draw, shape)
    if spec.for_vjp:
        a = binary_pair(draw, spec, name, shape, a_dtype, a_dtype)[0]
        b = binary_pair(draw, spec, name, b_shape, b_dtype, b_dtype)[1]
    else:
        a = with_specials(draw, spec, values(draw, shape, a_dtype))
        b = with_specials(draw, spec, values(draw, b_shape, b_dtype))
    takes_number = issubclass(op, L.BinaryOp) or op is L.PowOp
    other: Any = b
    if takes_number and draw(st.booleans()):
        if op in _BITWISE:
            other = draw(st.integers(-3, 3) | st.booleans())
        elif spec.for_vjp:
            other = draw_p_number(draw, spec, name, 1, torch.float64)
            other = 1.0 if other is True else other  # torch.sub takes no bool
        else:
            other = draw(st.integers(-3, 3) | st.sampled_from([0.5, -1.25, 2.75, 0.0]))
    a_first, rhs = a, other
    if not spec.for_vjp and draw(st.booleans()):
        a_first, rhs = rhs, a_first
    lhs = a_first
    rt = torch.result_type(lhs, rhs)
    if not is_float(rt) and op in _LT_DIVIDES:  # int division by zero raises
        if isinstance(rhs, torch.Tensor):
            rhs = torch.ones_like(rhs) if rhs.dtype == torch.bool else \
                torch.where(rhs == 0, torch.ones_like(rhs), rhs)
        else:
            rhs = rhs or 1
    if op is L.PowOp and not is_float(rt):  # ints to negative powers raise
        if not isinstance(rhs, torch.Tensor):
            rhs = abs(rhs)
        elif rhs.dtype != torch.bool:
            rhs = rhs.abs()
    params: dict[str, Any] = {}
    if op is L.DivOp:
        mode = draw(st.sampled_from([None, "trunc", "floor"]))
        if mode is not None:
            params["rounding_mode"] = mode
    if op in (L.AddOp, L.SubOp) and rt != torch.bool and draw(st.booleans()):
        params["alpha"] = draw(st.sampled_from([1, 2, -3] + ([0.5] if is_float(rt) else [])))
    return OpSample([lhs, rhs], params)


# --------------------------------------------------------------------------- ltorch: unary

_FLOAT_UNARY = (L.ExpOp, L.Exp2Op, L.Expm1Op, L.LogOp, L.Log1pOp, L.Log2Op, L.SinOp, L.CosOp,
                L.TanOp, L.TanhOp, L.AsinOp, L.AcosOp, L.AtanOp, L.SinhOp, L.CoshOp, L.SqrtOp,
                L.RsqrtOp, L.ReciprocalOp, L.ErfOp, L.ErfcOp)
_OTHER_UNARY: dict[type[ThunderOp], frozenset[torch.dtype]] = {
    L.NegOp: NUMERIC_KIND, L.AbsOp: NUMERIC_KIND, L.SignOp: ANY_KIND,
    L.FloorOp: NUMERIC_KIND, L.CeilOp: NUMERIC_KIND, L.TruncOp: NUMERIC_KIND,
    L.IsnanOp: ANY_KIND, L.IsinfOp: ANY_KIND, L.IsfiniteOp: ANY_KIND,
    L.LogicalNotOp: ANY_KIND, L.BitwiseNotOp: INT_KIND | BOOL_KIND,
}


def _lt_unary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    kind = ANY_KIND if op in _FLOAT_UNARY else _OTHER_UNARY[op]
    dtype = spec.dtype(draw, kind)
    x = domain_tensor(draw, short_name(op), spec.shape(draw), dtype)
    return OpSample([with_specials(draw, spec, x)], {})


@register_inputs(L.RoundOp)
def _lt_round(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.dtype(draw, FLOAT_KIND)
    if draw(st.booleans()):
        x = values(draw, spec.shape(draw), dtype, -50.0, 50.0)
        return OpSample([x], {"decimals": draw(st.integers(-2, 3))})
    return OpSample([with_specials(draw, spec, values(draw, spec.shape(draw), dtype))], {})


# --------------------------------------------------------------------------- ltorch: selection


def _value_or_number(draw: st.DrawFn, spec: InputSpec, shape: Sequence[int]) -> Any:
    if draw(st.booleans()):
        if spec.for_vjp:
            return draw(st.sampled_from([0.5, -2.25, 1.5]))
        return draw(st.integers(-3, 3) | st.sampled_from([0.5, -2.25]) | st.booleans())
    return draw_data(draw, spec, broadcast_of(draw, shape), ANY_KIND)


@register_inputs(L.WhereOp)
def _lt_where(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    cond = values(draw, broadcast_of(draw, shape), torch.bool)
    a = _value_or_number(draw, spec, shape)
    b = _value_or_number(draw, spec, shape)
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        if spec.for_vjp:
            a = draw_data(draw, spec, shape, ANY_KIND)
        cond = values(draw, shape, torch.bool)
    return OpSample([cond, a, b], {})


@register_inputs(L.MaskedFillOp)
def _lt_masked_fill(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, ANY_KIND)
    mask = values(draw, broadcast_of(draw, shape), torch.bool)
    if draw(st.booleans()):  # the mask broadcasts the input's shape up
        x = draw_data(draw, spec, broadcast_of(draw, shape), ANY_KIND)
        mask = values(draw, shape, torch.bool)
    if is_float(x.dtype):
        value: Any = draw(st.sampled_from([0.5, -2.0, 3] if spec.for_vjp else
                                          [-math.inf, 0.5, -2.0, 3]))
    elif x.dtype == torch.bool:
        value = draw(st.booleans())
    else:
        value = draw(st.integers(0 if x.dtype == torch.uint8 else -5, 5))
    return OpSample([x, mask], {"value": value})


@register_inputs(L.ClampOp)
def _lt_clamp(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), NUMERIC_KIND, specials=True)
    lo = draw(st.none() | st.integers(-2, 0) | st.sampled_from([-1.5, 0.25]))
    hi = draw(st.none() | st.integers(0, 2) | st.sampled_from([1.5, -0.5]))
    if lo is None and hi is None:
        hi = 1
    return OpSample([x], {"min": lo, "max": hi})


@register_inputs(L.ToDtypeOp)
def _lt_to_dtype(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)
    dtype = spec.any_dtype(draw)
    if is_float(x.dtype) and not is_float(dtype):  # casting inf or nan to an int is UB
        x = torch.nan_to_num(x, nan=0.0, posinf=7.0, neginf=-7.0)
    if dtype == torch.uint8:
        x = x.abs()
    return OpSample([x], {"dtype": dtype})


# --------------------------------------------------------------------------- ltorch: reductions


@register_inputs(L.SumOp, L.MeanOp)
def _lt_sum_mean(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    mean = issubclass(spec.op, L.MeanOp)
    x = draw_data(draw, spec, spec.shape(draw), FLOAT_KIND if mean else ANY_KIND)
    dtype = None
    if not spec.for_vjp:
        dtype = draw(st.none() | st.just(spec.any_dtype(draw, FLOAT_KIND if mean else
                                                        NUMERIC_KIND)))
    return OpSample([x], {"dim": dims_of(draw, x.ndim), "keepdim": draw(st.booleans()),
                          "dtype": dtype})


@register_inputs(L.VarOp)
def _lt_var(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), FLOAT_KIND)
    dim = dims_of(draw, x.ndim)
    correction = draw(st.sampled_from([0, 1, 2, 0.5, True, False]))
    if spec.for_vjp and reduced_count(x.shape, dim) <= correction:
        correction = 0  # n - correction must be positive to differentiate
    return OpSample([x], {"dim": dim, "keepdim": draw(st.booleans()),
                          "correction": correction})


@register_inputs(L.AmaxOp, L.AminOp)
def _lt_amax_amin(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)
    dim = dims_of(draw, x.ndim)
    return OpSample([x], {"dim": () if dim is None else dim, "keepdim": draw(st.booleans())})


@register_inputs(L.ProdOp)
def _lt_prod(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND, -1.5, 1.5)
    r = max(x.ndim, 1)
    dim = draw(st.none() | st.integers(-r, r - 1))
    dtype = None
    if not spec.for_vjp:
        dtype = draw(st.none() | st.sampled_from([torch.float64, torch.int64]))
    keepdim = dim is not None and draw(st.booleans())  # torch: no keepdim without dim
    return OpSample([x], {"dim": dim, "keepdim": keepdim, "dtype": dtype})


@register_inputs(L.MaxOp, L.MinOp)
def _lt_max_min(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    return OpSample([draw_data(draw, spec, spec.shape(draw), ANY_KIND, specials=True)], {})


@register_inputs(L.MaxDimOp, L.MinDimOp, L.ArgmaxOp, L.ArgminOp)
def _lt_arg_reductions(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    arg = issubclass(spec.op, L.ArgmaxOp | L.ArgminOp)
    x = draw_data(draw, spec, spec.shape(draw), NUMERIC_KIND if arg else ANY_KIND)
    r = max(x.ndim, 1)
    dim: int | None = draw(st.integers(-r, r - 1))
    if arg and draw(st.booleans()):
        dim = None
    return OpSample([x], {"dim": dim, "keepdim": draw(st.booleans())})


@register_inputs(L.TopkOp)
def _lt_topk(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Distinct values (the order of ties is torch's to choose), sometimes a NaN or an
    infinity, every ``k`` from 0 to the dim's size, largest and smallest."""
    shape = spec.shape(draw)
    dtype = spec.dtype(draw, NUMERIC_KIND)
    n = math.prod(shape)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(draw(
        st.integers(0, 2**16)))).to(torch.float64) - n // 2
    x = perm.reshape(shape).to(dtype)
    if is_float(dtype) and n > 1 and not spec.for_vjp and draw(st.booleans()):
        x.view(-1)[draw(st.integers(0, n - 1))] = draw(st.sampled_from(
            [math.nan, math.inf, -math.inf]))
    r = max(x.ndim, 1)
    dim = draw(st.integers(-r, r - 1))
    size = shape[dim % r] if shape else 1
    k = draw(st.integers(1 if spec.for_vjp else 0, size))
    return OpSample([x],
                    {"k": k, "dim": dim, "largest": draw(st.booleans())})


@register_inputs(I.IndexAddOp)
def _lt_index_add(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """A float or integer input of rank 1 to 3, a dim in either sign, an int32/int64 index
    of 1 to 4 positions (repeats included: their slices sum), a source of the input's
    dtype, and sometimes an ``alpha`` (an int for integer tensors, as eager requires)."""
    dtype = spec.dtype(draw, NUMERIC_KIND)
    shape = spec.shape(draw, min_rank=1)
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    n = draw(st.integers(1, 4))
    src = list(shape)
    src[dim] = n
    alpha: Any = 1
    if draw(st.booleans()):
        alpha = draw(st.sampled_from([2, -1] if not is_float(dtype) else [2, -0.5, 1.5]))
    ops = [values(draw, shape, dtype), index_tensor(draw, (n,), shape[dim]),
           values(draw, src, dtype)]
    return OpSample(ops, {"dim": dim, "alpha": alpha})


@register_inputs(I.IndexCopyOp)
def _lt_index_copy(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """A float or integer input of rank 1 to 3, a dim in either sign, an int64 index of 1
    to 4 distinct positions (eager leaves repeats undefined) and a source of the input's
    dtype."""
    dtype = spec.dtype(draw, NUMERIC_KIND)
    shape = spec.shape(draw, min_rank=1, min_side=1)
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    index = distinct_positions(draw, shape[dim])
    src = list(shape)
    src[dim] = index.shape[0]
    return OpSample([values(draw, shape, dtype), index, values(draw, src, dtype)],
                    {"dim": dim})


# --------------------------------------------------------------------------- ltorch: shape ops


@register_inputs(L.ReshapeOp, L.ViewOp)
def _lt_reshape(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    factors = [p for p in range(1, x.numel() + 1) if x.numel() % p == 0]
    shape: list[int] = []
    rest = x.numel()
    for _ in range(draw(st.integers(0, 3))):
        f = draw(st.sampled_from([p for p in factors if rest % p == 0]))
        shape.append(f)
        rest //= f
    shape.append(rest)
    if draw(st.booleans()):
        shape[draw(st.integers(0, len(shape) - 1))] = -1
    if rest == 1 and -1 not in shape and draw(st.booleans()):
        shape.pop()
    key = "shape" if issubclass(spec.op, L.ReshapeOp) else "size"
    return OpSample([x], {key: tuple(shape)})


@register_inputs(L.PermuteOp)
def _lt_permute(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    perm = [either_sign_dim(draw, p, x.ndim) for p in draw(st.permutations(range(x.ndim)))]
    return OpSample([x], {"dims": tuple(perm)})


@register_inputs(L.TransposeOp)
def _lt_transpose(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    r = max(x.ndim, 1)
    return OpSample([x], {"dim0": draw(st.integers(-r, r - 1)),
                          "dim1": draw(st.integers(-r, r - 1))})


@register_inputs(L.ContiguousOp, L.CloneOp)
def _lt_identity(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    return OpSample([draw_data(draw, spec, spec.shape(draw), ANY_KIND)], {})


@register_inputs(L.FlattenOp)
def _lt_flatten(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    r = max(x.ndim, 1)
    s = draw(st.integers(0, r - 1))
    e = draw(st.integers(s, r - 1))
    return OpSample([x], {"start_dim": either_sign_dim(draw, s, r),
                          "end_dim": either_sign_dim(draw, e, r)})


@register_inputs(L.UnsqueezeOp)
def _lt_unsqueeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    return OpSample([x], {"dim": draw(st.integers(-x.ndim - 1, x.ndim))})


@register_inputs(L.SqueezeOp)
def _lt_squeeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw, max_side=3), ANY_KIND)
    r = max(x.ndim, 1)
    kind = draw(st.sampled_from(["all", "int", "dims"]))
    dim: Any = None
    if kind == "int":
        dim = draw(st.integers(-r, r - 1))
    elif kind == "dims":
        dim = dims_of(draw, x.ndim)
        dim = () if dim is None else dim
    return OpSample([x], {"dim": dim})


@register_inputs(L.ExpandOp)
def _lt_expand(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    target = spec.shape(draw)
    x = draw_data(draw, spec, broadcast_of(draw, target), ANY_KIND)
    lead = len(target) - x.ndim
    size = [-1 if i >= lead and x.shape[i - lead] == s and draw(st.booleans()) else s
            for i, s in enumerate(target)]
    return OpSample([x], {"size": tuple(size)})


@register_inputs(L.TriuOp, L.TrilOp)
def _lt_triu_tril(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw, min_rank=2), ANY_KIND)
    return OpSample([x], {"diagonal": draw(st.integers(-3, 3))})


@register_inputs(L.SplitOp)
def _lt_split(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw, min_rank=1, max_side=6), ANY_KIND)
    dim = draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[dim]
    if draw(st.booleans()):
        arg: Any = draw(st.integers(1, n + 1))
    else:
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
        arg = tuple(b - a for a, b in zip([0, *cuts], [*cuts, n]))
    return OpSample([x], {"split_size_or_sections": arg, "dim": dim})


@register_inputs(L.ChunkOp)
def _lt_chunk(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw, min_rank=1, max_side=6), ANY_KIND)
    dim = draw(st.integers(-x.ndim, x.ndim - 1))
    return OpSample([x], {"chunks": draw(st.integers(1, x.shape[dim] + 1)), "dim": dim})


@register_inputs(L.CatOp, L.StackOp)
def _lt_cat_stack(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    cat = issubclass(spec.op, L.CatOp)
    shape = spec.shape(draw, min_rank=1 if cat else 0)
    r = len(shape) + (not cat)
    dim = draw(st.integers(-r, r - 1))
    xs = []
    for _ in range(draw(st.integers(1, 3))):
        s = list(shape)
        if cat:
            s[dim % len(shape)] = draw(st.integers(0, 3))
        xs.append(draw_data(draw, spec, s, ANY_KIND))
    if cat and not spec.for_vjp and draw(st.booleans()):
        xs.append(torch.zeros(0))  # legacy empty 1-D tensors are skipped
    return OpSample([xs], {"dim": dim})


@register_inputs(L.GetitemOp)
def _lt_getitem(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw, min_rank=1), ANY_KIND)
    items: list[Any] = []
    idx: list[torch.Tensor] = []
    # (a 0-d index tensor is read as an int by torch: data-dependent, so not drawn)
    index_shape = spec.shape(draw, min_rank=1, max_rank=2, max_side=3)
    n_dims = draw(st.integers(1, x.ndim))
    ellipsis_at = draw(st.none() | st.integers(0, n_dims))
    for d in range(n_dims):
        if ellipsis_at == d:
            items.append(...)
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        n = x.shape[d] if ellipsis_at is None or d < ellipsis_at else \
            x.shape[x.ndim - n_dims + d]
        kind = draw(st.sampled_from(["int", "slice", "tensor"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            lo = draw(st.none() | st.integers(-n - 1, n + 1))
            hi = draw(st.none() | st.integers(-n - 1, n + 1))
            items.append(slice(lo, hi, draw(st.none() | st.integers(1, 3))))
        else:
            t = values(draw, index_shape, torch.int64, -n, n - 1)
            idx.append(t.to(draw(st.sampled_from([torch.int64, torch.int32]))))
            items.append(OperandRef(len(idx) - 1))
    if ellipsis_at == n_dims:
        items.append(...)
    index: Any = tuple(items)
    if len(items) == 1 and draw(st.booleans()):
        index = items[0]
    return OpSample([x, idx], {"index": index})


# --------------------------------------------------------------------------- ltorch: creation


@register_inputs(L.ArangeOp)
def _lt_arange(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    start = draw(st.integers(-5, 5) | st.sampled_from([0.5, -1.25]))
    length = draw(st.integers(0, 8))
    step = draw(st.sampled_from([1, 2, -1, 0.5, -0.75, 3]))
    dtype = draw(st.none() | st.just(spec.any_dtype(draw, NUMERIC_KIND - {torch.uint8})))
    if dtype is not None and not is_float(dtype) and (isinstance(start, float) or
                                                      isinstance(step, float)):
        dtype = None
    end = start + length * step
    if draw(st.booleans()):
        return OpSample([], {"start": abs(end), "dtype": dtype})
    return OpSample([], {"start": start, "end": end, "step": step, "dtype": dtype})


def _fill_for(draw: st.DrawFn, dtype: torch.dtype | None, fill: Any) -> Any:
    """``fill`` made to fit ``dtype`` (None: left as drawn)."""
    if dtype is None or is_float(dtype):
        return fill
    fill = int(fill) if math.isfinite(fill) else 1
    if dtype == torch.uint8:
        fill = abs(fill)
    return bool(fill) if dtype == torch.bool else fill


@register_inputs(L.ZerosOp, L.OnesOp, L.FullOp, L.EmptyOp)
def _lt_zeros_ones_full(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    size = spec.shape(draw, min_side=0)
    dtype = draw(st.none() | st.just(spec.any_dtype(draw)))
    params: dict[str, Any] = {"size": size, "dtype": dtype}
    if issubclass(spec.op, L.FullOp):
        fill = draw(st.integers(-3, 3) | st.sampled_from([0.5, True, -math.inf]))
        params["fill_value"] = _fill_for(draw, dtype, fill)
    return OpSample([], params)


@register_inputs(L.ZerosLikeOp, L.OnesLikeOp, L.FullLikeOp)
def _lt_like(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = draw_data(draw, spec, spec.shape(draw), ANY_KIND)
    dtype = draw(st.none() | st.just(spec.any_dtype(draw)))
    params: dict[str, Any] = {"dtype": dtype}
    if issubclass(spec.op, L.FullLikeOp):
        fill = draw(st.integers(-3, 3) | st.sampled_from([0.5, False]))
        params["fill_value"] = _fill_for(draw, dtype or x.dtype, fill)
    return OpSample([x], params)


for _op in (*_FLOAT_UNARY, *_OTHER_UNARY):
    register_inputs(_op)(_lt_unary)
for _op in (L.AddOp, L.SubOp, L.MulOp, L.DivOp, L.FloorDivideOp, L.RemainderOp, L.FmodOp,
            L.PowOp, L.MaximumOp, L.MinimumOp, L.Atan2Op, L.EqOp, L.NeOp, L.LtOp, L.LeOp,
            L.GtOp, L.GeOp, *_BITWISE, L.LogicalAndOp, L.LogicalOrOp):
    register_inputs(_op)(_lt_binary)
