"""``replaces=``: calls to a Python function, diverted to an operator while tracing."""

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from thunder_ir.extend.symbols import Symbol, diversion_suspended
from thunder_ir.frontend.context import TraceContext, current, tracing_now
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.table import HANDLERS, TRACING_CONTEXTS
from thunder_ir.frontend.takeover import Swap, while_traced


@dataclass
class _Replacement:
    """A Python function whose calls are diverted to an operator while tracing."""

    target: Callable[..., Any]
    symbol: Symbol
    original: Callable[..., Any]  # runs the function's own code (never diverted)
    code: types.CodeType | None = None  # the function's own code (Python functions)
    trampoline: types.CodeType | None = None


REPLACEMENTS: dict[int, _Replacement] = {}
_KEYS = itertools.count()


def _divert(key: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where a replaced function's trampoline goes: the operator while tracing."""
    r = REPLACEMENTS[key]
    if diversion_suspended() or not tracing_now():
        return r.original(*args, **kwargs)
    return r.symbol(*args, **kwargs)


def _trampoline(fn: types.FunctionType, key: int, symbol_id: str) -> types.CodeType:
    """Code forwarding every call to `_divert`, assignable to ``fn.__code__`` (it declares
    the same free variables, never reading them)."""
    free = fn.__code__.co_freevars
    name = fn.__name__ if fn.__name__.isidentifier() else "replaced"
    lines = ["def _outer():"]
    lines += [f"    {v} = None" for v in free]
    lines.append(f"    def {name}(*args, **kwargs):")
    if free:
        lines.append(f"        if 0:\n            ({', '.join(free)},)")
    lines.append("        import thunder_ir.extend.replaces as _thunder_ir_extend")
    lines.append(f"        return _thunder_ir_extend._divert({key}, args, kwargs)")
    lines.append(f"    return {name}")
    scope: dict[str, Any] = {}
    filename = f"<thunder_ir: {fn.__qualname__} diverted to {symbol_id}>"
    exec(compile("\n".join(lines), filename, "exec"), scope)
    code: types.CodeType = scope["_outer"]().__code__
    if len(code.co_freevars) != len(free):
        raise TypeError(f"cannot divert {fn.__qualname__}: unsupported closure")
    return code.replace(co_freevars=free, co_name=fn.__code__.co_name,
                        co_qualname=fn.__code__.co_qualname)


def divert_calls(target: Any, symbol: Symbol) -> None:
    """Registers the diversion of ``target`` (a function, method or torch callable)."""
    fn = getattr(target, "__func__", target)  # bound and class methods: their function
    for key, r in list(REPLACEMENTS.items()):
        if r.target is fn:
            del REPLACEMENTS[key]
    key = next(_KEYS)
    if isinstance(fn, types.FunctionType):
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                      fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__dict__.update(fn.__dict__)
        REPLACEMENTS[key] = _Replacement(fn, symbol, original, fn.__code__,
                                          _trampoline(fn, key, symbol.id))
    elif callable(fn):  # a builtin torch function: divert it in the tracer's handler table
        REPLACEMENTS[key] = _Replacement(fn, symbol, fn)
    else:
        raise TypeError(f"replaces= expects a function, got {target!r}")


def _handler_for(r: _Replacement, previous: Any) -> Callable[..., Any]:
    def handler(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
        if diversion_suspended():
            if previous is not None:
                return previous(ctx, *args, **kwargs)
            return fallback(ctx, r.target, args, kwargs)
        return r.symbol(*args, **kwargs)

    return handler


def _code_swaps() -> list[Swap]:
    """Each replaced Python function's code, swapped for its trampoline while any thread
    traces (a call outside tracing, in any thread, goes through `_divert` to the
    function's own code)."""
    return [(r.target, "__code__", _constant(r.trampoline)) for r in list(REPLACEMENTS.values())
            if r.trampoline is not None]


def _constant(value: Any) -> Callable[[Any], Any]:
    return lambda _: value


while_traced(_code_swaps)


@contextlib.contextmanager
def _diversions() -> Iterator[None]:
    """Entered around user code while it is traced (`TRACING_CONTEXTS`): replaced Python
    functions run their trampolines (`_code_swaps`), and replaced torch callables get a
    handler in this trace's own table (`TraceContext.handlers`), so that no other trace
    and no other thread sees it."""
    ctx = current()
    for r in list(REPLACEMENTS.values()):
        if r.trampoline is None:
            ctx.handlers[r.target] = _handler_for(r, HANDLERS.get(r.target))
    yield


TRACING_CONTEXTS.append(_diversions)
