"""Hand-written Triton kernels, and the small ``@triton.jit`` helpers generated kernels call.

Two kinds of code live here:

* **Helpers for generated kernels** (`thunder_ir.lowering.triton_codegen` imports them by
  name into the source it writes): NaN-propagating ``max``/``min`` combine functions for
  ``tl.reduce`` (``tl.max`` ignores NaN; ``torch.amax`` returns it), and ``tanh``, ``expm1``
  and ``log1p`` written with ``tl.exp``/``tl.log`` only, so they run both compiled and
  under ``TRITON_INTERPRET=1`` (the interpreter has no libdevice).
* **The cross-entropy operator** (class-index targets): `cross_entropy_forward` and
  `cross_entropy_backward`, the callees of the ``torch.call`` ops the Triton executor
  lowers ``ltorch.cross_entropy`` to. One program handles one row of the ``(N, C)``
  logits; it streams the row in blocks with an online log-sum-exp, so ``C`` may be a
  vocabulary size. Statistics are computed in float32 whatever the logits' dtype.

Kernels launch on the logits' device: CUDA, or the CPU when ``TRITON_INTERPRET=1`` was set
before triton was imported.

Importing this module imports triton.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# --------------------------------------------------------------------------- helpers


@triton.jit
def max_nan(a, b):  # type: ignore[no-untyped-def]
    """``tl.reduce`` combine function: the maximum, NaN if either side is NaN."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_nan(a, b):  # type: ignore[no-untyped-def]
    """``tl.reduce`` combine function: the minimum, NaN if either side is NaN."""
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def expm1(x):  # type: ignore[no-untyped-def]
    """``exp(x) - 1`` without cancellation near 0 (Kahan's ``(u - 1) * x / log(u)``)."""
    u = tl.exp(x)
    um1 = u - 1.0
    r = tl.where(um1 == -1.0, -1.0, um1 * x / tl.log(u))
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def log1p(x):  # type: ignore[no-untyped-def]
    """``log(1 + x)`` without cancellation near 0 (``log(u) * x / (u - 1)``, ``u = 1 + x``)."""
    u = 1.0 + x
    r = tl.log(u) * (x / (u - 1.0))
    return tl.where(u == 1.0, x, tl.where(u == float("inf"), u, r))


@triton.jit
def tanh(x):  # type: ignore[no-untyped-def]
    """``tanh(x)``: an odd Taylor polynomial near 0, ``1 - 2 / (exp(2|x|) + 1)`` elsewhere."""
    a = tl.abs(x)
    x2 = x * x
    small = x * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333
                                                         + x2 * -0.05396825396825397)))
    big = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)
    big = tl.where(x < 0, -big, big)
    return tl.where(a < 0.0625, small, big)


# --------------------------------------------------------------------------- cross entropy

