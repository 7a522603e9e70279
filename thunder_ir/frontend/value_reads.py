"""Ops that read a traced tensor's values for a size or a Python number.

- ``torch.bincount(x, weights, minlength)``: as long as ``max(x) + 1`` (or ``minlength``,
  or ``minlength`` for an empty ``x``): a new unbacked size ``u0 >= minlength``, as
  torch's fake kernel makes it (`thunder_ir.frontend.unbacked.value_size`); the opaque
  call runs eager's kernel (its checks and errors included).
- ``F.one_hot(x)`` / ``one_hot(x, -1)``: ``num_classes`` is ``max(x) + 1``: the last dim
  an unbacked size ``u0 >= 1`` (one class at least: eager's error for an empty ``x``);
  the opaque call with ``-1`` runs eager's kernel (its check that no class is negative).
- ``int(t)`` of a one-element integer or bool tensor: Python's ``__int__`` must return an
  ``int``, so the value is speculated as ``int(t.item())`` is: this call's value, checked
  on every call (`thunder_ir.frontend.speculation`); a float tensor's value is refused
  (a program fixed to a float would rarely hold again). Stored on a module at once
  (``self.count = int(n)``), it is the unbacked ``.item()`` instead, each call's number
  (`thunder_ir.frontend.seeds.stored_at_once`).
- ``float(t)``: the same: stored on a module at once, each call's number; else this
  call's value, checked on every call.
- ``t.tolist()``: eager's nested lists, each element an ``.item()`` (an unbacked number;
  a bool speculated): one program for any values.
- ``torch.tensor_split(x, t, dim)`` with a tensor ``t`` (eager reads it as Python ints on
  the CPU): a 1-D ``t`` holds the split indices; each piece is eager's ``at::slice`` of
  ``x`` (bounds wrapped from the end, clamped, an end before its start empty), computed
  in the program, its offset and length ``.item()`` symbols of a ``narrow`` view of
  ``x``: later ops see plain unbacked lengths, one program for every index (along an
  inner dim, the pieces' contiguity depends on their lengths: a layout decision,
  speculated); a 0-d ``t`` is a number of sections, which decides how many results there
  are: speculated.
- ``torch.histogramdd``: its edges and its counts as two opaque calls, as ATen composes it
  (one call cannot return its tuple of edges inside its result).

Where the compile with unbacked sizes failed (or without a symbol table, `NeedsSymbols`
first) the sizes are speculated: this call's value, checked on every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from thunder_ir.dialects.types import canonical_device, tensor_type
from thunder_ir.frontend import logged, printing, unbacked
from thunder_ir.frontend.errors import DATA_HINT, DataDependentError, UseFallback, where
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.number_tensors import number_value
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.speculation import (
    concrete,
    speculate,
    speculate_count,
    unbacked_item,
    unbacked_sizes,
)
from thunder_ir.frontend.table import register_handlers

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext

_T = torch.Tensor


def _length(ctx: TraceContext, what: str, compute: Any, least: int) -> Any:
    """A size that ``compute()`` (a traced 0-d integer tensor) gives: an unbacked symbol
    at least ``least``, or (sizes speculated) this call's value, checked."""
    if unbacked_sizes(ctx, what):
        return unbacked.value_size(ctx, compute, least)
    return speculate_count(ctx, compute())


def _bincount(ctx: TraceContext, input: Any, weights: Any = None, minlength: Any = 0) -> Any:
    """``torch.bincount``: the opaque call typed ``[u0]``, ``u0`` its length."""
    if not is_proxy(input) or type(minlength) is not int or input.ndim != 1 \
            or input.dtype.is_floating_point or input.dtype.is_complex \
            or input.dtype is torch.bool or (weights is not None and not is_proxy(weights)):
        raise UseFallback  # (eager's errors, from the meta run or torch)
    if type(input.shape[0]) is int and input.shape[0] == 0:
        n: Any = max(minlength, 0)
    else:
        n = _length(ctx, "torch.bincount", lambda: ctx.run_python(
            lambda x: (x.max().to(torch.int64) + 1).clamp(min=minlength), (input,), {}),
                    max(minlength, 0))
    dtype = torch.int64 if weights is None else \
        torch.float32 if weights.dtype is torch.float32 else torch.float64
    t = tensor_type((n,), dtype, canonical_device(input.device))
    kwargs = {"minlength": minlength} if minlength else {}
    return fallback(ctx, torch.bincount, (input, weights), kwargs, result_type=t)


