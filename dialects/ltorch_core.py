"""ltorch ops, core families: elementwise, reductions, shape and creation ops.

Conventions (shared with the frontend):

* Operands are the tensor arguments, in torch's order and named as torch names them; where
  torch takes a number (``add``'s ``other``) the operand may be a ``!prims.number``.
* Params are the other arguments, named as torch names them, so the reference
  implementation is ``TORCH_FN(*operands, **params)`` and the shape rule is that call on
  meta tensors. Absent (``None``) params are left out of the call, which is what torch
  means by them.
* ``SIGNATURE`` lists torch's argument names in order; ``DEFAULTS``, the params' defaults.

Aliases the frontend maps onto these ops: ``Tensor.view`` → ``ltorch.view`` (functional,
same semantics as ``reshape``); ``x.to(dtype)``, ``.float()``, ``.half()``, ``.type(dt)`` →
``ltorch.to_dtype``; ``torch.max(x[, dim])`` → ``ltorch.max[_dim]`` (and ``min``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import (
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure

from thunder_ir.dialects import ltorch_rules as R
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.ltorch_base import LtorchOp, ltorch_op
from thunder_ir.dialects.prims_base import Int, IntArray, Number
from thunder_ir.dialects.torch import substitute
from thunder_ir.dialects.traits import (
    COPY,
    RESHAPE,
    RESTRIDE,
    VIEW,
    Creation,
    Elementwise,
    Movement,
    NoDerivative,
    Reduction,
    ViewLike,
)
from thunder_ir.dialects.types import NumberType, TensorType

AnyValue = TensorType | NumberType
Dims = DenseArrayBase | IntegerAttr  # an int or a tuple of ints
DType = Attribute  # an element type (f32, bf16, i64, i1…); see `types.DTYPE_BY_ELEMENT`


def _non_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


class CoreOp(LtorchOp):
    """Base of the core ltorch ops: the reference leaves absent (``None``) params out."""

    SIGNATURE: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        return cls.TORCH_FN(*operands, **{k: v for k, v in params.items() if v is not None})

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        return args, _non_none(params)


# --------------------------------------------------------------------------- binary


def _wrap_number(v: Any, like: Any) -> Any:
    """A Python number in torch's ``input`` slot (which most torch functions reject) becomes
    a 0-d tensor of the promoted dtype, so the result dtype is the one a number gives."""
    if isinstance(v, bool | int | float) and isinstance(like, torch.Tensor):
        return torch.tensor(v, dtype=torch.result_type(like, v), device=like.device)
    return v


class BinaryBase(CoreOp):
    """Family base of binary elementwise ops (no operand definitions)."""

    traits = traits_def(Pure(), Elementwise())

    @classmethod
    def ref(cls, a: Any, b: Any, **params: Any) -> Any:
        return super().ref(_wrap_number(a, b), b, **params)

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        # A number ``input`` is wrapped by `ref`: that call is not direct.
        if isinstance(op.operands[0].type, NumberType):
            return None
        return args, _non_none(params)


class BinaryOp(BinaryBase):
    """``%z = ltorch.<op> %input, %other``: torch broadcasting and type promotion; either
    side may be a number (a number ``input`` acts like torch's reflected operator)."""

    input = operand_def(AnyValue)
    other = operand_def(AnyValue)
    out = result_def(TensorType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other")
    NUMBER_OPERANDS: ClassVar[bool] = True


class TensorBinaryOp(BinaryBase):
    """``%z = ltorch.<op> %input, %other``: like `BinaryOp`, but torch takes tensors only."""

    input = operand_def(TensorType)
    other = operand_def(TensorType)
    out = result_def(TensorType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other")


@ltorch_op(torch.add, floats=R.alpha)
class AddOp(BinaryOp):
    """`%z = ltorch.add %input, %other {alpha}`: ``input + alpha * other``"""

    name = "ltorch.add"

    alpha = opt_prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other", "alpha")
    DEFAULTS: ClassVar[dict[str, Any]] = {"alpha": 1}


@ltorch_op(torch.sub, floats=R.alpha)
class SubOp(BinaryOp):
    """`%z = ltorch.sub %input, %other {alpha}`: ``input - alpha * other``"""

    name = "ltorch.sub"

    alpha = opt_prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other", "alpha")
    DEFAULTS: ClassVar[dict[str, Any]] = {"alpha": 1}


@ltorch_op(torch.mul, floats=True)
class MulOp(BinaryOp):
    """`%z = ltorch.mul %input, %other`"""

    name = "ltorch.mul"


@ltorch_op(torch.div, floats=R.rounding_mode)
class DivOp(BinaryOp):
    """`%z = ltorch.div %input, %other {rounding_mode = "trunc" | "floor"}` (true division
    when absent)"""

    name = "ltorch.div"

    rounding_mode = opt_prop_def(StringAttr)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other", "rounding_mode")
    DEFAULTS: ClassVar[dict[str, Any]] = {"rounding_mode": None}


@ltorch_op(torch.floor_divide, floats=True)
class FloorDivideOp(BinaryOp):
    """`%z = ltorch.floor_divide %input, %other`"""

    name = "ltorch.floor_divide"


@ltorch_op(torch.remainder, floats=True)
class RemainderOp(BinaryOp):
    """`%z = ltorch.remainder %input, %other` (sign of the divisor)"""

    name = "ltorch.remainder"


@ltorch_op(torch.fmod, floats=True)
class FmodOp(BinaryOp):
    """`%z = ltorch.fmod %input, %other` (sign of the dividend)"""

    name = "ltorch.fmod"


@ltorch_op(torch.pow, floats=True)
class PowOp(BinaryBase):
    """`%z = ltorch.pow %input, %exponent`"""

    name = "ltorch.pow"

    input = operand_def(AnyValue)
    exponent = operand_def(AnyValue)
    out = result_def(TensorType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "exponent")
    NUMBER_OPERANDS: ClassVar[bool] = True


@ltorch_op(torch.maximum, floats=True)
class MaximumOp(TensorBinaryOp):
    """`%z = ltorch.maximum %input, %other` (NaN propagates)"""

    name = "ltorch.maximum"


@ltorch_op(torch.minimum, floats=True)
class MinimumOp(TensorBinaryOp):
    """`%z = ltorch.minimum %input, %other` (NaN propagates)"""

    name = "ltorch.minimum"


@ltorch_op(torch.atan2, floats=True)
class Atan2Op(TensorBinaryOp):
    """`%z = ltorch.atan2 %input, %other`"""

    name = "ltorch.atan2"


@ltorch_op(torch.eq, type_rule=R.comparison, symbolic=True)
class EqOp(BinaryOp):
    """`%z = ltorch.eq %input, %other` (bool result)"""

    name = "ltorch.eq"


@ltorch_op(torch.ne, type_rule=R.comparison, symbolic=True)
class NeOp(BinaryOp):
    """`%z = ltorch.ne %input, %other` (bool result)"""

    name = "ltorch.ne"


@ltorch_op(torch.lt, type_rule=R.comparison, symbolic=True)
class LtOp(BinaryOp):
    """`%z = ltorch.lt %input, %other` (bool result)"""

    name = "ltorch.lt"


@ltorch_op(torch.le, type_rule=R.comparison, symbolic=True)
class LeOp(BinaryOp):
    """`%z = ltorch.le %input, %other` (bool result)"""

    name = "ltorch.le"


@ltorch_op(torch.gt, type_rule=R.comparison, symbolic=True)
class GtOp(BinaryOp):
    """`%z = ltorch.gt %input, %other` (bool result)"""

    name = "ltorch.gt"


@ltorch_op(torch.ge, type_rule=R.comparison, symbolic=True)
class GeOp(BinaryOp):
    """`%z = ltorch.ge %input, %other` (bool result)"""

    name = "ltorch.ge"


@ltorch_op(torch.bitwise_and)
class BitwiseAndOp(BinaryOp):
    """`%z = ltorch.bitwise_and %input, %other` (int or bool)"""

    name = "ltorch.bitwise_and"


@ltorch_op(torch.bitwise_or)
class BitwiseOrOp(BinaryOp):
    """`%z = ltorch.bitwise_or %input, %other` (int or bool)"""

    name = "ltorch.bitwise_or"


@ltorch_op(torch.bitwise_xor)
class BitwiseXorOp(BinaryOp):
    """`%z = ltorch.bitwise_xor %input, %other` (int or bool)"""

    name = "ltorch.bitwise_xor"


@ltorch_op(torch.logical_and)
class LogicalAndOp(TensorBinaryOp):
    """`%z = ltorch.logical_and %input, %other` (bool result)"""

    name = "ltorch.logical_and"


@ltorch_op(torch.logical_or)
class LogicalOrOp(TensorBinaryOp):
    """`%z = ltorch.logical_or %input, %other` (bool result)"""

    name = "ltorch.logical_or"


# --------------------------------------------------------------------------- unary


class UnaryOp(CoreOp):
    """``%y = ltorch.<op> %input``: elementwise; float functions of int or bool tensors
    return the default float dtype, as torch does."""

    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input",)


@ltorch_op(torch.neg, floats=True)
class NegOp(UnaryOp):
    """`%y = ltorch.neg %input`"""

    name = "ltorch.neg"


@ltorch_op(torch.abs, floats=True)
class AbsOp(UnaryOp):
    """`%y = ltorch.abs %input`"""

    name = "ltorch.abs"


@ltorch_op(torch.exp, floats=True)
class ExpOp(UnaryOp):
    """`%y = ltorch.exp %input`"""

    name = "ltorch.exp"


@ltorch_op(torch.exp2, floats=True)
class Exp2Op(UnaryOp):
    """`%y = ltorch.exp2 %input`"""

    name = "ltorch.exp2"


@ltorch_op(torch.expm1, floats=True)
class Expm1Op(UnaryOp):
    """`%y = ltorch.expm1 %input`"""

    name = "ltorch.expm1"


@ltorch_op(torch.log, floats=True)
class LogOp(UnaryOp):
    """`%y = ltorch.log %input`"""

    name = "ltorch.log"


@ltorch_op(torch.log1p, floats=True)
class Log1pOp(UnaryOp):
    """`%y = ltorch.log1p %input`"""

    name = "ltorch.log1p"


@ltorch_op(torch.log2, floats=True)
class Log2Op(UnaryOp):
    """`%y = ltorch.log2 %input`"""

    name = "ltorch.log2"


@ltorch_op(torch.sin, floats=True)
class SinOp(UnaryOp):
    """`%y = ltorch.sin %input`"""

    name = "ltorch.sin"


@ltorch_op(torch.cos, floats=True)
class CosOp(UnaryOp):
    """`%y = ltorch.cos %input`"""

    name = "ltorch.cos"


@ltorch_op(torch.tan, floats=True)
class TanOp(UnaryOp):
    """`%y = ltorch.tan %input`"""

    name = "ltorch.tan"


@ltorch_op(torch.tanh, floats=True)
class TanhOp(UnaryOp):
    """`%y = ltorch.tanh %input`"""

    name = "ltorch.tanh"


@ltorch_op(torch.asin, floats=True)
class AsinOp(UnaryOp):
    """`%y = ltorch.asin %input`"""

    name = "ltorch.asin"


@ltorch_op(torch.acos, floats=True)
class AcosOp(UnaryOp):
    """`%y = ltorch.acos %input`"""

    name = "ltorch.acos"


@ltorch_op(torch.atan, floats=True)
class AtanOp(UnaryOp):
    """`%y = ltorch.atan %input`"""

    name = "ltorch.atan"


@ltorch_op(torch.sinh, floats=True)
class SinhOp(UnaryOp):
    """`%y = ltorch.sinh %input`"""

    name = "ltorch.sinh"


@ltorch_op(torch.cosh, floats=True)
class CoshOp(UnaryOp):
    """`%y = ltorch.cosh %input`"""

    name = "ltorch.cosh"


@ltorch_op(torch.sqrt, floats=True)
class SqrtOp(UnaryOp):
    """`%y = ltorch.sqrt %input`"""

    name = "ltorch.sqrt"


@ltorch_op(torch.rsqrt, floats=True)
class RsqrtOp(UnaryOp):
    """`%y = ltorch.rsqrt %input`"""

    name = "ltorch.rsqrt"


@ltorch_op(torch.reciprocal, floats=True)
class ReciprocalOp(UnaryOp):
    """`%y = ltorch.reciprocal %input`"""

    name = "ltorch.reciprocal"


@ltorch_op(torch.sign, floats=True)
class SignOp(UnaryOp):
    """`%y = ltorch.sign %input`"""

    name = "ltorch.sign"


@ltorch_op(torch.floor, floats=True)
class FloorOp(UnaryOp):
    """`%y = ltorch.floor %input`"""

    name = "ltorch.floor"


@ltorch_op(torch.ceil, floats=True)
class CeilOp(UnaryOp):
    """`%y = ltorch.ceil %input`"""

    name = "ltorch.ceil"


@ltorch_op(torch.round, floats=R.decimals)
class RoundOp(UnaryOp):
    """`%y = ltorch.round %input {decimals}` (half to even)"""

    name = "ltorch.round"

    decimals = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "decimals")
    DEFAULTS: ClassVar[dict[str, Any]] = {"decimals": 0}


@ltorch_op(torch.trunc, floats=True)
class TruncOp(UnaryOp):
    """`%y = ltorch.trunc %input`"""

    name = "ltorch.trunc"


@ltorch_op(torch.erf, floats=True)
class ErfOp(UnaryOp):
    """`%y = ltorch.erf %input`"""

    name = "ltorch.erf"


@ltorch_op(torch.erfc, floats=True)
class ErfcOp(UnaryOp):
    """`%y = ltorch.erfc %input`"""

    name = "ltorch.erfc"


@ltorch_op(torch.isnan)
class IsnanOp(UnaryOp):
    """`%y = ltorch.isnan %input` (bool result)"""

    name = "ltorch.isnan"


@ltorch_op(torch.isinf)
class IsinfOp(UnaryOp):
    """`%y = ltorch.isinf %input` (bool result)"""

    name = "ltorch.isinf"


@ltorch_op(torch.isfinite)
class IsfiniteOp(UnaryOp):
    """`%y = ltorch.isfinite %input` (bool result)"""

    name = "ltorch.isfinite"


@ltorch_op(torch.logical_not)
class LogicalNotOp(UnaryOp):
    """`%y = ltorch.logical_not %input` (bool result)"""

    name = "ltorch.logical_not"


@ltorch_op(torch.bitwise_not)
class BitwiseNotOp(UnaryOp):
    """`%y = ltorch.bitwise_not %input` (int or bool)"""

    name = "ltorch.bitwise_not"


# --------------------------------------------------------------------------- selection


@ltorch_op(torch.where, type_rule=R.where, symbolic=True)
class WhereOp(CoreOp):
    """`%z = ltorch.where %condition, %input, %other`: branches may be numbers."""

    name = "ltorch.where"

    condition = operand_def(TensorType)
    input = operand_def(AnyValue)
    other = operand_def(AnyValue)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("condition", "input", "other")


@ltorch_op(torch.masked_fill, type_rule=R.masked_fill, symbolic=True)
class MaskedFillOp(CoreOp):
    """`%z = ltorch.masked_fill %input, %mask {value}`: ``value`` (a number) where ``mask``"""

    name = "ltorch.masked_fill"

    input = operand_def(TensorType)
    mask = operand_def(TensorType)
    value = prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "mask", "value")


@ltorch_op(torch.clamp)
class ClampOp(CoreOp):
    """`%z = ltorch.clamp %input {min, max}`: numbers, either may be absent"""

    name = "ltorch.clamp"

    input = operand_def(TensorType)
    min = opt_prop_def(Number)
    max = opt_prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "min", "max")
    DEFAULTS: ClassVar[dict[str, Any]] = {"min": None, "max": None}


