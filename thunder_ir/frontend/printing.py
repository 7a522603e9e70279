"""``print`` of numbers read from traced tensors: each call prints its own values.

Eager's ``print(f"loss {loss.item():.3f}")`` in ``forward`` prints every call's loss. A
trace runs the user's ``print`` once, when it traces: the text would be the traced call's
(and formatting the number reads its value, which made the program one for that value).

So while user code is traced with a symbol table, a number this trace read from values
(an ``.item()``, ``.tolist()``'s items, Python arithmetic on them: symbols the trace made,
`thunder_ir.frontend.seeds.is_item`) is *printed by the program*:

- ``print(..., n, ...)`` (the number itself an argument, or text holding it; a size
  given as an argument too, each call's with no guard; and a ``print`` of plain text and
  Python numbers alone, which eager prints on every call too) records
  ``tir.print_values`` in the program, in program order: each call prints its own
  numbers to that call's ``sys.stdout``, with ``sep``, ``end`` and ``flush`` as given;
  nothing is printed while tracing;
- ``format(n, spec)``, an f-string's ``{n:.3f}``/``{n}`` and ``str(n)`` of such a number
  (``SymFloat``/``SymInt``'s ``__format__`` and ``__str__``, swapped while traced)
  return a placeholder text (`_MARK`) only where the caller's bytecode shows the text
  goes straight into a call of the builtin ``print`` (through f-string assembly:
  `printed_only`); the ``print`` then renders it on each call. The text used anywhere
  else (stored, returned, compared) is this call's text, its number's value
  checked on every call (speculated, as any Python read of the value is).

The program prints after its checks (`prints_last`: a call whose check fails runs again
another way, and must not have printed yet), so a runtime error of the program after a
``print`` (an index out of range) stops it before that print, where eager printed first.
A traced tensor printed (an argument, or in a tuple or list: torch's ``repr`` of each
call's tensor, as ``str`` of it and of the container give in eager) is printed by the
program the same way, as is a tuple or list holding such numbers (``t.tolist()``: the
``repr`` of each call's numbers). ``file=sys.stderr`` (or ``sys.stdout``) is named, so
each call prints to that call's stream. A tensor that requires grad is refused naming
the line (eager's text names its ``grad_fn`` or ``requires_grad=True``, which the
program's tensor has not), as is a tensor in another container, or printed to another
file. A ``print`` of numbers to another ``file=``, or with a placeholder in ``sep`` or
``end``, prints at trace time, with each number's value checked on every call.

``logging`` calls (`thunder_ir.frontend.logged`): the text also goes straight into a
logging method of a global logger or of the ``logging`` module (`LOG_METHODS`).
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import torch
from xdsl.ir import Block, Operation

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call
from thunder_ir.frontend.context import current, tracing_now
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.seeds import is_item
from thunder_ir.frontend.symbolic_numbers import WRAPPERS, caller, from_user_code
from thunder_ir.frontend.table import TRACING_CONTEXTS
from thunder_ir.frontend.takeover import Swap, in_user_code, while_traced
from thunder_ir.runtime import namespace
from thunder_ir.runtime.printing import print_values

PRINT = namespace.register("print_values", print_values, home=__name__)
"""The callee of the program's ``print`` (`thunder_ir.runtime.printing.print_values`)."""

_MARK = "\ue000{}\ue001"
"""A placeholder for number ``k``'s text (private-use characters no text of eager's
holds), in text that goes only into ``print``."""
_OPEN, _CLOSE = "\ue000", "\ue001"
MARK_OPEN = _OPEN
"""What starts a placeholder."""


class _State(threading.local):
    texts: list[tuple[Any, str, str]] | None = None  # (number, spec, how) per placeholder
    trace: Any = None  # the trace those placeholders belong to
    prints: list[Operation] | None = None  # the print ops this trace recorded


_STATE = _State()


def placeholders() -> list[tuple[Any, str, str]]:
    """This trace's placeholders (a new trace starts a new list)."""
    ctx = current()
    if _STATE.trace is not ctx or _STATE.texts is None:
        _STATE.trace, _STATE.texts = ctx, []
    return _STATE.texts


# ---- where the text goes

_TEXT_OPS = frozenset(("FORMAT_VALUE", "BUILD_STRING", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC",
                       "CONVERT_VALUE"))
_PASSING = frozenset(("LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME",
                      "LOAD_ATTR", "LOAD_METHOD", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW",
                      "LOAD_SMALL_INT", "PUSH_NULL", "KW_NAMES", "PRECALL", "CALL",
                      "FORMAT_VALUE", "BUILD_STRING", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC",
                      "CONVERT_VALUE", "BUILD_TUPLE", "BUILD_LIST", "BINARY_SUBSCR",
                      "BINARY_OP", "NOP", "CACHE", "EXTENDED_ARG"))


