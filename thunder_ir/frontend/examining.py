"""Tracing on past what stops a compile: the notebook of `thunder_ir.examine`.

A compile stops at the first data-dependent read (``t.numpy()``, ``t.data_ptr()``) or refused
construct (NumPy arithmetic on a tensor, an op torch cannot run on meta tensors), so a model
with three such places takes three runs to find them. While `examining` is open, the
trace mode (`thunder_ir.frontend.context.TraceMode`) hands such an error to `went_on`
instead: it is noted, with the user's line, and the call that raised is run on this
call's real values (the ops it depends on, run by the notebook's ``concrete``, as a
speculated condition's are: `thunder_ir.frontend.speculation.concrete`), so the trace goes
on with its result; the program so traced is for the report only, never run. Where the
call cannot be run so, the error stands and the trace stops there.

Nothing here runs in a jitted call: without an open notebook, `went_on` re-raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunder_ir.frontend.errors import (
    DataDependentError,
    NeedsSymbols,
    ThunderTraceError,
    skip,
)
from thunder_ir.frontend.proxy import is_proxy


@dataclass
class Noted:
    """One place a compile would stop at.

    Attributes:
        where: the user's ``file:line``.
        message: the error a compile raises there (its first line names the line too).
        data_dependent: a read of a traced tensor's value (else a refused construct).
        went_on: the trace went on past it (the call ran on this call's real values).
    """

    where: str
    message: str
    data_dependent: bool
    went_on: bool


@dataclass
class Notebook:
    """What one examination collects (`examining`).

    Attributes:
        concrete: ``concrete(ctx, value)``: a traced value's value on this call.
        noted: each place, in trace order, once (a compile that traces twice, symbolic
            then static, meets them again).
    """

    concrete: Callable[[Any, Any], Any]
    noted: list[Noted] = field(default_factory=list)
    trace: Any = None
    """The last call trace begun (its `TraceContext`): what a trace that stopped had
    recorded."""

    def note(self, item: Noted) -> None:
        """Adds ``item`` unless the same place and message was noted before."""
        if not any(n.where == item.where and n.message == item.message for n in self.noted):
            self.noted.append(item)


_NOTEBOOK: contextvars.ContextVar[Notebook | None] = contextvars.ContextVar(
    "thunder_ir_examining", default=None)


@contextlib.contextmanager
def examining(concrete: Callable[[Any, Any], Any]) -> Iterator[Notebook]:
    """Opens a notebook: while it is open, traces go on past data-dependent reads and
    refused calls where they can (`went_on`)."""
    book = Notebook(concrete)
    token = _NOTEBOOK.set(book)
    try:
        yield book
    finally:
        _NOTEBOOK.reset(token)


def notebook() -> Notebook | None:
    """The open notebook, or None (a jitted call: errors raise)."""
    return _NOTEBOOK.get()


def tracing(ctx: Any) -> None:
    """A call trace begins with ``ctx``: the open notebook keeps it (else nothing)."""
    book = _NOTEBOOK.get()
    if book is not None:
        book.trace = ctx


def went_on(ctx: Any, error: ThunderTraceError, func: Any, args: Any, kwargs: Any) -> Any:
    """With a notebook open: notes ``error`` (raised by the trace mode's handling of
    ``func``) and returns ``func`` run on this call's real values; without one, or where
    it cannot run so (a `NeedsSymbols`, which the compiler answers by tracing with a
    symbol table; a call whose inputs cannot be computed), raises ``error``."""
    book = _NOTEBOOK.get()
    if book is None or isinstance(error, NeedsSymbols) or not _called_by_user(sys._getframe(2)):
        raise error
    where = str(getattr(ctx, "loc", "") or "")
    data = isinstance(error, DataDependentError)
    first = str(error).split("\n", 1)[0]
    try:
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        real = [book.concrete(ctx, x._value) if is_proxy(x) else x for x in leaves]
        a, k = pytree.tree_unflatten(real, spec)
        with torch.no_grad():
            out = func(*a, **k)
    except Exception:
        book.note(Noted(where, first, data, went_on=False))
        raise error from None
    book.note(Noted(where, first, data, went_on=True))
    return out


def _called_by_user(f: Any) -> bool:
    """Whether the torch call the trace mode was handling (``f``: the frame that called
    it) was made by the user's code, not by thunder_ir's (a handler tracing through
    torch's Python under autocast, which falls back to an opaque call on an error): the
    first frame outward that is neither torch's nor the standard library's is not
    thunder_ir's."""
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if name == "thunder_ir" or name.startswith("thunder_ir."):
            return False
        if not skip(f.f_code.co_filename):
            return True
        f = f.f_back
    return False


__all__ = ["Notebook", "Noted", "examining", "notebook", "tracing", "went_on"]
