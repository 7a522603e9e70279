"""The ``prims`` dialect: the primitive set every ``ltorch`` op decomposes into.

Prims are strict where ltorch is forgiving: no broadcasting (``broadcast_in_dim`` does it
explicitly), no type promotion (``convert_element_type`` does it), reductions take explicit
dims and drop them. That keeps each prim's shape rule, reference implementation, VJP rule
and fusion translation small.

Each family base below declares operands, results and the shape/dtype rule once; a leaf is
a name, its traits and a docstring. ``@prim(torch_fn)`` registers a leaf and attaches its
torch reference implementation. RNG (``bernoulli``) is not ``Pure``, so CSE and DCE keep it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import torch
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
)
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure

from thunder_ir.dialects.base import BASE_ATTRIBUTES, ShapeError, ThunderOp, op_table
from thunder_ir.dialects.traits import (
    RESHAPE,
    RESTRIDE,
    VIEW,
    Creation,
    Elementwise,
    Library,
    Movement,
    NumberConstant,
    Random,
    Reduction,
    ViewLike,
)
from thunder_ir.dialects.types import (
    HandleType,
    NumberType,
    TensorType,
    is_float,
    is_int,
    number_type,
    tensor_type,
)

AnyValue = TensorType | NumberType
IntArray = DenseArrayBase
Number = IntegerAttr | FloatAttr
PadConfig = ArrayAttr | DenseArrayBase  # () of a 0-d tensor is dense

_T = TypeVar("_T", bound=type[ThunderOp])

PRIMS: list[type[ThunderOp]] = []


def prim(torch_fn: Callable[..., Any] | None = None) -> Callable[[_T], _T]:
    """Declares a leaf prim: IRDL definition, registration, and its torch function."""

    def wrap(cls: _T) -> _T:
        op = irdl_op_definition(cls)
        if torch_fn is not None:
            op.TORCH_FN = staticmethod(torch_fn)  # type: ignore[attr-defined]
        PRIMS.append(op)
        return op  # type: ignore[return-value]

    return wrap


# --------------------------------------------------------------------------- helpers


def _err(name: str, msg: str) -> ShapeError:
    return ShapeError(f"{name}: {msg}")


def _tensor(name: str, t: Any, what: str = "operand") -> TensorType:
    if not isinstance(t, TensorType):
        raise _err(name, f"{what} must be a tensor, got {t}")
    return t


def _dims(name: str, dims: Sequence[int], rank: int) -> tuple[int, ...]:
    """Checks that ``dims`` are distinct, in range and non-negative (prims take no -1)."""
    out = tuple(dims)
    if len(set(out)) != len(out) or any(not 0 <= d < rank for d in out):
        raise _err(name, f"dims {out} are not distinct dims of a rank-{rank} tensor")
    return out


def _check_sizes(name: str, shape: Sequence[int]) -> None:
    """A result shape given as a static argument must have no negative size."""
    if any(d < 0 for d in shape):
        raise _err(name, f"negative size in shape {tuple(shape)}")


def _same_device(name: str, *types: Any) -> None:
    """Checks that the tensor types among ``types`` live on one device."""
    devs = {t.dev for t in types if isinstance(t, TensorType)}
    if len(devs) > 1:
        raise _err(name, f"operands live on different devices ({', '.join(sorted(devs))})")


def _like(t: TensorType, shape: Sequence[int] | None = None,
          dtype: torch.dtype | None = None) -> TensorType:
    return tensor_type(t.sizes if shape is None else shape, t.dtype if dtype is None else dtype,
                       t.dev)


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
        x = _tensor(cls.name, x)
        cls.check_dtype(x.dtype)
        return _like(x, dtype=cls.result_dtype(x.dtype))

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
            raise _err(cls.name, f"expects a floating-point tensor, got {dtype}")


class NumericUnaryOp(UnaryOp):
    """A unary op on int or float tensors (abs, neg, sign, floor…)."""

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if dtype == torch.bool:
            raise _err(cls.name, "expects a numeric tensor, got bool")


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


@prim(torch.isinf)
class IsinfOp(PredicateUnaryOp):
    """`%y = prims.isinf %x` (bool result)"""

    name = "prims.isinf"


@prim(torch.isfinite)
class IsfiniteOp(PredicateUnaryOp):
    """`%y = prims.isfinite %x` (bool result)"""

    name = "prims.isfinite"


@prim(torch.logical_not)
class LogicalNotOp(PredicateUnaryOp):
    """`%y = prims.logical_not %x` (bool result)"""

    name = "prims.logical_not"


@prim(torch.bitwise_not)
class BitwiseNotOp(UnaryOp):
    """`%y = prims.bitwise_not %x` (int or bool)"""

    name = "prims.bitwise_not"

    @classmethod
    def check_dtype(cls, dtype: torch.dtype) -> None:
        if is_float(dtype):
            raise _err(cls.name, f"expects an int or bool tensor, got {dtype}")


def _number_fits(py: type, dtype: torch.dtype) -> bool:
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
            raise _err(cls.name, "expects numeric tensors, got bool")

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return dtype

    @classmethod
    def infer(cls, a: Any, b: Any) -> TensorType:
        tensors = [t for t in (a, b) if isinstance(t, TensorType)]
        if not tensors:
            raise _err(cls.name, "needs at least one tensor operand")
        t = tensors[0]
        for u in tensors[1:]:
            if u.sizes != t.sizes:
                raise _err(cls.name, f"shapes {t.sizes} and {u.sizes} differ "
                                     "(broadcast with prims.broadcast_in_dim first)")
            if u.dtype != t.dtype:
                raise _err(cls.name, f"dtypes {t.dtype} and {u.dtype} differ "
                                     "(convert with prims.convert_element_type first)")
            if u.dev != t.dev:
                raise _err(cls.name, f"devices {t.dev} and {u.dev} differ")
        for n in (a, b):
            if isinstance(n, NumberType) and not _number_fits(n.python_type, t.dtype):
                raise _err(cls.name, f"a {n.python_type.__name__} number cannot join a "
                                     f"{t.dtype} tensor without promotion")
        cls.check_dtype(t.dtype)
        return _like(t, dtype=cls.result_dtype(t.dtype))

    @classmethod
    def ref(cls, a: Any, b: Any) -> torch.Tensor:
        # Many torch functions take no number on the left (eq, fmod, logical_and…): a number
        # becomes a 0-d tensor of the tensor's dtype, which `_number_fits` makes lossless.
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
            raise _err(cls.name, f"expects floating-point tensors, got {dtype}")


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
            raise _err(cls.name, f"expects int or bool tensors, got {dtype}")


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
    DIRECT: ClassVar[bool] = True


@prim(torch.ne)
class NeOp(CompareOp):
    """`%z = prims.ne %a, %b` (bool result)"""

    name = "prims.ne"
    DIRECT: ClassVar[bool] = True


@prim(torch.lt)
class LtOp(CompareOp):
    """`%z = prims.lt %a, %b` (bool result)"""

    name = "prims.lt"
    DIRECT: ClassVar[bool] = True


@prim(torch.le)
class LeOp(CompareOp):
    """`%z = prims.le %a, %b` (bool result)"""

    name = "prims.le"
    DIRECT: ClassVar[bool] = True


@prim(torch.gt)
class GtOp(CompareOp):
    """`%z = prims.gt %a, %b` (bool result)"""

    name = "prims.gt"
    DIRECT: ClassVar[bool] = True


@prim(torch.ge)
class GeOp(CompareOp):
    """`%z = prims.ge %a, %b` (bool result)"""

    name = "prims.ge"
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_and)
class BitwiseAndOp(BitwiseOp):
    """`%z = prims.bitwise_and %a, %b`"""

    name = "prims.bitwise_and"
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_or)
class BitwiseOrOp(BitwiseOp):
    """`%z = prims.bitwise_or %a, %b`"""

    name = "prims.bitwise_or"
    DIRECT: ClassVar[bool] = True


@prim(torch.bitwise_xor)
class BitwiseXorOp(BitwiseOp):
    """`%z = prims.bitwise_xor %a, %b`"""

    name = "prims.bitwise_xor"
    DIRECT: ClassVar[bool] = True


@prim(torch.logical_and)
class LogicalAndOp(CompareOp):
    """`%z = prims.logical_and %a, %b` (bool result)"""

    name = "prims.logical_and"
    DIRECT: ClassVar[bool] = True


@prim(torch.logical_or)
class LogicalOrOp(CompareOp):
    """`%z = prims.logical_or %a, %b` (bool result)"""

    name = "prims.logical_or"
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
        c = _tensor(cls.name, c, "condition")
        if c.dtype != torch.bool:
            raise _err(cls.name, f"condition must be bool, got {c.dtype}")
        tensors = [t for t in (a, b) if isinstance(t, TensorType)]
        _same_device(cls.name, c, *tensors)
        for t in tensors:
            if t.sizes != c.sizes:
                raise _err(cls.name, f"shapes {c.sizes} and {t.sizes} differ")
        if len(tensors) == 2 and tensors[0].dtype != tensors[1].dtype:
            raise _err(cls.name, f"dtypes {tensors[0].dtype} and {tensors[1].dtype} differ")
        if tensors:
            dtype = tensors[0].dtype
            for n in (a, b):
                if isinstance(n, NumberType) and not _number_fits(n.python_type, dtype):
                    raise _err(cls.name, f"a {n.python_type.__name__} number cannot join "
                                         f"a {dtype} tensor")
            return _like(c, dtype=dtype)
        if a != b:
            raise _err(cls.name, f"number operands {a} and {b} differ in kind")
        dtype = {bool: torch.bool, int: torch.int64, float: torch.float32}[a.python_type]
        return _like(c, dtype=dtype)

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


# --------------------------------------------------------------------------- shape ops


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
        return _like(_tensor(cls.name, x), dtype=dtype)

    @classmethod
    def ref(cls, x: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
        return x.to(dtype)


@prim()
class BroadcastInDimOp(ThunderOp):
    """`%y = prims.broadcast_in_dim %x {shape, broadcast_dims}`: operand dim i becomes
    result dim ``broadcast_dims[i]``; its size must equal it or be 1."""

    name = "prims.broadcast_in_dim"

    x = operand_def(TensorType)
    shape = prop_def(IntArray)
    broadcast_dims = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), ViewLike(RESTRIDE))

    @classmethod
    def infer(cls, x: Any, *, shape: Sequence[int], broadcast_dims: Sequence[int]
              ) -> TensorType:
        x = _tensor(cls.name, x)
        _check_sizes(cls.name, shape)
        if len(broadcast_dims) != x.rank:
            raise _err(cls.name, f"needs one broadcast dim per operand dim, got "
                                 f"{tuple(broadcast_dims)} for shape {x.sizes}")
        dims = _dims(cls.name, broadcast_dims, len(shape))
        if list(dims) != sorted(dims):
            raise _err(cls.name, f"broadcast dims {dims} must be increasing")
        for size, d in zip(x.sizes, dims):
            if size != 1 and size != shape[d]:
                raise _err(cls.name, f"cannot broadcast shape {x.sizes} to {tuple(shape)} "
                                     f"with dims {dims}")
        return _like(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, *, shape: Sequence[int], broadcast_dims: Sequence[int]
            ) -> torch.Tensor:
        view = [1] * len(shape)
        for size, d in zip(x.shape, broadcast_dims):
            view[d] = size
        return x.reshape(view).expand(tuple(shape))


@prim()
class ReshapeOp(ThunderOp):
    """`%y = prims.reshape %x {shape}`: same number of elements."""

    name = "prims.reshape"

    x = operand_def(TensorType)
    shape = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), ViewLike(RESHAPE))

    @classmethod
    def infer(cls, x: Any, *, shape: Sequence[int]) -> TensorType:
        x = _tensor(cls.name, x)
        if any(d < 0 for d in shape) or math.prod(shape) != x.numel():
            raise _err(cls.name, f"cannot reshape {x.sizes} ({x.numel()} elements) to "
                                 f"{tuple(shape)}")
        return _like(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, *, shape: Sequence[int]) -> torch.Tensor:
        return x.reshape(tuple(shape))


@prim()
class TransposeOp(ThunderOp):
    """`%y = prims.transpose %x {permutation}`: result dim i is operand dim perm[i]."""

    name = "prims.transpose"

    x = operand_def(TensorType)
    permutation = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), ViewLike(RESTRIDE))

    @classmethod
    def infer(cls, x: Any, *, permutation: Sequence[int]) -> TensorType:
        x = _tensor(cls.name, x)
        perm = _dims(cls.name, permutation, x.rank)
        if len(perm) != x.rank:
            raise _err(cls.name, f"permutation {perm} does not cover shape {x.sizes}")
        return _like(x, shape=[x.sizes[p] for p in perm])

    @classmethod
    def ref(cls, x: torch.Tensor, *, permutation: Sequence[int]) -> torch.Tensor:
        return x.permute(tuple(permutation))


@prim()
class SliceOp(ThunderOp):
    """`%y = prims.slice %x {start_indices, end_indices, strides}`: in-range, step >= 1."""

    name = "prims.slice"

    x = operand_def(TensorType)
    start_indices = prop_def(IntArray)
    end_indices = prop_def(IntArray)
    strides = opt_prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), ViewLike(VIEW))

    @classmethod
    def infer(cls, x: Any, *, start_indices: Sequence[int], end_indices: Sequence[int],
              strides: Sequence[int] | None = None) -> TensorType:
        x = _tensor(cls.name, x)
        strides = strides or (1,) * x.rank
        if not len(start_indices) == len(end_indices) == len(strides) == x.rank:
            raise _err(cls.name, f"needs one start, end and stride per dim of {x.sizes}")
        shape = []
        for size, lo, hi, st in zip(x.sizes, start_indices, end_indices, strides):
            if not (0 <= lo <= hi <= size) or st < 1:
                raise _err(cls.name, f"slice [{lo}:{hi}:{st}] is out of range for a dim of "
                                     f"size {size} in shape {x.sizes}")
            shape.append((hi - lo + st - 1) // st)
        return _like(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, *, start_indices: Sequence[int], end_indices: Sequence[int],
            strides: Sequence[int] | None = None) -> torch.Tensor:
        strides = strides or (1,) * x.ndim
        return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, end_indices, strides))]


@prim()
class SqueezeOp(ThunderOp):
    """`%y = prims.squeeze %x {dims}`: removes the listed dims, each of size 1."""

    name = "prims.squeeze"

    x = operand_def(TensorType)
    dims = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), ViewLike(VIEW))

    @classmethod
    def infer(cls, x: Any, *, dims: Sequence[int]) -> TensorType:
        x = _tensor(cls.name, x)
        ds = _dims(cls.name, dims, x.rank)
        if any(x.sizes[d] != 1 for d in ds):
            raise _err(cls.name, f"dims {ds} of shape {x.sizes} are not all of size 1")
        return _like(x, shape=[s for i, s in enumerate(x.sizes) if i not in ds])

    @classmethod
    def ref(cls, x: torch.Tensor, *, dims: Sequence[int]) -> torch.Tensor:
        return x.reshape([s for i, s in enumerate(x.shape) if i not in dims])


@prim()
class PadOp(ThunderOp):
    """`%y = prims.pad %x {padding_value, padding_config}`: per dim ``(low, high, interior)``;
    negative low/high crop."""

    name = "prims.pad"

    x = operand_def(TensorType)
    padding_value = prop_def(Number)
    padding_config = prop_def(PadConfig)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement())

    @classmethod
    def infer(cls, x: Any, *, padding_value: Any,
              padding_config: Sequence[Sequence[int]]) -> TensorType:
        x = _tensor(cls.name, x)
        if len(padding_config) != x.rank or any(len(c) != 3 for c in padding_config):
            raise _err(cls.name, f"needs (low, high, interior) per dim of {x.sizes}")
        shape = []
        for size, (lo, hi, mid) in zip(x.sizes, padding_config):
            if mid < 0:
                raise _err(cls.name, "interior padding must be >= 0")
            n = size + lo + hi + max(size - 1, 0) * mid
            if n < 0:
                raise _err(cls.name, f"padding {(lo, hi, mid)} leaves a negative size")
            shape.append(n)
        return _like(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, *, padding_value: Any,
            padding_config: Sequence[Sequence[int]]) -> torch.Tensor:
        if all(mid == 0 and lo >= 0 and hi >= 0 for lo, hi, mid in padding_config):
            # constant_pad_nd: one kernel eagerly, one pointwise op for Inductor.
            pads = [p for lo, hi, _ in reversed(padding_config) for p in (lo, hi)]
            return torch.nn.functional.pad(x, pads, value=padding_value)
        inner = [s + max(s - 1, 0) * mid for s, (_, _, mid) in zip(x.shape, padding_config)]
        lo_pad = [max(lo, 0) for lo, _, _ in padding_config]
        full = [i + max(lo, 0) + max(hi, 0) for i, (lo, hi, _) in zip(inner, padding_config)]
        out = torch.full(full, padding_value, dtype=x.dtype, device=x.device)
        idx = tuple(slice(lo, lo + i, mid + 1) for lo, i, (_, _, mid)
                    in zip(lo_pad, inner, padding_config))
        out[idx] = x
        crop = tuple(slice(-min(lo, 0), f + min(hi, 0)) for f, (lo, hi, _)
                     in zip(full, padding_config))
        return out[crop]


@prim()
class CatOp(ThunderOp):
    """`%y = prims.cat %a, %b, ... {dim}`: equal shapes except along ``dim``."""

    name = "prims.cat"

    tensors = var_operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement(many=True))

    @classmethod
    def infer(cls, tensors: Sequence[Any], *, dim: int) -> TensorType:
        if not tensors:
            raise _err(cls.name, "needs at least one tensor")
        ts = [_tensor(cls.name, t) for t in tensors]
        _same_device(cls.name, *ts)
        first = ts[0]
        if not 0 <= dim < first.rank:
            raise _err(cls.name, f"dim {dim} is out of range for shape {first.sizes}")
        total = 0
        for t in ts:
            same = all(a == b for i, (a, b) in enumerate(zip(t.sizes, first.sizes)) if i != dim)
            if t.rank != first.rank or not same:
                raise _err(cls.name, f"shapes {first.sizes} and {t.sizes} differ outside dim "
                                     f"{dim}")
            if t.dtype != first.dtype:
                raise _err(cls.name, f"dtypes {first.dtype} and {t.dtype} differ")
            total += t.sizes[dim]
        shape = list(first.sizes)
        shape[dim] = total
        return _like(first, shape=shape)

    @classmethod
    def ref(cls, tensors: Sequence[torch.Tensor], *, dim: int) -> torch.Tensor:
        return torch.cat(list(tensors), dim)


@prim()
class FlipOp(ThunderOp):
    """`%y = prims.flip %x {dims}`"""

    name = "prims.flip"

    x = operand_def(TensorType)
    dims = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement())

    @classmethod
    def infer(cls, x: Any, *, dims: Sequence[int]) -> TensorType:
        x = _tensor(cls.name, x)
        _dims(cls.name, dims, x.rank)
        return x

    @classmethod
    def ref(cls, x: torch.Tensor, *, dims: Sequence[int]) -> torch.Tensor:
        return torch.flip(x, tuple(dims))


# --------------------------------------------------------------------------- reductions


class ReductionOp(ThunderOp):
    """``%y = prims.<op> %x {dims}``: reduces the listed dims and drops them."""

    x = operand_def(TensorType)
    dims = prop_def(IntArray)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Reduction())
    TORCH_FN: ClassVar[Callable[..., Any]]
    # An extremum (amax, amin) has no value on an empty dim; a sum or product has one.
    NEEDS_NONEMPTY: ClassVar[bool] = False

    @classmethod
    def result_dtype(cls, dtype: torch.dtype) -> torch.dtype:
        return dtype

    @classmethod
    def infer(cls, x: Any, *, dims: Sequence[int], **_: Any) -> TensorType:
        x = _tensor(cls.name, x)
        ds = _dims(cls.name, dims, x.rank)
        if cls.NEEDS_NONEMPTY and any(x.sizes[d] == 0 for d in ds):
            raise _err(cls.name, f"cannot reduce an empty dim of shape {x.sizes} over {ds}")
        return _like(x, shape=[s for i, s in enumerate(x.sizes) if i not in ds],
                     dtype=cls.result_dtype(x.dtype))

    @classmethod
    def ref(cls, x: torch.Tensor, *, dims: Sequence[int], **kw: Any) -> torch.Tensor:
        if not dims:
            return x.clone().to(cls.result_dtype(x.dtype))
        return cls.TORCH_FN(x, tuple(dims), **kw)


def _sum(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    return torch.sum(x, dims, dtype=x.dtype)


def _prod(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, d, dtype=x.dtype)
    return x


@prim(_sum)
class SumOp(ReductionOp):
    """`%y = prims.sum %x {dims}` (accumulates in the operand's dtype)"""

    name = "prims.sum"


@prim(_prod)
class ProdOp(ReductionOp):
    """`%y = prims.prod %x {dims}`"""

    name = "prims.prod"


@prim(torch.amax)
class AmaxOp(ReductionOp):
    """`%y = prims.amax %x {dims}`"""

    name = "prims.amax"
    NEEDS_NONEMPTY: ClassVar[bool] = True


@prim(torch.amin)
class AminOp(ReductionOp):
    """`%y = prims.amin %x {dims}`"""

    name = "prims.amin"
    NEEDS_NONEMPTY: ClassVar[bool] = True


@prim()
class VarOp(ReductionOp):
    """`%y = prims.var %x {dims, correction}`: float input; Bessel-style ``correction``."""

    name = "prims.var"

    correction = prop_def(Number)

    @classmethod
    def infer(  # type: ignore[override]  # takes `correction`, not arbitrary params
            cls, x: Any, *, dims: Sequence[int], correction: float = 1.0) -> TensorType:
        x = _tensor(cls.name, x)
        if not is_float(x.dtype):
            raise _err(cls.name, f"expects a floating-point tensor, got {x.dtype}")
        return super().infer(x, dims=dims)

    @classmethod
    def ref(  # type: ignore[override]  # takes `correction`, not arbitrary params
            cls, x: torch.Tensor, *, dims: Sequence[int], correction: float = 1.0
            ) -> torch.Tensor:
        if not dims:
            return torch.zeros_like(x) if correction == 0 else torch.full_like(x, math.nan)
        return torch.var(x, tuple(dims), correction=correction)


class ArgReductionOp(ThunderOp):
    """``%y = prims.<op> %x {dim}``: the int64 index of the extreme along ``dim``."""

    x = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Reduction(indices=True))
    TORCH_FN: ClassVar[Callable[..., Any]]

    @classmethod
    def infer(cls, x: Any, *, dim: int) -> TensorType:
        x = _tensor(cls.name, x)
        _dims(cls.name, (dim,), x.rank)
        if x.dtype == torch.bool:
            raise _err(cls.name, "expects a numeric tensor, got bool")
        if x.sizes[dim] == 0:
            raise _err(cls.name, f"cannot reduce an empty dim {dim} of shape {x.sizes}")
        return _like(x, shape=[s for i, s in enumerate(x.sizes) if i != dim],
                     dtype=torch.int64)

    @classmethod
    def ref(cls, x: torch.Tensor, *, dim: int) -> torch.Tensor:
        return cls.TORCH_FN(x, dim)


