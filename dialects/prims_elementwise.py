"""Elementwise prims: unary and binary math, comparisons, ``where`` and
``convert_element_type``. Every one is ``Elementwise``; operands have one shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from xdsl.ir import Attribute
from xdsl.irdl import operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.prims_base import (
    AnyValue,
    check_same_device,
    like_type,
    prim,
    shape_err,
    tensor_operand,
)
from thunder_ir.dialects.traits import Elementwise, NoDerivative
from thunder_ir.dialects.types import NumberType, TensorType, is_float, number_type, tensor_type

# --------------------------------------------------------------------------- elementwise


class UnaryOp(ThunderOp):
    """``%y = prims.<op> %x``: elementwise, result of the operand's shape and dtype."""

    x = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    TORCH_FN: ClassVar[Callable[..., Any]]

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        """Families restrict the dtypes they accept."""

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return dtype

    @classmethod
    def infer(cls, x: Any) -> TensorType:
        x = tensor_operand(cls.name, x)
        cls.check_dtype(x.dtype)
        return like_type(x, dtype=cls.result_dtype(x.dtype))

    @classmethod
    def ref(cls, x: torch.Tensor) -> torch.Tensor:
        return cls.TORCH_FN(x)

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        return args, {}


class FloatUnaryOp(UnaryOp):
    """A unary op defined on floating-point tensors only (exp, sin, erf…)."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if not is_float(dtype):
            raise shape_err(cls.name, f"expects a floating-point tensor, got {dtype}")


class NumericUnaryOp(UnaryOp):
    """A unary op on int or float tensors (abs, neg, sign, floor…)."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if dtype == torch.bool:
            raise shape_err(cls.name, "expects a numeric tensor, got bool")


class PredicateUnaryOp(UnaryOp):
    """A unary op returning a bool tensor (isnan, isinf, isfinite, logical_not)."""

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return torch.bool


@prim(torch.abs)
class AbsOp(NumericUnaryOp):
    """`%y = prims.abs %x`"""

    name = "prims.abs"


@prim(torch.neg)
class NegOp(NumericUnaryOp):
    """`%y = prims.neg %x`"""

    name = "prims.neg"


@prim(torch.sign)
class SignOp(NumericUnaryOp):
    """`%y = prims.sign %x`"""

    name = "prims.sign"


@prim(torch.floor)
class FloorOp(NumericUnaryOp):
    """`%y = prims.floor %x`"""

    name = "prims.floor"


@prim(torch.ceil)
class CeilOp(NumericUnaryOp):
    """`%y = prims.ceil %x`"""

    name = "prims.ceil"


@prim(torch.round)
class RoundOp(NumericUnaryOp):
    """`%y = prims.round %x` (half to even, as torch)"""

    name = "prims.round"


@prim(torch.trunc)
class TruncOp(NumericUnaryOp):
    """`%y = prims.trunc %x`"""

    name = "prims.trunc"


@prim(torch.exp)
class ExpOp(FloatUnaryOp):
    """`%y = prims.exp %x`"""

    name = "prims.exp"


@prim(torch.exp2)
class Exp2Op(FloatUnaryOp):
    """`%y = prims.exp2 %x`"""

    name = "prims.exp2"


@prim(torch.expm1)
class Expm1Op(FloatUnaryOp):
    """`%y = prims.expm1 %x`"""

    name = "prims.expm1"


@prim(torch.log)
class LogOp(FloatUnaryOp):
    """`%y = prims.log %x`"""

    name = "prims.log"


@prim(torch.log1p)
class Log1pOp(FloatUnaryOp):
    """`%y = prims.log1p %x`"""

    name = "prims.log1p"


@prim(torch.log2)
class Log2Op(FloatUnaryOp):
    """`%y = prims.log2 %x`"""

    name = "prims.log2"


@prim(torch.sin)
class SinOp(FloatUnaryOp):
    """`%y = prims.sin %x`"""

    name = "prims.sin"


@prim(torch.cos)
class CosOp(FloatUnaryOp):
    """`%y = prims.cos %x`"""

    name = "prims.cos"


@prim(torch.tan)
class TanOp(FloatUnaryOp):
    """`%y = prims.tan %x`"""

    name = "prims.tan"


@prim(torch.tanh)
class TanhOp(FloatUnaryOp):
    """`%y = prims.tanh %x`"""

    name = "prims.tanh"


