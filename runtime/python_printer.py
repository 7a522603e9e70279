"""Prints a program as Python source, the way the reference system prints its traces.

A trace is runnable Python with one statement per op and a comment giving each result's
type::

    # Constructed by decompose-ltorch (took 1 milliseconds)
    import torch
    from thunder_ir.runtime import namespace as tir
    from thunder_ir.runtime.namespace import prims

    @tir.no_grad
    def forward(x, t_fc_1_weight):
      # x: "cpu f32[8, 784]"
      # t_fc_1_weight: "cpu f32[10, 784]"
      t0 = prims.mul(x, 2.0)  # t0: "cpu f32[8, 784]"
      t1 = prims.linear(t0, t_fc_1_weight, None)  # t1: "cpu f32[8, 10]"
      del t0
      return t1

How each kind of op prints:

* ``ltorch``/``prims`` (any `ThunderOp`): ``dialect.op(operands..., param=value)``.
  Operands are positional and grouped by definition (``None`` for an absent optional
  operand, ``[a, b]`` for a variadic one); params are keywords, absent ones left out.
  ``prims.constant`` is never printed: its value appears wherever it is used.
* ``torch.call``: the call itself, ``torch.nn.functional.linear(x, w, None)``, with
  ``import torch.nn.functional`` among the imports; a callee of the generated-code
  namespace (`thunder_ir.runtime.namespace`) as ``tir.call_with_grad(...)``.
* ``fusion.region``: ``(t1, t4) = nvFusion0(t0)`` (``t1 = nvFusion0(t0)`` for one
  result), with the ops of its body as comments beneath it. Kernels take their inputs
  positionally and return their one output itself, or a tuple of several.

* ``guard`` ops (`thunder_ir.dialects.guard`): no statement; each result is the op's
  Python expression (`GuardOp.python`), inlined where it is used, as a constant is.

The function returns ``t1`` for one output, ``(t1, t2)`` for several and ``()`` for none.
With ``free_after_last_use=True`` a ``del`` statement follows the last use of every value
that is not an output, as in the reference's final trace.

A function over Python objects (every argument and result ``!guard.value``: the cache's
``@prologue``) prints as a key function: it takes the call's flat leaves as one sequence,
unpacks them, and returns one expression, with no imports, decorator or type comments::

    def prologue(args):
      (a0, a1,) = args
      return (_meta(a0), _meta(a1), _aliases(a0, a1), _grad(), ..., _tokens,)

This is the one printer of generated Python. Every function it prints has the shape of a
`PyFunction` (`render`); a generated function without IR of its own (the argument gather,
`thunder_ir.runtime.gather`) is built as one. `load_python` is the one place generated
source is executed: the program's functions (`thunder_ir.lowering.codegen`), the prologue
(`thunder_ir.runtime.prologue`) and the gather all run exactly the text printed here.
"""

from __future__ import annotations

import importlib
import itertools
import keyword
import linecache
import math
import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.irdl import VariadicDef

from thunder_ir.dialects.autograd import FunctionOp, SavedAsOp
from thunder_ir.dialects.autograd import YieldOp as AutogradYieldOp
from thunder_ir.dialects.base import OperandRef, ThunderOp, from_attr
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.guard import GuardOp, ValueType
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import main_function
from thunder_ir.dialects.symbols import (
    SYMBOL_NAME,
    UNBACKED_RESULT,
    SymbolicError,
    SymText,
    detached,
    sym_exprs,
    sym_text,
)
from thunder_ir.dialects.torch import RUNTIME_NAMESPACE, CallOp, symbol_args
from thunder_ir.dialects.types import TensorType, pretty_type
from thunder_ir.runtime.namespace import ALIAS, IMPORT, imports_for
from thunder_ir.runtime.symbolic_names import SYMBOLIC_NAMES, symbolic_scope

_IN_NAMESPACE = RUNTIME_NAMESPACE + "."
_SYMBOLIC = (torch.SymInt, torch.SymFloat, SymText)

INDENT = "  "