@prim(torch.argmax)
class ArgmaxOp(ArgReductionOp):
    """`%y = prims.argmax %x {dim}`"""

    name = "prims.argmax"


@prim(torch.argmin)
class ArgminOp(ArgReductionOp):
    """`%y = prims.argmin %x {dim}`"""

    name = "prims.argmin"


# --------------------------------------------------------------------------- linear algebra


@prim(torch.matmul)
class MatmulOp(ThunderOp):
    """`%y = prims.matmul %a, %b`: torch.matmul semantics (1-D, 2-D and batched)."""

    name = "prims.matmul"

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, a: Any, b: Any) -> TensorType:
        a, b = _tensor(cls.name, a), _tensor(cls.name, b)
        _same_device(cls.name, a, b)
        if a.dtype != b.dtype or not (is_float(a.dtype) or is_int(a.dtype)):
            raise _err(cls.name, f"needs equal numeric dtypes, got {a.dtype} and {b.dtype}")
        if a.rank == 0 or b.rank == 0:
            raise _err(cls.name, f"operands must be at least 1-D, got {a.sizes} and {b.sizes}")
        sa, sb = list(a.sizes), list(b.sizes)
        a1, b1 = len(sa) == 1, len(sb) == 1
        if a1:
            sa = [1, *sa]
        if b1:
            sb = [*sb, 1]
        if sa[-1] != sb[-2]:
            raise _err(cls.name, f"shapes {a.sizes} and {b.sizes} cannot be multiplied "
                                 f"({sa[-1]} != {sb[-2]})")
        batch = broadcast_shapes(cls.name, sa[:-2], sb[:-2])
        shape = [*batch, sa[-2], sb[-1]]
        if b1:
            shape.pop(-1)
        if a1:
            shape.pop(-2 if not b1 else -1)
        return _like(a, shape=shape)


