"""Symbolic numbers as user code sees them: eager's text and eager's class.

A symbolic compilation hands user code ``SymInt``s (``x.shape[0]``, an ``int`` argument
made symbolic). Arithmetic, comparisons, ``int()``, ``hash`` and ``%d`` on them either stay
symbolic or ask the compilation's ``ShapeEnv`` for the value, which records a guard. Two
questions did neither, and answered differently from eager with no guard:

- **Text.** torch's ``SymInt.__repr__`` (which ``str``, f-strings, ``format`` and
  ``torch.Size``'s repr reach) answers the symbol's name, ``"s0"``, so a program that
  builds a string from a size (a cache key, a name, a length) computed with ``"s0"`` for
  every length where eager sees ``"5"``, ``"50"``, ...
- **Class.** ``isinstance(n, int)`` is False for a ``SymInt``, so code that branches on it
  took its other branch.

`install` wraps the ``__repr__`` and the ``__getattribute__`` of ``SymInt``, ``SymFloat``
and ``SymBool``. Called from user code (a frame outside torch and thunder_ir) while this
thread traces:

- ``__repr__`` answers the text of the concrete value, read through ``int()`` /
  ``float()`` / ``bool()``, so the program is guarded on that value (another value
  compiles again, as for ``if n == 7``);
- ``__class__`` answers ``int`` / ``float`` / ``bool``: ``isinstance`` consults an
  instance's ``__class__`` when its type does not match, so ``isinstance(n, int)`` is
  True, as eager's; the number stays symbolic. ``type(n) is int`` still sees ``SymInt``
  (``type`` reads no attribute).

Everywhere else (torch's and thunder_ir's own code, printing a trace, other threads, no
trace running) both are torch's. ``__repr__`` is wrapped while some thread traces (`install`
lists the swap; `thunder_ir.frontend.takeover.patched` puts it in place); the
``__getattribute__`` wrapper costs one Python call per attribute read of a symbolic
number (``self.node`` in torch's symbolic arithmetic: 5% of a symbolic compile), so it is
installed only while some thread traces user code for a symbolic compilation
(`classes_as_eager`, entered by ``recording``) and removed after.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from thunder_ir.frontend import int_sizes

_CONCRETE: dict[type, type] = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


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


from_user_code = _from_user_code
"""Whether code of file ``filename`` is user code (neither torch's nor thunder_ir's)."""

WRAPPERS: set[str] = set()
"""Files of wrappers that stand between user code and a symbolic number's text (the
traced ``print`` and ``__str__``/``__format__``: `thunder_ir.frontend.printing`): the
caller is the frame before theirs."""


def caller(depth: int) -> Any:
    """The frame ``depth`` levels up from the caller of this function, past the frames of
    `WRAPPERS`."""
    f = sys._getframe(depth + 1)
    while f.f_code.co_filename in WRAPPERS and f.f_back is not None:
        f = f.f_back
    return f


def _repr(cls: type, tracing_now: Callable[[], bool], original: Callable[[Any], str]
          ) -> Callable[[Any], str]:
    concrete = _CONCRETE[cls]

    def __repr__(self: Any) -> str:
        if tracing_now() and _from_user_code(caller(1).f_code.co_filename):
            return repr(concrete(self))  # asks the ShapeEnv: a guard on the value
        return original(self)

    __repr__.__doc__ = original.__doc__
    __repr__.__wrapped__ = original  # type: ignore[attr-defined]
    return __repr__


def _getattribute(cls: type, tracing_now: Callable[[], bool]) -> Callable[[Any, str], Any]:
    original: Callable[[Any, str], Any] = cls.__getattribute__  # type: ignore[assignment]
    concrete = _CONCRETE[cls]

    def __getattribute__(self: Any, name: str) -> Any:
        if (name == "__class__" and tracing_now()
                and _from_user_code(sys._getframe(1).f_code.co_filename)):
            return concrete  # isinstance(n, int), as eager answers it
        return original(self, name)

    __getattribute__.__wrapped__ = original  # type: ignore[attr-defined]
    return __getattribute__


_GETATTRIBUTE: dict[type, Callable[[Any, str], Any]] = {}
_OWN_GETATTRIBUTE = {cls: "__getattribute__" in cls.__dict__ for cls in _CONCRETE}
_LOCK = threading.Lock()
_TRACING = 0  # threads' traces open (`classes_as_eager`)


def install(tracing_now: Callable[[], bool]) -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """The swaps of the symbolic numbers' ``__repr__``, and of ``SymInt``'s ``__int__`` and
    comparisons (`thunder_ir.frontend.int_sizes`), put in place while some thread traces
    (`thunder_ir.frontend.takeover.patched`), after making the ``__getattribute__``
    wrappers that `classes_as_eager` installs (see the module doc). ``tracing_now()`` says
    whether this thread traces user code."""
    for cls in _CONCRETE:
        if cls not in _GETATTRIBUTE:
            _GETATTRIBUTE[cls] = _getattribute(cls, tracing_now)
    return [*((cls, "__repr__", functools.partial(_repr, cls, tracing_now)) for cls in _CONCRETE),
            *int_sizes.swaps(tracing_now, _from_user_code)]


@contextlib.contextmanager
def classes_as_eager() -> Iterator[None]:
    """While open (in any thread), user code that a thread traces sees a symbolic number's
    ``__class__`` as eager's (``isinstance(n, int)``); the wrapper is removed when the last
    one closes."""
    global _TRACING
    with _LOCK:
        if _TRACING == 0:
            for cls, get in _GETATTRIBUTE.items():
                setattr(cls, "__getattribute__", get)  # noqa: B010
        _TRACING += 1
    try:
        yield
    finally:
        with _LOCK:
            _TRACING -= 1
            if _TRACING == 0:
                for cls, get in _GETATTRIBUTE.items():
                    if _OWN_GETATTRIBUTE[cls]:
                        setattr(cls, "__getattribute__", get.__wrapped__)  # type: ignore[attr-defined]  # noqa: B010
                    elif "__getattribute__" in cls.__dict__:  # (not if made while open)
                        delattr(cls, "__getattribute__")


__all__ = ["WRAPPERS", "caller", "classes_as_eager", "from_user_code", "install"]
