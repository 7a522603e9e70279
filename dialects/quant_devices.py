"""Which kernel a quantized linear of the ``quant`` dialect runs on each device: a rule
table (`LINEAR_KERNELS`), and the CUDA kernel it names.

What torch 2.13 provides, read from its sources (``native_functions.yaml``,
``_meta_registrations.py``, ``aten/src/ATen/native/cuda/int4mm.cu`` and ``int8mm.cu``):

* ``aten._weight_int8pack_mm`` has CPU, CUDA, MPS and XPU kernels. The CUDA one is one
  thread per output element with a serial loop over ``K``, converting the input and the
  scales to float32 (each thread reads its own weight row: no coalescing, no tensor
  cores). torchao's ``Int8WeightOnlyConfig`` does not use it on CUDA either (it converts
  the int8 weight and multiplies with ``mm``, for ``torch.compile`` to fuse). So on CUDA
  an int8 linear is *dequantize then linear*: the torch executor leaves the op unclaimed,
  it decomposes (`thunder_ir.passes.quant_rules`) into a conversion, a multiply by the
  scales and ``linear``, and the GPU fusion executors (Triton, Inductor after tier-up)
  fuse the dequantization into one kernel before cuBLAS's product. The values are
  eager's on the dequantized model (the same weight, the same ``linear``).
* int4: ``aten._convert_weight_to_int4pack`` (CUDA and MPS) packs ``uint8[N, K / 2]``
  codes, the *even* column in the *high* nibble (torchao's ``quant_2d``; the scheme's
  storage has it in the low one), into tinygemm's tensor-core layout
  ``int32[N / 8, K / (16 t), 32, t / 2]`` for ``t`` inner k-tiles (2, 4 or 8; ``K`` a
  multiple of ``16 t``); ``aten._weight_int4pack_mm`` (CUDA, MPS) multiplies a
  contiguous 2-D **bfloat16** input by it with ``[K / g, N, 2]`` bfloat16 scales and
  zeros, ``g`` in 32..256, the weight ``(code - 8) * scale + zero`` (the scheme's), and
  returns bfloat16. Its kernel is compiled for sm80 and later only. So on CUDA an int4
  linear computed in bfloat16 (a bfloat16 model, or ``compute_dtype=torch.bfloat16``)
  on an sm80+ device runs tinygemm (`int4_linear_cuda`); otherwise (float32 or float16
  compute, an older GPU) it is dequantize then linear, as int8.
* CPU: the kernels of `thunder_ir.dialects.quant` (``_weight_int8pack_mm``,
  ``_weight_int4pack_mm_for_cpu``, and their float32 paths); any other device:
  dequantize then linear.

The packed layout is per device: the quantized storage is kept beside the weight and
made again when the weight's data moves (``model.to("cuda")`` swaps each parameter's
data), and tinygemm's packing is kept beside the CUDA codes; nothing made for one device
is used on another.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

DEQUANTIZE = "dequantize, then linear"
"""The choice where no kernel rule applies: the op decomposes (dequantize, then
``linear``), which the fusion executors take."""

CPU_KERNELS = "thunder_ir.dialects.quant's CPU kernels"
"""The CPU rows' choice: the op's own kernel (``TORCH_FN``) picks its CPU path."""

TINYGEMM = "aten._weight_int4pack_mm (tinygemm)"
"""CUDA int4 in bfloat16 on sm80+: `int4_linear_cuda`."""


@dataclass(frozen=True)
class KernelRule:
    """One row of `LINEAR_KERNELS`: a quantized linear of ``bits`` on ``device`` (a device
    type) computed in one of ``dtypes`` (the scales' dtype) on a device of at least
    ``capability`` (CUDA's compute capability; None: any) runs ``kernel``."""

    bits: int
    device: str
    dtypes: tuple[torch.dtype, ...]
    capability: tuple[int, int] | None
    kernel: str
    why: str


_FLOATS = (torch.float32, torch.bfloat16, torch.float16)

LINEAR_KERNELS: tuple[KernelRule, ...] = (
    KernelRule(8, "cpu", _FLOATS, None, CPU_KERNELS,
               "_weight_int8pack_mm on bfloat16/float16; float32 dequantizes in blocks"),
    KernelRule(4, "cpu", _FLOATS, None, CPU_KERNELS,
               "_weight_int4pack_mm_for_cpu on its packed codes"),
    KernelRule(4, "cuda", (torch.bfloat16,), (8, 0), TINYGEMM,
               "tinygemm takes bfloat16 only and is built for sm80+"),
)
"""Which kernel a quantized linear runs, first matching row; none: `DEQUANTIZE` (CUDA
int8 among them: torch's CUDA ``_weight_int8pack_mm`` is a naive kernel, see the module
docstring)."""


def linear_kernel(bits: int, device: str, dtype: torch.dtype,
                  capability: tuple[int, int] | None = None) -> str:
    """The kernel (`LINEAR_KERNELS`) a quantized linear of ``bits`` runs on ``device``
    (``"cpu"``, ``"cuda:0"``...) computing in ``dtype``, on a device of ``capability``
    (CUDA's; None where unknown: a rule that asks for one does not apply)."""
    kind = device.split(":")[0]
    for rule in LINEAR_KERNELS:
        if rule.bits != bits or rule.device != kind or dtype not in rule.dtypes:
            continue
        if rule.capability is not None and (capability is None
                                            or capability < rule.capability):
            continue
        return rule.kernel
    return DEQUANTIZE


def device_capability(device: str) -> tuple[int, int] | None:
    """CUDA's compute capability of ``device`` (``"cuda:0"``), None for another device or
    where this process has no CUDA."""
    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return (major, minor)


# --------------------------------------------------------------------------- CUDA


@functools.cache
def runs_tinygemm(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether an int4 linear on ``device`` computing in ``dtype`` runs tinygemm (asked
    per call by the op's kernel: a dictionary look-up after the first)."""
    dev = str(device)
    return linear_kernel(4, dev, dtype, device_capability(dev)) == TINYGEMM


def inner_k_tiles(k: int) -> int:
    """tinygemm's inner k-tiles for ``K`` columns: the most of 8, 4, 2 with ``K`` a
    multiple of ``16 t`` (the scheme's ``K`` is a multiple of its group, 32 or more)."""
    return next(t for t in (8, 4, 2) if k % (16 * t) == 0)


def tinygemm_codes(codes: torch.Tensor) -> torch.Tensor:
    """The scheme's int4 codes (``uint8[N, K / 2]``, the even column in the low nibble)
    as ``aten._convert_weight_to_int4pack`` reads them: the even column in the high
    nibble (torchao's ``int_data[:, ::2] << 4 | int_data[:, 1::2]``)."""
    return (((codes & 15) << 4) | (codes >> 4)).contiguous()


def tinygemm_layout(codes: torch.Tensor) -> torch.Tensor:
    """The scheme's int4 codes packed by ``aten._convert_weight_to_int4pack`` for
    tinygemm: ``int32[N / 8, K / (16 t), 32, t / 2]``, ``t = inner_k_tiles(K)``."""
    return torch.ops.aten._convert_weight_to_int4pack(tinygemm_codes(codes),
                                                      inner_k_tiles(codes.shape[1] * 2))


def int4_linear_cuda(rows: torch.Tensor, codes: torch.Tensor, sz: torch.Tensor,
                     group_size: int, kept: Any) -> torch.Tensor:
    """``rows @ W.T`` for 2-D bfloat16 ``rows`` on CUDA by tinygemm, its packing of
    ``codes`` made once and kept (``kept``: `thunder_ir.dialects.quant.QUANTIZED`)."""
    packed = kept.get(codes, ("int4-cuda", codes.device), tinygemm_layout)
    return torch.ops.aten._weight_int4pack_mm(rows.contiguous(), packed, group_size,
                                              sz.contiguous())


__all__ = ["CPU_KERNELS", "DEQUANTIZE", "LINEAR_KERNELS", "TINYGEMM", "KernelRule",
           "device_capability", "inner_k_tiles", "int4_linear_cuda", "linear_kernel",
           "runs_tinygemm", "tinygemm_codes", "tinygemm_layout"]
