"""Results with eager's strides.

A program's values are logical tensors; the caller, though, sees its results' layouts (a
``.view`` of a result works or raises by them). Tracing knows eager's layout of every
result (`thunder_ir.frontend.layout`). The torch executor runs eager's own kernels on
eager's layouts, so its results are laid out as eager's already; a fusion region, a
decomposition or a functionalized write may lay a result out otherwise.

So the first run of each compiled program compares its results' strides with eager's
(`check_layouts`), and where one differs, that program restrides that result on every
call (`restride`: a copy into eager's layout, as eager's own kernels would have written
it). Strides of size-1 dims are not compared (torch's ``check_significant_strides``: they
do not change which elements a result holds, or which views of it can be made). With
``THUNDER_IR_VERIFY=1`` (the tests) a difference raises instead, so that the suite finds
every place that lays a result out otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

Strides = tuple[int, ...]


def significant(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    """The strides that decide a dense tensor's layout: those of dims longer than 1 (none
    for an empty tensor)."""
    if any(n == 0 for n in shape):
        return ()
    return tuple(s for n, s in zip(shape, strides) if n > 1)


def is_dense(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's ``is_non_overlapping_and_dense`` for a layout."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n != 1)
    expected = 1
    for s, n in dims:
        if n == 0:
            return True
        if s != expected:
            return False
        expected *= n
    return True


def restride(x: torch.Tensor, strides: Sequence[int]) -> torch.Tensor:
    """``x``'s values laid out with ``strides`` (a dense layout): ``x`` itself if it is
    so already, else a copy (differentiable, as eager's ``contiguous``)."""
    if significant(x.shape, x.stride()) == significant(x.shape, strides):
        return x
    out = torch.empty_strided(x.shape, tuple(strides), dtype=x.dtype, device=x.device)
    return out.copy_(x)


def _outputs(outs: Any, n_outputs: int) -> list[Any]:
    return [outs] if n_outputs == 1 else list(outs)


def _mismatches(outs: list[Any], expected: Sequence[Strides | None]
                ) -> list[tuple[int, Strides]]:
    bad = []
    for k, (o, want) in enumerate(zip(outs, expected)):
        if want is None or not isinstance(o, torch.Tensor) or o.layout != torch.strided:
            continue
        if significant(o.shape, o.stride()) != significant(o.shape, want):
            bad.append((k, want))
    return bad


class LayoutMismatch(AssertionError):
    """A compiled program lays a result out otherwise than eager (raised where
    ``THUNDER_IR_VERIFY=1``)."""


def _restriding(fn: Callable[..., Any], fixes: Sequence[tuple[int, Strides]], n_outputs: int
                ) -> Callable[..., Any]:
    """``fn`` with the outputs at ``fixes`` restrided to eager's layout."""
    def run(*args: Any) -> Any:
        outs = fn(*args)
        if n_outputs == 1:
            return restride(outs, fixes[0][1])
        outs = list(outs)
        for k, strides in fixes:
            outs[k] = restride(outs[k], strides)
        return tuple(outs)

    return run


def check_layouts(entry: Any, expected: Sequence[Strides | None], where: str) -> None:
    """Makes ``entry.fn`` check its results' layouts on its first run (see the module
    doc); ``expected``: eager's strides per program output (None: not a user's result, or
    a layout no copy can make); ``where``: what compiled it, for the message."""
    if not any(e is not None for e in expected):
        return
    fn = entry.fn
    n_outputs = entry.n_outputs

    def first(*args: Any) -> Any:
        outs = fn(*args)
        bad = _mismatches(_outputs(outs, n_outputs), expected)
        if not bad:
            entry.fn = fn
            return outs
        if os.environ.get("THUNDER_IR_VERIFY") == "1":
            got = _outputs(outs, n_outputs)
            raise LayoutMismatch(
                f"thunder_ir: {where}: results laid out otherwise than eager's: " + "; ".join(
                    f"output {k} {list(got[k].shape)}: strides {got[k].stride()}, eager "
                    f"{want}" for k, want in bad))
        entry.fn = _restriding(fn, bad, n_outputs)
        return _restriding(lambda *_: outs, bad, n_outputs)()

    entry.fn = first


__all__ = ["LayoutMismatch", "check_layouts", "is_dense", "restride", "significant"]
