"""``decompose-ltorch``: rewrite every ltorch op that nobody claimed into prims.

Why a pass: executors claim what they run well (the torch executor takes ``linear``
whole); everything else must reach the small prim set that every later pass understands.
One pattern looks each op up in the decomposition table; rules compose inline, so a single
non-recursive walk leaves prims only.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.fusion import claimed_by
from thunder_ir.dialects.ltorch import LtorchOp
from thunder_ir.passes.change import ReportsChange
from thunder_ir.passes.decompositions import decompose_op, load_rules


class DecomposeLtorch(RewritePattern):
    """Replaces one ltorch op by its decomposition (ops marked ``claimed`` stay)."""

    def __init__(self) -> None:
        self.rules = load_rules()

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, LtorchOp) or claimed_by(op) is not None:
            return
        if type(op) not in self.rules:
            return
        emitter = Emitter()
        emitter.loc = op.location
        out = decompose_op(op, emitter)
        new_results = out if isinstance(out, list) else [out]
        rewriter.replace(op, emitter.ops, new_results)


@dataclass(frozen=True)
class DecomposeLtorchPass(ReportsChange):
    """Decomposes every unclaimed ltorch op into prims."""

    name = "decompose-ltorch"

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        pattern = DecomposeLtorch()
        rules = pattern.rules
        if not any(isinstance(o, LtorchOp) and type(o) in rules and claimed_by(o) is None
                   for o in op.walk()):
            return False  # what executors claim is the common case: nothing to decompose
        PatternRewriteWalker(
            GreedyRewritePatternApplier([pattern], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
        return True
