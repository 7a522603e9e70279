"""Why a call structure compiles once per size although its sizes are symbolic.

Automatic dynamic compiles, for the second size of a call structure, a symbolic program
meant to serve every size. Two things can keep it from doing so, and both are silent: the
program is correct, only not shared. This module names them (the callable's
``symbolic_failures``, shown by `thunder_ir.compile_status` as ``static``):

* a *pin*: a guard of the program that fixes a size which varies between calls
  (``Eq(16*s0*s1, 224)``, ``Eq(s0, 7)``), so that it holds for the sizes it was traced
  for only. `pinning_guards` finds the guards that the previous miss's sizes fail and
  that fix a value (a polynomial equality: a range ``s0 <= 64`` or a divisibility
  ``Eq(Mod(s0, 8), 0)`` serves many sizes), each with where it was recorded (the traced
  op and the user's line, `thunder_ir.frontend.guard_sites`);
* a *key that is not blanked*: a part of the cache key other than the dynamic sizes
  themselves that changes with them (the strides in an aliasing entry), so that each
  size looks its symbolic programs up under a dynamic key of its own and never finds the
  one compiled. `key_difference` names that part (by the prologue's labels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thunder_ir.dialects.symbols import SymbolSource, SymbolTable
from thunder_ir.runtime.object_ints import value_at


def guard_sites(table: SymbolTable) -> list[tuple[Any, str]]:
    """Each guard the compile's ``ShapeEnv`` recorded (a sympy boolean), with where (the
    guard's ``sloc``: the traced op and the user's line, thunder_ir's or torch's step)."""
    return [(g.expr, str(g.sloc)) for g in table.env.guards]


def previous_values(sources: dict[str, SymbolSource], before: Sequence[Any]
                    ) -> dict[str, int]:
    """The values the symbols had in an earlier call whose leaves' sizes were ``before``
    (`thunder_ir.runtime.dynamic.sizes_of`): an ``int`` field of an argument object's
    by its key (`thunder_ir.runtime.object_ints`); a tensor size inside an argument object
    or a module attribute has none here."""
    out: dict[str, int] = {}
    for name, src in sources.items():
        if not 0 <= src.leaf < len(before):
            continue
        v = before[src.leaf]
        if src.steps:
            if src.dim is None and type(v) is tuple and len(v) == 2 and v[0] == "object":
                number = value_at(v[1], src.steps)
                if type(number) is int:
                    out[name] = number
            continue
        if src.dim is None and type(v) is int:
            out[name] = v
        elif (src.dim is not None and type(v) is tuple and src.dim < len(v)
              and type(v[src.dim]) is int):
            out[name] = v[src.dim]
    return out


def pinning_guards(sites: Sequence[tuple[Any, str]], values: dict[str, int]
                   ) -> list[tuple[str, str]]:
    """The guards among ``sites`` that fix a size: polynomial equalities over the symbols
    that the sizes ``values`` (by symbol name) fail. Returns ``(guard text, site)``."""
    import sympy

    out: list[tuple[str, str]] = []
    for expr, where in sites:
        if not isinstance(expr, sympy.Eq):
            continue
        free = expr.free_symbols
        subs = {s: sympy.Integer(values[str(s)]) for s in free if str(s) in values}
        if not subs:
            continue
        diff = expr.lhs - expr.rhs
        if not diff.is_polynomial(*free):  # Mod, FloorDiv: a class of sizes, not one
            continue
        if expr.xreplace(subs) is sympy.false:
            out.append((str(expr), where))
    return out


def key_difference(dkey: tuple[Any, ...], stored: Sequence[tuple[Any, ...]],
                   labels: Sequence[str]) -> list[str]:
    """The labels of the key parts in which ``dkey`` (a call's dynamic key) differs from
    the closest of the ``stored`` dynamic keys of the same dynamic sizes, where it differs
    in fewer than three: parts that change with the sizes but are not blanked. A part that
    is an argument object's key (a ``DynamicCache``) is named down to the field that
    differs: ``argument 'past_key_values' .layers.cumulative_length (5 -> 6)``."""
    best: list[int] | None = None
    closest: tuple[Any, ...] = ()
    for k in stored:
        if len(k) != len(dkey) or k[-1] != dkey[-1]:
            continue
        diff = [i for i, (a, b) in enumerate(zip(k, dkey)) if a != b]
        if diff and (best is None or len(diff) < len(best)):
            best, closest = diff, k
    if best is None or len(best) > 2:
        return []
    out = []
    for i in best:
        label = labels[i] if i < len(labels) else f"part {i} of the key"
        field = _object_field(closest[i], dkey[i], "")
        if field == "":  # a symbolic int field at 0 or 1: a program of its own, by design
            continue
        out.append(label if field is None else f"{label} {field}")
    return out


def _object_field(old: Any, new: Any, path: str) -> str | None:
    """The first field of an argument object's key (``(cls, (("name", value), ...))``,
    nested) in which ``old`` and ``new`` differ, with both values; None: not an object's
    key, or the difference is not in a named field; "": the field is a symbolic ``int``
    (`thunder_ir.runtime.object_ints`), blanked on one side, 0 or 1 on the other."""
    if not (isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new)):
        return None
    if len(old) == 2 and isinstance(old[0], str) and old[0] == new[0]:
        if old[1] == new[1]:
            return None
        inner = _object_field(old[1], new[1], f"{path}.{old[0]}")
        if inner is not None:
            return inner
        o, n = old[1], new[1]
        if (type(o) is tuple and type(n) is tuple and len(o) == 2 == len(n)
                and o[0] is int and n[0] is int and None in (o[1], n[1])):
            return ""
        if isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], type):  # (cls, value)
            o, n = o[1], n[1] if isinstance(n, tuple) and len(n) == 2 else n
        return f"{path}.{old[0]} ({o!r} -> {n!r})"
    for a, b in zip(old, new):
        if a != b:
            return _object_field(a, b, path)
    return None


__all__ = ["guard_sites", "key_difference", "pinning_guards", "previous_values"]
