"""Decompositions of the neural-network ltorch families (linear algebra, convolution,
pooling, activations, softmax, dropout, normalization, embedding, attention, losses) into prims.

Numerics follow torch's CPU kernels where it matters: softmax subtracts the row maximum,
and statistics of float16/bfloat16 inputs (softmax, norms, attention, losses) are computed
in float32 and converted back once at the end. Each rule ends in the ltorch op's exact
result type, which it reads from the op's own shape rule (`_result`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import ShapeError
from thunder_ir.dialects.prims import broadcast_shapes
from thunder_ir.dialects.symbols import count_number
from thunder_ir.dialects.types import TensorType, compute_dtype, is_float, ttype
from thunder_ir.passes.decompositions import Decomposer, decomposes
from thunder_ir.passes.promotion import expand_to, to_dtype

# --------------------------------------------------------------------------- helpers

def _result(op: type[N.NNOp], *operands: Any, **params: Any) -> TensorType:
    """The result type of ``op`` on these operands (its cached shape rule)."""
    types = [None if v is None else v.type for v in operands]
    out = op.infer(*types, **params)
    assert isinstance(out, TensorType)
    return out


def number_const(d: Decomposer, value: bool | int | float | torch.SymInt) -> SSAValue:
    return d.prims.constant(value=value)


def _dim(dim: int, rank: int) -> int:
    """Wraps a possibly negative dim (a 0-d tensor has one dim, as in torch)."""
    r = max(rank, 1)
    return dim + r if dim < 0 else dim


def _unreduce(d: Decomposer, v: SSAValue, shape: Sequence[int], dims: Sequence[int]
              ) -> SSAValue:
    """Broadcasts a reduction result back over the reduced ``dims`` of ``shape``."""
    keep = [i for i in range(len(shape)) if i not in dims]
    return d.prims.broadcast_in_dim(v, shape=tuple(shape), broadcast_dims=keep)


def _sum_all(d: Decomposer, v: SSAValue) -> SSAValue:
    return d.prims.sum(v, dims=list(range(ttype(v).rank)))


def _softmax_core(d: Decomposer, x: SSAValue, dim: int, log: bool) -> SSAValue:
    """Numerically stable (log-)softmax of ``x`` along a non-negative ``dim``."""
    shape = ttype(x).sizes
    m = _unreduce(d, d.prims.amax(x, dims=[dim]), shape, [dim])
    s = d.prims.sub(x, m)
    e = d.prims.exp(s)
    z = _unreduce(d, d.prims.sum(e, dims=[dim]), shape, [dim])
    if log:
        return d.prims.sub(s, d.prims.log(z))
    return d.prims.div(e, z)


def _softmax(d: Decomposer, x: SSAValue, dim: int, log: bool, out_dtype: torch.dtype
             ) -> SSAValue:
    """(log-)softmax with float32 statistics for low-precision inputs; any rank."""
    t = ttype(x)
    if t.rank == 0:
        y = _softmax(d, d.prims.reshape(x, shape=[1]), 0, log, out_dtype)
        return d.prims.reshape(y, shape=[])
    y = _softmax_core(d, to_dtype(d, x, compute_dtype(out_dtype)), _dim(dim, t.rank), log)
    return to_dtype(d, y, out_dtype)


# --------------------------------------------------------------------------- linear algebra


@decomposes(N.MatmulOp)
def matmul(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    return d.prims.matmul(a, b)


@decomposes(N.BmmOp)
def bmm(d: Decomposer, a: SSAValue, b: SSAValue) -> SSAValue:
    return d.prims.matmul(a, b)


@decomposes(N.LinearOp)
def linear(d: Decomposer, x: SSAValue, w: SSAValue, bias: SSAValue | None) -> SSAValue:
    return d.prims.linear(x, w, bias)


@decomposes(N.GroupedMmOp)
def grouped_mm(d: Decomposer, a: SSAValue, b: SSAValue, offs: SSAValue) -> SSAValue:
    """Each group's product over the whole grouped dim, its rows (or, for ``[K, M] x
    [M, N]``, its columns of ``a``) outside the group zeroed: ``E`` full products, for a
    fusion executor (the torch executor runs ``torch._grouped_mm``)."""
    p = d.prims
    at, bt, ot = ttype(a), ttype(b), ttype(offs)
    out = _result(N.GroupedMmOp, a, b, offs)
    rows = bt.rank == 3
    m = at.sizes[0] if rows else at.sizes[1]
    pos = p.iota(length=m, start=0, step=1, device=at.dev, dtype=torch.int64)
    ends = to_dtype(d, offs, torch.int64)
    start: SSAValue = p.full(shape=(m,), fill_value=0, device=at.dev, dtype=torch.int64)
    parts: list[SSAValue] = []
    for e in range(ot.sizes[0]):
        at_e = p.full(shape=(1,), fill_value=e, device=at.dev, dtype=torch.int64)
        end = p.broadcast_in_dim(p.take(ends, at_e, dim=0), shape=(m,), broadcast_dims=[0])
        inside = p.logical_and(p.ge(pos, start), p.lt(pos, end))
        start = end
        if rows:  # rows of the product inside the group
            w = p.reshape(p.take(b, at_e, dim=0), shape=bt.sizes[1:])
            keep = p.broadcast_in_dim(inside, shape=out.sizes, broadcast_dims=[0])
            parts.append(p.where(keep, p.matmul(a, w), number_const(d, 0.0)))
        else:  # columns of a inside the group
            keep = p.broadcast_in_dim(inside, shape=at.sizes, broadcast_dims=[1])
            prod = p.matmul(p.where(keep, a, number_const(d, 0.0)), b)
            parts.append(p.reshape(prod, shape=(1, *out.sizes[1:])))
    if not parts:
        return p.full(shape=out.sizes, fill_value=0.0, device=out.dev, dtype=out.dtype)
    if not rows:
        return parts[0] if len(parts) == 1 else p.cat(parts, dim=0)
    total = parts[0]
    for part in parts[1:]:
        total = p.add(total, part)
    return total


# --------------------------------------------------------------------------- convolution


def _taps(d: Decomposer, x: SSAValue, kernel: Sequence[int], stride: Sequence[int],
          dilation: Sequence[int], out: Sequence[int]) -> SSAValue:
    """``[N, C, T, *out]``: one strided slice of the (padded) ``x`` per kernel tap, taps in
    row-major kernel order (``T = prod(kernel)``)."""
    p = d.prims
    sizes = ttype(x).sizes
    taps: list[SSAValue] = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        start = [0, 0, *(o * dl for o, dl in zip(offsets, dilation, strict=True))]
        end = [sizes[0], sizes[1],
               *(a + (m - 1) * st + 1 for a, m, st in zip(start[2:], out, stride, strict=True))]
        tap = p.slice(x, start_indices=start, end_indices=end, strides=[1, 1, *stride])
        taps.append(p.reshape(tap, shape=(sizes[0], sizes[1], 1, *out)))
    return taps[0] if len(taps) == 1 else p.cat(taps, dim=2)


def unfold(d: Decomposer, x: SSAValue, kernel: Sequence[int], stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int]) -> tuple[SSAValue, list[int]]:
    """The patches a convolution multiplies, ``[N, C, T, *out]`` (`_taps` of ``x``
    zero-padded), and the output's spatial sizes."""
    if any(padding):
        x = d.prims.pad(x, padding_value=0.0,
                        padding_config=[(0, 0, 0)] * 2 + [(q, q, 0) for q in padding])
    sizes = ttype(x).sizes
    out = [(sizes[2 + i] - dl * (k - 1) - 1) // st + 1
           for i, (k, st, dl) in enumerate(zip(kernel, stride, dilation, strict=True))]
    return _taps(d, x, kernel, stride, dilation, out), out