# Names the generated code itself refers to; values never take them: symbolic text's too
# (`SYMBOLIC_NAMES`, and the builtins it calls). (Other builtins may be shadowed:
# generated code uses only these.)
_ALWAYS_RESERVED = frozenset({*keyword.kwlist, "float", "slice", "torch", ALIAS, "prims",
                              "ltorch", "abs", "max", "min", "round", *SYMBOLIC_NAMES})
_NOT_IDENT = re.compile(r"\W")


# --------------------------------------------------------------------------- literals


def py_literal(value: Any, operands: Sequence[str] = ()) -> str:
    """Python source for a static argument; `OperandRef` ``i`` prints as ``operands[i]``.

    Args:
        value: a Python value as `thunder_ir.dialects.base.from_attr` returns it.
        operands: the printed operands of the op, by flat operand index.

    Returns:
        An expression that evaluates to ``value``: ``2.0``, ``float('inf')``,
        ``torch.float32``, ``slice(0, 4, 2)``, ``...``, ``(1, 2)``, ``'mean'``.
    """
    kind = type(value)
    if kind is int or kind is str or kind is bool or value is None:
        return repr(value)
    if kind is tuple and all([type(v) is int for v in value]):  # sizes, dims
        return repr(value)
    if isinstance(value, OperandRef):  # before int: an OperandRef is an int
        return operands[int(value)]
    if isinstance(value, _SYMBOLIC):  # a symbolic size: its text over the bound symbols
        text = sym_text(value)
        return text if isinstance(text, str) else repr(text)
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float('{value!r}')"
    if isinstance(value, torch.dtype):
        return str(value)  # "torch.float32"
    if isinstance(value, tuple | list):
        items = [py_literal(v, operands) for v in value]
        if isinstance(value, list):
            return f"[{', '.join(items)}]"
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return f"slice({', '.join(py_literal(p, operands) for p in parts)})"
    if isinstance(value, EllipsisType):
        return "..."
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, torch.memory_format | torch.layout):
        return str(value)  # "torch.contiguous_format"
    raise TypeError(
        f"python printer: no Python literal for {value!r} of type {type(value).__name__}"
    )


# --------------------------------------------------------------------------- imports


_CALLEE_MODULES: dict[str, str] = {}


def callee_module(path: str) -> str:
    """The module to import for a ``torch.call`` callee: its longest importable prefix.

    ``torch.nn.functional.linear`` needs ``torch.nn.functional``; ``torch.Tensor.add_``
    needs ``torch``. A callee whose module cannot be imported falls back to its root.
    """
    mod = _CALLEE_MODULES.get(path)
    if mod is None:
        parts = path.split(".")
        mod = parts[0]
        for i in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:i])
            try:
                importlib.import_module(candidate)
            except ImportError:
                continue
            mod = candidate
            break
        _CALLEE_MODULES[path] = mod
    return mod


def callee_expr(path: str) -> str:
    """How generated code names a ``torch.call`` callee: ``tir.<name>`` for a callable of
    the generated-code namespace, else its import path."""
    if path.startswith(_IN_NAMESPACE):
        return f"{ALIAS}.{path[len(_IN_NAMESPACE):]}"
    return path


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class PyFunction:
    """A generated function, in the one shape the printer writes every one in.

    Attributes:
        name: the function's name.
        params: its parameters; with ``packed``, the names the sequence unpacks into.
        result: the expression it returns.
        body: its statement lines before the ``return``, indented.
        packed: the function takes one sequence argument of this name and unpacks it
            into ``params`` (``(a0, a1,) = args``); None: ``params`` are its parameters.
        head: the lines before ``def`` (comments, imports, a decorator).
        clear: with ``packed``, the function empties the list it was given after
            unpacking it, so that the caller holds no reference to the values: each is
            freed after its last use (``@backward``'s residuals).
    """

    name: str
    params: Sequence[str]
    result: str
    body: Sequence[str] = ()
    packed: str | None = None
    head: Sequence[str] = ()
    clear: bool = False


