"""Symbolic numbers through Python's number functions, measured against eager.

A size (``x.shape[i]``) or a module's ``int`` counter (``self.step += 1`` on each call)
that changes between calls is a symbolic number (`thunder_ir.runtime.dynamic`), and user
code computes with it as with an ``int``: ``math.cos(self.step * 0.05)``,
``int(n * 0.75)``, ``n // 4``, ``round(...)``, ``max(...)``. The decisions the trace makes
on it are the symbolic program's shape guard, Python text printed by torch's
``PythonPrinter`` (``math.trunc(0.75*torch.sym_float(s0)) == 6``) and evaluated on each
later call; the symbolic values a program computes with are printed the same way. Every
name that text can say must be bound where it runs
(`thunder_ir.runtime.symbolic_names`), and a guard that still cannot be evaluated must
never leave the callable failing from then on.

Hypothesis draws an expression over ``n`` (``math`` cos, sin, log, exp, sqrt, floor,
ceil, trunc, pow; ``int``, ``float``, ``round``, ``//``, ``%``, ``min``/``max``, ``abs``,
comparisons, conditional expressions), one use of it (a tensor's scale, a slice's length,
a branch) and a sequence of calls over several sizes or counter values, and checks each
call against eager: the result is a real tensor of eager's dtype, shape and values, or
the call raises eager's exception; the callable keeps answering to the end of the
sequence; the counter after each call is eager's. The draws are the same every run
(``derandomize``); ``THUNDER_IR_FUZZ_SCALE=20`` draws 20 times as many.

Then the direct regressions (the two reports of issue 50) and the runtime's policy on a
shape guard that cannot answer, tested on guards made to fail.
"""

from __future__ import annotations

import linecache
import math
import os
import re
import warnings
from collections.abc import Callable
from itertools import count
from typing import Any

import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import thunder_ir
from thunder_ir.api import _last
from thunder_ir.dialects.symbols import SymbolTable
from thunder_ir.runtime.python_printer import load_python
from thunder_ir.runtime.symbolic_names import SYMBOLIC_NAMES

# --------------------------------------------------------------------------- settings

_SCALE = float(os.environ.get("THUNDER_IR_FUZZ_SCALE", "1"))


