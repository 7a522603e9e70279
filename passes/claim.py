"""``claim``: executors, in priority order, claim the ltorch ops they run whole.

Claiming is *claim or flatten* (STYLE.md): the first executor whose ``can_claim`` accepts
an ltorch op marks it ``claimed = "<executor name>"`` (so ``decompose-ltorch`` leaves it
whole); an op nobody claims is decomposed into prims afterwards. An executor may also
replace what it claims (``expand``, an execution transform); the new ops are claimed in
turn.

The pass sees executors through that interface only (``name``, ``can_claim``,
``expand``). Names given in a pass spec (``claim{executors=torch}``) are resolved by
`executor_named`, through the lookups the executor registry installs
(`thunder_ir.lowering.executors`); passes never import the lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects.ltorch_base import LtorchOp

EXECUTOR_LOOKUPS: list[Callable[[str], Any]] = []
"""Functions ``name -> executor``, installed by the executor registry when it loads."""


def executor_named(name: str) -> Any:
    """The registered executor called ``name``.

    Raises:
        ValueError: no registry is installed, or it knows no such executor.
    """
    if not EXECUTOR_LOOKUPS:
        raise ValueError(f"cannot resolve executor {name!r}: no executor registry is loaded "
                         "(import thunder_ir)")
    return EXECUTOR_LOOKUPS[-1](name)


def resolve(executors: Iterable[Any]) -> tuple[Any, ...]:
    """Executor objects from objects or registered names."""
    return tuple(executor_named(e) if isinstance(e, str) else e for e in executors)


def executor_spec(executors: Iterable[Any]) -> tuple[str, ...]:
    """The names of ``executors`` (objects or names), as a pass spec prints them."""
    return tuple(e if isinstance(e, str) else e.name for e in executors)


def spec_with_names(p: ModulePass, *, include_default: bool = False) -> ArgSpec:
    """``p``'s spec with its ``executors`` field printed as executor names."""
    named: Any = replace(p, executors=executor_spec(getattr(p, "executors", ())))  # type: ignore[call-arg]
    return ModulePass.spec(named, include_default=include_default)


class _Claim(RewritePattern):
    def __init__(self, executors: tuple[Any, ...]) -> None:
        self.executors = executors

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, LtorchOp) or "claimed" in op.attributes:
            return
        for ex in self.executors:
            if ex.can_claim(op):
                # An executor may replace what it claims (thunder_ir.extend's execution
                # transforms): ``expand(op) -> (ops, results) | None``. The walker does not
                # revisit inserted ops, so they are claimed here.
                new = ex.expand(op)
                if new is None:
                    op.attributes["claimed"] = StringAttr(ex.name)
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
        PatternRewriteWalker(_Claim(resolve(self.executors)),
                             apply_recursively=False).rewrite_module(op)

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


__all__ = ["EXECUTOR_LOOKUPS", "ClaimPass", "executor_named", "executor_spec", "resolve",
           "spec_with_names"]