def render(fn: PyFunction) -> str:
    """The source of ``fn``, ending in a newline."""
    lines = list(fn.head)
    if fn.packed is None:
        lines.append(f"def {fn.name}({', '.join(fn.params)}):")
    else:
        lines.append(f"def {fn.name}({fn.packed}):")
        if fn.params:
            lines.append(f"{INDENT}({', '.join(fn.params)},) = {fn.packed}")
        if fn.clear:
            lines.append(f"{INDENT}{fn.packed}.clear()  # each value is freed after its last use")
    lines.extend(fn.body)
    lines.append(f"{INDENT}return {fn.result}")
    return "\n".join(lines) + "\n"


def tuple_expr(items: Sequence[str]) -> str:
    """A tuple display of ``items``: ``(a, b,)``, ``()`` for none."""
    return f"({', '.join(items)},)" if items else "()"


_COUNTER = itertools.count()


def load_python(source: str, name: str, scope: dict[str, Any]) -> Callable[..., Any]:
    """Executes printed source in ``scope`` (its globals) and returns the function
    ``name`` it defines: the one place generated source runs.

    The text is registered in `linecache` under a unique file name
    (``<thunder_ir generated forward #3>``) for as long as the function lives, so
    tracebacks, ``inspect.getsource`` and debuggers show the generated lines. ``scope``
    gets each name symbolic text may say that it does not bind itself
    (`thunder_ir.runtime.symbolic_names.SYMBOLIC_NAMES`: ``math``, ``torch``...).
    """
    filename = f"<thunder_ir generated {name} #{next(_COUNTER)}>"
    code = compile(source, filename, "exec")
    symbolic_scope(scope)  # symbolic text may say math.trunc, torch.sym_float, ...
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(code, scope)
    fn = scope[name]
    weakref.finalize(fn, linecache.cache.pop, filename, None)
    return fn  # type: ignore[no-any-return]


def is_key_function(fn: func.FuncOp) -> bool:
    """A function over Python objects (every argument and result ``!guard.value``, and
    some result): the cache's ``@prologue``. It prints as a key function (see the module
    doc)."""
    ft = fn.function_type
    outs = ft.outputs.data
    return bool(outs) and all(isinstance(t, ValueType) for t in (*ft.inputs.data, *outs))


# --------------------------------------------------------------------------- naming


def sanitize(hint: str) -> str:
    """Turns a name hint into a Python identifier (``fc.1-w`` -> ``fc_1_w``, ``0`` -> ``_0``)."""
    name = _NOT_IDENT.sub("_", hint)
    if not name or name[0].isdigit():
        name = "_" + name
    return name


def _is_variadic_results(op: Operation) -> bool:
    """True if the op returns a sequence, which a single result unpacks as ``(a,) = ...``."""
    if isinstance(op, CallOp):
        return op.properties.get("multi") is not None  # the callee returned a sequence
    cls = type(op)
    v = _VARIADIC_RESULTS.get(cls)
    if v is None:
        defn = getattr(cls, "get_irdl_definition", None)
        v = defn is not None and any(isinstance(d, VariadicDef) for _, d in defn().results)
        _VARIADIC_RESULTS[cls] = v
    return v


_VARIADIC_RESULTS: dict[type, bool] = {}


def _ref_targets(op: ThunderOp) -> Sequence[SSAValue]:
    """The operands an `OperandRef` in the op's params counts in.

    The op's ``OPERAND_REF_GROUP`` names an operand group when it declares one; otherwise
    an op with exactly one variadic operand group counts in that group (``ltorch.getitem``'s
    ``indices``), and any other op in its flat operand list.
    """
    cls = type(op)
    group = getattr(cls, "OPERAND_REF_GROUP", None)
    layout = cls.operand_layout()
    if group is None:
        variadic = [n for n, kind in layout if kind == "variadic"]
        if len(variadic) != 1:
            return op.operands
        group = variadic[0]
    for (name, _), values in zip(layout, op.grouped_operands(), strict=True):
        if name == group:
            return values if isinstance(values, list) else [values]
    raise ValueError(f"{op.name}: OPERAND_REF_GROUP {group!r} names no operand group")


