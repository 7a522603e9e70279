"""The names symbolic text can say: the globals of every generated function that
evaluates a symbolic number's text.

A symbolic size or number (`thunder_ir.dialects.symbols`) is Python text over the
symbols, printed by torch's ``PythonPrinter`` (``SymbolTable.text`` and
``SymbolTable.guards``). Beyond operators and ``abs``/``max``/``min``/``round`` (builtins),
that printer can name ``math`` (``math.trunc``, ``math.cos``, ``math.inf``...) and
``torch`` (``torch.sym_float``, ``torch._sym_sqrt``), and, for the functions it has no
rule for, sympy's generic text: ``OpaqueUnaryFn_exp(s0)``, ``Where(c, a, b)``,
``CeilDiv(s0, 4)``... `SYMBOLIC_NAMES` binds each of them, as torch's own guard
evaluation does (``SYMPY_INTERP``); `thunder_ir.runtime.python_printer.load_python`, the
one place generated source runs, gives every generated function the ones its scope does
not bind itself (the shape guard, the symbol readers, ``symbolic_value``, the
interpreter's sizes, the programs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch


def _where(cond: Any, then: Any, other: Any) -> Any:
    return then if cond else other


def _ceil_div(a: Any, b: Any) -> Any:
    return -(-a // b)


def _non_overlapping_and_dense(*args: int) -> int:
    from torch.fx.experimental.symbolic_shapes import (
        _eval_is_non_overlapping_and_dense_flat,
    )

    return int(_eval_is_non_overlapping_and_dense_flat(*args))


SYMBOLIC_NAMES: Mapping[str, Any] = MappingProxyType({
    "math": math,
    "torch": torch,
    # sympy's generic text for torch's functions that PythonPrinter has no rule for
    "OpaqueUnaryFn_exp": math.exp,
    "OpaqueUnaryFn_log": math.log,
    "OpaqueUnaryFn_asinh": math.asinh,
    "Where": _where,
    "CeilDiv": _ceil_div,
    "LShift": lambda a, b: a << b,
    "RShift": lambda a, b: a >> b,
    "IsNonOverlappingAndDenseIndicator": _non_overlapping_and_dense,
})
"""Name -> value for each name printed symbolic text may use (see the module doc)."""


def symbolic_scope(scope: dict[str, Any]) -> dict[str, Any]:
    """``scope`` with each of `SYMBOLIC_NAMES` it does not bind itself added (in place)."""
    for name, value in SYMBOLIC_NAMES.items():
        scope.setdefault(name, value)
    return scope


__all__ = ["SYMBOLIC_NAMES", "symbolic_scope"]