@prim(torch.asin)
class AsinOp(FloatUnaryOp):
    """`%y = prims.asin %x`"""

    name = "prims.asin"


@prim(torch.acos)
class AcosOp(FloatUnaryOp):
    """`%y = prims.acos %x`"""

    name = "prims.acos"


@prim(torch.atan)
class AtanOp(FloatUnaryOp):
    """`%y = prims.atan %x`"""

    name = "prims.atan"


@prim(torch.sinh)
class SinhOp(FloatUnaryOp):
    """`%y = prims.sinh %x`"""

    name = "prims.sinh"


@prim(torch.cosh)
class CoshOp(FloatUnaryOp):
    """`%y = prims.cosh %x`"""

    name = "prims.cosh"


@prim(torch.sqrt)
class SqrtOp(FloatUnaryOp):
    """`%y = prims.sqrt %x`"""

    name = "prims.sqrt"


@prim(torch.rsqrt)
class RsqrtOp(FloatUnaryOp):
    """`%y = prims.rsqrt %x`"""

    name = "prims.rsqrt"


@prim(torch.reciprocal)
class ReciprocalOp(FloatUnaryOp):
    """`%y = prims.reciprocal %x`"""

    name = "prims.reciprocal"


@prim(torch.erf)
class ErfOp(FloatUnaryOp):
    """`%y = prims.erf %x`"""

    name = "prims.erf"


@prim(torch.erfc)
class ErfcOp(FloatUnaryOp):
    """`%y = prims.erfc %x`"""

    name = "prims.erfc"


@prim(torch.isnan)
class IsnanOp(PredicateUnaryOp):
    """`%y = prims.isnan %x` (bool result)"""

    name = "prims.isnan"
    traits = traits_def(NoDerivative())


@prim(torch.isinf)
class IsinfOp(PredicateUnaryOp):
    """`%y = prims.isinf %x` (bool result)"""

    name = "prims.isinf"
    traits = traits_def(NoDerivative())


@prim(torch.isfinite)
class IsfiniteOp(PredicateUnaryOp):
    """`%y = prims.isfinite %x` (bool result)"""

    name = "prims.isfinite"
    traits = traits_def(NoDerivative())


@prim(torch.logical_not)
class LogicalNotOp(PredicateUnaryOp):
    """`%y = prims.logical_not %x` (bool result)"""

    name = "prims.logical_not"
    traits = traits_def(NoDerivative())


@prim(torch.bitwise_not)
class BitwiseNotOp(UnaryOp):
    """`%y = prims.bitwise_not %x` (int or bool)"""

    name = "prims.bitwise_not"
    traits = traits_def(NoDerivative())

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if is_float(dtype):
            raise shape_err(cls.name, f"expects an int or bool tensor, got {dtype}")


def number_fits(py: type, dtype: torch.dtype) -> bool:
    """A Python number may join a tensor when it is no 'higher' kind than the tensor."""
    if py is bool:
        return True
    if py is int:
        return dtype != torch.bool
    return is_float(dtype)


