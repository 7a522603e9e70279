"""ltorch ops, activations: elementwise activation functions and the backward kernels
their VJP rules emit (each one eager kernel where the composition it stands for is several
small ops; each decomposes into prims for fusion executors, `thunder_ir.passes.decomp_nn`).

Conventions as in `thunder_ir.dialects.ltorch_nn`, whose `NNOp` base these ops share:
operands are the tensor arguments in torch's order, params the others, named as torch
names them; torch's ``inplace`` flags are not params (the frontend writes the result back).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import operand_def, opt_prop_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects import ltorch_rules as R
from thunder_ir.dialects.base import ShapeError
from thunder_ir.dialects.ltorch_base import aten_kernel, ltorch_op
from thunder_ir.dialects.ltorch_nn import NNOp, Number
from thunder_ir.dialects.traits import Elementwise
from thunder_ir.dialects.types import TensorType, is_float

_K_GELU_BACKWARD = aten_kernel("gelu_backward")
_K_HARDSIGMOID_BACKWARD = aten_kernel("hardsigmoid_backward")
_K_HARDSWISH_BACKWARD = aten_kernel("hardswish_backward")
_K_SILU_BACKWARD = aten_kernel("silu_backward")
_K_SOFTPLUS_BACKWARD = aten_kernel("softplus_backward")
_K_THRESHOLD_BACKWARD = aten_kernel("threshold_backward")


class ActivationOp(NNOp):
    """``%y = ltorch.<act> %x``: an elementwise activation function."""

    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input",)


@ltorch_op(F.relu, floats=True)
class ReluOp(ActivationOp):
    """`%y = ltorch.relu %x`: ``max(x, 0)``"""

    name = "ltorch.relu"


@ltorch_op(F.gelu, floats=R.approximate)
class GeluOp(ActivationOp):
    """`%y = ltorch.gelu %x {approximate = "tanh"}`: exact (erf) or tanh approximation"""

    name = "ltorch.gelu"

    approximate = opt_prop_def(StringAttr)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "approximate")
    DEFAULTS: ClassVar[dict[str, Any]] = {"approximate": "none"}


@ltorch_op(F.silu, floats=True)
class SiluOp(ActivationOp):
    """`%y = ltorch.silu %x`: ``x * sigmoid(x)``"""

    name = "ltorch.silu"


def silu_backward(grad_output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``grad_output * silu'(input)`` with torch's one fused kernel."""
    return _K_SILU_BACKWARD(grad_output, input)


@ltorch_op(silu_backward)
class SiluBackwardOp(NNOp):
    """`%dx = ltorch.silu_backward %grad_output, %input`: ``grad_output * s (1 + x (1 - s))``
    with ``s = sigmoid(x)``. Emitted by silu's VJP rule: one eager kernel where the
    composition is six; it decomposes to prims for fusion executors."""

    name = "ltorch.silu_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input")


@ltorch_op(F.softplus, floats=R.softplus)
class SoftplusOp(ActivationOp):
    """`%y = ltorch.softplus %x {beta, threshold}`: ``log(1 + exp(beta x)) / beta``, and
    ``x`` itself where ``beta x > threshold``"""

    name = "ltorch.softplus"

    beta = opt_prop_def(Number)
    threshold = opt_prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "beta", "threshold")
    DEFAULTS: ClassVar[dict[str, Any]] = {"beta": 1.0, "threshold": 20.0}


def softplus_backward(grad_output: torch.Tensor, input: torch.Tensor, beta: float,
                      threshold: float) -> torch.Tensor:
    """``grad_output * softplus'(input)`` with torch's one kernel."""
    return _K_SOFTPLUS_BACKWARD(grad_output, input, beta, threshold)


@ltorch_op(softplus_backward, type_rule=R.same_as_first, symbolic=True)
class SoftplusBackwardOp(NNOp):
    """`%dx = ltorch.softplus_backward %grad_output, %input {beta, threshold}`:
    ``grad_output * z / (z + 1)`` with ``z = exp(beta x)``, and ``grad_output`` where
    ``beta x > threshold``. Emitted by softplus's VJP rule."""

    name = "ltorch.softplus_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    beta = prop_def(Number)
    threshold = prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "beta", "threshold")