def _fuzz(max_examples: int) -> settings:
    return settings(deadline=None, derandomize=True, database=None, print_blob=False,
                    max_examples=max(1, round(max_examples * _SCALE)),
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# --------------------------------------------------------------------------- expressions
#
# Each drawn expression is Python source over ``n`` (a symbolic ``int``) of one kind:
# "int", "float" or "bool". Most are bounded (``exp`` of a ``sin``, ``log`` of
# ``abs(...) + 1``); a few are not, and eager's exception is then the expected result.

_SMALL = st.integers(1, 7)
_DIVISOR = st.integers(2, 5)
_FACTOR = st.sampled_from(["0.05", "0.25", "0.5", "0.75", "1.5", "2.0", "0.1"])


_INT_FORMS = [
    "({i} + {i})", "({i} - {i})", "({i} * {s})", "({i} // {v})", "({i} % {v})", "int({f})",
    "round({f})", "math.floor({f})", "math.ceil({f})", "math.trunc({f})", "min({i}, {i})",
    "max({i}, {i})", "abs({i} - {i})", "({i} if {b} else {i})", "({i} ** 2)",
    "(n // {i} if {i} else n)",  # may divide by 0
    "pow({i}, 2)",
]
_FLOAT_FORMS = [
    "({f} + {f})", "({f} * {k})", "math.cos({f})", "math.sin({f})",
    "math.log(abs({f}) + 1.0)", "math.exp(math.sin({f}))", "math.sqrt(abs({f}))",
    "math.pow(abs({f}) + 1.0, 1.5)", "({i} / {v})", "float({i})", "min({f}, {k})",
    "max({f}, {f})",
    "math.log({f} - 1.0)", "math.exp({f})",  # unbounded: may raise or overflow, as eager
]
_BOOL_FORMS = ["({i} > {i})", "({i} <= {s})", "({f} < {k})", "({i} == {s})",
               "({i} % 2 == 0)", "({f} >= {f})"]
"""The grammar: a form's ``{i}``, ``{f}``, ``{b}`` is a fresh int, float or bool
expression one level down; ``{s}``, ``{v}``, ``{k}`` a small int, a divisor, a factor."""


def _expand(draw: st.DrawFn, forms: list[str], depth: int) -> str:
    """One drawn form of ``forms``, each of its holes filled by a fresh draw."""
    kinds = {"i": lambda: _int(depth), "f": lambda: _float(depth), "b": lambda: _bool(depth),
             "s": lambda: _SMALL, "v": lambda: _DIVISOR, "k": lambda: _FACTOR}
    return re.sub(r"\{(\w)\}", lambda m: str(draw(kinds[m.group(1)]())),
                  draw(st.sampled_from(forms)))


@st.composite
def _int(draw: st.DrawFn, depth: int) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return "n" if draw(st.booleans()) else str(draw(_SMALL))
    return _expand(draw, _INT_FORMS, depth - 1)


@st.composite
def _float(draw: st.DrawFn, depth: int) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        leaf = draw(st.integers(0, 2))
        if leaf == 0:
            return f"(n * {draw(_FACTOR)})"
        return "float(n)" if leaf == 1 else draw(_FACTOR)
    return _expand(draw, _FLOAT_FORMS, depth - 1)


@st.composite
def _bool(draw: st.DrawFn, depth: int) -> str:
    return _expand(draw, _BOOL_FORMS, max(depth - 1, 0))


_USES = {
    "scale": "return x * {f}",
    "int scale": "return x * {i}",
    "length": "k = max(1, {i})\n    return x[:, :k] * 2",
    "branch": "return x + 1 if {b} else x - 1",
    "all": "k = max(1, {i})\n    y = (x * {f})[:, :k]\n    return y + (1.0 if {b} else 0.0)",
}


@st.composite
def _body(draw: st.DrawFn) -> str:
    """The body of a function over ``x`` and ``n``: one use of drawn expressions."""
    use = draw(st.sampled_from(sorted(_USES)))
    return _USES[use].format(f=draw(_float(3)), i=draw(_int(3)), b=draw(_bool(2)))


_FILES = count()


def _define(source: str, name: str) -> Any:
    """Executes drawn source as a file of its own (the tracer reads the user's lines)."""
    filename = f"<symbolic numbers fuzz #{next(_FILES)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True),
                                 filename)
    scope: dict[str, Any] = {"math": math, "torch": torch}
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


# --------------------------------------------------------------------------- one call


