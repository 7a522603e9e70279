"""VJP rules of ltorch's ``nn`` ops (`thunder_ir.dialects.ltorch_nn`: linear algebra,
activations, softmax, norms, embedding, attention, losses) that are cheaper than
differentiating their decomposition (see `thunder_ir.passes.vjp`), and of the opaque
``torch.call`` fallback. The core ops' rules are `thunder_ir.passes.vjp_ltorch_core`'s.

Why direct rules: differentiating ``layer_norm``'s or ``cross_entropy``'s decomposition
keeps every intermediate of the forward alive and emits a long chain of prim
cotangents; the closed forms below (PyTorch's ``derivatives.yaml``, JAX's ``nn`` rules)
need the inputs only and are what fused kernels implement. Ops listed here are not
decomposed before autodiff; their backward ops are ltorch or prims ops, decomposed or
claimed by executors later like any other.

Conventions of this module:

* A backward reads what eager's autograd saves, no more: where eager's forward kernel
  computes statistics that its backward kernel reads (layer norm's mean and rstd, the
  log-probabilities of cross entropy with class indices, attention's probabilities and
  dropout noise), the rule replaces the forward op by those kernels
  (`Grad.in_forward`, `Grad.replace_forward`) and the backward reads their results;
  everything else (softmax's input, RMS norm's statistics, attention without dropout) is
  recomputed from the op's inputs or outputs, and the remat pass decides what is stored.
* Float16/bfloat16 backward math runs in float32 and each cotangent is converted back
  to its operand's dtype once (as torch's opmath kernels do).
* Operands that are not floating-point tensors (indices, int targets, RNG seeds, bool
  masks) get ``None``. So do ``cross_entropy``'s class weights with class-index targets:
  torch's ``nll_loss`` declares them not differentiable.
* The dropout family has no rule here: its decomposition (a ``prims.bernoulli`` draw,
  then elementwise math) is differentiated, so the backward multiplies by the forward's
  own noise.
* ``torch.call`` (the frontend's fallback for torch functions with no ltorch op) is
  differentiated by torch itself: its forward records torch's autograd graph and its
  backward runs through it (`thunder_ir.runtime.autograd_fallback`), so the backward uses
  the forward's own random draws and each callee runs once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import OperandRef, from_attr
from thunder_ir.dialects.prims import broadcast_shapes
from thunder_ir.dialects.symbols import hint
from thunder_ir.dialects.torch import CallOp, make_call, runtime_callee
from thunder_ir.dialects.types import TensorType, compute_dtype, is_float, ttype
from thunder_ir.passes.vjp import (
    Grad,
    is_differentiable_value,
    vjp,
)
from thunder_ir.passes.vjp_ltorch_core import (  # the helpers every ltorch rule shares
    Cts,
    Grads,
    Outs,
    cast_to,
    grad_as,
    neg_inf,
    sum_dims,
    sum_to_shape,
    transpose_last,
    upcast,
)

# --------------------------------------------------------------------------- linear algebra


@vjp(N.MatmulOp)
def matmul(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue) -> Grads:
    """``da = ct @ b^T`` and ``db = a^T @ ct``, with torch.matmul's 1-D promotion and batch
    broadcasting undone (`sum_to_shape`)."""
    at, bt = ttype(a), ttype(b)
    a1, b1 = at.rank == 1, bt.rank == 1
    a_shape = (1, *at.sizes) if a1 else at.sizes
    b_shape = (*bt.sizes, 1) if b1 else bt.sizes
    a2 = g.ltorch.reshape(a, shape=a_shape) if a1 else a
    b2 = g.ltorch.reshape(b, shape=b_shape) if b1 else b
    dy = ct[0]
    assert dy is not None
    if a1 or b1:  # ct in the shape of the promoted product
        batch = broadcast_shapes(N.MatmulOp.name, a_shape[:-2], b_shape[:-2])
        dy = g.ltorch.reshape(dy, shape=(*batch, a_shape[-2], b_shape[-1]))
    da = db = None
    if is_differentiable_value(a):
        da = sum_to_shape(g, g.ltorch.matmul(dy, transpose_last(g, b2)), a_shape)
        if a1:
            da = g.ltorch.reshape(da, shape=at.sizes)
    if is_differentiable_value(b):
        if len(b_shape) == 2 and len(a_shape) > 2:
            # Fold a's batch dims into its rows: one 2-D matmul instead of a batched one
            # followed by a reduction.
            k, p = b_shape
            rows = math.prod(a_shape[:-1])
            a_rows = g.ltorch.reshape(a2, shape=(rows, k))
            dy_rows = g.ltorch.reshape(dy, shape=(rows, p))
            db = g.ltorch.matmul(transpose_last(g, a_rows), dy_rows)
        else:
            db = sum_to_shape(g, g.ltorch.matmul(transpose_last(g, a2), dy), b_shape)
        if b1:
            db = g.ltorch.reshape(db, shape=bt.sizes)
    return [da, db]


@vjp(N.BmmOp)
def bmm(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue) -> Grads:
    """``da = ct @ b^T``, ``db = a^T @ ct`` per batch."""
    dy = ct[0]
    assert dy is not None
    da = g.ltorch.bmm(dy, transpose_last(g, b)) if is_differentiable_value(a) else None
    db = g.ltorch.bmm(transpose_last(g, a), dy) if is_differentiable_value(b) else None
    return [da, db]


@vjp(N.GroupedMmOp)
def grouped_mm(g: Grad, out: Outs, ct: Cts, a: SSAValue, b: SSAValue, offs: SSAValue
               ) -> Grads:
    """Grouped products again: for ``[M, K] x [E, K, N]``, ``da = gmm(ct, b^T)`` and
    ``db = gmm(a^T, ct)`` (``[K, M] x [M, N]``); for ``[K, M] x [M, N]``,
    ``da = gmm(b, ct^T)^T`` and ``db = gmm(a^T, ct)``. ``offs`` gets none."""
    lt = g.ltorch
    dy = ct[0]
    db = None
    if is_differentiable_value(b):
        db = lt.grouped_mm(lt.transpose(a, dim0=0, dim1=1), dy, offs)
    da = None
    if is_differentiable_value(a):
        if ttype(b).rank == 3:
            da = lt.grouped_mm(dy, transpose_last(g, b), offs)
        else:
            da = lt.transpose(lt.grouped_mm(b, transpose_last(g, dy), offs), dim0=0, dim1=1)  # type: ignore[arg-type]
    return [grad_as(g, da, a), grad_as(g, db, b), None]


@vjp(N.LinearOp)
def linear(g: Grad, out: Outs, ct: Cts, x: SSAValue, w: SSAValue, bias: SSAValue | None
           ) -> Grads:
    """``dx = ct @ W``, ``dW = ct^T @ x`` over all batch rows, ``dbias = sum(ct)``."""
    xt, wt = ttype(x), ttype(w)
    dy = ct[0]
    assert dy is not None
    n_in, rows = xt.sizes[-1], math.prod(xt.sizes[:-1])
    dx = dw = db = None
    if wt.rank == 2:
        n_out = wt.sizes[0]
        if is_differentiable_value(x):
            dx = g.ltorch.matmul(dy, w)
        if is_differentiable_value(w):
            dy_rows = g.ltorch.reshape(dy, shape=(rows, n_out))
            x_rows = g.ltorch.reshape(x, shape=(rows, n_in))
            dw = g.ltorch.matmul(transpose_last(g, dy_rows), x_rows)
        if bias is not None and is_differentiable_value(bias):
            db = sum_to_shape(g, dy, (n_out,))
    else:  # a 1-D weight: y = x @ w has x's batch shape
        if is_differentiable_value(x):
            dx = g.ltorch.mul(g.ltorch.unsqueeze(dy, dim=-1), w)
        if is_differentiable_value(w):
            dw = g.ltorch.matmul(g.ltorch.reshape(dy, shape=(rows,)),
                                 g.ltorch.reshape(x, shape=(rows, n_in)))
        if bias is not None and is_differentiable_value(bias):
            db = sum_to_shape(g, dy, ())
    return [dx, dw, db]


# --------------------------------------------------------------------------- activations


@vjp(A.ReluOp)
def relu(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``ct`` where the result is positive: ``threshold_backward`` on the result, eager's
    kernel."""
    if not is_differentiable_value(x):
        return [None]
    return [g.ltorch.threshold_backward(ct[0], out[0], threshold=0)]


