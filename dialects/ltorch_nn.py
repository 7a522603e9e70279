"""ltorch ops, neural-network families: linear algebra, activations, normalization,
attention, dropout, embedding and losses."""

from __future__ import annotations

import torch
from xdsl.irdl import operand_def, opt_operand_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.ltorch_base import LtorchOp, ltorch_op
from thunder_ir.dialects.types import TensorType


@ltorch_op(torch.nn.functional.linear)
class LinearOp(LtorchOp):
    """`%y = ltorch.linear %x, %w[, %bias]`: ``x @ w.T + bias``"""

    name = "ltorch.linear"

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure())