@prim(torch.nn.functional.linear)
class LinearOp(ThunderOp):
    """`%y = prims.linear %x, %w[, %bias]`: ``x @ w.T + bias``."""

    name = "prims.linear"

    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, w: Any, bias: Any = None) -> TensorType:
        x, w = _tensor(cls.name, x), _tensor(cls.name, w)
        b = None if bias is None else _tensor(cls.name, bias, "bias")
        _same_device(cls.name, x, w, b)
        if w.rank not in (1, 2) or x.rank < 1 or x.sizes[-1] != w.sizes[-1]:
            raise _err(cls.name, f"input {x.sizes} and weight {w.sizes} do not fit")
        if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
            raise _err(cls.name, "input, weight and bias must share a dtype")
        if not (is_float(x.dtype) or is_int(x.dtype)):
            raise _err(cls.name, f"needs a numeric dtype, got {x.dtype}")
        out_shape = [*x.sizes[:-1], *w.sizes[:-1]]
        if b is not None and b.sizes != tuple(w.sizes[:-1]):
            raise _err(cls.name, f"bias {b.sizes} does not fit weight {w.sizes}")
        if b is not None and w.rank == 1 and x.rank != 1:  # as torch.nn.functional.linear
            raise _err(cls.name, f"a 1-D weight {w.sizes} with a bias needs a 1-D input, "
                                 f"got {x.sizes}")
        return _like(x, shape=out_shape)


