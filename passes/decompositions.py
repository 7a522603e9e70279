"""The decomposition table: one rule per ltorch op, turning it into prims.

A rule is a function ``rule(d, *operands, **params)`` registered with
``@decomposes(SomeLtorchOp)``. Operands come grouped as in the op's definition; params are
the op's params as Python values (absent ones as ``None``). It builds prims through
``d.prims`` and returns the replacement value (or a list of them, one per result).

Rules compose by calling each other through ``d.ltorch``: ``d.ltorch.sigmoid(x)`` runs the
sigmoid *rule* inline (no ltorch op is built), as ``torch/_decomp`` composes Python
functions. So one application yields prims only, and the pass needs a single walk.

Rule modules register on import; `load_rules` imports them all from one place. The table
is a `thunder_ir.dialects.tables.RuleTable`: the built-in rules are frozen, a user's rule
for a new op is an addition beside them. A compilation may bring rules of its own
(`thunder_ir.passes.context.CompileContext.decompositions`): they come first for that
compilation only (`rules`), never in the table.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

from xdsl.ir import Attribute

from thunder_ir.dialects.base import Emitter, OpNamespace, ThunderOp
from thunder_ir.dialects.tables import RuleTable, is_builtin
from thunder_ir.passes.context import overlays

Rule = Callable[..., Any]
DECOMPOSITIONS: RuleTable[type[ThunderOp], Rule] = RuleTable("decomposition")


def decomposes(op: type[ThunderOp], *, replace: bool = False) -> Callable[[Rule], Rule]:
    """Registers ``fn`` as the decomposition of ``op`` (a built-in rule where ``fn`` is
    thunder_ir's, else an addition; ``replace``: an addition replacing an addition)."""

    def wrap(fn: Rule) -> Rule:
        DECOMPOSITIONS.register(op, fn, builtin=is_builtin(fn), replace=replace)
        return fn

    return wrap


class Decomposer:
    """What a rule builds with: ``d.prims.<op>(...)`` and ``d.ltorch.<op>(...)`` (inline)."""

    def __init__(self, emitter: Emitter) -> None:
        from thunder_ir.dialects import ltorch, prims

        self.emitter = emitter
        self.prims: OpNamespace = emitter.ns(prims.OPS)
        self.ltorch = _InlineRules(self, ltorch.OPS)


class _InlineRules:
    """``d.ltorch.silu(x, ...)``: call the silu rule directly, defaults filled in."""

    def __init__(self, d: Decomposer, ops: dict[str, type[ThunderOp]]) -> None:
        self._d = d
        self._ops = ops

    def __getattr__(self, short: str) -> Callable[..., Any]:
        op = self._ops.get(short)
        table = rules()
        if op is None or op not in table:
            raise AttributeError(f"no ltorch decomposition named {short!r}")
        rule = table[op]
        d = self._d
        defaults = {n: op.DEFAULTS.get(n) for n in op.param_names()}

        def call(*operands: Any, **params: Any) -> Any:
            return rule(d, *operands, **{**defaults, **params})

        setattr(self, short, call)
        return call


def decompose_op(op: ThunderOp, emitter: Emitter) -> Any:
    """Runs ``op``'s rule, building the replacement through ``emitter``."""
    rule = rules()[type(op)]
    return rule(Decomposer(emitter), *op.grouped_operands(), **op.params())


def rules() -> Mapping[type[ThunderOp], Rule]:
    """The decomposition rules the compilation running in this thread uses: its
    context's own (`thunder_ir.passes.context.CompileContext.decompositions`) ahead of
    the built-in table."""
    own = overlays()[0]
    return DECOMPOSITIONS if not own else ChainMap(dict(own), DECOMPOSITIONS)


def load_rules() -> Mapping[type[ThunderOp], Rule]:
    """Imports every rule module (registering its rules) and returns the rules this
    thread's compilation uses (`rules`)."""
    import thunder_ir.passes.decomp_backward
    import thunder_ir.passes.decomp_core
    import thunder_ir.passes.decomp_nn
    import thunder_ir.passes.quant_rules  # noqa: F401

    return rules()


__all__ = ["DECOMPOSITIONS", "Decomposer", "decompose_op", "decomposes", "load_rules",
           "rules", "Attribute"]