def _pops(ins: dis.Instruction) -> int:
    """How many stack entries ``ins`` takes (of the instructions `_PASSING` lists)."""
    name, arg = ins.opname, ins.arg or 0
    if name == "CALL":
        return 2 if sys.version_info < (3, 12) else arg + 2
    if name == "PRECALL" or name in ("BUILD_STRING", "BUILD_TUPLE", "BUILD_LIST"):
        return arg
    if name == "FORMAT_VALUE":
        return 2 if arg & 0x04 else 1
    if name in ("FORMAT_WITH_SPEC", "BINARY_SUBSCR", "BINARY_OP"):
        return 2
    if name in ("FORMAT_SIMPLE", "CONVERT_VALUE", "LOAD_ATTR", "LOAD_METHOD"):
        return 1
    return 0


def printed_only(frame: FrameType) -> bool:
    """Whether the value the instruction at ``frame.f_lasti`` makes (a formatting or
    ``str()``) goes, through f-string assembly only, into a positional argument of a
    call whose callable is the builtin ``print`` loaded by name (else False: anything not
    followed, a jump among them)."""
    ins = [i for i in dis.get_instructions(frame.f_code) if i.opname != "CACHE"]
    at = next((k for k, i in enumerate(ins) if i.offset == frame.f_lasti), None)
    if at is None:
        return False
    above = 0  # entries above the text
    for k in range(at + 1, len(ins)):
        i = ins[k]
        if i.opname not in _PASSING:
            return False
        pops = _pops(i)
        if pops > above:  # it takes the text
            if i.opname in _TEXT_OPS:
                above = 0
                continue
            if i.opname in ("PRECALL", "CALL"):
                return _calls_print(ins, k, frame)
            return False
        above += dis.stack_effect(i.opcode, i.arg, jump=False)
    return False


def _calls_print(ins: list[dis.Instruction], k: int, frame: FrameType) -> bool:
    """Whether the call taking its arguments at ``ins[k]`` calls the builtin ``print``
    that a ``LOAD_GLOBAL print`` before it pushed."""
    call = ins[k] if ins[k].opname == "CALL" else next(
        (i for i in ins[k + 1:] if i.opname == "CALL"), None)
    if call is None:
        return False
    for j in range(k - 1, -1, -1):
        g = ins[j]
        if g.opname != "LOAD_GLOBAL":
            continue
        if g.argval == "print":
            if frame.f_globals.get("print", builtins.print) is not builtins.print:
                return False
        elif _logs(frame, g, ins[j + 1]):
            j += 1  # (the method's load: method and self, as the NULL and print)
        else:
            continue
        above = 1 if sys.version_info >= (3, 13) else 0  # (the NULL pushed after it)
        for nxt in ins[j + 1:]:
            if nxt.opname not in _PASSING:
                return False
            pops = _pops(nxt)
            if pops > above + (1 if nxt.opname == "CALL" and sys.version_info < (3, 12)
                               else 0):
                return nxt is call
            above += dis.stack_effect(nxt.opcode, nxt.arg, jump=False)
        return False
    return False


LOG_METHODS = frozenset(("debug", "info", "warning", "error", "critical", "log"))
"""The ``logging.Logger`` methods `thunder_ir.frontend.logged` records."""


def _logs(frame: FrameType, g: dis.Instruction, method: dis.Instruction) -> bool:
    """Whether ``g`` (a ``LOAD_GLOBAL``) then ``method`` load a logging method: one of
    `LOG_METHODS` of a global ``logging.Logger`` or of the ``logging`` module."""
    if method.opname not in ("LOAD_METHOD", "LOAD_ATTR") or method.argval not in LOG_METHODS:
        return False
    if sys.version_info < (3, 12) and bool((g.arg or 0) & 1) != (method.opname == "LOAD_ATTR"):
        return False  # (two entries: NULL and the attribute, or the method and its owner)
    owner = frame.f_globals.get(g.argval, None)
    return isinstance(owner, logging.Logger) or owner is logging


# ---- the swaps


_NUMBERS = (torch.SymInt, torch.SymFloat)
_PLAIN = (str, int, float, bool, type(None))
"""What a ``print`` the program makes may print besides numbers: values whose text is the
same on every call."""


def ours(n: Any) -> bool:
    """Whether ``n`` is a number this trace read from values (an ``.item()``)."""
    return type(n) in (torch.SymInt, torch.SymFloat) and is_item(n)


