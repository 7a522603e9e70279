"""Tier-up of programs that use torch functions thunder_ir runs as opaque calls
(``F.interpolate`` with its backward, ``avg_pool2d``, ``F.normalize``, ``group_norm`` in
bf16, ``instance_norm``, ``grid_sample``, ``diff``, ``cdist``, ``sort``, ``histc``,
``einsum``): the fused program's regions hold them (`thunder_ir.lowering.traced_calls`),
so no region splits at one, and its values and gradients are eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from tier_up_support import run_until_swapped
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering.traced_calls import TRACED_CALLS

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")

OPAQUE = ("call_with_grad", "handle_vjp", "traced_vjp", *sorted(TRACED_CALLS))


class Vision(nn.Module):
    """BEiT's interpolated position table, a UNet's norms and pools, a flow's sampling."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 4, 5, 5))
        self.proj = nn.Parameter(torch.randn(4, 4) * 0.3)
        self.gn = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pos = F.interpolate(self.table, size=(8, 8), mode="bicubic", align_corners=False)
        h = torch.tanh(x * 1.5 + pos)
        h = F.avg_pool2d(F.interpolate(h, scale_factor=2, mode="bilinear"), 2)
        h = F.normalize(h * 2.0, dim=1) + F.instance_norm(h + 0.5)
        h = torch.einsum("bchw,cd->bdhw", h, self.proj)
        s = F.grid_sample(h, grid, align_corners=False)
        d = torch.diff(s, dim=-1)
        dist = torch.cdist(d.flatten(2), d.flatten(2) * 0.5)
        a, b = h[:, 0], h[:, 1]  # (unbind returns views: it stays an opaque call)
        top = torch.sort(a.flatten(1) * b.flatten(1), dim=-1).values[:, -3:]
        gn = F.group_norm((h * self.gn[:, None, None]).to(torch.bfloat16), 2)
        loss = (dist.square().mean() + top.sum() + s.sin().sum()
                + gn.float().square().mean())
        return loss, gn


def _opaque_outside_regions(source: str) -> list[str]:
    """Lines of a printed program (region bodies are comments) that call one of the
    opaque torch functions."""
    return [line for line in source.splitlines()
            if not line.lstrip().startswith("#") and any(o in line for o in OPAQUE)]


@needs_inductor
def test_fallback_ops_sit_inside_the_tier_up_regions_and_train_as_eager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = Vision()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    x = torch.randn(2, 4, 8, 8)
    grid = torch.rand(2, 6, 6, 2) * 2 - 1

    def check() -> None:
        model.zero_grad()
        ref.zero_grad()
        (loss, gn), (want, want_gn) = jm(x, grid), ref(x, grid)
        torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-4)
        # bf16: its rounding of fp32 inputs that the kernels round otherwise
        torch.testing.assert_close(gn, want_gn, rtol=1.6e-2, atol=2e-3)
        loss.backward()
        want.backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3)

    run_until_swapped(jm, lambda _: check())
    check()  # the fused program, its kernels in
    fwd = str(thunder_ir.last_traces(jm)[-1])
    bwd = str(thunder_ir.last_backward_traces(jm)[-1])
    assert "inductorFusion" in fwd and "inductorFusion" in bwd
    assert _opaque_outside_regions(fwd) == [] and _opaque_outside_regions(bwd) == [], (fwd, bwd)
    assert fwd.count("= inductorFusion") == 1 and bwd.count("= inductorFusion") == 1, (fwd, bwd)


class Router(nn.Module):
    """A mixture-of-experts layer routed as Mixtral's and OLMoE's: softmax over the
    experts, ``topk``, the routed counts by ``histc``, the tokens ordered by ``sort``,
    the chosen weights by ``gather``, the experts as one batched einsum."""

    def __init__(self, d: int = 16, experts: int = 4, k: int = 2) -> None:
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, 24) * 0.2)
        self.w2 = nn.Parameter(torch.randn(experts, 24, d) * 0.2)
        self.k, self.experts = k, experts

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float)
        w, idx = torch.topk(probs, self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        counts = torch.histc(idx.float(), bins=self.experts, min=0, max=self.experts - 1)
        order = torch.sort(idx.flatten(), stable=True).indices
        dense = torch.zeros_like(probs).scatter_add(1, idx, w)  # [T, E]
        h = torch.einsum("td,edf->tef", x, self.w1).relu()
        y = torch.einsum("tef,efd->ted", h, self.w2)
        picked = torch.gather(probs, 1, idx).sum()
        out = (y * dense[..., None]).sum(1)
        return out.square().mean() + picked * 1e-2, counts, order


@needs_inductor
def test_moe_routing_sits_inside_the_tier_up_regions_and_trains_as_eager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = Router()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    x = torch.randn(12, 16)

    def check() -> None:
        model.zero_grad()
        ref.zero_grad()
        (loss, counts, order), (want, want_counts, want_order) = jm(x), ref(x)
        torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(counts, want_counts, rtol=0, atol=0)
        torch.testing.assert_close(order, want_order, rtol=0, atol=0)
        loss.backward()
        want.backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)

    run_until_swapped(jm, lambda _: check())
    check()
    fwd = str(thunder_ir.last_traces(jm)[-1])
    bwd = str(thunder_ir.last_backward_traces(jm)[-1])
    for name in ("topk", "histc", "sort", "gather", "scatter_add"):
        assert [line for line in (fwd + bwd).splitlines()
                if name in line and not line.lstrip().startswith("#")] == [], (name, fwd, bwd)
    assert fwd.count("= inductorFusion") == 1 and bwd.count("= inductorFusion") == 1, (fwd, bwd)
