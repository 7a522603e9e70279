"""Input strategies of the prims (`thunder_ir.dialects.prims`): one per op or family."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from hypothesis import strategies as st

from thunder_ir.dialects import prims as P
from thunder_ir.dialects.types import (
    is_float,
)
from thunder_ir.testing.inputs import (
    ANY_KIND,
    FLOAT_KIND,
    INPUT_STRATEGIES,
    NUMERIC_KIND,
    InputSpec,
    OpSample,
    accepted_dtypes,
    binary_pair,
    dim_subset,
    distinct_positions,
    domain_tensor,
    draw_p_number,
    index_tensor,
    number_joins,
    register_inputs,
    shaped,
    short_name,
    smallest_side,
    values,
)

# --------------------------------------------------------------------------- prims


def _p_unary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(op, lambda d: op.infer(shaped((), d))))
    shape = spec.shape(draw, min_side=smallest_side(spec))
    return OpSample([domain_tensor(draw, short_name(op), shape, dtype)], {})




def _p_binary(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op, name = spec.op, short_name(spec.op)
    dtype = spec.dtype(draw, accepted_dtypes(op, lambda d: op.infer(shaped((), d), shaped((), d))))
    shape = spec.shape(draw, min_side=smallest_side(spec))
    a, b = binary_pair(draw, spec, name, shape, dtype, dtype)
    sides = draw(st.sampled_from(["tt", "tn", "nt"]))
    ops: list[Any] = [a, b]
    if sides == "tn":
        ops[1] = draw_p_number(draw, spec, name, 1, dtype)
    elif sides == "nt":
        ops[0] = draw_p_number(draw, spec, name, 0, dtype)
    return OpSample(ops, {})


def _number_of_kind(draw: st.DrawFn, dtype: torch.dtype, floats: bool = True) -> Any:
    """A number that fits a ``dtype`` tensor in a prim (see `prims._number_fits`)."""
    kinds: list[type] = [k for k in (bool, int, float) if number_joins(k, dtype)]
    kind = draw(st.sampled_from(kinds if floats else [k for k in kinds if k is not float]))
    if kind is bool:
        return draw(st.booleans())
    if kind is int:
        return draw(st.integers(0 if dtype == torch.uint8 else -3, 5))
    return draw(st.sampled_from([0.5, 1.5, 2.0, -1.25]))


@register_inputs(P.WhereOp)
def _p_where(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=smallest_side(spec))
    cond = values(draw, shape, torch.bool)
    sides = draw(st.sampled_from(["tt", "tn", "nt"] if spec.for_vjp else
                                 ["tt", "tn", "nt", "nn"]))
    if sides == "nn":
        kind = draw(st.sampled_from([bool, int, float]))
        pools: dict[type, list[Any]] = {bool: [True, False], int: [1, -2, 3],
                                        float: [0.5, -1.25, 2.0]}
        pool = pools[kind]
        return OpSample([cond, draw(st.sampled_from(pool)), draw(st.sampled_from(pool))], {})
    dtype = spec.dtype(draw, ANY_KIND)
    ops = [values(draw, shape, dtype) if s == "t" else _number_of_kind(draw, dtype)
           for s in sides]
    return OpSample([cond, *ops], {})


@register_inputs(P.ConvertElementTypeOp)
def _p_convert(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = values(draw, spec.shape(draw, min_side=smallest_side(spec)), spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"dtype": spec.any_dtype(draw)})


@register_inputs(P.BroadcastInDimOp)
def _p_broadcast_in_dim(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, max_rank=4, min_side=smallest_side(spec), max_side=3)
    dims = tuple(d for d in range(len(shape)) if draw(st.booleans()))
    in_shape = [draw(st.sampled_from([shape[d], 1])) for d in dims]
    x = values(draw, in_shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"shape": shape, "broadcast_dims": dims})


@register_inputs(P.ReshapeOp)
def _p_reshape(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    factors = draw(st.lists(st.integers(smallest_side(spec), 3), max_size=4))

    def grouping() -> tuple[int, ...]:
        cuts = sorted(draw(st.lists(st.integers(0, len(factors)), max_size=4)))
        bounds = [0, *cuts, len(factors)]
        return tuple(math.prod(factors[a:b]) for a, b in itertools.pairwise(bounds))

    x = values(draw, grouping(), spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"shape": grouping()})


@register_inputs(P.TransposeOp)
def _p_transpose(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, max_rank=4, min_side=smallest_side(spec))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return OpSample([values(draw, shape, spec.dtype(draw, ANY_KIND))], {"permutation": perm})


@register_inputs(P.SliceOp)
def _p_slice(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=smallest_side(spec), max_side=6)
    starts, ends, strides = [], [], []
    for size in shape:
        lo = draw(st.integers(0, size))
        starts.append(lo)
        ends.append(draw(st.integers(lo, size)))
        strides.append(draw(st.integers(1, 3)))
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"start_indices": tuple(starts), "end_indices": tuple(ends),
                          "strides": draw(st.sampled_from([tuple(strides), None]))})


@register_inputs(P.SqueezeOp)
def _p_squeeze(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    sizes = [1, 1, 2, 3] if spec.for_vjp else [0, 1, 1, 2, 3]
    shape = tuple(draw(st.lists(st.sampled_from(sizes), max_size=4)))
    ones = [i for i, s in enumerate(shape) if s == 1]
    dims = tuple(draw(st.permutations([i for i in ones if draw(st.booleans())])))
    return OpSample([values(draw, shape, spec.dtype(draw, ANY_KIND))], {"dims": dims})


@register_inputs(P.PadOp)
def _p_pad(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=smallest_side(spec))
    config = []
    for size in shape:
        lo, hi, mid = draw(st.integers(-3, 3)), draw(st.integers(-3, 3)), draw(st.integers(0, 2))
        n = size + lo + hi + max(size - 1, 0) * mid
        config.append((lo, hi - min(n, 0), mid))  # raise `hi` so the result is not negative
    dtype = spec.dtype(draw, ANY_KIND)
    return OpSample([values(draw, shape, dtype)],
                    {"padding_value": _number_of_kind(draw, dtype),
                     "padding_config": tuple(config)})


@register_inputs(P.CatOp)
def _p_cat(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = list(spec.shape(draw, min_rank=1, min_side=smallest_side(spec)))
    dim = draw(st.integers(0, len(shape) - 1))
    dtype = spec.dtype(draw, ANY_KIND)
    ts = []
    for _ in range(draw(st.integers(1, 3))):
        shape[dim] = draw(st.integers(0, 3))
        ts.append(values(draw, shape, dtype))
    return OpSample([ts], {"dim": dim})


@register_inputs(P.FlipOp)
def _p_flip(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_side=smallest_side(spec))
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x], {"dims": dim_subset(draw, len(shape))})


def _p_reduction(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(op, lambda d: op.infer(shaped((), d), dims=())))
    shape = spec.shape(draw, min_side=smallest_side(spec))
    dims = dim_subset(draw, len(shape))
    if getattr(op, "NEEDS_NONEMPTY", False):  # amax/amin: no extremum over an empty dim
        dims = tuple(d for d in dims if shape[d])
    x = values(draw, shape, dtype)
    if spec.for_vjp and op is P.ProdOp:  # groups with no, one and several zeros
        x = values(draw, shape, dtype, 0.5, 1.5)
        zeros = values(draw, shape, torch.float64, 0.0, 1.0) < draw(st.sampled_from([0, .2, .5]))
        x = torch.where(zeros, 0.0, x)
    elif spec.for_vjp and op in (P.AmaxOp, P.AminOp) and draw(st.booleans()):
        x = values(draw, shape, dtype, -2.0, 2.0).round()  # ties
    return OpSample([x], {"dims": dims})


@register_inputs(P.VarOp)
def _p_var(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    sample = _p_reduction(draw, spec)
    correction = draw(st.sampled_from([0, 1, 0.5, 1.0, 2]))
    shape = sample.operands[0].shape
    if spec.for_vjp and math.prod(shape[d] for d in sample.params["dims"]) <= correction:
        correction = 0  # the divisor n - correction must be positive to differentiate
    sample.params["correction"] = correction
    return sample


def _p_arg_reduction(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(op, lambda d: op.infer(shaped((1,), d), dim=0)))
    shape = list(spec.shape(draw, min_rank=1, min_side=smallest_side(spec)))
    dim = draw(st.integers(0, len(shape) - 1))
    shape[dim] = max(shape[dim], 1)
    return OpSample([values(draw, shape, dtype)], {"dim": dim})


@register_inputs(P.MatmulOp)
def _p_matmul(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(
        op, lambda d: op.infer(shaped((2,), d), shaped((2,), d))))
    lo = smallest_side(spec)
    batch = spec.shape(draw, max_rank=2, min_side=lo, max_side=3)
    m, k, n = (draw(st.integers(lo, 3)) for _ in range(3))

    def operand(core: list[int]) -> list[int]:
        if draw(st.booleans()):
            return core[-1:] if core[-1] == k else core[:1]  # 1-D operand
        cut = draw(st.integers(0, len(batch)))
        return [draw(st.sampled_from([b, 1])) for b in batch[cut:]] + core

    a, b = operand([m, k]), operand([k, n])
    return OpSample([values(draw, a, dtype), values(draw, b, dtype)], {})


@register_inputs(P.LinearOp)
def _p_linear(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(
        op, lambda d: op.infer(shaped((2,), d), shaped((3, 2), d), shaped((3,), d))))
    lo = smallest_side(spec)
    k = draw(st.integers(lo, 3))
    x = [*spec.shape(draw, max_rank=2, min_side=lo, max_side=3), k]
    w = draw(st.sampled_from([[k], [draw(st.integers(lo, 3)), k]]))
    with_bias = draw(st.booleans()) and (len(w) == 2 or len(x) == 1)  # as F.linear allows
    bias = values(draw, w[:-1], dtype) if with_bias else None
    return OpSample([values(draw, x, dtype), values(draw, w, dtype), bias], {})


@register_inputs(P.IotaOp)
def _p_iota(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.any_dtype(draw, NUMERIC_KIND)
    kinds = [int, float] if is_float(dtype) else [int]
    start = draw(st.integers(-3, 5)) if draw(st.sampled_from(kinds)) is int else \
        draw(st.sampled_from([0.5, 1.5, -2.0]))
    step = draw(st.integers(-2, 3)) if draw(st.sampled_from(kinds)) is int else \
        draw(st.sampled_from([0.25, 1.5, -0.5]))
    if dtype == torch.uint8:
        start, step = abs(start), abs(step)
    return OpSample([], {"length": draw(st.integers(0, 5)), "start": start, "step": step,
                         "device": "cpu", "dtype": dtype})


@register_inputs(P.FullOp)
def _p_full(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.any_dtype(draw)
    return OpSample([], {"shape": spec.shape(draw, min_side=0),
                         "fill_value": _number_of_kind(draw, dtype), "device": "cpu",
                         "dtype": dtype})


@register_inputs(P.BernoulliOp)
def _p_bernoulli(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    params = {"shape": spec.shape(draw, min_side=0),
              "p": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])), "device": "cpu",
              "dtype": spec.any_dtype(draw, FLOAT_KIND)}
    return OpSample([], params)


@register_inputs(P.BernoulliLikeOp)
def _p_bernoulli_like(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x = values(draw, spec.shape(draw, min_side=0), spec.dtype(draw, FLOAT_KIND))
    return OpSample([x], {"p": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))})


@register_inputs(P.TakeOp)
def _p_take(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw, min_rank=1, min_side=smallest_side(spec))
    dim = draw(st.integers(0, len(shape) - 1))
    n = draw(st.integers(smallest_side(spec), 4)) if shape[dim] else 0
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x, index_tensor(draw, (n,), shape[dim])], {"dim": dim})


@register_inputs(P.GatherOp)
def _p_gather(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    lo = smallest_side(spec)
    shape = spec.shape(draw, min_rank=1, min_side=lo)
    dim = draw(st.integers(0, len(shape) - 1))
    idx = [draw(st.integers(lo, s)) for s in shape]
    idx[dim] = draw(st.integers(lo, 4)) if shape[dim] else 0
    x = values(draw, shape, spec.dtype(draw, ANY_KIND))
    return OpSample([x, index_tensor(draw, idx, shape[dim])], {"dim": dim})


@register_inputs(P.IndexAddOp)
def _p_index_add(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(
        op, lambda d: op.infer(shaped((1,), d), shaped((1,), torch.int64), shaped((1,), d), dim=0)))
    shape = spec.shape(draw, min_rank=1, min_side=smallest_side(spec))
    dim = draw(st.integers(0, len(shape) - 1))
    n = draw(st.integers(smallest_side(spec), 4)) if shape[dim] else 0
    src = list(shape)
    src[dim] = n
    ops = [values(draw, shape, dtype), index_tensor(draw, (n,), shape[dim]),
           values(draw, src, dtype)]
    return OpSample(ops, {"dim": dim})


@register_inputs(P.IndexCopyOp)
def _p_index_copy(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """``index_add``'s inputs with distinct positions (eager leaves repeats undefined)."""
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(
        op, lambda d: op.infer(shaped((1,), d), shaped((1,), torch.int64), shaped((1,), d), dim=0)))
    shape = spec.shape(draw, min_rank=1, min_side=smallest_side(spec))
    dim = draw(st.integers(0, len(shape) - 1))
    index = distinct_positions(draw, shape[dim])
    src = list(shape)
    src[dim] = index.shape[0]
    return OpSample([values(draw, shape, dtype), index, values(draw, src, dtype)],
                    {"dim": dim})