def _call(fn: Callable[[], Any]) -> tuple[Any, BaseException | None, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(), None, [str(w.message) for w in caught]
        except Exception as e:
            return None, e, [str(w.message) for w in caught]


def _check_call(jitted: Callable[[torch.Tensor], Any], eager: Callable[[torch.Tensor], Any],
                x: torch.Tensor, where: str) -> bool:
    """One call against eager; returns whether eager raised."""
    want, want_error, _ = _call(lambda: eager(x.clone()))
    got, got_error, messages = _call(lambda: jitted(x.clone()))
    for m in messages:  # a name the generated code lacks: the bug this module guards
        assert "NameError" not in m and "is not defined" not in m, (where, m)
    if want_error is not None:
        assert got_error is not None, (where, "eager raised", want_error, "jit returned")
        assert type(got_error) is type(want_error), (where, got_error, want_error)
        return True
    assert got_error is None, (where, f"{type(got_error).__name__}: {got_error}")
    assert type(got) is torch.Tensor, (where, type(got))
    assert got.dtype == want.dtype and got.shape == want.shape, (
        where, got.dtype, got.shape, want.dtype, want.shape)
    torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{where}: {m}")
    return False


def _no_missing_names(failures: list[str]) -> None:
    """No symbolic compile failed for a name its generated code lacks (a guard that
    cannot be evaluated on its own call falls back to a static program: the results stay
    right, so only `symbolic_failures` tells)."""
    for f in failures:
        assert "NameError" not in f and "is not defined" not in f, f


# --------------------------------------------------------------------------- fuzz: sizes


@_fuzz(max_examples=14)
@given(body=_body(), dim=st.integers(0, 1), other=st.integers(2, 4),
       sizes=st.lists(st.integers(2, 12), min_size=4, max_size=5))
def test_fuzz_symbolic_sizes_through_number_functions(body: str, dim: int, other: int,
                                                      sizes: list[int]) -> None:
    """An expression over a size (``n = x.shape[dim]``) that changes from call to call:
    every call equals eager's, and the callable answers every call."""
    source = f"def f(x):\n    n = x.shape[{dim}]\n    {body}\n"
    note(source)
    f = _define(source, "f")
    jf = thunder_ir.jit(f)
    for i, size in enumerate(sizes):
        shape = (size, other) if dim == 0 else (other, size)
        x = torch.randn(*shape, dtype=torch.float64 if i % 2 else torch.float32)
        _check_call(jf, f, x, f"call {i}, shape {shape}")
    _no_missing_names(jf.symbolic_failures)


# --------------------------------------------------------------------------- fuzz: counters


@_fuzz(max_examples=10)
@given(body=_body(), start=st.integers(0, 3), calls=st.integers(4, 6),
       width=st.integers(3, 8))
def test_fuzz_module_counters_through_number_functions(body: str, start: int, calls: int,
                                                       width: int) -> None:
    """An expression over a module's ``int`` counter (``self.step += 1`` on each call):
    every call equals eager's, the counter after it too, and the callable answers every
    call."""
    source = ("class Counter(torch.nn.Module):\n"
              "  def __init__(self, start):\n"
              "    super().__init__()\n"
              "    self.step = start\n"
              "  def forward(self, x):\n"
              "    self.step += 1\n"
              "    n = self.step\n"
              f"    {body}\n")
    note(source)
    counter = _define(source, "Counter")
    jitted_module, eager_module = counter(start), counter(start)
    jm = thunder_ir.jit(jitted_module)
    x = torch.randn(3, width)
    for i in range(calls):
        raised = _check_call(jm, eager_module, x, f"call {i}, step {eager_module.step}")
        if raised:  # (what an error leaves behind is not this test's subject)
            jitted_module.step = eager_module.step
        assert jitted_module.step == eager_module.step, (i, jitted_module.step,
                                                          eager_module.step)
    _no_missing_names(jm._compiled.symbolic_failures)


# --------------------------------------------------------------------------- the reports


class _Cosine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.step += 1
        return x * math.cos(self.step * 0.05)


def test_a_counter_through_cos_keeps_working() -> None:
    """Issue 50: ``x * math.cos(self.step * 0.05)``: the fourth call's shape guard said
    ``torch.sym_float`` with no ``torch`` bound (NameError on that call and every later
    one). Every call equals eager's."""
    jm, m = thunder_ir.jit(_Cosine()), _Cosine()
    for i in range(8):
        x = torch.randn(2, 3)
        got, want = jm(x), m(x)
        assert type(got) is torch.Tensor
        torch.testing.assert_close(got, want, msg=f"call {i}")
    assert jm._compiled.symbolic_failures == []


def test_a_size_through_float_math_keeps_working() -> None:
    """Issue 50: ``int(x.shape[1] * 0.75)`` and ``math.log(x.shape[0] * 1.0)``: the guard
    of the symbolic program says ``math.trunc(0.75*torch.sym_float(s1)) == 6``; from the
    third size on every call raised NameError. Every call equals eager's, shapes too."""
    def g(x: torch.Tensor) -> torch.Tensor:
        k = int(x.shape[1] * 0.75)
        return x[:, :k] * math.log(x.shape[0] * 1.0)

    jg = thunder_ir.jit(g)
    for n in (4, 8, 12, 16, 8, 20):
        x = torch.randn(3, n)
        got, want = jg(x), g(x)
        assert type(got) is torch.Tensor and got.shape == want.shape
        torch.testing.assert_close(got, want)
    assert "torch.sym_float" in thunder_ir.last_prologue_traces(jg)[0]
    assert jg.symbolic_failures == []


# --------------------------------------------------------------------------- the names


def _printed(expr: sympy.Expr) -> str:
    from torch.utils._sympy.printers import PythonPrinter

    return str(PythonPrinter().doprint(expr))


def _torch_sympy_cases() -> list[tuple[str, Any, float]]:
    """(what, a sympy expression over s0 = 7 and s1 = 3, its value): every function of
    torch's sympy vocabulary a guard can hold, the ones ``PythonPrinter`` prints as
    sympy's generic call text included."""
    import torch.utils._sympy.functions as F

    s0, s1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol(
        "s1", integer=True, positive=True)
    x = F.ToFloat(s0)
    cases: list[tuple[str, Any, float]] = [
        ("ToFloat", x, 7.0),
        ("FloorDiv", F.FloorDiv(s0, s1), 2), ("PythonMod", F.PythonMod(s0, s1), 1),
        ("Mod", F.Mod(s0, s1), 1), ("CleanDiv", F.CleanDiv(s0 * 2, 2), 7),
        ("ModularIndexing", F.ModularIndexing(s0, 2, 2), 1),
        ("CeilDiv", F.CeilDiv(s0, s1), 3), ("CeilToInt", F.CeilToInt(x * 0.5), 4),
        ("FloorToInt", F.FloorToInt(x * 0.5), 3), ("TruncToInt", F.TruncToInt(x * 0.75), 5),
        ("RoundToInt", F.RoundToInt(x * 0.5), 4),
        ("RoundDecimal", F.RoundDecimal(x * 0.123, 1), round(7 * 0.123, 1)),
        ("IntTrueDiv", F.IntTrueDiv(s0, s1), 7 / 3),
        ("FloatTrueDiv", F.FloatTrueDiv(x, F.ToFloat(s1)), 7 / 3),
        ("PowByNatural", F.PowByNatural(s0, s1), 343),
        ("FloatPow", F.FloatPow(x, F.ToFloat(s1)), 343.0),
        ("Max", F.Max(s0, s1), 7), ("Min", F.Min(s0, s1), 3),
        ("Abs", sympy.Abs(s1 - s0), 4),
        ("LShift", F.LShift(s0, s1), 56), ("RShift", F.RShift(s0, 1), 3),
        ("Where", F.Where(sympy.Gt(s0, s1), s0, s1), 7),
        ("Identity", F.Identity(s0), 7),
        ("BitwiseFn_bitwise_and", F.BitwiseFn_bitwise_and(s0, s1), 3),
        ("BitwiseFn_bitwise_or", F.BitwiseFn_bitwise_or(s0, s1), 7),
        ("BitwiseFn_bitwise_xor", F.BitwiseFn_bitwise_xor(s0, s1), 4),
        ("IsNonOverlappingAndDenseIndicator",
         F.IsNonOverlappingAndDenseIndicator(s0, s1, s1, 1), 1),
        ("Infinity", sympy.Lt(s0, sympy.oo), True),
        ("Piecewise", sympy.Piecewise((s0, sympy.Gt(s0, 5)), (s1, True)), 7),
        ("floor", sympy.floor(x * 0.5), 3), ("ceiling", sympy.ceiling(x * 0.5), 4),
        ("Not", sympy.Not(sympy.Eq(s0, s1)), True),
    ]
    for name in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos",
                 "atan", "exp", "log", "asinh", "log2"):
        fn = getattr(F, f"OpaqueUnaryFn_{name}")
        arg = x * 0.1 if name in ("asin", "acos") else x
        value = getattr(math, name)(0.7 if name in ("asin", "acos") else 7.0)
        cases.append((f"OpaqueUnaryFn_{name}", fn(arg), value))
    return cases


