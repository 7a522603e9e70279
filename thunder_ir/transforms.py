"""User passes for ``thunder_ir.jit(..., transforms=[...])``: `transform` wraps a pass
(a ``ModulePass``, or rewrite patterns applied as one pass) with the stage it runs at
(`STAGES`); `user_transforms` sorts a ``transforms=`` list by stage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriteWalker,
    RewritePattern,
)

STAGES = ("ltorch", "prims", "fusion", "backward")
"""Where a user pass runs: on the traced ltorch program (default), after decomposition into
prims, after claiming and fusion, or on the backward program (training only)."""


@dataclass(frozen=True)
class UserTransform:
    """A user pass and the stage it runs at (see `transform`)."""

    pass_: ModulePass
    stage: str = "ltorch"


@dataclass(frozen=True)
class PatternsPass(ModulePass):
    """A list of rewrite patterns applied greedily to a fixpoint, as one named pass."""

    name = "user-patterns"
    patterns: tuple[RewritePattern, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier(list(self.patterns))).rewrite_module(op)


def transform(pass_or_patterns: ModulePass | Sequence[RewritePattern], stage: str = "ltorch",
              name: str | None = None) -> UserTransform:
    """Wraps a user pass (a ``ModulePass``, or a list of ``RewritePattern``) for ``jit``.

    Args:
        pass_or_patterns: the pass, or patterns to apply greedily as one pass.
        stage: ``"ltorch"``, ``"prims"``, ``"fusion"`` or ``"backward"`` (see `STAGES`).
        name: the name it shows under in ``last_traces`` (patterns only; a pass keeps its
            own ``name``).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; choose from {', '.join(STAGES)}")
    if isinstance(pass_or_patterns, ModulePass):
        return UserTransform(pass_or_patterns, stage)
    patterns = tuple(pass_or_patterns) if isinstance(pass_or_patterns, list | tuple) else ()
    if not patterns or not all(isinstance(p, RewritePattern) for p in patterns):
        raise TypeError("a transform is a ModulePass or a non-empty list of RewritePatterns, "
                        f"got {pass_or_patterns!r}")
    cls = PatternsPass if name is None else type(
        "PatternsPass", (PatternsPass,), {"name": name, "__module__": __name__})
    return UserTransform(cls(patterns), stage)


def QuantizeWeights(bits: int = 8, group_size: int = 32, modules: Sequence[str] = (),
                    compute_dtype: Any = None) -> UserTransform:
    """Weight-only quantization of linears, as a transform for ``jit`` (the
    ``quantize-weights`` pass at the ``ltorch`` stage; ``docs/quantization.md``)::

        jm = thunder_ir.jit(model, transforms=[QuantizeWeights(bits=8)])

    Args:
        bits: 8 (symmetric int8 per output channel) or 4 (asymmetric int4 per group).
        group_size: input columns per int4 scale and zero: 32, 64, 128 or 256.
        modules: the modules whose linears are quantized: qualified names or parts of
            them (``"q_proj"``, ``"layers.0"``); empty: every linear on a module weight.
        compute_dtype: None (default): the products are computed in the weight's dtype,
            as eager computes them on the dequantized model; ``torch.bfloat16`` (or
            ``"bfloat16"``): the quantized linears convert their input to it and their
            result back (bfloat16 rounding of the activations; torch's CPU kernels are
            several times faster on it).
    """
    from thunder_ir.passes.quantize import QuantizeWeightsPass

    cd = str(compute_dtype).removeprefix("torch.") if compute_dtype is not None else ""
    return UserTransform(QuantizeWeightsPass(bits=bits, group_size=group_size,
                                             modules=tuple(modules), compute_dtype=cd),
                         "ltorch")


def free_float_weights(model: Any) -> int:
    """Frees the float storage of the weights `QuantizeWeights` has quantized, where the
    user asks (after the jitted model's first call): each such weight of an
    ``nn.Linear`` that no other parameter or buffer shares (a tied ``lm_head`` stays)
    keeps its shape, dtype and strides, so the program's guards still hold and its
    quantized storage (kept under the weight, which is unchanged) is still found, but its
    data is gone (``untyped_storage().resize_(0)``). Irreversible: the module's own
    forward, its ``state_dict`` values and a transform needing the float values no
    longer work for those weights; the jitted module keeps generating and fine-tuning
    its adapters.

    Args:
        model: the jitted module or the module it wraps.

    Returns:
        The bytes freed.
    """
    import torch

    from thunder_ir.dialects.quant import QUANTIZED

    module = getattr(model, "_model", model)
    counts: dict[int, int] = {}
    for _, t in [*module.named_parameters(remove_duplicate=False),
                 *module.named_buffers(remove_duplicate=False)]:
        if t.device.type != "meta" and t.untyped_storage().nbytes():
            key = t.untyped_storage().data_ptr()
            counts[key] = counts.get(key, 0) + 1
    freed = 0
    for mod in module.modules():
        w = getattr(mod, "weight", None)
        if not isinstance(mod, torch.nn.Linear) or not isinstance(w, torch.Tensor) \
                or id(w) not in QUANTIZED.entries:
            continue
        storage = w.untyped_storage()
        if not storage.nbytes() or counts.get(storage.data_ptr(), 0) != 1:
            continue  # freed already, or shared (a tied weight another module reads)
        freed += storage.nbytes()
        storage.resize_(0)
        QUANTIZED.moved(w)
    return freed


def dequantized_state_dict(model: Any) -> dict[str, Any]:
    """The module's ``state_dict`` with every weight `QuantizeWeights` has quantized
    given as what its quantized storage stands for (dequantized from that storage, the
    int4 codes unpacked from the CPU kernel's layout; in the weight's dtype), the rest as
    ``state_dict()`` gives it. It reads the quantized storage only, so it also works after
    `free_float_weights`; loaded into a float copy of the model it gives the dequantized
    model the jitted one computes (a weight tied to a module that reads it in float, such
    as an embedding, is given dequantized under every name).

    Args:
        model: the jitted module or the module it wraps (after a call that quantized).
    """
    from thunder_ir.dialects.quant import dequantize_kept

    module = getattr(model, "_model", model)
    out: dict[str, Any] = {}
    for name, t in module.state_dict(keep_vars=True).items():
        deq = dequantize_kept(t)
        out[name] = t.detach() if deq is None else deq
    return out


def user_transforms(transforms: Sequence[Any] | None) -> dict[str, list[ModulePass]]:
    out: dict[str, list[ModulePass]] = {s: [] for s in STAGES}
    for t in transforms or ():
        ut = t if isinstance(t, UserTransform) else transform(t)
        out[ut.stage].append(ut.pass_)
    return out


__all__ = ["STAGES", "PatternsPass", "QuantizeWeights", "UserTransform",
           "dequantized_state_dict", "free_float_weights", "transform", "user_transforms"]
