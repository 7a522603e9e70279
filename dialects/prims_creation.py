"""Prims that make values from static arguments: ``iota``, ``full`` (``Creation``), the
random draws ``bernoulli`` and ``bernoulli_like`` (``Random``, not ``Pure``: CSE and DCE
keep them) and number constants (``prims.constant``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import IntegerAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.irdl import operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.prims_base import (
    IntArray,
    Number,
    check_sizes,
    prim,
    shape_err,
    tensor_operand,
)
from thunder_ir.dialects.symbols import SymExprAttr
from thunder_ir.dialects.traits import Creation, NoDerivative, NumberConstant, Random
from thunder_ir.dialects.types import NumberType, TensorType, is_float, number_type, tensor_type

# --------------------------------------------------------------------------- creation and RNG


class FactoryOp(ThunderOp):
    """Base of the ops that make a tensor from static arguments (creation and RNG)."""

    @classmethod
    def _check_device(cls, device: str) -> None:
        if not (device in ("cpu", "meta")
                or (device.startswith("cuda:") and device[5:].isdigit())):
            raise shape_err(cls.name, f"device must be cpu, meta or cuda:N, got {device!r}")


class CreationOp(FactoryOp):
    """Family of ops that make a tensor from static arguments, deterministically."""

    traits = traits_def(Creation())


@prim()
class IotaOp(CreationOp):
    """`%y = prims.iota {length, start, step, device, dtype}`: ``start + step * arange``."""

    name = "prims.iota"

    length = prop_def(IntegerAttr | SymExprAttr)
    start = prop_def(Number)
    step = prop_def(Number)
    device = prop_def(StringAttr)
    dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(NoDerivative(), Pure())

    @classmethod
    def infer(cls, *, length: int, start: Any, step: Any, device: str, dtype: torch.dtype
              ) -> TensorType:
        if length < 0:
            raise shape_err(cls.name, f"length must be >= 0, got {length}")
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
    traits = traits_def(NoDerivative(), Pure())

    @classmethod
    def infer(cls, *, shape: Sequence[int], fill_value: Any, device: str, dtype: torch.dtype
              ) -> TensorType:
        cls._check_device(device)
        check_sizes(cls.name, shape)
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
    traits = traits_def(NoDerivative(), Random())

    @classmethod
    def infer(cls, *, shape: Sequence[int], p: float, device: str, dtype: torch.dtype
              ) -> TensorType:
        if not is_float(dtype):
            raise shape_err(cls.name, f"dtype must be floating point, got {dtype}")
        if not 0.0 <= p <= 1.0:
            raise shape_err(cls.name, f"p must be in [0, 1], got {p}")
        cls._check_device(device)
        check_sizes(cls.name, shape)
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
    traits = traits_def(NoDerivative(), Random())

    @classmethod
    def infer(cls, input: Any, *, p: float) -> TensorType:
        t = tensor_operand(cls.name, input)
        if not is_float(t.dtype):
            raise shape_err(cls.name, f"dtype must be floating point, got {t.dtype}")
        if not 0.0 <= p <= 1.0:
            raise shape_err(cls.name, f"p must be in [0, 1], got {p}")
        return t

    @classmethod
    def ref(cls, input: torch.Tensor, *, p: float) -> torch.Tensor:
        return torch.empty_like(input).bernoulli_(p)


# --------------------------------------------------------------------------- constants


@prim()
class ConstantOp(ThunderOp):
    """`%n = prims.constant {value = 2.0 : f64}`: a Python number as an SSA value.

    Python traces print its value in place of the name.
    """

    name = "prims.constant"

    value = prop_def(Number | SymExprAttr)
    out = result_def(NumberType)
    traits = traits_def(NoDerivative(), Pure(), Creation(), NumberConstant())

    @classmethod
    def infer(cls, *, value: Any) -> NumberType:
        if type(value) is torch.SymInt:  # a symbolic size (``x.shape[1]``)
            return number_type(int)
        if type(value) is torch.SymFloat:
            return number_type(float)
        if type(value) not in (bool, int, float):
            raise shape_err(cls.name, f"value must be a bool, int or float, got {value!r}")
        if type(value) is int and not -(2**63) <= value < 2**63:
            raise shape_err(cls.name, f"int value {value} does not fit in int64")
        return number_type(type(value))

    @classmethod
    def ref(cls, *, value: Any) -> Any:
        return value
