"""Sub-traces: a Python function (an execution or grad transform, a checker) traced
against an op's operands into fresh ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree
from xdsl.ir import Attribute, Operation, SSAValue

from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.types import TensorType, pretty_type
from thunder_ir.extend.ops import OperatorOp
from thunder_ir.extend.symbols import trace_into
from thunder_ir.frontend import torch_map
from thunder_ir.frontend.context import TraceContext
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
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
    """Traces ``fn`` called like ``op`` (proxies bound to its operands) into fresh ops."""
    ctx = TraceContext()
    mapping: dict[SSAValue, SSAValue] = {}
    flat: list[Any] = []
    positions: dict[int, int] = {}
    for i, v in enumerate(op.operands):
        if isinstance(v.type, TensorType):
            a = ctx.add_input(v.type, v.name_hint or "t", ArgLeaf(i))
            mapping[a] = v
            p = TensorProxy(a)
            positions[id(p)] = i
            flat.append(p)
        else:
            flat.append(_number_value(v))
    args, kwargs = _op_call_args(op, flat)
    state = _GradState(ctx, positions) if grad else None
    if state is not None:
        GRAD_STATES.append(state)
    try:
        with trace_into(ctx):
            out = fn(*args, **kwargs)
    finally:
        if state is not None:
            GRAD_STATES.pop()
    for kind in ctx.input_kinds:
        if not isinstance(kind, ArgLeaf | Cotangent):
            raise ThunderTraceError(
                f"the {what} of {op.name} uses a tensor that is not one of its arguments "
                "(or random numbers); pass such tensors in as arguments")
    outputs = []
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            if not is_proxy(leaf):
                raise ThunderTraceError(
                    f"the {what} of {op.name} returned a tensor that does not depend on its "
                    "arguments")
            outputs.append(leaf._value)  # type: ignore[attr-defined]
    return _SubTrace(list(ctx.program.block.ops), outputs, mapping, state)


def clone_into(ops: Sequence[Operation], vm: dict[SSAValue, SSAValue],
                loc: Attribute | None) -> list[Operation]:
    out = []
    for o in ops:
        c = o.clone(value_mapper=vm)
        if loc is not None:
            c.attributes["loc"] = loc
        else:
            c.attributes.pop("loc", None)
        out.append(c)
    return out
