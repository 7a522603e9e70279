"""Custom ``torch.autograd.Function``s while tracing: their own backward, not their ops'.

A ``Function`` says how its outputs' gradients reach its inputs; the ops of its forward
say nothing about it (a straight-through ``round`` has a zero derivative). So while a
trace runs, ``Function.apply`` is traced as eager runs it:

1. the forward runs under no-grad, its ops recorded inline (their results carry no
   gradient), with a context object that records what the forward saves;
2. if an input needs a gradient, the user's ``backward`` runs at once on proxies of the
   output cotangents, under no-grad, and its ops are recorded into the region of an
   ``autograd.function`` op that passes the forward's outputs through (see
   `thunder_ir.dialects.autograd`). Autodiff inlines that region as the outputs' VJP.

The whole protocol works: ``ctx.save_for_backward`` / ``ctx.saved_tensors``, other
attributes set on ``ctx``, ``ctx.needs_input_grad``, ``mark_non_differentiable``,
``mark_dirty``, ``set_materialize_grads``, ``once_differentiable``, the
``setup_context`` style and non-tensor arguments to ``apply``. Eager's checks on what
``backward`` returns are applied (the number of gradients; ``None`` for non-tensors); a
gradient whose shape differs from its input's but broadcasts to it is summed to it, and
one of another dtype is cast, as autograd does.

Known difference: the cotangents are always materialized (zeros for an output that does
not reach the loss), even after ``ctx.set_materialize_grads(False)``; a ``backward``
that returns ``None`` for a ``None`` cotangent computes zeros instead, the same gradient.

``torch.utils.checkpoint``'s reentrant ``CheckpointFunction`` is traced as the plain call
of the checkpointed function (rematerialization is the compiler's business; gradients
and random draws are the same), where a tensor input requires grad; where none does,
eager's forward gives nothing a gradient (its outputs do not require grad, the wrapped
layer's parameters get ``None``, with eager's warning), so the call is traced under
``no_grad``.

A backward that calls ``.backward()`` or ``torch.autograd.grad`` inside (it recomputes
part of the forward with grad enabled: Reformer's reversible layers) cannot be traced so:
it runs at run time, as eager runs it (`thunder_ir.frontend.opaque_backward`).

``Function.apply`` is taken over once (`thunder_ir.frontend.takeover`), on the first trace; outside
a trace (and in other threads) it runs the original code.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch.autograd.function import Function, _is_setup_context_defined
from xdsl.ir import Block, SSAValue

from thunder_ir.dialects.autograd import make_function
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend import opaque_backward
from thunder_ir.frontend.autocast import autocast_off
from thunder_ir.frontend.context import TraceContext
from thunder_ir.frontend.errors import where
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.takeover import take_over


class TracedFunctionCtx:
    """The ``ctx`` a traced ``Function`` sees: eager's ``FunctionCtx`` API over proxies."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.to_save: tuple[Any, ...] = ()
        self.non_differentiable: set[int] = set()
        self.dirty: set[int] = set()
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.to_save = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        self.saved_for_forward = tensors

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self.to_save

    saved_variables = saved_tensors

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors: Any) -> None:
        self.dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _checkpoint_function() -> Any:
    from torch.utils.checkpoint import CheckpointFunction

    return CheckpointFunction


