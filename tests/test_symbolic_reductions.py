"""Reductions that divide by a count over a varying length keep one symbolic program.

A mean over the length divides by the number of elements; made a Python ``float`` while
tracing, that count recorded a guard ``Eq(s1, 7)`` and each length compiled a program of
its own. Each reduction here runs at four lengths, forward and backward, against eager:
values, gradients, at most two compiles (the first sizes, then the symbolic program) and
no size reported as kept static (`thunder_ir.compile_status`'s ``static``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder_ir

LENGTHS = (3, 6, 11, 8)


def _targets(x: torch.Tensor) -> torch.Tensor:
    """Class indices in [0, 4) from the input's values (a row of ``x`` each)."""
    return (x.detach().abs() * 10).long().clamp(max=3)[..., 0].reshape(-1)


REDUCTIONS: dict[str, Callable[[nn.Module, torch.Tensor], torch.Tensor]] = {
    "mean_dim1": lambda m, x: x.mean(1),
    "mean_dim_minus2_keepdim": lambda m, x: x.mean(dim=-2, keepdim=True),
    "mean_all": lambda m, x: x.mean(),
    "var_unbiased": lambda m, x: x.var(1),
    "std_correction0": lambda m, x: x.std(1, correction=0),
    "var_mean": lambda m, x: torch.var_mean(x, 1)[0] * torch.var_mean(x, 1)[1],
    "nanmean": lambda m, x: x.nanmean(1),
    "adaptive_avg_pool1d": lambda m, x: F.adaptive_avg_pool1d(x.transpose(1, 2), 1),
    "layer_norm_over_length": lambda m, x: F.layer_norm(x.transpose(1, 2), (x.shape[1],)),
    "batch_norm_train": lambda m, x: m.bn(x.transpose(1, 2)),
    "mse_loss_mean": lambda m, x: F.mse_loss(x, torch.ones_like(x)),
    "cross_entropy_ignore_index": lambda m, x: F.cross_entropy(
        x.reshape(-1, 4), _targets(x), ignore_index=0),
    "cross_entropy_probabilities": lambda m, x: F.cross_entropy(
        x.reshape(-1, 4), x.detach().softmax(-1).reshape(-1, 4)),
}


class _Reduce(nn.Module):
    """``fn(self, x)`` (a BatchNorm1d over 4 channels for the reductions that use one)."""

    def __init__(self, fn: Callable[[nn.Module, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_over_length_compiles_at_most_twice(name: str) -> None:
    """Four lengths of ``(2, L, 4)``: the output, the input's gradient (and a module's
    parameter gradients and running statistics) equal eager's; at most two compiles."""
    torch.manual_seed(0)
    fn = REDUCTIONS[name]
    model, ref_model = _Reduce(fn), _Reduce(fn)
    ref_model.load_state_dict(model.state_dict())
    jm = thunder_ir.jit(model)
    for length in LENGTHS:
        x = torch.randn(2, length, 4)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, ref = jm(xa), ref_model(xb)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        torch.testing.assert_close(got, ref)
        weight = torch.randn(ref.shape)
        (got * weight).sum().backward()
        (ref * weight).sum().backward()
        torch.testing.assert_close(xa.grad, xb.grad)
        for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        for b, c in zip(model.buffers(), ref_model.buffers(), strict=True):
            torch.testing.assert_close(b, c)
    assert thunder_ir.cache_misses(jm) <= 2
    assert thunder_ir.compile_status(jm)["static"] == []


def test_a_count_a_rule_decides_names_the_rules_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard a rule of thunder_ir records after tracing (here the mean VJP made to turn
    its count into a ``float`` again, as it did) is reported with that rule's line, not
    the table's ``ShapeEnv`` frame."""
    from thunder_ir.passes import vjp_ltorch_core

    monkeypatch.setattr(vjp_ltorch_core, "count_number", float)
    jm = thunder_ir.jit(_Reduce(REDUCTIONS["mean_dim1"]))
    for length in LENGTHS[:3]:
        jm(torch.randn(2, length, 4, requires_grad=True)).sum().backward()
    static = thunder_ir.compile_status(jm)["static"]
    assert len(static) == 1 and "Eq(s1, " in static[0], static
    assert "vjp_ltorch_core.py:" in static[0] and " in mean)" in static[0], static


class _ShiftedLM(nn.Module):
    """An embedding, causal ``nn.MultiheadAttention`` and a head, trained as a causal LM
    called with ``labels=``: cross entropy of the logits but the last against the labels
    but the first (a view of ``2*(L-1)`` rows over a symbolic length)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 11)

    def forward(self, idx: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        n = idx.shape[1]
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        logits = self.head(self.attn(x, x, x, attn_mask=mask)[0])
        return F.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1))


def test_a_causal_lm_with_labels_compiles_at_most_twice() -> None:
    """Four lengths, loss and every parameter's gradient against eager, an ignored label
    in each batch; at most two compiles and no size kept static (the reshape of the
    shifted logits compared its symbolic strides with a sympy answer that could not be
    subtracted, and the symbolic compile failed: one program per length)."""
    torch.manual_seed(0)
    model = _ShiftedLM()
    jm = thunder_ir.jit(model)
    for length in LENGTHS:
        idx = torch.randint(0, 11, (2, length))
        labels = idx.clone()
        labels[0, -1] = -100
        loss = jm(idx, labels)
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        ref = model(idx, labels)
        ref.backward()
        torch.testing.assert_close(loss, ref)
        for g, p in zip(got, model.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad)
        model.zero_grad(set_to_none=True)
    assert thunder_ir.cache_misses(jm) <= 2
    assert thunder_ir.compile_status(jm)["static"] == []
