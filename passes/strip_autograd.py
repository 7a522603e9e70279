"""``strip-autograd``: forward the ``autograd`` dialect's markers to their values.

Why: ``autograd.stop_gradient`` and ``autograd.function`` tell autodiff where eager's
autograd cuts or replaces a gradient (``detach``, ``no_grad``, custom ``Function``s).
Once the backward is built, or when nothing is differentiated, they compute nothing: the
first is its operand, the second its ``values``; ``autograd.saved_as`` goes. Stripping
them before claiming keeps every executor, fusion and remat decision free of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from thunder_ir.dialects.autograd import FunctionOp, SavedAsOp, StopGradientOp
from thunder_ir.passes.change import ReportsChange


class ForwardStopGradient(RewritePattern):
    """``stop_gradient(x)`` -> ``x``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: StopGradientOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, [], [op.input])


class ForwardFunction(RewritePattern):
    """``autograd.function(primals, values)`` -> ``values`` (its backward region goes)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FunctionOp, rewriter: PatternRewriter) -> None:
        rewriter.replace(op, [], list(op.values))


class DropSavedAs(RewritePattern):
    """``autograd.saved_as`` (a note for autodiff alone) goes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: SavedAsOp, rewriter: PatternRewriter) -> None:
        rewriter.erase_op(op)


def strip_autograd(module: ModuleOp) -> bool:
    """Forwards every autograd marker in ``module`` to its values (one walk); False if
    there was none."""
    if not any(type(op) in _MARKERS for op in module.walk()):
        return False  # (a type test per op: a tenth of the walker's visit)
    PatternRewriteWalker(
        GreedyRewritePatternApplier([ForwardStopGradient(), ForwardFunction(),
                                     DropSavedAs()],
                                    dce_enabled=False),
        apply_recursively=False,
    ).rewrite_module(module)
    return True


_MARKERS = (StopGradientOp, FunctionOp, SavedAsOp)


@dataclass(frozen=True)
class StripAutogradPass(ReportsChange):
    """Forwards ``autograd.stop_gradient`` and ``autograd.function`` to their values."""

    name = "strip-autograd"

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        return strip_autograd(op)
