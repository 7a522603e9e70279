"""Symbolic sizes: the symbols of one compilation, and how they live in the IR.

A dimension of an input that the user marked dynamic (`thunder_ir.mark_dynamic`, or
``cache="symbolic values"``, or a length that changed on an earlier miss) is a *symbol*
(``s0``) while the program is traced and compiled. On the Python side a symbolic size is
torch's own ``SymInt`` of a ``ShapeEnv`` (the one torch.compile uses): user code that
computes with ``x.shape[1]`` gets ``SymInt``s, shape rules and decompositions compute with
them as with ints, and every decision they make on a size (``if n > 1``, ``n % 8 == 0``)
is recorded by the ``ShapeEnv`` as a guard. In the IR a size is an ``int`` or an
expression attribute (`SymExprAttr`: ``#prims.sym<"s0 + 1">``), as Python text over the
symbols: that text is what the generated code evaluates, each function having bound the
symbols it uses from its arguments' shapes (``s0 = x.shape[1]``).

`SymbolTable` is one compilation's ``ShapeEnv`` and symbol names; `active` makes it the
current one (tracing, the passes and code generation run inside it) so that a type's
``sizes`` and an op's static arguments come back as ``SymInt``s of that compilation. When
the compile ends, `SymbolTable.guards` lists the checks (as Python text over the symbols)
under which the program holds: the runtime checks them on each call before reusing it
(`thunder_ir.runtime.cache`).

Outside a compilation (printing a recorded trace), a symbolic size is its text
(`SymText`).
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import AttrConstraint, irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

if TYPE_CHECKING:
    import sympy
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

UNBACKED_RESULT = "torch.unbacked"
"""The attribute of an op whose number result is an unbacked symbol (``.item()``:
``{torch.unbacked = "u0"}``): the generated code binds the symbol to that result."""

SYMBOLIC_NUMBERS = (torch.SymInt, torch.SymFloat)
"""The types of a symbolic number user code computes with (``x.shape[1] * 2``)."""

SYMBOL_NAME = re.compile(r"\b[su]\d+\b")
"""A symbol's name in expression text: ``s0``, ``s12`` (a size read from an input), or
``u0`` (an *unbacked* size: one a data-dependent op's result has, ``nonzero``'s count,
which the generated code reads from that result)."""

UNBACKED_NAME = re.compile(r"\bu\d+\b")
"""An unbacked symbol's name in expression text (``u0``)."""


class SymbolicError(NotImplementedError):
    """A step of the compiler cannot handle a symbolic size: the caller compiles for the
    call's concrete sizes instead."""


@irdl_attr_definition
class SymExprAttr(ParametrizedAttribute):
    """A symbolic size or number, as Python text over symbols: ``#prims.sym<"2*s0">``."""

    name = "prims.sym"

    expr: StringAttr

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.expr.data}">')

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Any]:
        with parser.in_angle_brackets():
            return [StringAttr(parser.parse_str_literal())]

    @property
    def text(self) -> str:
        return self.expr.data


@dataclass(frozen=True)
class IntArrayConstraint(AttrConstraint):
    """A static argument that is a list of sizes or dims: ``array<i64: 2, 3>``, or, where a
    size is symbolic, ``[2 : i64, #prims.sym<"s0">]``."""

    def verify(self, attr: Attribute, constraint_context: Any) -> None:
        if isinstance(attr, DenseArrayBase):
            return
        if isinstance(attr, ArrayAttr) and all(
                isinstance(a, IntegerAttr | SymExprAttr) for a in attr.data):
            return
        raise VerifyException(f"expected an int array (array<i64: ...>, or [...] holding "
                              f"symbolic sizes #prims.sym), got {attr}")

    def get_bases(self) -> set[type[Attribute]] | None:
        return {DenseArrayBase, ArrayAttr}

    def mapping_type_vars(self, type_var_mapping: Any) -> IntArrayConstraint:
        return self


INT_ARRAY = IntArrayConstraint()
"""The constraint of a static argument holding sizes or dims (``prop_def(INT_ARRAY)``)."""