@vjp(A.GeluOp)
def gelu(g: Grad, out: Outs, ct: Cts, x: SSAValue, approximate: str | None = None) -> Grads:
    """``gelu_backward(ct, x)``: ``ct * (Φ(x) + x φ(x))``, or the derivative of the tanh
    approximation, one op (eager's one kernel; prims for a fusion executor)."""
    if not is_differentiable_value(x):
        return [None]
    params = {} if approximate in (None, "none") else {"approximate": approximate}
    return [grad_as(g, g.ltorch.gelu_backward(ct[0], x, **params), x)]


@vjp(A.SoftplusOp)
def softplus(g: Grad, out: Outs, ct: Cts, x: SSAValue, beta: float = 1.0,
             threshold: float = 20.0) -> Grads:
    """``softplus_backward(ct, x)``: ``ct * sigmoid(beta x)``, and ``ct`` where ``beta x >
    threshold``, one op (one eager kernel; prims for a fusion executor)."""
    if not is_differentiable_value(x):
        return [None]
    return [grad_as(g, g.ltorch.softplus_backward(ct[0], x, beta=beta, threshold=threshold),
                    x)]


def _by_kernel(backward: str) -> Callable[..., Grads]:
    """The VJP rule of an activation whose gradient is one eager kernel,
    ``<backward>(ct, x)`` (its decomposition serves fusion executors)."""
    def rule(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
        if not is_differentiable_value(x):
            return [None]
        return [grad_as(g, getattr(g.ltorch, backward)(ct[0], x), x)]

    rule.__name__ = backward.removesuffix("_backward")
    rule.__doc__ = f"``{backward}(ct, x)``: eager's one kernel (prims for a fusion executor)."
    return rule


vjp(A.HardswishOp)(_by_kernel("hardswish_backward"))
vjp(A.HardsigmoidOp)(_by_kernel("hardsigmoid_backward"))


@vjp(A.SiluOp)
def silu(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``silu_backward(ct, x)``: ``ct * s * (1 + x (1 - s))`` with ``s = sigmoid(x)``, one
    op (one eager kernel; prims for a fusion executor)."""
    if not is_differentiable_value(x):
        return [None]
    return [grad_as(g, g.ltorch.silu_backward(ct[0], x), x)]



@vjp(A.SigmoidOp)
def sigmoid(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``ct * y * (1 - y)`` on the result ``y``."""
    if not is_differentiable_value(x):
        return [None]
    lt = g.ltorch
    y, dy = upcast(g, out[0]), upcast(g, ct[0])  # type: ignore[arg-type]
    return [grad_as(g, lt.mul(dy, lt.mul(y, lt.sub(g.const(1.0), y))), x)]


@vjp(C.TanhOp)
def tanh(g: Grad, out: Outs, ct: Cts, x: SSAValue) -> Grads:
    """``ct * (1 - y²)`` on the result ``y``."""
    if not is_differentiable_value(x):
        return [None]
    lt = g.ltorch
    y, dy = upcast(g, out[0]), upcast(g, ct[0])  # type: ignore[arg-type]
    return [grad_as(g, lt.mul(dy, lt.sub(g.const(1.0), lt.mul(y, y))), x)]


# --------------------------------------------------------------------------- softmax


@vjp(N.SoftmaxOp)
def softmax(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: int,
            dtype: torch.dtype | None = None) -> Grads:
    """``softmax_backward(ct, y)`` on the result ``y``: ``y * (ct - sum(ct * y, dim))``."""
    if not is_differentiable_value(x):
        return [None]
    y = out[0]
    dx = g.ltorch.softmax_backward(cast_to(g, ct[0], ttype(y).dtype), y, dim=dim,  # type: ignore[arg-type]
                                   input_dtype=ttype(y).dtype)
    return [grad_as(g, dx, x)]


@vjp(N.SafeSoftmaxOp)
def safe_softmax(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: int,
                 dtype: torch.dtype | None = None) -> Grads:
    """As softmax's (torch's derivative too): fully masked rows have zero results, so
    they get zero gradients."""
    return softmax(g, out, ct, x, dim, dtype)


@vjp(N.LogSoftmaxOp)
def log_softmax(g: Grad, out: Outs, ct: Cts, x: SSAValue, dim: int,
                dtype: torch.dtype | None = None) -> Grads:
    """``log_softmax_backward(ct, y)`` on the result ``y``: ``ct - exp(y) sum(ct, dim)``."""
    if not is_differentiable_value(x):
        return [None]
    y = out[0]
    dx = g.ltorch.log_softmax_backward(cast_to(g, ct[0], ttype(y).dtype), y,  # type: ignore[arg-type]
                                       dim=dim, input_dtype=ttype(y).dtype)
    return [grad_as(g, dx, x)]


# --------------------------------------------------------------------------- normalization


def _norm_dims(x: TensorType, normalized_shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """(normalized dims, leading dims) of ``x``."""
    k = len(normalized_shape)
    return list(range(x.rank - k, x.rank)), list(range(x.rank - k))


def _layer_norm_grads(g: Grad, dy: SSAValue, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, normalized_shape: Sequence[int],
                      eps: float | None, stats: tuple[SSAValue, SSAValue] | None) -> Grads:
    """``layer_norm_backward`` (torch's kernel) asked for the gradients that are needed,
    on the forward's statistics ``(mean, rstd)`` or, without them, recomputing them."""
    mask = (is_differentiable_value(x), weight is not None and is_differentiable_value(weight),
            bias is not None and is_differentiable_value(bias))
    if not any(mask):
        return [None, None, None]
    params: dict[str, Any] = {"normalized_shape": tuple(normalized_shape),
                              "output_mask": tuple(int(m) for m in mask)}
    if eps is not None and stats is None:
        params["eps"] = float(eps)
    mean, rstd = stats if stats is not None else (None, None)
    grads = iter(g.ltorch.layer_norm_backward(dy, x, weight, bias if mask[2] else None,
                                              mean, rstd, **params))
    dx, dw, db = (next(grads) if m else None for m in mask)
    return [grad_as(g, dx, x), grad_as(g, dw, weight), grad_as(g, db, bias)]


@vjp(N.LayerNormOp)
def layer_norm(g: Grad, out: Outs, ct: Cts, x: SSAValue, weight: SSAValue | None,
               bias: SSAValue | None, normalized_shape: Sequence[int],
               eps: float | None = None) -> Grads:
    """``layer_norm_backward``. In float32 and float64 the forward becomes
    ``native_layer_norm``, the same kernel, which also returns the mean and rstd that the
    backward reads; in other dtypes the backward recomputes them."""
    dy = cast_to(g, ct[0], ttype(out[0]).dtype)  # type: ignore[arg-type]
    stats = None
    if ttype(x).dtype in (torch.float32, torch.float64) and any(
            v is not None and is_differentiable_value(v) for v in (x, weight, bias)):
        op = out[0].owner
        assert isinstance(op, N.LayerNormOp)
        y, mean, rstd = g.in_forward(op).ltorch.native_layer_norm(
            x, weight, bias, normalized_shape=tuple(normalized_shape),
            eps=1e-5 if eps is None else float(eps))
        g.replace_forward(op, None, [y], erase=True)
        stats = (mean, rstd)
    return _layer_norm_grads(g, dy, x, weight, bias, normalized_shape, eps, stats)


@vjp(N.NativeLayerNormOp)
def native_layer_norm(g: Grad, out: Outs, ct: Cts, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, normalized_shape: Sequence[int], eps: float
                      ) -> Grads:
    """``layer_norm_backward`` on its own statistics (which, as in torch, carry no
    gradient)."""
    if ct[0] is None:
        return [None, None, None]
    return _layer_norm_grads(g, cast_to(g, ct[0], ttype(out[0]).dtype), x, weight, bias,
                             normalized_shape, eps, (out[1], out[2]))


def _needed(g: Grad, *operands: SSAValue | None) -> tuple[bool, ...]:
    """Per operand, whether its gradient is needed: a floating-point value that requires
    grad (what eager's autograd passes its backward kernels as ``output_mask``)."""
    return tuple(v is not None and is_differentiable_value(v) and g.active(v)
                 for v in operands)


@vjp(N.NativeGroupNormOp)
def native_group_norm(g: Grad, out: Outs, ct: Cts, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, N: int, C: int, HxW: int, group: int, eps: float
                      ) -> Grads:
    """``native_group_norm_backward`` (torch's kernel, as eager's autograd runs it) on the
    forward's statistics, asked for the gradients that are needed; cotangents of the
    statistics themselves (which ``torch.group_norm`` never returns) add theirs to the
    input's: ``ct_mean / n`` and ``-ct_rstd rstd³ (x - mean) / n`` over each group of ``n``
    elements."""
    mask = _needed(g, x, weight, bias)
    if not any(mask) or all(c is None for c in ct):
        return [None, None, None]
    grads: list[SSAValue | None] = [None, None, None]
    if ct[0] is not None:
        it = iter(g.ltorch.native_group_norm_backward(
            ct[0], x, out[1], out[2], weight, N=int(N), C=int(C), HxW=int(HxW),
            group=int(group), output_mask=tuple(int(m) for m in mask)))
        grads = [next(it) if m else None for m in mask]
    if mask[0] and (ct[1] is not None or ct[2] is not None):
        lt = g.ltorch
        n = C // group * HxW
        xg = lt.reshape(x, shape=(N, group, n))
        extra = None
        if ct[1] is not None:
            extra = lt.expand(lt.unsqueeze(lt.div(ct[1], g.const(float(n))), dim=2),
                              size=(N, group, n))
        if ct[2] is not None:
            r = out[2]
            scale = lt.div(lt.mul(ct[2], lt.mul(lt.mul(r, r), r)), g.const(float(-n)))
            term = lt.mul(lt.sub(xg, lt.unsqueeze(out[1], dim=2)), lt.unsqueeze(scale, dim=2))
            extra = term if extra is None else lt.add(extra, term)
        assert extra is not None
        extra = lt.reshape(extra, shape=ttype(x).sizes)
        grads[0] = extra if grads[0] is None else lt.add(grads[0], extra)
    return grads


@vjp(N.ConvolutionOp)
def convolution(g: Grad, out: Outs, ct: Cts, x: SSAValue, w: SSAValue, bias: SSAValue | None,
                stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                groups: int) -> Grads:
    """``convolution_backward`` (torch's kernel, as eager's autograd runs it) asked for the
    gradients that are needed."""
    mask = _needed(g, x, w, bias)
    if ct[0] is None or not any(mask):
        return [None, None, None]
    grads = iter(g.ltorch.convolution_backward(
        ct[0], x, w, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation),
        groups=int(groups), output_mask=tuple(int(m) for m in mask)))
    return [next(grads) if m else None for m in mask]


@vjp(N.MaxPool2dWithIndicesOp)
def max_pool2d_with_indices(g: Grad, out: Outs, ct: Cts, x: SSAValue,
                            kernel_size: Sequence[int], stride: Sequence[int],
                            padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool
                            ) -> Grads:
    """``max_pool2d_with_indices_backward`` on the forward's indices (torch's kernel, as
    eager's autograd runs it)."""
    if ct[0] is None or not is_differentiable_value(x):
        return [None]
    return [g.ltorch.max_pool2d_with_indices_backward(
        ct[0], x, out[1], kernel_size=tuple(kernel_size), stride=tuple(stride),
        padding=tuple(padding), dilation=tuple(dilation), ceil_mode=bool(ceil_mode))]


@vjp(N.NativeBatchNormOp)
def native_batch_norm(g: Grad, out: Outs, ct: Cts, x: SSAValue, weight: SSAValue | None,
                      bias: SSAValue | None, running_mean: SSAValue | None,
                      running_var: SSAValue | None, training: bool, momentum: float,
                      eps: float) -> Grads:
    """``native_batch_norm_backward`` (torch's kernel, as eager's autograd runs it): in
    training on the forward's batch statistics, in evaluation on the running ones. The
    running statistics, and every result but the output, carry no gradient."""
    mask = _needed(g, x, weight, bias)
    if ct[0] is None or not any(mask):
        return [None] * 5
    stats = (out[1], out[2]) if training else (None, None)
    running = (None, None) if training else (running_mean, running_var)
    grads = iter(g.ltorch.native_batch_norm_backward(
        ct[0], x, weight, *running, *stats, training=bool(training), eps=float(eps),
        output_mask=tuple(int(m) for m in mask)))
    return [*(next(grads) if m else None for m in mask), None, None]


@vjp(N.NllLossForwardOp)
def nll_loss_forward(g: Grad, out: Outs, ct: Cts, logp: SSAValue, target: SSAValue,
                     weight: SSAValue | None, reduction: str | None = None,
                     ignore_index: int | None = None) -> Grads:
    """``nll_loss_backward`` on the total weight (which, as in torch, carries no
    gradient); targets and class weights get ``None``."""
    if ct[0] is None or not is_differentiable_value(logp):
        return [None, None, None]
    params: dict[str, Any] = {k: v for k, v in (("reduction", reduction),
                                                ("ignore_index", ignore_index))
                              if v is not None}
    dlogp = g.ltorch.nll_loss_backward(cast_to(g, ct[0], ttype(out[0]).dtype), logp, target,
                                       out[1], weight, **params)
    return [grad_as(g, dlogp, logp), None, None]


@vjp(N.RmsNormOp)
def rms_norm(g: Grad, out: Outs, ct: Cts, x: SSAValue, weight: SSAValue | None,
             normalized_shape: Sequence[int], eps: float | None = None) -> Grads:
    """Recomputes ``r = rsqrt(mean(x²) + eps)``; with ``x̂ = x r`` and ``gy = ct * weight``:
    ``dx = r (gy - x̂ mean(gy x̂))``, ``dweight = sum(ct x̂)`` over the leading dims."""
    lt = g.ltorch
    xt = ttype(x)
    dims, lead = _norm_dims(xt, normalized_shape)
    nd = tuple(dims)
    cd = compute_dtype(ttype(out[0]).dtype)
    eps = torch.finfo(compute_dtype(xt.dtype)).eps if eps is None else float(eps)
    xc = cast_to(g, x, cd)
    dy = cast_to(g, ct[0], cd)  # type: ignore[arg-type]
    r = lt.rsqrt(lt.add(lt.mean(lt.mul(xc, xc), dim=nd, keepdim=True), g.const(eps)))
    xhat = lt.mul(xc, r)
    dx = dw = None
    if is_differentiable_value(x):
        gy = dy if weight is None else lt.mul(dy, cast_to(g, weight, cd))
        m = lt.mean(lt.mul(gy, xhat), dim=nd, keepdim=True)
        dx = grad_as(g, lt.mul(r, lt.sub(gy, lt.mul(xhat, m))), x)
    if weight is not None:
        dw = grad_as(g, sum_dims(g, lt.mul(dy, xhat), lead), weight)
    return [dx, dw]


# --------------------------------------------------------------------------- embedding


@vjp(N.EmbeddingOp)
def embedding(g: Grad, out: Outs, ct: Cts, indices: SSAValue, weight: SSAValue,
              padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float | None = None, scale_grad_by_freq: bool | None = None,
              sparse: bool | None = None) -> Grads:
    """``embedding_backward``: the cotangent rows added into zeros of the weight's shape at
    the looked-up indices. Rows of ``padding_idx`` get no gradient; ``scale_grad_by_freq``
    divides each row by how often its index occurs. ``sparse`` still gives a dense
    gradient."""
    if not is_differentiable_value(weight):
        return [None, None]
    num = ttype(weight).sizes[0]
    params: dict[str, Any] = {"num_weights": num}
    if padding_idx is not None:
        params["padding_idx"] = padding_idx + num if padding_idx < 0 else padding_idx
    if scale_grad_by_freq:
        params["scale_grad_by_freq"] = True
    dw = g.ltorch.embedding_backward(ct[0], indices, **params)
    return [None, grad_as(g, dw, weight)]


# --------------------------------------------------------------------------- attention


def _repeat_heads(g: Grad, v: SSAValue, rep: int) -> SSAValue:
    """``repeat_interleave(v, rep, dim=-3)`` (grouped-query attention's key/value heads)."""
    s = ttype(v).sizes
    x = g.ltorch.unsqueeze(v, dim=-3)
    x = g.ltorch.expand(x, size=(*s[:-2], rep, *s[-2:]))
    return g.ltorch.reshape(x, shape=(*s[:-3], s[-3] * rep, *s[-2:]))


def _unrepeat_heads(g: Grad, v: SSAValue, rep: int) -> SSAValue:
    """The transpose of `_repeat_heads`: sums each group of ``rep`` heads."""
    s = ttype(v).sizes
    x = g.ltorch.reshape(v, shape=(*s[:-3], s[-3] // rep, rep, *s[-2:]))
    return g.ltorch.sum(x, dim=-3)


SDPA_DROPOUT_FORWARD = runtime_callee("sdpa_dropout_forward")


def _attention_with_weights(g: Grad, out: SSAValue, q: SSAValue, k: SSAValue, v: SSAValue,
                            attn_mask: SSAValue | None, dropout_p: float, is_causal: bool,
                            scale: float | None, enable_gqa: bool) -> SSAValue:
    """Attention with dropout in training, in a dtype `_math_steps` does not take: the
    forward becomes eager's own kernel, which also returns the weights after dropout (the
    draw is eager's); returns those weights."""
    from thunder_ir.dialects.types import tensor_type

    op = out.owner
    assert isinstance(op, N.ScaledDotProductAttentionOp)
    qt, kt = ttype(q), ttype(k)
    weights = tensor_type((*qt.sizes[:-1], kt.sizes[-2]), qt.dtype, qt.dev)
    operands = [q, k, v] + ([attn_mask] if attn_mask is not None else [])
    call = make_call(SDPA_DROPOUT_FORWARD, operands,
                     [OperandRef(0), OperandRef(1), OperandRef(2),
                      OperandRef(3) if attn_mask is not None else None, dropout_p,
                      is_causal, scale, enable_gqa],
                     result_types=[out.type, weights], layout=True)
    call.location = op.location
    g.replace_forward(op, call, [call.results[0]], erase=True)
    return call.results[1]


def _math_steps(g: Grad, out: SSAValue, q: SSAValue, k: SSAValue, v: SSAValue,
                attn_mask: SSAValue | None, p: float, is_causal: bool, s: float, rep: int
                ) -> tuple[SSAValue, SSAValue | None, SSAValue, SSAValue, SSAValue]:
    """Attention in training where eager runs its math kernel (`runs_math_kernel`),
    float32 or float64: the forward becomes that kernel's steps, one ltorch op each, so
    its values and its draw are eager's bit for bit and its probabilities and dropout
    noise are there for the backward to read (the kernel returns neither), as eager's
    autograd saves them. ATen's math kernel, step for step: ``q`` and ``kᵀ`` each scaled
    by ``√|s|``; a bool or causal mask as an additive ``0 / -inf`` mask; ``_safe_softmax``;
    with ``p > 0``, ``dropout`` as ATen draws it (``bernoulli_(1 - p)`` in the
    probabilities' shape, divided by ``1 - p``). Returns ``(probs, noise, weights, k,
    v)``: ``noise`` is None without dropout (``weights`` are then the probabilities),
    ``k`` and ``v`` have grouped heads repeated."""
    op = out.owner
    assert isinstance(op, N.ScaledDotProductAttentionOp)
    f = g.in_forward(op)
    lt = f.ltorch
    qt, kt = ttype(q), ttype(k)
    if rep > 1:
        k, v = _repeat_heads(f, k, rep), _repeat_heads(f, v, rep)
    sf = math.sqrt(abs(s))
    scores = lt.matmul(lt.mul(q, f.const(-sf if s < 0 else sf)),
                       lt.mul(transpose_last(f, k), f.const(sf)))
    mask = attn_mask
    if is_causal:
        mask = lt.tril(lt.ones(size=(qt.sizes[-2], kt.sizes[-2]), dtype=torch.bool,
                               device=qt.dev))
    if mask is not None:
        if ttype(mask).dtype == torch.bool:  # as ATen converts it: + 0 kept, + -inf masked
            mask = cast_to(f, lt.where(mask, f.const(0.0), neg_inf(f)), qt.dtype)
        scores = lt.add(scores, mask)
    probs = weights = lt.safe_softmax(scores, dim=-1)
    noise = None
    if p > 0.0:
        noise = lt.div(f.prims.bernoulli_like(probs, p=1.0 - p), f.const(1.0 - p))
        weights = lt.mul(probs, noise)
    g.replace_forward(op, None, [lt.matmul(weights, v)], erase=True)
    return probs, noise, weights, k, v


def eager_attention_backend(q: SSAValue, k: SSAValue, v: SSAValue,
                            attn_mask: SSAValue | None, mask_grad: bool, dropout_p: float,
                            is_causal: bool, scale: float | None, enable_gqa: bool) -> int:
    """The kernel eager's ``scaled_dot_product_attention`` picks for operands of these
    types (a ``torch.nn.attention.SDPBackend`` value): torch's own selector,
    ``torch._fused_sdp_choice``, asked on tensors of the operands' shapes, dtypes and device
    that allocate one row each, the mask requiring grad when ``mask_grad`` (which the
    selector weighs)."""
    def like(x: SSAValue, requires_grad: bool = False) -> torch.Tensor:
        t = ttype(x)
        strides = (0,) * (t.rank - 1) + (1,) if t.rank else ()
        sizes = [hint(d) for d in t.sizes]  # a symbolic size: its traced value
        return torch.empty_strided(sizes, strides, dtype=t.dtype, device=t.dev,
                                   requires_grad=requires_grad)

    mask = like(attn_mask, mask_grad) if attn_mask is not None else None
    return int(torch._fused_sdp_choice(like(q), like(k), like(v), mask, dropout_p, is_causal,
                                       scale=scale, enable_gqa=enable_gqa))


_SDP_MATH: int = torch.nn.attention.SDPBackend.MATH.value


def runs_math_kernel(g: Grad, q: SSAValue, k: SSAValue, v: SSAValue,
                     attn_mask: SSAValue | None, p: float, is_causal: bool,
                     scale: float | None, enable_gqa: bool) -> bool:
    """Whether eager runs attention as its math kernel, in a dtype `_math_steps` takes
    (float32, float64, one dtype throughout): whenever attention drops out (``0 < p < 1``),
    and on CPU whenever eager's selector picks that kernel (`eager_attention_backend`): a
    float mask that requires grad (the fused CPU kernel gives the mask no gradient), key
    and value heads broadcast against the query's (multi-query attention without
    ``enable_gqa``), 3-D inputs."""
    qt = ttype(q)
    if qt.dtype not in (torch.float32, torch.float64) or not ttype(k).dtype == ttype(v).dtype \
            == qt.dtype:
        return False
    if 0.0 < p < 1.0:
        return True
    if p != 0.0 or qt.dev != "cpu":
        return False
    mask_grad = attn_mask is not None and is_differentiable_value(attn_mask) \
        and g.active(attn_mask)
    return eager_attention_backend(q, k, v, attn_mask, mask_grad, 0.0, is_causal, scale,
                                   enable_gqa) == _SDP_MATH


@vjp(N.ScaledDotProductAttentionOp)
def scaled_dot_product_attention(
        g: Grad, out: Outs, ct: Cts, q: SSAValue, k: SSAValue, v: SSAValue,
        attn_mask: SSAValue | None, dropout_p: float | None = None,
        is_causal: bool | None = None, scale: float | None = None,
        enable_gqa: bool | None = None) -> Grads:
    """``dv = Pᵀ ct``, ``dS = P (ct vᵀ - rowsum(P ∘ ct vᵀ)) s``, ``dq = dS k``,
    ``dk = dSᵀ q`` on the probabilities ``P = safe_softmax(q kᵀ s + mask)`` (fully masked
    rows are zero, as torch's kernels give them); a float mask gets ``dS`` summed to its
    shape. Where eager runs its math kernel (with dropout, or on CPU where its selector
    picks it: `runs_math_kernel`) the forward computes ``P`` (and with dropout the
    noise ``N``: zero where dropped, ``1 / (1 - p)`` elsewhere) in that kernel's steps as
    ltorch ops (`_math_steps`), and the backward reads ``W = P ∘ N`` (or ``P``) for
    ``dv = Wᵀ ct`` and scales ``ct vᵀ`` by ``N``. Otherwise the forward stays eager's
    kernel and the backward recomputes ``P``; with dropout in other dtypes that kernel
    is eager's math kernel called whole, which returns ``W``, and the backward reads
    ``N`` off ``W``."""
    lt = g.ltorch
    qt, kt, vt = ttype(q), ttype(k), ttype(v)
    cd = compute_dtype(qt.dtype)
    p = float(dropout_p or 0.0)
    rep = 1
    if enable_gqa and qt.rank >= 3 and qt.sizes[-3] != kt.sizes[-3]:
        rep = qt.sizes[-3] // kt.sizes[-3]
    s = 1.0 / math.sqrt(qt.sizes[-1]) if scale is None else float(scale)
    dy = cast_to(g, ct[0], cd)  # type: ignore[arg-type]
    if runs_math_kernel(g, q, k, v, attn_mask, p, bool(is_causal), scale,
                        bool(enable_gqa)):
        probs, noise, weights, kc, vc = _math_steps(g, out[0], q, k, v, attn_mask, p,
                                                    bool(is_causal), s, rep)
        qc = q
        dv = lt.matmul(transpose_last(g, weights), dy)
        dp = lt.matmul(dy, transpose_last(g, vc))
        if noise is not None:
            dp = lt.mul(dp, noise)
    else:
        dropped = None
        if p:
            dropped = _attention_with_weights(g, out[0], q, k, v, attn_mask, p,
                                              bool(is_causal), scale, bool(enable_gqa))
        qc, kc, vc = (cast_to(g, a, cd) for a in (q, k, v))
        if rep > 1:
            kc, vc = _repeat_heads(g, kc, rep), _repeat_heads(g, vc, rep)
        if dropped is None:
            scores = lt.mul(lt.matmul(qc, transpose_last(g, kc)), g.const(s))
        else:  # recompute the probabilities exactly as eager's math kernel computed them
            sf = math.sqrt(abs(s))
            scores = lt.matmul(lt.mul(qc, g.const(-sf if s < 0 else sf)),
                               lt.mul(transpose_last(g, kc), g.const(sf)))
        if is_causal:
            length, source = qt.sizes[-2], kt.sizes[-2]
            tri = lt.tril(lt.ones(size=(length, source), dtype=torch.bool, device=qt.dev))
            scores = lt.where(tri, scores, neg_inf(g))
        if attn_mask is not None:
            if ttype(attn_mask).dtype == torch.bool:
                scores = lt.where(attn_mask, scores, neg_inf(g))
            else:
                scores = lt.add(scores, cast_to(g, attn_mask, cd))
        # a causal mask alone never masks a whole row
        probs = lt.safe_softmax(scores, dim=-1) if attn_mask is not None \
            else lt.softmax(scores, dim=-1)
        dp = lt.matmul(dy, transpose_last(g, vc))
        if dropped is None:
            dv = lt.matmul(transpose_last(g, probs), dy)
        else:  # the forward's weights after dropout: zero where dropped, P / (1 - p) elsewhere
            wd = cast_to(g, dropped, cd)
            dv = lt.matmul(transpose_last(g, wd), dy)
            dp = lt.where(lt.ne(wd, g.const(0.0)),
                          lt.mul(dp, g.const(1.0 / (1.0 - p) if p < 1.0 else 0.0)),
                          g.const(0.0))
    ds = lt.softmax_backward(dp, probs, dim=-1, input_dtype=cd)
    ds_scaled = lt.mul(ds, g.const(s))
    dq = lt.matmul(ds_scaled, kc)
    dk = lt.matmul(transpose_last(g, ds_scaled), qc)
    if rep > 1:
        dk, dv = _unrepeat_heads(g, dk, rep), _unrepeat_heads(g, dv, rep)
    dmask = None
    if attn_mask is not None and is_differentiable_value(attn_mask):
        dmask = grad_as(g, sum_to_shape(g, ds, ttype(attn_mask).sizes), attn_mask)
    return [grad_as(g, sum_to_shape(g, dq, qt.sizes), q),
            grad_as(g, sum_to_shape(g, dk, kt.sizes), k),
            grad_as(g, sum_to_shape(g, dv, vt.sizes), v), dmask]


# --------------------------------------------------------------------------- losses


@vjp(N.CrossEntropyOp)
def cross_entropy(g: Grad, out: Outs, ct: Cts, x: SSAValue, target: SSAValue,
                  weight: SSAValue | None, size_average: bool | None = None,
                  ignore_index: int | None = None, reduce: bool | None = None,
                  reduction: str | None = None, label_smoothing: float | None = None
                  ) -> Grads:
    """Class-index targets without label smoothing, input ``[N, C]`` or ``[C]``: the
    forward becomes ``log_softmax`` then ``nll_loss_forward``, as eager's ``cross_entropy``
    runs them, and the backward is their backward kernels on the saved log-probabilities
    and total weight, as eager's autograd runs them. Otherwise, with ``p = softmax(x)`` along
    the class dim and ``a`` the (smoothed, weighted, unignored) target distribution,
    ``dx = c (p sum(a) - a)`` where ``c`` is the loss cotangent per sample (divided by the
    mean's denominator). Probability targets also get ``dtarget = -c (1 - ls) w log p``
    and the class weights ``dw = -sum(c t' log p)``; class-index targets and their weights
    get ``None`` (torch: not differentiable)."""
    lt = g.ltorch
    red = N.legacy_reduction(reduction, size_average, reduce)
    xt, tt = ttype(x), ttype(target)
    if not is_float(tt.dtype) and not label_smoothing and xt.rank <= 2:
        if not is_differentiable_value(x):
            return [None, None, None]
        params: dict[str, Any] = {"reduction": red}
        if ignore_index is not None:
            params["ignore_index"] = ignore_index
        op = out[0].owner
        assert isinstance(op, N.CrossEntropyOp)
        cdim = 1 if xt.rank >= 2 else 0
        f = g.in_forward(op).ltorch
        logp = f.log_softmax(x, dim=cdim)
        loss, total = f.nll_loss_forward(logp, target, weight, **params)
        g.replace_forward(op, None, [loss], erase=True)
        dlogp = lt.nll_loss_backward(cast_to(g, ct[0], xt.dtype), logp, target,  # type: ignore[arg-type]
                                     total, weight, **params)
        dx = lt.log_softmax_backward(dlogp, logp, dim=cdim, input_dtype=xt.dtype)
        return [grad_as(g, dx, x), None, None]
    cd = compute_dtype(xt.dtype)
    cdim = 1 if xt.rank >= 2 else 0
    classes = xt.sizes[cdim]
    ls = float(label_smoothing or 0.0)
    xc = cast_to(g, x, cd)
    wb = None
    if weight is not None:
        wb = lt.reshape(cast_to(g, weight, cd),
                        shape=tuple(classes if i == cdim else 1 for i in range(xt.rank)))
    c = cast_to(g, ct[0], cd)  # type: ignore[arg-type]
    if red == "none":
        c = lt.unsqueeze(c, dim=cdim)
    probs = is_float(tt.dtype)
    if probs:
        tgt = cast_to(g, target, cd)
        tprime = tgt if ls == 0.0 else lt.add(lt.mul(tgt, g.const(1.0 - ls)),
                                              g.const(ls / classes))
        a = tprime if wb is None else lt.mul(tprime, wb)
        if red == "mean":
            rows = xt.numel() // max(classes, 1)  # symbolic: at least 1 (no guard)
            c = lt.div(c, g.const(rows if type(rows) is torch.SymInt
                                  else float(max(rows, 1))))
    else:
        ignore = -100 if ignore_index is None else ignore_index
        arange = lt.arange(end=classes, dtype=torch.int64, device=xt.dev)
        arange = lt.reshape(arange, shape=tuple(classes if i == cdim else 1
                                                for i in range(xt.rank)))
        tcol = lt.unsqueeze(target, dim=cdim)
        onehot = lt.to_dtype(lt.eq(tcol, arange), dtype=cd)
        valid = lt.ne(tcol, g.const(ignore))
        hot = onehot if wb is None else lt.mul(onehot, wb)
        a = hot if ls == 0.0 else lt.add(lt.mul(onehot, g.const(1.0 - ls)),
                                         g.const(ls / classes))
        if wb is not None and ls != 0.0:
            a = lt.mul(a, wb)
        a = lt.where(valid, a, g.const(0.0))
        if red == "mean":
            # torch's nll_loss denominator: the summed weights of the unignored targets.
            denom = lt.sum(lt.where(valid, hot, g.const(0.0)))
            c = lt.div(c, denom)
    dx = None
    if is_differentiable_value(x):
        p = lt.softmax(xc, dim=cdim)
        dx = grad_as(g, lt.mul(c, lt.sub(lt.mul(p, lt.sum(a, dim=cdim, keepdim=True)), a)), x)
    if not probs:
        return [dx, None, None]
    logp = lt.log_softmax(xc, dim=cdim)
    dt = dw = None
    if is_differentiable_value(target):
        coef = lt.mul(c, g.const(-(1.0 - ls)))
        dtgt = lt.mul(coef, logp if wb is None else lt.mul(logp, wb))
        dt = grad_as(g, dtgt, target)
    if weight is not None and is_differentiable_value(weight):
        terms = lt.neg(lt.mul(lt.mul(c, tprime), logp))
        dw = grad_as(g, sum_dims(g, terms, [i for i in range(xt.rank) if i != cdim]), weight)
    return [dx, dt, dw]


# --------------------------------------------------------------------------- torch.call


CALL_WITH_GRAD = runtime_callee("call_with_grad")
"""The callee a differentiated fallback call runs in the forward (records torch's graph)."""
HANDLE_VJP = runtime_callee("handle_vjp")
"""The callee of its backward (cotangents through that graph)."""


def _static_args(op: CallOp) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """The call's args and kwargs with every `OperandRef` encoded for `call_with_grad`
    (which substitutes its own differentiable copies of the inputs)."""
    from thunder_ir.dialects.torch import encode_refs

    args = encode_refs(from_attr(op.args))
    kwargs = () if op.kwargs is None else tuple(
        (k, encode_refs(from_attr(v))) for k, v in op.kwargs.data.items())
    return args, kwargs


@vjp(CallOp)
def torch_call(g: Grad, out: Outs, ct: Cts, inputs: list[SSAValue], **params: Any) -> Grads:
    """Differentiates an opaque torch call with torch's own autograd graph.

    The forward call becomes a call of `call_with_grad`, which runs the callee once,
    recording its graph for the inputs that need gradients (active floating-point
    tensors: ``batch_norm``'s running statistics get none), and returns its outputs and a
    handle to that graph. The backward is one ``torch.call`` of `handle_vjp` on the handle
    and the cotangents. Random draws, kernels and side effects are the forward's own.
    """
    from thunder_ir.dialects.types import HANDLE

    op = out[0].owner
    assert isinstance(op, CallOp)
    nograd = op.nograd.get_values() if op.nograd else ()
    diff = [i for i, v in enumerate(inputs)
            if is_differentiable_value(v) and g.active(v) and i not in nograd]
    grads: list[SSAValue | None] = [None] * len(inputs)
    if not diff:
        return [grads]
    args, kwargs = _static_args(op)
    fwd = make_call(
        CALL_WITH_GRAD, inputs, [op.callee.data, *(OperandRef(i) for i in range(len(inputs)))],
        {"args": args, "kwargs": kwargs, "grad_inputs": tuple(diff),
         "layout": None if op.multi is None else from_attr(op.multi)},
        result_types=[*(r.type for r in op.results), HANDLE], layout=True)
    fwd.location = op.location
    g.replace_forward(op, fwd, fwd.results[:-1], erase=True)
    ct_at = [i for i, c in enumerate(ct) if c is not None]
    operands = [fwd.results[-1], *(ct[i] for i in ct_at)]
    bwd = make_call(
        HANDLE_VJP, operands, [OperandRef(i) for i in range(len(operands))],
        {"ct_outputs": tuple(ct_at)}, result_types=[inputs[i].type for i in diff],
        layout=True if len(diff) > 1 else None)
    g.emitter.insert(bwd)  # a prebuilt op (torch.call has no shape rule to build from)
    for i, r in zip(diff, bwd.results):
        grads[i] = r
    return [grads]

