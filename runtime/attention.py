"""Eager's attention kernel where the backward needs more than its output.

`sdpa_dropout_forward` is what ``F.scaled_dot_product_attention`` with ``dropout_p > 0``
runs on CPU (ATen picks its math kernel whenever attention drops out), called directly so
that it also returns the attention weights after dropout. The draw, the output and the
generator's state afterwards are eager's; the backward (`thunder_ir.passes.vjp_ltorch`'s
attention rule) reads the dropped positions from those weights. The rule uses it for
float16 and bfloat16 (the kernel's upcast follows a global flag) and for ``dropout_p`` of
1; in float32 and float64 it writes the kernel's steps as ltorch ops instead, which also
give the backward the probabilities.
"""

from __future__ import annotations

import torch


def sdpa_dropout_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attn_mask: torch.Tensor | None, dropout_p: float, is_causal: bool,
                         scale: float | None, enable_gqa: bool
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, weights)``: attention with dropout, as eager computes it on CPU, and its
    attention weights after dropout (zero where dropped, scaled by ``1 / (1 - p)``)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as F.scaled_dot_product_attention does before it picks a kernel: the math kernel
        # given the bool mask itself computes other values
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype,
                                device=query.device).masked_fill_(~attn_mask, float("-inf"))
    out, weights = torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
        enable_gqa=enable_gqa)
    return out, weights


__all__ = ["sdpa_dropout_forward"]
