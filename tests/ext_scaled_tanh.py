"""An extension executor of one operator, in a module of its own (tests/test_inert.py runs
traces that call it in a fresh process, which imports this module as the trace says)."""

from __future__ import annotations

import torch

from thunder_ir.extend import OperatorExecutor

scaled_ex = OperatorExecutor("scaled_ex", version="0.1")


def scaled_tanh(x: torch.Tensor, s: float) -> torch.Tensor:
    """``tanh(x) * s``."""
    return torch.tanh(x) * s


scaled = scaled_ex.register_operator("scaled_tanh", like=scaled_tanh, fn=scaled_tanh)
