"""`CompileContext`: what one compilation compiles with, handed to every pass.

xDSL hands each ``ModulePass.apply`` a `Context` (the loaded dialects). A compilation
also has settings that are neither pass options nor IR: which executors run the program
(in priority order), how executors named in a pass spec are found, and how traces print
as Python. They travel in the context, so that a pass reads them from its argument and
never from a process-global slot that another package fills at import time::

    ctx = compile_context(executors=(my_executor,))      # thunder_ir.lowering.executors
    Pipeline("claim{executors=my_ex},fuse").run(module, ctx)

Two jitted functions with different executors (even two executors of the same name, or
executors that bring their own VJP rules) compile with different contexts and share
nothing. ``jit`` builds the context once per jitted callable; ``thunder-ir-opt`` builds
one with the registered executors.

Passes that take ``executors`` (``claim``, ``fuse``, ``autodiff``, ``remat-split``,
``lower-claimed``, ``del-last-used``) hold objects or names; `resolve` turns names into
executors through the context: the context's own executors first (an unregistered
executor object given to ``jit`` is found by its name), then the registry lookup it
was built with.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from xdsl.context import Context
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.passes.trace import Printer

if TYPE_CHECKING:  # (symbols import torch: the opt tool's --help must not)
    from thunder_ir.dialects.symbols import SymbolTable

VjpLookup = Callable[[Operation], Any]
"""``lookup(op) -> rule | None``: an executor's own VJP rule for ``op``, if it has one."""


@dataclass
class CompileContext(Context):
    """xDSL's `Context` (the loaded dialects) and the settings of one compilation.

    Attributes:
        executors: the executors in use, in priority order (objects).
        lookup: finds a registered executor by name (`resolve` asks it for a name that
            none of ``executors`` has); None: only ``executors`` are known.
        printer: how the recorded traces print as Python (None: as MLIR).
        decompositions: decomposition rules of this compilation only, by op class, ahead
            of the built-in table (`thunder_ir.passes.decompositions`).
        vjp_rules: VJP rules of this compilation only, by op class, ahead of the built-in
            table (`thunder_ir.passes.vjp`).
        handlers: routes of this compilation's trace only: torch callable ->
            ``handler(builder, *args, **kwargs)``, ahead of the built-in routes
            (`thunder_ir.frontend.table.HANDLERS`).
        symbols: the symbolic sizes of this compilation (`thunder_ir.dialects.symbols
            .SymbolTable`: its ``ShapeEnv``, symbols and guards); None: every size static.
            A symbolic compile makes its own context with a new table (`with_symbols`).
    """

    executors: tuple[Any, ...] = ()
    lookup: Callable[[str], Any] | None = None
    printer: Printer | None = None
    decompositions: Mapping[Any, Any] = field(default_factory=dict)
    vjp_rules: Mapping[Any, Any] = field(default_factory=dict)
    handlers: Mapping[Any, Any] = field(default_factory=dict)
    symbols: SymbolTable | None = None

    def with_symbols(self) -> CompileContext:
        """This context for one symbolic compilation: the same settings and a new symbol
        table (the table belongs to that compilation alone)."""
        from thunder_ir.dialects.symbols import SymbolTable

        return replace(self, symbols=SymbolTable())

    @classmethod
    def over(cls, base: Context, **settings: Any) -> CompileContext:
        """A compile context with ``base``'s dialects (shared, not copied) and these
        settings."""
        own = {f.name for f in fields(Context)}
        dialects = {f.name: getattr(base, f.name) for f in fields(base) if f.name in own}
        return cls(**dialects, **settings)

    def executor(self, name: str) -> Any:
        """The executor called ``name``: one of ``executors``, else the registry's.

        Raises:
            ValueError: no such executor.
        """
        for e in self.executors:
            if e.name == name:
                return e
        if self.lookup is None:
            known = ", ".join(e.name for e in self.executors) or "none"
            raise ValueError(f"unknown executor {name!r} (this compile context has: {known}; "
                             "build one with thunder_ir.lowering.executors.compile_context)")
        return self.lookup(name)


_EMPTY: Mapping[Any, Any] = MappingProxyType({})
Overlays = tuple[Mapping[Any, Any], Mapping[Any, Any], Mapping[Any, Any]]
_OVERLAYS: contextvars.ContextVar[Overlays] = \
    contextvars.ContextVar("thunder_ir_rule_overlays", default=(_EMPTY, _EMPTY, _EMPTY))


@contextlib.contextmanager
def compiling(ctx: Context) -> Iterator[None]:
    """While open, ``ctx``'s compilation is the one running in this thread (and task):
    rule lookups see its own decomposition and VJP rules and the tracer its own routes
    ahead of the built-in tables (`overlays`), and sizes and shape rules its symbol table
    (``ctx.symbols``, `thunder_ir.dialects.symbols.current`). A compile opens it around
    its trace, passes and code generation, and a pipeline run around its passes, so that
    the helpers passes call (an executor's check of what an op decomposes into, a VJP
    rule's fallback through a decomposition, a type rule over symbolic sizes) see them
    too. Another thread's compile never does."""
    if not isinstance(ctx, CompileContext):
        yield
        return
    with contextlib.ExitStack() as stack:
        if ctx.decompositions or ctx.vjp_rules or ctx.handlers:
            token = _OVERLAYS.set((ctx.decompositions, ctx.vjp_rules, ctx.handlers))
            stack.callback(_OVERLAYS.reset, token)
        if ctx.symbols is not None:
            stack.enter_context(ctx.symbols.active())
        yield


def overlays() -> Overlays:
    """The decomposition rules, VJP rules and routes of the compilation running in this
    thread."""
    return _OVERLAYS.get()


def resolve(ctx: Context, executors: Iterable[Any]) -> tuple[Any, ...]:
    """Executor objects from objects or names (names through ``ctx``, a `CompileContext`).

    Raises:
        ValueError: a name, and ``ctx`` is a plain xDSL context (it knows no executors).
    """
    out = []
    for e in executors:
        if isinstance(e, str):
            if not isinstance(ctx, CompileContext):
                raise ValueError(
                    f"cannot resolve executor {e!r}: the passes run with a plain xDSL "
                    "Context; run them with a CompileContext "
                    "(thunder_ir.lowering.executors.compile_context())")
            e = ctx.executor(e)
        out.append(e)
    return tuple(out)


def vjp_overrides(executors: Iterable[Any]) -> list[VjpLookup]:
    """The VJP lookups of those of ``executors`` (objects) that bring their own rules, in
    priority order (`thunder_ir.lowering.executors.Executor.vjp_rule`): an executor's
    rules apply exactly where it is in use, and nowhere else."""
    return [e.vjp_rule for e in executors if getattr(e, "has_vjp_rules", False)]


def executor_spec(executors: Iterable[Any]) -> tuple[str, ...]:
    """The names of ``executors`` (objects or names), as a pass spec prints them."""
    return tuple(e if isinstance(e, str) else e.name for e in executors)


def spec_with_names(p: ModulePass, *, include_default: bool = False) -> ArgSpec:
    """``p``'s spec with its ``executors`` field printed as executor names."""
    named: Any = replace(p, executors=executor_spec(getattr(p, "executors", ())))  # type: ignore[call-arg]
    return ModulePass.spec(named, include_default=include_default)


__all__ = ["CompileContext", "VjpLookup", "compiling", "executor_spec", "overlays", "resolve",
           "spec_with_names", "vjp_overrides"]