def broadcast_shapes(name: str, *shapes: Sequence[int]) -> list[int]:
    """Numpy-style broadcast of several shapes; `ShapeError` naming ``name`` on mismatch."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    raise _err(name, f"shapes {', '.join(str(tuple(x)) for x in shapes)} "
                                     "do not broadcast")
                out[i] = d
    return out


# --------------------------------------------------------------------------- creation and RNG


class FactoryOp(ThunderOp):
    """Base of the ops that make a tensor from static arguments (creation and RNG)."""

    @classmethod
    def _check_device(cls, device: str) -> None:
        if not (device in ("cpu", "meta")
                or (device.startswith("cuda:") and device[5:].isdigit())):
            raise _err(cls.name, f"device must be cpu, meta or cuda:N, got {device!r}")


class CreationOp(FactoryOp):
    """Family of ops that make a tensor from static arguments, deterministically."""

    traits = traits_def(Creation())


@prim()
class IotaOp(CreationOp):
    """`%y = prims.iota {length, start, step, device, dtype}`: ``start + step * arange``."""

    name = "prims.iota"

    length = prop_def(IntegerAttr)
    start = prop_def(Number)
    step = prop_def(Number)
    device = prop_def(StringAttr)
    dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, *, length: int, start: Any, step: Any, device: str, dtype: torch.dtype
              ) -> TensorType:
        if length < 0:
            raise _err(cls.name, f"length must be >= 0, got {length}")
        cls._check_device(device)
        return tensor_type((length,), dtype, device)

    @classmethod
    def ref(cls, *, length: int, start: Any, step: Any, device: str, dtype: torch.dtype
            ) -> torch.Tensor:
        wide = torch.float64 if is_float(dtype) or float in (type(start), type(step)) \
            else torch.int64
        return (torch.arange(length, device=device, dtype=wide) * step + start).to(dtype)


@prim()
class FullOp(CreationOp):
    """`%y = prims.full {shape, fill_value, device, dtype}`"""

    name = "prims.full"

    shape = prop_def(IntArray)
    fill_value = prop_def(Number)
    device = prop_def(StringAttr)
    dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, *, shape: Sequence[int], fill_value: Any, device: str, dtype: torch.dtype
              ) -> TensorType:
        cls._check_device(device)
        _check_sizes(cls.name, shape)
        return tensor_type(shape, dtype, device)

    @classmethod
    def ref(cls, *, shape: Sequence[int], fill_value: Any, device: str, dtype: torch.dtype
            ) -> torch.Tensor:
        return torch.full(tuple(shape), fill_value, dtype=dtype, device=device)


@prim()
class BernoulliOp(FactoryOp):
    """`%y = prims.bernoulli {shape, p, device, dtype}`: ones with probability ``p``, zeros
    otherwise.

    Drawn from torch's default generator exactly as eager's dropout draws its noise
    (``torch.empty(shape, dtype=dtype, device=device).bernoulli_(p)``), so a program's
    random numbers are eager's, given the same seed. Not ``Pure``: every op is a draw, in
    program order, and two equal ops are never merged.
    """

    name = "prims.bernoulli"

    shape = prop_def(IntArray)
    p = prop_def(Number)
    device = prop_def(StringAttr)
    dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Random())

    @classmethod
    def infer(cls, *, shape: Sequence[int], p: float, device: str, dtype: torch.dtype
              ) -> TensorType:
        if not is_float(dtype):
            raise _err(cls.name, f"dtype must be floating point, got {dtype}")
        if not 0.0 <= p <= 1.0:
            raise _err(cls.name, f"p must be in [0, 1], got {p}")
        cls._check_device(device)
        _check_sizes(cls.name, shape)
        return tensor_type(shape, dtype, device)

    @classmethod
    def ref(cls, *, shape: Sequence[int], p: float, device: str, dtype: torch.dtype
            ) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, device=device).bernoulli_(p)


@prim()
class BernoulliLikeOp(ThunderOp):
    """`%y = prims.bernoulli_like %x {p}`: ones with probability ``p`` and zeros, in ``x``'s
    shape, dtype and memory layout: ``torch.empty_like(x).bernoulli_(p)``, eager dropout's
    noise (a transposed input draws in its own memory order). ``x``'s values are not read.
    Not ``Pure``."""

    name = "prims.bernoulli_like"

    input = operand_def(TensorType)
    p = prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Random())

    @classmethod
    def infer(cls, input: Any, *, p: float) -> TensorType:
        t = _tensor(cls.name, input)
        if not is_float(t.dtype):
            raise _err(cls.name, f"dtype must be floating point, got {t.dtype}")
        if not 0.0 <= p <= 1.0:
            raise _err(cls.name, f"p must be in [0, 1], got {p}")
        return t

    @classmethod
    def ref(cls, input: torch.Tensor, *, p: float) -> torch.Tensor:
        return torch.empty_like(input).bernoulli_(p)


# --------------------------------------------------------------------------- indexing


def _index_tensor(name: str, t: Any) -> TensorType:
    t = _tensor(name, t, "index")
    if t.dtype not in (torch.int32, torch.int64):
        raise _err(name, f"index must be int32 or int64, got {t.dtype}")
    return t


@prim()
class TakeOp(ThunderOp):
    """`%y = prims.take %x, %index {dim}`: ``index_select`` with a 1-D index."""

    name = "prims.take"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, *, dim: int) -> TensorType:
        x, idx = _tensor(cls.name, x), _index_tensor(cls.name, index)
        _same_device(cls.name, x, idx)
        _dims(cls.name, (dim,), x.rank)
        if idx.rank != 1:
            raise _err(cls.name, f"index must be 1-D, got shape {idx.sizes}")
        shape = list(x.sizes)
        shape[dim] = idx.sizes[0]
        return _like(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, *, dim: int) -> torch.Tensor:
        return torch.index_select(x, dim, index)


@prim()
class GatherOp(ThunderOp):
    """`%y = prims.gather %x, %index {dim}`: ``torch.gather`` (result has the index's shape)."""

    name = "prims.gather"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, *, dim: int) -> TensorType:
        x, idx = _tensor(cls.name, x), _index_tensor(cls.name, index)
        _same_device(cls.name, x, idx)
        _dims(cls.name, (dim,), x.rank)
        if idx.rank != x.rank or any(i > s for k, (i, s) in enumerate(zip(idx.sizes, x.sizes))
                                     if k != dim):
            raise _err(cls.name, f"index shape {idx.sizes} does not fit input {x.sizes}")
        return _like(x, shape=idx.sizes)

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, *, dim: int) -> torch.Tensor:
        return torch.gather(x, dim, index.to(torch.int64))


