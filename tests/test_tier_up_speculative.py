"""Tier-up of a speculative program (`thunder_ir.frontend.speculation`): hot at once, it is
fused and swapped in with its runtime check (``tir.assume``) outside the fusion regions;
a later call that breaks the speculation stops the fused program and gets eager's result
(another variant), and the calls after it run the fused program again. Every value and
gradient is eager's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu

pytestmark = pytest.mark.skipif(not inductor_executor.InductorExecutor().is_available(),
                                reason="the Inductor executor needs a C++ compiler on the CPU")


@pytest.fixture
def hot_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs are hot after `HOT_CALLS` calls, however short."""
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)


class _Branchy(nn.Module):
    """A data-dependent branch: the program speculates on ``x.sum() > 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.LayerNorm(48),
                                 nn.Linear(48, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.net(x)
        if x.sum() > 0:
            return torch.tanh(h) * 2
        return h.square()


def _check(jm: nn.Module, model: nn.Module, ref: nn.Module, x: torch.Tensor) -> None:
    """One training call of ``jm`` against eager's: the output, then the gradients."""
    out, want = jm(x), ref(x)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    out.square().mean().backward()
    want.square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert type(p.grad) is torch.Tensor
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        p.grad, q.grad = None, None


def test_a_speculative_program_tiers_up_and_its_check_still_fires(hot_at_once: None) -> None:
    torch.manual_seed(0)
    model = _Branchy()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    x = torch.randn(8, 32).abs()  # the speculation holds
    for _ in range(3 * tu.HOT_CALLS):
        _check(jm, model, ref, x)
        if thunder_ir.compile_status(jm)["swapped"]:
            break
        thunder_ir.compile_status(jm, wait=None)
    status = thunder_ir.compile_status(jm)
    assert status["swapped"] == 1 and status["failed"] == 0 and not status["kept"], status
    fused = str(thunder_ir.last_traces(jm)[-1])
    assert "inductorFusion" in fused
    calls = [ln for ln in fused.splitlines() if not ln.lstrip().startswith("#")]
    assert any("tir.assume(" in ln for ln in calls), fused  # the check: outside the regions
    _check(jm, model, ref, x)  # the fused program (its kernels' first calls)
    misses = thunder_ir.cache_misses(jm)
    _check(jm, model, ref, -x)  # breaks the speculation: the fused program's check fires
    assert thunder_ir.cache_misses(jm) == misses + 1  # (the other branch's variant)
    assert "inductorFusion" not in str(thunder_ir.last_traces(jm)[-1])
    _check(jm, model, ref, x)  # the fused program again
    assert "inductorFusion" in str(thunder_ir.last_traces(jm)[-1])
    assert thunder_ir.compile_status(jm)["swapped"] == 1