def record_print(ctx: Any, op: Operation) -> None:
    """Records ``op`` (a ``print_values``) in ``ctx``'s program, among those `prints_last`
    moves to the end."""
    ctx.record(op)
    if _STATE.prints is not None and not ctx.build.in_region():
        _STATE.prints.append(op)


def _value(n: Any) -> Any:
    """The number's value on this call (a Python read: checked on every call)."""
    return float(n) if type(n) is torch.SymFloat else int(n)


def _user_frame() -> FrameType | None:
    """The frame that called the swapped method (past this module's `print`), where it is
    user code being traced."""
    if not tracing_now():
        return None
    f: FrameType = caller(2)
    return f if from_user_code(f.f_code.co_filename) else None


def _concrete(n: Any) -> Any:
    """The value of a symbolic number user code formats (a guard, as its ``repr`` asks:
    `thunder_ir.frontend.symbolic_numbers`)."""
    return {torch.SymInt: int, torch.SymFloat: float}.get(type(n), bool)(n)


def _format(original: Callable[[Any, str], str]) -> Callable[[Any, str], str]:
    def __format__(self: Any, spec: str) -> str:
        f = _user_frame()
        if f is None:
            return original(self, spec)
        if in_user_code() and ours(self) and printed_only(f):
            texts = placeholders()
            texts.append((self, spec, "format"))
            return _MARK.format(len(texts) - 1)
        return format(_concrete(self), spec)  # (eager's text of this call's number)

    __format__.__wrapped__ = original  # type: ignore[attr-defined]
    return __format__


def _str(original: Callable[[Any], str]) -> Callable[[Any], str]:
    def __str__(self: Any) -> str:
        f = _user_frame()
        if f is None:
            return original(self)
        if in_user_code() and ours(self) and printed_only(f):
            texts = placeholders()
            texts.append((self, "", "str"))
            return _MARK.format(len(texts) - 1)
        return repr(_concrete(self))  # (as the symbolic number's repr answers user code)

    __str__.__wrapped__ = original  # type: ignore[attr-defined]
    return __str__


def pieces(text: str, texts: list[tuple[Any, str, str]], numbers: list[Any]) -> list[Any]:
    """``text`` split at its placeholders: literal pieces and ``("n", k, spec, how)``."""
    out: list[Any] = []
    rest = text
    while _OPEN in rest:
        before, _, tail = rest.partition(_OPEN)
        k, _, rest = tail.partition(_CLOSE)
        if before:
            out.append(before)
        number, spec, how = texts[int(k)]
        numbers.append(number)
        out.append(("n", len(numbers) - 1, spec, how))
    if rest:
        out.append(rest)
    return out


def _concrete_text(text: str) -> str:
    """``text`` with each placeholder replaced by this call's text (values checked)."""
    texts = placeholders()
    numbers: list[Any] = []
    parts = pieces(text, texts, numbers)
    return "".join(p if isinstance(p, str) else (
        format(_value(numbers[p[1]]), p[2]) if p[3] == "format" else str(_value(numbers[p[1]])))
        for p in parts)


def holds(a: Any, traced: Callable[[Any], bool], depth: int = 0) -> bool:
    """Whether ``traced(a)``, or ``a`` holds such a value (in a tuple, list, set or dict,
    their subclasses too)."""
    if traced(a):
        return True
    if depth > 8:
        return False
    if isinstance(a, (tuple, list, set, frozenset)):
        return any(holds(b, traced, depth + 1) for b in a)
    if isinstance(a, dict):
        return any(holds(b, traced, depth + 1) for kv in a.items() for b in kv)
    return False


def _printable(a: Any) -> bool:
    """Whether the program can print ``a`` each call: plain values, numbers, traced tensors
    and tuples/lists of them."""
    if type(a) in _PLAIN or type(a) in _NUMBERS or is_proxy(a):
        return True
    return type(a) in (tuple, list) and all(_printable(b) for b in a)


def _repr_pieces(a: Any, numbers: list[Any]) -> list[Any]:
    """The pieces of ``repr(a)`` (a tuple or list's items' reprs, each traced tensor and
    number this call's, rendered by the program)."""
    if type(a) in _NUMBERS or is_proxy(a):
        numbers.append(a)
        return [("n", len(numbers) - 1, "", "repr")]
    if type(a) in (tuple, list):
        out: list[Any] = ["(" if type(a) is tuple else "["]
        for k, b in enumerate(a):
            out += ([", "] if k else []) + _repr_pieces(b, numbers)
        out.append(",)" if type(a) is tuple and len(a) == 1 else
                   ")" if type(a) is tuple else "]")
        return out
    return [repr(a)]


def _refuse(why: str) -> None:
    """A clear error naming the user's line that called ``print``."""
    f = caller(2)
    raise ThunderTraceError(f"{f.f_code.co_filename}:{f.f_lineno}: {why}")


