"""Executors: who runs what. The interface every executor implements, and the registry.

An executor is one of two kinds (or both):

* an **operator executor** claims whole ops (``can_claim``): the torch executor claims ltorch
  ops it runs with one torch call; an extension's executor claims the ops it registered or
  implements. A claimed op is marked ``fusion.claimed = #fusion.executor<"<name>">`` and
  lowered by its executor's ``lower`` (default: the torch executor's lowering to ``torch.call``).
* a **fusion executor** groups fusible prims (``can_fuse``) into ``fusion.region`` ops and
  compiles each region into one callable (``compile_region``): Triton kernels, nvFuser
  FusionDefinitions, torch.compile (Inductor) functions.

Claiming is *claim or flatten* (STYLE.md): executors are tried in priority order, the first
whose checker accepts an op claims it, and a composite op that nobody claims is decomposed
into prims, which are then claimed (or fused) again.

``get_all_executors()`` lists every registered executor; ``get_default_executors()`` only
those that can run here (their package imports and their device exists), in priority order.
``compile_context(executors)`` is what a compilation runs its passes with: those executors,
resolved, and this registry to find executors that a pass spec names
(`thunder_ir.passes.context.CompileContext`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import claimed_by
from thunder_ir.dialects.location import has_location
from thunder_ir.passes.change import ReportsChange
from thunder_ir.passes.context import CompileContext, resolve, spec_with_names


class Executor:
    """Base of every executor. Subclasses override what their kind needs.

    Attributes:
        name: unique, used in ``claimed`` attributes and ``fusion.region`` executor names.
        version: free-form, shown by ``repr``.
        kernel_prefix: fusion regions of this executor are named ``<prefix><N>``
            (``nvFusion0``, ``tritonFusion1``).
        adopts_orphans: its regions may take *orphans*, ops connected to nothing else
            in the function (`thunder_ir.passes.fuse`): its kernels compute unrelated
            values side by side (Inductor's graph may hold several).
    """

    name: str = "executor"
    version: str = "0"
    kernel_prefix: str = "fusion"
    adopts_orphans: bool = False

    def is_available(self) -> bool:
        """True when this executor can run on this machine (package and device present)."""
        return True

    # ---- operator executors

    def can_claim(self, op: ThunderOp) -> bool:
        """True if this executor runs ``op`` whole."""
        return False

    def lower(self, op: ThunderOp) -> list[Operation] | None:
        """Ops that compute a claimed ``op`` (None: lower it like the torch executor)."""
        return None

    def expand(self, op: ThunderOp) -> tuple[list[Operation], list[SSAValue]] | None:
        """Replaces a just-claimed ``op`` by other ops (an execution transform), or None.

        Returns the new ops and the values that replace ``op``'s results; the claim pass
        claims the new ops in turn.
        """
        return None

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """A VJP rule that replaces the table's for ``op`` when this executor is in use
        (a fused backward kernel, an extension's grad transform); None: use the table."""
        return None

    @property
    def has_vjp_rules(self) -> bool:
        """True when this executor overrides `vjp_rule` (autodiff then asks it first)."""
        return type(self).vjp_rule is not Executor.vjp_rule

    # ---- fusion executors

    @property
    def is_fusion(self) -> bool:
        """True for executors that compile ``fusion.region`` ops."""
        return False

    def can_fuse(self, op: Operation) -> bool:
        """True if ``op`` may join one of this executor's fusion regions."""
        return False

    def fuses_claimed(self, op: Operation, claimer: str) -> bool:
        """True if ``op``, claimed by the executor named ``claimer``, may still join one of
        this executor's regions (``can_fuse`` must accept it too): the region runs it with
        the kernels the claimer would. The torch fallback's claims need no such consent."""
        return False

    def fuses_draw(self, op: Operation) -> bool:
        """True if ``op``, a random draw (not side-effect free), may join one of this
        executor's regions: its kernel makes the same draw from the same generator, at the
        region's place in the program. The fuse pass keeps one draw per region and the
        regions in the draws' order (`thunder_ir.passes.fuse`)."""
        return False

    def compile_region(self, region: Operation) -> Callable[..., Any]:
        """A callable computing a ``fusion.region`` of this executor: ``f(*inputs) -> outs``."""
        raise NotImplementedError(f"{self.name} does not compile fusion regions")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, version={self.version!r})"


_REGISTRY: dict[str, Executor] = {}
_DEFAULT_ORDER: list[str] = []


def register_executor(ex: Executor, *, default: bool = False, priority: int | None = None
                      ) -> Executor:
    """Registers an executor by name; ``default=True`` adds it to the default list."""
    _REGISTRY[ex.name] = ex
    if default and ex.name not in _DEFAULT_ORDER:
        _DEFAULT_ORDER.insert(len(_DEFAULT_ORDER) if priority is None else priority, ex.name)
    return ex


def unregister_executor(ex: Executor) -> None:
    """Forgets ``ex`` (when it is the executor registered under its name)."""
    if _REGISTRY.get(ex.name) is ex:
        del _REGISTRY[ex.name]
        if ex.name in _DEFAULT_ORDER:
            _DEFAULT_ORDER.remove(ex.name)


def get_executor(name: str) -> Executor:
    """The registered executor called ``name``."""
    load_builtin_executors()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r}; registered: "
                         f"{', '.join(sorted(_REGISTRY))}") from None


