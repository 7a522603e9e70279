"""ltorch ops, scans: ops whose result at a position depends on every element before it
along one dim (``cumsum``).

A scan is neither elementwise nor a reduction: each result element reads a prefix of the
operand. Eager runs it as one library kernel (``Library`` kind); a fusion executor that
has scans of its own (Inductor) takes the op whole, and the decomposition to prims
(a log-step prefix sum of shifted copies) serves the others. Conventions as in
`thunder_ir.dialects.ltorch_core`: operands are the tensor arguments, params are named as
torch names them, and the reference is ``TORCH_FN(*operands, **params)`` with absent
params left out.

Models meet scans in positions built from a mask (``mask.cumsum(-1)``: RoBERTa, OPT,
BLOOM), in mixture-of-experts routing (expert offsets), and in state-space models, whose
segment sums run a ``cumsum`` on tensors that need gradients (Mamba-2).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from xdsl.irdl import operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects import ltorch_rules as R
from thunder_ir.dialects.ltorch_base import ltorch_op
from thunder_ir.dialects.ltorch_core import CoreOp, DType
from thunder_ir.dialects.prims_base import Int
from thunder_ir.dialects.traits import Library
from thunder_ir.dialects.types import TensorType


class ScanOp(CoreOp):
    """``%y = ltorch.<scan> %input {dim, dtype}``: a scan along ``dim``, in ``dtype`` if
    given (the input is cast first, as torch casts it)."""

    input = operand_def(TensorType)
    dim = prop_def(Int)
    dtype = opt_prop_def(DType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "dtype")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dtype": None}


@ltorch_op(torch.cumsum, type_rule=R.softmax, symbolic=True)
class CumsumOp(ScanOp):
    """`%y = ltorch.cumsum %input {dim, dtype}`: ``y[..., i, ...] = sum(x[..., :i+1, ...])``
    along ``dim``; integers and bools sum to int64 unless ``dtype`` says otherwise"""

    name = "ltorch.cumsum"


__all__ = ["CumsumOp", "ScanOp"]
