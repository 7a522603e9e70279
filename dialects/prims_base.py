"""What every prim shares: registration (`prim`, `PRIMS`), the static-argument aliases and
the small checks the shape rules use.

The dialect is assembled in ``thunder_ir.dialects.prims`` from one module per family:
``prims_elementwise``, ``prims_shape``, ``prims_reduction``, ``prims_creation`` and
``prims_indexing``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, FloatAttr, IntegerAttr
from xdsl.irdl import irdl_op_definition

from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.symbols import INT_ARRAY, SymExprAttr
from thunder_ir.dialects.types import NumberType, TensorType, broadcast, tensor_type

AnyValue = TensorType | NumberType
IntArray = INT_ARRAY  # array<i64: ...>, or [...] with a symbolic size (#prims.sym)
Number = IntegerAttr | FloatAttr | SymExprAttr  # SymExprAttr: a symbolic size (x.shape[1])
Int = IntegerAttr | SymExprAttr  # an int param that may be a symbolic size
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


def shape_err(name: str, msg: str) -> ShapeError:
    return ShapeError(f"{name}: {msg}")


def tensor_operand(name: str, t: Any, what: str = "operand") -> TensorType:
    if not isinstance(t, TensorType):
        raise shape_err(name, f"{what} must be a tensor, got {t}")
    return t


def check_dims(name: str, dims: Sequence[int], rank: int) -> tuple[int, ...]:
    """Checks that ``dims`` are distinct, in range and non-negative (prims take no -1)."""
    out = tuple(dims)
    if len(set(out)) != len(out) or any(not 0 <= d < rank for d in out):
        raise shape_err(name, f"dims {out} are not distinct dims of a rank-{rank} tensor")
    return out


def check_sizes(name: str, shape: Sequence[int]) -> None:
    """A result shape given as a static argument must have no negative size."""
    if any(d < 0 for d in shape):
        raise shape_err(name, f"negative size in shape {tuple(shape)}")


def check_same_device(name: str, *types: Any) -> None:
    """Checks that the tensor types among ``types`` live on one device."""
    devs = {t.dev for t in types if isinstance(t, TensorType)}
    if len(devs) > 1:
        raise shape_err(name, f"operands live on different devices ({', '.join(sorted(devs))})")


def like_type(t: TensorType, shape: Sequence[int] | None = None,
          dtype: torch.dtype | None = None) -> TensorType:
    return tensor_type(t.sizes if shape is None else shape, t.dtype if dtype is None else dtype,
                       t.dev)


def broadcast_shapes(name: str, *shapes: Sequence[int]) -> list[int]:
    """Numpy-style broadcast of several shapes (`types.broadcast`); `ShapeError` naming
    ``name`` on mismatch."""
    out = broadcast(shapes)
    if out is None:
        raise shape_err(name, f"shapes {', '.join(str(tuple(x)) for x in shapes)} "
                        "do not broadcast")
    return list(out)