_MAX_BLOCK = 4096
_REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def _row_logsumexp(x_row, C, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """Online log-sum-exp and sum of one row of ``C`` logits, in float32."""
    cols = tl.arange(0, BLOCK)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.full([], 0.0, tl.float32)
    total = tl.full([], 0.0, tl.float32)
    for start in range(0, C, BLOCK):
        cmask = start + cols < C
        x = tl.load(x_row + start + cols, mask=cmask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # A row of -inf keeps m = -inf; exp(-inf - -inf) would be NaN, so guard the scale.
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.sum(tl.where(cmask, tl.exp(x - m_new), 0.0), axis=0)
        total += tl.sum(tl.where(cmask, x, 0.0), axis=0)
        m = m_new
    return m + tl.log(s), total


@triton.jit
def _cross_entropy_fwd_kernel(  # type: ignore[no-untyped-def]
        logits, target, losses, stride, C, ignore_index, label_smoothing,
        BLOCK: tl.constexpr):
    """One program per row: ``losses[row] = lse - (1 - ls) x[t] - ls mean(x)`` (0 if ignored)."""
    row = tl.program_id(0).to(tl.int64)
    x_row = logits + row * stride
    t = tl.load(target + row)
    lse, total = _row_logsumexp(x_row, C, BLOCK)
    valid = t != ignore_index
    safe_t = tl.where(valid, t, 0)
    x_t = tl.load(x_row + safe_t).to(tl.float32)
    loss = lse - (1.0 - label_smoothing) * x_t - label_smoothing * (total / C)
    tl.store(losses + row, tl.where(valid, loss, 0.0))


@triton.jit
def _cross_entropy_bwd_kernel(  # type: ignore[no-untyped-def]
        logits, target, scale, grad, stride, C, ignore_index, label_smoothing,
        PER_ROW: tl.constexpr, BLOCK: tl.constexpr):
    """One program per row: ``grad = c (softmax(x) - (1 - ls) onehot(t) - ls / C)``.

    ``c`` is ``scale[row]`` (``PER_ROW``, reduction ``none``) or ``scale[0]`` (the loss
    cotangent, already divided by the mean's denominator); ignored rows get 0.
    """
    row = tl.program_id(0).to(tl.int64)
    x_row = logits + row * stride
    g_row = grad + row * C
    t = tl.load(target + row)
    if PER_ROW:
        c = tl.load(scale + row).to(tl.float32)
    else:
        c = tl.load(scale).to(tl.float32)
    c = tl.where(t != ignore_index, c, 0.0)
    lse, _total = _row_logsumexp(x_row, C, BLOCK)
    cols = tl.arange(0, BLOCK)
    for start in range(0, C, BLOCK):
        idx = start + cols
        cmask = idx < C
        x = tl.load(x_row + idx, mask=cmask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        hot = tl.where(idx == t, 1.0 - label_smoothing, 0.0)
        g = c * (p - hot - label_smoothing / C)
        tl.store(g_row + idx, g.to(grad.dtype.element_ty), mask=cmask)


def _check(logits: torch.Tensor, target: torch.Tensor, reduction: str) -> None:
    if logits.ndim != 2 or target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"triton cross_entropy expects (N, C) logits and (N,) targets, got "
                         f"{tuple(logits.shape)} and {tuple(target.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"triton cross_entropy: reduction must be one of {_REDUCTIONS}, "
                         f"got {reduction!r}")
    if logits.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(f"triton cross_entropy: logits on {logits.device} need CUDA "
                           "(or TRITON_INTERPRET=1 set before importing triton)")


def _block(classes: int) -> tuple[int, int]:
    """Block size and warp count for rows of ``classes`` logits."""
    block = min(_MAX_BLOCK, triton.next_power_of_2(max(classes, 1)))
    return block, max(1, min(16, block // 256))


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                          reduction: str = "mean", label_smoothing: float = 0.0
                          ) -> torch.Tensor:
    """``torch.nn.functional.cross_entropy`` for (N, C) logits and int64 class targets.

    Args:
        logits: float16, bfloat16 or float32 logits of shape (N, C).
        target: int64 class indices of shape (N,); entries equal to ``ignore_index`` add
            nothing (and do not count in the mean).
        ignore_index: the target value to ignore.
        reduction: ``"mean"`` (over unignored targets), ``"sum"`` or ``"none"``.
        label_smoothing: in ``[0, 1]``, as torch.

    Returns:
        The loss in the logits' dtype: a 0-d tensor, or (N,) for ``reduction="none"``.
    """
    _check(logits, target, reduction)
    n, classes = logits.shape
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    target = target.contiguous()
    losses = torch.empty((n,), dtype=torch.float32, device=logits.device)
    block, warps = _block(classes)
    if n > 0:
        _cross_entropy_fwd_kernel[(n,)](logits, target, losses, logits.stride(0), classes,
                                        ignore_index, float(label_smoothing), BLOCK=block,
                                        num_warps=warps)
    if reduction == "none":
        return losses.to(logits.dtype)
    total = losses.sum()
    if reduction == "sum":
        return total.to(logits.dtype)
    return (total / (target != ignore_index).sum()).to(logits.dtype)


def cross_entropy_backward(grad_output: torch.Tensor, logits: torch.Tensor,
                           target: torch.Tensor, ignore_index: int = -100,
                           reduction: str = "mean", label_smoothing: float = 0.0
                           ) -> torch.Tensor:
    """The gradient of `cross_entropy_forward` with respect to ``logits``.

    Args:
        grad_output: the loss cotangent: 0-d, or (N,) for ``reduction="none"``.
        logits, target, ignore_index, reduction, label_smoothing: as the forward got them.

    Returns:
        The (N, C) gradient, in the logits' dtype.
    """
    _check(logits, target, reduction)
    n, classes = logits.shape
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    target = target.contiguous()
    if reduction == "mean":
        scale = grad_output.to(torch.float32) / (target != ignore_index).sum()
    else:
        scale = grad_output.to(torch.float32).contiguous()
    grad = torch.empty((n, classes), dtype=logits.dtype, device=logits.device)
    block, warps = _block(classes)
    if n > 0:
        _cross_entropy_bwd_kernel[(n,)](logits, target, scale, grad, logits.stride(0), classes,
                                        ignore_index, float(label_smoothing),
                                        PER_ROW=reduction == "none", BLOCK=block,
                                        num_warps=warps)
    return grad


__all__ = ["cross_entropy_backward", "cross_entropy_forward", "expm1", "log1p", "max_nan",
           "min_nan", "tanh"]
