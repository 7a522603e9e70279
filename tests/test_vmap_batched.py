"""``torch.vmap`` of an elementwise function inside traced code is one call on the whole
batch (`thunder_ir.frontend.vmap_batch`); any other function is still mapped slice by
slice. Either way values and gradients are eager's; the elementwise ones bit for bit.

The case that asked for it: ``associative_scan``'s generic mode wraps its combine
function in vmap at every level of its tree (the Mamba scan of Jamba's layers under
tracing). A selective scan written as transformers writes it (the sequential loop in
eager, the associative scan where ``torch.compiler.is_compiling()``) trains as eager
once its tiered program is forced hot.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tier_up_support import run_until_swapped, sgd_step_as_eager
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu
from thunder_ir.testing_eager import check_against_eager


def _combine(left: tuple[torch.Tensor, torch.Tensor],
             right: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    (a_l, b_l), (a_r, b_r) = left, right
    return a_l * a_r, a_r * b_l + b_r


def _must_be_a_slice(r: torch.Tensor) -> torch.Tensor:
    assert r.dim() == 1  # eager's vmap shows the function a slice: on the batch it raises
    return r * 2


M = torch.randn(2, 3)

# case -> (function of t [5, 3] and w [3], whether it is one call on the batch)
CASES: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], Any], bool]] = {
    "elementwise, a shared operand": (
        lambda t, w: torch.vmap(lambda r: (r * w).tanh() + 1)(t), True),
    "two inputs, two results, in_dims and out_dims 1": (
        lambda t, w: torch.vmap(_combine, in_dims=1, out_dims=1)(
            (t.exp(), t * w), (t.sigmoid(), t + 1)), True),
    "out_dims=-1": (lambda t, w: torch.vmap(lambda r: r.sin() * w, out_dims=-1)(t), True),
    "a comparison": (lambda t, w: torch.vmap(lambda r: torch.where(r > 0, r, w))(t), True),
    "a result that does not depend on the batch": (
        lambda t, w: torch.vmap(lambda r: (r * 2, w.exp()), out_dims=(0, None))(t), True),
    "a branch on the rank": (
        lambda t, w: torch.vmap(lambda r: r * 2 if r.dim() == 1 else r * 3)(t), False),
    "raises on the batch": (lambda t, w: torch.vmap(_must_be_a_slice)(t), False),
    "a shared operand of a higher rank": (lambda t, w: torch.vmap(lambda r: r * M)(t),
                                          False),
    "zero-dimensional slices": (lambda t, w: torch.vmap(lambda a: a * w)(t[:, 0]), False),
    "a reduction": (lambda t, w: torch.vmap(lambda r: r.sum() * r)(t), False),
    "an in-place write": (lambda t, w: torch.vmap(lambda r: (r * 2).add_(w))(t), False),
    "an input returned": (lambda t, w: torch.vmap(lambda r, s: (r, s * 2))(t, t), False),
}


def _per_slice(source: str) -> bool:
    """Whether a printed program maps slice by slice (a slice taken per index)."""
    return "(1,))" in source


@pytest.mark.parametrize("case", list(CASES))
def test_elementwise_vmap_is_one_call_on_the_batch(case: str) -> None:
    fn, whole = CASES[case]
    made: list[Any] = []

    def jit(f: Any) -> Any:
        made.append(thunder_ir.jit(f))
        return made[-1]

    torch.manual_seed(0)
    check_against_eager(fn, torch.randn(5, 3, requires_grad=True),
                        torch.randn(3, requires_grad=True), jit=jit, exact=whole)
    source = str(thunder_ir.last_traces(made[0])[-1])
    assert _per_slice(source) != whole, source


needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


class SelectiveScan(nn.Module):
    """transformers' ``mamba_selective_scan`` (Jamba, Mamba): the sequential loop in
    eager, the generic associative scan while compiling; a frozen and an unused
    parameter."""

    def __init__(self, d: int = 8, n: int = 4) -> None:
        super().__init__()
        self.a_log = nn.Parameter(torch.randn(d, n) * 0.1)
        self.dt = nn.Linear(d, d)
        self.b = nn.Linear(d, n, bias=False)
        self.c = nn.Linear(d, n, bias=False)
        self.frozen = nn.Parameter(torch.randn(d), requires_grad=False)
        self.unused = nn.Parameter(torch.randn(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, length, d]
        dt = torch.nn.functional.softplus(self.dt(x)).transpose(1, 2)  # [b, d, l]
        a = torch.exp(-self.a_log.exp()[None, :, None, :] * dt[..., None])  # [b, d, l, n]
        bu = dt[..., None] * self.b(x)[:, None] * x.transpose(1, 2)[..., None]
        if torch.compiler.is_compiling():
            from torch._higher_order_ops.associative_scan import associative_scan

            _, states = associative_scan(_combine, (a, bu), dim=2, combine_mode="generic")
        else:
            state = torch.zeros_like(bu[:, :, 0])
            steps = []
            for i in range(x.shape[1]):
                state = a[:, :, i] * state + bu[:, :, i]
                steps.append(state)
            states = torch.stack(steps, dim=2)
        y = (states * self.c(x)[:, None]).sum(-1).transpose(1, 2)  # [b, l, d]
        return ((y + self.frozen) ** 2).mean()


@needs_inductor
@pytest.mark.skipif(not hasattr(torch._higher_order_ops, "associative_scan"),
                    reason="this torch has no associative_scan")
def test_a_selective_scan_trains_as_eager_forced_hot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = SelectiveScan()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    gen = torch.Generator().manual_seed(1)
    step = sgd_step_as_eager(jm, model, ref, lambda: torch.randn(2, 8, 8, generator=gen), lr=0.01)
    run_until_swapped(jm, step)
    for _ in range(2):
        step()  # the fused program, its kernels in
    assert model.unused.grad is None and model.frozen.grad is None
    first = str(thunder_ir.last_traces(jm)[0])
    assert not _per_slice(first), first  # the combine runs on the batch at every level
    assert "inductorFusion" in str(thunder_ir.last_traces(jm)[-1])