@decomposes(N.ConvolutionOp)
def convolution(d: Decomposer, x: SSAValue, w: SSAValue, bias: SSAValue | None,
                stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                groups: int) -> SSAValue:
    """As im2col: the input's patches (`unfold`) times the weight, one product per group,
    plus the bias; float16/bfloat16 accumulate in float32, as torch's kernels do."""
    p = d.prims
    out_t = _result(N.ConvolutionOp, x, w, bias, stride=stride, padding=padding,
                    dilation=dilation, groups=groups)
    xt, wt = ttype(x), ttype(w)
    cd = compute_dtype(out_t.dtype)
    n, c, c_out, kernel, g = xt.sizes[0], xt.sizes[1], wt.sizes[0], wt.sizes[2:], int(groups)
    patches, out = unfold(d, to_dtype(d, x, cd), kernel, stride, padding, dilation)
    taps = (c // g) * math.prod(kernel)
    cols = p.reshape(patches, shape=(n, g, taps, math.prod(out)))
    wg = p.reshape(to_dtype(d, w, cd), shape=(g, c_out // g, taps))
    y = p.reshape(p.matmul(wg, cols), shape=(n, c_out, *out))
    if bias is not None:
        y = p.add(y, p.broadcast_in_dim(to_dtype(d, bias, cd), shape=(n, c_out, *out),
                                        broadcast_dims=[1]))
    return to_dtype(d, y, out_t.dtype)



# --------------------------------------------------------------------------- pooling


@decomposes(N.MaxPool2dWithIndicesOp)
def max_pool2d_with_indices(d: Decomposer, x: SSAValue, kernel_size: Sequence[int],
                            stride: Sequence[int], padding: Sequence[int],
                            dilation: Sequence[int], ceil_mode: bool) -> list[SSAValue]:
    """Each window's taps (`_taps` of ``x`` padded with ``-inf`` as far as the last window
    reaches), their maximum, and the first tap that attains it (torch's kernel keeps the
    first) turned into an index into the input plane."""
    p, lt = d.prims, d.ltorch
    types = N.MaxPool2dWithIndicesOp.infer(
        x.type, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation,
        ceil_mode=ceil_mode)
    assert isinstance(types, list)
    out_t = types[0]
    assert isinstance(out_t, TensorType)
    xt = ttype(x)
    h, w = xt.sizes[2:]
    out = out_t.sizes[2:]
    reach = [(m - 1) * st + dl * (k - 1) + 1
             for m, st, dl, k in zip(out, stride, dilation, kernel_size, strict=True)]
    config = [(q, r - size - q, 0) for q, r, size in zip(padding, reach, (h, w), strict=True)]
    fill = -math.inf if xt.dtype.is_floating_point else torch.iinfo(xt.dtype).min
    xp = p.pad(x, padding_value=fill, padding_config=[(0, 0, 0)] * 2 + config)
    taps = _taps(d, xp, kernel_size, stride, dilation, out)
    values = p.amax(taps, dims=[2])
    tap = p.argmax(taps, dim=2)
    kh = lt.floor_divide(tap, number_const(d, kernel_size[1]))
    kw = lt.sub(tap, lt.mul(kh, number_const(d, kernel_size[1])))
    dev = xt.dev
    rows = p.reshape(p.iota(length=out[0], start=-padding[0], step=stride[0], device=dev,
                            dtype=torch.int64), shape=(1, 1, out[0], 1))
    cols = p.reshape(p.iota(length=out[1], start=-padding[1], step=stride[1], device=dev,
                            dtype=torch.int64), shape=(1, 1, 1, out[1]))
    row = lt.add(rows, lt.mul(kh, number_const(d, dilation[0])))
    col = lt.add(cols, lt.mul(kw, number_const(d, dilation[1])))
    return [values, lt.add(lt.mul(row, number_const(d, w)), col)]

# --------------------------------------------------------------------------- activations


@decomposes(A.ReluOp)
def relu(d: Decomposer, x: SSAValue) -> SSAValue:
    # maximum propagates NaN, as torch.relu does.
    return d.prims.maximum(x, number_const(d, 0))


@decomposes(A.GeluOp)
def gelu(d: Decomposer, x: SSAValue, approximate: str | None = None) -> SSAValue:
    dtype = ttype(x).dtype
    xc = to_dtype(d, x, compute_dtype(dtype))
    half_x = d.prims.mul(xc, number_const(d, 0.5))
    if approximate == "tanh":
        cube = d.prims.mul(d.prims.mul(xc, xc), xc)
        inner = d.prims.add(xc, d.prims.mul(cube, number_const(d, 0.044715)))
        inner = d.prims.mul(inner, number_const(d, math.sqrt(2.0 / math.pi)))
        y = d.prims.mul(half_x, d.prims.add(d.prims.tanh(inner), number_const(d, 1.0)))
    else:
        erf = d.prims.erf(d.prims.mul(xc, number_const(d, 1.0 / math.sqrt(2.0))))
        y = d.prims.mul(half_x, d.prims.add(erf, number_const(d, 1.0)))
    return to_dtype(d, y, dtype)


@decomposes(A.SoftplusOp)
def softplus(d: Decomposer, x: SSAValue, beta: float = 1.0, threshold: float = 20.0
             ) -> SSAValue:
    """``x`` where ``beta x > threshold``, else ``log1p(exp(beta x)) / beta`` (eager's
    kernel, in the accumulation dtype)."""
    p = d.prims
    dtype = ttype(x).dtype
    xc = to_dtype(d, x, compute_dtype(dtype))
    bx = p.mul(xc, number_const(d, beta))
    soft = p.div(p.log1p(p.exp(bx)), number_const(d, beta))
    return to_dtype(d, p.where(p.gt(bx, number_const(d, threshold)), xc, soft), dtype)


def _shifted_relu6(d: Decomposer, xc: SSAValue) -> SSAValue:
    """``min(max(x + 3, 0), 6)``, the clamp hardswish and hardsigmoid share (eager's
    kernels), on a tensor in its compute dtype."""
    p = d.prims
    return p.minimum(p.maximum(p.add(xc, number_const(d, 3.0)), number_const(d, 0.0)),
                     number_const(d, 6.0))


@decomposes(A.HardswishOp)
def hardswish(d: Decomposer, x: SSAValue) -> SSAValue:
    """``x * min(max(x + 3, 0), 6) / 6``, in the accumulation dtype."""
    dtype = ttype(x).dtype
    xc = to_dtype(d, x, compute_dtype(dtype))
    p = d.prims
    return to_dtype(d, p.div(p.mul(xc, _shifted_relu6(d, xc)), number_const(d, 6.0)), dtype)


@decomposes(A.HardsigmoidOp)
def hardsigmoid(d: Decomposer, x: SSAValue) -> SSAValue:
    """``min(max(x + 3, 0), 6) / 6``, in the accumulation dtype."""
    dtype = ttype(x).dtype
    xc = to_dtype(d, x, compute_dtype(dtype))
    return to_dtype(d, d.prims.div(_shifted_relu6(d, xc), number_const(d, 6.0)), dtype)


def _sigmoid(d: Decomposer, x: SSAValue) -> SSAValue:
    """``1 / (1 + exp(-x))`` on a float tensor."""
    return d.prims.reciprocal(d.prims.add(d.prims.exp(d.prims.neg(x)), number_const(d, 1.0)))


@decomposes(A.SiluOp)
def silu(d: Decomposer, x: SSAValue) -> SSAValue:
    dtype = ttype(x).dtype
    xc = to_dtype(d, x, compute_dtype(dtype))
    return to_dtype(d, d.prims.mul(xc, _sigmoid(d, xc)), dtype)


@decomposes(A.SiluBackwardOp)
def silu_backward(d: Decomposer, grad_output: SSAValue, x: SSAValue) -> SSAValue:
    """``dy * s * (1 + x (1 - s))``, ``s = sigmoid(x)``, in the accumulation dtype."""
    dtype = _result(A.SiluBackwardOp, grad_output, x).dtype
    acc = compute_dtype(dtype)
    xc, dy = to_dtype(d, x, acc), to_dtype(d, grad_output, acc)
    s = _sigmoid(d, xc)
    one = number_const(d, 1.0)
    ds = d.prims.mul(s, d.prims.add(d.prims.mul(xc, d.prims.sub(one, s)), one))
    return to_dtype(d, d.prims.mul(dy, ds), dtype)


@decomposes(A.ThresholdBackwardOp)
def threshold_backward(d: Decomposer, grad_output: SSAValue, x: SSAValue, threshold: float
                       ) -> SSAValue:
    """``where(x <= threshold, 0, dy)`` (a NaN input passes the gradient, as torch's)."""
    dtype = _result(A.ThresholdBackwardOp, grad_output, x, threshold=threshold).dtype
    lt = d.ltorch
    return to_dtype(d, lt.where(lt.le(x, number_const(d, threshold)), number_const(d, 0.0),
                                grad_output), dtype)


@decomposes(A.SigmoidOp)
def sigmoid(d: Decomposer, x: SSAValue) -> SSAValue:
    out_dtype = _result(A.SigmoidOp, x).dtype  # ints promote to the default float dtype
    return to_dtype(d, _sigmoid(d, to_dtype(d, x, compute_dtype(out_dtype))), out_dtype)


# --------------------------------------------------------------------------- softmax


@decomposes(N.SoftmaxOp)
def softmax(d: Decomposer, x: SSAValue, dim: int, dtype: torch.dtype | None = None
            ) -> SSAValue:
    return _softmax(d, x, dim, False, dtype or ttype(x).dtype)


@decomposes(N.LogSoftmaxOp)
def log_softmax(d: Decomposer, x: SSAValue, dim: int, dtype: torch.dtype | None = None
                ) -> SSAValue:
    return _softmax(d, x, dim, True, dtype or ttype(x).dtype)


@decomposes(N.SafeSoftmaxOp)
def safe_softmax(d: Decomposer, x: SSAValue, dim: int, dtype: torch.dtype | None = None
                 ) -> SSAValue:
    """Softmax, then zeros along the rows whose every element is ``-inf``."""
    t = ttype(x)
    y = _softmax(d, x, dim, False, dtype or t.dtype)
    if t.rank == 0:
        return d.prims.where(d.prims.eq(x, number_const(d, -math.inf)), number_const(d, 0.0), y)
    dim = _dim(dim, t.rank)
    empty = d.prims.eq(d.prims.amax(x, dims=[dim]), number_const(d, -math.inf))
    return d.prims.where(_unreduce(d, empty, t.sizes, [dim]), number_const(d, 0.0), y)


# --------------------------------------------------------------------------- dropout


_SELU_ALPHA = 1.7580993408473766
"""ATen's alpha for alpha dropout (SELU's ``alpha * scale``)."""


def dropout_family(d: Decomposer, x: SSAValue, p: float, train: bool, *, feature: bool,
                   alpha: bool) -> SSAValue:
    """ATen's ``_dropout_impl``, step for step: the same draw (``bernoulli_(1 - p)`` of the
    input's shape, or ``(N, C, 1, ...)`` for the feature kinds) and the same arithmetic, so
    results equal eager's bit for bit given the same generator state."""
    t = ttype(x)
    p = float(p)
    if not train or p == 0.0 or t.numel() == 0:
        return x
    if p == 1.0:
        return d.prims.mul(x, number_const(d, 0.0))
    if feature:  # one draw per (sample, channel), in a fresh contiguous tensor
        noise = d.prims.bernoulli(shape=(*t.sizes[:2], *(1,) * (t.rank - 2)), p=1.0 - p,
                                  device=t.dev, dtype=t.dtype)
    else:  # empty_like(input): drawn in the input's own memory order
        noise = d.prims.bernoulli_like(x, p=1.0 - p)
    b = None
    if alpha:
        a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p))
        b = d.prims.add(d.prims.mul(d.prims.add(noise, number_const(d, -1.0)),
                                    number_const(d, _SELU_ALPHA * a)),
                        number_const(d, _SELU_ALPHA * a * p))
        noise = d.prims.mul(noise, number_const(d, a))
    else:
        noise = d.prims.div(noise, number_const(d, 1.0 - p))
    out = d.prims.mul(x, expand_to(d, noise, t.sizes))
    if b is not None:
        out = d.prims.add(out, expand_to(d, b, t.sizes))
    return out


for _op in (N.DropoutOp, N.FeatureDropoutOp, N.AlphaDropoutOp, N.FeatureAlphaDropoutOp):
    def _rule(d: Decomposer, x: SSAValue, p: float, train: bool,
              _op: type[N.DropoutFamilyOp] = _op) -> SSAValue:
        return dropout_family(d, x, p, train, feature=_op.FEATURE, alpha=_op.ALPHA)

    decomposes(_op)(_rule)


# --------------------------------------------------------------------------- normalization


def _norm_dims(name: str, x: TensorType, normalized_shape: Sequence[int]) -> list[int]:
    k = len(normalized_shape)
    if k == 0 or tuple(x.sizes[x.rank - k:]) != tuple(normalized_shape):
        raise ShapeError(f"{name}: normalized_shape {tuple(normalized_shape)} does not end "
                         f"the input shape {x.sizes}")
    return list(range(x.rank - k, x.rank))


def _affine(d: Decomposer, y: SSAValue, weight: SSAValue | None, bias: SSAValue | None
            ) -> SSAValue:
    t = ttype(y)
    if weight is not None:
        y = d.prims.mul(y, expand_to(d, to_dtype(d, weight, t.dtype), t.sizes))
    if bias is not None:
        y = d.prims.add(y, expand_to(d, to_dtype(d, bias, t.dtype), t.sizes))
    return y


def _layer_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None, bias: SSAValue | None,
                normalized_shape: Sequence[int], eps: float | None, out_dtype: torch.dtype
                ) -> tuple[SSAValue, SSAValue, SSAValue]:
    """``(y, mean, rstd)``, the statistics reduced over the normalized dims."""
    t = ttype(x)
    dims = _norm_dims(N.LayerNormOp.name, t, normalized_shape)
    n = math.prod(normalized_shape)
    xc = to_dtype(d, x, compute_dtype(out_dtype))
    count = number_const(d, count_number(n))  # symbolic: no guard fixing the length
    mean = d.prims.div(d.prims.sum(xc, dims=dims), count)
    diff = d.prims.sub(xc, _unreduce(d, mean, t.sizes, dims))
    var = d.prims.div(d.prims.sum(d.prims.mul(diff, diff), dims=dims), count)
    eps = 1e-5 if eps is None else float(eps)
    rstd = d.prims.rsqrt(d.prims.add(var, number_const(d, eps)))
    y = _affine(d, d.prims.mul(diff, _unreduce(d, rstd, t.sizes, dims)), weight, bias)
    return to_dtype(d, y, out_dtype), mean, rstd