@pytest.mark.parametrize("case", _torch_sympy_cases(), ids=lambda c: c[0])
def test_every_name_printed_symbolic_text_says_is_bound(case: tuple[str, Any, float]
                                                        ) -> None:
    """Each function of torch's sympy vocabulary, printed as a guard's or a size's text is
    (``PythonPrinter``), evaluates in a generated function whose scope binds nothing
    (`load_python` gives it `SYMBOLIC_NAMES`) to the function's value."""
    _, expr, value = case
    text = _printed(expr)
    fn = load_python(f"def value(s0, s1):\n  return {text}\n", "value", {})
    got = fn(7, 3)
    assert got == pytest.approx(value), text


def test_the_names_are_the_ones_torch_evaluates_guards_with() -> None:
    """torch evaluates its own printed guards in ``SYMPY_INTERP``: each of its names is
    one `SYMBOLIC_NAMES` binds too."""
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

    missing = set(SYMPY_INTERP) - set(SYMBOLIC_NAMES) - {"cast_symbool_to_symint_guardless"}
    assert missing == set()


# --------------------------------------------------------------------------- guards that fail


def _doubled(x: torch.Tensor) -> torch.Tensor:
    return x[:, : x.shape[1] // 2] * 2


def test_a_guard_that_fails_on_its_own_call_falls_back_to_a_program_per_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new shape guard is evaluated on the call it was compiled for: one that raises
    there (here a guard text dividing by zero) or answers False fails the symbolic
    compile, which falls back to a program for the call's sizes (`symbolic_failures`
    says why), and later calls of other sizes compile per size, equal to eager."""
    for extra, reason in (("s0 // 0 == 1", "ZeroDivisionError"),
                          ("s0 < 0", "does not hold for the call it was compiled for")):
        plain = SymbolTable.guards
        monkeypatch.setattr(SymbolTable, "guards", lambda self, e=extra, p=plain: [*p(self), e])
        jf = thunder_ir.jit(_doubled)
        for n in (4, 6, 8, 10):
            x = torch.randn(3, n)
            torch.testing.assert_close(jf(x), _doubled(x))
        assert thunder_ir.cache_misses(jf) == 4
        assert len(jf.symbolic_failures) == 1, jf.symbolic_failures
        assert "ShapeGuardError" in jf.symbolic_failures[0]
        assert reason in jf.symbolic_failures[0]
        assert _last(jf).shape_guard is None  # the static program of the last size
        monkeypatch.undo()


@pytest.mark.parametrize("answer", ["raises", "not a bool"])
def test_a_guard_that_cannot_answer_at_call_time_is_dropped_with_a_warning(answer: str
                                                                           ) -> None:
    """At call time a shape guard that raises, or answers other than a bool, drops its
    symbolic program with one RuntimeWarning naming the function and the error; the call
    is traced again for its sizes and every later call equals eager's."""
    jf = thunder_ir.jit(_doubled)
    for n in (4, 6):
        jf(torch.randn(3, n))
    guard = _last(jf).shape_guard
    assert guard is not None

    def broken(leaves: Any) -> Any:
        if answer == "raises":
            raise OverflowError("math range error")
        return "maybe"

    guard.fn = broken
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (8, 10, 12, 8):
            x = torch.randn(3, n)
            got = jf(x)
            assert type(got) is torch.Tensor
            torch.testing.assert_close(got, _doubled(x))
    dropped = [w for w in caught if issubclass(w.category, RuntimeWarning)
               and "shape guard" in str(w.message)]
    assert len(dropped) == 1, [str(w.message) for w in caught]
    message = str(dropped[0].message)
    assert "_doubled" in message
    assert ("OverflowError" if answer == "raises" else "'maybe'") in message
    assert dropped[0].filename == __file__  # the user's line, not thunder_ir's
    assert any("dropped" in f for f in jf.symbolic_failures)
    assert _last(jf).shape_guard is not guard