class SymText(str):
    """A symbolic size read outside a compilation: its Python text (prints as it is)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


# torch's symbolic shapes (and sympy, 0.2 s to import) load with the first symbolic
# compilation: a program of static sizes never needs them.


@cache
def _env_class() -> type[ShapeEnv]:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    class _Env(ShapeEnv):
        """torch's ``ShapeEnv`` naming its symbols in order of creation (``s0``, ``s1``...)
        rather than by a hash of where they came from, so that traces read the same on
        every run."""

        def _generate_unique_id(self, source_name: str) -> int:
            i = len(self.unique_ids)
            self.unique_ids.add(i)
            return i

        def evaluate_expr(self, orig_expr: Any, *args: Any, **kwargs: Any) -> Any:
            """torch's, but a decision on unbacked symbols (``if rows.shape[0] > 2``,
            ``len(x[mask])``: control flow on values) goes to the ``data_decision`` hook,
            which may speculate it (its value this call, checked on every call); else
            torch's ``GuardOnDataDependentSymNode``. The hook is the table's
            (`SymbolTable.on_data_decision`), set by whoever traces with it."""
            from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

            try:
                return super().evaluate_expr(orig_expr, *args, **kwargs)
            except GuardOnDataDependentSymNode:
                hook = getattr(self, "data_decision", None)
                decided = hook(self, orig_expr) if hook is not None else None
                if decided is None:
                    raise
                return decided

    return _Env


@cache
def _printer() -> Any:
    from torch.utils._sympy.printers import PythonPrinter

    return PythonPrinter()


@dataclass(frozen=True)
class SymbolSource:
    """Where a symbol's value comes from at call time: dimension ``dim`` of flat argument
    leaf ``leaf``, or of the tensor inside that argument object reached by ``steps``
    (`thunder_ir.runtime.pystate` paths: ``(("attr", "layers"), ("item", 0))``); ``dim``
    None: the leaf is an ``int``."""

    leaf: int
    dim: int | None
    steps: tuple[Any, ...] = ()


@dataclass
class SymbolTable:
    """The symbols of one compilation (see the module doc)."""

    env: ShapeEnv = field(default_factory=lambda: _env_class()(duck_shape=False))
    sources: dict[str, SymbolSource] = field(default_factory=dict)
    _exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    _symbols: dict[str, sympy.Symbol] = field(default_factory=dict)
    _values: dict[str, Any] = field(default_factory=dict)

    # ---- making symbols

    def size(self, value: int, source: SymbolSource) -> Any:
        """A ``SymInt`` for a dynamic size ``value`` read from ``source``; sizes 0 and 1
        stay ints (as torch.compile specializes them: a program for length 1 is another
        program)."""
        if value in (0, 1):
            return value
        return self._symint(value, source)

    def integer(self, value: int, source: SymbolSource) -> Any:
        """A ``SymInt`` for a dynamic ``int`` argument (any value but 0 and 1)."""
        if value in (0, 1) or value < 0:
            return value
        return self._symint(value, source)

    def _symint(self, value: int, source: SymbolSource) -> Any:
        from torch._dynamo.source import ConstantSource
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        src = ConstantSource(f"leaf{source.leaf}_{source.steps}_{source.dim}")
        sym = self.env.create_symbol(value, src, dynamic_dim=DimDynamic.DYNAMIC)
        name = str(sym)
        self.sources[name] = source
        self._symbols[name] = sym
        self._exprs[name] = sym
        return self.env.create_symintnode(sym, hint=value, source=src)

    # ---- stand-ins

    @property
    def fake_mode(self) -> Any:
        """torch's ``FakeTensorMode`` over this table's ``ShapeEnv``, without its dispatch
        cache: over symbolic sizes a cache entry costs more than its hits save (building
        it synthesizes the output again from the entry, a second round of symbolic stride
        arithmetic per op: an opaque ``F.normalize`` or ``group_norm`` run took twice as
        long with it), and what repeats in a compilation is kept by its own memos (types,
        layouts and opaque meta runs, by expression)."""
        mode = self.__dict__.get("_fake_mode")
        if mode is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = self.__dict__["_fake_mode"] = FakeTensorMode(
                shape_env=self.env, allow_non_fake_inputs=True)
            mode.cache_enabled = False
        return mode

    def meta(self, sizes: Any, dtype: torch.dtype, strides: Any = None) -> torch.Tensor:
        """A stand-in tensor of these (symbolic) sizes for a shape rule's run: a fake
        tensor on the meta device, whose results' sizes are ``SymInt``s of this table."""
        with self.fake_mode:
            if strides is not None:
                return torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
            return torch.empty(sizes, dtype=dtype, device="meta")

    # ---- text <-> values

    def text(self, x: Any) -> str | int | float:
        """The Python text of a symbolic value (a constant comes back as a number)."""
        if type(x) is SymText:
            return str(x)
        expr = self.env.simplify(x.node.expr)
        if expr.is_number:
            return int(expr) if isinstance(x, torch.SymInt) else float(expr)
        text = _printer().doprint(expr)
        if isinstance(x, torch.SymFloat):
            import sympy

            text = f"float({text})" if not isinstance(expr, sympy.Float) else text
            self._exprs.setdefault(text, expr)
            return text
        self._exprs.setdefault(text, expr)
        return text

    def value(self, text: str) -> Any:
        """The ``SymInt`` (or ``SymFloat``: text ``float(...)``) for expression text made
        by `text`."""
        v = self._values.get(text)
        if v is not None:
            return v
        expr = self._exprs.get(text)
        if expr is None:
            raise SymbolicError(f"unknown symbolic expression {text!r} (not made by this "
                                "compilation)")
        known = self._known()
        at = expr.xreplace(known)
        if not at.is_number:  # over unbacked symbols (``u0``): no value while tracing
            v = (self.env.create_symfloatnode(expr, hint=None) if text.startswith("float(")
                 else self.env.create_symintnode(expr, hint=None))
        elif text.startswith("float("):
            v = self.env.create_symfloatnode(expr, hint=float(at))
        else:
            v = self.env.create_symintnode(expr, hint=int(at))
        self._values[text] = v
        return v

    def _known(self) -> dict[Any, Any]:
        """The backed symbols' values in the call being traced."""
        known = getattr(self.env, "backed_var_to_val", None)
        return self.env.var_to_val if known is None else known

    def hints(self) -> dict[str, int]:
        """Each symbol's value in the call being traced, by name."""
        known = self._known()
        return {name: int(known[sym]) for name, sym in self._symbols.items() if sym in known}

    # ---- guards

    def specialized(self) -> dict[str, int]:
        """Symbols that a decision fixed to one value (``if n == 7``): name -> value."""
        out: dict[str, int] = {}
        for sym, repl in self.env.replacements.items():
            name = str(sym)
            if name in self.sources and repl.is_number:
                out[name] = int(repl)
        return out

    def guards(self) -> list[str]:
        """The checks, as Python text over the symbols, under which the program holds: each
        symbol's range (a dynamic size is at least 2), the replacements decisions made
        (``s1 == s0``), and every guard the ``ShapeEnv`` recorded."""
        import sympy

        out: list[str] = []
        seen: set[str] = set()

        def add(text: str) -> None:
            if text not in seen:
                seen.add(text)
                out.append(text)

        for name, sym in self._symbols.items():
            vr = self.env.var_to_range.get(sym)
            lower = 2
            if vr is not None and isinstance(vr.lower, sympy.Integer) and int(vr.lower) > lower:
                lower = int(vr.lower)
            add(f"{name} >= {lower}")
            if vr is not None and isinstance(vr.upper, sympy.Integer):
                add(f"{name} <= {int(vr.upper)}")
        for sym, repl in self.env.replacements.items():
            if str(sym) in self.sources:
                add(f"{sym} == {_printer().doprint(repl)}")
        for g in self.env.guards:
            text = _printer().doprint(g.expr)
            if text != "True":
                add(text)
        return out

    def on_data_decision(self, hook: Callable[[Any, Any], Any] | None) -> None:
        """Sets what a decision on unbacked symbols asks (tracing's speculation: given the
        ``ShapeEnv`` and the sympy expression, the decided value, or None to refuse, and
        torch raises ``GuardOnDataDependentSymNode``); None: nothing."""
        self.env.data_decision = hook  # type: ignore[attr-defined]

    # ---- activation

    @contextlib.contextmanager
    def active(self) -> Iterator[SymbolTable]:
        """Makes this the current compilation's table: the table of a compilation's
        `thunder_ir.passes.context.CompileContext` (``symbols``), opened by
        `thunder_ir.passes.context.compiling` for as long as that compilation runs in this
        thread (type rules read sizes through `current`, not from an argument: an op's
        type is computed where it is built)."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


_ACTIVE: contextvars.ContextVar[SymbolTable | None] = contextvars.ContextVar(
    "thunder_ir_symbols", default=None)


@contextlib.contextmanager
def detached() -> Iterator[None]:
    """No compilation's table is current: symbolic sizes read as their text (`SymText`),
    as printing wants them (the text the generated code evaluates)."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


