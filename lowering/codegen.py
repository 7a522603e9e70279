"""Compiles a program into a Python callable by executing its printed source.

The reference system promises that the last trace prints as the Python that actually
runs. `compile_program` keeps that promise literally: it prints the program with
`thunder_ir.runtime.python_printer.print_python` (with ``del`` after last uses) and
executes that very text with `thunder_ir.runtime.python_printer.load_python`, as the
prologue and the argument gather are executed. The text is registered in `linecache`
under a unique file name, so tracebacks, ``inspect.getsource`` and debuggers show the
generated lines.

The printed source imports everything it calls besides torch from one module, the
generated-code namespace (`thunder_ir.runtime.namespace`)::

    from thunder_ir.runtime import namespace as tir
    from thunder_ir.runtime.namespace import ltorch, prims

This module makes and registers there the op namespaces: module objects whose attribute
per op (``prims.mul``) is that op's Python callable
(`thunder_ir.dialects.base.ThunderOp.python_call`, the one answer to how an op reaches
Python), called exactly as printed: operands grouped by definition (a list for a variadic
operand, ``None`` for an absent optional one), params as keywords. Ops are bound once, as
attributes, so generated code does no per-op dictionary look-ups of its own. Fusion kernels
are globals of the generated code, named as the region's kernel: executors pass compiled
ones in ``kernels``; any other region runs its body with the reference interpreter.
"""

from __future__ import annotations

import builtins
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec

from thunder_ir.dialects import dist as dist_dialect
from thunder_ir.dialects import ltorch as ltorch_dialect
from thunder_ir.dialects import prims as prims_dialect
from thunder_ir.dialects.autograd import BackwardLayoutAttr
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.program import BACKWARD, PROLOGUE, main_function, program_functions
from thunder_ir.dialects.symbols import SYMBOL_NAME, SymbolicError
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.types import TensorType
from thunder_ir.lowering.regions import compile_kernels
from thunder_ir.passes.autodiff import grad_layout_of
from thunder_ir.passes.context import resolve, spec_with_names
from thunder_ir.runtime import namespace as tir
from thunder_ir.runtime.gather import gather_function
from thunder_ir.runtime.interpreter import run_block
from thunder_ir.runtime.origins import Origin
from thunder_ir.runtime.prologue import Prologue
from thunder_ir.runtime.python_printer import (
    function_name,
    load_python,
    print_python,
    render,
    sanitize,
)

GENERATED_MODULE = "thunder_ir.generated"
"""``__name__`` of the globals generated code runs in (its functions' ``__module__``)."""

NAMESPACES: dict[str, ModuleType] = {}
"""Dialect name (``"prims"``) -> the namespace generated code calls that dialect's ops in."""

_BOUND: dict[tuple[str, str], type[ThunderOp]] = {}


# --------------------------------------------------------------------------- op namespaces


def namespace(dialect: str) -> ModuleType:
    """The namespace of a dialect's ops, created empty on first use and registered in the
    generated-code namespace under the dialect's name (``tir.prims``)."""
    ns = NAMESPACES.get(dialect)
    if ns is None:
        ns = ModuleType(
            f"{tir.__name__}.{dialect}",
            f"Reference implementations of the {dialect} ops, as generated code calls them.",
        )
        tir.register(dialect, ns)
        NAMESPACES[dialect] = ns
    return ns


def bind_op(cls: type[ThunderOp]) -> None:
    """Makes ``dialect.short`` call ``cls`` in generated code (idempotent).

    Raises:
        ValueError: another op class is already bound under the same name.
    """
    dialect, short = cls.name.split(".", 1)
    key = (dialect, short)
    bound = _BOUND.get(key)
    if bound is cls:
        return
    if bound is not None:
        raise ValueError(
            f"codegen: {cls.name} is already bound to {bound.__qualname__}; "
            f"cannot rebind it to {cls.__qualname__}"
        )
    setattr(namespace(dialect), short, cls.python_call())
    _BOUND[key] = cls


def _bind_table(dialect: str, ops: Mapping[str, type[ThunderOp]]) -> ModuleType:
    for cls in ops.values():
        bind_op(cls)
    return namespace(dialect)


prims = _bind_table("prims", prims_dialect.OPS)
ltorch = _bind_table("ltorch", ltorch_dialect.OPS)
dist = _bind_table("dist", dist_dialect.OPS)


# --------------------------------------------------------------------------- kernels


def interpreted_kernel(region: RegionOp) -> Callable[..., Any]:
    """A fusion kernel that runs a snapshot of the region's body with the interpreter.

    Like every kernel, it returns its one output itself, or a tuple of several.
    """
    block = region.body.clone().block
    name = region.kernel.data
    single = len(region.results) == 1
    sources = _symbol_sources(block)
    if sources:  # a region of a symbolic program: its static arguments hold symbols

        def kernel(*args: Any) -> Any:
            symbols = {s: args[i].shape[d] for s, (i, d) in sources.items()}
            outs = run_block(block, args, symbols)
            return outs[0] if single else tuple(outs)
    else:

        def kernel(*args: Any) -> Any:
            outs = run_block(block, args)
            return outs[0] if single else tuple(outs)

    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"{name} ({region.executor.data}), run by the reference interpreter."
    return kernel


