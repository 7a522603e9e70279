"""Tensors computed from Python numbers, used as sizes.

``torch.div(x.size(1), 2 * w, rounding_mode="trunc")`` (Longformer's ``_chunk``) returns a
0-d integer tensor, which eager then takes as a size (``h.view(b, n_chunks, 2 * w, d)``:
the argument parser calls its ``__index__``, reading its value). A traced tensor has no
value; but one computed only from numbers (``prims.constant``: a Python number or a
symbolic size such as ``s1``) by integer arithmetic has a value known while tracing: the
same arithmetic on those numbers (``s1 // 8``, a ``SymInt`` in a symbolic compile). So a
size list's 0-d integer tensor of that kind is that number (`as_sizes`), and the op is
typed without reading a tensor's value and with no decision on a size: one program for
every length. An opaque call's list of sizes (``as_strided``'s, Longformer's overlapping
chunks) is taken so too where it mixes such tensors with numbers. Any other tensor among
sizes is left as it is (its value is data: the op refuses it, as before).

A 0-d integer tensor formatted as text (``f"expert_{idx}"``) is its value too, as eager's
``Tensor.__format__`` takes it: known while tracing, or speculated
(`thunder_ir.frontend.speculation`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.frontend.proxy import is_proxy

INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
"""The integer dtypes (a 0-d tensor of one is a number eager may read as a size)."""


def _trunc_div(a: Any, b: Any) -> Any:
    """``a / b`` rounded toward zero, over ints or ``SymInt`` sizes (a size's sign is
    known, so this decides nothing on one)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _div(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode == "floor":
        return a // b
    if rounding_mode == "trunc":
        return _trunc_div(a, b)
    return None  # true division: a float tensor, never a size


_ARITHMETIC: dict[str, Callable[..., Any]] = {
    "ltorch.add": lambda a, b, alpha=1: a + alpha * b,
    "ltorch.sub": lambda a, b, alpha=1: a - alpha * b,
    "ltorch.mul": operator.mul,
    "ltorch.floor_divide": operator.floordiv,
    "ltorch.remainder": operator.mod,
    "ltorch.div": _div,
}
"""Integer arithmetic ops whose value on known numbers is Python's (``b != 0`` where
they divide: eager's ZeroDivisionError otherwise, as Python's)."""


def number_value(v: SSAValue, depth: int = 0) -> Any:
    """The number a program value holds when it is known while tracing: a
    ``prims.constant`` (an int, or a ``SymInt`` in a symbolic compile), or a 0-d integer
    tensor computed from such numbers by integer arithmetic (`_ARITHMETIC`); None
    otherwise."""
    from thunder_ir.dialects.prims_creation import ConstantOp
    from thunder_ir.dialects.types import TensorType

    op = v.owner
    if not isinstance(op, Operation) or depth > 8:
        return None
    if isinstance(op, ConstantOp):
        value = op.params()["value"]
        return value if type(value) in (int, torch.SymInt) else None
    fn = _ARITHMETIC.get(op.name)
    t = v.type
    if fn is None or not isinstance(t, TensorType) or t.dims_text or t.dtype not in INTEGER:
        return None
    args = [number_value(o, depth + 1) for o in op.operands]
    if any(a is None for a in args):
        return None
    params = {k: p for k, p in op.params().items() if p is not None}  # type: ignore[attr-defined]
    return fn(*args, **params)


def as_sizes(value: Any, mixed: bool = False) -> Any:
    """A size list (``view``'s, ``reshape``'s, ``expand``'s) with each 0-d integer traced
    tensor whose value is known while tracing (`number_value`) as that number; the list
    as it is otherwise. ``mixed``: only a list that holds a Python number too (an opaque
    call's arguments: ``as_strided(size=(b, n + 1, 3 * w, d), ...)`` takes such a list by
    its values, where a list of tensors alone may be one of tensors, ``torch.stack``'s)."""
    if not isinstance(value, list | tuple) or not any(map(is_proxy, value)):
        return value
    if mixed and not any(type(x) in (int, torch.SymInt) for x in value):
        return value
    out = []
    for x in value:
        n = number_value(x._value) if is_proxy(x) and x.ndim == 0 else None
        out.append(x if n is None else n)
    return type(value)(out)


__all__ = ["INTEGER", "as_sizes", "number_value"]