_NOTHING = contextlib.nullcontext()


def stand_in_mode() -> Any:
    """Where shape rules run their stand-ins: the current compilation's fake mode (torch's
    composite kernels trace ``SymInt`` sizes only under it), else nothing."""
    table = _ACTIVE.get()
    return _NOTHING if table is None else table.fake_mode


def current() -> SymbolTable | None:
    """The table of the compilation running in this context, if it has symbols."""
    return _ACTIVE.get()


def sym_value(text: str) -> Any:
    """The value of expression text: a ``SymInt`` of the current compilation, or the
    `SymText` outside one."""
    table = _ACTIVE.get()
    if table is None:
        return SymText(text)
    return table.value(text)


def sym_text(x: Any) -> str | int | float:
    """The text of a symbolic value in the current compilation (a number if it is one).

    Raises:
        SymbolicError: a symbolic value met outside a symbolic compilation.
    """
    table = _ACTIVE.get()
    if table is None:
        if type(x) is SymText:
            return str(x)
        raise SymbolicError(f"symbolic value {x} outside a symbolic compilation")
    return table.text(x)


def hint(x: Any) -> int:
    """A size's value in the call the program was traced for (its *hint*), without
    recording a guard: what cost models (remat's bytes) weigh sizes by."""
    if isinstance(x, torch.SymInt):
        return int(x.node.hint) if x.node.hint is not None else 8192
    if type(x) is SymText:
        return 8192
    return int(x)