def _symbol_sources(block: Any) -> dict[str, tuple[int, int]]:
    """Symbol -> (argument, dim) it is read from, for every symbol the body's types and
    static arguments use (raises `SymbolicError` for one no argument's shape gives)."""
    used: set[str] = set()
    if not any(isinstance(v.type, TensorType) and v.type.symbolic
               for v in (*block.args, *(r for op in block.walk() for r in op.results))):
        return {}
    for op in block.walk():
        for v in op.results:
            if isinstance(v.type, TensorType) and v.type.symbolic:
                used |= {d for d in v.type.dims_text if isinstance(d, str)}
        for attr in op.properties.values():
            used |= set(SYMBOL_NAME.findall(str(attr))) if "prims.sym" in str(attr) else set()
    sources: dict[str, tuple[int, int]] = {}
    for i, a in enumerate(block.args):
        t = a.type
        if isinstance(t, TensorType) and t.symbolic:
            used |= {d for d in t.dims_text if isinstance(d, str)}
            for d, size in enumerate(t.dims_text):
                if isinstance(size, str) and SYMBOL_NAME.fullmatch(size):
                    sources.setdefault(size, (i, d))
    names = set().union(*(SYMBOL_NAME.findall(u) for u in used)) if used else set()
    missing = names - sources.keys()
    if missing:
        raise SymbolicError(f"no input of the region has a dimension {sorted(missing)[0]}")
    return {s: sources[s] for s in sorted(names)}


# --------------------------------------------------------------------------- compile


def compile_program(
    module: ModuleOp | func.FuncOp | RegionOp,
    kernels: Mapping[str, Callable[..., Any]] | None = None,
    *,
    header: str | None = None,
    packed: bool = False,
) -> tuple[Callable[..., Any], str]:
    """Prints a program as Python (freeing values after their last use) and executes it.

    Args:
        module: the program (a module with one ``func.func``), that function, or a
            ``fusion.region`` whose body reads only its arguments (a function of them).
        kernels: compiled fusion kernels by kernel name. A kernel takes the region's
            inputs positionally and returns its one output itself, or a sequence of
            several. Regions without one run their body with the reference interpreter.
        header: comment lines to print first (as `print_python` takes them).
        packed: the function takes its arguments as one list and empties it (as
            `print_python` prints it): ``@backward``, so that each residual is freed
            after its last use.

    Returns:
        ``(fn, source)``: the function the source defines, and the source itself. ``fn``
        returns the single output itself, a tuple for several outputs, ``()`` for none.

    Raises:
        ValueError: two fusion regions share a kernel name and no kernel is given for it.
    """
    fn_op = module if isinstance(module, func.FuncOp | RegionOp) else main_function(module)
    given = dict(kernels or {})
    made: dict[str, RegionOp] = {}
    scope: dict[str, Any] = {"__name__": GENERATED_MODULE, "__builtins__": builtins}
    for op in fn_op.body.block.ops:
        if isinstance(op, RegionOp):
            name = op.kernel.data
            if name in given:
                scope[name] = given[name]
            elif name in made:
                raise ValueError(
                    f"codegen: two fusion regions are named {name!r}; "
                    "give each region its own kernel name"
                )
            else:
                made[name] = op
                scope[name] = interpreted_kernel(op)
        elif isinstance(op, ThunderOp) and not isinstance(op, CallOp):
            bind_op(type(op))
    source = print_python(fn_op, header, free_after_last_use=True, packed=packed)
    return load_python(source, sanitize(function_name(fn_op)), scope), source


@dataclass(frozen=True)
class GeneratedFunction:
    """One function of a program as Python.

    Attributes:
        fn: the function the generated source defines.
        source: that source, exactly as it runs.
        op: the function's IR.
        seconds: how long its code generation took (fusion regions compiled included).
        wraps: the wrappers `CompiledProgram.with_functions` put around ``fn``, innermost
            first (`lazy` puts them around its function too).
    """

    fn: Callable[..., Any]
    source: str
    op: func.FuncOp
    seconds: float
    wraps: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = ()

    def lazy(self) -> Callable[..., Any]:
        """``@backward`` reading each argument right before its first use (`print_python`'s
        ``lazy``), in ``fn``'s globals (its kernels) and wrappers: made when first needed,
        for residuals that saved-tensor hooks packed (`thunder_ir.runtime.autograd`)."""
        source = print_python(self.op, CODEGEN_HEADER, free_after_last_use=True, lazy=True)
        inner = inspect.unwrap(self.fn)  # under ``@tir.no_grad`` and ``wraps``
        fn = load_python(source, sanitize(self.op.sym_name.data), dict(inner.__globals__))
        for wrap in self.wraps:
            fn = wrap(fn)
        return fn


