"""Python arithmetic on a float ``.item()``: computed as eager computes it, on every call.

``s = loss.item()`` in a symbolic compilation is an unbacked ``SymFloat`` (``zuf0``,
`thunder_ir.frontend.unbacked.item_float`), the program's number. torch's own arithmetic on
it builds a sympy expression, and sympy reorders float arithmetic: ``(s + 1e16) - 1e16``
simplifies to ``s`` and ``s * 3.0 - s`` to ``2.0*s``, so the program (and a returned or
stored number) would compute other roundings than eager's Python floats.

So while user code is traced, the arithmetic dunders of ``SymFloat`` (and those of
``SymInt`` whose other operand is such a float) take a number made this way: the
operation becomes a ``torch.call`` of Python's own operator (``operator.add(t1, 1e16)``)
in the program, in the order the user's code runs it, and its result a new unbacked
``SymFloat`` bound to that call (`made`). Later ops take it as their operand; a returned
or stored one is computed from it (`thunder_ir.frontend.unbacked.number_tensor`); a
decision on it is speculated as any decision on an ``.item()`` is. Nothing is simplified:
each call computes eager's Python floats.

Left to torch (a sympy expression, as before): arithmetic in torch's or thunder_ir's own
code (a handler), ``**`` with a non-integer exponent (a negative base gives a complex),
and operations not listed here (``math.*`` functions read the value: speculated).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import StringAttr

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call, name_callee, torch_name
from thunder_ir.dialects.types import number_type

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from thunder_ir.frontend.context import TraceContext

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "__neg__": operator.neg, "__pos__": operator.pos, "__abs__": operator.abs}

for _f in (*_BINARY.values(), *_UNARY.values()):  # (named ``operator.add``, not ``_operator``)
    name_callee(_f, f"operator.{_f.__name__}")


def _ours(ctx: TraceContext, x: Any) -> SSAValue | None:
    """The program's number ``x`` is, where ``x`` is a float this trace made (an
    ``.item()``, or arithmetic on one); else None."""
    if type(x) is not torch.SymFloat:
        return None
    return ctx.build.numbers.get((torch.SymFloat, str(symbols.sym_text(x))))


def _operand(ctx: TraceContext, x: Any) -> tuple[Any, SSAValue | None]:
    """``x`` as an argument of the call: a plain number itself, else its program value."""
    if type(x) in (int, float, bool):
        return x, None
    return None, ctx.build.number(x)


def made(ctx: TraceContext, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)`` (Python's operator on numbers, one of them a float this trace made) as a
    ``torch.call`` in the program; its result a new unbacked ``SymFloat`` bound to it."""
    table = symbols.current()
    assert table is not None, "a float .item() needs a symbol table"
    operands: list[SSAValue] = []
    call_args: list[Any] = []
    for a in args:
        plain, v = _operand(ctx, a)
        if v is None:
            call_args.append(plain)
        else:
            call_args.append(OperandRef(len(operands)))
            operands.append(v)
    f = table.env.create_unbacked_symfloat()
    name = str(f.node.expr)
    op = make_call(torch_name(fn), operands, call_args, {},
                   result_types=[number_type(float)], pure=True)
    op.attributes[symbols.UNBACKED_RESULT] = StringAttr(name)
    v = ctx.record(op)[0]
    ctx.build.numbers[(torch.SymFloat, str(table.text(f)))] = v
    ctx.build.counts[("of", name)] = ("number", v)
    return f


def _tracing() -> TraceContext | None:
    """This thread's trace, while user code (not a handler) is traced with a symbol
    table."""
    from thunder_ir.frontend.context import current, tracing_now

    if not tracing_now() or torch._C._len_torch_function_stack() == 0 \
            or symbols.current() is None:
        return None
    return current()


def _binary(fn: Callable[[Any, Any], Any], reflected: bool
            ) -> Callable[[Callable[[Any, Any], Any]], Callable[[Any, Any], Any]]:
    def make(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def method(self: Any, other: Any) -> Any:
            ctx = _tracing()
            if ctx is not None and type(other) in (int, float, bool, torch.SymInt,
                                                   torch.SymFloat) \
                    and (_ours(ctx, self) is not None or _ours(ctx, other) is not None) \
                    and (fn is not operator.pow or type(other if not reflected else self)
                         in (int, torch.SymInt)):
                return made(ctx, fn, (other, self) if reflected else (self, other))
            return original(self, other)

        method.__wrapped__ = original  # type: ignore[attr-defined]
        return method

    return make


def _unary(fn: Callable[[Any], Any]) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    def make(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def method(self: Any) -> Any:
            ctx = _tracing()
            if ctx is not None and _ours(ctx, self) is not None:
                return made(ctx, fn, (self,))
            return original(self)

        method.__wrapped__ = original  # type: ignore[attr-defined]
        return method

    return make


def swaps() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """The swaps (`thunder_ir.frontend.takeover.patched`) of the symbolic numbers'
    arithmetic while some thread traces (see the module doc)."""
    out: list[tuple[Any, str, Callable[[Any], Any]]] = []
    for cls in (torch.SymFloat, torch.SymInt):
        for name, fn in _BINARY.items():
            out.append((cls, f"__{name}__", _binary(fn, False)))
            out.append((cls, f"__r{name}__", _binary(fn, True)))
    out += [(torch.SymFloat, name, _unary(fn)) for name, fn in _UNARY.items()]
    return out


__all__ = ["made", "swaps"]