def unbacked(*values: Any) -> bool:
    """Whether a value is a size over unbacked symbols (``u0``: a data-dependent op's
    result's size), which no decision may be made on while tracing: it has no value."""
    return any(isinstance(v, torch.SymInt) and v.node.hint is None for v in values)


def may_differ(x: Any, n: Any) -> bool:
    """``x != n`` for a size ``x``, where an unbacked size (no value while tracing) counts
    as possibly different without a guard: for rewrites that are right either way (sum a
    cotangent over a dim that may be broadcast, expand to a size that may be 1)."""
    if (type(x) is int and type(n) is int) or not unbacked(x, n):  # (ints: the fast way)
        return bool(x != n)
    from torch.fx.experimental.symbolic_shapes import guard_or_true

    return bool(guard_or_true(x != n))


def must_equal(x: Any, n: Any) -> bool:
    """``x == n`` for a size ``x``, where an unbacked size counts as equal only where that
    is known (no guard): the other side of `may_differ`."""
    if (type(x) is int and type(n) is int) or not unbacked(x, n):
        return bool(x == n)
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    return bool(guard_or_false(x == n))


def proved_equal(a: Any, b: Any) -> bool:
    """``a == b`` for sizes, proved from their expressions alone: no guard recorded and no
    ``ShapeEnv`` query (which costs 20-100 ms over a windowed model's floor divisions);
    False where not proved. What a closed-form shape rule checks before it answers."""
    if type(a) is int and type(b) is int:
        return a == b
    import sympy

    ea = a.node.expr if isinstance(a, torch.SymInt) else sympy.Integer(a)
    eb = b.node.expr if isinstance(b, torch.SymInt) else sympy.Integer(b)
    if ea == eb:  # (the same expression: most sizes a rule compares)
        return True
    if ea.is_number and eb.is_number:
        return bool(ea == eb)
    return bool(sympy.expand(ea - eb) == 0)


