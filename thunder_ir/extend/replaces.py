"""``replaces=``: calls to a Python function, diverted to an operator while tracing."""

from __future__ import annotations

import contextlib
import itertools
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from thunder_ir.extend.symbols import Symbol, _suspended
from thunder_ir.frontend.context import TraceContext, tracing_now
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.table import HANDLERS, TRACING_CONTEXTS


@dataclass
class _Replacement:
    """A Python function whose calls are diverted to an operator while tracing."""

    target: Callable[..., Any]
    symbol: Symbol
    original: Callable[..., Any]  # runs the function's own code (never diverted)
    code: types.CodeType | None = None  # the function's own code (Python functions)
    trampoline: types.CodeType | None = None
    saved_handler: Any = None


_REPLACEMENTS: dict[int, _Replacement] = {}
_KEYS = itertools.count()
_DIVERTED = [0]  # nesting depth of traces with the diversions in place


def _divert(key: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where a replaced function's trampoline goes: the operator while tracing."""
    r = _REPLACEMENTS[key]
    if _suspended() or not tracing_now():
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


def _replace(target: Any, symbol: Symbol) -> None:
    """Registers the diversion of ``target`` (a function, method or torch callable)."""
    fn = getattr(target, "__func__", target)  # bound and class methods: their function
    for key, r in list(_REPLACEMENTS.items()):
        if r.target is fn:
            del _REPLACEMENTS[key]
    key = next(_KEYS)
    if isinstance(fn, types.FunctionType):
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                      fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__dict__.update(fn.__dict__)
        _REPLACEMENTS[key] = _Replacement(fn, symbol, original, fn.__code__,
                                          _trampoline(fn, key, symbol.id))
    elif callable(fn):  # a builtin torch function: divert it in the tracer's handler table
        _REPLACEMENTS[key] = _Replacement(fn, symbol, fn)
    else:
        raise TypeError(f"replaces= expects a function, got {target!r}")


def _handler_for(r: _Replacement, previous: Any) -> Callable[..., Any]:
    def handler(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
        if _suspended():
            if previous is not None:
                return previous(ctx, *args, **kwargs)
            return fallback(ctx, r.target, args, kwargs)
        return r.symbol(*args, **kwargs)

    return handler


@contextlib.contextmanager
def _diversions() -> Iterator[None]:
    """Entered around user code while it is traced (`TRACING_CONTEXTS`): swaps each
    replaced function's code for its trampoline, and restores it on the way out."""
    _DIVERTED[0] += 1
    swapped: list[_Replacement] = []
    try:
        if _DIVERTED[0] == 1:
            for r in list(_REPLACEMENTS.values()):
                if r.trampoline is not None:
                    r.target.__code__ = r.trampoline
                else:
                    r.saved_handler = HANDLERS.get(r.target)
                    HANDLERS[r.target] = _handler_for(r, r.saved_handler)
                swapped.append(r)
        yield
    finally:
        _DIVERTED[0] -= 1
        for r in swapped:
            if r.trampoline is not None:
                r.target.__code__ = r.code  # type: ignore[assignment]
            elif r.saved_handler is None:
                HANDLERS.pop(r.target, None)
            else:
                HANDLERS[r.target] = r.saved_handler


TRACING_CONTEXTS.append(_diversions)
