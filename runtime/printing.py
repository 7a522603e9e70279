"""``print`` of numbers a program computes (`thunder_ir.frontend.printing`): each call
prints its own values, as eager's ``print`` in ``forward`` does."""

from __future__ import annotations

import logging
import sys
from typing import Any


def _piece(piece: Any, numbers: tuple[Any, ...]) -> str:
    """A piece of an argument's text: itself, or number ``k`` as ``format(n, spec)``,
    ``str(n)`` or ``repr(n)`` (``("n", k, spec, how)``)."""
    if isinstance(piece, str):
        return piece
    _, k, spec, how = piece
    n = numbers[k]
    if how == "format":
        return format(n, spec)
    return repr(n) if how == "repr" else str(n)


def rebuild(spec: Any, values: tuple[Any, ...]) -> Any:
    """A logging argument the trace described (`thunder_ir.frontend.logged`) with this
    call's ``values``."""
    kind = spec[0]
    if kind == "v":
        return values[spec[1]]
    if kind == "c":
        return spec[1]
    if kind == "none":
        return None
    if kind == "text":
        return "".join(_piece(p, values) for p in spec[1])
    items = [rebuild(s, values) for s in spec[1]]
    return tuple(items) if kind == "tuple" else items


def _log(specs: Any, values: tuple[Any, ...], log: Any) -> None:
    """``Logger._log`` of this call's message and arguments: the record made now, at the
    user's file, line and function, if the logger is enabled for its level now."""
    name, level, fn, lno, func = log
    logger = logging.getLogger(name or None)
    if not logger.isEnabledFor(level):
        return
    msg, *args = (rebuild(s, values) for s in specs)
    logger.handle(logger.makeRecord(logger.name, level, fn, lno, msg, tuple(args), None,
                                    func, None, None))


def print_values(template: Any, *numbers: Any, sep: Any = " ", end: Any = "\n",
                 flush: bool = False, file: str = "stdout", log: Any = None) -> None:
    """``print(*args, sep=sep, end=end, flush=flush)`` to this call's ``sys.stdout`` (or
    ``sys.stderr``: ``file`` names it), each argument of ``template`` the concatenation of
    its pieces (`_piece`) with this call's ``numbers`` (numbers, or tensors: their
    ``repr``, which is their ``str``). With ``log`` (the logger's name, the level, and the
    user's file, line and function), it is a ``logging`` call instead (`_log`)."""
    if log is not None:
        return _log(template, numbers, log)
    print(*("".join(_piece(p, numbers) for p in arg) for arg in template), sep=sep,
          end=end, flush=flush, file=getattr(sys, file))


__all__ = ["print_values", "rebuild"]
