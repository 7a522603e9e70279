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
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects.fusion import claim, claimed_by
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.passes.context import resolve, spec_with_names


def _claim(op: Operation, executors: tuple[Any, ...]) -> None:
    """The first executor that can claim ``op`` (an unclaimed ltorch op) claims it, or
    replaces it (``expand``), and the new ops are claimed in turn."""
    for ex in executors:
        if ex.can_claim(op):
            # An executor may replace what it claims (thunder_ir.extend's execution
            # transforms): ``expand(op) -> (ops, results) | None``.
            new = ex.expand(op)
            if new is None:
                claim(op, ex.name)
                return
            new_ops, results = new
            PatternRewriter(op).replace(op, new_ops, results)
            for o in new_ops:
                if isinstance(o, LtorchOp) and claimed_by(o) is None:
                    _claim(o, executors)
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
        # Each op once, in program order, as xDSL's walker without recursion visits them,
        # without its worklist (a third of the pass's time on a training program).
        executors = resolve(ctx, self.executors)
        for o in list(op.walk()):
            if isinstance(o, LtorchOp) and o.parent is not None and claimed_by(o) is None:
                _claim(o, executors)

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


__all__ = ["ClaimPass"]