def proved_order(a: Any, b: Any) -> int | None:
    """The sign of ``a - b`` for sizes (-1, 0 or 1), proved from their expressions and the
    symbols' value ranges alone: no guard recorded, no ``ShapeEnv`` decision (the range
    bounds are kept per compilation by expression). None where that does not tell (the
    sign may differ between values of the symbols) or a side is unbacked and the
    difference is not a number. What a closed-form rule uses where torch's kernel would
    compare symbolic sizes (a view's strides)."""
    if type(a) is int and type(b) is int:
        return (a > b) - (a < b)
    import sympy

    sa, sb = isinstance(a, torch.SymInt), isinstance(b, torch.SymInt)
    ea = a.node.expr if sa else sympy.Integer(a)
    eb = b.node.expr if sb else sympy.Integer(b)
    if ea == eb:
        return 0
    diff = sympy.expand(ea - eb)
    if diff.is_number:
        return int(bool(diff > 0)) - int(bool(diff < 0))  # (sympy answers BooleanAtoms)
    node = a.node if sa else b.node
    if unbacked(a, b):
        return None
    table = _ACTIVE.get()
    memo = table.__dict__.setdefault("_bounds", {}) if table is not None else {}
    bounds = memo.get(diff)
    if bounds is None:
        r = node.shape_env.bound_sympy(diff)
        bounds = memo[diff] = (r.lower, r.upper)
    low, high = bounds
    if low > 0:
        return 1
    if high < 0:
        return -1
    if low == 0 and high == 0:
        return 0
    return None


def known_positive(s: Any) -> bool:
    """``s >= 1`` for a size, known from its expression's value range alone (a dynamic
    size is at least 2; ``s0 // 4`` may be 0): no guard, no decision; False for an
    unbacked size or where the range does not tell. Kept per compilation by expression."""
    if type(s) is int:
        return s > 0
    return least_value(s) >= 1


def least_value(s: Any) -> Any:
    """A backed ``SymInt``'s least value by its expression's range (no guard; kept per
    compilation by expression); ``-inf`` where unbacked or not a ``SymInt``."""
    if not isinstance(s, torch.SymInt) or s.node.hint is None:
        return -float("inf")
    expr = s.node.expr
    table = _ACTIVE.get()
    memo = table.__dict__.setdefault("_lower", {}) if table is not None else {}
    low = memo.get(expr)
    if low is None:
        low = memo[expr] = s.node.shape_env.bound_sympy(expr).lower
    return low


def nonempty(sizes: Sequence[Any]) -> bool:
    """Every size known to be at least 1 (`known_positive`): the plain case the type rules
    answer, where ``0 in sizes`` would decide a symbolic size."""
    return all(known_positive(s) for s in sizes)


def proved_same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """``tuple(a) == tuple(b)`` for sizes, proved from their expressions alone
    (`proved_equal` for each): no guard; False where not proved."""
    if len(a) != len(b):
        return False
    return all(x is y or proved_equal(x, y) for x, y in zip(a, b))


def proved_broadcast(shapes: Sequence[Sequence[Any]]) -> tuple[Any, ...] | None:
    """The broadcast of shapes with symbolic sizes, where the expressions alone prove it:
    at each dim, the sizes other than a literal 1 are all proved equal (`proved_equal`),
    and that size is the result's (right whether or not it is 1 at run time). None where
    that is not proved (a symbol against another size: the meta kernel decides, with a
    guard)."""
    out: list[Any] = [1] * max((len(s) for s in shapes), default=0)
    for s in shapes:
        for i, d in enumerate(s, len(out) - len(s)):
            if type(d) is int and d == 1:
                continue
            o = out[i]
            if type(o) is int and o == 1:
                out[i] = d
            elif not (o is d or proved_equal(o, d)):
                return None
    return tuple(out)


