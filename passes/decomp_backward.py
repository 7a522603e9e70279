"""Decompositions of the backward kernels that VJP rules emit (``ltorch.gelu_backward``,
``softplus_backward``, ``softmax_backward``, ``log_softmax_backward``, ``layer_norm_backward``,
``embedding_backward``, ``nll_loss_backward``, ``convolution_backward``,
``native_batch_norm_backward``, ``max_pool2d_with_indices_backward``; ``silu_backward``
sits beside silu in `thunder_ir.passes.decomp_nn`).

The torch executor runs each as eager's own backward kernel; a fusion executor gets these
prims instead. The rules are written with ``d.ltorch`` (other ops' rules, inlined: torch's
broadcasting and promotion) in the accumulation dtype (float32 for float16/bfloat16), and
end in the op's exact result type.
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
from thunder_ir.dialects.symbols import count_number
from thunder_ir.dialects.types import TensorType, compute_dtype, ttype
from thunder_ir.passes.decomp_nn import number_const, per_channel, unfold
from thunder_ir.passes.decompositions import Decomposer, decomposes
from thunder_ir.passes.promotion import to_dtype


def _types(op: type[N.NNOp], *operands: Any, **params: Any) -> list[TensorType]:
    """The result types of ``op`` on these operands (its cached shape rule)."""
    out = op.infer(*[None if v is None else v.type for v in operands], **params)
    return list(out) if isinstance(out, list) else [out]  # type: ignore[list-item]


@decomposes(A.GeluBackwardOp)
def gelu_backward(d: Decomposer, dy: SSAValue, x: SSAValue, approximate: str | None = None
                  ) -> SSAValue:
    """``dy * (Φ(x) + x φ(x))``; with ``approximate="tanh"``, the derivative of
    ``x/2 (1 + tanh(β (x + κ x³)))``."""
    (out,) = _types(A.GeluBackwardOp, dy, x, approximate=approximate)
    lt = d.ltorch
    cd = compute_dtype(out.dtype)
    xc, g = to_dtype(d, x, cd), to_dtype(d, dy, cd)
    one = number_const(d, 1.0)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        x2 = lt.mul(xc, xc)
        inner = lt.mul(lt.mul(xc, lt.add(lt.mul(x2, number_const(d, kappa)), one)),
                       number_const(d, beta))
        th = lt.tanh(inner)
        left = lt.mul(lt.add(th, one), number_const(d, 0.5))
        dinner = lt.mul(lt.add(lt.mul(x2, number_const(d, 3.0 * kappa)), one),
                        number_const(d, beta))
        right = lt.mul(lt.mul(lt.mul(xc, number_const(d, 0.5)), lt.sub(one, lt.mul(th, th))),
                       dinner)
        deriv = lt.add(left, right)
    else:
        cdf = lt.mul(lt.add(lt.erf(lt.mul(xc, number_const(d, 1.0 / math.sqrt(2.0)))), one),
                     number_const(d, 0.5))
        pdf = lt.mul(lt.exp(lt.mul(lt.mul(xc, xc), number_const(d, -0.5))),
                     number_const(d, 1.0 / math.sqrt(2.0 * math.pi)))
        deriv = lt.add(cdf, lt.mul(xc, pdf))
    return to_dtype(d, lt.mul(g, deriv), out.dtype)


@decomposes(A.SoftplusBackwardOp)
def softplus_backward(d: Decomposer, dy: SSAValue, x: SSAValue, beta: float, threshold: float
                      ) -> SSAValue:
    """``dy`` where ``beta x > threshold``, else ``dy z / (z + 1)`` with ``z = exp(beta
    x)`` (eager's kernel)."""
    (out,) = _types(A.SoftplusBackwardOp, dy, x, beta=beta, threshold=threshold)
    lt = d.ltorch
    cd = compute_dtype(out.dtype)
    xc, g = to_dtype(d, x, cd), to_dtype(d, dy, cd)
    bx = lt.mul(xc, number_const(d, beta))
    z = lt.exp(bx)
    soft = lt.div(lt.mul(g, z), lt.add(z, number_const(d, 1.0)))
    return to_dtype(d, lt.where(lt.gt(bx, number_const(d, threshold)), g, soft), out.dtype)


@decomposes(A.HardswishBackwardOp)
def hardswish_backward(d: Decomposer, dy: SSAValue, x: SSAValue) -> SSAValue:
    """0 where ``x <= -3``, ``dy (x / 3 + 1/2)`` where ``x < 3``, else ``dy`` (eager's
    kernel; a NaN input gives ``dy``, as its comparisons do)."""
    (out,) = _types(A.HardswishBackwardOp, dy, x)
    lt = d.ltorch
    cd = compute_dtype(out.dtype)
    xc, g = to_dtype(d, x, cd), to_dtype(d, dy, cd)
    mid = lt.mul(g, lt.add(lt.div(xc, number_const(d, 3.0)), number_const(d, 0.5)))
    inner = lt.where(lt.lt(xc, number_const(d, 3.0)), mid, g)
    zero = number_const(d, 0.0)
    return to_dtype(d, lt.where(lt.le(xc, number_const(d, -3.0)), zero, inner), out.dtype)


@decomposes(A.HardsigmoidBackwardOp)
def hardsigmoid_backward(d: Decomposer, dy: SSAValue, x: SSAValue) -> SSAValue:
    """``dy / 6`` where ``-3 < x < 3``, else 0: eager's kernel multiplies by ``1 / 6`` as a
    float32 constant, in every dtype."""
    (out,) = _types(A.HardsigmoidBackwardOp, dy, x)
    lt = d.ltorch
    cd = compute_dtype(out.dtype)
    xc, g = to_dtype(d, x, cd), to_dtype(d, dy, cd)
    inside = lt.logical_and(lt.gt(xc, number_const(d, -3.0)), lt.lt(xc, number_const(d, 3.0)))
    sixth = lt.mul(g, number_const(d, _SIXTH_F32))
    return to_dtype(d, lt.where(inside, sixth, number_const(d, 0.0)), out.dtype)


_SIXTH_F32 = float(torch.tensor(1 / 6, dtype=torch.float32))


@decomposes(N.NativeGroupNormBackwardOp)
def native_group_norm_backward(d: Decomposer, dy: SSAValue, x: SSAValue, mean: SSAValue,
                               rstd: SSAValue, weight: SSAValue | None, N: int, C: int,
                               HxW: int, group: int, output_mask: Sequence[int]
                               ) -> list[SSAValue]:
    """Per group of ``D = C / group`` channels, with ``x̂ = (x - mean) rstd`` and ``ĝ = dy
    weight``: ``dx = rstd (ĝ - mean(ĝ) - x̂ mean(ĝ x̂))``, ``dweight = Σ dy x̂`` and
    ``dbias = Σ dy`` over the batch and the spatial positions."""
    lt = d.ltorch
    shape = (N, group, C // group, HxW)
    xg, g = lt.reshape(x, shape=shape), lt.reshape(dy, shape=shape)
    r = lt.reshape(rstd, shape=(N, group, 1, 1))
    xhat = lt.mul(lt.sub(xg, lt.reshape(mean, shape=(N, group, 1, 1))), r)
    outs: list[SSAValue] = []
    if output_mask[0]:
        gw = g if weight is None else lt.mul(
            g, lt.reshape(weight, shape=(1, group, C // group, 1)))
        centered = lt.sub(gw, lt.mean(gw, dim=(2, 3), keepdim=True))
        proj = lt.mul(xhat, lt.mean(lt.mul(gw, xhat), dim=(2, 3), keepdim=True))
        outs.append(lt.reshape(lt.mul(r, lt.sub(centered, proj)), shape=ttype(x).sizes))
    if output_mask[1]:
        outs.append(lt.reshape(lt.sum(lt.mul(g, xhat), dim=(0, 3)), shape=(C,)))
    if output_mask[2]:
        outs.append(lt.reshape(lt.sum(g, dim=(0, 3)), shape=(C,)))
    return outs


def _softmax_backward(d: Decomposer, op: type[N.NNOp], dy: SSAValue, y: SSAValue, dim: int,
                      input_dtype: torch.dtype, log: bool) -> SSAValue:
    (out,) = _types(op, dy, y, dim=dim, input_dtype=input_dtype)
    lt = d.ltorch
    cd = compute_dtype(ttype(y).dtype)
    yc, g = to_dtype(d, y, cd), to_dtype(d, dy, cd)
    if log:  # dy - exp(y) sum(dy)
        dx = lt.sub(g, lt.mul(lt.exp(yc), lt.sum(g, dim=(dim,), keepdim=True)))
    else:  # y (dy - sum(dy y))
        dx = lt.mul(yc, lt.sub(g, lt.sum(lt.mul(g, yc), dim=(dim,), keepdim=True)))
    return to_dtype(d, dx, out.dtype)


@decomposes(N.SoftmaxBackwardOp)
def softmax_backward(d: Decomposer, dy: SSAValue, y: SSAValue, dim: int,
                     input_dtype: torch.dtype) -> SSAValue:
    return _softmax_backward(d, N.SoftmaxBackwardOp, dy, y, dim, input_dtype, log=False)


@decomposes(N.LogSoftmaxBackwardOp)
def log_softmax_backward(d: Decomposer, dy: SSAValue, y: SSAValue, dim: int,
                         input_dtype: torch.dtype) -> SSAValue:
    return _softmax_backward(d, N.LogSoftmaxBackwardOp, dy, y, dim, input_dtype, log=True)


@decomposes(N.LayerNormBackwardOp)
def layer_norm_backward(d: Decomposer, dy: SSAValue, x: SSAValue, weight: SSAValue | None,
                        bias: SSAValue | None, mean: SSAValue | None, rstd: SSAValue | None,
                        normalized_shape: Sequence[int], output_mask: Sequence[int],
                        eps: float | None = None) -> list[SSAValue]:
    """With ``x̂ = (x - mean) rstd`` (the statistics given, or recomputed from ``x``) and
    ``gy = dy weight``: ``dx = rstd (gy - mean(gy) - x̂ mean(gy x̂))``,
    ``dweight = sum(dy x̂)``, ``dbias = sum(dy)`` over the leading dims."""
    types = _types(N.LayerNormBackwardOp, dy, x, weight, bias, mean, rstd,
                   normalized_shape=normalized_shape, output_mask=output_mask, eps=eps)
    lt = d.ltorch
    xt = ttype(x)
    k = len(normalized_shape)
    nd, lead = tuple(range(xt.rank - k, xt.rank)), tuple(range(xt.rank - k))
    cd = compute_dtype(ttype(dy).dtype)
    xc, g = to_dtype(d, x, cd), to_dtype(d, dy, cd)
    if mean is None or rstd is None:
        mean = lt.mean(xc, dim=nd, keepdim=True)
        diff = lt.sub(xc, mean)
        var = lt.mean(lt.mul(diff, diff), dim=nd, keepdim=True)
        rstd = lt.rsqrt(lt.add(var, number_const(d, 1e-5 if eps is None else float(eps))))
    else:
        diff = lt.sub(xc, to_dtype(d, mean, cd))
        rstd = to_dtype(d, rstd, cd)
    xhat = lt.mul(diff, rstd)
    grads: list[SSAValue] = []
    if output_mask[0]:
        gy = g if weight is None else lt.mul(g, to_dtype(d, weight, cd))
        m1 = lt.mean(gy, dim=nd, keepdim=True)
        m2 = lt.mean(lt.mul(gy, xhat), dim=nd, keepdim=True)
        grads.append(lt.mul(rstd, lt.sub(lt.sub(gy, m1), lt.mul(xhat, m2))))
    if output_mask[1]:
        dw = lt.mul(g, xhat)
        grads.append(lt.sum(dw, dim=lead) if lead else dw)
    if output_mask[2]:
        grads.append(lt.sum(g, dim=lead) if lead else g)
    return [to_dtype(d, v, t.dtype) for v, t in zip(grads, types, strict=True)]


@decomposes(N.ConvolutionBackwardOp)
def convolution_backward(d: Decomposer, dy: SSAValue, x: SSAValue, w: SSAValue,
                         stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int], groups: int, output_mask: Sequence[int]
                         ) -> list[SSAValue]:
    """Through the forward's im2col (`decomp_nn.unfold`): ``dw = dy colsᵀ`` over the
    batch; ``dx`` is the patches' gradient ``wᵀ dy``, each tap's part scattered back
    through its strided slice (an interior pad) and summed, with the padding cropped;
    ``db = sum(dy)``."""
    p = d.prims
    types = _types(N.ConvolutionBackwardOp, dy, x, w, stride=stride, padding=padding,
                   dilation=dilation, groups=groups, output_mask=output_mask)
    xt, wt, yt = ttype(x), ttype(w), ttype(dy)
    cd = compute_dtype(yt.dtype)
    n, c, c_out, kernel, g = xt.sizes[0], xt.sizes[1], wt.sizes[0], wt.sizes[2:], int(groups)
    nd, out = len(kernel), yt.sizes[2:]
    taps = (c // g) * math.prod(kernel)
    dyg = p.reshape(to_dtype(d, dy, cd), shape=(n, g, c_out // g, math.prod(out)))
    grads: list[SSAValue] = []
    if output_mask[0]:
        wg = p.reshape(to_dtype(d, w, cd), shape=(g, c_out // g, taps))
        dcols = p.matmul(p.transpose(wg, permutation=(0, 2, 1)), dyg)
        dpatches = p.reshape(dcols, shape=(n, c, math.prod(kernel), *out))
        padded = [s + 2 * q for s, q in zip(xt.sizes[2:], padding, strict=True)]
        dx: SSAValue | None = None
        for t, offsets in enumerate(itertools.product(*(range(k) for k in kernel))):
            part = p.reshape(p.slice(dpatches, start_indices=[0, 0, t, *[0] * nd],
                                     end_indices=[n, c, t + 1, *out]), shape=(n, c, *out))
            config = [(0, 0, 0), (0, 0, 0)]
            for o, m, st, dl, size in zip(offsets, out, stride, dilation, padded, strict=True):
                lo = o * dl
                config.append((lo, size - lo - (m - 1) * st - 1, st - 1))
            part = p.pad(part, padding_value=0.0, padding_config=config)
            dx = part if dx is None else p.add(dx, part)
        assert dx is not None
        if any(padding):
            dx = p.pad(dx, padding_value=0.0,
                       padding_config=[(0, 0, 0)] * 2 + [(-q, -q, 0) for q in padding])
        grads.append(dx)
    if output_mask[1]:
        patches, _ = unfold(d, to_dtype(d, x, cd), kernel, stride, padding, dilation)
        cols = p.reshape(patches, shape=(n, g, taps, math.prod(out)))
        a = p.reshape(p.transpose(dyg, permutation=(1, 2, 0, 3)),
                      shape=(g, c_out // g, n * math.prod(out)))
        b = p.reshape(p.transpose(cols, permutation=(1, 0, 3, 2)),
                      shape=(g, n * math.prod(out), taps))
        grads.append(p.reshape(p.matmul(a, b), shape=tuple(wt.sizes)))
    if output_mask[2]:
        grads.append(p.sum(to_dtype(d, dy, cd), dims=[0, *range(2, 2 + nd)]))
    return [to_dtype(d, v, t.dtype) for v, t in zip(grads, types, strict=True)]


@decomposes(N.MaxPool2dWithIndicesBackwardOp)
def max_pool2d_with_indices_backward(d: Decomposer, dy: SSAValue, x: SSAValue,
                                     indices: SSAValue, kernel_size: Sequence[int],
                                     stride: Sequence[int], padding: Sequence[int],
                                     dilation: Sequence[int], ceil_mode: bool) -> SSAValue:
    """``dy`` added into zeros at ``indices``, per input plane (a ``scatter_add``)."""
    p = d.prims
    (out,) = _types(N.MaxPool2dWithIndicesBackwardOp, dy, x, indices, kernel_size=kernel_size,
                    stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)
    xt, yt = ttype(x), ttype(dy)
    n, c, h, w = xt.sizes
    cd = compute_dtype(yt.dtype)
    m = math.prod(yt.sizes[2:])
    zeros = p.full(shape=(n, c, h * w), fill_value=0.0, device=xt.dev, dtype=cd)
    grads = p.scatter_add(zeros, p.reshape(indices, shape=(n, c, m)),
                          p.reshape(to_dtype(d, dy, cd), shape=(n, c, m)), dim=2)
    return to_dtype(d, p.reshape(grads, shape=(n, c, h, w)), out.dtype)

@decomposes(N.NativeBatchNormBackwardOp)
def native_batch_norm_backward(d: Decomposer, dy: SSAValue, x: SSAValue,
                               weight: SSAValue | None, running_mean: SSAValue | None,
                               running_var: SSAValue | None, save_mean: SSAValue | None,
                               save_invstd: SSAValue | None, training: bool, eps: float,
                               output_mask: Sequence[int]) -> list[SSAValue]:
    """With ``x̂ = (x - mean) invstd`` per channel (the batch statistics in training, the
    running ones in evaluation) and ``M`` elements per channel: in training
    ``dx = weight invstd (dy - sum(dy) / M - x̂ sum(dy x̂) / M)``, in evaluation
    ``dx = weight invstd dy``; ``dweight = sum(dy x̂)``, ``dbias = sum(dy)``."""
    types = _types(N.NativeBatchNormBackwardOp, dy, x, weight, running_mean, running_var,
                   save_mean, save_invstd, training=training, eps=eps, output_mask=output_mask)
    lt = d.ltorch
    xt = ttype(x)
    rank, dims = xt.rank, (0, *range(2, xt.rank))
    count = math.prod(xt.sizes) // xt.sizes[1]
    if training:
        assert save_mean is not None and save_invstd is not None
        mean, invstd = save_mean, save_invstd
    else:
        assert running_mean is not None and running_var is not None
        mean, invstd = running_mean, lt.rsqrt(lt.add(running_var, number_const(d, float(eps))))
    xhat = lt.mul(lt.sub(x, per_channel(d, mean, rank)), per_channel(d, invstd, rank))
    sum_dy = lt.sum(dy, dim=dims)
    sum_dy_xhat = lt.sum(lt.mul(dy, xhat), dim=dims)
    grads: list[SSAValue] = []
    if output_mask[0]:
        scale = invstd if weight is None else lt.mul(invstd, weight)
        inner = dy
        if training:
            mean_dy = per_channel(d, lt.div(sum_dy, number_const(d, count_number(count))), rank)
            mean_dy_xhat = lt.div(sum_dy_xhat, number_const(d, count_number(count)))
            inner = lt.sub(lt.sub(dy, mean_dy), lt.mul(xhat, per_channel(d, mean_dy_xhat, rank)))
        grads.append(lt.mul(inner, per_channel(d, scale, rank)))
    if output_mask[1]:
        grads.append(sum_dy_xhat)
    if output_mask[2]:
        grads.append(sum_dy)
    return [to_dtype(d, v, t.dtype) for v, t in zip(grads, types, strict=True)]


@decomposes(N.EmbeddingBackwardOp)
def embedding_backward(d: Decomposer, dy: SSAValue, indices: SSAValue, num_weights: int,
                       padding_idx: int | None = None, scale_grad_by_freq: bool | None = None
                       ) -> SSAValue:
    """Adds the cotangent rows into zeros at the looked-up indices (``index_add``); rows of
    ``padding_idx`` add nothing; ``scale_grad_by_freq`` divides each row by how often its
    index occurs."""
    (out,) = _types(N.EmbeddingBackwardOp, dy, indices, num_weights=num_weights,
                    padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq)
    p = d.prims
    it = ttype(indices)
    n = it.numel()
    row_shape = (n, *out.sizes[1:])
    cd = compute_dtype(out.dtype)
    flat = indices if it.rank == 1 else p.reshape(indices, shape=(n,))
    rows = p.reshape(to_dtype(d, dy, cd), shape=row_shape)
    if padding_idx is not None:
        keep = p.broadcast_in_dim(p.ne(flat, number_const(d, padding_idx)), shape=row_shape,
                                  broadcast_dims=[0])
        rows = p.where(keep, rows, number_const(d, 0.0))
    if scale_grad_by_freq:
        ones = p.full(shape=(n,), fill_value=1.0, device=out.dev, dtype=cd)
        counts = p.full(shape=(num_weights,), fill_value=0.0, device=out.dev, dtype=cd)
        freq = p.take(p.index_add(counts, flat, ones, dim=0), flat, dim=0)
        rows = p.div(rows, p.broadcast_in_dim(freq, shape=row_shape, broadcast_dims=[0]))
    zeros = p.full(shape=out.sizes, fill_value=0.0, device=out.dev, dtype=cd)
    return to_dtype(d, p.index_add(zeros, flat, rows, dim=0), out.dtype)


@decomposes(N.NllLossBackwardOp)
def nll_loss_backward(d: Decomposer, dloss: SSAValue, logp: SSAValue, target: SSAValue,
                      total_weight: SSAValue, weight: SSAValue | None,
                      reduction: str | None = None, ignore_index: int | None = None
                      ) -> SSAValue:
    """With ``w_t`` the target's class weight (1 without weights) and ``c`` the loss
    cotangent per sample (the mean's divided by ``total_weight``):
    ``dlogp = -c w_t onehot(t)``, zero for ignored targets."""
    (out,) = _types(N.NllLossBackwardOp, dloss, logp, target, total_weight, weight,
                    reduction=reduction, ignore_index=ignore_index)
    lt = d.ltorch
    red = reduction or "mean"
    xt = ttype(logp)
    cd = compute_dtype(xt.dtype)
    cdim = 1 if xt.rank >= 2 else 0
    classes = xt.sizes[cdim]
    col = tuple(classes if i == cdim else 1 for i in range(xt.rank))
    arange = lt.reshape(lt.arange(end=classes, dtype=torch.int64, device=xt.dev), shape=col)
    tcol = lt.unsqueeze(target, dim=cdim)
    valid = lt.ne(tcol, number_const(d, -100 if ignore_index is None else ignore_index))
    hot = lt.to_dtype(lt.eq(tcol, arange), dtype=cd)
    if weight is not None:
        hot = lt.mul(hot, lt.reshape(to_dtype(d, weight, cd), shape=col))
    a = lt.where(valid, hot, number_const(d, 0.0))
    c = to_dtype(d, dloss, cd)
    if red == "none":
        c = lt.unsqueeze(c, dim=cdim)
    elif red == "mean":
        c = lt.div(c, to_dtype(d, total_weight, cd))
    return to_dtype(d, lt.neg(lt.mul(c, a)), out.dtype)
