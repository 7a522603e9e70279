"""Operators without a grad transform: differentiated by ``torch.autograd`` through
their ``fn`` at run time (`thunder_ir.extend.symbols.operator_vjp`), called from the backward
by a ``torch.call``."""

from __future__ import annotations

from typing import Any

from xdsl.ir import SSAValue

from thunder_ir.dialects.base import OperandRef, group
from thunder_ir.dialects.torch import make_call, runtime_callee
from thunder_ir.extend.ops import OperatorOp
from thunder_ir.passes.vjp import Grad, is_differentiable_value

_OPERATOR_VJP = runtime_callee("operator_vjp")
"""The callee of the backward's ``torch.call`` (``tir.operator_vjp`` in traces)."""
_REF = "$operand"


def _encode_refs(v: Any) -> Any:
    """Hides operand references from ``torch.call``'s own substitution: ``("$operand", i)``."""
    if isinstance(v, OperandRef):
        return (_REF, int(v))
    if type(v) is tuple:
        return tuple(_encode_refs(x) for x in v)
    return v


def decode_refs(v: Any) -> Any:
    """Undoes `_encode_refs`."""
    if type(v) is tuple:
        if len(v) == 2 and v[0] == _REF and type(v[1]) is int:
            return OperandRef(v[1])
        return tuple(decode_refs(x) for x in v)
    return v


def autograd_rule(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], *grouped: Any,
                   **params: Any) -> list[Any]:
    """The VJP table's rule for operators: a backward call of `operator_vjp`."""
    op = out[0].owner
    assert isinstance(op, OperatorOp)
    operands = list(op.operands)
    diff = [i for i, v in enumerate(operands) if is_differentiable_value(v)]
    flat: list[SSAValue | None] = [None] * len(operands)
    if diff:
        ct_at = [i for i, c in enumerate(ct) if c is not None]
        call_operands = [*operands, *(c for c in ct if c is not None)]
        seg = op._segment_sizes()
        call = make_call(
            _OPERATOR_VJP, call_operands,
            [op.name, *(OperandRef(i) for i in range(len(call_operands)))],
            {"n_inputs": len(operands), "params": tuple(
                (k, _encode_refs(v)) for k, v in op.params().items() if v is not None),
             "segments": tuple(seg) if seg is not None else (),
             "ct_outputs": tuple(ct_at), "grad_inputs": tuple(diff)},
            result_types=[operands[i].type for i in diff])
        g.emitter.insert(call)
        for i, r in zip(diff, call.results):
            flat[i] = r
    return list(group(op.operand_layout(), flat, op._segment_sizes()))
