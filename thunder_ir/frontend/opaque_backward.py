"""Custom ``Function``s whose backward cannot be traced: run as eager runs it.

`thunder_ir.frontend.custom_function` traces a ``Function``'s backward into the region of
an ``autograd.function`` op. Some backwards are not functions of their cotangents that a
trace can hold: they recompute part of the forward with grad enabled and call
``.backward()`` (or ``torch.autograd.grad`` / ``torch.autograd.backward``) inside,
accumulating gradients straight into parameters' ``.grad`` (Reformer's reversible
layers: ``_ReversibleFunction.backward`` -> ``ReformerLayer.backward_pass``).

While a backward is traced (`tracing_backward`), such a call marks the ``Function``
class as one whose backward runs opaquely (`OPAQUE`) and raises `TraceAgain`: the trace
starts over (`thunder_ir.frontend.tracer.trace_program`), nothing of the attempt kept.
Running a backward opaquely is always what eager does, so the mark is kept per class
for the process. The second trace records the forward as usual and the backward as one
``torch.call`` to `thunder_ir.runtime.custom_backward.run_custom_backward` (`region`):
on each backward of the program it calls the user's ``backward`` on the real cotangents,
with a ``ctx`` whose saved tensors and attributes are the forward's real tensors (program
values the call takes as operands) and the user's modules (not the copies tracing ran),
under the engine's grad mode, as eager's engine calls it.

Known differences: a ``None`` gradient for an input that needs one is zeros (as in the
traced path); ``ctx`` attributes may hold tensors in tuples, lists, dicts and
namedtuples, modules and plain values, and a symbolic number or a tensor inside another
object is refused naming the line.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from xdsl.ir import Block, SSAValue

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call, runtime_callee
from thunder_ir.frontend.autocast import autocast_off
from thunder_ir.frontend.errors import ThunderTraceError, TraceAgain, UseFallback, where
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.table import register_handlers
from thunder_ir.frontend.takeover import take_over
from thunder_ir.runtime.custom_backward import CustomBackward, ModuleRef, Slot, keep

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext

OPAQUE: weakref.WeakSet[type] = weakref.WeakSet()
"""``Function`` classes whose backward runs at run time, as eager runs it."""


class _Tracing(threading.local):
    stack: list[type] | None = None


_TRACING = _Tracing()


@contextlib.contextmanager
def tracing_backward(cls: type) -> Iterator[None]:
    """While open, this thread traces ``cls.backward`` (innermost last)."""
    stack = _TRACING.stack
    if stack is None:
        stack = _TRACING.stack = []
    stack.append(cls)
    try:
        yield
    finally:
        stack.pop()


def _untraceable(ctx: TraceContext, what: str) -> None:
    """Inside a traced backward: marks its class opaque and starts the trace over."""
    stack = _TRACING.stack
    if stack:
        cls = stack[-1]
        OPAQUE.add(cls)
        raise TraceAgain(f"{where(ctx.loc)}: {cls.__name__}.backward calls {what}: it runs "
                         "at run time, as eager runs it")


def _tensor_backward(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
    _untraceable(ctx, "Tensor.backward()")
    raise UseFallback


def _autograd_grad(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
    _untraceable(ctx, "torch.autograd.grad()")
    raise UseFallback


register_handlers([torch.Tensor.backward], _tensor_backward)
register_handlers([torch.autograd.grad], _autograd_grad)

_AUTOGRAD_BACKWARD = torch.autograd.backward


def _autograd_backward(ctx: TraceContext, *args: Any, **kwargs: Any) -> Any:
    # (no torch function override reaches it: taken over while traced)
    from thunder_ir.frontend.errors import user_location

    ctx.loc = user_location()
    _untraceable(ctx, "torch.autograd.backward()")
    with torch._C.DisableTorchFunction():
        return _AUTOGRAD_BACKWARD(*args, **kwargs)


take_over(torch.autograd, "backward", _autograd_backward)

_CTX_FIELDS = frozenset(("needs_input_grad", "to_save", "non_differentiable", "dirty",
                         "materialize_grads", "saved_for_forward"))
"""`TracedFunctionCtx`'s own fields: not the user's attributes."""


def _holds_proxy(v: Any) -> bool:
    items = v.values() if isinstance(v, dict) else \
        vars(v).values() if hasattr(v, "__dict__") and not isinstance(v, type) else ()
    return any(is_proxy(x) for x in items)


def _template(ctx: TraceContext, v: Any, held: list[SSAValue]) -> Any:
    """``v`` (something the forward left on ``ctx``) as the run-time ``ctx`` holds it:
    traced tensors as `Slot`s into ``held``, module copies as the user's modules."""
    if is_proxy(v):
        held.append(ctx.value_of(v))
        return Slot(len(held) - 1)
    if isinstance(v, torch.nn.Module):
        return ModuleRef(weakref.ref(ctx.reads.originals.get(id(v), v)))
    t = type(v)
    if t is tuple or t is list:
        return t(_template(ctx, x, held) for x in v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return t(*(_template(ctx, x, held) for x in v))
    if t is dict:
        return {k: _template(ctx, x, held) for k, x in v.items()}
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or _holds_proxy(v):
        raise ThunderTraceError(
            f"{where(ctx.loc)}: the custom backward runs at run time (it calls .backward() "
            f"inside), and its ctx holds a {type(v).__name__} computed while traced "
            "inside an object thunder_ir cannot rebuild with the call's values; keep "
            "tensors on ctx through save_for_backward, or in tuples, lists or dicts")
    return v


def cotangents(body: Block, outs: Sequence[Any], diff_pos: Sequence[int]) -> list[Any]:
    """The gradients a custom ``backward`` gets for ``outs``, built in ``body`` (traced inside
    it, under no grad): the block's arguments for the differentiable results at
    ``diff_pos``, zeros for the other tensors (as eager hands them), ``None`` for the rest."""
    cts: list[Any] = [None] * len(outs)
    for k, i in enumerate(diff_pos):
        cts[i] = TensorProxy(body.args[k])
    for i, o in enumerate(outs):
        if cts[i] is None and is_proxy(o):
            cts[i] = torch.zeros_like(o)
    return cts


def region(ctx: TraceContext, cls: Any, fctx: Any, args: Sequence[Any],
           needs: Sequence[bool], outs: Sequence[Any], diff_pos: Sequence[int]
           ) -> tuple[Block, list[SSAValue], list[int], list[SSAValue]]:
    """The backward region of ``cls.apply(*args)`` whose forward returned ``outs`` (its
    differentiable results at ``diff_pos``): one call of the user's ``backward`` at run
    time. Returns the region, the primals (the tensor arguments), which of them get
    gradients, and the gradients."""
    held: list[SSAValue] = []
    saved = _template(ctx, tuple(fctx.to_save), held)
    attrs = {k: _template(ctx, v, held) for k, v in vars(fctx).items()
             if k not in _CTX_FIELDS}
    body = Block(arg_types=[outs[i]._value.type for i in diff_pos])
    with torch.no_grad(), ctx.build.into(body), autocast_off():
        cts = cotangents(body, outs, diff_pos)
        ct_values = [ctx.value_of(c) for c in cts if c is not None]
    primal_args = [a for a in args if is_proxy(a)]
    primals = [a._value for a in primal_args]
    tensor_needs = [n for a, n in zip(args, needs, strict=True) if is_proxy(a)]
    mask = [j for j, n in enumerate(tensor_needs) if n]
    needed = [primal_args[j] for j in mask]
    state = CustomBackward(cls, cls.__name__, tuple(is_proxy(o) for o in outs),
                           tuple(is_proxy(a) for a in args), tuple(needs), saved, attrs,
                           tuple((a.dtype, a.device) for a in needed))
    operands = [*ct_values, *held]  # (the inputs' shapes only: the inputs are not kept)
    call = make_call(runtime_callee("run_custom_backward"), operands,
                     [OperandRef(i) for i in range(len(operands))],
                     {"key": keep(state), "shapes": [tuple(a.shape) for a in needed]},
                     result_types=[a._value.type for a in needed], layout=True)
    body.add_op(call)
    return body, primals, mask, list(call.results)


__all__ = ["OPAQUE", "cotangents", "region", "tracing_backward"]
