"""Decompositions and VJP rules of the ``quant`` dialect (`thunder_ir.dialects.quant`).

Decompositions say what the ops compute, in ltorch ops: quantizing is the scheme's
arithmetic (``amax``, ``div``, ``round``, ``clamp``, a conversion), a quantized linear is
its weight dequantized, then ``linear``. ``decompose-ltorch`` uses them where no executor
claims the op (an executor without the kernels; ``claim{executors=...}`` narrowed), and
the property tests check the kernels against them.

VJP rules (QLoRA-style fine-tuning): the quantized base is frozen, so the quantize ops
give the weight no gradient, and a quantized linear gives its input the gradient of a
linear on the dequantized weight (``dx = dy @ W``) and its bias ``sum(dy)``; a weight that
requires grad in a differentiated program is refused (`refuse_trainable_base`). Adapters
beside it (LoRA's low-rank product) are ordinary ops and differentiate as usual.
"""

from __future__ import annotations

from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import quant as Q
from thunder_ir.dialects import quant_cpu as QC
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.types import ttype
from thunder_ir.passes.decompositions import Decomposer, decomposes
from thunder_ir.passes.vjp import Grad, is_differentiable_value, vjp
from thunder_ir.passes.vjp_ltorch_core import Cts, Grads, Outs, sum_to_shape

# --------------------------------------------------------------------------- dequantize


def _num(d: Any, value: float | int) -> SSAValue:
    return d.prims.constant(value=value)  # type: ignore[no-any-return]


def dequant_int8(b: Any, q: SSAValue, scale: SSAValue) -> SSAValue:
    """``q * scale[:, None]`` in ``scale``'s dtype, built with ``b.ltorch`` (a `Decomposer`
    runs the rules inline; a `Grad` builds ltorch ops)."""
    wq = b.ltorch.to_dtype(q, dtype=ttype(scale).dtype)
    return b.ltorch.mul(wq, b.ltorch.unsqueeze(scale, dim=1))  # type: ignore[no-any-return]


def _cpu_parts(b: Any, t: SSAValue, n: int) -> list[tuple[SSAValue, int, int, bool]]:
    """``t``'s rows cut as the CPU int4 layout's parts: ``(rows of t, count, rows,
    halves)`` (`thunder_ir.dialects.quant_cpu.int4_cpu_parts`)."""
    parts = QC.int4_cpu_parts(n, *QC.int4_cpu_layout())
    pieces = [t] if len(parts) == 1 else b.ltorch.split(
        t, split_size_or_sections=tuple(c * r for c, r, _ in parts), dim=0)
    return [(p, c, r, h) for p, (c, r, h) in zip(pieces, parts, strict=True)]


def _cat(b: Any, parts: list[SSAValue]) -> SSAValue:
    return parts[0] if len(parts) == 1 else b.ltorch.cat(parts, dim=0)  # type: ignore[no-any-return]