def test_a_variant_whose_guard_cannot_answer_is_unlinked() -> None:
    """A symbolic program's speculation variants run where their guards hold: one whose
    guard raises is unlinked from the chain with a warning, and every call still equals
    eager's."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x[:, : x.shape[1] // 2] + 1 if x.sum() > 0 else x * 2

    jf = thunder_ir.jit(f)
    for n, sign in ((4, 1), (6, 1), (6, -1)):  # symbolic, then its variant for x < 0
        x = sign * (torch.rand(3, n) + 0.5)
        torch.testing.assert_close(jf(x), f(x))
    [first] = [e for es in jf.programs.shape_entries.values() for e in es]
    variant = first.variant
    assert variant is not None and variant.shape_guard is not None

    def broken(leaves: Any) -> bool:
        raise ZeroDivisionError("division by zero")

    variant.shape_guard.fn = broken
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n, sign in ((8, -1), (10, 1), (12, -1)):
            x = sign * (torch.rand(3, n) + 0.5)
            got = jf(x)
            assert type(got) is torch.Tensor
            torch.testing.assert_close(got, f(x))
    dropped = [str(w.message) for w in caught if "shape guard" in str(w.message)]
    assert len(dropped) == 1 and "ZeroDivisionError" in dropped[0], dropped
    assert first.variant is not variant  # unlinked; a new variant took its place
