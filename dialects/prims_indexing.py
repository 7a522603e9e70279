"""Indexing prims: ``take``, ``gather``, ``index_add``, ``index_copy``, ``scatter_add``
(``Library``: the gather/scatter kernels).
"""

from __future__ import annotations

from typing import Any

import torch
from xdsl.dialects.builtin import IntegerAttr
from xdsl.irdl import operand_def, prop_def, result_def, traits_def
from xdsl.traits import Pure

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.prims_base import (
    check_dims,
    check_same_device,
    like_type,
    prim,
    shape_err,
    tensor_operand,
)
from thunder_ir.dialects.symbols import SymExprAttr
from thunder_ir.dialects.traits import Library
from thunder_ir.dialects.types import TensorType

# --------------------------------------------------------------------------- indexing


def _index_tensor(name: str, t: Any) -> TensorType:
    t = tensor_operand(name, t, "index")
    if t.dtype not in (torch.int32, torch.int64):
        raise shape_err(name, f"index must be int32 or int64, got {t.dtype}")
    return t


@prim()
class TakeOp(ThunderOp):
    """`%y = prims.take %x, %index {dim}`: ``index_select`` with a 1-D index."""

    name = "prims.take"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, *, dim: int) -> TensorType:
        x, idx = tensor_operand(cls.name, x), _index_tensor(cls.name, index)
        check_same_device(cls.name, x, idx)
        check_dims(cls.name, (dim,), x.rank)
        if idx.rank != 1:
            raise shape_err(cls.name, f"index must be 1-D, got shape {idx.sizes}")
        shape = list(x.sizes)
        shape[dim] = idx.sizes[0]
        return like_type(x, shape=shape)

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, *, dim: int) -> torch.Tensor:
        return torch.index_select(x, dim, index)


@prim()
class GatherOp(ThunderOp):
    """`%y = prims.gather %x, %index {dim}`: ``torch.gather`` (result has the index's shape)."""

    name = "prims.gather"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, *, dim: int) -> TensorType:
        x, idx = tensor_operand(cls.name, x), _index_tensor(cls.name, index)
        check_same_device(cls.name, x, idx)
        check_dims(cls.name, (dim,), x.rank)
        if idx.rank != x.rank or any(i > s for k, (i, s) in enumerate(zip(idx.sizes, x.sizes))
                                     if k != dim):
            raise shape_err(cls.name, f"index shape {idx.sizes} does not fit input {x.sizes}")
        return like_type(x, shape=idx.sizes)

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, *, dim: int) -> torch.Tensor:
        return torch.gather(x, dim, index.to(torch.int64))


def _slices_at_index(name: str, x: Any, index: Any, source: Any, dim: int) -> TensorType:
    """The type of ``index_add``/``index_copy``: ``x``'s, where ``source`` has its dtype
    and its sizes but along ``dim``, where it has the 1-D index's length."""
    x, idx = tensor_operand(name, x), _index_tensor(name, index)
    src = tensor_operand(name, source, "source")
    check_same_device(name, x, idx, src)
    check_dims(name, (dim,), x.rank)
    expected = list(x.sizes)
    if idx.rank != 1:
        raise shape_err(name, f"index must be 1-D, got {idx.sizes}")
    expected[dim] = idx.sizes[0]
    if list(src.sizes) != expected or src.dtype != x.dtype:
        raise shape_err(name, f"source {src.pretty()} does not fit input {x.pretty()} and "
                              f"index {idx.sizes} along dim {dim}")
    return x


class IndexSlicesOp(ThunderOp):
    """Family base of ``%y = prims.<op> %x, %index, %source {dim}``: ``x`` with its slices at
    ``index`` along ``dim`` combined with ``source``'s (a result of ``x``'s type)."""

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    source = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, source: Any, *, dim: int) -> TensorType:
        return _slices_at_index(cls.name, x, index, source, dim)


@prim()
class IndexAddOp(IndexSlicesOp):
    """`%y = prims.index_add %x, %index, %source {dim}`: out-of-place ``index_add``."""

    name = "prims.index_add"

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, *, dim: int
            ) -> torch.Tensor:
        return torch.index_add(x, dim, index, source)


@prim()
class IndexCopyOp(IndexSlicesOp):
    """`%y = prims.index_copy %x, %index, %source {dim}`: out-of-place ``index_copy``
    (``x`` with its slices at ``index`` along ``dim`` replaced by ``source``'s; eager's
    kernel, whose choice among repeated positions it keeps)."""

    name = "prims.index_copy"

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, source: torch.Tensor, *, dim: int
            ) -> torch.Tensor:
        return torch.index_copy(x, dim, index.to(torch.int64), source)


@prim()
class ScatterAddOp(ThunderOp):
    """`%y = prims.scatter_add %x, %index, %src {dim}`: out-of-place ``scatter_add``."""

    name = "prims.scatter_add"

    x = operand_def(TensorType)
    index = operand_def(TensorType)
    src = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())

    @classmethod
    def infer(cls, x: Any, index: Any, src: Any, *, dim: int) -> TensorType:
        x, idx = tensor_operand(cls.name, x), _index_tensor(cls.name, index)
        s = tensor_operand(cls.name, src, "src")
        check_same_device(cls.name, x, idx, s)
        check_dims(cls.name, (dim,), x.rank)
        if idx.rank != x.rank or s.rank != x.rank or s.dtype != x.dtype or any(
                i > t for i, t in zip(idx.sizes, s.sizes)) or any(
                i > t for k, (i, t) in enumerate(zip(idx.sizes, x.sizes)) if k != dim):
            raise shape_err(cls.name, f"index {idx.sizes} and src {s.pretty()} do not fit input "
                                 f"{x.pretty()}")
        return x

    @classmethod
    def ref(cls, x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, *, dim: int
            ) -> torch.Tensor:
        return torch.scatter_add(x, dim, index.to(torch.int64), src)