def _to_dtype(input: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return input.to(dtype)


@ltorch_op(_to_dtype)
class ToDtypeOp(CoreOp):
    """`%y = ltorch.to_dtype %input {dtype = bf16}`: ``x.to(dtype)``, ``.float()``…"""

    name = "ltorch.to_dtype"

    input = operand_def(TensorType)
    dtype = prop_def(DType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dtype")


# --------------------------------------------------------------------------- reductions


class ReductionFamily(CoreOp):
    """``%y = ltorch.<op> %input {dim, keepdim, …}``: torch's reductions; ``dim`` absent
    (or ``()``) reduces every dim. `ReductionOp` and `ArgReductionOp` declare the kind."""

    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "keepdim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None, "keepdim": False}
    # Whether torch takes ``dim=None`` (needed with ``keepdim``); if not, it is left out.
    DIM_NONE: ClassVar[bool] = True

    @classmethod
    def ref(cls, input: Any, **params: Any) -> Any:
        params = {"dim": None, **params} if cls.DIM_NONE and "keepdim" in params else params
        return cls.TORCH_FN(input, **{k: v for k, v in params.items()
                                      if v is not None or (k == "dim" and cls.DIM_NONE)})

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        return args, {k: v for k, v in params.items()
                      if v is not None or (k == "dim" and cls.DIM_NONE)}


class ReductionOp(ReductionFamily):
    """A reduction to values (sum, mean, amax…)."""

    traits = traits_def(Reduction())


class ArgReductionOp(ReductionFamily):
    """A reduction to positions (argmax, argmin): int64."""

    traits = traits_def(Reduction(indices=True))


@ltorch_op(torch.sum, type_rule=R.reduction, symbolic=True)
class SumOp(ReductionOp):
    """`%y = ltorch.sum %input {dim, keepdim, dtype}` (ints and bools sum to int64)"""

    name = "ltorch.sum"

    dim = opt_prop_def(Dims)
    keepdim = opt_prop_def(Int)
    dtype = opt_prop_def(DType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "keepdim", "dtype")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None, "keepdim": False, "dtype": None}


@ltorch_op(torch.mean, type_rule=R.reduction, symbolic=True)
class MeanOp(ReductionOp):
    """`%y = ltorch.mean %input {dim, keepdim, dtype}`"""

    name = "ltorch.mean"

    dim = opt_prop_def(Dims)
    keepdim = opt_prop_def(Int)
    dtype = opt_prop_def(DType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "keepdim", "dtype")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None, "keepdim": False, "dtype": None}


