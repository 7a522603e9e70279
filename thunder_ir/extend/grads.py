"""Grad transforms: `get_grad` and `put_grads`, and the VJP rule that runs a transform."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.location import UNKNOWN
from thunder_ir.dialects.types import TensorType
from thunder_ir.extend.subtrace import GRAD_STATES, clone_into, subtrace
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.passes.vjp import Grad
from thunder_ir.runtime.origins import Cotangent


def get_grad(x: Any) -> Any:
    """Inside a grad transform: the cotangent of ``x``, one of the transform's outputs.

    The value is the cotangent the backward receives for that output (zeros where the
    output does not reach the loss).
    """
    if not GRAD_STATES:
        raise RuntimeError("get_grad() is only meaningful inside a grad transform "
                           "(register_implementation(..., grad_transform=...))")
    if not is_proxy(x):
        raise TypeError(f"get_grad() expects a traced tensor, got {type(x).__name__}")
    state = GRAD_STATES[-1]
    ph = state.ctx.build.add_input(x._value.type, "ct", Cotangent())
    p = TensorProxy(ph)
    state.cts.append((x, x._value, ph))
    return p


def put_grads(inputs: Sequence[Any], grads: Sequence[Any]) -> None:
    """Inside a grad transform: ``grads[i]`` is the gradient of the argument ``inputs[i]``.

    ``None`` grads (and arguments never given one) get no gradient.
    """
    if not GRAD_STATES:
        raise RuntimeError("put_grads() is only meaningful inside a grad transform "
                           "(register_implementation(..., grad_transform=...))")
    state = GRAD_STATES[-1]
    if len(inputs) != len(grads):
        raise ValueError(f"put_grads() got {len(inputs)} inputs but {len(grads)} grads")
    for x, g in zip(inputs, grads):
        if g is None:
            continue
        pos = state.positions.get(id(x))
        if pos is None:
            raise ValueError("put_grads(): each input must be one of the grad transform's "
                             f"own tensor arguments, got {x!r}")
        if not is_proxy(g):
            raise TypeError(f"put_grads(): a gradient must be a traced tensor, got {g!r}")
        prev = state.grads.get(pos)
        state.grads[pos] = g if prev is None else prev + g


def grad_transform_rule(grad_transform: Callable[..., Any]) -> Callable[..., list[Any]]:
    """A VJP rule (see `thunder_ir.passes.vjp`) running a grad transform."""

    def rule(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], *grouped: Any,
             **params: Any) -> list[Any]:
        op = out[0].owner
        assert isinstance(op, ThunderOp)
        sub = subtrace(grad_transform, op, "grad transform", grad=True)
        state = sub.grad
        assert state is not None
        vm: dict[SSAValue, SSAValue] = dict(sub.mapping)
        if len(sub.outputs) != len(out):
            raise ThunderTraceError(
                f"the grad transform of {op.name} returned {len(sub.outputs)} tensors, but "
                f"the op has {len(out)} results")
        premapped: set[SSAValue] = set()
        for v, r in zip(sub.outputs, out):
            if v not in vm:
                vm[v] = r  # the forward already computed it: reuse, do not recompute
                premapped.add(v)
        for _, value, ph in state.cts:
            try:
                k = sub.outputs.index(value)
            except ValueError:
                raise ThunderTraceError(
                    f"grad transform of {op.name}: get_grad() of a value the transform "
                    "does not return") from None
            c = ct[k]
            if c is None:
                t = out[k].type
                assert isinstance(t, TensorType)
                c = g.prims.full(shape=t.sizes, fill_value=0.0, device=t.dev, dtype=t.dtype)
            vm[ph] = c
        # Only what the gradients need goes into the backward.
        needed = {p._value for p in state.grads.values()}
        keep: list[Operation] = []
        for o in reversed(sub.ops):
            if any(r in needed and r not in premapped for r in o.results):
                keep.append(o)
                needed.update(o.operands)
        for c_op in clone_into(list(reversed(keep)), vm, UNKNOWN):
            g.emitter.insert(c_op)  # with the forward op's source location
        flat: list[SSAValue | None] = [None] * len(op.operands)
        for pos, gp in state.grads.items():
            flat[pos] = vm.get(gp._value, gp._value)
        grads = group(op.operand_layout(), flat, op._segment_sizes())
        return [gr if not isinstance(gr, list) or any(x is not None for x in gr) else None
                for gr in grads]

    return rule
