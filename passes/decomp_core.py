"""Decompositions of the core ltorch families (elementwise, reductions, shape, creation).

Shared helpers at the top implement torch's broadcasting and type promotion with prims.
"""

from __future__ import annotations

from typing import Any

import torch
from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects.prims import broadcast_shapes
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.passes.decompositions import Decomposer, decomposes

# --------------------------------------------------------------------------- helpers

_PROMOTE_CACHE: dict[tuple[Any, ...], torch.dtype] = {}


def _sample(t: Any) -> Any:
    if isinstance(t, TensorType):
        # A 0-d tensor promotes like a number of its kind: keep rank to preserve that.
        return torch.empty((1,) * max(t.rank, 0) if t.rank else (), dtype=t.dtype,
                           device="meta")
    return t.python_type(1)


def result_dtype(*types: Any) -> torch.dtype:
    """torch's promoted dtype of operands of these types (cached)."""
    key = tuple(types)
    dt = _PROMOTE_CACHE.get(key)
    if dt is None:
        samples = [_sample(t) for t in types]
        if len(samples) == 1:
            s = samples[0]
            dt = s.dtype if isinstance(s, torch.Tensor) else torch.tensor(s).dtype
        else:
            dt = torch.result_type(samples[0], samples[1])
            for s in samples[2:]:
                dt = torch.promote_types(dt, torch.result_type(s, s))
        _PROMOTE_CACHE[key] = dt
    return dt


def to_dtype(d: Decomposer, v: SSAValue, dtype: torch.dtype) -> SSAValue:
    """Converts a tensor value to ``dtype`` (no op when it already is)."""
    if isinstance(v.type, TensorType) and v.type.dtype != dtype:
        return d.prims.convert_element_type(v, dtype=dtype)
    return v


def expand_to(d: Decomposer, v: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    """Broadcasts a tensor value to ``shape`` (numpy rules; no op when equal)."""
    t = v.type
    if not isinstance(t, TensorType) or t.sizes == tuple(shape):
        return v
    lead = len(shape) - t.rank
    keep = [i for i, s in enumerate(t.sizes) if s == shape[lead + i]]
    if len(keep) != t.rank:  # drop broadcast (size-1) dims first
        v = d.prims.reshape(v, shape=[t.sizes[i] for i in keep])
    return d.prims.broadcast_in_dim(v, shape=tuple(shape), broadcast_dims=[lead + i for i in keep])


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


# --------------------------------------------------------------------------- elementwise


@decomposes(L.AddOp)
def add(d: Decomposer, a: SSAValue, b: SSAValue, alpha: Any = None) -> SSAValue:
    a, b = elementwise_args(d, a, b)
    if alpha is not None and alpha != 1:
        b = d.prims.mul(b, d.prims.constant(value=alpha))
    return d.prims.add(a, b)