def trace_apply(ctx: TraceContext, cls: Any, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply(*args, **kwargs)`` while tracing (see the module doc)."""
    if cls is _checkpoint_function():
        from torch.utils.checkpoint import check_backward_validity

        run_function, _preserve_rng, *rest = args
        check_backward_validity(rest)  # eager's warning where no input requires grad
        if torch.is_grad_enabled() and any(is_proxy(a) and a.requires_grad for a in rest):
            return run_function(*rest)
        with torch.no_grad():  # eager's forward runs so: nothing inside gets a gradient
            return run_function(*rest)
    if _is_setup_context_defined(cls.setup_context):
        bound = inspect.signature(cls.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = tuple(bound.args), dict(bound.kwargs)
        setup_style = True
    else:
        setup_style = False
    # A real tensor argument (a captured parameter) is a program input like any other.
    args = tuple(ctx.lift_constant(a) if isinstance(a, torch.Tensor) and not is_proxy(a)
                 else a for a in args)
    grad = torch.is_grad_enabled()
    needs = tuple(grad and is_proxy(a) and a._value in ctx.active for a in args)
    fctx = TracedFunctionCtx(needs)
    with torch.no_grad():
        if setup_style:
            out = cls.forward(*args, **kwargs)
            cls.setup_context(fctx, args, out)
        else:
            out = cls.forward(fctx, *args, **kwargs)
    if not any(needs):
        return out
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    diff_pos = [i for i, o in enumerate(outs) if is_proxy(o) and id(o) not in
                fctx.non_differentiable and _differentiable(o._value)]
    if not diff_pos:
        return out
    values = [outs[i]._value for i in diff_pos]
    name = cls.__name__
    if cls in opaque_backward.OPAQUE:  # it calls .backward() inside: run as eager runs it
        body, primals, mask, yielded = opaque_backward.region(ctx, cls, fctx, args, needs,
                                                              outs, diff_pos)
    else:
        body = Block(arg_types=[v.type for v in values])
        # The backward runs when ``.backward()`` is called, outside autocast as a rule (a
        # ``custom_bwd`` backward sets the forward's autocast state itself): traced so.
        with torch.no_grad(), ctx.build.into(body), autocast_off(), \
                opaque_backward.tracing_backward(cls):
            grads = cls.backward(fctx, *opaque_backward.cotangents(body, outs, diff_pos))
            grads = grads if isinstance(grads, tuple) else (grads,)
            primals, mask, yielded = _check_grads(ctx, name, args, needs, grads)
    op = make_function(name, primals, values, mask, body, yielded)
    results = ctx.record(op)
    for t in fctx.to_save:  # eager checks these tensors' versions when the backward runs
        if is_proxy(t):
            ctx.autograd.saved.setdefault(t._value, []).append(op)
    new_outs = list(outs)
    for i, r in zip(diff_pos, results, strict=True):
        o = outs[i]
        if id(o) in fctx.dirty:  # an input the forward wrote in place: it is the output
            o._value = r
            ctx.remember(o)
            new_outs[i] = o
        else:
            new_outs[i] = ctx.wrap(r)
    return new_outs[0] if single else tuple(new_outs)


def _differentiable(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and (t.dtype.is_floating_point or t.dtype.is_complex)


def _check_grads(ctx: TraceContext, name: str, args: Sequence[Any],
                 needs: Sequence[bool], grads: Sequence[Any]
                 ) -> tuple[list[SSAValue], list[int], list[SSAValue]]:
    """The primals (tensor arguments), which of them get a gradient, and those gradients,
    conformed as autograd conforms a custom backward's results."""
    n = len(args)
    if len(grads) < n or any(g is not None for g in grads[n:]):
        raise RuntimeError(f"function {name}Backward returned an incorrect number of "
                           f"gradients (expected {n}, got {len(grads)})\n"
                           f"  at {where(ctx.loc)}")
    primals: list[SSAValue] = []
    mask: list[int] = []
    yielded: list[SSAValue] = []
    for i, a in enumerate(args):
        g = grads[i]
        if not is_proxy(a):
            if g is not None:
                raise RuntimeError(f"function {name}Backward returned a gradient different "
                                   f"than None at position {i + 1}, but the corresponding "
                                   "forward input was not a Variable\n"
                                   f"  at {where(ctx.loc)}")
            continue
        primals.append(a._value)
        if not needs[i] or g is None:
            continue
        if not isinstance(g, torch.Tensor):
            raise TypeError(f"function {name}Backward returned {type(g).__name__} as the "
                            f"gradient at position {i + 1}; expected a tensor or None")
        if tuple(g.shape) != tuple(a.shape):
            try:
                torch.broadcast_shapes(tuple(a.shape), tuple(g.shape))
                ok = torch.broadcast_shapes(tuple(a.shape), tuple(g.shape)) == tuple(g.shape)
            except RuntimeError:
                ok = False
            if not ok:
                raise RuntimeError(f"Function {name}Backward returned an invalid gradient at "
                                   f"index {i} - got {list(g.shape)} but expected shape "
                                   f"compatible with {list(a.shape)}\n"
                                   f"  at {where(ctx.loc)}")
            g = g.sum_to_size(tuple(a.shape))
        if g.dtype != a.dtype:
            g = g.to(a.dtype)
        mask.append(len(primals) - 1)
        yielded.append(ctx.value_of(g))
    return primals, mask, yielded


take_over(Function, "apply", trace_apply)
