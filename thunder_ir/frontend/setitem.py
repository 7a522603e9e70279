"""``x[index] = value`` as the program's own ops where the index is a box.

With basic indexing (ints, slices of step 1, ``None``, ``...``) the written region is a
box of ``x``: along each dimension a range ``[a, b)``. The write is then ``x`` rebuilt
around that box: along the first dimension the box does not span, ``cat`` of the part
before it, the box's slab written recursively, and the part after it; at the innermost,
the value, broadcast to the box and cast to ``x``'s dtype as eager's ``copy_`` casts.
Those are ops the program knows, so the write fuses with its neighbours and its backward
is the program's own VJPs (``cat``'s and ``getitem``'s: the gradient of ``x`` with the
box zeroed, and the box's gradient summed to the value's shape, as eager's
``CopySlices`` gives). A Python loop that fills a buffer a step at a time (RWKV's CPU
path: ``output[:, t] = ...``) stays one fusible program instead of an opaque call per
step, each recorded by torch's autograd; the pipeline's first pass
(`thunder_ir.passes.cat_chains`) then makes the chain of rebuilds one ``cat`` of the
written slices. A value that shares ``x``'s storage is read
before the write (eager's result wherever eager's element-by-element copy does not read
what it wrote), and refused as eager refuses it: both dense, their memory ranges
intersecting without coinciding (``x[1:] = x[:-1]``).

Everything else runs as the opaque functional call it was
(`thunder_ir.runtime.writes.setitem`, a clone with the write applied), so eager's own
errors and rules hold there: tensor and boolean indices, steps other than 1, an empty
box, a value on another device, a value that does not broadcast, an index out of range,
symbolic sizes, and Python numbers other than those ``torch.full`` writes as eager does
(an int into an int64 tensor; an int or a float into a float32/float64 one; a bool into a
bool one).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from thunder_ir.frontend.aliasing import proxy_layout
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import where
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.proxy import is_proxy, root_proxy
from thunder_ir.frontend.table import register_handlers
from thunder_ir.runtime.layout import is_dense
from thunder_ir.runtime.writes import setitem

T = torch.Tensor
Box = list[tuple[int, int]]


def box_of(shape: tuple[int, ...], index: Any) -> tuple[Box, tuple[int, ...]] | None:
    """The box ``x[index]`` covers (a range per dimension of ``x``) and the shape of the
    view ``x[index]``; None unless ``index`` is basic with steps of 1 and in range."""
    items = index if isinstance(index, tuple) else (index,)
    for it in items:
        if isinstance(it, slice):
            if not all(e is None or type(e) is int for e in (it.start, it.stop, it.step)):
                return None
        elif not (type(it) is int or it is None or it is Ellipsis):
            return None
    dots = [i for i, it in enumerate(items) if it is Ellipsis]
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if len(dots) > 1 or used > len(shape):
        return None
    fill = (slice(None),) * (len(shape) - used)
    items = (items[:dots[0]] + fill + items[dots[0] + 1:]) if dots else items + fill
    box: Box = []
    view: list[int] = []
    for it in items:
        if it is None:
            view.append(1)
            continue
        n = shape[len(box)]
        if type(it) is int:
            if not -n <= it < n:
                return None
            box.append((it % n, it % n + 1))
            continue
        a, b, step = it.indices(n)
        if step != 1:
            return None
        box.append((a, max(a, b)))
        view.append(max(a, b) - a)
    return box, tuple(view)


def _value_fits(x: Any, value: Any, view: tuple[int, ...]) -> int | None:
    """How many leading size-1 dims of the tensor ``value`` eager drops before it
    broadcasts ``value`` to ``view`` (None: it does not broadcast, or it is not modeled)."""
    if not is_proxy(value) or value.device != x.device:
        return None
    shape = tuple(value.shape)
    lead = 0
    while len(shape) - lead > len(view) and shape[lead] == 1:
        lead += 1
    rest = shape[lead:]
    if len(rest) > len(view) or not all(type(s) is int for s in rest):
        return None
    if any(s not in (1, v) for s, v in zip(reversed(rest), reversed(view), strict=False)):
        return None
    return lead


def _read_overlap(ctx: Builder, x: Any, value: Any, box: Box, lead: int,
                  view: tuple[int, ...]) -> bool:
    ctx.read_layout(x, value)  # the answer depends on the strides: another layout, another trace
    return _partial_overlap(x, value, box, lead, view)


def _partial_overlap(x: Any, value: Any, box: Box, lead: int, view: tuple[int, ...]) -> bool:
    """Eager's refusal of a copy between two dense views of one storage whose ranges
    intersect without coinciding (``assert_no_partial_overlap``): the written view
    ``x[box]`` and ``value`` (a value eager broadcasts is not dense, so never refused)."""
    _shape, strides, offset = proxy_layout(x)
    v_shape, v_strides, v_offset = proxy_layout(value)
    if v_shape[lead:] != view:
        return False
    sizes = [b - a for a, b in box]
    begin = offset + sum(a * s for (a, _), s in zip(box, strides, strict=True))
    if not (is_dense(sizes, strides) and is_dense(v_shape, v_strides)):
        return False
    end, v_end = begin + math.prod(sizes), v_offset + math.prod(v_shape)
    if (begin, end) == (v_offset, v_end):
        kept = [s for s, n in zip(strides, sizes, strict=True) if n != 1]
        return kept != [s for s, n in zip(v_strides, v_shape, strict=True) if n != 1]
    return begin < v_end and v_offset < end


def _exact_number(dtype: torch.dtype, value: Any) -> bool:
    """Whether eager writes the Python number ``value`` into a ``dtype`` tensor as
    ``torch.full`` makes it (no overflow check, no truncation to model)."""
    if type(value) is bool:
        return dtype == torch.bool
    if type(value) is int:
        return dtype in (torch.int64, torch.float32, torch.float64) and -2**63 <= value < 2**63
    return type(value) is float and dtype in (torch.float32, torch.float64)


def _write(x: Any, value: Any, box: Box, view: tuple[int, ...], lead: int | None) -> Any:
    """Runs under the tracer: ``x`` with ``value`` written into ``box``."""
    sizes = [b - a for a, b in box]
    if lead is None:
        v = torch.full(sizes, value, dtype=x.dtype, device=x.device)
    else:
        v = value.reshape(value.shape[lead:]) if lead else value
        if v.dtype != x.dtype:
            v = v.to(x.dtype)
        if tuple(v.shape) != view:
            v = v.expand(view)
        v = v.reshape(sizes)
    return _place(x, v, box, 0)


def _place(base: Any, v: Any, box: Box, d: int) -> Any:
    """``base`` with ``v`` in place of ``base``'s box, from dimension ``d`` on."""
    while d < len(box) and box[d] == (0, base.shape[d]):
        d += 1
    if d == len(box):
        return v
    a, b = box[d]
    pre = (slice(None),) * d
    parts = [base[(*pre, slice(0, a))]] if a else []
    parts.append(_place(base[(*pre, slice(a, b))], v, box, d + 1))
    if b < base.shape[d]:
        parts.append(base[(*pre, slice(b, None))])
    return torch.cat(parts, d) if len(parts) > 1 else parts[0]


