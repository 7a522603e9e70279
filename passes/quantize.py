"""``quantize-weights``: linears on selected weights run on quantized storage.

Why: a decode step of a language model on a CPU is bound by reading its weights; int8
storage reads 4x fewer bytes than float32, int4 8x. The pass is the worked example of a
user transform (``jit(model, transforms=[QuantizeWeights(bits=8)])``, `docs/quantization.md`):
one rewrite pattern over the traced ltorch program, replacing

    %y = ltorch.linear %x, %w, %b

where ``%w`` is a weight the program reads from the module (a function argument) by

    %q, %scale = quant.quantize_int8 %w
    %y = quant.int8_linear %x, %q, %scale, %b

(``quant.quantize_int4``/``quant.int4_linear`` for ``bits=4``; the ops are
`thunder_ir.dialects.quant`'s, their rules `thunder_ir.passes.quant_rules`'). The
quantize op runs once per weight (its kernel keeps the result beside the weight), so a
cached call reads the quantized storage only. ``cse`` merges the quantize ops of a weight
read by two linears.

A linear is left as it is where the scheme does not apply: a weight that is not 2-D, not
float32/bfloat16/float16, or whose input has another dtype; for int4, a weight whose
columns are not a multiple of ``group_size`` or whose rows are not a multiple of 16 (the
CPU kernel's packing).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

import thunder_ir.passes.quant_rules  # noqa: F401  (registers the ops' rules)
from thunder_ir.dialects import quant as Q
from thunder_ir.dialects.base import build
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.ltorch_nn import LinearOp
from thunder_ir.dialects.types import TensorType


def weight_name(v: SSAValue) -> str | None:
    """The module path a function argument stands for, as its name hint spells it
    (``t_layers_0_q_proj_weight`` for ``layers.0.q_proj.weight``), or None for a value
    that is not a function argument."""
    if not isinstance(v, BlockArgument) or not isinstance(v.owner.parent_op(), func.FuncOp):
        return None
    return v.name_hint or ""


def selected(hint: str, modules: tuple[str, ...]) -> bool:
    """Whether the weight named ``hint`` belongs to one of ``modules`` (qualified names or
    parts of them, ``"q_proj"``, ``"layers.0"``; none: every module), matched against the
    name's underscore-separated parts."""
    if not modules:
        return True
    name = f"_{hint.removeprefix('t_')}_"
    return any(f"_{m.replace('.', '_')}_" in name for m in modules)


class QuantizeLinear(RewritePattern):
    """``ltorch.linear`` on a selected module weight -> a quantize op and a quantized linear.

    Args:
        bits: 8 or 4.
        group_size: columns per scale and zero (int4).
        modules: which modules' weights (see `selected`).
        compute_dtype: the dtype of the scales, which the product is computed in
            (None: the weight's).
    """

    def __init__(self, bits: int, group_size: int, modules: tuple[str, ...],
                 compute_dtype: torch.dtype | None = None) -> None:
        self.bits, self.group_size, self.modules = bits, group_size, modules
        self.compute_dtype = compute_dtype

    def applies(self, x: TensorType, w: TensorType) -> bool:
        """Whether the scheme takes a linear of ``x`` by ``w``."""
        if x.dtype != w.dtype or w.symbolic:
            return False
        return Q.takes(self.bits, self.group_size, tuple(w.sizes), w.dtype)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: LinearOp, rewriter: PatternRewriter) -> None:
        x, w, bias = op.grouped_operands()
        hint = weight_name(w)
        if hint is None or not selected(hint, self.modules):
            return
        xt, wt = x.type, w.type
        if not isinstance(xt, TensorType) or not isinstance(wt, TensorType) \
                or not self.applies(xt, wt):
            return
        new: list[Operation]
        if self.bits == 8:
            qz = build(Q.QuantizeInt8Op, w, dtype=self.compute_dtype)
            lin = build(Q.Int8LinearOp, x, qz.results[0], qz.results[1], bias)
        else:
            if self.compute_dtype is None and wt.dtype == torch.float32 \
                    and str(wt.dev).startswith("cpu"):
                _warn_int4_float32(location_text(op))
            qz = build(Q.QuantizeInt4Op, w, group_size=self.group_size,
                       dtype=self.compute_dtype)
            lin = build(Q.Int4LinearOp, x, qz.results[0], qz.results[1], bias,
                        group_size=self.group_size)
        new = [qz, lin]
        for made in new:
            made.location = op.location
        qz.results[0].name_hint = f"{hint}_q" if hint else None
        rewriter.replace(op, new, [lin.results[0]])


_WARNED_INT4_FLOAT32: set[str] = set()


def _warn_int4_float32(at: str) -> None:
    """Says once per process that int4 on float32 activations is slow on the CPU: torch's
    int4 CPU kernel on float32 input measured about 7x eager's float32 decode step
    (docs/quantization.md), on bfloat16 input 0.2x. ``at``: the first such linear's line."""
    if _WARNED_INT4_FLOAT32:
        return
    _WARNED_INT4_FLOAT32.add(at)
    warnings.warn(f"QuantizeWeights(bits=4) on float32 linears on the CPU (the linear at {at}) "
                  "runs torch's int4 "
                  "kernel on float32 activations, several times slower than eager's float32 "
                  "linear (docs/quantization.md); QuantizeWeights(bits=4, compute_dtype="
                  "torch.bfloat16) is fast (bfloat16 rounding of the activations), and "
                  "bits=8 keeps float32 activations fast", UserWarning, stacklevel=2)


@dataclass(frozen=True)
class QuantizeWeightsPass(ModulePass):
    """Weight-only quantization of the linears on selected weights (module docstring).

    Attributes:
        bits: 8 (symmetric per output channel) or 4 (asymmetric per group).
        group_size: input columns per int4 scale and zero (32, 64, 128 or 256).
        modules: the modules whose weights are quantized (qualified names or parts of
            them); empty: every linear's.
        compute_dtype: ``"bfloat16"`` or ``"float16"``: the linears compute in it (the
            input converted, the result converted back; torch's CPU kernels are several
            times faster on bfloat16); empty: in the weight's dtype, as eager on the
            dequantized model.
    """

    name = "quantize-weights"

    bits: int = 8
    group_size: int = 32
    modules: tuple[str, ...] = ()
    compute_dtype: str = ""

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise ValueError(f"quantize-weights: bits is 8 or 4, got {self.bits}")
        if self.bits == 4 and self.group_size not in Q.INT4_GROUP_SIZES:
            raise ValueError(f"quantize-weights: group_size is one of {Q.INT4_GROUP_SIZES}, "
                             f"got {self.group_size}")
        if self.compute_dtype not in ("", "bfloat16", "float16", "float32"):
            raise ValueError("quantize-weights: compute_dtype is bfloat16, float16, float32 "
                             f"or empty, got {self.compute_dtype!r}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        cd = getattr(torch, self.compute_dtype) if self.compute_dtype else None
        pattern = QuantizeLinear(self.bits, self.group_size, tuple(self.modules), cd)
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern]),
                             apply_recursively=False).rewrite_module(op)


__all__ = ["QuantizeLinear", "QuantizeWeightsPass", "selected", "weight_name"]
