"""Shape prims: views (``broadcast_in_dim``, ``reshape``, ``transpose``, ``slice``,
``squeeze``: ``ViewLike``) and data movement (``pad``, ``cat``, ``flip``: ``Movement``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import IntegerAttr
from xdsl.irdl import operand_def, opt_prop_def, prop_def, result_def, traits_def, var_operand_def
from xdsl.traits import Pure

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.prims_base import (
    IntArray,
    Number,
    PadConfig,
    check_dims,
    check_same_device,
    check_sizes,
    like_type,
    prim,
    shape_err,
    tensor_operand,
)
from thunder_ir.dialects.symbols import SymExprAttr, unbacked
from thunder_ir.dialects.traits import RESHAPE, RESTRIDE, VIEW, Movement, ViewLike
from thunder_ir.dialects.types import TensorType

# --------------------------------------------------------------------------- shape ops


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
        x = tensor_operand(cls.name, x)
        check_sizes(cls.name, shape)
        if len(broadcast_dims) != x.rank:
            raise shape_err(cls.name, f"needs one broadcast dim per operand dim, got "
                                 f"{tuple(broadcast_dims)} for shape {x.sizes}")
        dims = check_dims(cls.name, broadcast_dims, len(shape))
        if list(dims) != sorted(dims):
            raise shape_err(cls.name, f"broadcast dims {dims} must be increasing")
        for size, d in zip(x.sizes, dims):
            if size != 1 and size != shape[d]:
                raise shape_err(cls.name, f"cannot broadcast shape {x.sizes} to {tuple(shape)} "
                                     f"with dims {dims}")
        return like_type(x, shape=shape)

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
        x = tensor_operand(cls.name, x)
        if any(d < 0 for d in shape) or math.prod(shape) != x.numel():
            raise shape_err(cls.name, f"cannot reshape {x.sizes} ({x.numel()} elements) to "
                                 f"{tuple(shape)}")
        return like_type(x, shape=shape)

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
        x = tensor_operand(cls.name, x)
        perm = check_dims(cls.name, permutation, x.rank)
        if len(perm) != x.rank:
            raise shape_err(cls.name, f"permutation {perm} does not cover shape {x.sizes}")
        return like_type(x, shape=[x.sizes[p] for p in perm])

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
        x = tensor_operand(cls.name, x)
        strides = strides or (1,) * x.rank
        if not len(start_indices) == len(end_indices) == len(strides) == x.rank:
            raise shape_err(cls.name, f"needs one start, end and stride per dim of {x.sizes}")
        shape = []
        for size, lo, hi, st in zip(x.sizes, start_indices, end_indices, strides):
            if not (0 <= lo <= hi <= size) or st < 1:
                raise shape_err(cls.name, f"slice [{lo}:{hi}:{st}] is out of range for a dim of "
                                     f"size {size} in shape {x.sizes}")
            shape.append((hi - lo + st - 1) // st)
        return like_type(x, shape=shape)

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
        x = tensor_operand(cls.name, x)
        ds = check_dims(cls.name, dims, x.rank)
        if any(x.sizes[d] != 1 for d in ds):
            raise shape_err(cls.name, f"dims {ds} of shape {x.sizes} are not all of size 1")
        return like_type(x, shape=[s for i, s in enumerate(x.sizes) if i not in ds])

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
        x = tensor_operand(cls.name, x)
        if len(padding_config) != x.rank or any(len(c) != 3 for c in padding_config):
            raise shape_err(cls.name, f"needs (low, high, interior) per dim of {x.sizes}")
        shape = []
        for size, (lo, hi, mid) in zip(x.sizes, padding_config):
            if mid < 0:
                raise shape_err(cls.name, "interior padding must be >= 0")
            n = size + lo + hi + (max(size - 1, 0) * mid if mid else 0)
            if not unbacked(n) and n < 0:  # (an unbacked size: no decision on it)
                raise shape_err(cls.name, f"padding {(lo, hi, mid)} leaves a negative size")
            shape.append(n)
        return like_type(x, shape=shape)

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
    dim = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Movement(many=True))

    @classmethod
    def infer(cls, tensors: Sequence[Any], *, dim: int) -> TensorType:
        if not tensors:
            raise shape_err(cls.name, "needs at least one tensor")
        ts = [tensor_operand(cls.name, t) for t in tensors]
        check_same_device(cls.name, *ts)
        first = ts[0]
        if not 0 <= dim < first.rank:
            raise shape_err(cls.name, f"dim {dim} is out of range for shape {first.sizes}")
        total = 0
        for t in ts:
            same = all(a == b for i, (a, b) in enumerate(zip(t.sizes, first.sizes)) if i != dim)
            if t.rank != first.rank or not same:
                raise shape_err(cls.name, f"shapes {first.sizes} and {t.sizes} differ outside dim "
                                     f"{dim}")
            if t.dtype != first.dtype:
                raise shape_err(cls.name, f"dtypes {first.dtype} and {t.dtype} differ")
            total += t.sizes[dim]
        shape = list(first.sizes)
        shape[dim] = total
        return like_type(first, shape=shape)

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
        x = tensor_operand(cls.name, x)
        check_dims(cls.name, dims, x.rank)
        return x

    @classmethod
    def ref(cls, x: torch.Tensor, *, dims: Sequence[int]) -> torch.Tensor:
        return torch.flip(x, tuple(dims))