def _functional(ctx: Builder, x: Any, index: Any, value: Any) -> Any | None:
    """The write as the program's ops (None: not a case this models)."""
    if not is_proxy(x) or not all(type(s) is int for s in x.shape):
        return None
    found = box_of(tuple(x.shape), index)
    if found is None or 0 in found[1]:
        return None
    box, view = found
    if isinstance(value, torch.Tensor):
        lead = _value_fits(x, value, view)
        if lead is None:
            return None
        if root_proxy(value) is root_proxy(x) and _read_overlap(ctx, x, value, box, lead, view):
            raise RuntimeError(
                "unsupported operation: some elements of the input tensor and the written-to "
                "tensor refer to a single memory location. Please clone() the tensor before "
                f"performing the operation.\n  at {where(ctx.loc)}")
    elif _exact_number(x.dtype, value):
        lead = None
    else:
        return None
    return ctx.run_python(lambda xx, vv: _write(xx, vv, box, view, lead), (x, value), {})


def _setitem(ctx: Builder, x: Any, index: Any, value: Any) -> None:
    new = _functional(ctx, x, index, value)
    if new is None:
        new = fallback(ctx, setitem, (x, index, value), {})
    ctx.writes.assign(x, ctx.value_of(new), "__setitem__")


register_handlers([T.__setitem__], _setitem)

__all__ = ["box_of", "setitem"]
