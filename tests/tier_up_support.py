"""What the forced-hot tier-up tests share: calling a step until the fused program swaps in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import thunder_ir
from thunder_ir.lowering import tier_up as tu


def run_until_swapped(jm: Any, step: Callable[[int], Any], limit: int | None = None,
                      programs: int = 1) -> int:
    """Calls ``step(n)`` for n = 0, 1, ... (each a call of ``jm`` checked against eager by
    the test) until ``programs`` of ``jm``'s programs have swapped in their fused version,
    waiting for pending kernels between calls; asserts that exactly that many swapped and
    none failed. Returns the index of the last call made (the next step's is one more)."""
    limit = 3 * tu.HOT_CALLS if limit is None else limit
    n = 0
    for n in range(limit):
        step(n)
        status: dict[str, Any] = thunder_ir.compile_status(jm)
        if status["swapped"] >= programs:
            break
        if status["pending"]:
            thunder_ir.compile_status(jm, wait=None)
    status = thunder_ir.compile_status(jm)
    assert status["swapped"] == programs and status["failed"] == 0, status
    return n
