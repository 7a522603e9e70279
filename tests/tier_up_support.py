"""What the forced-hot tier-up tests share: calling a step until the fused program swaps
in, and a training step of the jitted model checked against eager's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

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


def sgd_step_as_eager(jm: Any, model: torch.nn.Module, ref: torch.nn.Module,
                      make_input: Callable[[], torch.Tensor], lr: float
                      ) -> Callable[[Any], None]:
    """A step for `run_until_swapped`: ``jm`` (jitting ``model``) and the eager ``ref``
    (its copy) take the same input, each its own SGD step of learning rate ``lr``; the
    losses, the gradients (``None`` where eager's is) and the parameters after the step
    are checked against eager's (fp32 tolerances)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)

    def step(_: Any = None) -> None:
        x = make_input()
        opt.zero_grad()
        ref_opt.zero_grad()
        loss, want = jm(x), ref(x)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
        loss.backward()
        want.backward()
        for (n, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None), n
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)

    return step
