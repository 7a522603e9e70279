"""Eager's autograd rules while tracing: `GradTracking`, the gradient facet of a
`TraceContext`.

Each value the trace makes is active (eager would mark it as requiring grad) or not, by
eager's rules (`GradTracking.track`): grad mode, the operands, differentiability, views
made under no-grad, ``stop_gradient`` where eager cuts the graph; ``requires_grad_`` on a
tensor made while traced, grad-mode switches, inference tensors. The data lives in
`thunder_ir.frontend.eager_autograd.EagerAutograd` (``ctx.autograd``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.autograd import StopGradientOp, make_function
from thunder_ir.dialects.location import source_location
from thunder_ir.dialects.ltorch_core import ProdOp, SumOp
from thunder_ir.dialects.ltorch_scan import CumsumOp
from thunder_ir.dialects.traits import has_no_derivative
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend.builder import Grads, differentiable
from thunder_ir.frontend.errors import Refused, ThunderTraceError, dtype_name, where
from thunder_ir.frontend.proxy import TensorProxy

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext

_SUMS = (SumOp, ProdOp, CumsumOp)

GRAD_ANCHOR = torch.zeros((), requires_grad=True)
"""An input that requires grad, given to programs in which a tensor made while traced was
made to require grad (`GradTracking.set_requires_grad`) so that the results' autograd node
records a graph even when nothing else requires grad. No gradient reaches it."""


class GradTracking(Grads):
    """Eager's autograd rules for one trace (see the module doc): ``ctx`` is the trace."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: TraceContext) -> None:
        self.ctx = ctx

    def track(self, op: Any, results: list[SSAValue],
              requires_grad: Sequence[bool] | None = None, view: bool = False
              ) -> list[SSAValue]:
        """Applies eager's autograd rules to a recorded op's results.

        A result is active when grad mode is on, an operand is active and the result is
        differentiable (``requires_grad``: eager's own answer per result, for opaque
        calls). A differentiable result computed from an active operand that eager does not
        mark as requiring grad is cut with ``autograd.stop_gradient``. A view made while
        grad mode is off (``view``, or eager's answer) requires grad in eager but passes no
        gradient back (`detached_view`). Returns the values the caller should use in place
        of ``results``.
        """
        ctx = self.ctx
        autograd = ctx.autograd
        if torch.is_inference_mode_enabled():
            autograd.inference.update(results)
        build = ctx.build
        if build.block is not build.program.block:
            return results  # a region (a custom backward): no gradients of gradients
        forbidden = ctx.aliases.forbidden
        if forbidden and torch.is_grad_enabled():
            bad = next((forbidden[o] for o in op.operands if o in forbidden), None)
            if bad is not None:
                raise RuntimeError(f"{bad}\n  at {where(ctx.loc)}")
        active = ctx.active
        if not active or not any(o in active for o in op.operands):
            return results
        grad = torch.is_grad_enabled()
        inference = autograd.inference
        if grad and inference and any(o in inference for o in op.operands):
            autograd.check_inference_inputs(op, ctx.loc)
        if requires_grad is None:
            diff = (grad and not has_no_derivative(op)) or (view and not grad)
            if diff and isinstance(op, _SUMS) and not differentiable(results[0]):
                dtype = cast(TensorType, results[0].type).dtype
                raise RuntimeError(f"Autograd not support dtype: {dtype_name(dtype)}\n"
                                   f"  at {where(ctx.loc)}")
            flags = [diff and differentiable(r) for r in results]
        else:
            flags = list(requires_grad)
        out: list[SSAValue] = []
        for r, f in zip(results, flags, strict=True):
            if f and grad:
                active.add(r)
                out.append(r)
            elif f:
                out.append(self.detached_view(op, r))
            elif differentiable(r):
                out.append(self.stop_gradient(r))
            else:
                out.append(r)
        if grad and any(flags):
            autograd.note_saved(op, out)
        return out

    def detached_view(self, op: Operation, v: SSAValue) -> SSAValue:
        """A view made while grad mode is off of a tensor that requires grad: eager marks it
        as requiring grad, but no gradient flows back through it (an ``autograd.function``
        with no gradients)."""
        ctx = self.ctx
        primals = [o for o in op.operands if o in ctx.active]
        body = Block(arg_types=[v.type])
        return self.requires_grad_fn(make_function("view_without_grad", primals, [v], [], body,
                                                 []))

    def requires_grad_fn(self, fn: Operation) -> SSAValue:
        """Records an ``autograd.function`` whose one result requires grad whatever the
        grad mode (it stands for a tensor eager still tracks); returns the result."""
        ctx = self.ctx
        if ctx.loc:
            fn.location = source_location(ctx.loc)
        ctx.build.block.add_op(fn)
        r = fn.results[0]
        ctx.active.add(r)
        return r

    def stop_gradient(self, v: SSAValue) -> SSAValue:
        """``v`` with its gradient cut (``autograd.stop_gradient``)."""
        ctx = self.ctx
        ctx.build.emitter.loc = source_location(ctx.loc) if ctx.loc else None
        r: SSAValue = ctx.build.emitter.emit(StopGradientOp, v)
        if v in ctx.autograd.inference:
            ctx.autograd.inference.add(r)
        return r

    def set_requires_grad(self, target: TensorProxy, flag: bool) -> None:
        """``t.requires_grad = flag`` / ``t.requires_grad_(flag)`` on a tensor made while
        traced, as eager allows it: a leaf (one not computed from a tensor that requires
        grad) becomes a gradient source, or stops being one; eager's errors otherwise. The
        program's results computed from it require grad (an input that requires grad, the
        shared `GRAD_ANCHOR`, gives them their ``grad_fn``; the gradient reaching the new
        leaf goes nowhere the caller can see, as in eager)."""
        ctx = self.ctx
        v = target._value
        if flag == ctx.autograd.is_source(v):
            return
        if id(target) in ctx.autograd.leaf_proxies:
            raise ThunderTraceError(
                f"{where(ctx.loc)}: requires_grad_({flag}) on an argument, parameter or "
                "buffer inside a jitted function would change which of your tensors autograd "
                "tracks; set requires_grad on them before the call (parameters already "
                "require grad), or on a tensor made inside the function.")
        if v in ctx.active and v not in ctx.autograd.grad_leaves:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use "
                "a computed variable in a subgraph that doesn't require differentiation use "
                f"var_no_grad = var.detach().\n  at {where(ctx.loc)}")
        if flag and not differentiable(v):
            raise RuntimeError("only Tensors of floating point and complex dtype can require "
                               f"gradients\n  at {where(ctx.loc)}")
        if flag:
            anchor = ctx.lift_constant(GRAD_ANCHOR)._value
            if anchor in ctx.autograd.pending:  # a gradient source whatever the grad mode
                ctx.autograd.make_source(anchor, ctx.build)
            # `v`'s values, a value of its own (its aliases stay as they are) that autodiff
            # sees as computed from the anchor (a zero gradient goes there).
            leaf = ctx.writes.overwrites(anchor, v)
            with torch._C.DisableTorchFunction():
                layout = (tuple(target.stride()), int(target.storage_offset()))
            ctx.aliases.layouts[leaf] = layout
            ctx.aliases.rebind(target, leaf)
            ctx.autograd.grad_leaves.add(leaf)
            ctx.autograd.grad_leaf_sites[id(target)] = (target, ctx.loc)
        else:
            ctx.active.discard(v)
            ctx.autograd.grad_leaves.discard(v)
            ctx.autograd.grad_leaf_sites.pop(id(target), None)
        with torch._C.DisableTorchFunction():
            torch.Tensor.requires_grad.__set__(target, flag)  # type: ignore[attr-defined]

    def check_leaf(self, p: Any, what: str) -> None:
        """Raises a clear error if ``p`` is a tensor made while traced and made to require
        grad (``torch.zeros(..., requires_grad=True)``, ``t.requires_grad_()``) and it
        leaves the function (``what``: returned, or where user code stored it). Eager
        returns a new leaf on each call that the other results depend on through autograd
        (the loss's backward fills its ``.grad``); the program's results cannot depend on
        a tensor it makes itself, so it would come back as a non-leaf (or not requiring
        grad) whose ``.grad`` stays None."""
        site = self.ctx.autograd.grad_leaf_sites.get(id(p))
        if site is None or site[0] is not p:
            return
        raise Refused(
            f"{where(site[1])}: a tensor made inside the jitted function with "
            f"requires_grad=True (a new autograd leaf on each call) is {what}; thunder_ir "
            "does not support that yet: the function's other results cannot depend on it "
            "through autograd, so its .grad would not be filled by backward. Create the "
            "tensor outside the jitted function and pass it in as an argument (or make it "
            "a parameter of the module); a tensor made inside that requires grad and is "
            "only used inside is supported.")

    def set_grad_enabled(self, mode: bool) -> None:
        """Grad mode switches for real while user code runs; each op reads it. Turned on,
        it makes the pending gradient sources active."""
        ctx = self.ctx
        torch._C._set_grad_enabled(mode)
        if mode and ctx.autograd.pending:
            ctx.autograd.activate_pending(ctx.build)

    def is_inference(self, v: SSAValue) -> bool:
        """Whether ``v`` was created in inference mode (eager's inference tensors)."""
        ctx = self.ctx
        return v in ctx.autograd.inference



__all__ = ["GRAD_ANCHOR", "GradTracking"]
