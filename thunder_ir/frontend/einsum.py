"""``torch.einsum`` as the program's own ops: permutes, reshapes, ``bmm`` and sums.

Eager's einsum contracts its operands left to right, each pair as one batched matrix
product over the indices they share (``sumproduct_pair``); the handler does the same with
ltorch ops, so the forward fuses and schedules with the rest of the program and the
backward is the program's own VJPs (an opaque call would go through torch's autograd,
per call). Indices that only one operand has and the output lacks are summed first;
ellipses and size-1 broadcasting are handled as eager does.

Eager's result is a permutation of a contiguous tensor (contiguous, or a permuted view
of its last product): the handler asks a meta run for eager's strides and lays its
result out the same way. What it does not model runs as the opaque call it was
(`UseFallback`): one operand (eager returns views of it), an index repeated within an
operand (a diagonal), operands of different dtypes, an ``out=`` or the sublist form,
mismatched sizes (eager's error).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from thunder_ir.dialects import symbols
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import UseFallback
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers


def _parse(equation: str, ndims: list[int]) -> tuple[list[str], str] | None:
    """Each operand's index letters and the output's, ellipses expanded into letters of
    their own (right-aligned, as broadcasting aligns them); None for what is not modeled."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(ndims):
        return None
    fresh = [chr(0x3B1 + i) for i in range(32)]  # Greek letters: never an einsum label
    widths = []
    for s, n in zip(subs, ndims, strict=True):
        if s.count("...") > 1:
            return None
        widths.append(n - (len(s) - 3) if "..." in s else 0)
    ell = max(widths)
    if min(widths) < 0 or ell > len(fresh):
        return None
    expanded = []
    for s, w in zip(subs, widths, strict=True):
        s = s.replace("...", "".join(fresh[ell - w:ell]))
        if not all(c.isalpha() for c in s) or len(set(s)) != len(s):
            return None  # a repeated index (a diagonal) or a stray character
        expanded.append(s)
    if not arrow:  # implicit output: the ellipsis, then the labels used once, sorted
        counts: dict[str, int] = {}
        for s in subs:
            for c in s.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out = "".join(fresh[:ell]) + "".join(sorted(c for c, k in counts.items() if k == 1))
    else:
        if out.count("...") > 1:
            return None
        out = out.replace("...", "".join(fresh[:ell]))
    used = set("".join(expanded))
    if len(set(out)) != len(out) or not set(out) <= used:
        return None
    return expanded, out


def _sizes(subs: list[str], shapes: list[tuple[int, ...]]) -> dict[str, int] | None:
    """Each index's size (1 broadcasts), or None where two sizes disagree."""
    size: dict[str, int] = {}
    for s, shape in zip(subs, shapes, strict=True):
        for c, n in zip(s, shape, strict=True):
            m = size.get(c, 1)
            if m != 1 and n != 1 and m != n:
                return None
            size[c] = max(m, n)
    return size


def _contract(subs: list[str], out: str, size: dict[str, int], order: list[int],
              tensors: tuple[Any, ...]) -> Any:
    """Runs under the tracer: every torch call here becomes ops of the program."""
    ts = list(tensors)
    idx = list(subs)
    for k in range(len(ts)):  # indices only this operand has and the output lacks
        others = set(out).union(*(idx[j] for j in range(len(ts)) if j != k))
        lone = [d for d, c in enumerate(idx[k]) if c not in others]
        if lone:
            ts[k] = ts[k].sum(lone)
            idx[k] = "".join(c for c in idx[k] if c in others)
    cur, ci = ts[0], idx[0]
    for k in range(1, len(ts)):
        t, ti = ts[k], idx[k]
        later = set(out).union(*idx[k + 1:])
        batch = [c for c in ci if c in ti and c in later]
        summed = [c for c in ci if c in ti and c not in later]
        left = [c for c in ci if c not in ti]
        right = [c for c in ti if c not in ci]
        a = _arrange(cur, ci, batch + left + summed, size)
        b = _arrange(t, ti, batch + summed + right, size)
        nb, nl, ns, nr = (math.prod(size[c] for c in g) for g in (batch, left, summed, right))
        r = torch.bmm(a.reshape(nb, nl, ns), b.reshape(nb, ns, nr))
        cur = r.reshape([size[c] for c in batch + left + right])
        ci = "".join(batch + left + right)
    # Laid out as eager's: contiguous in ``order`` (outermost first), viewed as ``out``.
    dense = cur.permute([ci.index(out[d]) for d in order]).contiguous()
    return dense.permute([order.index(d) for d in range(len(out))])


def _arrange(t: Any, have: str, order: list[str], size: dict[str, int]) -> Any:
    """``t`` (indexed by ``have``) permuted to ``order``, size-1 dims broadcast."""
    t = t.permute([have.index(c) for c in order])
    want = [size[c] for c in order]
    return t.expand(want) if list(t.shape) != want else t


def _einsum(ctx: Builder, equation: Any, *operands: Any, **kwargs: Any) -> Any:
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    if (kwargs or not isinstance(equation, str) or len(operands) < 2
            or not all(is_proxy(t) for t in operands)):
        raise UseFallback
    plan = _parse(equation, [t.ndim for t in operands])
    if plan is None:
        raise UseFallback
    subs, out = plan
    size = _sizes(subs, [tuple(t.shape) for t in operands])
    if size is None or len({t.dtype for t in operands}) != 1:
        raise UseFallback  # (eager's error, or its type promotion)
    with torch._C.DisableTorchFunction(), symbols.stand_in_mode():  # eager's strides,
        # from a meta run (under the compilation's fake mode where sizes are symbolic)
        metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
                 for t in operands]
        order = _dense_order(torch.einsum(equation, *metas))
    if order is None:
        raise UseFallback
    return ctx.run_python(lambda *ts: _contract(subs, out, size, order, ts), operands, {})


def _dense_order(r: torch.Tensor) -> list[int] | None:
    """The dims of ``r`` from outermost to innermost when ``r`` is a permutation of a
    contiguous tensor (eager's einsum returns such permuted views), else None."""
    strides = tuple(r.stride())
    order = sorted(range(r.ndim), key=lambda d: (-strides[d], d))
    expect = 1
    for d in reversed(order):
        if r.shape[d] != 1 and strides[d] != expect:
            return None
        expect *= r.shape[d]
    return order


register_handlers([torch.einsum], _einsum)

__all__: list[str] = []
