"""``torch.seed()`` while traced: a nondeterministic seed drawn by the program on every call.

Eager's ``torch.seed()`` reseeds torch's generators with a nondeterministic seed and
returns it; models keep it to replay their dropout later (Reformer's reversible layers:
``self.attention_seed = int(torch.seed() % sys.maxsize)``, then
``torch.manual_seed(self.attention_seed)``, again in the backward). A trace must not draw
it: the program would reseed with that one number on every call.

So the traced call records ``tir.draw_seed()`` (an op with effects, in program order: it
calls ``torch.seed()``, so the generators are reseeded as eager's, and returns the seed as
a 0-d ``uint64`` tensor) and its ``.item()``, a new unbacked ``SymInt`` of the
compilation's symbol table (a trace without one asks for one: `NeedsSymbols`), as
``.item()`` of an integer tensor is (`thunder_ir.frontend.unbacked.item`). User code's
arithmetic on it stays symbolic; ``torch.manual_seed`` of it reseeds with each call's
number; stored on a module, the epilogue writes each call's Python ``int``.

``int()`` of such a number must return an ``int``, which a trace does not have. Where the
caller stores the result on a module at once (``self.seed = int(torch.seed() % m)``:
the next instructions load the module and ``STORE_ATTR``), ``int()`` notes it and the
module's ``__setattr__`` (wrapped while traced) stores the symbolic number instead, as
eager would store that ``int``; the module then holds each call's number. Anywhere else
an ``int()`` of a seed is refused naming the line (the program would keep one seed), and
so is one a module class's own ``__setattr__`` kept from ``nn.Module.__setattr__``
(checked when the trace ends: `stored_checked`).

A generator object's own ``seed()`` / ``manual_seed()`` (``torch.default_generator``,
``torch.cuda.default_generators[i]``: Reformer's path where CUDA is present) are methods
of a C type that cannot be taken over: they would reseed once, at trace time. A trace
after which a default generator's seed changed is refused (`generators_unseeded`).
"""

from __future__ import annotations

import contextlib
import dis
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch

from thunder_ir.dialects import symbols
from thunder_ir.dialects.torch import make_call, runtime_callee
from thunder_ir.dialects.types import tensor_type
from thunder_ir.frontend import int_sizes, unbacked
from thunder_ir.frontend.context import current, tracing_now
from thunder_ir.frontend.errors import (
    NeedsSymbols,
    Refused,
    ThunderTraceError,
    skip,
    speculating_sizes,
    user_location,
    where,
)
from thunder_ir.frontend.table import TRACING_CONTEXTS
from thunder_ir.frontend.takeover import Swap, in_user_code, take_over, while_traced

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext


def _seed(ctx: TraceContext) -> Any:
    """``torch.seed()`` / ``torch.random.seed()`` while traced (see the module doc)."""
    ctx.loc = user_location()
    if ctx.build.in_region():
        raise Refused(f"{where(ctx.loc)}: torch.seed() inside a traced custom backward is "
                      "not supported")
    if symbols.current() is None:
        if speculating_sizes():  # (the compile with a symbol table failed)
            raise ThunderTraceError(
                f"{where(ctx.loc)}: torch.seed() draws a new seed on every call, which the "
                "program computes as an unbacked symbol, but this call's compile with "
                "symbols failed (thunder_ir.compile_status(fn)['static'] says why)")
        raise NeedsSymbols(f"{where(ctx.loc)}: torch.seed() draws a new number each call")
    t = tensor_type((), torch.uint64, "cpu")
    (drawn,) = ctx.record(make_call(runtime_callee("draw_seed"), [], [], result_types=[t]))
    n = unbacked.item(ctx, ctx.wrap(drawn), True)
    ctx.build.counts[("seed", str(n.node.expr))] = True
    return n


@dataclass
class _Pending:
    """An ``int()`` of ``number`` returned ``value`` for the ``STORE_ATTR`` at ``offset``
    of ``frame`` (``float()`` of a tensor: a float ``value``); ``what``: the number's
    origin, for the refusal."""

    frame: FrameType
    offset: int
    value: int | float
    number: Any
    where: str
    what: str = "torch.seed()"


class _State(threading.local):
    pending: _Pending | None = None


_STATE = _State()


def is_seed(n: Any) -> bool:
    """Whether ``n`` is a symbolic number this thread's trace computed from a traced
    ``torch.seed()``."""
    if not isinstance(n, torch.SymInt) or not tracing_now():
        return False
    counts = current().build.counts
    return any(("seed", str(s)) in counts for s in n.node.expr.free_symbols)


