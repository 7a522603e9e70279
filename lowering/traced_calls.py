"""Opaque torch calls that Inductor regions take (issue 53: regions that do not split).

The frontend runs torch functions it has no ltorch op for (``F.interpolate``,
``avg_pool2d``, ``F.normalize``, ``group_norm`` in fp16/bf16, ``grid_sample``,
``instance_norm``, ``diff``, ``cdist``, ``sort``, ``histc``) as opaque ``torch.call``
ops. Differentiated, such a call becomes `call_with_grad` (it records torch's autograd
graph and returns a handle) and its backward `handle_vjp` (cotangents through that graph):
neither is pure, so a fusion region stops at each, and the tier-up program of a BEiT
(whose relative position bias is an interpolated table) or a diffusion UNet is cut into
many regions.

Where the Inductor executor is in use (the tier-up's fused program, ``tiered=True``,
``executors=["torch_compile", ...]``), its VJP rule (`rule_for`) differentiates a call of
`TRACED_CALLS` otherwise: the forward stays the call, marked pure (these functions draw
no random numbers, write nothing and return fresh tensors), and the backward is a pure
call of `traced_vjp`, which computes the input cotangents with ``torch.func.vjp`` of the
same function on the saved inputs. Both are functions of their operands that ``make_fx``
traces into the ATen ops eager runs (``upsample_bilinear2d`` and its backward, ...), so
the region around them holds them and Inductor compiles them (as its own loops, or as a
library kernel between its loops). Run unfused (before the kernel is in, or where a
kernel lost to its function), `traced_vjp` is ``torch.func.vjp`` itself: eager's
backward formulas. Programs without the Inductor executor keep `call_with_grad`, whose
backward reuses the forward's graph instead of recomputing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import UnitAttr
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import OperandRef, from_attr
from thunder_ir.dialects.torch import (
    PURE_CALLEES,
    CallOp,
    encode_refs,
    make_call,
    resolve_callee,
)
from thunder_ir.dialects.types import TensorType
from thunder_ir.runtime import namespace
from thunder_ir.runtime.autograd_fallback import decode_refs

TRACED_CALLS: frozenset[str] = PURE_CALLEES
"""Torch functions whose opaque calls an Inductor region may hold (see the module doc):
`thunder_ir.dialects.torch.PURE_CALLEES` (deterministic, no side effects, fresh
results), each traced by ``make_fx``. ``grouped_mm`` and ``one_hot`` are not
(docs/fusion.md says why)."""


def _tensors_of(out: Any, layout: Sequence[int] | bool | None) -> list[Any]:
    """A callee's tensors by ``torch.call``'s ``multi`` (as `call_with_grad` reads it)."""
    if layout is None:
        return [out]
    if isinstance(layout, bool):
        return list(out)
    return [o for o, k in zip(out, layout, strict=True) if k]


def traced_vjp(callee: str, *values: Any, args: Sequence[Any],
               kwargs: Sequence[tuple[str, Any]], grad_inputs: Sequence[int],
               ct_outputs: Sequence[int], n_inputs: int,
               layout: Sequence[int] | bool | None) -> Any:
    """The input cotangents of a call of ``callee`` by ``torch.func.vjp`` of it.

    Args:
        callee: the call's import path (``"torch.nn.functional.interpolate"``).
        values: the call's ``n_inputs`` operands, then one cotangent per ``ct_outputs``.
        args, kwargs: the call's arguments, operands encoded (`encode_refs`).
        grad_inputs: the operands that get gradients.
        ct_outputs: the call's tensors (by position) the cotangents belong to.
        n_inputs: how many of ``values`` are operands.
        layout: the call's ``multi``.

    Returns:
        The cotangent of each of ``grad_inputs`` (zeros where no output depends on it):
        the tensor itself for one, else a tuple.
    """
    inputs, cts = list(values[:n_inputs]), tuple(values[n_inputs:])
    fn = resolve_callee(callee)

    def f(*diff: torch.Tensor) -> tuple[torch.Tensor, ...]:
        vals = list(inputs)
        for i, d in zip(grad_inputs, diff, strict=True):
            vals[i] = d
        out = fn(*decode_refs(tuple(args), vals),
                 **{k: decode_refs(v, vals) for k, v in kwargs})
        outs = _tensors_of(out, layout)
        return tuple(outs[i] for i in ct_outputs)

    pullback = torch.func.vjp(f, *(inputs[i] for i in grad_inputs))[1]
    grads = pullback(cts)
    return grads[0] if len(grads) == 1 else tuple(grads)


TRACED_VJP = namespace.register("traced_vjp", traced_vjp)
"""The callee path of `traced_vjp` in generated code."""


def takes(op: Operation) -> bool:
    """Whether ``op`` is a call of `TRACED_CALLS` (pure as this module makes it) or of
    `traced_vjp`, which an Inductor region may hold."""
    if not isinstance(op, CallOp):
        return False
    callee = op.callee.data
    return callee == TRACED_VJP or (callee in TRACED_CALLS and "pure" in op.properties)


def rule_for(op: Operation) -> Any:
    """The VJP rule of a call of `TRACED_CALLS` that the frontend marked pure (it returns
    no view of an operand) and whose operands and results are tensors (None for any other
    op: the table's rule applies)."""
    if not isinstance(op, CallOp) or op.callee.data not in TRACED_CALLS or op.nograd \
            or "pure" not in op.properties:  # (a call returning views is not: unbind's)
        return None
    types = [*(v.type for v in op.operands), *(r.type for r in op.results)]
    if not types or not all(isinstance(t, TensorType) for t in types):
        return None
    return traced_call_vjp


def traced_call_vjp(g: Any, out: list[SSAValue], ct: list[SSAValue | None],
                    inputs: list[SSAValue], **params: Any) -> list[Any]:
    """The forward call, pure; its backward a pure call of `traced_vjp` on the call's
    operands and the cotangents (see the module doc)."""
    from thunder_ir.passes.vjp import is_differentiable_value

    op = out[0].owner
    assert isinstance(op, CallOp)
    diff = [i for i, v in enumerate(inputs) if is_differentiable_value(v) and g.active(v)]
    grads: list[SSAValue | None] = [None] * len(inputs)
    if not diff:
        return [grads]
    args = encode_refs(from_attr(op.args))
    kwargs = () if op.kwargs is None else tuple(
        (k, encode_refs(from_attr(v))) for k, v in op.kwargs.data.items())
    layout = None if op.multi is None else from_attr(op.multi)
    fwd = op.clone()
    fwd.properties["pure"] = UnitAttr()
    fwd.location = op.location
    g.replace_forward(op, fwd, fwd.results, erase=True)
    ct_at = [i for i, c in enumerate(ct) if c is not None]
    if not ct_at:
        return [grads]
    operands = [*inputs, *(ct[i] for i in ct_at)]
    bwd = make_call(
        TRACED_VJP, operands, [op.callee.data, *(OperandRef(i) for i in range(len(operands)))],
        {"args": args, "kwargs": kwargs, "grad_inputs": tuple(diff),
         "ct_outputs": tuple(ct_at), "n_inputs": len(inputs), "layout": layout},
        result_types=[inputs[i].type for i in diff],
        layout=True if len(diff) > 1 else None, pure=True)
    g.emitter.insert(bwd)
    for i, r in zip(diff, bwd.results):
        grads[i] = r
    return [grads]


__all__ = ["TRACED_CALLS", "TRACED_VJP", "rule_for", "takes", "traced_call_vjp",
           "traced_vjp"]
