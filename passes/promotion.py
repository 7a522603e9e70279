"""torch's type promotion and broadcasting, for rules that build prims.

`result_dtype` is ``torch.result_type`` over IR types, for any number of operands;
`elementwise_args` promotes and broadcasts operands with prims as torch's elementwise ops
do. Composite rules on float16/bfloat16 compute in float32 and round once at the end, as
torch's kernels do (`opmath`). Decompositions and VJP rules share these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects.prims import broadcast_shapes
from thunder_ir.dialects.symbols import same_sizes
from thunder_ir.dialects.types import NumberType, TensorType, is_float, is_int
from thunder_ir.passes.decompositions import Decomposer

_PROMOTE_CACHE: dict[tuple[Any, ...], torch.dtype] = {}  # (default dtype, *types) -> dtype
_REDUCED = (torch.float16, torch.bfloat16)


def _promote(a: torch.dtype | None, b: torch.dtype | None) -> torch.dtype | None:
    if a is None:
        return b
    return a if b is None else torch.promote_types(a, b)


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    """ATen's ``combine_categories``: a lower-priority group only wins by a higher kind."""
    if higher is not None and is_float(higher):
        return higher
    if higher == torch.bool or (lower is not None and is_float(lower)):
        return _promote(higher, lower)
    return higher if higher is not None else lower


def result_dtype(*types: Any) -> torch.dtype:
    """torch's promoted dtype of operands of these types (cached): ``torch.result_type``
    for any number of operands. Dim tensors outrank 0-d tensors, which outrank numbers,
    unless a lower group has a higher kind (bool < int < float). A float number counts
    as the default dtype, which is part of the cache key."""
    key = (torch.get_default_dtype(), *types)
    dt = _PROMOTE_CACHE.get(key)
    if dt is None:
        dims: torch.dtype | None = None
        zero: torch.dtype | None = None
        nums: torch.dtype | None = None
        for t in types:
            if isinstance(t, TensorType):
                if t.rank:
                    dims = _promote(dims, t.dtype)
                else:
                    zero = _promote(zero, t.dtype)
            else:
                py = t.python_type
                kind = (torch.bool if py is bool else torch.int64 if py is int
                        else torch.get_default_dtype())
                nums = _promote(nums, kind)
        dt = _combine(dims, _combine(zero, nums))
        if dt is None:
            raise TypeError("result_dtype needs at least one operand")
        _PROMOTE_CACHE[key] = dt
    return dt


def to_dtype(d: Decomposer, v: SSAValue, dtype: torch.dtype) -> SSAValue:
    """Converts a tensor value to ``dtype`` (no op when it already is)."""
    if isinstance(v.type, TensorType) and v.type.dtype != dtype:
        return d.prims.convert_element_type(v, dtype=dtype)
    return v


def expand_to(d: Decomposer, v: SSAValue, shape: Sequence[int]) -> SSAValue:
    """Broadcasts a tensor value to ``shape`` (numpy rules; no op when equal)."""
    t = v.type
    shape = tuple(shape)
    if not isinstance(t, TensorType) or same_sizes(t.sizes, shape):
        return v
    lead = len(shape) - t.rank
    keep = [i for i, s in enumerate(t.sizes) if s == shape[lead + i]]
    if len(keep) != t.rank:  # drop broadcast (size-1) dims first
        v = d.prims.reshape(v, shape=[t.sizes[i] for i in keep])
    return d.prims.broadcast_in_dim(v, shape=shape, broadcast_dims=[lead + i for i in keep])


def elementwise_args(d: Decomposer, *vals: SSAValue, dtype: torch.dtype | None = None
                     ) -> list[SSAValue]:
    """Promotes (to ``dtype`` or torch's result dtype) and broadcasts operands."""
    types = [v.type for v in vals]
    dtype = dtype or result_dtype(*types)
    shapes = [t.sizes for t in types if isinstance(t, TensorType)]
    shape = tuple(broadcast_shapes("elementwise", *shapes))
    out = []
    for v in vals:
        if isinstance(v.type, NumberType):
            out.append(v)
        else:
            out.append(expand_to(d, to_dtype(d, v, dtype), shape))
    return out


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype torch computes ``dtype`` in: float32 for float16/bfloat16."""
    return torch.float32 if dtype in _REDUCED else dtype


def default_float(dtype: torch.dtype) -> torch.dtype:
    """``dtype`` if floating, else torch's default float dtype (int/bool → float)."""
    return dtype if is_float(dtype) else torch.get_default_dtype()


def cast_number(value: Any, dtype: torch.dtype) -> Any:
    """A Python number as a value of ``dtype``'s kind (what a prim accepts for it); a
    symbolic ``int`` stays one for an integer kind (``int()`` would fix it to its value)."""
    if dtype == torch.bool:
        return bool(value)
    if is_int(dtype):
        return value if type(value) is torch.SymInt else int(value)
    return float(value)


__all__ = ["cast_number", "default_float", "elementwise_args", "expand_to", "opmath",
           "result_dtype", "to_dtype"]
