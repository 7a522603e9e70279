"""``torch.seed()`` in a program (`thunder_ir.frontend.seeds`)."""

from __future__ import annotations

import torch


def draw_seed() -> torch.Tensor:
    """``torch.seed()`` as eager calls it (torch's generators reseeded with a
    nondeterministic seed), the seed as a 0-d ``uint64`` tensor (it may not fit an
    ``int64``); the program takes its ``.item()``."""
    return torch.tensor(torch.random.seed(), dtype=torch.uint64)


__all__ = ["draw_seed"]
