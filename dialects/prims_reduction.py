"""Reductions (``Reduction``: ``sum``, ``amax``, ``var``, ``argmax``…) and the contractions
(``matmul``, ``linear``: ``Library`` calls into BLAS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from xdsl.dialects.builtin import IntegerAttr
from xdsl.irdl import operand_def, opt_operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.prims_base import (
    IntArray,
    Number,
    broadcast_shapes,
    check_dims,
    check_same_device,
    like_type,
    prim,
    shape_err,
    tensor_operand,
)
from thunder_ir.dialects.symbols import SymExprAttr
from thunder_ir.dialects.traits import Library, NoDerivative, Reduction
from thunder_ir.dialects.types import TensorType, is_float, is_int

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
        x = tensor_operand(cls.name, x)
        ds = check_dims(cls.name, dims, x.rank)
        if cls.NEEDS_NONEMPTY and any(x.sizes[d] == 0 for d in ds):
            raise shape_err(cls.name, f"cannot reduce an empty dim of shape {x.sizes} over {ds}")
        return like_type(x, shape=[s for i, s in enumerate(x.sizes) if i not in ds],
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
        x = tensor_operand(cls.name, x)
        if not is_float(x.dtype):
            raise shape_err(cls.name, f"expects a floating-point tensor, got {x.dtype}")
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
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Reduction(indices=True))
    TORCH_FN: ClassVar[Callable[..., Any]]

    @classmethod
    def infer(cls, x: Any, *, dim: int) -> TensorType:
        x = tensor_operand(cls.name, x)
        check_dims(cls.name, (dim,), x.rank)
        if x.dtype == torch.bool:
            raise shape_err(cls.name, "expects a numeric tensor, got bool")
        if x.sizes[dim] == 0:
            raise shape_err(cls.name, f"cannot reduce an empty dim {dim} of shape {x.sizes}")
        return like_type(x, shape=[s for i, s in enumerate(x.sizes) if i != dim],
                     dtype=torch.int64)

    @classmethod
    def ref(cls, x: torch.Tensor, *, dim: int) -> torch.Tensor:
        return cls.TORCH_FN(x, dim)


@prim(torch.argmax)
class ArgmaxOp(ArgReductionOp):
    """`%y = prims.argmax %x {dim}`"""

    name = "prims.argmax"
    traits = traits_def(NoDerivative())


@prim(torch.argmin)
class ArgminOp(ArgReductionOp):
    """`%y = prims.argmin %x {dim}`"""

    name = "prims.argmin"
    traits = traits_def(NoDerivative())


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
        a, b = tensor_operand(cls.name, a), tensor_operand(cls.name, b)
        check_same_device(cls.name, a, b)
        if a.dtype != b.dtype or not (is_float(a.dtype) or is_int(a.dtype)):
            raise shape_err(cls.name, f"needs equal numeric dtypes, got {a.dtype} and {b.dtype}")
        if a.rank == 0 or b.rank == 0:
            raise shape_err(cls.name, f"operands must be at least 1-D, got {a.sizes} and {b.sizes}")
        sa, sb = list(a.sizes), list(b.sizes)
        a1, b1 = len(sa) == 1, len(sb) == 1
        if a1:
            sa = [1, *sa]
        if b1:
            sb = [*sb, 1]
        if sa[-1] != sb[-2]:
            raise shape_err(cls.name, f"shapes {a.sizes} and {b.sizes} cannot be multiplied "
                                 f"({sa[-1]} != {sb[-2]})")
        batch = broadcast_shapes(cls.name, sa[:-2], sb[:-2])
        shape = [*batch, sa[-2], sb[-1]]
        if b1:
            shape.pop(-1)
        if a1:
            shape.pop(-2 if not b1 else -1)
        return like_type(a, shape=shape)


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
        x, w = tensor_operand(cls.name, x), tensor_operand(cls.name, w)
        b = None if bias is None else tensor_operand(cls.name, bias, "bias")
        check_same_device(cls.name, x, w, b)
        if w.rank not in (1, 2) or x.rank < 1 or x.sizes[-1] != w.sizes[-1]:
            raise shape_err(cls.name, f"input {x.sizes} and weight {w.sizes} do not fit")
        if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
            raise shape_err(cls.name, "input, weight and bias must share a dtype")
        if not (is_float(x.dtype) or is_int(x.dtype)):
            raise shape_err(cls.name, f"needs a numeric dtype, got {x.dtype}")
        out_shape = [*x.sizes[:-1], *w.sizes[:-1]]
        if b is not None and b.sizes != tuple(w.sizes[:-1]):
            raise shape_err(cls.name, f"bias {b.sizes} does not fit weight {w.sizes}")
        if b is not None and w.rank == 1 and x.rank != 1:  # as torch.nn.functional.linear
            raise shape_err(cls.name, f"a 1-D weight {w.sizes} with a bias needs a 1-D input, "
                                 f"got {x.sizes}")
        return like_type(x, shape=out_shape)