@ltorch_op(torch.var)
class VarOp(ReductionOp):
    """`%y = ltorch.var %input {dim, correction, keepdim}` (a positional ``unbiased`` bool
    lands on ``correction`` with the same meaning)"""

    name = "ltorch.var"

    dim = opt_prop_def(Dims)
    correction = opt_prop_def(Number)
    keepdim = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "correction", "keepdim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None, "correction": 1, "keepdim": False}


@ltorch_op(torch.amax, type_rule=R.reduction, symbolic=True)
class AmaxOp(ReductionOp):
    """`%y = ltorch.amax %input {dim, keepdim}`"""

    name = "ltorch.amax"

    dim = opt_prop_def(Dims)
    keepdim = opt_prop_def(Int)
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": (), "keepdim": False}


@ltorch_op(torch.amin, type_rule=R.reduction, symbolic=True)
class AminOp(ReductionOp):
    """`%y = ltorch.amin %input {dim, keepdim}`"""

    name = "ltorch.amin"

    dim = opt_prop_def(Dims)
    keepdim = opt_prop_def(Int)
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": (), "keepdim": False}


@ltorch_op(torch.prod)
class ProdOp(ReductionOp):
    """`%y = ltorch.prod %input {dim, keepdim, dtype}` (one ``dim`` or all)"""

    name = "ltorch.prod"

    dim = opt_prop_def(Int)
    keepdim = opt_prop_def(Int)
    dtype = opt_prop_def(DType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "keepdim", "dtype")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None, "keepdim": False, "dtype": None}

    @classmethod
    def ref(  # type: ignore[override]  # torch.prod's positional signature
            cls, input: Any, dim: int | None = None, keepdim: bool | None = None,
            dtype: torch.dtype | None = None) -> Any:
        if dim is None:  # torch.prod has no dim=None and no keepdim without a dim
            if keepdim:
                raise TypeError("prod(): keepdim=True needs a dim")
            return torch.prod(input, dtype=dtype)
        return torch.prod(input, dim, bool(keepdim), dtype=dtype)