class BinaryOp(ThunderOp):
    """``%z = prims.<op> %a, %b``: elementwise on equal shapes and dtypes.

    Either side may be a number (``!prims.number<…>``) of a kind the tensor's dtype can
    hold; at least one side is a tensor. The result takes the tensor's shape and dtype.
    """

    lhs = operand_def(AnyValue)
    rhs = operand_def(AnyValue)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    TORCH_FN: ClassVar[Callable[..., Any]]
    DIRECT: ClassVar[bool] = False
    """True if ``TORCH_FN(a, b)`` already returns `ref`'s result (dtype included, a number
    on either side): the torch lowering calls it directly instead of `ref`."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if dtype == torch.bool:
            raise shape_err(cls.name, "expects numeric tensors, got bool")

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return dtype

    @classmethod
    def infer(cls, a: Any, b: Any) -> TensorType:
        tensors = [t for t in (a, b) if isinstance(t, TensorType)]
        if not tensors:
            raise shape_err(cls.name, "needs at least one tensor operand")
        t = tensors[0]
        for u in tensors[1:]:
            if u.sizes != t.sizes:
                raise shape_err(cls.name, f"shapes {t.sizes} and {u.sizes} differ "
                                     "(broadcast with prims.broadcast_in_dim first)")
            if u.dtype != t.dtype:
                raise shape_err(cls.name, f"dtypes {t.dtype} and {u.dtype} differ "
                                     "(convert with prims.convert_element_type first)")
            if u.dev != t.dev:
                raise shape_err(cls.name, f"devices {t.dev} and {u.dev} differ")
        for n in (a, b):
            if isinstance(n, NumberType) and not number_fits(n.python_type, t.dtype):
                raise shape_err(cls.name, f"a {n.python_type.__name__} number cannot join a "
                                     f"{t.dtype} tensor without promotion")
        cls.check_dtype(t.dtype)
        return like_type(t, dtype=cls.result_dtype(t.dtype))

    @classmethod
    def ref(cls, a: Any, b: Any) -> torch.Tensor:
        # Many torch functions take no number on the left (eq, fmod, logical_and…): a number
        # becomes a 0-d tensor of the tensor's dtype, which `number_fits` makes lossless.
        a, b = _as_tensors(a, b)
        return cls.TORCH_FN(a, b).to(cls.result_dtype(a.dtype))

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        # Direct only where torch's function itself gives `ref`'s result (`DIRECT`).
        return (args, {}) if cls.DIRECT else None


class AnyBinaryOp(BinaryOp):
    """A binary op that accepts bool tensors too."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        pass


class FloatBinaryOp(BinaryOp):
    """A binary op on floating-point tensors only."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if not is_float(dtype):
            raise shape_err(cls.name, f"expects floating-point tensors, got {dtype}")


class CompareOp(AnyBinaryOp):
    """A comparison: bool result."""

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return torch.bool


class BitwiseOp(BinaryOp):
    """A bitwise op on int or bool tensors."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if is_float(dtype):
            raise shape_err(cls.name, f"expects int or bool tensors, got {dtype}")


def _div(a: Any, b: Any) -> torch.Tensor:
    dtype = a.dtype if isinstance(a, torch.Tensor) else b.dtype
    if is_float(dtype):
        return torch.true_divide(a, b)
    return torch.div(a, b, rounding_mode="trunc")


@prim(torch.add)
class AddOp(BinaryOp):
    """`%z = prims.add %a, %b`"""

    name = "prims.add"
    DIRECT: ClassVar[bool] = True


@prim(torch.sub)
class SubOp(BinaryOp):
    """`%z = prims.sub %a, %b`"""

    name = "prims.sub"
    DIRECT: ClassVar[bool] = True


@prim(torch.mul)
class MulOp(BinaryOp):
    """`%z = prims.mul %a, %b`"""

    name = "prims.mul"
    DIRECT: ClassVar[bool] = True


@prim(_div)
class DivOp(BinaryOp):
    """`%z = prims.div %a, %b`: true division on floats, truncating on ints."""

    name = "prims.div"


@prim(torch.remainder)
class RemainderOp(BinaryOp):
    """`%z = prims.remainder %a, %b`: Python's modulo (sign of the divisor)."""

    name = "prims.remainder"
    DIRECT: ClassVar[bool] = True


@prim(torch.fmod)
class FmodOp(BinaryOp):
    """`%z = prims.fmod %a, %b`: C's fmod (sign of the dividend)."""

    name = "prims.fmod"
    DIRECT: ClassVar[bool] = True


@prim(torch.pow)
class PowOp(BinaryOp):
    """`%z = prims.pow %a, %b`"""

    name = "prims.pow"
    DIRECT: ClassVar[bool] = True


@prim(torch.maximum)
class MaximumOp(AnyBinaryOp):
    """`%z = prims.maximum %a, %b` (NaN propagates)"""

    name = "prims.maximum"


@prim(torch.minimum)
class MinimumOp(AnyBinaryOp):
    """`%z = prims.minimum %a, %b` (NaN propagates)"""

    name = "prims.minimum"


@prim(torch.atan2)
class Atan2Op(FloatBinaryOp):
    """`%z = prims.atan2 %a, %b`"""

    name = "prims.atan2"


def _as_tensors(a: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Turns a number operand into a 0-d tensor of the other side's dtype."""
    if not isinstance(a, torch.Tensor):
        a = torch.tensor(a, dtype=b.dtype, device=b.device)
    if not isinstance(b, torch.Tensor):
        b = torch.tensor(b, dtype=a.dtype, device=a.device)
    return a, b


@prim(torch.eq)
class EqOp(CompareOp):
    """`%z = prims.eq %a, %b` (bool result)"""

    name = "prims.eq"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.ne)