def _one_hot(ctx: TraceContext, input: Any, num_classes: Any = -1) -> Any:
    """``F.one_hot(x)``: the opaque call typed ``[*x.shape, u0]``, ``u0 = max(x) + 1``."""
    if num_classes != -1 or not is_proxy(input) or input.dtype is not torch.int64:
        raise UseFallback
    if type(input.numel()) is int and input.numel() == 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.\n"
                           f"  at {where(ctx.loc)}")
    n = _length(ctx, "F.one_hot", lambda: ctx.run_python(lambda x: x.max() + 1, (input,), {}),
                1)
    t = tensor_type((*input.shape, n), torch.int64, canonical_device(input.device))
    return fallback(ctx, F.one_hot, (input,), {"num_classes": -1}, result_type=t)


def _int(ctx: TraceContext, self: Any) -> int:
    """``int(t)``: stored on a module at once (``self.count = int(n)``), each call's
    number (`seeds.stored_at_once`); else its value this call, checked on every call (as
    ``int(t.item())``)."""
    n = number_value(self._value)
    if type(n) is int:
        return n
    if self.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars\n"
                         f"  at {where(ctx.loc)}")
    if not (unbacked_item(self) or self.dtype is torch.bool):
        raise DataDependentError(f"{where(ctx.loc)}: int() of a {self.dtype} tensor needs "
                                 f"its value, but {DATA_HINT}")
    if self.dtype is torch.bool:
        return int(speculate(ctx, self))
    from thunder_ir.frontend.seeds import stored_at_once

    def number() -> Any:  # (without a table, NeedsSymbols: traced again with one)
        if not unbacked_sizes(ctx, "int(tensor)"):
            return None
        return unbacked.item(ctx, self, speculate(
            ctx, ctx.run_python(lambda t: t >= 0, (self,), {})))

    if stored_at_once(number, 0, "int(tensor)"):
        return 0
    return speculate_count(ctx, self)


def _float(ctx: TraceContext, self: Any) -> float:
    """``float(t)`` of a one-element tensor: Python's ``__float__`` must return a
    ``float``. Stored on a module at once (``self.loss = float(loss)``), each call's
    number (`seeds.stored_at_once`); else this call's value, checked on every call (NaN
    as NaN): a call with another value compiles a variant, as a decision does."""
    n = number_value(self._value)
    if type(n) in (int, float, bool):
        return float(n)
    if self.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars\n"
                         f"  at {where(ctx.loc)}")
    if self.dtype.is_complex:
        raise UseFallback  # (eager's error or warning)
    if ctx.build.in_region():
        raise DataDependentError(f"{where(ctx.loc)}: float(tensor) inside a custom "
                                 f"backward needs its value, but {DATA_HINT}")
    from thunder_ir.frontend.seeds import stored_at_once

    def number() -> Any:  # (without a table, NeedsSymbols: traced again with one)
        if not self.dtype.is_floating_point or not unbacked_sizes(ctx, "float(tensor)"):
            return None
        return unbacked.item_float(ctx, self)

    if stored_at_once(number, 0.0, "float(tensor)"):
        return 0.0
    wide = ctx.run_python(lambda t: t.reshape(()).to(torch.float64), (self,), {})
    f = float(concrete(ctx, wide._value))
    speculate(ctx, ctx.run_python(lambda t: t == f if f == f else t != t, (wide,), {}))
    return f


MAX_TOLIST = 1024
"""The most elements ``t.tolist()`` reads as symbolic numbers (one ``.item()`` each);
beyond, refused naming the line."""


def _tolist(ctx: TraceContext, self: Any) -> Any:
    """``t.tolist()``: eager's nested lists of Python numbers, each element an ``.item()``
    (`thunder_ir.frontend.unbacked`): of an integer tensor an unbacked ``SymInt`` (no fact
    on its sign: a decision on it is speculated), of a float one an unbacked ``SymFloat``
    (Python arithmetic on it computed in the program, `python_floats`), of a bool one
    speculated; used as data (an operand, a size, returned or stored) one program for
    any values. A 0-d tensor gives its number, as eager's."""
    if not is_proxy(self) or self.dtype.is_complex or any(type(n) is not int
                                                           for n in self.shape):
        raise UseFallback
    if self.numel() > MAX_TOLIST:
        raise DataDependentError(
            f"{where(ctx.loc)}: .tolist() of {self.numel()} elements (more than "
            f"{MAX_TOLIST}) reads each as a traced number, but {DATA_HINT}")
    if self.dtype is not torch.bool and not unbacked_sizes(ctx, ".tolist()"):
        raise DataDependentError(f"{where(ctx.loc)}: .tolist() needs a traced tensor's "
                                 f"values, but {DATA_HINT}")
    flat = ctx.run_python(lambda t: t.detach().reshape(-1), (self,), {})

    def element(k: int) -> Any:
        one = ctx.run_python(lambda t: t[k], (flat,), {})
        if self.dtype is torch.bool:
            return speculate(ctx, one)
        if self.dtype.is_floating_point:
            return unbacked.item_float(ctx, one)
        return unbacked.item(ctx, one, None)

    def nest(shape: tuple[int, ...], start: int) -> Any:
        if not shape:
            return element(start)
        step = 1
        for n in shape[1:]:
            step *= n
        return [nest(shape[1:], start + i * step) for i in range(shape[0])]

    return nest(tuple(self.shape), 0)