class _Namer:
    """Gives every value a unique Python name: its sanitized hint, or ``t0``, ``t1``…"""

    def __init__(self, reserved: set[str], hints: set[str]) -> None:
        self.used = set(reserved)
        self.hints = hints  # every sanitized hint in the program: fresh names avoid them
        self.counter = 0

    def name(self, value: SSAValue) -> str:
        hint = value.name_hint
        if hint is None:
            while True:
                cand = f"t{self.counter}"
                self.counter += 1
                if cand not in self.used and cand not in self.hints:
                    break
        else:
            base = sanitize(hint)
            cand = base
            k = 0
            while cand in self.used:
                k += 1
                cand = f"{base}_{k}"
        self.used.add(cand)
        return cand


# --------------------------------------------------------------------------- printer


class _PythonPrinter:
    """One printing of one function. ``exprs`` maps each value to its Python expression."""

    def __init__(self, fn: func.FuncOp | RegionOp, *, locations: bool, layouts: bool = True,
                 packed: bool = False, lazy: bool = False) -> None:
        self.fn = fn  # a function, or a fusion region printed as one (its body, its yield)
        self.packed = packed or lazy
        self.lazy = lazy
        self.block: Block = fn.body.block
        self.locations = locations
        self.layouts = layouts
        self.key = isinstance(fn, func.FuncOp) and is_key_function(fn)
        self.exprs: dict[SSAValue, str] = {}
        self.preset: set[SSAValue] = set()  # body values that print as a region's results
        self.lines: list[str] = []
        self.taken: set[SSAValue] = set()  # ``lazy``: the arguments read so far
        self.namespaces: set[str] = set()
        self.modules: set[str] = set()
        reserved = set(_ALWAYS_RESERVED)
        hints: set[str] = set()
        for a in self.block.args:
            if a.name_hint is not None:
                hints.add(sanitize(a.name_hint))
        self.symbols: set[str] = set()
        self.late: dict[Operation, list[tuple[str, SSAValue, int | None]]] = {}
        for top in self.block.ops:
            self._scan_top(top, reserved)
            for op in top.walk():
                if op.properties:
                    self._scan_symbols(op)
                for r in op.results:
                    if r.name_hint is not None:
                        hints.add(sanitize(r.name_hint))
                for region in op.regions:
                    for b in region.blocks:
                        for a in b.args:
                            if a.name_hint is not None:
                                hints.add(sanitize(a.name_hint))
        reserved |= self.symbols
        self.fn_name = sanitize(function_name(fn))
        reserved.add(self.fn_name)
        self.namer = _Namer(reserved, hints)

    def _scan_symbols(self, op: Operation) -> None:
        """Collects the symbols the op's static arguments use (``#prims.sym``)."""
        for a in sym_exprs(op.properties.values()):
            self.symbols |= set(SYMBOL_NAME.findall(a.text))
            if "math." in a.text:  # sympy prints ceiling and floor as math.ceil/floor
                self.modules.add("math")

    def bind_symbols(self) -> None:
        """``s0 = x.shape[1]``: binds each symbol the function uses from the first
        argument with a dimension of exactly that size (a symbolic function computes its
        sizes from its arguments' shapes)."""
        if not self.symbols:
            return
        bound: dict[str, str] = {}
        args = self.block.args
        sym_args = symbol_args(self.fn) if isinstance(self.fn, func.FuncOp) else {}
        for name, i in sym_args.items():  # a symbolic int argument: itself
            if name in self.symbols and i < len(args):
                bound[name] = self.exprs[args[i]]
        for a in self.block.args:
            t = a.type
            if isinstance(t, TensorType) and t.symbolic:
                for i, d in enumerate(t.dims_text):
                    if isinstance(d, str) and d in self.symbols and d not in bound:
                        bound[d] = f"{self.exprs[a]}.shape[{i}]"
        missing = self.symbols - bound.keys()
        if missing:  # unbacked sizes (``u0``): read from the first result that has one
            missing -= self._bind_from_results(missing)
        if missing:
            raise SymbolicError(
                f"function {self.fn_name} uses the sizes {', '.join(sorted(missing))}, "
                "which no argument's shape holds")
        if self.lazy:  # the arguments the bindings read are taken first
            names = {self.exprs[a]: a for a in self.block.args}
            for v in sorted(bound.values()):
                self._take(names[v.split(".shape[", 1)[0]])
        self.lines.extend(f"{INDENT}{k} = {v}" for k, v in sorted(bound.items()))

    def _bind_from_results(self, names: set[str]) -> set[str]:
        """``u0 = t3.shape[0]`` right after the first top-level op whose result has a
        dimension of exactly that size, for each symbol of ``names`` no argument has (an
        unbacked size: a data-dependent op's result has it); the names so bound."""
        found: set[str] = set()
        for op in self.block.ops:
            named = op.attributes.get(UNBACKED_RESULT)  # ``.item()``: its result is it
            if isinstance(named, StringAttr) and named.data in names \
                    and named.data not in found:
                found.add(named.data)
                self.late.setdefault(op, []).append((named.data, op.results[0], None))
            for r in op.results:
                t = r.type
                if not (isinstance(t, TensorType) and t.symbolic):
                    continue
                for i, d in enumerate(t.dims_text):
                    if isinstance(d, str) and d in names and d not in found:
                        found.add(d)
                        self.late.setdefault(op, []).append((d, r, i))
        return found

    def _take(self, arg: SSAValue) -> None:
        """``lazy``: reads argument ``arg`` from the list (`PyFunction.lazy`) once, before
        its first use."""
        if arg not in self.taken:
            self.taken.add(arg)
            assert isinstance(arg, BlockArgument)
            self.lines.append(f"{INDENT}{self.exprs[arg]} = args[{arg.index}]")

    def _scan_top(self, op: Operation, reserved: set[str]) -> None:
        """Collects what a top-level op needs: imports and names values must not take."""
        if isinstance(op, CallOp):
            path = op.callee.data
            if path.startswith("thunder_ir.") and not path.startswith(_IN_NAMESPACE):
                raise ValueError(
                    f"python printer: the callee {path!r} is a thunder_ir function outside "
                    f"the generated-code namespace; register it there "
                    f"({RUNTIME_NAMESPACE}.register) and name it by its path there")
            if not path.startswith(_IN_NAMESPACE):
                self.modules.add(callee_module(path))
                reserved.add(path.split(".", 1)[0])
            else:  # what registers it (and what its arguments name), where not loaded yet
                self.modules.update(imports_for(path[len(_IN_NAMESPACE):],
                                                from_attr(op.args)))
        elif isinstance(op, RegionOp):
            kernel = op.kernel.data
            if not kernel.isidentifier() or keyword.iskeyword(kernel):
                raise ValueError(f"fusion.region kernel name {kernel!r} is not a Python identifier")
            reserved.add(kernel)
        elif isinstance(op, ThunderOp) and not isinstance(op, ConstantOp):
            ns = op.name.split(".", 1)[0]
            self.namespaces.add(ns)
            self.modules.update(imports_for(ns))  # an executor's ops: its module
            reserved.add(ns)

    # ---- values

    def define(self, value: SSAValue) -> str:
        name = self.namer.name(value)
        self.exprs[value] = name
        return name

    def expr(self, value: SSAValue) -> str:
        try:
            return self.exprs[value]
        except KeyError:
            raise ValueError(
                f"python printer: value of type {pretty_type(value.type)} is "
                "used before it is defined (or captured by a region)"
            ) from None

    def typed(self, value: SSAValue) -> str:
        return f'{self.exprs[value]}: "{pretty_type(value.type)}"'

    def type_comment(self, value: SSAValue) -> str:
        return f"# {self.typed(value)}"

    # ---- statements

    def call_expr(self, op: Operation) -> str:
        """The right-hand side of an op's statement."""
        refs: list[str] = []
        if isinstance(op, CallOp):
            refs = [self.expr(v) for v in op.operands]
            parts = [py_literal(a, refs) for a in from_attr(op.args)]
            if op.kwargs is not None:
                parts += [
                    f"{k}={py_literal(from_attr(v), refs)}" for k, v in op.kwargs.data.items()
                ]
            return f"{callee_expr(op.callee.data)}({', '.join(parts)})"
        if isinstance(op, RegionOp):
            return f"{op.kernel.data}({', '.join(self.expr(v) for v in op.inputs)})"
        if isinstance(op, ThunderOp):
            params = [(k, v) for k, v in op.params().items() if v is not None]
            if any(isinstance(v, OperandRef | tuple) for _, v in params):
                refs = [self.expr(v) for v in _ref_targets(op)]
            parts = []
            for g in op.grouped_operands():
                if g is None:
                    parts.append("None")
                elif isinstance(g, list):
                    parts.append(f"[{', '.join(self.expr(v) for v in g)}]")
                else:
                    parts.append(self.expr(g))
            parts.extend(f"{k}={py_literal(v, refs)}" for k, v in params)
            return f"{op.name}({', '.join(parts)})"
        raise NotImplementedError(f"the python printer cannot print {op.name}")

    def statement(self, op: Operation, names: Sequence[str]) -> str:
        """``lhs = rhs`` for an op whose results are named ``names``."""
        rhs = self.call_expr(op)
        if isinstance(op, RegionOp):  # a kernel returns its one output, or a tuple
            if not names:
                return rhs
            return f"{names[0]} = {rhs}" if len(names) == 1 else f"({', '.join(names)}) = {rhs}"
        if isinstance(op, CallOp) and (layout := op.layout()) is not None:
            it = iter(names)  # a returned sequence with None entries: `_` takes them
            names = [next(it) if k else "_" for k in layout]
        if not names:
            return rhs
        if len(names) == 1 and not _is_variadic_results(op):
            return f"{names[0]} = {rhs}"
        return f"({names[0]},) = {rhs}" if len(names) == 1 else f"({', '.join(names)}) = {rhs}"

    def location(self, op: Operation) -> str:
        """The op's source location (``file:line``) if locations are printed."""
        if not self.locations:
            return ""
        return location_text(op)

    def emit_op(self, op: Operation, indent: str, commented: bool) -> None:
        """Appends the lines of one op: a statement, or a comment inside a fusion body."""
        if isinstance(op, ConstantOp):
            self.exprs[op.results[0]] = py_literal(op.params()["value"])
            return
        if isinstance(op, SavedAsOp):  # a note for autodiff: computes nothing
            made, saved, now = (self.expr(v) for v in op.operands)
            self.lines.append(f"{indent}# {op.name}: the backward of the op making {made} "
                              f"reads {now} for {saved}")
            return
        if isinstance(op, GuardOp):  # a read of the call or the thread: inlined
            operands = [self.expr(v) for v in op.operands]
            python = op.python(operands) if self.layouts else op.python_without_layout(operands)
            self.exprs.update(zip(op.results, python, strict=True))
            return
        names = [self.exprs[r] if r in self.preset else self.define(r) for r in op.results]
        prefix = f"{indent}# " if commented else indent
        stmt = self.statement(op, names)
        loc = self.location(op)
        lines = self.lines
        if len(names) == 1 and not isinstance(op, RegionOp):
            lines.append(
                f"{prefix}{stmt}  {self.type_comment(op.results[0])}{f'  ({loc})' if loc else ''}"
            )
        else:
            lines.append(f"{prefix}{stmt}{f'  # {loc}' if loc else ''}")
        if isinstance(op, RegionOp):
            # The body's comments show every type, as the reference prints fusions.
            self.emit_body(op, indent + INDENT)
        elif isinstance(op, FunctionOp):
            self.emit_backward(op, indent + INDENT)
        elif len(names) > 1:
            # One type comment per result beneath the statement; inside a fusion body,
            # where the statement is itself a comment, they align under it.
            sub = f"{indent}#   " if commented else f"{indent}{INDENT}# "
            lines.extend(f"{sub}{self.typed(r)}" for r in op.results)

    def emit_body(self, region_op: RegionOp, indent: str) -> None:
        """The ops of a fusion region, as comments beneath its call.

        Block arguments print as the region's operands and yielded values as its results.
        """
        body = region_op.body.block
        for arg, v in zip(body.args, region_op.inputs, strict=True):
            self.exprs[arg] = self.expr(v)
        term = body.last_op
        if isinstance(term, YieldOp):
            for v, r in zip(term.values, region_op.results, strict=True):
                if v not in self.exprs:
                    self.exprs[v] = self.exprs[r]
                    self.preset.add(v)
        for op in body.ops:
            if not isinstance(op, YieldOp):
                self.emit_op(op, indent, True)

    def emit_backward(self, fn_op: FunctionOp, indent: str) -> None:
        """A custom ``Function``'s traced backward, as comments beneath its op: the
        cotangents it takes, its ops, and the gradients it returns."""
        body = fn_op.backward.block
        cts = [self.define(a) for a in body.args]
        self.lines.append(f"{indent}# backward({', '.join(cts)}):")
        for op in body.ops:
            if isinstance(op, AutogradYieldOp):
                grads = ", ".join(self.expr(v) for v in op.values)
                self.lines.append(f"{indent}#   return ({grads})")
            else:
                self.emit_op(op, indent + INDENT, True)

    # ---- the whole function

    def print(self, header: str | None, free_after_last_use: bool) -> str:
        return render(self.function(header, free_after_last_use))

    def function(self, header: str | None, free_after_last_use: bool) -> PyFunction:
        """The function as a `PyFunction`: a program function (imports, ``@tir.no_grad``,
        type comments), or a key function (its leaves unpacked from one sequence)."""
        lines = self.lines
        if self.key:  # named by position: the key function's other names are its globals
            args = [f"a{i}" for i in range(len(self.block.args))]
            self.exprs.update(zip(self.block.args, args, strict=True))
        else:
            args = [self.define(a) for a in self.block.args]
            for a in self.block.args:
                lines.append(f"{INDENT}{self.type_comment(a)}")
            self.bind_symbols()
        ops = list(self.block.ops)
        ret = ops[-1] if ops and isinstance(ops[-1], func.ReturnOp | YieldOp) else None
        if ret is None:
            raise ValueError("python printer: the function does not end in func.return")
        frees = _last_uses(self.block, ops, ret) if free_after_last_use else None
        args_of = set(self.block.args) if self.lazy else set()
        for i, op in enumerate(ops[:-1]):
            if isinstance(op, func.ReturnOp | YieldOp):
                raise ValueError("python printer: func.return before the end of the function")
            if args_of:
                for o in _walk(op):
                    for v in o.operands:
                        if v in args_of:
                            self._take(v)
            self.emit_op(op, INDENT, False)
            for name, r, d in self.late.get(op, ()):
                at = "" if d is None else f".shape[{d}]"
                lines.append(f"{INDENT}{name} = {self.exprs[r]}{at}")
            if frees is not None and frees[i]:
                dead = [self.exprs[v] for v in frees[i]]
                lines.append(f"{INDENT}del {', '.join(dead)}")
        for v in ret.operands:
            if v in args_of:
                self._take(v)
        outs = [self.expr(v) for v in ret.operands]
        ret_expr = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
        if self.key:
            return PyFunction(self.fn_name, args, ret_expr, lines, packed="args")

        head: list[str] = []
        if header:
            head.extend(header.rstrip("\n").splitlines())
        head.append("import torch")
        head.extend(f"import {m}" for m in sorted(self.modules) if m != "torch")
        head.append(IMPORT)
        if self.namespaces:
            head.append(f"from {RUNTIME_NAMESPACE} import {', '.join(sorted(self.namespaces))}")
        head.append("")
        head.append(f"@{ALIAS}.no_grad")
        if self.lazy:
            return PyFunction(self.fn_name, (), ret_expr, lines, packed="args", head=head)
        if self.packed:
            return PyFunction(self.fn_name, args, ret_expr, lines, packed="args", head=head,
                              clear=True)
        return PyFunction(self.fn_name, args, ret_expr, lines, head=head)