_LOADS = frozenset(("LOAD_FAST", "LOAD_DEREF", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"))


def _stored_on(frame: FrameType) -> tuple[int, Any] | None:
    """Where the call ``frame`` is in stores its result: the offset of the ``STORE_ATTR``
    that takes it next and the object it stores on (loaded by name just before), or
    None."""
    after = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti
             and i.opname not in ("CACHE", "EXTENDED_ARG", "NOP")]
    if len(after) < 2 or after[0].opname not in _LOADS or after[1].opname != "STORE_ATTR":
        return None
    name = after[0].argval
    owner = frame.f_locals.get(name, _MISSING)
    return None if owner is _MISSING else (after[1].offset, owner)


_MISSING = object()


def _user_frame() -> FrameType | None:
    f: Any = sys._getframe(2)
    while f is not None and skip(f.f_code.co_filename):
        f = f.f_back
    return f  # type: ignore[no-any-return]


def _check_stored() -> None:
    """Refuses an ``int()`` of a seed whose result was not stored on the module through
    ``nn.Module.__setattr__`` (a class's own ``__setattr__`` that bypasses it): the
    module would keep the ``int`` the trace returned."""
    p = _STATE.pending
    if p is not None:
        _STATE.pending = None
        raise Refused(f"{p.where}: a number computed from {p.what} is stored "
                      "on a module whose __setattr__ does not reach nn.Module.__setattr__: "
                      "the program would keep this call's value")


@contextlib.contextmanager
def stored_checked() -> Iterator[None]:
    """Around user code being traced: every ``int()`` of a seed was stored as its number
    (`_check_stored`), checked when the trace ends."""
    _STATE.pending = None
    ok = False
    try:
        yield
        ok = True
    finally:
        if ok:
            _check_stored()
        _STATE.pending = None


TRACING_CONTEXTS.append(stored_checked)


def _initial_seeds() -> tuple[int, ...]:
    """The seeds torch's default generators were last seeded with (CUDA's where CUDA is
    initialized)."""
    seeds = [torch.default_generator.initial_seed()]
    if torch.cuda.is_initialized():
        seeds += [g.initial_seed() for g in torch.cuda.default_generators]
    return tuple(seeds)


@contextlib.contextmanager
def generators_unseeded() -> Iterator[None]:
    """Around user code being traced: a default generator reseeded through its own methods
    (``torch.default_generator.seed()``, Reformer's CUDA path
    ``torch.cuda.default_generators[i].seed()``: methods of a C type, which cannot be taken
    over) was reseeded once, at trace time, and the program would keep that seed: refused
    when the trace ends (the CPU generator's state is put back by the tracer)."""
    before = _initial_seeds()
    yield
    if _initial_seeds()[:len(before)] != before:
        raise Refused(
            f"{where(user_location())}: while this call was traced, a torch generator was "
            "reseeded through its own methods (Generator.seed() or Generator.manual_seed() on "
            "torch.default_generator or torch.cuda.default_generators[i]): the program would "
            "keep that one seed on every call. Call torch.seed() or torch.manual_seed(), "
            "which the program runs on every call, or seed outside the jitted function.")


TRACING_CONTEXTS.append(generators_unseeded)


def _int_of_seed(n: torch.SymInt) -> int:
    """``int(n)`` of a seed's number, from user code (see the module doc)."""
    _check_stored()
    frame = _user_frame()
    at = _stored_on(frame) if frame is not None else None
    if at is None or not isinstance(at[1], torch.nn.Module):
        raise Refused(
            f"{where(user_location())}: int() of a number computed from torch.seed() is "
            "supported where it is stored on a module at once (self.seed = int(...)): "
            "used otherwise, the program would keep this call's seed")
    assert frame is not None
    _STATE.pending = _Pending(frame, at[0], 0, n, where(user_location()))
    return 0


def stored_at_once(number: Callable[[], Any], placeholder: int | float, what: str) -> bool:
    """Where user code's ``int()`` / ``float()`` being traced now (of ``number()``, a
    symbolic number this trace computes from ``what``, made only then) stores its result
    on a module at once (``self.count = int(n.item())``: the next instructions load the
    module and ``STORE_ATTR``): notes it, so that the module's ``__setattr__`` (wrapped
    while traced) stores the number in place of ``placeholder``, the value the caller
    returns; the module then holds each call's number, with no speculation. False
    otherwise, or where ``number()`` is None (it cannot be made)."""
    _check_stored()
    frame = _user_frame()
    at = _stored_on(frame) if frame is not None else None
    if at is None or not isinstance(at[1], torch.nn.Module):
        return False
    assert frame is not None
    made = number()
    if made is None:
        return False
    _STATE.pending = _Pending(frame, at[0], placeholder, made, where(user_location()), what)
    return True


def is_item(n: Any) -> bool:
    """Whether ``n`` is a symbolic number of this thread's trace made only of unbacked
    symbols the trace computed from values (``.item()``, a count)."""
    if not isinstance(n, torch.SymInt | torch.SymFloat) or not tracing_now():
        return False
    counts = current().build.counts
    names = n.node.expr.free_symbols
    return bool(names) and all(("of", str(s)) in counts for s in names)


def _int_wrapper(original: Any) -> Any:
    def __int__(self: Any) -> int:
        if in_user_code() and is_seed(self):
            return _int_of_seed(self)
        if in_user_code() and is_item(self) and stored_at_once(lambda: self, 0, ".item()"):
            return 0
        return original(self)  # type: ignore[no-any-return]

    return __int__


def _setattr_wrapper(original: Any) -> Any:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        p = _STATE.pending
        if p is not None and type(value) is type(p.value) and value == p.value:
            f: Any = sys._getframe(1)
            while f is not None and f is not p.frame:
                f = f.f_back
            if f is not None and f.f_lasti == p.offset:
                _STATE.pending = None
                value = p.number
        original(self, name, value)

    return __setattr__


@while_traced
def _swaps() -> list[Swap]:
    return [(torch.nn.Module, "__setattr__", _setattr_wrapper),
            (torch.SymInt, "__int__", _int_wrapper)]


for _owner in (torch, torch.random):
    take_over(_owner, "seed", _seed)
int_sizes.WRAPPERS.add(__file__)  # (its ``__int__`` wrapper calls int_sizes')

__all__ = ["generators_unseeded", "is_item", "is_seed", "stored_at_once", "stored_checked"]
