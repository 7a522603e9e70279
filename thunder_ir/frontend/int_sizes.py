"""``int()`` of a symbolic size that user code only compares: the size stays symbolic.

Python's ``int(n)`` must return an ``int``, so in a symbolic compilation ``int()`` of a
``SymInt`` asks the ``ShapeEnv`` for the value, which fixes the size (the guard
``Eq(s1, 16)``) and makes the program one for that length. Models take ``int()`` of a size
where its only use is a comparison, mostly a check (Reformer:
``assert int(buckets.shape[-1]) == num_hashes * sequence_length``); eager compares the two
numbers of the call, which a symbolic program can do for every length.

So ``int(n)`` of a backed ``SymInt``, called from user code while a symbolic compilation
traces, looks at what the caller's bytecode does with the result (`_compared_at`): if the
next instruction that takes it off the stack is a ``COMPARE_OP`` (the other operand
computed in between by loads, attribute reads, subscripts, arithmetic and calls), ``int``
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
import dis
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch

from thunder_ir.dialects import symbols
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

# ---- what the caller does with the result

_POPS_FIXED: dict[str, int] = {
    **dict.fromkeys(("LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_NAME",
                     "LOAD_CLASSDEREF", "LOAD_GLOBAL", "LOAD_FAST_CHECK", "PUSH_NULL",
                     "NOP", "KW_NAMES", "RESUME", "CACHE", "EXTENDED_ARG",
                     "COPY_FREE_VARS", "LOAD_SMALL_INT", "LOAD_FAST_BORROW"), 0),
    **dict.fromkeys(("LOAD_ATTR", "LOAD_METHOD", "UNARY_NEGATIVE", "UNARY_INVERT",
                     "UNARY_NOT", "UNARY_POSITIVE", "TO_BOOL"), 1),
    **dict.fromkeys(("BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP"), 2),
    "BINARY_SLICE": 3,
}
"""How many stack entries an instruction takes (the ones whose effect `_compared_at`
follows; anything else, a jump among them, ends the search)."""


def _pops(ins: dis.Instruction) -> int | None:
    n = _POPS_FIXED.get(ins.opname)
    if n is not None:
        return n
    arg = ins.arg or 0
    if ins.opname == "PRECALL":  # (3.11: it takes the arguments, CALL the callable and
        return arg  # the NULL or self below it)
    if ins.opname == "CALL":  # (3.12, 3.13: the callable, self or NULL, the arguments)
        return 2 if sys.version_info < (3, 12) else arg + 2
    if ins.opname in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE"):
        return arg
    return None


_ANSWERS: weakref.WeakKeyDictionary[CodeType, dict[int, int | None]] = \
    weakref.WeakKeyDictionary()
"""`_compared_at`'s answers per code object (dropped with it) and call offset."""


def _compared_at(code: CodeType, call: int) -> int | None:
    """The offset of the ``COMPARE_OP`` of ``code`` that takes the result of the call at
    offset ``call`` off the stack, where that call is ``int(x)`` (`_calls_int`) and the
    comparison is the next instruction to take its result; else None. (Cached per code
    object and offset.)"""
    known = _ANSWERS.get(code)
    if known is None:
        known = _ANSWERS[code] = {}
    if call in known:
        return known[call]
    code_ins = list(dis.get_instructions(code))
    at = next((i for i, ins in enumerate(code_ins) if ins.offset == call), None)
    answer = None
    if at is not None and _calls_int(code_ins, at):
        above = 0  # entries above the result
        for ins in code_ins[at + 1:]:
            pops = _pops(ins)
            if pops is None:
                break
            if pops > above:  # it takes the result
                if ins.opname == "COMPARE_OP" and above <= 1:
                    answer = ins.offset
                break
            above += dis.stack_effect(ins.opcode, ins.arg, jump=False)
    known[call] = answer
    return answer


def _calls_int(code_ins: list[dis.Instruction], at: int) -> bool:
    """Whether the call ``code_ins[at]`` calls, with one argument, the callable that a
    ``LOAD_GLOBAL int`` before it pushed (followed by loads, attribute reads, subscripts,
    arithmetic and calls in between; the name's value is checked by the caller)."""
    call = code_ins[at]
    if call.opname != "CALL" or call.arg != 1:
        return False
    for i in range(at - 1, -1, -1):
        ins = code_ins[i]
        if ins.opname != "LOAD_GLOBAL" or ins.argval != "int" or not (ins.arg or 0) & 1:
            continue  # (the low bit: a NULL pushed with it, for a call of it)
        # entries above the callable (from 3.13 the NULL is pushed after it)
        above = first = 1 if sys.version_info >= (3, 13) else 0
        for nxt in code_ins[i + 1:at + 1]:
            pops = _pops(nxt)
            if pops is None:
                return False
            if pops > above:  # it takes the callable: the call at ``at``, as its callee
                return nxt is call and pops - above == 2 - first
            above += dis.stack_effect(nxt.opcode, nxt.arg, jump=False)
        return False
    return False


# ---- the wrappers


def _int(original: Callable[[Any], int], tracing_now: Callable[[], bool],
         from_user_code: Callable[[str], bool]) -> Callable[[Any], int]:
    def __int__(self: Any) -> int:
        pending = _STATE.pending
        if pending is None or not tracing_now() or symbols.current() is None:
            return original(self)
        f = sys._getframe(1)
        if not from_user_code(f.f_code.co_filename) or not self.node.has_hint():
            return original(self)
        at = _compared_at(f.f_code, f.f_lasti)
        if at is None or _name_int(f) is not int:
            return original(self)
        value = int(self.node.hint)
        pending.append(_Pending(f, at, value, self, f"{f.f_code.co_filename}:{f.f_lineno}"))
        return value

    __int__.__wrapped__ = original  # type: ignore[attr-defined]
    return __int__


def _name_int(f: FrameType) -> Any:
    """What the name ``int`` is in frame ``f`` (its locals, globals, then builtins)."""
    for scope in (f.f_locals if f.f_code.co_flags & 0x1 == 0 else {}, f.f_globals,
                  f.f_builtins):
        if "int" in scope:
            return scope["int"]
    return None


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

__all__ = ["deferred", "site_for", "swaps"]
