"""CPU kernels of the ``quant`` dialect (`thunder_ir.dialects.quant`): the int4 kernel's
packed layout, and a fused dequantize-and-multiply for float32 activations.

**The int4 layout.** torch's CPU int4 kernel (``aten._weight_int4pack_mm_for_cpu``) takes
its codes as ``aten._convert_weight_to_int4pack_for_cpu`` packs them: ``uint8[N, K / 2]``,
blocked over rows. The rows are cut into blocks of ``block`` rows (64 on AVX-512, 32 on
AVX2) and a last, shorter block (``N`` is a multiple of 16); block ``i`` is ``K`` runs of
``rows / 2`` bytes, and byte ``j`` of run ``k`` holds two codes of column ``k``: rows
``j`` (low nibble) and ``j + rows / 2`` (high) of a full block on AVX-512/AVX2
(``halves``), rows ``2j`` and ``2j + 1`` otherwise (``pairs``, also every short block).
This is the only storage `QuantizeWeights` keeps for an int4 weight on the CPU: the
decomposition, the gradient and the checks unpack it (`int4_cpu_unpack`, and the same
reshapes and permutes as ltorch ops in `thunder_ir.passes.quant_rules`). Which layout
this process's kernel packs is found once by packing a probe (`int4_cpu_layout`): the
layout depends on the CPU's vector extensions torch dispatches to.

**Float32 activations.** torch's int8 and int4 CPU kernels vectorize bfloat16 and float16
activations only; on float32 ones they are 4-10x slower than a float32 product that reads
4x the bytes. For one row of activations (a decode step) `int8_gemv` multiplies by an int8
weight in one pass over its bytes: ``sum(x * (q * scale[:, None]), -1)``, compiled by
Inductor once per weight shape (an ATen graph traced by ``make_fx``, handed to
``torch._inductor.compile``; no Dynamo, so a call costs a few microseconds). Its products
are eager's on the dequantized weight (``q * scale`` rounded as eager rounds it), summed
in another order, so it is within ``2 K 2^-24 sum_k |x_k w_k|`` of eager's linear on the
dequantized weight (each float32 sum of ``K`` terms is within ``K 2^-24`` of the exact
one, relative to the sum of absolute values). Where Inductor cannot compile (no C++
compiler) the callers multiply as before.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

INT4_CPU_LAYOUTS = ((64, True), (32, True), (64, False), (32, False), (16, False))
"""The packings torch's ``_convert_weight_to_int4pack_for_cpu`` uses, ``(block rows,
halves)``: AVX-512, AVX2, and the plain kernels of other CPUs (blocks of four float
vectors' width)."""


def int4_cpu_parts(n: int, block: int, halves: bool) -> list[tuple[int, int, bool]]:
    """The parts of the packed layout of ``n`` rows: ``(count, rows, halves)``, ``count``
    blocks of ``rows`` rows each, then the short last block (always in pairs)."""
    full = n // block
    parts = [(full, block, halves)] if full else []
    if n - full * block:
        parts.append((1, n - full * block, False))
    return parts


def _unpack_part(data: torch.Tensor, count: int, rows: int, k: int, halves: bool
                 ) -> torch.Tensor:
    b = data.reshape(count, k, rows // 2)
    nib = torch.stack([b & 15, b >> 4], dim=3)  # [count, K, rows / 2, (low, high)]
    order = nib.permute(0, 3, 2, 1) if halves else nib.permute(0, 2, 3, 1)
    return order.reshape(count * rows, k)


def int4_cpu_unpack_with(packed: torch.Tensor, block: int, halves: bool) -> torch.Tensor:
    """The codes (``uint8[N, K]``, 0..15) of ``packed`` read as the layout ``(block,
    halves)``."""
    n, half = packed.shape
    flat = packed.reshape(-1)
    out, start = [], 0
    for count, rows, h in int4_cpu_parts(n, block, halves):
        size = count * rows * half
        out.append(_unpack_part(flat[start:start + size], count, rows, 2 * half, h))
        start += size
    return out[0] if len(out) == 1 else torch.cat(out)


@functools.cache
def int4_cpu_layout() -> tuple[int, bool]:
    """``(block rows, halves)`` of this process's int4 CPU packing, found by packing a
    probe (208 rows: full blocks of 16, 32 and 64 rows and a short one) and reading it
    back in each known layout."""
    probe = torch.randint(0, 16, (208, 64), generator=torch.Generator().manual_seed(0),
                          dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(probe, 1)
    for block, halves in INT4_CPU_LAYOUTS:
        if packed.shape == (208, 32) and torch.equal(
                int4_cpu_unpack_with(packed, block, halves), probe.to(torch.uint8)):
            return block, halves
    raise NotImplementedError(
        "QuantizeWeights(bits=4): this CPU's int4 packing (aten._convert_weight_to_int4pack"
        "_for_cpu) is none of the layouts thunder_ir reads; use bits=8")


def int4_cpu_pack(codes: torch.Tensor) -> torch.Tensor:
    """``uint8[N, K]`` codes (0..15) packed by the kernel's own packing."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.to(torch.int32), 1)


def int4_cpu_unpack(packed: torch.Tensor) -> torch.Tensor:
    """The codes (``uint8[N, K]``, 0..15) the kernel's packed ``uint8[N, K / 2]`` holds."""
    return int4_cpu_unpack_with(packed, *int4_cpu_layout())


# --------------------------------------------------------------------------- float32 gemv


FUSED_MIN_ELEMENTS = 1 << 18
"""Weights with fewer elements (512 x 512) multiply as before: they sit in the cache, where
dequantizing a block at a time costs little, and a compile would not pay off."""


def _int8_gemv_graph(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor
                     ) -> tuple[torch.Tensor]:
    return ((x[:, None, :] * (q.to(x.dtype) * scale[:, None])).sum(-1),)


class FusedGemv:
    """The compiled one-row products, one per ``(N, K, threads)`` (Inductor's C++ fixes
    its thread count when it compiles); a shape that failed to compile is kept as None
    and multiplied otherwise from then on.

    Attributes:
        enabled: False: never used (the callers dequantize a block at a time).
    """

    def __init__(self) -> None:
        self.enabled = True
        self.kernels: dict[tuple[int, int, int], Callable[..., Any] | None] = {}

    def kernel(self, n: int, k: int) -> Callable[..., Any] | None:
        """The compiled product for an ``[n, k]`` weight, compiled now if missing."""
        key = (n, k, torch.get_num_threads())
        if key not in self.kernels:
            self.kernels[key] = self.compile(n, k)
        return self.kernels[key]

    @staticmethod
    def compile(n: int, k: int) -> Callable[..., Any] | None:
        """Inductor's kernel for `_int8_gemv_graph` on an ``[n, k]`` weight, or None."""
        try:
            import torch._inductor
            from torch.fx.experimental.proxy_tensor import make_fx

            with torch.inference_mode(False), torch.no_grad(), \
                    torch.autocast("cpu", enabled=False):
                example: list[Any] = [torch.empty(1, k),
                                      torch.empty(n, k, dtype=torch.int8), torch.empty(n)]
                gm = make_fx(_int8_gemv_graph, tracing_mode="fake")(*example)
                return torch._inductor.compile(gm, example)  # type: ignore[no-any-return]
        except Exception as e:  # no C++ compiler, or Inductor failed: multiply otherwise
            log.warning("quant: no fused int8 product for a [%d, %d] weight (%s: %s); "
                        "dequantizing a block at a time", n, k, type(e).__name__, e)
            return None

    def int8(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor
             ) -> torch.Tensor | None:
        """``x @ (q * scale[:, None]).T`` for one float32 row ``x`` (``[1, K]``) and a
        contiguous weight of at least `FUSED_MIN_ELEMENTS`; None where it does not apply
        (the caller multiplies otherwise)."""
        if not self.enabled or x.shape[0] != 1 or q.numel() < FUSED_MIN_ELEMENTS \
                or x.dtype != torch.float32 or scale.dtype != torch.float32 \
                or not q.is_contiguous() or not scale.is_contiguous():
            return None
        fn = self.kernel(*q.shape)
        if fn is None:
            return None
        return fn(x.contiguous(), q, scale)[0]  # type: ignore[no-any-return]


FUSED = FusedGemv()
"""This process's fused products (`FusedGemv`)."""


__all__ = ["FUSED", "FUSED_MIN_ELEMENTS", "INT4_CPU_LAYOUTS", "FusedGemv", "int4_cpu_layout",
           "int4_cpu_pack", "int4_cpu_parts", "int4_cpu_unpack", "int4_cpu_unpack_with"]