def _last_uses(block: Block, ops: Sequence[Operation], ret: Operation) -> list[list[SSAValue]]:
    """For each top-level op, the values to free after it, in the op's operand order.

    A value is freed after the last top-level op that uses it (uses inside a region count
    for the region's op); a result that is never used is freed right after its op.
    Outputs and number constants are never freed; neither are unused arguments.
    """
    # (keyed by ``id``: the values live in the IR meanwhile, and xDSL hashes a value by a
    # Python call)
    body = ops[:-1]
    last: dict[int, int] = {}
    for i, top in enumerate(body):
        for op in _walk(top):
            for v in op.operands:
                last[id(v)] = i
    keep = {id(v) for v in ret.operands}
    frees: list[list[SSAValue]] = [[] for _ in ops]
    for i, top in enumerate(body):
        here = frees[i]
        for op in _walk(top):
            for v in op.operands:
                if (
                    last[id(v)] == i
                    and id(v) not in keep
                    and _defined_in(v, block)
                    and not isinstance(v.owner, ConstantOp)
                ):
                    here.append(v)
                    keep.add(id(v))  # once
        if not isinstance(top, ConstantOp):
            here.extend(r for r in top.results if id(r) not in last and id(r) not in keep)
    return frees


def _defined_in(value: SSAValue, block: Block) -> bool:
    owner = value.owner
    return owner is block or (isinstance(owner, Operation) and owner.parent is block)