def _tensor_split(ctx: TraceContext, input: Any, indices_or_sections: Any, dim: Any = 0
                  ) -> Any:
    """``torch.tensor_split`` by a tensor of indices or sections (eager reads it on the
    CPU): each piece a ``narrow`` view by unbacked offset and length, as eager slices;
    a number of sections speculated."""
    t = indices_or_sections
    if not (is_proxy(input) and is_proxy(t) and type(dim) is int and t.ndim <= 1
            and t.dtype is torch.int64 and t.device.type == "cpu"
            and -input.ndim <= dim < max(input.ndim, 1) and input.ndim > 0):
        raise UseFallback
    if t.ndim == 0:
        sections = speculate_count(ctx, t)
        return ctx.run_python(torch.tensor_split, (input, sections, dim), {})
    d = dim % input.ndim
    size = input.shape[d]
    if not unbacked_sizes(ctx, "torch.tensor_split"):
        return ctx.run_python(torch.tensor_split, (input, [
            speculate_count(ctx, ctx.run_python(lambda x, i=i: x[i], (t,), {}))
            for i in range(t.shape[0])], d), {})
    # each piece is eager's at::slice(x, d, start, end): bounds wrapped (negative: from the
    # end), clamped to [0, size], an end before its start empty; its offset and length
    # .item()s of those (unbacked symbols, bound by the program), so later ops see plain
    # sizes
    bounds = ctx.run_python(lambda i: torch.where(i < 0, i + size, i).clamp(0, size), (t,), {})
    pieces = []
    for k in range(t.shape[0] + 1):
        def span(b: Any, k: int = k) -> Any:
            lo = b[k - 1] if k else torch.zeros((), dtype=b.dtype)
            hi = b[k] if k < b.shape[0] else torch.full((), size, dtype=b.dtype)
            return lo, (hi - lo).clamp(min=0)

        lo, n = ctx.run_python(span, (bounds,), {})
        lo, n = unbacked.item(ctx, lo, True), unbacked.item(ctx, n, True)
        pieces.append(ctx.run_python(lambda x, lo=lo, n=n: x.narrow(d, lo, n), (input,), {}))
    return tuple(pieces)


def _histogramdd(ctx: TraceContext, input: Any, bins: Any, *, range: Any = None,
                 weight: Any = None, density: bool = False) -> Any:
    """``torch.histogramdd`` as ATen composes it: its edges
    (``torch._histogramdd_bin_edges``, or the edge tensors given, returned as they are)
    and its counts, each an opaque call typed by its meta rule
    (`thunder_ir.frontend.meta_rules`): eager's result holds a tuple of tensors, which one
    opaque call cannot return."""
    if not is_proxy(input) or input.ndim < 1:
        raise UseFallback
    if isinstance(bins, list | tuple) and bins and all(is_proxy(b) for b in bins):
        hist = fallback(ctx, torch._histogramdd_from_bin_tensors, (input, list(bins)),
                        {"weight": weight, "density": density})
        return torch.return_types.histogramdd((hist, tuple(bins)))
    dims = input.shape[-1]
    if type(dims) is not int:
        raise UseFallback
    counts = [bins] * dims if type(bins) is int else bins
    if not (isinstance(counts, list | tuple) and all(type(b) is int for b in counts)):
        raise UseFallback
    kw = {"range": range, "weight": weight, "density": density}
    edges = fallback(ctx, torch._histogramdd_bin_edges, (input, list(counts)), kw)
    hist = fallback(ctx, torch._histogramdd_from_bin_cts, (input, list(counts)), kw)
    return torch.return_types.histogramdd((hist, tuple(edges)))


register_handlers([torch.histogramdd], _histogramdd)
register_handlers([torch.bincount, _T.bincount], _bincount)
register_handlers([F.one_hot, torch._C._nn.one_hot], _one_hot)
register_handlers([_T.__int__], _int)
register_handlers([_T.__float__], _float)
register_handlers([_T.tolist], _tolist)
register_handlers([torch.tensor_split, _T.tensor_split], _tensor_split)

__all__: list[str] = []
_ = printing, logged  # (their imports register the swaps that print and log traced values)
