"""TensorIterator's and ``empty_like``'s result strides, as eager's CPU and CUDA kernels
compute them, for static layouts.

torch's meta and fake kernels (``torch._prims_common.compute_elementwise_output_strides``)
lay a result out as TensorIterator does except on the strides of dims of size 1, which
they treat as insignificant: for ``k`` of sizes ``(1, 4)`` and strides ``(1, 1)`` (a
``.t()`` of a ``(4, 1)`` tensor), eager's ``k * 2`` has strides ``(1, 1)`` and the meta
kernel's ``(4, 1)``. User code reads them (``y.stride()``), so tracing computes them as
eager does (`thunder_ir.frontend.layout.fresh_layouts`), with ATen's algorithm written
here (``TensorIteratorBase::compute_fast_setup_type``, ``reorder_dimensions``,
``allocate_or_resize_outputs``; ``empty_like`` with ``preserve_format``).
"""

from __future__ import annotations

from collections.abc import Sequence

Strides = tuple[int, ...]


def torch_contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's ``is_contiguous()`` for static sizes (dims of size 1 skipped)."""
    if any(n == 0 for n in sizes):
        return True
    expected = 1
    for n, st in zip(reversed(sizes), reversed(strides)):
        if n != 1:
            if st != expected:
                return False
            expected *= n
    return True


def channels_last(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's ``is_contiguous(memory_format=torch.channels_last)`` (4-d only)."""
    if len(sizes) != 4:
        return False
    if any(n == 0 for n in sizes):
        return True
    expected = 1
    for d in (1, 3, 2, 0):
        if sizes[d] != 1:
            if strides[d] != expected:
                return False
            expected *= sizes[d]
    return True


def dense(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's ``is_non_overlapping_and_dense()``."""
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    dims = sorted(((st, n) for n, st in zip(sizes, strides) if n >= 2))
    expected = 1
    for st, n in dims:
        if st != expected:
            return False
        expected *= n
    return True


def _row_major(sizes: Sequence[int]) -> Strides:
    out = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        out[i] = out[i + 1] * max(sizes[i + 1], 1)
    return tuple(out)


def _channels_last_strides(sizes: Sequence[int]) -> Strides:
    """``get_channels_last_strides_2d`` (4-d)."""
    s1 = 1
    s3 = sizes[1]
    s2 = s3 * sizes[3]
    return (s2 * sizes[2], s1, s2, s3)


def iterator_strides(shape: Sequence[int],
                     operands: Sequence[tuple[Sequence[int], Sequence[int]]],
                     fast: bool = True) -> Strides | None:
    """The strides TensorIterator gives the result (of sizes ``shape``, the broadcast of
    the operands') of an elementwise op on ``operands`` (each ``(sizes, strides)``, in
    argument order; a Python number that torch wraps as a 0-d tensor is ``((), ())``).
    None for an empty result (the caller's rule). Without ``fast``, no fast setup: the
    dim order alone (``infer_dense_strides``)."""
    ndim = len(shape)
    if any(n == 0 for n in shape):
        return None
    shapes = [tuple(s) for s, _ in operands]
    scalars = any(len(s) == 0 for s in shapes)
    tensors = any(len(s) != 0 for s in shapes)
    same = all(s == shapes[0] for s in shapes) and not (scalars and tensors)
    if fast and same and operands:  # compute_fast_setup_type
        if all(torch_contiguous(s, st) for s, st in operands):
            return _row_major(shape)
        if all(channels_last(s, st) for s, st in operands):
            return _channels_last_strides(shape)
        if all(dense(s, st) for s, st in operands) and all(
                tuple(st) == tuple(operands[-1][1]) for _, st in operands):
            return tuple(operands[-1][1])
    if ndim == 0:
        return ()
    table: list[list[int]] = []  # compute_strides: each operand's over the result's dims
    for sizes, strides in operands:
        off = ndim - len(sizes)
        row = [0] * ndim
        for i, (n, st) in enumerate(zip(sizes, strides)):
            row[off + i] = 0 if (n == 1 and shape[off + i] != 1) else st
        table.append(row)

    def should_swap(d0: int, d1: int) -> int:
        for row in table:
            s0, s1 = row[d0], row[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))  # reorder_dimensions
    if ndim > 1:
        for i in range(1, ndim):
            d1 = i
            for d0 in range(i - 1, -1, -1):
                c = should_swap(perm[d0], perm[d1])
                if c > 0:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
                    d1 = d0
                elif c < 0:
                    break
    else:
        perm = [0]
    if perm == list(range(ndim - 1, -1, -1)):  # an inverted order: a contiguous output
        return _row_major(shape)
    out = [0] * ndim  # compatible_stride, then invert_perm
    step = 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return tuple(out)


def like_strides(sizes: Sequence[int], strides: Sequence[int]) -> Strides | None:
    """``empty_like(x)``'s strides (``preserve_format``: ``clone``, ``*_like``): ``x``'s
    own where ``x`` is non-overlapping and dense,
    else dense ones in the order of its strides (``infer_dense_strides``). None for an
    empty tensor (the caller's rule)."""
    if dense(sizes, strides):
        return tuple(strides)
    return iterator_strides(sizes, [(sizes, strides)], fast=False)


__all__ = ["channels_last", "dense", "iterator_strides", "like_strides", "torch_contiguous"]
