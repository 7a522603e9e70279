"""Runs `thunder_ir.frontend.int_bytecode` (loaded by path: standard library only) on the
Python running this script, and prints JSON: per case, whether ``int(n)`` of a stand-in
size was compared with the size itself (``symbolic``), fixed at once (``fixed``), or left
pending (``pending``: it would be fixed when the trace ends).

The stand-in does what `thunder_ir.frontend.int_sizes`'s wrappers do, with the frame
offsets of this Python: its ``__int__`` asks `compared_at` at the caller's ``f_lasti``
and its comparisons look for a pending number at theirs. Run by
``tests/test_int_bytecode.py`` under each CPython it finds (3.11, 3.12, 3.13).
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import sys
from collections.abc import Callable
from typing import Any

spec = importlib.util.spec_from_file_location("int_bytecode", sys.argv[1])
assert spec is not None and spec.loader is not None
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

pending: list[tuple[Any, int, int, Size]] = []
log: list[str] = []


class Size:
    """A stand-in ``SymInt``: an ``int()`` of it only compared keeps it symbolic."""

    def __init__(self, v: int, name: str) -> None:
        self.v, self.name = v, name

    def __int__(self) -> int:
        f = sys._getframe(1)
        at = mod.compared_at(f.f_code, f.f_lasti)
        if at is None or mod.name_int(f) is not int:
            log.append("fixed")
        else:
            pending.append((f, at, self.v, self))
        return self.v

    def _cmp(self, other: Any, op: Callable[[int, int], bool]) -> bool:
        if type(other) is int:
            f = sys._getframe(2)
            for i in range(len(pending) - 1, -1, -1):
                p = pending[i]
                if p[0] is f and p[1] == f.f_lasti and p[2] == other:
                    del pending[i]
                    log.append("symbolic")
                    return op(self.v, p[3].v)
        return op(self.v, other if type(other) is int else other.v)

    def __eq__(self, o: Any) -> bool:  # type: ignore[override]
        return self._cmp(o, lambda a, b: a == b)

    def __ne__(self, o: Any) -> bool:  # type: ignore[override]
        return self._cmp(o, lambda a, b: a != b)

    def __lt__(self, o: Any) -> bool:
        return self._cmp(o, lambda a, b: a < b)

    def __gt__(self, o: Any) -> bool:
        return self._cmp(o, lambda a, b: a > b)

    def __mul__(self, o: Any) -> Size:
        return Size(self.v * (o if type(o) is int else o.v), "product")

    def __pos__(self) -> Size:
        return self

    __hash__ = None  # type: ignore[assignment]


class Shape:
    def __init__(self, *s: Any) -> None:
        self.s = s

    def __getitem__(self, i: int) -> Any:
        return self.s[i]


class T:
    def __init__(self, *s: Any) -> None:
        self.shape = Shape(*s)

    def size(self, i: int) -> Any:
        return self.shape[i]


class Obj:
    a: Any
    b: Any


def f(*a: Any, **k: Any) -> Any:
    return a[0] if a else 0


class Base:
    m: Any = None


class Child(Base):
    def compare(self, n: Any) -> bool:
        return int(n) == super().m


def c_assert(n: Any, m: Any) -> None:
    assert int(n) == m


def c_shape(t: Any, m: Any) -> bool:
    return int(t.shape[-1]) == m


def c_product(n: Any, a: Any, b: Any) -> None:
    assert int(n) == a * b, "msg"


def c_attr(n: Any, o: Any) -> bool:
    return int(n) == o.a.b


def c_method(n: Any, t: Any) -> bool:
    return int(n) == t.size(1)


def c_ne_if(n: Any, m: Any) -> int:
    if int(n) != m:
        return 1
    return 0


def c_lt(n: Any, m: Any) -> bool:
    return int(n) < m


def c_reflected(n: Any, m: Any) -> bool:
    return m == int(n)


def c_kwcall(n: Any, m: Any) -> bool:
    return int(n) == f(m, k=1)


def c_listcomp(ns: Any, ms: Any) -> list[bool]:
    return [int(a) == b for a, b in zip(ns, ms, strict=True)]


def c_unary(n: Any, m: Any) -> bool:
    return int(n) == +m


def c_super(n: Any, m: Any) -> bool:
    Base.m = m
    return Child().compare(n)


def c_subscript(n: Any, d: Any) -> bool:
    return int(n) == d["k"]


def c_stored(n: Any, m: Any) -> bool:
    x = int(n)
    return x == m


def c_arith(n: Any, m: Any) -> bool:
    return int(n) + 0 == m


def c_passed(n: Any, m: Any) -> bool:
    return f(int(n)) == m


def c_chained(n: Any, m: Any) -> bool:
    return 0 < int(n) < m


def c_shadowed(n: Any, m: Any) -> bool:
    int = lambda v: builtins.int(v)  # noqa: E731
    return int(n) == m


def c_plain(n: Any) -> bool:
    return int(n) == 4  # compared with a plain int: left pending (fixed at the end)


s1, s2 = Size(4, "s1"), Size(4, "s2")
o = Obj()
o.a = Obj()
o.a.b = s2
CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "assert int(n) == m": (c_assert, (s1, s2)),
    "int(t.shape[-1]) == m": (c_shape, (T(2, s1), s2)),
    "assert int(n) == a * b": (c_product, (s1, Size(2, "a"), 2)),
    "int(n) == o.a.b": (c_attr, (s1, o)),
    "int(n) == t.size(1)": (c_method, (s1, T(2, s2))),
    "if int(n) != m": (c_ne_if, (s1, s2)),
    "int(n) < m": (c_lt, (s1, s2)),
    "m == int(n)": (c_reflected, (s1, s2)),
    "int(n) == f(m, k=1)": (c_kwcall, (s1, s2)),
    "[int(a) == b for ...]": (c_listcomp, ([s1], [s2])),
    "int(n) == +m": (c_unary, (s1, s2)),
    "int(n) == super().m": (c_super, (s1, s2)),
    "int(n) == d['k']": (c_subscript, (s1, {"k": s2})),
    "x = int(n); x == m": (c_stored, (s1, s2)),
    "int(n) + 0 == m": (c_arith, (s1, s2)),
    "f(int(n)) == m": (c_passed, (s1, s2)),
    "0 < int(n) < m": (c_chained, (s1, Size(9, "m"))),
    "int shadowed": (c_shadowed, (s1, s2)),
    "int(n) == 4": (c_plain, (s1,)),
}

out: dict[str, Any] = {"version": list(sys.version_info[:2])}
for label, (fn, args) in CASES.items():
    for _ in range(3):  # the last run is of specialized (adaptive) bytecode
        log.clear()
        pending.clear()
        fn(*args)
    out[label] = log[0] if log else ("pending" if pending else "none")
print(json.dumps(out))
