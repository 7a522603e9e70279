"""``Tensor.repeat`` and ``repeat_interleave`` by an int as the program's own shape ops.

Both copy ``x`` into a larger contiguous tensor, which is what broadcasting a view of ``x``
and reshaping it does: ``x.repeat(r0, r1)`` is ``x[None, :, None, :]`` expanded to ``(r0,
n0, r1, n1)`` and reshaped to ``(r0 n0, r1 n1)``; ``repeat_interleave(x, r, d)`` puts the new
axis after ``d`` instead. As ops of the program they fuse with their neighbours (GPT-J's
rotary embedding calls ``repeat_interleave`` four times a layer, each a break in a fusion
region as an opaque call), and their gradient is ``expand``'s, a sum over the copies, as
eager's. What is not modeled stays the opaque call, with eager's checks and errors: a
tensor of counts (sizes from values: speculation's error), ``output_size``, a count of 0 or
below, fewer sizes than ``x`` has dims, a dim out of range (any dim of a 0-d tensor),
symbolic sizes.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import UseFallback
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers

T = torch.Tensor


def _counts(sizes: tuple[Any, ...]) -> tuple[int, ...] | None:
    if len(sizes) == 1 and isinstance(sizes[0], tuple | list | torch.Size):
        sizes = tuple(sizes[0])
    if not all(type(s) is int and s > 0 for s in sizes):
        return None
    return tuple(sizes)


def _repeat(ctx: Builder, x: Any, *sizes: Any) -> Any:
    counts = _counts(sizes)
    if not is_proxy(x) or counts is None or len(counts) < x.ndim \
            or not all(type(n) is int for n in x.shape):
        raise UseFallback
    return ctx.run_python(_tile, (x, counts), {})


def _tile(x: torch.Tensor, counts: tuple[int, ...]) -> torch.Tensor:
    shape = (1,) * (len(counts) - x.ndim) + tuple(x.shape)
    spread = [d for n in shape for d in (1, n)]
    wide = [d for r, n in zip(counts, shape, strict=True) for d in (r, n)]
    out = x.reshape(spread).expand(wide).reshape([r * n for r, n in zip(counts, shape,
                                                                       strict=True)])
    return _fresh(out, all(r == 1 or n == 1 for r, n in zip(counts, shape, strict=True)))


def _fresh(out: torch.Tensor, may_view: bool) -> torch.Tensor:
    """``out`` as a new contiguous tensor, as eager's result is: where each repeated dim
    has size 1 (or is repeated once), the reshape may be a view of ``x`` (of stride 0
    where it broadcasts), so it is copied; otherwise the reshape copies already."""
    return out.clone(memory_format=torch.contiguous_format) if may_view else out


_INTERLEAVE = inspect.signature(lambda input, repeats, dim=None, *, output_size=None: None)


def _repeat_interleave(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
    try:
        bound = _INTERLEAVE.bind(*args, **kwargs)
    except TypeError:
        raise UseFallback from None
    bound.apply_defaults()
    x, repeats, dim = (bound.arguments[k] for k in ("input", "repeats", "dim"))
    if (not is_proxy(x) or type(repeats) is not int or repeats <= 0
            or not (dim is None or type(dim) is int)
            or not all(type(n) is int for n in x.shape)):
        raise UseFallback
    if dim is not None and not -x.ndim <= dim < x.ndim:
        raise UseFallback  # eager's error (a 0-d tensor has no dim to repeat along)
    output_size = bound.arguments["output_size"]
    length = x.numel() if dim is None else x.shape[dim]
    if output_size is not None and output_size != length * repeats:
        raise UseFallback  # eager's "Invalid output_size" (it only sizes the result)
    return ctx.run_python(_interleave, (x, repeats, dim), {})


def _interleave(x: torch.Tensor, repeats: int, dim: int | None) -> torch.Tensor:
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = dim % x.ndim
    shape = list(x.shape)
    out = x.unsqueeze(d + 1).expand([*shape[:d + 1], repeats, *shape[d + 1:]])
    out = out.reshape([*shape[:d], shape[d] * repeats, *shape[d + 1:]])
    return _fresh(out, shape[d] == 1 or repeats == 1)


register_handlers([T.repeat], _repeat)
register_handlers([torch.repeat_interleave], _repeat_interleave)
register_handlers([T.repeat_interleave], _repeat_interleave)

__all__: list[str] = []
