"""Operators without a grad transform: differentiated by ``torch.autograd`` through
their ``fn`` at run time (`operator_vjp`), called from the backward by a ``torch.call``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.ir import SSAValue

from thunder_ir.dialects.base import OperandRef, group
from thunder_ir.dialects.torch import make_call, runtime_callee
from thunder_ir.extend.ops import OP_CLASSES, OperatorOp
from thunder_ir.passes.vjp import Grad, is_differentiable_value
from thunder_ir.runtime.namespace import export


@export
def operator_vjp(op_name: str, *values: Any, n_inputs: int, params: Any,
                 segments: Sequence[int], ct_outputs: Sequence[int],
                 grad_inputs: Sequence[int]) -> Any:
    """Run-time backward of an operator that has no grad transform: its ``fn`` re-run on
    the forward inputs and recorded as an opaque call's is (`record_graph`), then
    differentiated through that graph (`handle_vjp`).

    Args:
        op_name: the operator op's name (``my_ex.apply_rope``).
        values: the op's ``n_inputs`` operands, then one cotangent per ``ct_outputs`` entry.
        params: the op's params as ``(name, value)`` pairs.
        segments: the op's operand segment sizes (``()`` when it has none).
        ct_outputs: which results the cotangents belong to.
        grad_inputs: which operands get a gradient.
    """
    from thunder_ir.runtime.autograd_fallback import handle_vjp, record_graph

    cls = OP_CLASSES[op_name]
    decoded = {k: _decode_refs(v) for k, v in params}
    segs = tuple(segments) or None

    def run(inputs: list[Any]) -> Any:
        args, kwargs = cls.call_args(group(cls.operand_layout(), inputs, segs), decoded)
        return cls.pick(cls.SYMBOL._run_fn(*args, **kwargs))

    # the same recording as an opaque call's, made here in the backward: fn is pure
    outs, handle = record_graph(run, values[:n_inputs], grad_inputs,
                                None if cls.SINGLE else True)
    if any(not outs[i].requires_grad for i in ct_outputs):
        raise RuntimeError(
            f"{op_name}: torch.autograd cannot differentiate the operator's fn (its outputs "
            "do not require grad, e.g. a Triton kernel); register a grad_transform for it "
            "with register_implementation")
    return handle_vjp(handle, *values[n_inputs:], ct_outputs=ct_outputs)


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


def _decode_refs(v: Any) -> Any:
    if type(v) is tuple:
        if len(v) == 2 and v[0] == _REF and type(v[1]) is int:
            return OperandRef(v[1])
        return tuple(_decode_refs(x) for x in v)
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