@ltorch_op(torch.argmax)
class ArgmaxOp(ArgReductionOp):
    """`%y = ltorch.argmax %input {dim, keepdim}` (int64; flat index when ``dim`` absent)"""

    name = "ltorch.argmax"

    dim = opt_prop_def(Int)
    keepdim = opt_prop_def(Int)


@ltorch_op(torch.argmin)
class ArgminOp(ArgReductionOp):
    """`%y = ltorch.argmin %input {dim, keepdim}` (int64; flat index when ``dim`` absent)"""

    name = "ltorch.argmin"

    dim = opt_prop_def(Int)
    keepdim = opt_prop_def(Int)


@ltorch_op(torch.max)
class MaxOp(ReductionOp):
    """`%y = ltorch.max %input`: ``torch.max(x)``, the largest element (0-d)"""

    name = "ltorch.max"

    SIGNATURE: ClassVar[tuple[str, ...]] = ("input",)
    DEFAULTS: ClassVar[dict[str, Any]] = {}


@ltorch_op(torch.min)
class MinOp(ReductionOp):
    """`%y = ltorch.min %input`: ``torch.min(x)``, the smallest element (0-d)"""

    name = "ltorch.min"

    SIGNATURE: ClassVar[tuple[str, ...]] = ("input",)
    DEFAULTS: ClassVar[dict[str, Any]] = {}


