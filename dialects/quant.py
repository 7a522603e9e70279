"""The ``quant`` dialect: weight-only quantized linears on quantized storage.

The ops the ``quantize-weights`` pass (`thunder_ir.passes.quantize`) puts in place of
``ltorch.linear`` on a selected weight. Each scheme is a pair: an op that quantizes the
weight into typed storage, and a linear on that storage.

* int8, symmetric per output channel (torchao's ``int8_weight_only``)::

      %q, %scale = quant.quantize_int8 %w          : f32[N, K] -> i8[N, K], f32[N]
      %y = quant.int8_linear %x, %q, %scale[, %b]  : ``x @ (q * scale[:, None]).T + b``

  ``scale = max(amax(|w|, row) / 127.5, eps)``,
  ``q = clamp(round(w * (1 / scale)), -128, 127)`` (torchao's arithmetic, bit for bit).
* int4, asymmetric per group of ``group_size`` input columns (torchao's
  ``int4_weight_only``, tinygemm's convention)::

      %codes, %sz = quant.quantize_int4 %w {group_size = 32}
                                   : f32[N, K] -> u8[N, K / 2], f32[K / g, N, 2]
      %y = quant.int4_linear %x, %codes, %sz[, %b] {group_size = 32}

  ``codes`` holds two 4-bit codes a byte: on the CPU in the layout torch's int4 kernel
  takes (``aten._convert_weight_to_int4pack_for_cpu``'s, blocked over rows; see
  `thunder_ir.dialects.quant_cpu`), its only copy; elsewhere plainly (column ``2j`` in the
  low nibble, ``2j + 1`` in the high one, as `int4_qparams` returns them);
  ``sz[g, n] = (scale, zero)``; the weight is ``(code - 8) * scale + zero``.

The scales' dtype is the dtype the product is computed in: the weight's by default
(``dtype`` on the quantize op: another, ``QuantizeWeights(compute_dtype=torch.bfloat16)``,
whose linears convert their input to it, run the kernel, and convert the result back;
torch's CPU kernels are several times faster on bfloat16 activations).

The ops are ltorch-level (`LtorchOp`: the torch executor claims them whole, so
``decompose-ltorch`` leaves them) with their own shape rules (``SHAPE_RULE``, declared
with the op by `quant_op`). Their Python calls are
this module's kernels, which generated code calls as ``tir.quantize_int8`` and so on:

* ``quantize_*`` are computed once per weight: the result is kept beside the weight
  (`QUANTIZED`, weakly keyed by the weight tensor and checked against its version
  counter, so an in-place update of the weight quantizes again); a cached call pays a
  dictionary look-up.
* ``int8_linear`` is ``torch.ops.aten._weight_int8pack_mm`` (bfloat16 and float16
  activations; on float32 ones, 3-12x slower there, one row (a decode step) is
  `thunder_ir.dialects.quant_cpu.FUSED`'s one-pass product that Inductor compiles per
  weight shape, and more rows `dequantized_mm`, a block of rows at a time);
  ``int4_linear`` is
  ``aten._weight_int4pack_mm_for_cpu`` on the codes, kept in its packed layout.
  Elsewhere (another device, a dtype the kernel does not take) they dequantize and call
  ``F.linear``.

Decompositions (dequantize, then ``linear``) and VJP rules are
`thunder_ir.passes.quant_rules`'.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import Attribute, Dialect, Operation
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure

from thunder_ir.dialects import quant_devices as QD
from thunder_ir.dialects.base import ShapeError
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.quant_cpu import FUSED, int4_cpu_pack, int4_cpu_unpack
from thunder_ir.dialects.traits import Library
from thunder_ir.dialects.types import TensorType, tensor_type

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
"""Weight and activation dtypes the quantized linears take."""

INT4_GROUP_SIZES = (32, 64, 128, 256)
"""Group sizes of the int4 scheme (those of torch's int4 CPU kernel)."""


# --------------------------------------------------------------------------- schemes


def int8_qparams(w: torch.Tensor, dtype: torch.dtype | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8 quantization of a 2-D weight: ``(q, scale)``, ``q`` int8,
    ``scale`` of ``dtype`` (default ``w``'s; computed in float32, as torchao does)."""
    wf = w.detach().float()
    amax = wf.abs().amax(dim=1)
    scale = (amax / 127.5).clamp(min=torch.finfo(torch.float32).eps)
    q = (wf * (1.0 / scale)[:, None]).round().clamp(-128, 127).to(torch.int8)
    return q, scale.to(dtype or w.dtype)


def int8_dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The weight an int8 pair stands for: ``q * scale[:, None]`` in ``scale``'s dtype."""
    return q.to(scale.dtype) * scale[:, None]


def int4_qparams(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 quantization of a 2-D weight per group of ``group_size`` columns:
    ``(codes, sz)``, ``codes`` uint8 ``[N, K / 2]`` (two codes a byte, the even column
    low), ``sz`` ``[K / group_size, N, 2]`` of ``dtype`` (default ``w``'s; scale, zero),
    computed in float32 (torchao's ``int4_weight_only`` with its float zero point)."""
    n, k = w.shape
    wf = w.detach().float().reshape(n, k // group_size, group_size)
    lo = wf.amin(dim=2).clamp(max=0.0)
    hi = wf.amax(dim=2).clamp(min=0.0)
    scale = ((hi - lo) / 15).clamp(min=torch.finfo(torch.float32).eps)
    zero = lo + scale * 8
    codes = ((wf - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.uint8)
    codes = codes.reshape(n, k)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    sz = torch.stack([scale.t(), zero.t()], dim=2).contiguous()
    return packed, sz.to(dtype or w.dtype)


def int4_dequantize(codes: torch.Tensor, sz: torch.Tensor, group_size: int) -> torch.Tensor:
    """The weight an int4 pair stands for: ``(code - 8) * scale + zero`` per group, in
    ``sz``'s dtype."""
    n = codes.shape[0]
    each = torch.stack([codes & 15, codes >> 4], dim=2).reshape(n, -1).to(sz.dtype)
    scale = sz[:, :, 0].t().repeat_interleave(group_size, dim=1)
    zero = sz[:, :, 1].t().repeat_interleave(group_size, dim=1)
    return (each - 8) * scale + zero


def takes(bits: int, group_size: int, shape: tuple[int, ...], dtype: torch.dtype) -> bool:
    """Whether the scheme takes a weight of this shape and dtype: 2-D float32, bfloat16 or
    float16; for int4, columns a multiple of ``group_size`` and rows of 16 (the CPU
    kernel's packing)."""
    if len(shape) != 2 or dtype not in FLOATS:
        return False
    return bits == 8 or (shape[1] % group_size == 0 and shape[0] % 16 == 0)


# --------------------------------------------------------------------------- kernels


class Quantized:
    """Results computed once per source tensor: ``get(src, key, make)`` returns
    ``make(src)``'s result, kept while ``src`` lives and its version counter (bumped by
    every in-place write) is unchanged."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[Any, ...]] = {}

    def get(self, src: torch.Tensor, key: Any, make: Callable[[torch.Tensor], Any]) -> Any:
        """The kept result of ``make(src)`` under ``key``, made now if missing or stale
        (another version, or other data: ``src.data = ...`` swaps the data of the same
        tensor object)."""
        hit = self.entries.get(id(src))
        version = (src._version, src.data_ptr(), src.dtype, src.shape)
        if hit is not None and hit[0]() is src and hit[1] == version and hit[2] == key:
            return hit[3]
        if src.numel() and not src.untyped_storage().nbytes():
            raise RuntimeError(
                f"QuantizeWeights: a {src.dtype} weight of shape {tuple(src.shape)} has no "
                "float data any more (free_float_weights freed it), so it cannot be "
                "quantized again (another scheme, another device, or data written to it): "
                "call free_float_weights only after the model has run on the device, and "
                "with the transform, it keeps")
        # Made outside inference mode and autocast: the same tensors serve every later
        # call, in any mode (a training step saves them for its backward).
        with torch.inference_mode(False), torch.no_grad(), \
                torch.autocast("cpu", enabled=False):
            out = make(src)
        ident = id(src)
        entries = self.entries

        def forget(_ref: weakref.ref[torch.Tensor]) -> None:  # src died: drop its results
            entries.pop(ident, None)

        self.entries[ident] = (weakref.ref(src, forget), version, key, out)
        return out

    def moved(self, src: torch.Tensor) -> None:
        """``src``'s data moved on purpose (its float storage freed) while its kept result
        stays valid: the result is kept under the new location."""
        hit = self.entries.get(id(src))
        if hit is not None and hit[0]() is src:
            version = (src._version, src.data_ptr(), src.dtype, src.shape)
            self.entries[id(src)] = (hit[0], version, hit[2], hit[3])

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        """Forgets every kept result."""
        self.entries.clear()


QUANTIZED = Quantized()
"""The quantized weights (and kernel layouts) of this process, kept beside their
weights."""


def _quantize_int8(w: torch.Tensor, dtype: torch.dtype | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    def make(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return int8_qparams(t, dtype)

    return QUANTIZED.get(w, ("int8", dtype), make)  # type: ignore[no-any-return]


def _quantize_int4(w: torch.Tensor, group_size: int, dtype: torch.dtype | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    def make(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        codes, sz = int4_qparams(t, group_size, dtype)
        # on the CPU, only the kernel's layout is kept (its one copy of the codes)
        return (int4_kernel_layout(codes) if t.device.type == "cpu" else codes), sz

    return QUANTIZED.get(w, ("int4", group_size, dtype), make)  # type: ignore[no-any-return]


def dequantize_kept(w: torch.Tensor) -> torch.Tensor | None:
    """What the storage kept for ``w`` stands for (``q * scale``; int4's codes unpacked
    from the CPU kernel's layout, then ``(code - 8) * scale + zero``), in ``w``'s dtype;
    None where none is kept for ``w`` as it is now. Read from that storage alone, so it
    also works after ``free_float_weights``."""
    hit = QUANTIZED.entries.get(id(w))
    version = (w._version, w.data_ptr(), w.dtype, w.shape)
    if hit is None or hit[0]() is not w or hit[1] != version:
        return None
    key, kept = hit[2], hit[3]
    with torch.no_grad():
        if key[0] == "int8":
            return int8_dequantize(*kept).to(w.dtype)
        codes = int4_plain_layout(kept[0]) if kept[0].device.type == "cpu" else kept[0]
        return int4_dequantize(codes, kept[1], key[1]).to(w.dtype)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def _finish(y: torch.Tensor, x: torch.Tensor, n: int, bias: torch.Tensor | None
            ) -> torch.Tensor:
    y = y.reshape(*x.shape[:-1], n).to(x.dtype)
    return y if bias is None else y + bias


DEQUANTIZE_ROWS = 256
"""Rows of an int8 weight dequantized at a time by the float32 path (`dequantized_mm`)."""


def dequantized_mm(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x @ (q * scale[:, None]).T`` for 2-D float32 ``x``, dequantizing
    `DEQUANTIZE_ROWS` rows of ``q`` at a time into one buffer (cache-sized, so the float
    weight is never whole in memory): the product eager computes on the dequantized
    weight, bit for bit in the tests. torch's int8 kernel on float32 activations is
    several times slower (it vectorizes bfloat16 ones only)."""
    n, k = q.shape
    out = torch.empty(x.shape[0], n, dtype=x.dtype)
    buf = torch.empty(min(DEQUANTIZE_ROWS, n), k, dtype=x.dtype)
    for i in range(0, n, DEQUANTIZE_ROWS):
        rows = q[i:i + DEQUANTIZE_ROWS]
        w = buf[:rows.shape[0]]
        w.copy_(rows)
        w.mul_(scale[i:i + DEQUANTIZE_ROWS, None])
        torch.mm(x, w.t(), out=out[:, i:i + rows.shape[0]])
    return out


def _int8_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                 bias: torch.Tensor | None = None) -> torch.Tensor:
    xc = x.to(scale.dtype)  # (scales of another dtype: the compute dtype asked for)
    if x.device.type == "cpu" and not x.requires_grad:
        if scale.dtype == torch.float32:  # one row: fused; more: a block at a time
            rows = _rows(xc)
            y = FUSED.int8(rows, q, scale)
            y = dequantized_mm(rows, q, scale) if y is None else y
            return _finish(y, x, q.shape[0], bias)
        return _finish(torch.ops.aten._weight_int8pack_mm(_rows(xc), q, scale), x,
                       q.shape[0], bias)
    return _finish(F.linear(xc, int8_dequantize(q, scale)), x, q.shape[0], bias)


def int4_kernel_layout(codes: torch.Tensor) -> torch.Tensor:
    """``codes`` (two per byte, the even column low) in the layout of torch's int4 CPU
    kernel (``_convert_weight_to_int4pack_for_cpu``; `thunder_ir.dialects.quant_cpu`), what
    ``quant.quantize_int4`` keeps on the CPU."""
    n = codes.shape[0]
    return int4_cpu_pack(torch.stack([codes & 15, codes >> 4], dim=2).reshape(n, -1))


def int4_plain_layout(packed: torch.Tensor) -> torch.Tensor:
    """The codes of the CPU kernel's layout two per byte, the even column low (what
    `int4_qparams` returns): the inverse of `int4_kernel_layout`."""
    each = int4_cpu_unpack(packed)
    return each[:, 0::2] | (each[:, 1::2] << 4)


def _int4_linear(x: torch.Tensor, codes: torch.Tensor, sz: torch.Tensor,
                 bias: torch.Tensor | None = None, group_size: int = 32) -> torch.Tensor:
    xc = x.to(sz.dtype)
    if x.device.type == "cpu" and not x.requires_grad:  # (codes: the kernel's layout)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(_rows(xc), codes, group_size, sz)
        return _finish(y, x, codes.shape[0], bias)
    if x.device.type == "cuda" and not x.requires_grad and QD.runs_tinygemm(x.device, sz.dtype):
        y = QD.int4_linear_cuda(_rows(xc), codes, sz, group_size, QUANTIZED)
        return _finish(y, x, codes.shape[0], bias)
    plain = int4_plain_layout(codes) if codes.device.type == "cpu" else codes
    return _finish(F.linear(xc, int4_dequantize(plain, sz, group_size)), x, codes.shape[0],
                   bias)


# --------------------------------------------------------------------------- shape rules


def _weight_2d(name: str, w: Any) -> TensorType:
    if not isinstance(w, TensorType) or w.rank != 2 or w.dtype not in FLOATS:
        raise ShapeError(f"{name}: takes a 2-D float32, bfloat16 or float16 weight, got {w}")
    return w


def _linear_result(name: str, x: Any, n: int, k: int, bias: Any) -> TensorType:
    """The input's dtype (the scales' dtype is the one the product is computed in)."""
    if not isinstance(x, TensorType) or x.rank < 1 or x.sizes[-1] != k \
            or x.dtype not in FLOATS:
        raise ShapeError(f"{name}: input {x} is not a float tensor ending in the weight's "
                         f"{k} columns")
    if bias is not None and (not isinstance(bias, TensorType) or bias.sizes != (n,)
                             or bias.dtype != x.dtype):
        raise ShapeError(f"{name}: bias {bias} is not a [{n}] {x.dtype} tensor")
    return tensor_type((*x.sizes[:-1], n), x.dtype, x.dev)


def _quantize_int8_rule(types: list[Any], params: dict[str, Any]) -> list[Attribute]:
    w = _weight_2d("quant.quantize_int8", types[0])
    n, k = w.sizes
    dtype = params.get("dtype") or w.dtype
    return [tensor_type((n, k), torch.int8, w.dev), tensor_type((n,), dtype, w.dev)]


def _int8_linear_rule(types: list[Any], params: dict[str, Any]) -> Attribute:
    x, q, scale, bias = types
    if not isinstance(q, TensorType) or q.rank != 2 or q.dtype != torch.int8:
        raise ShapeError(f"quant.int8_linear: the weight is a 2-D int8 tensor, got {q}")
    n, k = q.sizes
    if not isinstance(scale, TensorType) or scale.sizes != (n,) or scale.dtype not in FLOATS:
        raise ShapeError(f"quant.int8_linear: scales {scale} are not [{n}] floats")
    return _linear_result("quant.int8_linear", x, n, k, bias)


def _check_group(name: str, k: int, group_size: int) -> None:
    if group_size not in INT4_GROUP_SIZES or k % group_size:
        raise ShapeError(f"{name}: group_size {group_size} must be one of "
                         f"{INT4_GROUP_SIZES} and divide the {k} columns")


def _quantize_int4_rule(types: list[Any], params: dict[str, Any]) -> list[Attribute]:
    w = _weight_2d("quant.quantize_int4", types[0])
    n, k = w.sizes
    g = params["group_size"]
    _check_group("quant.quantize_int4", k, g)
    return [tensor_type((n, k // 2), torch.uint8, w.dev),
            tensor_type((k // g, n, 2), params.get("dtype") or w.dtype, w.dev)]


def _int4_linear_rule(types: list[Any], params: dict[str, Any]) -> Attribute:
    x, codes, sz, bias = types
    if not isinstance(codes, TensorType) or codes.rank != 2 or codes.dtype != torch.uint8:
        raise ShapeError(f"quant.int4_linear: the codes are a 2-D uint8 tensor, got {codes}")
    n, k = codes.sizes[0], codes.sizes[1] * 2
    g = params["group_size"]
    _check_group("quant.int4_linear", k, g)
    if not isinstance(sz, TensorType) or sz.sizes != (k // g, n, 2) or sz.dtype not in FLOATS:
        raise ShapeError(f"quant.int4_linear: scales and zeros {sz} are not "
                         f"[{k // g}, {n}, 2] floats")
    return _linear_result("quant.int4_linear", x, n, k, bias)


# --------------------------------------------------------------------------- ops


_Op = TypeVar("_Op", bound=type[LtorchOp])


def quant_op(kernel: Callable[..., Any], rule: Callable[..., Any]) -> Callable[[_Op], _Op]:
    """Declares a quant op: IRDL definition, its kernel (``TORCH_FN``, what the torch
    executor calls) and its shape rule (``SHAPE_RULE``, for static and symbolic sizes
    alike: plain arithmetic on the sizes, no meta kernel)."""

    def wrap(cls: _Op) -> _Op:
        op = irdl_op_definition(cls)
        op.TORCH_FN = staticmethod(kernel)  # type: ignore[attr-defined]
        op.SHAPE_RULE = staticmethod(rule)  # type: ignore[attr-defined]
        return op  # type: ignore[return-value]

    return wrap


class QuantOp(LtorchOp):
    """Base of the quant ops: pure, run by a library kernel, typed by their own rule."""

    SHAPE_RULE: ClassVar[Callable[[list[Any], dict[str, Any]], Any]]
    BITS: ClassVar[int | None] = None
    """A quantized linear's scheme (8, 4); None for the quantize ops."""

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        return cls.SHAPE_RULE(list(operand_types), params)  # type: ignore[no-any-return]

    def runs_whole(self) -> bool:
        """Whether the torch executor runs this op as its kernel on its device: a quantize
        op always (its storage is made once); a linear where `quant_devices.LINEAR_KERNELS`
        names a kernel. Otherwise it decomposes (dequantize, then linear), which the
        fusion executors take (CUDA int8, for one)."""
        if self.BITS is None:
            return True
        x, scales = self.operands[0].type, self.operands[2].type
        if not isinstance(x, TensorType) or not isinstance(scales, TensorType):
            return True
        dev = x.dev
        kernel = QD.linear_kernel(self.BITS, dev, scales.dtype, QD.device_capability(dev))
        return kernel != QD.DEQUANTIZE


@quant_op(_quantize_int8, _quantize_int8_rule)
class QuantizeInt8Op(QuantOp):
    """`%q, %scale = quant.quantize_int8 %w [{dtype}]`: symmetric per-row int8 quantization
    (scales of ``dtype``, default the weight's)"""

    name = "quant.quantize_int8"

    weight = operand_def(TensorType)
    dtype = opt_prop_def(Attribute)
    qweight = result_def(TensorType)
    scale = result_def(TensorType)
    traits = traits_def(Pure(), Library())


@quant_op(_int8_linear, _int8_linear_rule)
class Int8LinearOp(QuantOp):
    """`%y = quant.int8_linear %x, %q, %scale[, %bias]`: ``x @ (q * scale[:, None]).T + bias``"""

    name = "quant.int8_linear"
    BITS: ClassVar[int | None] = 8

    input = operand_def(TensorType)
    qweight = operand_def(TensorType)
    scale = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())


@quant_op(_quantize_int4, _quantize_int4_rule)
class QuantizeInt4Op(QuantOp):
    """`%codes, %sz = quant.quantize_int4 %w {group_size[, dtype]}`: asymmetric int4 per
    group (scales and zeros of ``dtype``, default the weight's)"""

    name = "quant.quantize_int4"

    weight = operand_def(TensorType)
    group_size = prop_def(IntegerAttr)
    dtype = opt_prop_def(Attribute)
    codes = result_def(TensorType)
    scales_and_zeros = result_def(TensorType)
    traits = traits_def(Pure(), Library())


@quant_op(_int4_linear, _int4_linear_rule)
class Int4LinearOp(QuantOp):
    """`%y = quant.int4_linear %x, %codes, %sz[, %bias] {group_size}`: ``x @ W.T + bias``,
    ``W = (code - 8) * scale + zero`` per group"""

    name = "quant.int4_linear"
    BITS: ClassVar[int | None] = 4

    input = operand_def(TensorType)
    codes = operand_def(TensorType)
    scales_and_zeros = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    group_size = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())


QUANT_OPS: list[type[Operation]] = [QuantizeInt8Op, Int8LinearOp, QuantizeInt4Op, Int4LinearOp]

Quant = Dialect("quant", QUANT_OPS, [])

__all__ = ["FLOATS", "INT4_GROUP_SIZES", "QUANTIZED", "QUANT_OPS", "Int4LinearOp",
           "Int8LinearOp", "Quant", "QuantOp", "Quantized", "QuantizeInt4Op",
           "QuantizeInt8Op", "int4_dequantize", "int4_kernel_layout", "int4_plain_layout",
           "int4_qparams", "dequantize_kept", "dequantized_mm", "int8_dequantize",
           "int8_qparams", "quant_op", "takes"]