class NeOp(CompareOp):
    """`%z = prims.ne %a, %b` (bool result)"""

    name = "prims.ne"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.lt)
class LtOp(CompareOp):
    """`%z = prims.lt %a, %b` (bool result)"""

    name = "prims.lt"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.le)
class LeOp(CompareOp):
    """`%z = prims.le %a, %b` (bool result)"""

    name = "prims.le"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.gt)
class GtOp(CompareOp):
    """`%z = prims.gt %a, %b` (bool result)"""

    name = "prims.gt"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.ge)
class GeOp(CompareOp):
    """`%z = prims.ge %a, %b` (bool result)"""

    name = "prims.ge"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_and)
class BitwiseAndOp(BitwiseOp):
    """`%z = prims.bitwise_and %a, %b`"""

    name = "prims.bitwise_and"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_or)
class BitwiseOrOp(BitwiseOp):
    """`%z = prims.bitwise_or %a, %b`"""

    name = "prims.bitwise_or"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_xor)
class BitwiseXorOp(BitwiseOp):
    """`%z = prims.bitwise_xor %a, %b`"""

    name = "prims.bitwise_xor"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.logical_and)
class LogicalAndOp(CompareOp):
    """`%z = prims.logical_and %a, %b` (bool result)"""

    name = "prims.logical_and"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.logical_or)
class LogicalOrOp(CompareOp):
    """`%z = prims.logical_or %a, %b` (bool result)"""

    name = "prims.logical_or"
    traits = traits_def(NoDerivative())
    DIRECT: ClassVar[bool] = True


@prim(torch.where)
class WhereOp(ThunderOp):
    """`%z = prims.where %cond, %a, %b`: equal shapes, bool condition, equal value dtypes."""

    name = "prims.where"

    pred = operand_def(TensorType)
    lhs = operand_def(AnyValue)
    rhs = operand_def(AnyValue)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())

    @classmethod
    def infer(cls, c: Any, a: Any, b: Any) -> TensorType:
        c = tensor_operand(cls.name, c, "condition")
        if c.dtype != torch.bool:
            raise shape_err(cls.name, f"condition must be bool, got {c.dtype}")
        tensors = [t for t in (a, b) if isinstance(t, TensorType)]
        check_same_device(cls.name, c, *tensors)
        for t in tensors:
            if t.sizes != c.sizes:
                raise shape_err(cls.name, f"shapes {c.sizes} and {t.sizes} differ")
        if len(tensors) == 2 and tensors[0].dtype != tensors[1].dtype:
            raise shape_err(cls.name, f"dtypes {tensors[0].dtype} and {tensors[1].dtype} differ")
        if tensors:
            dtype = tensors[0].dtype
            for n in (a, b):
                if isinstance(n, NumberType) and not number_fits(n.python_type, dtype):
                    raise shape_err(cls.name, f"a {n.python_type.__name__} number cannot join "
                                         f"a {dtype} tensor")
            return like_type(c, dtype=dtype)
        if a != b:
            raise shape_err(cls.name, f"number operands {a} and {b} differ in kind")
        dtype = {bool: torch.bool, int: torch.int64, float: torch.float32}[a.python_type]
        return like_type(c, dtype=dtype)

    @classmethod
    def ref(cls, c: torch.Tensor, a: Any, b: Any) -> torch.Tensor:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            a, b = _as_tensors(a, b)
        else:
            dtype = cls.infer(tensor_type(c.shape, torch.bool), number_type(type(a)),
                              number_type(type(b))).dtype
            a = torch.tensor(a, dtype=dtype, device=c.device)
            b = torch.tensor(b, dtype=dtype, device=c.device)
        return torch.where(c, a, b)


@prim()
class ConvertElementTypeOp(ThunderOp):
    """`%y = prims.convert_element_type %x {dtype = bf16}`"""

    name = "prims.convert_element_type"

    x = operand_def(TensorType)
    dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())

    @classmethod
    def infer(cls, x: Any, *, dtype: torch.dtype) -> TensorType:
        return like_type(tensor_operand(cls.name, x), dtype=dtype)

    @classmethod
    def ref(cls, x: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
        return x.to(dtype)
