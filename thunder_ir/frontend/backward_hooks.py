"""Backward hooks while tracing: ``tensor.register_hook`` and modules' full backward hooks.

Each hook point becomes an ``autograd.function`` (`thunder_ir.dialects.autograd`) whose
forward is the identity on the hooked tensors and whose backward is a ``torch.call`` into
`thunder_ir.runtime.hooks`, which runs the user's hooks on the real gradients of every
backward, with eager's arguments, and lets them replace those gradients. In a program
that is not differentiated the ops vanish (``strip-autograd``).

* ``t.register_hook(fn)``: the hook point is placed right after ``t`` is computed and
  every use of ``t`` reads through it, so ``fn`` sees ``t``'s whole gradient, as in eager,
  whichever uses came before the registration. The returned handle's ``remove()`` undoes
  it.
* ``register_full_backward_hook`` / ``register_full_backward_pre_hook``: torch's
  ``Module._call_impl`` wraps the call's inputs and outputs with a ``BackwardHook``; its
  ``setup_input_hook`` and ``setup_output_hook`` are taken over while tracing and place
  one hook point on the inputs and one on the outputs. The hooks get the user's module
  (not the copy that tracing runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.hooks import BackwardHook
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.autograd import make_function
from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import make_call, runtime_callee
from thunder_ir.frontend.context import TraceContext
from thunder_ir.frontend.errors import user_location, where
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.table import register_handlers
from thunder_ir.frontend.takeover import take_over
from thunder_ir.runtime.hooks import ModuleHooks, keep


def _hook_point(ctx: TraceContext, name: str, values: Sequence[SSAValue],
                callee: str, key: int) -> Operation:
    """An identity ``autograd.function`` over ``values`` whose backward calls ``callee``
    (``key=key``) on the cotangents."""
    body = Block(arg_types=[v.type for v in values])
    call = make_call(runtime_callee(callee), list(body.args),
                     [OperandRef(i) for i in range(len(values))], {"key": key},
                     result_types=[v.type for v in values],
                     layout=None if callee == "run_tensor_hook" else True)
    body.add_op(call)
    return make_function(name, list(values), list(values), list(range(len(values))), body,
                         list(call.results))


class _TracedHandle:
    """What ``register_hook`` returns while tracing: ``remove()`` takes the hook out."""

    def __init__(self, op: Operation, value: SSAValue, proxy: TensorProxy) -> None:
        self.op, self.value, self.proxy = op, value, proxy

    def remove(self) -> None:
        op = self.op
        if op.parent is None:
            return
        r = op.results[0]
        r.replace_all_uses_with(self.value)
        if self.proxy._value is r:
            self.proxy._value = self.value
        op.detach()
        op.erase()


def _register_hook(ctx: TraceContext, t: Any, fn: Any) -> Any:
    if not is_proxy(t):
        return torch.Tensor.register_hook(t, fn)
    if not t.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient"
                           f"\n  at {where(ctx.loc)}")
    v = t._value
    op = _hook_point(ctx, getattr(fn, "__name__", "hook"), [v], "run_tensor_hook", keep(fn))
    (r,) = ctx.record(op)
    # Place it where t is computed, and route every use of t through it.
    op.detach()
    block = ctx.build.block
    owner = v.owner
    if isinstance(owner, Operation) and owner.parent is block:
        block.insert_op_after(op, owner)
    elif owner is block and block.first_op is not None:
        block.insert_op_before(op, block.first_op)
    else:
        block.add_op(op)
    v.replace_uses_with_if(r, lambda use: use.operation is not op)
    t._value = r
    ctx.remember(t)
    # A hooked input is not written: it must not be copied back into the caller's tensor.
    ctx.build.input_proxies = [(p, r if p is t and orig is v else orig, kind)
                               for p, orig, kind in ctx.build.input_proxies]
    return _TracedHandle(op, v, t)


register_handlers([torch.Tensor.register_hook], _register_hook)


def _module_of(ctx: TraceContext, module: torch.nn.Module) -> torch.nn.Module:
    return ctx.reads.originals.get(id(module), module)


def _wrap(ctx: TraceContext, items: Sequence[Any], name: str, callee: str,
          state: ModuleHooks) -> tuple[list[Any], list[int] | None]:
    """Puts a hook point over the items that carry gradients; returns the new items and
    their positions (None when none does)."""
    grad = torch.is_grad_enabled()
    pos = [i for i, a in enumerate(items)
           if grad and is_proxy(a) and a._value in ctx.active]
    if not pos:
        return list(items), None
    op = _hook_point(ctx, name, [items[i]._value for i in pos], callee, state_key(state))
    results = ctx.record(op)
    out = list(items)
    for i, r in zip(pos, results, strict=True):
        out[i] = ctx.wrap(r)
    return out, pos


def state_key(state: ModuleHooks) -> int:
    key = getattr(state, "_key", None)
    if key is None:
        key = keep(state)
        state._key = key  # type: ignore[attr-defined]
    return key


def _setup_input_hook(ctx: TraceContext, bw: Any, args: Any) -> Any:
    ctx.loc = user_location()
    state = ModuleHooks(_module_of(ctx, bw.module), list(bw.user_hooks),
                        list(bw.user_pre_hooks), n_inputs=len(args))
    bw._thunder_ir_state = state
    new, pos = _wrap(ctx, args, f"{type(bw.module).__name__}BackwardHook", "run_input_hooks",
                     state)
    state.inputs = pos
    return args if pos is None else (tuple(new) if type(args) is tuple else type(args)(*new))


def _setup_output_hook(ctx: TraceContext, bw: Any, result: Any) -> Any:
    ctx.loc = user_location()
    state: ModuleHooks | None = getattr(bw, "_thunder_ir_state", None)
    if state is None:
        state = ModuleHooks(_module_of(ctx, bw.module), list(bw.user_hooks),
                            list(bw.user_pre_hooks))
    single = not isinstance(result, tuple)
    outs = (result,) if single else result
    new, pos = _wrap(ctx, outs, f"{type(bw.module).__name__}BackwardPreHook",
                     "run_output_hooks", state)
    if pos is None:  # nothing gets a gradient: eager's hooks never fire either
        return result
    state.n_outputs = len(outs)
    state.outputs = pos
    return new[0] if single else tuple(new)


take_over(BackwardHook, "setup_input_hook", _setup_input_hook)
take_over(BackwardHook, "setup_output_hook", _setup_output_hook)

__all__: list[str] = []