class ReductionWithIndicesOp(CoreOp):
    """``%values, %indices = ltorch.<op> %input {dim, keepdim}``: ``torch.max(x, dim)``."""

    input = operand_def(TensorType)
    dim = prop_def(Int)
    keepdim = opt_prop_def(Int)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    traits = traits_def(Pure(), Reduction(indices=True))
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "keepdim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"keepdim": False}

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        return tuple(super().ref(*operands, **params))


@ltorch_op(torch.max)
class MaxDimOp(ReductionWithIndicesOp):
    """`%values, %indices = ltorch.max_dim %input {dim, keepdim}`"""

    name = "ltorch.max_dim"


@ltorch_op(torch.min)
class MinDimOp(ReductionWithIndicesOp):
    """`%values, %indices = ltorch.min_dim %input {dim, keepdim}`"""

    name = "ltorch.min_dim"


@ltorch_op(torch.topk)
class TopkOp(CoreOp):
    """`%values, %indices = ltorch.topk %input {k, dim, largest, sorted}`: the ``k``
    largest (or smallest) elements along ``dim`` and their positions"""

    name = "ltorch.topk"

    input = operand_def(TensorType)
    k = prop_def(Int)
    dim = opt_prop_def(Int)
    largest = opt_prop_def(Int)
    sorted = opt_prop_def(Int)
    values = result_def(TensorType)
    indices = result_def(TensorType)
    traits = traits_def(Pure(), Reduction(indices=True))
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "k", "dim", "largest", "sorted")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": -1, "largest": True, "sorted": True}

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        return tuple(super().ref(*operands, **params))


