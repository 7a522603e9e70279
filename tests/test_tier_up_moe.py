"""Tier-up of a mixture-of-experts layer written as transformers 5's ``grouped_mm``
experts (Mixtral, OLMoE, Jamba) after grouped-query attention: softmax router,
``topk``, tokens sorted by expert, group sizes by ``histc`` and ``cumsum``, the
experts' products as ``torch._grouped_mm``, the order restored through
``inv[perm] = arange``. Forced hot, the fused program's regions hold the grouped
products (`thunder_ir.dialects.ltorch_nn.grouped_mm_op`) and the attention's backward
(`sdpa_backward`), and its losses, gradients (and ``None`` ones) and parameters after
optimizer steps are eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from tier_up_support import run_until_swapped, sgd_step_as_eager
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")
needs_grouped_mm = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"),
                                      reason="this torch has no torch._grouped_mm")


class Experts(nn.Module):
    """transformers' ``grouped_mm_experts_forward`` with a gated up projection, and a
    frozen bias that gets no gradient."""

    def __init__(self, d: int = 16, f: int = 24, experts: int = 4, k: int = 2) -> None:
        super().__init__()
        self.gate = nn.Linear(d, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, 2 * f, d) * 0.2)
        self.down = nn.Parameter(torch.randn(experts, d, f) * 0.2)
        self.qkv = nn.Linear(d, 2 * d, bias=False)  # 4 query heads, 2 key/value heads
        self.frozen = nn.Parameter(torch.randn(d), requires_grad=False)
        self.unused = nn.Parameter(torch.randn(d))
        self.k, self.experts = k, experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape
        q, k, v = self.qkv(x).view(t, 8, d // 4).transpose(0, 1).split([4, 2, 2])
        att = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True,
                                             enable_gqa=True)
        x = x + att[0].transpose(0, 1).reshape(t, d)
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float)
        w, idx = torch.topk(probs, self.k, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        ids, perm = torch.sort(idx.reshape(-1))
        hs = x[perm // self.k]
        sw = w.reshape(-1)[perm]
        counts = torch.histc(ids.float(), bins=self.experts, min=0, max=self.experts - 1)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        a, b = torch._grouped_mm(hs, self.up.transpose(-2, -1), offs=offs).chunk(2, dim=-1)
        h = F.silu(a) * b
        y = torch._grouped_mm(h, self.down.transpose(-2, -1), offs=offs) * sw[:, None]
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        y = y[inv].view(t, self.k, d).sum(1)
        return (y + self.frozen).square().mean()


def _outside_regions(source: str, names: tuple[str, ...]) -> list[str]:
    """Lines of a printed program (region bodies are comments) that call one of
    ``names``."""
    return [line for line in source.splitlines()
            if not line.lstrip().startswith("#") and any(n in line for n in names)]


@needs_inductor
@needs_grouped_mm
def test_grouped_mm_experts_sit_inside_the_tier_up_regions_and_train_as_eager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = Experts()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    gen = torch.Generator().manual_seed(1)
    step = sgd_step_as_eager(jm, model, ref, lambda: torch.randn(12, 16, generator=gen), lr=0.1)
    run_until_swapped(jm, step)
    for _ in range(2):
        step()  # the fused program, its kernels in (a new routing each step)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    bwd = str(thunder_ir.last_backward_traces(jm)[-1])
    assert "inductorFusion" in fwd and "inductorFusion" in bwd
    assert _outside_regions(fwd + bwd, ("grouped_mm", "sdpa_backward")) == [], (fwd, bwd)
    assert bwd.count("= inductorFusion") == 1, bwd
    # the write of the inverse permutation (a call that only checks its indices) cuts no
    # segment: the experts and the attention before it are one region after it
    assert fwd.count("= inductorFusion") == 2, fwd
