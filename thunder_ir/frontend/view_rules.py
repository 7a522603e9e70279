"""Closed-form layouts of view ops over symbolic sizes (a symbolic compilation).

torch's fake view kernels decide dozens of symbolic expressions per op (a reshape of a
permuted window partition: 10 ms each on a Swin block), where the layout follows from the
operand's strides by a few comparisons that the sizes' expressions and value ranges settle
without a guard (`thunder_ir.dialects.symbols.proved_order`). Each rule here is ATen's own
algorithm, written over ``SymInt``s; where a comparison is not settled so, it answers
None and the caller runs torch's kernel, which decides with a guard as before:

* `view_strides`: ATen's ``computeStride`` (``TensorUtils.cpp``), the strides a
  ``view``/``reshape`` of a layout gets, or that it cannot view it (``reshape`` then copies
  into a contiguous tensor; ``view`` raises, which the kernel's run reports);
* `expand_layout`: ``inferExpandGeometry``;
* `split_layouts`: ``split``/``split_with_sizes`` as ``narrow`` makes each piece (the
  operand's strides, the offset moved by the piece's start).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.ir import Operation

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.types import TensorType

Layout = tuple[tuple[Any, ...], Any]


def _order(a: Any, b: Any) -> int | None:
    return symbols.proved_order(a, b)


def view_strides(sizes: Sequence[Any], strides: Sequence[Any], new: Sequence[Any]
                 ) -> tuple[Any, ...] | bool | None:
    """ATen's ``computeStride`` for viewing a tensor of ``sizes`` and ``strides`` as
    ``new`` (the same element count): the view's strides, False where the layout cannot be
    viewed so, None where a comparison is not proved (or the tensor may be empty: ATen's
    other branch; or of rank 0)."""
    if not sizes or not all(symbols.known_positive(n) for n in sizes):
        return None
    out: list[Any] = [None] * len(new)
    view_d = len(new) - 1
    chunk_base: Any = strides[-1]
    tensor_numel: Any = 1
    view_numel: Any = 1
    for tensor_d in range(len(sizes) - 1, -1, -1):
        tensor_numel = tensor_numel * sizes[tensor_d]
        end = True
        if tensor_d > 0:
            c = _order(sizes[tensor_d - 1], 1)
            if c is None:
                return None
            if c != 0:
                c = _order(strides[tensor_d - 1], tensor_numel * chunk_base)
                if c is None:
                    return None
            end = c != 0
        if not end:
            continue
        while view_d >= 0:
            c = _order(view_numel, tensor_numel)
            if c is None:
                return None
            if c >= 0:
                c = _order(new[view_d], 1)
                if c is None:
                    return None
                if c != 0:
                    break
            out[view_d] = view_numel * chunk_base
            view_numel = view_numel * new[view_d]
            view_d -= 1
        c = _order(view_numel, tensor_numel)
        if c is None:
            return None
        if c != 0:
            return False
        if tensor_d > 0:
            chunk_base = strides[tensor_d - 1]
            tensor_numel = 1
            view_numel = 1
    if view_d != -1:
        return False
    return tuple(out)


def expand_layout(sizes: Sequence[Any], strides: Sequence[Any], offset: Any,
                  target: Sequence[Any]) -> Layout | None:
    """ATen's ``inferExpandGeometry``: the layout of ``expand(target)`` (-1 keeps a dim) of
    a tensor of ``sizes`` and ``strides``; None where a size comparison is not proved or
    the expand is not valid (the kernel's run raises eager's error)."""
    rank, ndim = len(sizes), len(target)
    if ndim < rank:
        return None
    out_sizes: list[Any] = [None] * ndim
    out: list[Any] = [None] * ndim
    for i in range(ndim - 1, -1, -1):
        dim = rank - (ndim - i)
        size = sizes[dim] if dim >= 0 else 1
        stride = strides[dim] if dim >= 0 else out_sizes[i + 1] * out[i + 1] \
            if i < ndim - 1 else 1
        want = target[i]
        if type(want) is int and want == -1:
            if dim < 0:
                return None
            want = size
        c = _order(size, want)
        if c is None:
            return None
        if c != 0:
            if not (type(size) is int and size == 1):
                return None
            size, stride = want, 0
        out_sizes[i] = size
        out[i] = stride
    return tuple(out), offset


def split_layouts(op: Operation, layout: Layout) -> tuple[tuple[Layout, bool], ...] | None:
    """The layouts of ``split``'s pieces (typed already): the operand's strides, each at
    the offset of its start along the split dim (the sum of the earlier pieces' sizes
    there), a view each. None where the dim is not an int param."""
    src = op.operands[0].type
    if not isinstance(src, TensorType) or src.rank == 0:
        return None
    d: Any = op.params().get("dim") if isinstance(op, ThunderOp) else None
    d = 0 if d is None else d
    if type(d) is not int or not -src.rank <= d < src.rank:
        return None
    d = d + src.rank if d < 0 else d
    strides, offset = layout
    out: list[tuple[Layout, bool]] = []
    start: Any = 0
    for r in op.results:
        t = r.type
        if not isinstance(t, TensorType) or t.rank != src.rank:
            return None
        at = offset if type(start) is int and start == 0 else offset + start * strides[d]
        out.append(((tuple(strides), at), True))
        start = start + t.sizes[d]
    return tuple(out)


__all__ = ["expand_layout", "split_layouts", "view_strides"]