# --------------------------------------------------------------------------- shape ops


class ShapeOp(CoreOp):
    """Family base of ops that move data without computing on it: ``%y = ltorch.<op> %input``."""

    input = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input",)


@ltorch_op(torch.reshape, type_rule=R.reshape, symbolic=True)
class ReshapeOp(ShapeOp):
    """`%y = ltorch.reshape %input {shape = array<i64: 4, -1>}` (one -1 allowed)"""

    name = "ltorch.reshape"
    traits = traits_def(ViewLike(RESHAPE))

    shape = prop_def(IntArray)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "shape")


def _view(input: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return torch.reshape(input, tuple(size))


def _eager_view(input: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return input.view(tuple(size))


@ltorch_op(_view, type_rule=R.reshape, symbolic=True)
class ViewOp(ShapeOp):
    """`%y = ltorch.view %input {size}`: ``Tensor.view`` (aten names the shape ``size``);
    values as ``reshape``, since the IR has no aliasing (tracing checks, on eager's layout,
    that eager can view it: ``LAYOUT_FN``)"""

    name = "ltorch.view"
    traits = traits_def(ViewLike(RESHAPE))

    size = prop_def(IntArray)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "size")
    LAYOUT_FN: ClassVar[Any] = staticmethod(_eager_view)


@ltorch_op(torch.permute, type_rule=R.permute, symbolic=True)
class PermuteOp(ShapeOp):
    """`%y = ltorch.permute %input {dims}`"""

    name = "ltorch.permute"
    traits = traits_def(ViewLike(RESTRIDE))

    dims = prop_def(IntArray)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dims")


@ltorch_op(torch.transpose, type_rule=R.transpose, symbolic=True)
class TransposeOp(ShapeOp):
    """`%y = ltorch.transpose %input {dim0, dim1}`"""

    name = "ltorch.transpose"
    traits = traits_def(ViewLike(RESTRIDE))

    dim0 = prop_def(Int)
    dim1 = prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim0", "dim1")


@ltorch_op(torch.Tensor.contiguous, type_rule=R.same_type, symbolic=True)
class ContiguousOp(ShapeOp):
    """`%y = ltorch.contiguous %input {memory_format}`: the identity on values, laid out in
    ``memory_format`` (absent: row-major). Tracing records it only where eager copies (an
    input already in that layout is returned as it is)."""

    name = "ltorch.contiguous"
    traits = traits_def(ViewLike(COPY))

    memory_format = opt_prop_def(Attribute)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "memory_format")


