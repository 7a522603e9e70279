"""torch's Python-level functions that no TorchFunctionMode sees, taken over while tracing.

``Function.apply``, the generator's state functions (``torch.manual_seed``,
``torch.get_rng_state``, ``torch.set_rng_state``) and ``torch.compiler.is_compiling``
(true while this thread traces, as under torch.compile) never reach the tracer's
``TorchFunctionMode``: run as they are, they would act once, at trace time, instead of on
every call. `take_over` replaces such a function, once, by a wrapper that hands the call to
the tracer's handler when user code in this thread is being traced (the tracer's mode is
on the stack: not during its own meta runs), and runs the original otherwise.

Nothing is changed when thunder_ir is imported, nor after a trace: every replacement here
and in the other modules that register one (`while_traced`: the higher-order ops' hand-off,
``vmap``, the extension API's diverted functions, the symbolic numbers' text) is put in
place by one installer, `patched`, while some thread traces user code (counted: the first
trace in installs, the last one out restores torch's own objects), so that code outside
tracing, torch.compile included, always meets torch as it is.

The RNG state functions become ``torch.call`` ops with effects, in program order, so a
function that seeds or saves and restores the generator (``torch.testing``'s
``freeze_rng_state``, ``torch.random.fork_rng``) draws what eager draws on every call.
Python's ``random`` functions (``random.random()``, ``random.choice``...) raise a clear
error naming the line: their draw would be frozen into the program (code that imported
them by name, ``from random import random``, holds the originals and is not seen). They
are wrapped only while a trace runs. ``torch.seed()`` (a nondeterministic seed) is drawn
by the program on every call (`thunder_ir.frontend.seeds`); ``torch.manual_seed`` of the
number it gives reseeds with each call's.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import type_of_tensor
from thunder_ir.frontend import python_floats, symbolic_minmax, symbolic_numbers
from thunder_ir.frontend.context import TraceContext, current, tracing_now
from thunder_ir.frontend.errors import ThunderTraceError, user_location, where
from thunder_ir.frontend.table import TRACING_CONTEXTS

Handler = Callable[..., Any]

Swap = tuple[Any, str, Callable[[Any], Any]]
"""``(owner, name, make)``: ``owner.name`` becomes ``make(raw)`` while traced, ``raw`` being
what ``owner`` holds there (a class's own ``__dict__`` entry: a classmethod stays one)."""

_FACTORIES: list[Callable[[], list[Swap]]] = []
_TAKEN: list[tuple[Any, str, Handler]] = []


def while_traced(factory: Callable[[], list[Swap]]) -> Callable[[], list[Swap]]:
    """Registers ``factory``, whose swaps `patched` puts in place while any thread traces
    (asked at each install: what it lists may change between traces)."""
    _FACTORIES.append(factory)
    return factory


def in_user_code() -> bool:
    """Whether this thread traces user code now (the tracer's mode is on the stack: not
    during its own meta runs)."""
    return tracing_now() and torch._C._len_torch_function_stack() > 0


_in_user_code = in_user_code


def take_over(owner: Any, name: str, handler: Handler) -> None:
    """While traced, ``owner.name`` (a module's function, or a classmethod) is a wrapper
    that calls ``handler(ctx, *args, **kwargs)`` while user code is traced and the original
    otherwise (idempotent)."""
    if not any(o is owner and n == name for o, n, _ in _TAKEN):
        _TAKEN.append((owner, name, handler))


def _taker(handler: Handler, raw: Any) -> Any:
    if isinstance(raw, classmethod):
        original = raw.__func__

        def method(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if not _in_user_code():
                return original(cls, *args, **kwargs)
            return handler(current(), cls, *args, **kwargs)

        functools.update_wrapper(method, original)
        return classmethod(method)

    @functools.wraps(raw)
    def function(*args: Any, **kwargs: Any) -> Any:
        if not _in_user_code():
            return raw(*args, **kwargs)
        return handler(current(), *args, **kwargs)

    return function


@while_traced
def _taken() -> list[Swap]:
    return [(o, n, functools.partial(_taker, h)) for o, n, h in _TAKEN]


_MISSING = object()
_LOCK = threading.Lock()
_DEPTH = [0]
_SAVED: list[tuple[Any, str, Any, bool]] = []


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """Every registered swap in place while open in any thread (see the module doc)."""
    with _LOCK:
        if _DEPTH[0] == 0:
            for factory in _FACTORIES:
                for owner, name, make in factory():
                    if isinstance(owner, type):  # (an inherited attribute is not its own)
                        own = name in owner.__dict__
                        raw = owner.__dict__[name] if own else getattr(owner, name)
                    else:
                        raw = getattr(owner, name, _MISSING)
                        own = raw is not _MISSING
                    _SAVED.append((owner, name, raw, own))
                    setattr(owner, name, make(raw))
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                for owner, name, raw, own in reversed(_SAVED):
                    if own:
                        setattr(owner, name, raw)
                    else:  # (inherited, or absent: the entry made goes again)
                        delattr(owner, name)
                _SAVED.clear()


def installed() -> bool:
    """Whether the swaps are in place (some thread traces)."""
    return _DEPTH[0] > 0


TRACING_CONTEXTS.insert(0, patched)

# str(n), isinstance(n, int) of a symbolic number in user code: as eager
while_traced(lambda: symbolic_numbers.install(tracing_now))
# arithmetic on a float .item(): Python's, in the program, in eager's order
while_traced(python_floats.swaps)
# builtin max/min of sizes in user code: torch.sym_max/sym_min, no decision
while_traced(symbolic_minmax.swaps)


# --------------------------------------------------------------------------- RNG state


def _record(ctx: TraceContext, callee: str, operands: list[Any], args: list[Any],
            result_types: list[Any]) -> list[Any]:
    ctx.loc = user_location()
    op = make_call(callee, operands, args, result_types=result_types)
    return ctx.record(op)


def _not_user_code(handler: Handler) -> Handler:
    """Runs a handler with the tracer's mode set aside (its own torch calls are not traced)."""

    @functools.wraps(handler)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._C.DisableTorchFunction():
            return handler(*args, **kwargs)

    return run


def _manual_seed(ctx: TraceContext, seed: Any) -> Any:
    if isinstance(seed, torch.SymInt):  # a number the program computes (a traced
        # torch.seed()'s: `thunder_ir.frontend.seeds`): each call's
        _record(ctx, "torch.random.manual_seed", [], [seed], [])
        return torch.default_generator
    if not isinstance(seed, int):
        raise ThunderTraceError(f"{where(ctx.loc)}: torch.manual_seed needs "
                                        f"an int seed while traced, got {type(seed).__name__}")
    _record(ctx, "torch.random.manual_seed", [], [int(seed)], [])
    return torch.default_generator


def _get_rng_state(ctx: TraceContext) -> Any:
    state_type = type_of_tensor(torch.default_generator.get_state())
    (state,) = _record(ctx, "torch.random.get_rng_state", [], [], [state_type])
    return ctx.wrap(state)


def _set_rng_state(ctx: TraceContext, new_state: Any) -> None:
    from thunder_ir.dialects.base import OperandRef

    _record(ctx, "torch.random.set_rng_state", [ctx.value_of(new_state)], [OperandRef(0)], [])


for _owner in (torch, torch.random):
    take_over(_owner, "manual_seed", _not_user_code(_manual_seed))
    take_over(_owner, "get_rng_state", _not_user_code(_get_rng_state))
    take_over(_owner, "set_rng_state", _not_user_code(_set_rng_state))


# --------------------------------------------------------------------------- refused calls
#
# Python's ``random`` functions would draw once, at trace time, and the program would reuse
# the draw: they raise a clear error naming the line (their wrappers, like every swap, are in
# place only while some thread traces, so that torch.compile, which knows these functions by
# identity, never meets them). (torch.func's transforms
# inside traced code are refused by the tracer's mode itself, `TraceMode`.)

_PY_RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle",
              "sample", "gauss", "normalvariate", "getrandbits", "betavariate", "expovariate",
              "triangular", "lognormvariate", "vonmisesvariate", "gammavariate",
              "paretovariate", "weibullvariate", "randbytes", "binomialvariate")


def _refusal(what: str, why: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ThunderTraceError(f"{where(user_location())}: {what} {why}")

    return refuse


_RANDOM_WHY = ("inside a jitted function would draw once, while traced, and the compiled "
               "program would reuse that draw on every call (eager draws on every call). Use "
               "torch's random functions (torch.rand, torch.randint, torch.bernoulli...), "
               "which the program draws on every call, or draw outside the jitted function "
               "and pass the value in.")


_REFUSED: list[tuple[Any, str, Callable[..., Any]]] = [
    *((random, n, _refusal(f"Python's random.{n}()", _RANDOM_WHY)) for n in _PY_RANDOM
      if callable(getattr(random, n, None))),
]


@while_traced
def _refusals() -> list[Swap]:
    return [(o, n, functools.partial(_refusing_wrapper, r)) for o, n, r in _REFUSED]


def _refusing_wrapper(refuse: Callable[..., Any], original: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _in_user_code():
            return refuse(*args, **kwargs)
        return original(*args, **kwargs)

    return wrapper


# --------------------------------------------------------------------------- "compiling?"

# Library code asks `torch.compiler.is_compiling()` and, if so, skips its eager-only checks
# (transformers' data-dependent mask shortcuts: `bool(tensor)` on the attention mask). While
# this thread traces user code the answer is yes, as under torch.compile; other threads,
# and thunder_ir's own handlers, get torch's answer. The function object stays torch's:
# Dynamo recognizes it by identity and folds it to True when torch.compile traces (a
# wrapper in its place would be traced as an unknown call and break the graph), so only
# its code gains the check; torch._dynamo.is_compiling and torch._utils.is_compiling call
# it by attribute.


def _is_compiling_code() -> bool:  # runs with torch.compiler's globals
    if torch.jit.is_scripting():
        return False
    return _is_compiling_flag or _thunder_ir_traces()  # type: ignore[name-defined]  # noqa: F821


@while_traced
def _teach_is_compiling() -> list[Swap]:
    fn = torch.compiler.is_compiling
    if getattr(fn, "__code__", None) is None or "_is_compiling_flag" not in fn.__globals__:
        return []  # another torch: leave it as it is
    home = sys.modules[fn.__module__]  # (the module whose globals the code reads)
    return [(home, "_thunder_ir_traces", lambda _: _in_user_code),
            (fn, "__code__", lambda _: _is_compiling_code.__code__)]


__all__ = ["Swap", "in_user_code", "installed", "patched", "take_over", "while_traced"]
