"""``int()`` of a symbolic size that user code only compares: the size stays symbolic.

Python's ``int(n)`` must return an ``int``, so in a symbolic compilation ``int()`` of a
``SymInt`` asks the ``ShapeEnv`` for the value, which fixes the size (the guard
``Eq(s1, 16)``) and makes the program one for that length. Models take ``int()`` of a size
where its only use is a comparison, mostly a check (Reformer:
``assert int(buckets.shape[-1]) == num_hashes * sequence_length``); eager compares the two
numbers of the call, which a symbolic program can do for every length.

So ``int(n)`` of a backed ``SymInt``, called from user code while a symbolic compilation
traces, looks at what the caller's bytecode does with the result
(`thunder_ir.frontend.int_bytecode`, CPython 3.11 to 3.13): if the next instruction that
takes it off the stack is a ``COMPARE_OP`` (the other operand computed in between by
loads, attribute reads, subscripts, arithmetic and calls), ``int``
returns the size's value for this call *without a guard*, and notes it as pending. Python
then runs the comparison:

- against a symbolic number (the usual case: ``16 == s1`` goes to ``SymInt.__eq__``), the
  ``SymInt`` comparison methods, wrapped while traced, see the pending number at that
  instruction and compare with the size itself instead: ``Eq(s1, s1)``, which the
  ``ShapeEnv`` proves with no guard, or any other relation, guarded as a comparison of
  sizes is;
- against anything else (a plain ``int``, a float, a tensor), nothing sees it: when the
  trace ends the pending size is fixed to its value as ``int()`` would have fixed it
  (`deferred`), so the program still holds only for that value, as before.

Anywhere else (``int(n)`` passed to a call, stored, used in arithmetic) ``int()`` fixes
the size at once, as torch's does.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from thunder_ir.dialects import symbols
from thunder_ir.frontend.int_bytecode import compared_at, name_int
from thunder_ir.frontend.table import TRACING_CONTEXTS

_COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")


@dataclass
class _Pending:
    """An ``int()`` of ``size`` that returned ``value`` unguarded, for the ``COMPARE_OP``
    at ``offset`` of ``frame``; ``where``: the user's line."""

    frame: FrameType
    offset: int
    value: int
    size: torch.SymInt
    where: str


class _State(threading.local):
    pending: list[_Pending] | None = None
    site: str | None = None  # what a guard recorded now is for (`site_for`)


_STATE = _State()

# ---- the wrappers


WRAPPERS: set[str] = set()
"""The files of other wrappers of ``SymInt.__int__`` that may call this one (put in place
after it: `thunder_ir.frontend.seeds`); the caller is the frame before theirs."""


def _int(original: Callable[[Any], int], tracing_now: Callable[[], bool],
         from_user_code: Callable[[str], bool]) -> Callable[[Any], int]:
    def __int__(self: Any) -> int:
        pending = _STATE.pending
        if pending is None or not tracing_now() or symbols.current() is None:
            return original(self)
        f = sys._getframe(1)
        while f.f_code.co_filename in WRAPPERS and f.f_back is not None:
            f = f.f_back  # (another wrapper of ``__int__``: its caller)
        if not from_user_code(f.f_code.co_filename) or not self.node.has_hint():
            return original(self)
        at = compared_at(f.f_code, f.f_lasti)
        if at is None or name_int(f) is not int:
            return original(self)
        value = int(self.node.hint)
        pending.append(_Pending(f, at, value, self, f"{f.f_code.co_filename}:{f.f_lineno}"))
        return value

    __int__.__wrapped__ = original  # type: ignore[attr-defined]
    return __int__


def _compare(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def compare(self: Any, other: Any) -> Any:
        pending = _STATE.pending
        if pending and type(other) is int:
            f = sys._getframe(1)
            for i in range(len(pending) - 1, -1, -1):
                p = pending[i]
                if p.frame is f and p.offset == f.f_lasti and p.value == other:
                    del pending[i]
                    return original(self, p.size)  # the size itself, not its value
        return original(self, other)

    compare.__wrapped__ = original  # type: ignore[attr-defined]
    return compare


def swaps(tracing_now: Callable[[], bool], from_user_code: Callable[[str], bool]
          ) -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """The swaps (`thunder_ir.frontend.takeover.patched`) of ``SymInt.__int__`` and its
    comparisons while some thread traces; they act only inside `deferred`."""
    out: list[tuple[Any, str, Callable[[Any], Any]]] = [
        (torch.SymInt, "__int__", lambda raw: _int(raw, tracing_now, from_user_code))]
    out += [(torch.SymInt, name, _compare) for name in _COMPARISONS]
    return out


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While open (around user code being traced), an ``int()`` of a size that is only
    compared stays unguarded (see the module doc); on a normal exit each one no
    comparison took is fixed to its value, as ``int()`` fixes it, the guard naming the
    user's line."""
    saved = _STATE.pending
    mine: list[_Pending] = []
    _STATE.pending = mine
    ok = False
    try:
        yield
        ok = True
    finally:
        _STATE.pending = saved
        left, mine[:] = list(mine), []
        if ok:
            for p in left:
                _STATE.site = f"int() at {p.where}"
                try:
                    p.size.__int__()  # (outside the pending scope: torch's, a guard)
                finally:
                    _STATE.site = None


def site_for() -> str | None:
    """Where a guard recorded now comes from, when it is recorded after its line ran (a
    pending ``int()`` fixed when the trace ends: ``"int() at <file>:<line>"``); else
    None (`thunder_ir.frontend.guard_sites.site`)."""
    return _STATE.site


TRACING_CONTEXTS.append(deferred)

__all__ = ["WRAPPERS", "deferred", "site_for", "swaps"]
