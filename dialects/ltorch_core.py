"""ltorch ops, core families: elementwise, reductions, shape and creation ops."""

from __future__ import annotations

import torch
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.irdl import operand_def, opt_prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.ltorch_base import LtorchOp, ltorch_op
from thunder_ir.dialects.types import NumberType, TensorType

AnyValue = TensorType | NumberType
Number = IntegerAttr | FloatAttr


class BinaryOp(LtorchOp):
    """``%z = ltorch.<op> %a, %b``: broadcasting and type promotion as torch does."""

    lhs = operand_def(AnyValue)
    rhs = operand_def(AnyValue)
    out = result_def(TensorType)
    traits = traits_def(Pure())


@ltorch_op(torch.add)
class AddOp(BinaryOp):
    """`%z = ltorch.add %a, %b {alpha}`: ``a + alpha * b``"""

    name = "ltorch.add"

    alpha = opt_prop_def(Number)