@dataclass(frozen=True)
class CompiledProgram:
    """What code generation makes of a program module: everything a call runs, typed.

    Attributes:
        functions: the program's functions as Python, by name (``forward``; in training
            also ``backward``).
        prologue: the cache key function of the module's ``@prologue`` (compiled before
            tracing, since the cache looks the call up with it; handed through).
        gather: the call's flat argument leaves -> the program's arguments, bound to the
            module's state (`thunder_ir.runtime.gather`); None when no origins were given.
        gather_source: its source.
        layout: ``@backward``'s gradient layout (training), else None.
    """

    functions: dict[str, GeneratedFunction]
    prologue: Prologue | None = None
    gather: Callable[[Sequence[Any]], tuple[Any, ...]] | None = None
    gather_source: str = ""
    layout: BackwardLayoutAttr | None = None

    def __getitem__(self, name: str) -> GeneratedFunction:
        return self.functions[name]

    @property
    def sources(self) -> dict[str, str]:
        """Every generated source, by function: the program's, ``prologue``, ``gather``."""
        out = {name: g.source for name, g in self.functions.items()}
        if self.prologue is not None:
            out[PROLOGUE] = self.prologue.source
        if self.gather is not None:
            out["gather"] = self.gather_source
        return out

    def with_functions(self, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
                       ) -> CompiledProgram:
        """This program with each function's callable wrapped (``without_autocast``)."""
        return replace(self, functions={k: replace(g, fn=wrap(g.fn), wraps=(*g.wraps, wrap))
                                        for k, g in self.functions.items()})


CODEGEN = "del-last-used"
"""The name of code generation, in ``last_traces`` and in pass specs."""

CODEGEN_HEADER = f"# Constructed by {CODEGEN} (Python code generation)"
"""The first line of generated source."""


def generate(module: ModuleOp, executors: Sequence[Any] = (), *,
             origins: Sequence[Origin] | None = None,
             state: Mapping[str, Any] | None = None,
             prologue: Prologue | None = None) -> CompiledProgram:
    """Code generation: each function of the program (``@prologue`` aside) becomes Python
    source, freeing each value after its last use, and the function it defines
    (``@backward`` takes one list, residuals then cotangents, and empties it, so that the
    bridge's references do not keep a residual alive past its last use); fusion
    regions are compiled by their executors (``executors``: objects, those in use).
    With ``origins`` (where each program argument comes from) and ``state`` (the module's
    parameters and buffers by name), the argument gather is generated too; ``prologue``
    (the key function of the module's ``@prologue``, compiled before tracing) is handed
    through. The IR is left as it is."""
    fusion = any(getattr(e, "is_fusion", False) for e in executors)
    out: dict[str, GeneratedFunction] = {}
    for fn_op in program_functions(module):
        start = time.perf_counter()
        kernels = compile_kernels(fn_op, executors) if fusion else {}
        fn, source = compile_program(fn_op, kernels=kernels, header=CODEGEN_HEADER,
                                     packed=fn_op.sym_name.data == BACKWARD)
        out[fn_op.sym_name.data] = GeneratedFunction(fn, source, fn_op,
                                                     time.perf_counter() - start)
    gather, gather_source = None, ""
    if origins is not None:
        gfn, bound = gather_function(origins, state or {})
        gather_source = render(gfn)
        gather = load_python(gather_source, gfn.name, bound)
    layout = grad_layout_of(out[BACKWARD].op) if BACKWARD in out else None
    assert layout is None or isinstance(layout, BackwardLayoutAttr), \
        "remat-split lays out @backward"
    return CompiledProgram(out, prologue, gather, gather_source, layout)


@dataclass(frozen=True)  # registered by name in `thunder_ir.lowering.pass_names`
class DelLastUsedPass(ModulePass):
    """Code generation as a pass, for ``thunder-ir-opt`` and pass specs: it runs
    `generate` (so a program that cannot become Python fails here, naming the op) and
    leaves the IR as it is; ``-t python`` prints the source. ``jit`` calls `generate`
    itself, after its passes, and keeps what it returns.

    Args:
        executors: the executors in use (objects or names): the fusion executors compile
            the regions.
    """

    name = CODEGEN
    executors: tuple[Any, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        generate(op, resolve(ctx, self.executors))

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        return spec_with_names(self, include_default=include_default)


__all__ = [
    "CODEGEN",
    "CODEGEN_HEADER",
    "CompiledProgram",
    "GENERATED_MODULE",
    "DelLastUsedPass",
    "GeneratedFunction",
    "NAMESPACES",
    "bind_op",
    "compile_program",
    "generate",
    "interpreted_kernel",
    "ltorch",
    "namespace",
    "prims",
]