_STREAMS = ("stdout", "stderr")


def _print(original: Callable[..., None]) -> Callable[..., None]:
    def print(*args: Any, sep: Any = " ", end: Any = "\n", file: Any = None,
              flush: bool = False) -> None:
        if not tracing_now() or not in_user_code() or not from_user_code(
                caller(1).f_code.co_filename) or not all(
                type(s) in (str, type(None)) for s in (sep, end)):
            return original(*args, sep=sep, end=end, file=file, flush=flush)
        tensors = any(holds(a, is_proxy) for a in args)
        numbered = not tensors and all(_printable(a) for a in args) and any(
            type(a) in (tuple, list) and holds(a, ours) for a in args)  # (a .tolist())
        tensors = tensors or numbered
        if tensors and not all(_printable(a) for a in args):
            _refuse("print of a traced tensor inside a "
                    f"{next(type(a).__name__ for a in args if not _printable(a))}: only "
                    "tensors, numbers, text and tuples/lists of them are printed each call")
        if not tensors and not all(type(a) in _PLAIN or type(a) in _NUMBERS for a in args):
            return original(*args, sep=sep, end=end, file=file, flush=flush)
        stream = next((n for n in _STREAMS if file is getattr(sys, n)), None)
        if file is None:
            stream = "stdout"
        if tensors and not numbered and (stream is None or any(
                type(s) is str and _OPEN in s for s in (sep, end))):
            _refuse("print of a traced tensor to a file other than sys.stdout/sys.stderr "
                    "(or with a formatted number in sep/end): the program cannot print it "
                    "each call")
        if tensors and any(getattr(t, "requires_grad", False) for t in _proxies(args)):
            _refuse("print of a traced tensor that requires grad: eager's text names its "
                    "grad_fn (or requires_grad=True), which the program cannot reproduce; "
                    "print t.detach() (or t.item())")
        if stream is None or any(type(s) is str and _OPEN in s for s in (sep, end)):
            args = tuple(_concrete_text(a) if type(a) is str else
                         str(_value(a)) if type(a) in _NUMBERS else a for a in args)
            return original(*args, sep=sep, end=end, file=file, flush=flush)
        ctx = current()
        texts = placeholders()
        numbers: list[Any] = []
        template: list[tuple[Any, ...]] = []
        for a in args:
            if type(a) in _NUMBERS:  # (a size too: each call's, no guard)
                numbers.append(a)
                template.append((("n", len(numbers) - 1, "", "str"),))
            elif type(a) is str:
                template.append(tuple(pieces(a, texts, numbers)))
            elif tensors and type(a) not in _PLAIN:  # (str of a tensor is its repr)
                template.append(tuple(_repr_pieces(a, numbers)))
            else:
                template.append((str(a),))
        refs = [OperandRef(k) for k in range(len(numbers))]
        kwargs = {"sep": sep, "end": end, "flush": flush, "file": stream}
        op = make_call(PRINT, [ctx.value_of(n) for n in numbers],
                       [tuple(template), *refs], kwargs, result_types=[])
        record_print(ctx, op)
        return None

    print.__wrapped__ = original  # type: ignore[attr-defined]
    return print


def _proxies(a: Any) -> Iterator[Any]:
    """The traced tensors ``a`` holds (in tuples and lists)."""
    if is_proxy(a):
        yield a
    elif type(a) in (tuple, list):
        for b in a:
            yield from _proxies(b)


@contextlib.contextmanager
def prints_last() -> Iterator[None]:
    """Around user code being traced: when it returns, the prints it recorded move to the
    end of the program (in their order), after every check a later line speculated, so a
    call whose check fails (and runs again another way) has printed nothing yet."""
    saved = _STATE.prints
    mine: list[Operation] = []
    _STATE.prints = mine
    try:
        yield
        block: Block = current().build.program.block
        for op in mine:
            if op.parent_block() is block:
                op.detach()
                block.add_op(op)
    finally:
        _STATE.prints = saved
        _STATE.texts = _STATE.trace = None


TRACING_CONTEXTS.append(prints_last)
WRAPPERS.add(__file__)  # (user code's print and text of a number reach torch's through us)


@while_traced
def _swaps() -> list[Swap]:
    return [(builtins, "print", _print),
            *((cls, "__format__", _format) for cls in (torch.SymFloat, torch.SymInt)),
            *((cls, "__str__", _str) for cls in (torch.SymFloat, torch.SymInt))]


__all__ = ["LOG_METHODS", "MARK_OPEN", "PRINT", "holds", "ours", "pieces", "placeholders",
           "printed_only", "record_print"]