def unpack_int4_cpu(b: Any, packed: SSAValue) -> SSAValue:
    """The codes ``[N, K]`` (0..15, uint8) of the CPU kernel's packed ``[N, K / 2]``:
    `thunder_ir.dialects.quant_cpu.int4_cpu_unpack` in ltorch ops."""
    n, half = ttype(packed).sizes
    out = []
    for piece, count, rows, halves in _cpu_parts(b, packed, n):
        by = b.ltorch.reshape(piece, shape=(count, 2 * half, rows // 2))
        nib = b.ltorch.stack([b.ltorch.bitwise_and(by, _num(b, 15)),
                              b.ltorch.floor_divide(by, _num(b, 16))], dim=3)
        order = b.ltorch.permute(nib, dims=(0, 3, 2, 1) if halves else (0, 2, 3, 1))
        out.append(b.ltorch.reshape(order, shape=(count * rows, 2 * half)))
    return _cat(b, out)


def pack_int4_cpu(b: Any, codes: SSAValue) -> SSAValue:
    """Codes ``[N, K]`` (0..15, any dtype) in the CPU kernel's packed layout, uint8
    ``[N, K / 2]``: the inverse of `unpack_int4_cpu`."""
    n, k = ttype(codes).sizes
    out = []
    for piece, count, rows, halves in _cpu_parts(b, codes, n):
        v = b.ltorch.reshape(piece, shape=(count, 2, rows // 2, k) if halves
                             else (count, rows // 2, 2, k))
        v = b.ltorch.permute(v, dims=(0, 3, 2, 1) if halves else (0, 3, 1, 2))
        low, high = b.ltorch.chunk(v, chunks=2, dim=3)  # [count, K, rows / 2, 1] each
        by = b.ltorch.add(low, b.ltorch.mul(high, _num(b, 16)))
        out.append(b.ltorch.reshape(by, shape=(count * rows, k // 2)))
    return b.ltorch.to_dtype(_cat(b, out), dtype=torch.uint8)  # type: ignore[no-any-return]


def dequant_int4(b: Any, codes: SSAValue, sz: SSAValue, group_size: int) -> SSAValue:
    """``(code - 8) * scale + zero`` per group, in ``sz``'s dtype (the codes unpacked
    from the CPU kernel's layout on the CPU)."""
    n, half = ttype(codes).sizes
    k = 2 * half
    dtype = ttype(sz).dtype
    if ttype(codes).dev == "cpu":
        each = b.ltorch.reshape(unpack_int4_cpu(b, codes), shape=(n, k // group_size,
                                                                   group_size))
    else:
        low = b.ltorch.bitwise_and(codes, _num(b, 15))
        high = b.ltorch.floor_divide(codes, _num(b, 16))
        each = b.ltorch.reshape(b.ltorch.stack([low, high], dim=2),
                                shape=(n, k // group_size, group_size))
    centered = b.ltorch.sub(b.ltorch.to_dtype(each, dtype=dtype), _num(b, 8))
    per_row = b.ltorch.permute(sz, dims=(1, 0, 2))  # [N, G, 2]
    scale, zero = b.ltorch.chunk(per_row, chunks=2, dim=2)  # [N, G, 1] each
    w = b.ltorch.add(b.ltorch.mul(centered, scale), zero)
    return b.ltorch.reshape(w, shape=(n, k))  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- decompositions


@decomposes(Q.QuantizeInt8Op)
def quantize_int8(d: Decomposer, w: SSAValue, dtype: torch.dtype | None = None
                  ) -> list[SSAValue]:
    """`thunder_ir.dialects.quant.int8_qparams` in ltorch ops."""
    dtype = dtype or ttype(w).dtype
    wf = d.ltorch.to_dtype(w, dtype=torch.float32)
    amax = d.ltorch.amax(d.ltorch.abs(wf), dim=(1,), keepdim=False)
    scale = d.ltorch.clamp(d.ltorch.div(amax, _num(d, 127.5)),
                           min=torch.finfo(torch.float32).eps)
    inverse = d.ltorch.div(_num(d, 1.0), scale)
    scaled = d.ltorch.mul(wf, d.ltorch.unsqueeze(inverse, dim=1))
    q = d.ltorch.to_dtype(d.ltorch.clamp(d.ltorch.round(scaled), min=-128, max=127),
                          dtype=torch.int8)
    return [q, d.ltorch.to_dtype(scale, dtype=dtype)]


@decomposes(Q.QuantizeInt4Op)
def quantize_int4(d: Decomposer, w: SSAValue, group_size: int,
                  dtype: torch.dtype | None = None) -> list[SSAValue]:
    """`thunder_ir.dialects.quant.int4_qparams` in ltorch ops."""
    n, k = ttype(w).sizes
    dtype = dtype or ttype(w).dtype
    groups = k // group_size
    wf = d.ltorch.reshape(d.ltorch.to_dtype(w, dtype=torch.float32),
                          shape=(n, groups, group_size))
    lo = d.ltorch.clamp(d.ltorch.amin(wf, dim=(2,), keepdim=True), max=0.0)
    hi = d.ltorch.clamp(d.ltorch.amax(wf, dim=(2,), keepdim=True), min=0.0)
    scale = d.ltorch.clamp(d.ltorch.div(d.ltorch.sub(hi, lo), _num(d, 15)),
                           min=torch.finfo(torch.float32).eps)
    zero = d.ltorch.add(lo, d.ltorch.mul(scale, _num(d, 8)))
    codes = d.ltorch.clamp(d.ltorch.round(d.ltorch.div(d.ltorch.sub(wf, lo), scale)),
                           min=0, max=15)
    if ttype(w).dev == "cpu":  # the kernel's layout (`_quantize_int4` keeps that one)
        packed = pack_int4_cpu(d, d.ltorch.reshape(codes, shape=(n, k)))
    else:
        codes = d.ltorch.reshape(codes, shape=(n, k // 2, 2))
        low, high = d.ltorch.chunk(codes, chunks=2, dim=2)
        packed = d.ltorch.add(low, d.ltorch.mul(high, _num(d, 16)))
        packed = d.ltorch.to_dtype(d.ltorch.reshape(packed, shape=(n, k // 2)),
                                   dtype=torch.uint8)
    sz = d.ltorch.cat([scale, zero], dim=2)  # [N, G, 2]
    sz = d.ltorch.permute(sz, dims=(1, 0, 2))
    return [packed, d.ltorch.to_dtype(sz, dtype=dtype)]


def _linear_in(b: Any, x: SSAValue, w: SSAValue, bias: SSAValue | None) -> SSAValue:
    """``linear(x, w, bias)`` computed in ``w``'s dtype, the result in ``x``'s (the bias
    added after the conversion back)."""
    dtype = ttype(x).dtype
    if ttype(w).dtype == dtype:
        return b.ltorch.linear(x, w, bias)  # type: ignore[no-any-return]
    y = b.ltorch.linear(b.ltorch.to_dtype(x, dtype=ttype(w).dtype), w, None)
    y = b.ltorch.to_dtype(y, dtype=dtype)
    return y if bias is None else b.ltorch.add(y, bias)  # type: ignore[no-any-return]


@decomposes(Q.Int8LinearOp)
def int8_linear(d: Decomposer, x: SSAValue, q: SSAValue, scale: SSAValue,
                bias: SSAValue | None) -> SSAValue:
    return _linear_in(d, x, dequant_int8(d, q, scale), bias)


@decomposes(Q.Int4LinearOp)
def int4_linear(d: Decomposer, x: SSAValue, codes: SSAValue, sz: SSAValue,
                bias: SSAValue | None, group_size: int) -> SSAValue:
    return _linear_in(d, x, dequant_int4(d, codes, sz, group_size), bias)


# --------------------------------------------------------------------------- VJP rules


@vjp(Q.QuantizeInt8Op)
def quantize_int8_vjp(g: Grad, out: Outs, ct: Cts, w: SSAValue,
                      dtype: torch.dtype | None = None) -> Grads:
    """The quantized base is frozen: no gradient to the weight."""
    return [None]


@vjp(Q.QuantizeInt4Op)
def quantize_int4_vjp(g: Grad, out: Outs, ct: Cts, w: SSAValue, group_size: int,
                      dtype: torch.dtype | None = None) -> Grads:
    """The quantized base is frozen: no gradient to the weight."""
    return [None]


class QuantizedBaseRequiresGrad(RuntimeError):
    """A quantized linear's base weight requires grad in a program that is differentiated."""


def refuse_trainable_base(g: Grad, out: Outs, storage: SSAValue) -> None:
    """Raises `QuantizedBaseRequiresGrad` where the quantized weight behind ``storage``
    (the scales: they require grad exactly when the weight does) requires grad here.

    The quantized base is frozen (QLoRA): its weight gets no gradient, where eager on the
    dequantized model would give it one (``dy^T x``), and differentiating through the
    quantization (``round``) would give yet another. So a weight that requires grad is
    refused, naming it and what to do, instead of any silent choice."""
    if not g.active(storage):
        return
    qz = storage.owner
    w = qz.operands[0] if isinstance(qz, Operation) and qz.operands else storage
    hint = (w.name_hint or "").removeprefix("t_")
    loc = location_text(out[0].owner) if isinstance(out[0].owner, Operation) else ""
    raise QuantizedBaseRequiresGrad(
        f"QuantizeWeights: the weight `{hint or '?'}` (its module path with '.' written "
        f"'_'){f' of the linear at {loc}' if loc else ''} requires grad, but a quantized "
        "base is frozen (QLoRA-style: it gets no gradient). Freeze it "
        "(`module.weight.requires_grad_(False)`; peft's LoRA models do), leave its module "
        "out of the transform (`QuantizeWeights(modules=[...])` naming the others), or run "
        "the call under `torch.no_grad()` / `torch.inference_mode()` for inference.")


def _linear_grads(g: Grad, ct: Cts, x: SSAValue, w: Any, bias: SSAValue | None,
                  n: int) -> tuple[SSAValue | None, SSAValue | None]:
    dy = ct[0]
    assert dy is not None
    dx = None
    if is_differentiable_value(x):
        wx = w()
        if ttype(wx).dtype != ttype(x).dtype:
            wx = g.ltorch.to_dtype(wx, dtype=ttype(x).dtype)
        dx = g.ltorch.matmul(dy, wx)
    db = sum_to_shape(g, dy, (n,)) if bias is not None and is_differentiable_value(bias) \
        else None
    return dx, db


@vjp(Q.Int8LinearOp)
def int8_linear_vjp(g: Grad, out: Outs, ct: Cts, x: SSAValue, q: SSAValue, scale: SSAValue,
                    bias: SSAValue | None) -> Grads:
    """``dx = dy @ (q * scale[:, None])``, ``dbias = sum(dy)``; none to the storage (a
    weight that requires grad is refused: `refuse_trainable_base`)."""
    refuse_trainable_base(g, out, scale)
    dx, db = _linear_grads(g, ct, x, lambda: dequant_int8(g, q, scale), bias,
                           ttype(q).sizes[0])
    return [dx, None, None, db]


@vjp(Q.Int4LinearOp)
def int4_linear_vjp(g: Grad, out: Outs, ct: Cts, x: SSAValue, codes: SSAValue, sz: SSAValue,
                    bias: SSAValue | None, group_size: int) -> Grads:
    """``dx = dy @ W`` (W dequantized), ``dbias = sum(dy)``; none to the storage (a
    weight that requires grad is refused: `refuse_trainable_base`)."""
    refuse_trainable_base(g, out, sz)
    dx, db = _linear_grads(g, ct, x, lambda: dequant_int4(g, codes, sz, group_size), bias,
                           ttype(codes).sizes[0])
    return [dx, None, None, db]


__all__ = ["QuantizedBaseRequiresGrad", "dequant_int4", "dequant_int8", "int4_linear",
           "int8_linear", "pack_int4_cpu", "quantize_int4", "quantize_int8",
           "refuse_trainable_base", "unpack_int4_cpu"]
