"""What the caller's bytecode does with the result of ``int(x)``: is it compared?

`thunder_ir.frontend.int_sizes` keeps a symbolic size symbolic through ``int(n)`` where
the result's only use is a comparison (``assert int(t.shape[-1]) == a * b``). It asks,
at the ``int()`` call, which instruction of the caller's code takes the result off the
stack (`compared_at`): following the stack over loads, attribute reads, subscripts,
arithmetic and calls, a ``COMPARE_OP`` is a match; anything else (a store, a jump, an
instruction this module does not follow) is not, and the size is then fixed as torch's
``int()`` fixes it: correct, just one program per value.

The instructions followed are those of CPython 3.11, 3.12 and 3.13 (``PRECALL`` + ``CALL``
in 3.11; ``CALL`` taking the callable, ``self`` or ``NULL`` and the arguments from 3.12;
``LOAD_GLOBAL``'s ``NULL`` pushed after the callable, ``LOAD_FAST_LOAD_FAST`` and
``CALL_KW`` in 3.13); what each pops comes from `dis.stack_effect`. This module uses the
standard library alone, so that tests run it under every Python they find
(``tests/test_int_bytecode.py``).
"""

from __future__ import annotations

import dis
import sys
import weakref
from types import CodeType, FrameType
from typing import Any

_POPS_FIXED: dict[str, int] = {
    **dict.fromkeys(("LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_NAME",
                     "LOAD_CLASSDEREF", "LOAD_GLOBAL", "LOAD_FAST_CHECK", "PUSH_NULL",
                     "NOP", "KW_NAMES", "RESUME", "CACHE", "EXTENDED_ARG",
                     "COPY_FREE_VARS", "LOAD_SMALL_INT", "LOAD_FAST_BORROW",
                     "LOAD_FAST_LOAD_FAST"), 0),
    **dict.fromkeys(("LOAD_ATTR", "LOAD_METHOD", "UNARY_NEGATIVE", "UNARY_INVERT",
                     "UNARY_NOT", "UNARY_POSITIVE", "TO_BOOL", "CALL_INTRINSIC_1"), 1),
    **dict.fromkeys(("BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP"), 2),
    **dict.fromkeys(("BINARY_SLICE", "LOAD_SUPER_ATTR"), 3),
}
"""How many stack entries an instruction takes (the ones whose effect `compared_at`
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
    if ins.opname == "CALL_KW":  # (3.13: those, and the keywords' names)
        return arg + 3
    if ins.opname in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE"):
        return arg
    return None


_ANSWERS: weakref.WeakKeyDictionary[CodeType, dict[int, int | None]] = \
    weakref.WeakKeyDictionary()
"""`compared_at`'s answers per code object (dropped with it) and call offset."""


def compared_at(code: CodeType, call: int) -> int | None:
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


def name_int(f: FrameType) -> Any:
    """What the name ``int`` is in frame ``f`` (its locals, globals, then builtins)."""
    for scope in (f.f_locals if f.f_code.co_flags & 0x1 == 0 else {}, f.f_globals,
                  f.f_builtins):
        if "int" in scope:
            return scope["int"]
    return None


__all__ = ["compared_at", "name_int"]
