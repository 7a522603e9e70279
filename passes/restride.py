"""``restride-outputs``: results that a fusion region or a decomposition computes get
eager's strides.

Why: a program's values are logical tensors, but the caller sees each result's layout (a
``.view`` of it works or raises by it). Where eager's own kernel computes a result (an
ltorch op the torch executor runs, an opaque ``torch.call``), it is laid out as eager's
already. A ``fusion.region`` lays its outputs out as its kernel does (Triton and
nvFuser write them row-major; Inductor as its graph's example outputs), and a
decomposition into ``prims`` as the primitives do. So each user result that such an op
makes (directly, or through views of it) is passed through ``tir.restride`` with eager's
strides (tracing records them on the forward function, ``#torch.output_strides<...>``): at
run time it is the result itself where the strides agree, else a copy laid out as eager's.
The trace shows the call. So is a result that stands for memory an in-place write changed
(``torch.written_outputs``: ``y[0] = 1; return y`` of a column-major ``y``), whichever op
computes it out of place.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.fusion import RegionOp
from thunder_ir.dialects.program import FORWARD, program_functions
from thunder_ir.dialects.torch import (
    CallOp,
    make_call,
    output_strides,
    runtime_callee,
    written_outputs,
)
from thunder_ir.dialects.traits import ViewLike
from thunder_ir.passes.change import ReportsChange

RESTRIDE = runtime_callee("restride")
"""The runtime's ``restride(x, strides)`` (`thunder_ir.runtime.layout.restride`)."""

def made_by_our_kernel(v: SSAValue) -> bool:
    """Whether a fusion region or a ``prims`` op (not eager's own kernel) computes ``v``,
    directly or through views of its result."""
    op = v.owner
    while isinstance(op, Operation):
        if isinstance(op, RegionOp):
            return True
        kind = op.get_trait(ViewLike)
        if kind is None or not kind.free or not op.operands:
            return isinstance(op, ThunderOp) and not isinstance(op, CallOp) \
                and op.name.startswith("prims.")
        v = op.operands[0]
        op = v.owner
    return False


def restride_outputs(fn: func.FuncOp) -> int:
    """Inserts ``tir.restride`` before ``fn``'s return for each result our own kernels
    make; returns how many."""
    eager = output_strides(fn)
    ret = fn.body.block.last_op
    if eager is None or not isinstance(ret, func.ReturnOp):
        return 0
    written = written_outputs(fn)
    n = 0
    for k, strides in enumerate(eager):
        if strides is None or k >= len(ret.operands):
            continue
        v = ret.operands[k]
        if k not in written and not made_by_our_kernel(v):
            continue
        call = make_call(RESTRIDE, [v], [OperandRef(0), tuple(strides)], {},
                         result_types=[v.type])
        fn.body.block.insert_op_before(call, ret)
        ret.operands[k] = call.results[0]
        n += 1
    return n


@dataclass(frozen=True)
class RestrideOutputsPass(ReportsChange):
    """Restrides the user's results that fusion regions or prims make to eager's
    strides (see the module doc)."""

    name = "restride-outputs"

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        n = 0
        for fn in program_functions(op):
            if fn.sym_name.data == FORWARD:
                n += restride_outputs(fn)
        return n > 0


__all__ = ["RESTRIDE", "RestrideOutputsPass", "made_by_our_kernel",
           "restride_outputs"]
