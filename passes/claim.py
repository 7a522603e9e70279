"""``claim``: executors, in priority order, claim the ltorch ops they run whole.

Claiming is *claim or flatten* (STYLE.md): the first executor whose ``can_claim`` accepts
an ltorch op marks it ``fusion.claimed = #fusion.executor<"<name>">`` (so
``decompose-ltorch`` leaves it whole); an op nobody claims is decomposed into prims
afterwards. An executor may also replace what it claims (``expand``, an execution
transform); the new ops are claimed in turn.

The pass sees executors through that interface only (``name``, ``can_claim``,
``expand``). Names given in a pass spec (``claim{executors=torch}``) are resolved through
the compile context the pass is run with (`thunder_ir.passes.context`); passes never
import the lowering.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects.fusion import claim, claimed_by
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.passes.context import resolve, spec_with_names


class _Claim(RewritePattern):
    def __init__(self, executors: tuple[Any, ...]) -> None:
        self.executors = executors

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, LtorchOp) or claimed_by(op) is not None:
            return
        for ex in self.executors:
            if ex.can_claim(op):
                # An executor may replace what it claims (thunder_ir.extend's execution
                # transforms): ``expand(op) -> (ops, results) | None``. The walker does not
                # revisit inserted ops, so they are claimed here.
                new = ex.expand(op)
                if new is None:
                    claim(op, ex.name)
                    rewriter.has_done_action = True
                    return
                new_ops, results = new
                rewriter.replace(op, new_ops, results)
                for o in new_ops:
                    self.match_and_rewrite(o, rewriter)
                return


@dataclass(frozen=True)
class ClaimPass(ModulePass):
    """Executors, in priority order, claim the ltorch ops they run whole.

    Args:
        executors: executor objects or registered names, in priority order.
    """

    name = "claim"
    executors: tuple[Any, ...] = ("torch",)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(_Claim(resolve(ctx, self.executors)),
                             apply_recursively=False).rewrite_module(op)

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


__all__ = ["ClaimPass"]