@decomposes(N.LayerNormOp)
def layer_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None, bias: SSAValue | None,
               normalized_shape: Sequence[int], eps: float | None = None) -> SSAValue:
    out = _result(N.LayerNormOp, x, weight, bias, normalized_shape=normalized_shape, eps=eps)
    return _layer_norm(d, x, weight, bias, normalized_shape, eps, out.dtype)[0]


@decomposes(N.NativeLayerNormOp)
def native_layer_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, normalized_shape: Sequence[int], eps: float
                      ) -> list[SSAValue]:
    """Layer norm, and its statistics reshaped with the normalized dims kept as 1s."""
    types = N.NativeLayerNormOp.infer(*[None if v is None else v.type for v in (x, weight, bias)],
                                      normalized_shape=normalized_shape, eps=eps)
    assert isinstance(types, list)
    out, mean_t, rstd_t = types
    assert isinstance(out, TensorType) and isinstance(mean_t, TensorType) \
        and isinstance(rstd_t, TensorType)
    y, mean, rstd = _layer_norm(d, x, weight, bias, normalized_shape, eps, out.dtype)
    return [y, to_dtype(d, d.prims.reshape(mean, shape=mean_t.sizes), mean_t.dtype),
            to_dtype(d, d.prims.reshape(rstd, shape=rstd_t.sizes), rstd_t.dtype)]


