"""Sub-traces: a Python function (an execution or grad transform, a checker) traced
against an op's operands into fresh ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import LocationAttr
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.types import TensorType, pretty_type
from thunder_ir.extend.ops import OperatorOp
from thunder_ir.frontend import torch_map, tracer
from thunder_ir.frontend.context import TraceContext, current
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.tracer import Placeholder
from thunder_ir.runtime.origins import ArgLeaf, Cotangent


class Unresolved(Exception):
    """An op argument whose Python value is not known (a number computed at run time)."""


def _number_value(v: SSAValue) -> Any:
    owner = v.owner
    if isinstance(owner, ConstantOp):
        return owner.params()["value"]
    raise Unresolved(f"number of type {pretty_type(v.type)} is not a constant")


def _op_call_args(op: ThunderOp, flat: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The Python call an op stands for, with ``flat`` in place of its operands.

    Operators: their ``fn``'s arguments. ltorch ops: torch's positional order
    (operands and params together, see `thunder_ir.frontend.torch_map.signature`).
    """
    groups = group(op.operand_layout(), list(flat), op._segment_sizes())
    params = op.params()
    if isinstance(op, OperatorOp):
        return type(op).call_args(groups, params)
    by_name: dict[str, Any] = dict(zip((n for n, _ in op.operand_layout()), groups))
    by_name.update(params)
    return [by_name.get(n) for n in torch_map.signature(type(op))], {}


def checker_args(op: ThunderOp) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for a checker: proxies of the op's own operands (metadata only)."""
    flat = [TensorProxy(v) if isinstance(v.type, TensorType) else _number_value(v)
            for v in op.operands]
    return _op_call_args(op, flat)


@dataclass
class _GradState:
    """What `get_grad` and `put_grads` record while a grad transform is traced."""

    ctx: TraceContext
    positions: dict[int, int]  # id(argument proxy) -> flat operand index
    cts: list[tuple[Any, SSAValue, SSAValue]] = field(default_factory=list)
    grads: dict[int, Any] = field(default_factory=dict)  # operand index -> grad proxy


GRAD_STATES: list[_GradState] = []


@dataclass
class _SubTrace:
    """A Python function traced against an op's operands (see `subtrace`)."""

    ops: list[Operation]
    outputs: list[SSAValue]  # the tensors it returned, flattened
    mapping: dict[SSAValue, SSAValue]  # its arguments -> the op's operands
    grad: _GradState | None


def subtrace(fn: Callable[..., Any], op: ThunderOp, what: str, grad: bool = False
             ) -> _SubTrace:
    """Traces ``fn`` called like ``op`` (proxies bound to its operands) into fresh ops: the
    frontend's `thunder_ir.frontend.tracer.subtrace`, as a fragment of the extension's own
    (no diversion of ``replaces=`` functions: a transform may call the function its
    operator replaces). ``grad``: a grad transform, whose `get_grad` and `put_grads` calls
    are recorded (`GRAD_STATES`)."""
    inputs = [Placeholder(v.type, v.name_hint or "t") if isinstance(v.type, TensorType)
              else _number_value(v) for v in op.operands]
    state: _GradState | None = None

    def call(*flat: Any) -> Any:
        nonlocal state
        args, kwargs = _op_call_args(op, flat)
        if not grad:
            return fn(*args, **kwargs)
        state = _GradState(current(), {id(p): i for i, p in enumerate(flat) if is_proxy(p)})
        GRAD_STATES.append(state)
        try:
            return fn(*args, **kwargs)
        finally:
            GRAD_STATES.pop()

    sub = tracer.subtrace(call, inputs, user_code=False)
    for kind in sub.ctx.build.input_kinds:
        if not isinstance(kind, ArgLeaf | Cotangent):
            raise ThunderTraceError(
                f"the {what} of {op.name} uses a tensor that is not one of its arguments "
                "(or random numbers); pass such tensors in as arguments")
    outputs = []
    for leaf in pytree.tree_leaves(sub.result):
        if isinstance(leaf, torch.Tensor):
            if not is_proxy(leaf):
                raise ThunderTraceError(
                    f"the {what} of {op.name} returned a tensor that does not depend on its "
                    "arguments")
            outputs.append(leaf._value)  # type: ignore[attr-defined]
    mapping = {a: v for a, v in zip(sub.inputs, op.operands, strict=True) if a is not None}
    return _SubTrace(sub.ops, outputs, mapping, state)


def clone_into(ops: Sequence[Operation], vm: dict[SSAValue, SSAValue],
               loc: LocationAttr) -> list[Operation]:
    """Copies of ``ops`` (operands mapped through ``vm``), each at ``loc``: the line of the
    op they stand for, not the extension's own source."""
    out = []
    for o in ops:
        c = o.clone(value_mapper=vm)
        c.location = loc
        out.append(c)
    return out