@ltorch_op(torch.clone, type_rule=R.same_type, symbolic=True)
class CloneOp(ShapeOp):
    """`%y = ltorch.clone %input {memory_format}`: the identity on values, in a new tensor
    laid out as ``memory_format`` says (absent: the input's layout, where it is dense)"""

    name = "ltorch.clone"
    traits = traits_def(ViewLike(COPY))

    memory_format = opt_prop_def(Attribute)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "memory_format")


@ltorch_op(torch.flatten, type_rule=R.flatten, symbolic=True)
class FlattenOp(ShapeOp):
    """`%y = ltorch.flatten %input {start_dim, end_dim}`"""

    name = "ltorch.flatten"
    traits = traits_def(ViewLike(RESHAPE))

    start_dim = opt_prop_def(Int)
    end_dim = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "start_dim", "end_dim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"start_dim": 0, "end_dim": -1}


@ltorch_op(torch.unsqueeze, type_rule=R.unsqueeze, symbolic=True)
class UnsqueezeOp(ShapeOp):
    """`%y = ltorch.unsqueeze %input {dim}`"""

    name = "ltorch.unsqueeze"
    traits = traits_def(ViewLike(VIEW))

    dim = prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim")


@ltorch_op(torch.squeeze)
class SqueezeOp(ShapeOp):
    """`%y = ltorch.squeeze %input {dim}`: ``dim`` an int, a tuple, or absent (all size-1 dims)"""

    name = "ltorch.squeeze"
    traits = traits_def(ViewLike(VIEW))

    dim = opt_prop_def(Dims)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": None}


@ltorch_op(torch.Tensor.expand, type_rule=R.expand, symbolic=True)
class ExpandOp(ShapeOp):
    """`%y = ltorch.expand %input {size}`: -1 keeps a dim's size"""

    name = "ltorch.expand"
    traits = traits_def(ViewLike(RESTRIDE))

    size = prop_def(IntArray)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "size")


@ltorch_op(torch.triu)
class TriuOp(ShapeOp):
    """`%y = ltorch.triu %input {diagonal}`: zeroes below the ``diagonal``-th diagonal"""

    name = "ltorch.triu"
    traits = traits_def(Elementwise())

    diagonal = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "diagonal")
    DEFAULTS: ClassVar[dict[str, Any]] = {"diagonal": 0}


@ltorch_op(torch.tril)
class TrilOp(ShapeOp):
    """`%y = ltorch.tril %input {diagonal}`: zeroes above the ``diagonal``-th diagonal"""

    name = "ltorch.tril"
    traits = traits_def(Elementwise())

    diagonal = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "diagonal")
    DEFAULTS: ClassVar[dict[str, Any]] = {"diagonal": 0}


class MultiResultOp(CoreOp):
    """``%a, %b, … = ltorch.<op> …``: ops with a variable number of results."""

    outs = var_result_def(TensorType)
    traits = traits_def(Pure(), Movement(many=True))

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        return list(super().ref(*operands, **params))

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        # The generated code unpacks the sequence torch.split/chunk return.
        return args, _non_none(params)


@ltorch_op(torch.split, type_rule=R.split, symbolic=True)
class SplitOp(MultiResultOp):
    """`%a, %b = ltorch.split %tensor {split_size_or_sections, dim}` (an int or a tuple)"""

    name = "ltorch.split"

    tensor = operand_def(TensorType)
    split_size_or_sections = prop_def(IntArray | IntegerAttr)
    dim = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("tensor", "split_size_or_sections", "dim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": 0}


@ltorch_op(torch.chunk)
class ChunkOp(MultiResultOp):
    """`%a, %b = ltorch.chunk %input {chunks, dim}`"""

    name = "ltorch.chunk"

    input = operand_def(TensorType)
    chunks = prop_def(Int)
    dim = opt_prop_def(Int)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "chunks", "dim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": 0}


class JoinOp(CoreOp):
    """``%y = ltorch.<op> %a, %b, … {dim}``: joins tensors (promoting their dtypes)."""

    tensors = var_operand_def(TensorType)
    dim = opt_prop_def(Int)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement(many=True))
    SIGNATURE: ClassVar[tuple[str, ...]] = ("tensors", "dim")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dim": 0}

    @classmethod
    def ref(cls, tensors: Sequence[Any], **params: Any) -> Any:
        return super().ref(list(tensors), **params)

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        # torch.cat/stack take the tuple of tensors as is.
        return args, _non_none(params)