def per_channel(d: Decomposer, v: SSAValue, rank: int) -> SSAValue:
    """A per-channel ``[C]`` value shaped to broadcast over ``[N, C, *spatial]``."""
    c = ttype(v).sizes[0]
    return d.ltorch.reshape(v, shape=(1, c, *([1] * (rank - 2))))


@decomposes(N.NativeGroupNormOp)
def native_group_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, N: int, C: int, HxW: int, group: int, eps: float
                      ) -> list[SSAValue]:
    """``(x - mean) / sqrt(var + eps)`` over each group of ``C / group`` channels (the
    biased variance), then ``weight`` and ``bias`` per channel; the statistics are
    ``[N, group]``."""
    lt = d.ltorch
    xt = ttype(x)
    xg = lt.reshape(x, shape=(N, group, C // group * HxW))
    mean = lt.mean(xg, dim=(2,))
    diff = lt.sub(xg, lt.unsqueeze(mean, dim=2))
    rstd = lt.rsqrt(lt.add(lt.mean(lt.mul(diff, diff), dim=(2,)), number_const(d, float(eps))))
    y = lt.reshape(lt.mul(diff, lt.unsqueeze(rstd, dim=2)), shape=xt.sizes)
    if weight is not None:
        y = lt.mul(y, per_channel(d, weight, xt.rank))
    if bias is not None:
        y = lt.add(y, per_channel(d, bias, xt.rank))
    return [y, mean, rstd]


@decomposes(N.NativeBatchNormOp)
def native_batch_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, running_mean: SSAValue | None,
                      running_var: SSAValue | None, training: bool, momentum: float,
                      eps: float) -> list[SSAValue]:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per channel, over every other dim:
    in training the batch's mean and biased variance (returned with ``1 / sqrt(var +
    eps)``, and the running statistics moved by ``momentum``, the variance unbiased, as
    torch updates them), in evaluation the running statistics."""
    lt = d.ltorch
    xt = ttype(x)
    dims = (0, *range(2, xt.rank))
    mean = var = invstd = None
    if training:
        mean = lt.mean(x, dim=dims)
        diff = lt.sub(x, per_channel(d, mean, xt.rank))
        var = lt.mean(lt.mul(diff, diff), dim=dims)
        invstd = lt.rsqrt(lt.add(var, number_const(d, float(eps))))
        y = lt.mul(diff, per_channel(d, invstd, xt.rank))
    else:
        assert running_mean is not None and running_var is not None
        scale = lt.rsqrt(lt.add(running_var, number_const(d, float(eps))))
        y = lt.mul(lt.sub(x, per_channel(d, running_mean, xt.rank)),
                   per_channel(d, scale, xt.rank))
    if weight is not None:
        y = lt.mul(y, per_channel(d, weight, xt.rank))
    if bias is not None:
        y = lt.add(y, per_channel(d, bias, xt.rank))
    if not training:
        return [y]
    assert mean is not None and var is not None and invstd is not None
    results = [y, mean, invstd]
    if running_mean is not None and running_var is not None:
        m, count = float(momentum), math.prod(xt.sizes) // xt.sizes[1]
        unbiased = lt.mul(var, number_const(d, count / max(count - 1, 1)))
        results += [lt.add(lt.mul(running_mean, number_const(d, 1.0 - m)),
                           lt.mul(mean, number_const(d, m))),
                    lt.add(lt.mul(running_var, number_const(d, 1.0 - m)),
                           lt.mul(unbiased, number_const(d, m)))]
    return results


@decomposes(N.RmsNormOp)
def rms_norm(d: Decomposer, x: SSAValue, weight: SSAValue | None,
             normalized_shape: Sequence[int], eps: float | None = None) -> SSAValue:
    out = _result(N.RmsNormOp, x, weight, normalized_shape=normalized_shape, eps=eps)
    t = ttype(x)
    dims = _norm_dims(N.RmsNormOp.name, t, normalized_shape)
    n = math.prod(normalized_shape)
    eps = torch.finfo(compute_dtype(t.dtype)).eps if eps is None else float(eps)
    xc = to_dtype(d, x, compute_dtype(out.dtype))
    ms = d.prims.div(d.prims.sum(d.prims.mul(xc, xc), dims=dims), number_const(d, count_number(n)))
    r = d.prims.rsqrt(d.prims.add(ms, number_const(d, eps)))
    y = d.prims.mul(xc, _unreduce(d, r, t.sizes, dims))
    return to_dtype(d, _affine(d, y, weight, None), out.dtype)


# --------------------------------------------------------------------------- embedding


@decomposes(N.EmbeddingOp)
def embedding(d: Decomposer, idx: SSAValue, weight: SSAValue, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float | None = None,
              scale_grad_by_freq: bool | None = None, sparse: bool | None = None) -> SSAValue:
    if max_norm is not None:
        raise ShapeError(f"{N.EmbeddingOp.name}: max_norm is not supported")
    it, wt = ttype(idx), ttype(weight)
    flat = idx if it.rank == 1 else d.prims.reshape(idx, shape=[it.numel()])
    rows = d.prims.take(weight, flat, dim=0)
    shape = [*it.sizes, *wt.sizes[1:]]
    return rows if it.rank == 1 else d.prims.reshape(rows, shape=shape)


# --------------------------------------------------------------------------- attention


def _repeat_heads(d: Decomposer, v: SSAValue, rep: int) -> SSAValue:
    """``repeat_interleave(v, rep, dim=-3)`` with reshape and broadcast."""
    s = ttype(v).sizes
    lead, h = list(s[:-3]), s[-3]
    x = d.prims.reshape(v, shape=[*lead, h, 1, s[-2], s[-1]])
    x = d.prims.broadcast_in_dim(x, shape=(*lead, h, rep, s[-2], s[-1]),
                                 broadcast_dims=list(range(len(s) + 1)))
    return d.prims.reshape(x, shape=[*lead, h * rep, s[-2], s[-1]])


def _causal_mask(d: Decomposer, length: int, source: int, device: str) -> SSAValue:
    """``ones(L, S).tril()`` as a bool tensor: query ``i`` sees keys ``j <= i``."""
    shape = (length, source)
    row = d.prims.iota(length=length, start=0, step=1, device=device, dtype=torch.int64)
    col = d.prims.iota(length=source, start=0, step=1, device=device, dtype=torch.int64)
    row = d.prims.broadcast_in_dim(row, shape=shape, broadcast_dims=[0])
    col = d.prims.broadcast_in_dim(col, shape=shape, broadcast_dims=[1])
    return d.prims.ge(row, col)


@decomposes(N.ScaledDotProductAttentionOp)
def scaled_dot_product_attention(
        d: Decomposer, q: SSAValue, k: SSAValue, v: SSAValue, attn_mask: SSAValue | None,
        dropout_p: float | None = None, is_causal: bool | None = None,
        scale: float | None = None, enable_gqa: bool | None = None) -> SSAValue:
    if dropout_p:
        raise ShapeError(f"{N.ScaledDotProductAttentionOp.name}: dropout_p={dropout_p} has no "
                         "decomposition (eager draws it inside ATen's kernel, which the torch "
                         "executor calls)")
    out = _result(N.ScaledDotProductAttentionOp, q, k, v, attn_mask, dropout_p=dropout_p,
                  is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    qt, kt = ttype(q), ttype(k)
    cd = compute_dtype(qt.dtype)
    if enable_gqa and qt.rank >= 3 and qt.sizes[-3] != kt.sizes[-3]:
        rep = qt.sizes[-3] // kt.sizes[-3]
        k, v = _repeat_heads(d, k, rep), _repeat_heads(d, v, rep)
        kt = ttype(k)
    scale = 1.0 / math.sqrt(qt.sizes[-1]) if scale is None else float(scale)
    qc, kc, vc = (to_dtype(d, x, cd) for x in (q, k, v))
    perm = [*range(kt.rank - 2), kt.rank - 1, kt.rank - 2]
    scores = d.prims.matmul(qc, d.prims.transpose(kc, permutation=perm))
    scores = d.prims.mul(scores, number_const(d, scale))
    length, source = qt.sizes[-2], kt.sizes[-2]
    masks: list[SSAValue] = []
    if is_causal:
        masks.append(_causal_mask(d, length, source, qt.dev))
    if attn_mask is not None:
        masks.append(attn_mask)
    if masks:
        shape = tuple(broadcast_shapes(N.ScaledDotProductAttentionOp.name, ttype(scores).sizes,
                                       *(ttype(m).sizes for m in masks)))
        scores = expand_to(d, scores, shape)
        for m in masks:
            if ttype(m).dtype == torch.bool:
                scores = d.prims.where(expand_to(d, m, shape), scores, number_const(d, -math.inf))
            else:
                scores = d.prims.add(scores, expand_to(d, to_dtype(d, m, cd), shape))
    probs = _softmax_core(d, scores, ttype(scores).rank - 1, log=False)
    return to_dtype(d, d.prims.matmul(probs, vc), out.dtype)


# --------------------------------------------------------------------------- losses


def _reduce(d: Decomposer, loss: SSAValue, reduction: str, denom: SSAValue | None
            ) -> SSAValue:
    """Applies ``reduction``; ``mean`` divides the sum by ``denom`` (default: numel)."""
    if reduction == "none":
        return loss
    total = _sum_all(d, loss)
    if reduction == "sum":
        return total
    if denom is None:
        denom = number_const(d, count_number(ttype(loss).numel()))
    return d.prims.div(total, denom)


def _channel_weight(d: Decomposer, w: SSAValue, shape: Sequence[int], cdim: int
                    ) -> SSAValue:
    """A per-class weight of shape (C,) broadcast along the class dim of ``shape``."""
    return d.prims.broadcast_in_dim(w, shape=tuple(shape), broadcast_dims=[cdim])


@decomposes(N.CrossEntropyOp)
def cross_entropy(d: Decomposer, x: SSAValue, target: SSAValue, weight: SSAValue | None,
                  size_average: bool | None = None, ignore_index: int | None = None,
                  reduce: bool | None = None, reduction: str | None = None,
                  label_smoothing: float | None = None) -> SSAValue:
    red = N.legacy_reduction(reduction, size_average, reduce)
    out = _result(N.CrossEntropyOp, x, target, weight, ignore_index=ignore_index,
                  reduction=red, label_smoothing=label_smoothing)
    xt = ttype(x)
    cd = compute_dtype(xt.dtype)
    cdim = 1 if xt.rank >= 2 else 0
    classes = xt.sizes[cdim]
    ls = float(label_smoothing or 0.0)
    logp = _softmax_core(d, to_dtype(d, x, cd), cdim, log=True)
    w = None if weight is None else to_dtype(d, weight, cd)
    if is_float(ttype(target).dtype):
        loss = _ce_probabilities(d, logp, to_dtype(d, target, cd), w, cdim, classes, ls, red)
    else:
        ignore = -100 if ignore_index is None else ignore_index
        loss = _ce_indices(d, logp, target, w, cdim, classes, ls, red, ignore)
    return to_dtype(d, loss, out.dtype)


def _targets(d: Decomposer, target: SSAValue, w: SSAValue | None, ignore: int,
             dtype: torch.dtype) -> tuple[SSAValue, SSAValue, SSAValue | None, SSAValue]:
    """``(valid, safe, wt, total)`` of class-index targets: which are not ignored, the
    targets with ignored ones at class 0, each target's class weight (``None`` without
    weights) and ``nll_loss``'s total weight (the unignored targets' summed weights, or
    their count)."""
    tt = ttype(target)
    valid = d.prims.ne(target, number_const(d, ignore))
    safe = d.prims.where(valid, target, number_const(d, 0))  # ignored entries index class 0
    if w is None:
        return valid, safe, None, _sum_all(
            d, d.prims.convert_element_type(valid, dtype=dtype))
    wt = d.prims.take(w, d.prims.reshape(safe, shape=[tt.numel()]), dim=0)
    wt = d.prims.reshape(wt, shape=list(tt.sizes))
    return valid, safe, wt, _sum_all(d, d.prims.where(valid, wt, number_const(d, 0.0)))


def _ce_indices(d: Decomposer, logp: SSAValue, target: SSAValue, w: SSAValue | None,
                cdim: int, classes: int, ls: float, red: str, ignore: int) -> SSAValue:
    """Cross entropy with class-index targets (torch's ``nll_loss`` + label smoothing)."""
    tt, lt = ttype(target), ttype(logp)
    valid, safe, wt, total = _targets(d, target, w, ignore, lt.dtype)
    idx = d.prims.reshape(safe, shape=[*tt.sizes[:cdim], 1, *tt.sizes[cdim:]])
    picked = d.prims.squeeze(d.prims.gather(logp, idx, dim=cdim), dims=[cdim])
    nll = d.prims.neg(picked)
    if wt is not None:
        nll = d.prims.mul(nll, wt)
    denom = total if red == "mean" else None
    zero = number_const(d, 0.0)
    loss = _reduce(d, d.prims.where(valid, nll, zero), red, denom)
    if ls == 0.0:
        return loss
    terms = logp if w is None else d.prims.mul(logp, _channel_weight(d, w, lt.sizes, cdim))
    smooth = d.prims.neg(d.prims.sum(terms, dims=[cdim]))
    smooth = _reduce(d, d.prims.where(valid, smooth, zero), red, denom)
    return d.prims.add(d.prims.mul(loss, number_const(d, 1.0 - ls)),
                       d.prims.mul(smooth, number_const(d, ls / classes)))


@decomposes(N.NllLossForwardOp)
def nll_loss_forward(d: Decomposer, logp: SSAValue, target: SSAValue, weight: SSAValue | None,
                     reduction: str | None = None, ignore_index: int | None = None
                     ) -> list[SSAValue]:
    """`_ce_indices` without smoothing, and the total weight (zero for ``"none"`` on a
    batch)."""
    types = N.NllLossForwardOp.infer(*[None if v is None else v.type
                                       for v in (logp, target, weight)],
                                     reduction=reduction, ignore_index=ignore_index)
    assert isinstance(types, list)
    out, total_t = types
    assert isinstance(out, TensorType) and isinstance(total_t, TensorType)
    red = reduction or "mean"
    lt = ttype(logp)
    cd = compute_dtype(lt.dtype)
    cdim = 1 if lt.rank >= 2 else 0
    ignore = -100 if ignore_index is None else ignore_index
    w = None if weight is None else to_dtype(d, weight, cd)
    loss = _ce_indices(d, to_dtype(d, logp, cd), target, w, cdim, lt.sizes[cdim], 0.0, red,
                       ignore)
    if red == "none" and lt.rank == 2:  # ATen's batched "none" leaves it zero
        total = d.prims.full(shape=(), fill_value=0.0, device=total_t.dev, dtype=cd)
    else:
        total = _targets(d, target, w, ignore, cd)[3]
    return [to_dtype(d, loss, out.dtype), to_dtype(d, total, total_t.dtype)]


def _ce_probabilities(d: Decomposer, logp: SSAValue, target: SSAValue, w: SSAValue | None,
                      cdim: int, classes: int, ls: float, red: str) -> SSAValue:
    """Cross entropy with class-probability targets of the input's shape."""
    lt = ttype(logp)
    if ls > 0.0:
        target = d.prims.add(d.prims.mul(target, number_const(d, 1.0 - ls)),
                             number_const(d, ls / classes))
    terms = d.prims.mul(logp, target)
    if w is not None:
        terms = d.prims.mul(terms, _channel_weight(d, w, lt.sizes, cdim))
    loss = d.prims.neg(d.prims.sum(terms, dims=[cdim]))
    return _reduce(d, loss, red, number_const(d, count_number(lt.numel() // max(classes, 1))))


@decomposes(N.MseLossOp)
def mse_loss(d: Decomposer, x: SSAValue, target: SSAValue, weight: SSAValue | None,
             size_average: bool | None = None, reduce: bool | None = None,
             reduction: str | None = None) -> SSAValue:
    red = N.legacy_reduction(reduction, size_average, reduce)
    out = _result(N.MseLossOp, x, target, weight, reduction=red)
    cd = compute_dtype(out.dtype)
    shape = tuple(broadcast_shapes(N.MseLossOp.name, ttype(x).sizes, ttype(target).sizes))
    a = expand_to(d, to_dtype(d, x, cd), shape)
    b = expand_to(d, to_dtype(d, target, cd), shape)
    diff = d.prims.sub(a, b)
    sq = d.prims.mul(diff, diff)
    denom = None
    if weight is not None:
        wc = to_dtype(d, weight, cd)
        sq = d.prims.mul(sq, expand_to(d, wc, shape))
        denom = _sum_all(d, wc)
    return to_dtype(d, _reduce(d, sq, red, denom), out.dtype)