@prim()
class IndexAddOp(ThunderOp):
    """`%y = prims.index_add %x, %index, %source {dim}`: out-of-place ``index_add``."""

    name = "prims.index_add"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    source = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, source: Any, *, dim: int) -> TensorType:
        x, idx = _tensor(cls.name, x), _index_tensor(cls.name, index)
        src = _tensor(cls.name, source, "source")
        _same_device(cls.name, x, idx, src)
        _dims(cls.name, (dim,), x.rank)
        expected = list(x.sizes)
        if idx.rank != 1:
            raise _err(cls.name, f"index must be 1-D, got {idx.sizes}")
        expected[dim] = idx.sizes[0]
        if list(src.sizes) != expected or src.dtype != x.dtype:
            raise _err(cls.name, f"source {src.pretty()} does not fit input {x.pretty()} and "
                                 f"index {idx.sizes} along dim {dim}")
        return x

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, *, dim: int
            ) -> torch.Tensor:
        return torch.index_add(x, dim, index, source)


@prim()
class ScatterAddOp(ThunderOp):
    """`%y = prims.scatter_add %x, %index, %src {dim}`: out-of-place ``scatter_add``."""

    name = "prims.scatter_add"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    src = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, src: Any, *, dim: int) -> TensorType:
        x, idx = _tensor(cls.name, x), _index_tensor(cls.name, index)
        s = _tensor(cls.name, src, "src")
        _same_device(cls.name, x, idx, s)
        _dims(cls.name, (dim,), x.rank)
        if idx.rank != x.rank or s.rank != x.rank or s.dtype != x.dtype or any(
                i > t for i, t in zip(idx.sizes, s.sizes)) or any(
                i > t for k, (i, t) in enumerate(zip(idx.sizes, x.sizes)) if k != dim):
            raise _err(cls.name, f"index {idx.sizes} and src {s.pretty()} do not fit input "
                                 f"{x.pretty()}")
        return x

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, *, dim: int
            ) -> torch.Tensor:
        return torch.scatter_add(x, dim, index.to(torch.int64), src)


# --------------------------------------------------------------------------- constants


@prim()
class ConstantOp(ThunderOp):
    """`%n = prims.constant {value = 2.0 : f64}`: a Python number as an SSA value.

    Python traces print its value in place of the name.
    """

    name = "prims.constant"

    value = prop_def(Number)
    out = result_def(NumberType)
    traits = traits_def(Pure(), Creation(), NumberConstant())

    @classmethod
    def infer(cls, *, value: Any) -> NumberType:
        if type(value) not in (bool, int, float):
            raise _err(cls.name, f"value must be a bool, int or float, got {value!r}")
        if type(value) is int and not -(2**63) <= value < 2**63:
            raise _err(cls.name, f"int value {value} does not fit in int64")
        return number_type(type(value))

    @classmethod
    def ref(cls, *, value: Any) -> Any:
        return value


OPS: dict[str, type[ThunderOp]] = op_table(PRIMS)
"""Short name (``"add"``) -> op class, for `thunder_ir.dialects.base.Emitter.ns`."""

Prims = Dialect("prims", PRIMS, [TensorType, NumberType, HandleType, *BASE_ATTRIBUTES])