def threshold_backward(grad_output: torch.Tensor, input: torch.Tensor,
                       threshold: float) -> torch.Tensor:
    """``grad_output`` where ``input > threshold``, else 0, with torch's one kernel (relu's
    backward on its result, as eager's autograd runs it)."""
    return _K_THRESHOLD_BACKWARD(grad_output, input, threshold)


@ltorch_op(threshold_backward)
class ThresholdBackwardOp(NNOp):
    """`%dx = ltorch.threshold_backward %grad_output, %input {threshold}`: ``grad_output``
    where ``input > threshold``, else 0. Emitted by relu's VJP rule (on relu's result): one
    eager kernel where the composition is two."""

    name = "ltorch.threshold_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    threshold = prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "threshold")


@ltorch_op(torch.sigmoid, floats=True)
class SigmoidOp(ActivationOp):
    """`%y = ltorch.sigmoid %x`: ``1 / (1 + exp(-x))``"""

    name = "ltorch.sigmoid"


class FloatActivationOp(ActivationOp):
    """An activation eager computes on floating-point tensors only (its kernels refuse
    integers and bools, which the meta kernels would type)."""

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        x = operand_types[0]
        if isinstance(x, TensorType) and not is_float(x.dtype):
            raise ShapeError(f"{cls.name}: takes a floating-point tensor, got {x.dtype} "
                             "(eager's kernel is not implemented for it)")
        return super().infer(*operand_types, **params)


@ltorch_op(F.hardswish, floats=True)
class HardswishOp(FloatActivationOp):
    """`%y = ltorch.hardswish %x`: ``x * min(max(x + 3, 0), 6) / 6``"""

    name = "ltorch.hardswish"


@ltorch_op(F.hardsigmoid, floats=True)
class HardsigmoidOp(FloatActivationOp):
    """`%y = ltorch.hardsigmoid %x`: ``min(max(x + 3, 0), 6) / 6``"""

    name = "ltorch.hardsigmoid"


# --------------------------------------------------------------------------- backward kernels
#
# Emitted by the VJP rules of the ops above (never traced from user code): each is the one
# kernel eager's autograd runs.


class BackwardKernelOp(NNOp):
    """``%dx = ltorch.<act>_backward %grad_output, %input``: ``grad_output`` times the
    activation's derivative at ``input``."""

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input")


def hardswish_backward(grad_output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``grad_output * hardswish'(input)`` with torch's one kernel."""
    return _K_HARDSWISH_BACKWARD(grad_output, input)


@ltorch_op(hardswish_backward, type_rule=R.same_as_first, symbolic=True)
class HardswishBackwardOp(BackwardKernelOp):
    """`%dx = ltorch.hardswish_backward %grad_output, %input`: 0 where ``x <= -3``,
    ``grad_output (x / 3 + 1/2)`` where ``-3 < x < 3``, ``grad_output`` from 3 on"""

    name = "ltorch.hardswish_backward"


def hardsigmoid_backward(grad_output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
    """``grad_output * hardsigmoid'(input)`` with torch's one kernel."""
    return _K_HARDSIGMOID_BACKWARD(grad_output, input)


@ltorch_op(hardsigmoid_backward, type_rule=R.same_as_first, symbolic=True)
class HardsigmoidBackwardOp(BackwardKernelOp):
    """`%dx = ltorch.hardsigmoid_backward %grad_output, %input`: ``grad_output / 6`` where
    ``-3 < x < 3``, else 0"""

    name = "ltorch.hardsigmoid_backward"


def gelu_backward(grad_output: torch.Tensor, input: torch.Tensor,
                  approximate: str | None = None) -> torch.Tensor:
    """``grad_output * gelu'(input)`` with torch's one kernel."""
    return _K_GELU_BACKWARD(grad_output, input, approximate=approximate or "none")


@ltorch_op(gelu_backward, type_rule=R.same_as_first, symbolic=True)
class GeluBackwardOp(NNOp):
    """`%dx = ltorch.gelu_backward %grad_output, %input {approximate?}`: ``grad_output *
    (Φ(x) + x φ(x))``, or the derivative of the tanh approximation"""

    name = "ltorch.gelu_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    approximate = opt_prop_def(StringAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "approximate")
    DEFAULTS: ClassVar[dict[str, Any]] = {"approximate": "none"}
