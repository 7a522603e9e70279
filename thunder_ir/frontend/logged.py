"""``logging`` calls of traced values: each call logs its own values, as eager does.

Eager's ``logger.info("loss %s", loss)`` in ``forward`` logs every call. A trace would run
it once, with a tracing proxy in the record. So while user code is traced, a call of a
``logging.Logger``'s ``debug``/``info``/``warning``/``error``/``critical``/``log`` (the
module's ``logging.info(...)`` too) whose message or arguments hold a traced tensor (in
tuples and lists too) or a number read from values (an ``.item()``:
`thunder_ir.frontend.printing`) records a ``tir.print_values`` with ``log=`` in the program:
each call, after the program's checks and in order with its prints, makes the record at
run time as ``Logger._log`` does (the logger's level checked then, its handlers and
formatting eager's; the file, line and function the user's call's), with that call's tensors
and numbers. Anything else such a call is given (``exc_info``, ``extra``, ``stack_info``,
``stacklevel``, an argument of another type holding a traced value) is refused naming
the line. A call with no traced value runs as it is, at trace time (its record's line
the user's), once per program, where eager logs on every call: recording it would log
every call where a caching wrapper (Hugging Face's ``logger.warning_once``, an
``lru_cache``) logs once in eager, and this wrapper cannot tell them apart.

An f-string (``format``, ``str``) of an ``.item()`` given straight to such a call of a
global logger (``logger.info(f"{l:.3f}")``, ``logging.info(...)``) is each call's text, as
for ``print`` (`thunder_ir.frontend.printing.printed_only`); given otherwise (a logger
reached through ``self``, the text stored first) it is this call's text, its value checked
on every call.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call
from thunder_ir.frontend.context import current, tracing_now
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.printing import (
    MARK_OPEN,
    PRINT,
    holds,
    ours,
    pieces,
    placeholders,
    record_print,
)
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.symbolic_numbers import WRAPPERS, from_user_code
from thunder_ir.frontend.takeover import Swap, in_user_code, while_traced

_PLAIN = (str, int, float, bool)
_METHODS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
            "error": logging.ERROR, "critical": logging.CRITICAL}


def _traced(a: Any) -> bool:
    """Whether ``a`` is, or holds in tuples, lists, sets or dicts, a traced tensor or
    number."""
    return holds(a, lambda b: is_proxy(b) or ours(b) or (type(b) is str and MARK_OPEN in b))


def _spec(a: Any, values: list[Any]) -> Any:
    """``a`` as the program rebuilds it each call (`thunder_ir.runtime.printing.rebuild`),
    or None where it cannot."""
    if is_proxy(a) or ours(a):
        values.append(a)
        return ("v", len(values) - 1)
    if a is None:
        return ("none",)
    if type(a) is str and MARK_OPEN in a:  # (an f-string of a number: `printed_only`)
        return ("text", tuple(pieces(a, placeholders(), values)))
    if type(a) in _PLAIN:
        return ("c", a)
    if type(a) in (tuple, list):
        items = [_spec(b, values) for b in a]
        if any(i is None for i in items):
            return None
        return ("tuple" if type(a) is tuple else "list", tuple(items))
    return None


def _user_frame() -> FrameType | None:
    """The user's frame that called the logging method (past logging's and this file)."""
    f: FrameType | None = sys._getframe(2)
    here = os.path.normcase(__file__)
    while f is not None and os.path.normcase(f.f_code.co_filename) in (
            here, os.path.normcase(logging.__file__)):
        f = f.f_back
    return f


def _through(original: Callable[..., Any], logger: logging.Logger, a: tuple[Any, ...],
             kw: dict[str, Any]) -> Any:
    """The logging method itself, its record naming the frame past this wrapper's (two
    frames: the swapped method's and this one's)."""
    kw = {**kw, "stacklevel": kw.get("stacklevel", 1) + 2}
    return original(logger, *a, **kw)


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: logging.Logger, *a: Any, **kw: Any) -> Any:
        level, rest = (a[0], a[1:]) if name == "log" and a else (_METHODS.get(name), a)
        if not tracing_now() or not in_user_code() or not rest or type(level) is not int:
            return _through(original, self, a, kw)
        f = _user_frame()
        if f is None or not from_user_code(f.f_code.co_filename):
            return _through(original, self, a, kw)
        traced = any(_traced(x) for x in rest)
        values: list[Any] = []
        specs = [_spec(x, values) for x in rest]
        if not traced:  # (at trace time: see the module doc)
            return _through(original, self, a, kw)
        line = f"{f.f_code.co_filename}:{f.f_lineno}"
        if kw:
            raise ThunderTraceError(
                f"{line}: logging of a traced value with {', '.join(sorted(kw))}: the "
                "program logs each call's values only for a message and arguments")
        if any(s is None for s in specs):
            raise ThunderTraceError(
                f"{line}: logging of a traced value inside an argument of a type other "
                "than a tensor, a number, text or tuples/lists of them")
        ctx = current()
        log = (self.name if self is not logging.root else "", level, f.f_code.co_filename,
               f.f_lineno, f.f_code.co_name)
        op = make_call(PRINT, [ctx.value_of(v) for v in values],
                       [tuple(specs), *(OperandRef(k) for k in range(len(values)))],
                       {"log": log}, result_types=[])
        record_print(ctx, op)
        return None

    method.__wrapped__ = original  # type: ignore[attr-defined]
    return method


WRAPPERS.add(__file__)


@while_traced
def _swaps() -> list[Swap]:
    return [(logging.Logger, n, functools.partial(_wrap, n)) for n in (*_METHODS, "log")]


__all__: list[str] = []