def get_all_executors() -> tuple[Executor, ...]:
    """Every registered executor, available here or not."""
    load_builtin_executors()
    return tuple(_REGISTRY.values())


def get_default_executors() -> tuple[Executor, ...]:
    """The executors used when ``jit`` is given none: those that can run here, in priority
    order. A tuple, so ``(my_ex,) + get_default_executors()`` works."""
    load_builtin_executors()
    return tuple(_REGISTRY[n] for n in _DEFAULT_ORDER if _REGISTRY[n].is_available())


def executor_ref(e: Any) -> Any:
    """How a copy of a jitted callable names executor ``e``: by name when it is the
    registered one (executors hold compiled kernels and need not pickle), else itself."""
    if isinstance(e, str):
        return e
    load_builtin_executors()
    registered = _REGISTRY.get(e.name)
    return e.name if registered is not None and registered is e else e


def resolve_executors(executors: Any) -> list[Executor]:
    """Executor objects from objects or names; the torch executor always comes last."""
    load_builtin_executors()
    if executors is None:
        out = list(get_default_executors())
    else:
        out = [get_executor(e) if isinstance(e, str) else e for e in executors]
    for e in out:
        if not isinstance(e, Executor):
            raise TypeError(f"executors must be Executor objects or names, got {e!r}")
        if not e.is_available():
            raise ValueError(f"executor {e.name!r} cannot run on this machine "
                             "(its package or device is missing)")
    # The torch executor runs whatever nobody else claims: it always comes last. A torch
    # executor of the caller's own (e.g. one that claims less) replaces the default one.
    torch_ex = next((e for e in out if e.name == "torch"), _REGISTRY["torch"])
    out = [e for e in out if e.name != "torch"]
    out.append(torch_ex)
    return out


def compile_context(executors: Any = None, *, printer: Any = None) -> CompileContext:
    """What a compilation runs its passes with: ``executors`` (objects or names; None:
    the default ones) resolved as `resolve_executors` does, this registry to find the
    executors a pass spec names, every thunder_ir dialect loaded, and ``printer`` for the
    traces (`thunder_ir.lowering.python_printer.print_python` unless given)."""
    if printer is None:
        from thunder_ir.lowering.python_printer import print_python

        printer = print_python
    return CompileContext.over(_dialects(), executors=tuple(resolve_executors(executors)),
                               lookup=get_executor, printer=printer)


def _dialects() -> Context:
    """The context every compile context shares its loaded dialects with (built once)."""
    if not _DIALECTS:
        from thunder_ir.dialects.program import context

        _DIALECTS.append(context())
    return _DIALECTS[0]


_DIALECTS: list[Context] = []
_LOADED = [False]


def load_builtin_executors() -> None:
    """Registers the built-in executors (once; ``import thunder_ir`` does it, so that
    their callees are in the generated-code namespace before any source runs)."""
    if _LOADED[0]:
        return
    _LOADED[0] = True
    from thunder_ir.lowering.torch_executor import TorchExecutor

    register_executor(TorchExecutor(), default=True)
    for module in ("thunder_ir.lowering.inductor_executor",
                   "thunder_ir.lowering.triton_executor",
                   "thunder_ir.lowering.nvfuser_executor",
                   "thunder_ir.lowering.sdpa_executor"):
        try:
            __import__(module)  # each registers itself
        except ImportError as e:
            if e.name != module:  # a missing optional dependency inside is fine
                continue




class _LowerClaimed(RewritePattern):
    def __init__(self, executors: dict[str, Executor]) -> None:
        self.executors = executors

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        claimer = claimed_by(op)
        if claimer is None or not isinstance(op, ThunderOp):
            return
        ex = self.executors.get(claimer)
        if ex is None:
            return
        new_ops = ex.lower(op)
        if new_ops is None:
            return
        results = list(new_ops[-1].results) if new_ops else []
        if [r.type for r in results] != [r.type for r in op.results]:
            raise TypeError(f"executor {ex.name!r} lowered {op.name} to ops with result types "
                            f"{[str(r.type) for r in results]}, expected "
                            f"{[str(r.type) for r in op.results]}")
        if has_location(op):
            for o in new_ops:
                if not has_location(o):
                    o.location = op.location
        rewriter.replace(op, new_ops, results)


@dataclass(frozen=True)  # registered by name in `thunder_ir.lowering.pass_names`
class LowerClaimedPass(ReportsChange):
    """Ops claimed by an executor with its own lowering (``Executor.lower``) become the ops
    that executor returns; the rest are left for ``lower-to-torch``."""

    name = "lower-claimed"
    executors: tuple[Any, ...] = ()

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        custom = {e.name: e for e in resolve(ctx, self.executors)
                  if type(e).lower is not Executor.lower}
        if not custom:
            return False
        PatternRewriteWalker(GreedyRewritePatternApplier([_LowerClaimed(custom)],
                                                         dce_enabled=False),
                             apply_recursively=False).rewrite_module(op)
        return True

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)
