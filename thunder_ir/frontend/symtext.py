"""Symbolic numbers turned into text by user code read as eager's numbers.

A symbolic compilation hands user code ``SymInt``s (``x.shape[0]``, an ``int`` argument
made symbolic). Arithmetic, comparisons, ``int()``, ``hash`` and ``%d`` on them either stay
symbolic or ask the compilation's ``ShapeEnv`` for the value, which records a guard. Their
text does not: torch's ``SymInt.__repr__`` (which ``str``, f-strings, ``format`` and
``torch.Size``'s repr reach) answers the symbol's name, ``"s0"``, with no guard, so a
program that builds a string from a size (a cache key, a name, a length) would compute
with ``"s0"`` for every length where eager sees ``"5"``, ``"50"``, ...

`install` wraps the ``__repr__`` of ``SymInt``, ``SymFloat`` and ``SymBool``: called from
user code (a frame outside torch and thunder_ir) while this thread traces, it answers the
text of the concrete value, read through ``int()`` / ``float()`` / ``bool()``, so the
program is guarded on that value (another value compiles again, as for ``if n == 7``).
Everywhere else (torch's and thunder_ir's own messages, printing a trace, other threads,
no trace running) it is torch's ``__repr__``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

_ORIGINAL: dict[type, Callable[[Any], str]] = {}
_CONCRETE: dict[type, Callable[[Any], Any]] = {
    torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


def _library_dirs() -> tuple[str, ...]:
    """Directories whose code is not user code: torch's and thunder_ir's packages (each
    package's own directory: thunder_ir's ``__path__`` also holds the repository's root)."""
    names = ("torch", "thunder_ir", "thunder_ir.dialects", "thunder_ir.passes",
             "thunder_ir.lowering", "thunder_ir.runtime")
    dirs = [os.path.dirname(str(importlib.import_module(n).__file__)) for n in names]
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


_LIBRARY: tuple[str, ...] | None = None
_USER_FILE: dict[str, bool] = {}


def _from_user_code(filename: str) -> bool:
    """True if ``filename`` is not torch's or thunder_ir's (cached per file)."""
    global _LIBRARY
    user = _USER_FILE.get(filename)
    if user is None:
        if _LIBRARY is None:
            _LIBRARY = _library_dirs()
        user = _USER_FILE[filename] = not os.path.realpath(filename).startswith(_LIBRARY)
    return user


def _make_repr(cls: type, tracing_now: Callable[[], bool]) -> Callable[[Any], str]:
    original = _ORIGINAL[cls]
    concrete = _CONCRETE[cls]

    def __repr__(self: Any) -> str:
        if tracing_now() and _from_user_code(sys._getframe(1).f_code.co_filename):
            return repr(concrete(self))  # asks the ShapeEnv: a guard on the value
        return original(self)

    __repr__.__doc__ = original.__doc__
    __repr__.__wrapped__ = original  # type: ignore[attr-defined]
    return __repr__


def install(tracing_now: Callable[[], bool]) -> None:
    """Wraps the symbolic numbers' ``__repr__`` (once per process; see the module doc).
    ``tracing_now()`` says whether this thread traces user code."""
    for cls in _CONCRETE:
        if cls in _ORIGINAL:
            continue
        _ORIGINAL[cls] = cls.__repr__  # type: ignore[assignment]
        setattr(cls, "__repr__", _make_repr(cls, tracing_now))  # noqa: B010


__all__ = ["install"]