def hinted(value: Any) -> Any:
    """``value`` (a static argument: numbers, tuples, lists, slices, dicts) with each
    symbolic number replaced by its `hint`, recording no guard: the parameters of a probe
    run on `hints` sizes (a slice bound ``ceil(s0/2)`` applied to a concrete stand-in
    would otherwise fix ``s0``)."""
    if isinstance(value, torch.SymInt | SymText):
        return hint(value)
    if isinstance(value, torch.SymFloat):
        return float(value.node.hint) if value.node.hint is not None else 8192.0
    if isinstance(value, torch.SymBool):
        return bool(value.node.hint) if value.node.hint is not None else True
    if isinstance(value, tuple | list):
        items = [hinted(v) for v in value]
        if hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items)
        return type(value)(items)
    if isinstance(value, slice):
        return slice(hinted(value.start), hinted(value.stop), hinted(value.step))
    if isinstance(value, dict):
        return {k: hinted(v) for k, v in value.items()}
    return value


def slice_indices(s: slice, n: Any) -> tuple[Any, Any, Any]:
    """``s.indices(n)`` where ``n`` or a bound may be a ``SymInt`` (``slice.indices`` makes
    ints of them, fixing the symbols to their traced values): the same normalization,
    recording guards for the comparisons it makes instead."""
    if type(n) is int and all(type(b) is int or b is None for b in (s.start, s.stop, s.step)):
        return s.indices(n)
    step = 1 if s.step is None else s.step
    if type(step) is not int or step <= 0:
        raise SymbolicError(f"slice {s} of a symbolic size: only positive int steps")

    def bound(b: Any, default: Any) -> Any:
        if b is None:
            return default
        if unbacked(b):  # (``.item()``: its sign known, its size not: min/max, no guard)
            return _unbacked_bound(b, n)
        if b < 0:
            if type(b) is int and type(n) is not int:
                # ``x[-w:]`` of a symbolic length: ``max(n - w, 0)``, no decision (a
                # window that fills and one that is full: one program)
                return torch.sym_max(b + n, 0)
            b = b + n
            return 0 if b < 0 else b
        return n if b > n else b

    return bound(s.start, 0), bound(s.stop, n), step


def _unbacked_bound(b: Any, n: Any) -> Any:
    """A slice bound over unbacked symbols, normalized as `slice_indices` normalizes one:
    the clamps are ``min``/``max`` expressions rather than decisions, and where its sign
    is not known (``n.item() - 3``) a conditional expression of both
    (``max(0, 3 + u0) if u0 < 3 else min(6, (-3) + u0)``)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if statically_known_true(b >= 0):
        return torch.sym_min(b, n)
    if statically_known_true(b < 0):
        return torch.sym_max(b + n, 0)
    return torch.sym_ite(b < 0, torch.sym_max(b + n, 0), torch.sym_min(b, n))


def range_len(lo: Any, hi: Any, step: int) -> Any:
    """``len(range(lo, hi, step))`` (step > 0) where a bound may be a ``SymInt``."""
    if type(lo) is int and type(hi) is int:
        return len(range(lo, hi, step))
    n = (hi - lo + step - 1) // step
    if unbacked(n):  # (a bound over unbacked symbols: a max expression, no guard)
        return torch.sym_max(n, 0)
    if type(n) is not int and least_value(n) >= 0:  # (``s0 - 2``: no decision needed)
        return n
    return n if n > 0 else 0


def same_sizes(a: Any, b: Any) -> bool:
    """``tuple(a) == tuple(b)`` for a rewrite that skips a no-op (a reshape to the shape a
    value has): ranks first, then each size, True only where known equal without a guard
    (a symbolic size is not compared with a constant or another symbol; a tuple compare
    would record such a guard, fixing the program to sizes that happen to differ)."""
    a, b = tuple(a), tuple(b)
    if len(a) != len(b):
        return False
    if all(type(x) is int for x in a) and all(type(y) is int for y in b):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return all(statically_known_true(x == y) for x, y in zip(a, b))


def same_types(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Types equal up to what the compilation learned since one was made (a symbol a
    later decision fixed, ``s1 == 64``, against a type made before it): same dtypes and
    devices, and sizes known equal now."""
    if _ACTIVE.get() is None or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if not (hasattr(x, "sizes") and hasattr(y, "sizes")) or x.dtype != y.dtype \
                or x.dev != y.dev or not same_sizes(x.sizes, y.sizes):
            return False
    return True