@ltorch_op(torch.cat, type_rule=R.cat, symbolic=True)
class CatOp(JoinOp):
    """`%y = ltorch.cat %a, %b, … {dim}`"""

    name = "ltorch.cat"


@ltorch_op(torch.stack)
class StackOp(JoinOp):
    """`%y = ltorch.stack %a, %b, … {dim}`"""

    name = "ltorch.stack"


@ltorch_op(operator.getitem, type_rule=R.getitem, symbolic=True)  # (symbolic: u0 bounds)
class GetitemOp(CoreOp):
    """`%y = ltorch.getitem %input, %i0, … {index}`: ``input[index]``; in ``index`` each
    tensor is ``#prims.operand<k>`` (the k-th of the tensor operands after ``input``)."""

    name = "ltorch.getitem"

    input = operand_def(TensorType)
    indices = var_operand_def(TensorType)
    index = opt_prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "index")

    @classmethod
    def ref(cls, input: Any, indices: Sequence[Any], index: Any = None) -> Any:
        return input[substitute(index, list(indices))]

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        # The index's OperandRefs were shifted to the flat operand positions: the call
        # substitutes the index tensors itself.
        return [args[0], params.get("index")], {}


# --------------------------------------------------------------------------- creation


class CreationOp(CoreOp):
    """``%y = ltorch.<op> {size, …, dtype, device}``: a new tensor from static arguments
    (device absent: cpu; dtype absent: torch's default for the op)."""

    out = result_def(TensorType)
    traits = traits_def(Pure(), Creation())
    dtype = opt_prop_def(DType)
    device = opt_prop_def(StringAttr)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("size", "dtype", "device")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dtype": None, "device": None}


def _arange(start: Any = 0, end: Any = None, step: Any = 1, **kw: Any) -> torch.Tensor:
    if end is None:  # arange(end)
        start, end = 0, start
    return torch.arange(start, end, step, **kw)


@ltorch_op(_arange, type_rule=R.arange, symbolic=True)
class ArangeOp(CreationOp):
    """`%y = ltorch.arange {start, end, step, dtype, device}`"""

    name = "ltorch.arange"

    start = opt_prop_def(Number)
    end = opt_prop_def(Number)
    step = opt_prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("start", "end", "step", "dtype", "device")
    DEFAULTS: ClassVar[dict[str, Any]] = {"start": 0, "end": None, "step": 1, "dtype": None,
                                          "device": None}


@ltorch_op(torch.zeros)
class ZerosOp(CreationOp):
    """`%y = ltorch.zeros {size, dtype, device}`"""

    name = "ltorch.zeros"

    size = prop_def(IntArray)


@ltorch_op(torch.ones)
class OnesOp(CreationOp):
    """`%y = ltorch.ones {size, dtype, device}`"""

    name = "ltorch.ones"

    size = prop_def(IntArray)


@ltorch_op(torch.empty)
class EmptyOp(CreationOp):
    """`%y = ltorch.empty {size, dtype, device}`: contents unspecified (decomposes to zeros)"""

    name = "ltorch.empty"

    size = prop_def(IntArray)


@ltorch_op(torch.full)
class FullOp(CreationOp):
    """`%y = ltorch.full {size, fill_value, dtype, device}` (dtype absent: from the value)"""

    name = "ltorch.full"

    size = prop_def(IntArray)
    fill_value = prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("size", "fill_value", "dtype", "device")


class LikeOp(CreationOp):
    """``%y = ltorch.<op>_like %input {…, dtype, device}``: ``input``'s shape; its dtype and
    device unless given."""

    input = operand_def(TensorType)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dtype", "device")


@ltorch_op(torch.zeros_like)
class ZerosLikeOp(LikeOp):
    """`%y = ltorch.zeros_like %input {dtype, device}`"""

    name = "ltorch.zeros_like"
    traits = traits_def(NoDerivative())


@ltorch_op(torch.ones_like)
class OnesLikeOp(LikeOp):
    """`%y = ltorch.ones_like %input {dtype, device}`"""

    name = "ltorch.ones_like"
    traits = traits_def(NoDerivative())


@ltorch_op(torch.full_like)
class FullLikeOp(LikeOp):
    """`%y = ltorch.full_like %input {fill_value, dtype, device}`"""

    name = "ltorch.full_like"
    traits = traits_def(NoDerivative())

    fill_value = prop_def(Number)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "fill_value", "dtype", "device")