def _walk(op: Operation) -> Iterable[Operation]:
    if not op.regions:
        return (op,)
    return op.walk()


def function_name(fn: func.FuncOp | RegionOp) -> str:
    """The name of a printed function: a function's symbol, a fusion region's kernel."""
    return fn.sym_name.data if isinstance(fn, func.FuncOp) else fn.kernel.data


def print_python(
    module: ModuleOp | func.FuncOp | RegionOp,
    header: str | None = None,
    *,
    free_after_last_use: bool = False,
    locations: bool = False,
    layouts: bool = True,
    packed: bool = False,
    lazy: bool = False,
) -> str:
    """Prints a program (a module holding one ``func.func``; or that function, or a
    ``fusion.region`` whose body reads only its own arguments, printed as a function of
    them returning what it yields) as Python source.

    Args:
        module: the program; its first ``func.func`` is printed.
        header: comment lines printed first (``# Constructed by ...``), if any.
        free_after_last_use: insert ``del`` statements after each value's last use, so the
            source frees intermediates as it runs (the final, executed trace does).
        locations: append each op's ``loc`` attribute (its user source line) to its line.
        layouts: guard ops read the tensors' layouts; False: ``None`` in their places
            (the layout-free key, `thunder_ir.runtime.prologue.Prologue.layout_free`).
        packed: the function takes its arguments as one list, which it empties once it
            has unpacked it (`PyFunction.clear`): with ``free_after_last_use``, each
            argument is freed after its last use, whatever the caller held.
        lazy: packed, but each argument is read from the list (``x = args[3]``) right
            before its first use, rather than all at once: the list the caller passes
            may unpack an item when it is read (`thunder_ir.runtime.autograd`:
            residuals packed by saved-tensor hooks, unpacked as the backward reaches
            them, as eager's nodes unpack theirs).

    Returns:
        The source text, ending in a newline. Executing it defines the function, given
        the fusion kernels it calls as globals (a key function: the prologue's globals).
    """
    fn = module if isinstance(module, func.FuncOp | RegionOp) else main_function(module)
    with detached():  # symbolic sizes print as the text the IR holds
        return _PythonPrinter(fn, locations=locations, layouts=layouts, packed=packed,
                              lazy=lazy).print(header, free_after_last_use)


__all__ = ["PyFunction", "callee_expr", "callee_module", "function_name", "is_key_function",
           "load_python", "print_python", "py_literal", "render", "sanitize", "tuple_expr"]