def check_static_region(region: Any, executor: str) -> None:
    """Raises `SymbolicError` for a fusion region with a symbolic size, for an executor
    whose kernels are compiled for one set of sizes (the program is then compiled for the
    call's sizes instead)."""
    types = [*(v.type for v in region.operands), *(r.type for r in region.results)]
    if any(getattr(t, "symbolic", False) for t in types):
        raise SymbolicError(f"{executor}: kernels are compiled for one set of sizes, and "
                            f"{region.kernel.data} has symbolic ones")


SYMBOL_FREE: frozenset[type] = frozenset((
    IntegerAttr, FloatAttr, StringAttr, DenseArrayBase, NoneAttr, UnitAttr, IntAttr))
"""Attribute classes that hold no symbolic size: `sym_exprs` need not open them (an
integer attribute's parameters are its value and its integer type)."""


def sym_exprs(attrs: Iterable[Attribute]) -> Iterator[SymExprAttr]:
    """Every `SymExprAttr` in ``attrs`` and in the attributes they hold (arrays,
    dictionaries, parameters: a slice's bounds). Most static arguments are integers and
    integer arrays (`SYMBOL_FREE`), which are not opened."""
    stack = list(attrs)
    kinds = _KINDS
    while stack:
        a = stack.pop()
        kind = kinds.get(type(a))
        if kind is None:
            kind = _kind(type(a))
        if kind == _OPAQUE:
            continue
        if kind == _SYMBOL:
            yield a  # type: ignore[misc]
        elif kind == _ARRAY:
            stack.extend(a.data)  # type: ignore[attr-defined]
        elif kind == _DICT:
            stack.extend(a.data.values())  # type: ignore[attr-defined]
        else:
            stack.extend(a.parameters)  # type: ignore[attr-defined]


_OPAQUE, _SYMBOL, _ARRAY, _DICT, _PARAMETERS = range(5)
_KINDS: dict[type, int] = {}


def _kind(cls: type) -> int:
    """How `sym_exprs` reads attributes of class ``cls`` (an ``isinstance`` chain once per
    class: a miss against xDSL's abstract classes costs a Python call each time)."""
    kind = (_OPAQUE if cls in SYMBOL_FREE else _SYMBOL if issubclass(cls, SymExprAttr)
            else _ARRAY if issubclass(cls, ArrayAttr) else _DICT
            if issubclass(cls, DictionaryAttr) else _PARAMETERS
            if issubclass(cls, ParametrizedAttribute) else _OPAQUE)
    _KINDS[cls] = kind
    return kind


def hints(sizes: Any) -> tuple[int, ...]:
    """`hint` of each size: concrete sizes for a probe whose answer does not depend on
    them (which operands a kernel saves, which attention kernel eager picks)."""
    return tuple(hint(d) for d in sizes)


def count_number(value: Any) -> Any:
    """An element count as the number a mean divides by: ``float(n)`` for a static
    ``n``; a symbolic ``n`` (``s1``, ``2*s1``) stays a ``torch.SymInt`` (dividing a
    tensor by the ``int`` gives eager's values too), since ``float(n)`` would make a
    guard ``Eq(s1, 7)`` and the symbolic program would serve that one length."""
    return value if type(value) is torch.SymInt else float(value)


__all__ = ["INT_ARRAY", "SYMBOLIC_NUMBERS", "SYMBOL_FREE", "SYMBOL_NAME", "UNBACKED_NAME",
           "UNBACKED_RESULT",
           "IntArrayConstraint",
           "SymExprAttr", "SymText", "SymbolSource", "SymbolTable", "SymbolicError",
           "check_static_region", "count_number", "current", "detached", "hint", "hinted",
           "hints", "proved_equal",
           "proved_order",
           "range_len",
           "same_sizes", "same_types", "slice_indices", "stand_in_mode",
           "sym_exprs", "sym_text", "sym_value", "may_differ", "must_equal", "unbacked"]
