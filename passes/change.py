"""`ReportsChange`: passes that can tell whether they changed the IR.

Why: `thunder_ir.passes.pipeline.Pipeline` records the IR after every pass for
``last_traces``, and about half of ``jit``'s passes usually find nothing to do (no
autograd markers left to strip, no unclaimed op to decompose, nothing dead). A pass that
says so lets the recorder share the previous record instead of freezing the same IR again.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


class ReportsChange(ModulePass):
    """A pass that can tell whether it changed the IR: `apply_and_report` returns False
    only when the module is exactly as it was (no op added, erased or touched), which
    lets `thunder_ir.passes.pipeline.TraceRecorder` share the previous record. Its
    `apply` calls it."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.apply_and_report(ctx, op)

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        """Runs the pass; False if it changed nothing, True if it changed (or may have)."""
        raise NotImplementedError


def apply_pass(p: ModulePass, ctx: Context, module: ModuleOp) -> bool:
    """Runs ``p`` on ``module``; False only if ``p`` reports leaving it unchanged."""
    if isinstance(p, ReportsChange):
        return p.apply_and_report(ctx, module)
    p.apply(ctx, module)
    return True


__all__ = ["ReportsChange", "apply_pass"]
