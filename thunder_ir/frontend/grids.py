"""``torch.meshgrid`` as the program's own views: each grid a ``view`` and an ``expand``.

Eager's meshgrid (``at::meshgrid``) views each 0-d or 1-d input as a column along its own
dim and expands it to the grid's shape; with ``indexing="xy"`` the first two inputs and
grids swap places. The handler does the same with the traced tensors, so the grids are
views of the inputs as eager's are (``_base``, strides, aliasing), gradients are the
program's own, and a fusion region holds them: an index built each call from
``arange``/``meshgrid`` (BEiT's relative positions) no longer cuts the regions around it
(issue 53). What it does not model runs as the opaque call it was (`UseFallback`): no
``indexing`` (eager warns), inputs that are not all traced tensors of one dtype and
device, or of more than one dim (eager's errors).
"""

from __future__ import annotations

from typing import Any

import torch

from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import UseFallback
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers


def _grids(tensors: tuple[Any, ...], indexing: str) -> list[Any]:
    """Eager's grids of ``tensors`` (``at::meshgrid``), with torch calls on them."""
    ts = list(tensors)
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = [t.numel() for t in ts]
    grids = []
    for i, t in enumerate(ts):
        view = [1] * len(ts)
        view[i] = -1
        grids.append(t.view(view).expand(shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return grids


def _meshgrid(ctx: Builder, *tensors: Any, indexing: Any = None) -> Any:
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy") or not tensors or not all(is_proxy(t) for t in tensors):
        raise UseFallback
    if any(t.ndim > 1 for t in tensors) or len({(t.dtype, t.device) for t in tensors}) != 1:
        raise UseFallback  # (eager's errors)
    return tuple(ctx.run_python(lambda *ts: _grids(ts, indexing), tensors, {}))


register_handlers([torch.meshgrid], _meshgrid)

__all__: list[str] = []