@register_inputs(P.ScatterAddOp)
def _p_scatter_add(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    op = spec.op
    dtype = spec.dtype(draw, accepted_dtypes(
        op, lambda d: op.infer(shaped((1,), d), shaped((1,), torch.int64), shaped((1,), d), dim=0)))
    lo = smallest_side(spec)
    shape = spec.shape(draw, min_rank=1, min_side=lo)
    dim = draw(st.integers(0, len(shape) - 1))
    idx = [draw(st.integers(lo, s)) for s in shape]
    idx[dim] = draw(st.integers(lo, 3)) if shape[dim] else 0
    # A src larger than the index is valid, but torch cannot differentiate it.
    src = idx if spec.for_vjp else [i + draw(st.integers(0, 1)) for i in idx]
    ops = [values(draw, shape, dtype), index_tensor(draw, idx, shape[dim]),
           values(draw, src, dtype)]
    return OpSample(ops, {"dim": dim})


@register_inputs(P.ConstantOp)
def _p_constant(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    value = draw(st.one_of(st.booleans(), st.integers(-(2**40), 2**40),
                           st.floats(allow_nan=False, width=64)))
    return OpSample([], {"value": value})


for _op in P.PRIMS:
    if _op in INPUT_STRATEGIES:
        continue
    if issubclass(_op, P.UnaryOp):
        register_inputs(_op)(_p_unary)
    elif issubclass(_op, P.BinaryOp):
        register_inputs(_op)(_p_binary)
    elif issubclass(_op, P.ArgReductionOp):
        register_inputs(_op)(_p_arg_reduction)
    elif issubclass(_op, P.ReductionOp):
        register_inputs(_op)(_p_reduction)
