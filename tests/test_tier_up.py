"""Tier-up (``jit(fn)``'s default on CPU, `thunder_ir.lowering.tier_up`): a hot program is
lowered again with the Inductor executor, its kernels compile in the background, and the
fused program replaces it at a call boundary; every result, before and after, is eager's."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor, region_cache
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering import tiered as tiering

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


@pytest.fixture
def hot_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs are hot after `HOT_CALLS` calls, however short."""
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.LayerNorm(48), nn.Linear(48, 48),
                         nn.Tanh(), nn.LayerNorm(48), nn.Linear(48, 8))


def _compiled(jm: Any) -> Any:
    """The `CompiledCallable` of a jitted module or function."""
    return getattr(jm, "_compiled", jm)


def _watch(jm: Any) -> tu.Watch:
    fn = _compiled(jm).cache.last.fn
    assert isinstance(fn, tu.Watch), fn
    return fn


def _until_swapped(jm: Any, step: Any, limit: int = 3 * tu.HOT_CALLS) -> int:
    """Steps until the fused program is in (waiting for its kernels once they are all
    asked for); returns the steps taken."""
    for n in range(1, limit + 1):
        step()
        if thunder_ir.compile_status(jm)["swapped"]:
            return n
        if thunder_ir.compile_status(jm)["pending"]:
            thunder_ir.compile_status(jm, wait=None)
    raise AssertionError(f"not swapped after {limit} steps: {thunder_ir.compile_status(jm)}")


@needs_inductor
def test_a_hot_training_program_is_fused_and_trains_as_eager(hot_at_once: None) -> None:
    model, ref = _model(), _model()
    jm = thunder_ir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    torch.manual_seed(1)
    data = [torch.randn(16, 32) for _ in range(4)]
    steps = [0]

    def step() -> None:
        x = data[steps[0] % len(data)]
        steps[0] += 1
        out, want = jm(x), ref(x)
        assert type(out) is torch.Tensor
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        for o, m in ((opt, out), (opt_ref, want)):
            o.zero_grad()
            m.square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert type(p.grad) is torch.Tensor
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        opt_ref.step()

    assert not thunder_ir.compile_status(jm)["compiled"]
    took = _until_swapped(jm, step)
    assert took > tu.HOT_CALLS  # unfused until hot
    status = thunder_ir.compile_status(jm)
    assert status["compiled"] >= 2 and status["failed"] == 0 and not status["kept"], status
    assert "inductorFusion" in str(thunder_ir.last_traces(jm)[-1])
    assert "inductorFusion" in str(thunder_ir.last_backward_traces(jm)[-1])
    helper = tiering.helper_if_made()
    assert helper is None or helper.proc is None  # ended once nothing was pending
    for _ in range(3):  # the fused program: each kernel's first call times it, then runs
        step()
    assert thunder_ir.cache_misses(jm) == 1
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@needs_inductor
def test_a_swap_in_the_middle_of_gradient_accumulation(hot_at_once: None) -> None:
    """The forward before the swap keeps its unfused backward, the one after it runs the
    fused one: the accumulated gradients are eager's."""
    model, ref = _model(), _model()
    jm = thunder_ir.jit(model)
    x1, x2 = torch.randn(8, 32), torch.randn(8, 32)
    for _ in range(tu.HOT_CALLS + 1):  # hot, then the fused program's first (priming) call
        jm(x1).sum().backward()
    watch = _watch(jm)
    assert watch.state == tu._WAITING
    model.zero_grad()
    loss = jm(x1).square().mean()  # unfused: the kernels are compiling
    assert thunder_ir.compile_status(jm, wait=None)["ready"]
    loss = loss + jm(x2).square().mean()  # the fused program from this call on
    assert thunder_ir.compile_status(jm)["swapped"] == 1
    loss.backward()
    (ref(x1).square().mean() + ref(x2).square().mean()).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert type(p.grad) is torch.Tensor
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


@needs_inductor
def test_a_failing_compile_keeps_the_unfused_program_with_a_warning(
        hot_at_once: None) -> None:
    model = _model()
    jm = thunder_ir.jit(model)
    tier = jm._compiled.tier_up
    tier.context().executors[0].options = {"no_such_inductor_option": 1}
    x = torch.randn(8, 32)
    want = model(x)
    with pytest.warns(RuntimeWarning, match="keeps running its unfused program: .* failed"
                      ) as caught:
        for _ in range(3 * tu.HOT_CALLS):
            torch.testing.assert_close(jm(x), want)
            if thunder_ir.compile_status(jm)["kept"]:
                break
            thunder_ir.compile_status(jm, wait=None)
    assert any(w.filename == __file__ for w in caught)  # at the user's call
    status = thunder_ir.compile_status(jm)
    assert status["swapped"] == 0 and status["failed"] >= 1, status
    assert "inductorFusion" not in str(thunder_ir.last_traces(jm)[-1])
    torch.testing.assert_close(jm(x), want)


def test_deterministic_algorithms_keep_programs_unfused(hot_at_once: None) -> None:
    model = _model()
    jm = thunder_ir.jit(model)
    x = torch.randn(8, 32)
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2 * tu.HOT_CALLS):
            jm(x)
    finally:
        torch.use_deterministic_algorithms(False)
    assert _watch(jm).state == tu._COUNTING
    assert jm._compiled.tier_up.background is None  # nothing lowered, nothing compiled


def test_what_tiers_up(hot_at_once: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default CPU callable does; an explicit executor list, ``tiered=False``,
    ``THUNDER_IR_TIER_UP=0`` and programs of a few ops do not; a copy keeps it."""
    model = _model()
    x = torch.randn(8, 32)
    jm = thunder_ir.jit(model)
    jm(x)
    assert jm._compiled.tier_up is not None and isinstance(_watch(jm), tu.Watch)
    assert copy.deepcopy(jm)._compiled.tier_up is not None
    assert thunder_ir.jit(model, tiered=False)._compiled.tier_up is None
    assert thunder_ir.jit(model, executors=["torch"])._compiled.tier_up is None
    tiny = thunder_ir.jit(lambda t: t + 1)
    tiny(x)
    assert not isinstance(_compiled(tiny).cache.last.fn, tu.Watch)
    monkeypatch.setenv(tu.TIER_ENV, "0")
    off = thunder_ir.jit(model)
    off(x)
    assert not isinstance(_compiled(off).cache.last.fn, tu.Watch)
    with pytest.raises(ValueError, match="tiered must be True, False or 'auto'"):
        thunder_ir.jit(model, tiered="always")


def test_a_program_is_not_hot_before_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "3600")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    jm = thunder_ir.jit(_model())
    x = torch.randn(8, 32)
    for _ in range(2 * tu.HOT_CALLS):
        jm(x)
    watch = _watch(jm)
    assert watch.state == tu._COUNTING and watch.calls == 2 * tu.HOT_CALLS
    assert 0 < watch.spent < 3600


_EXIT = """
import os, time, torch, thunder_ir
from thunder_ir.lowering import tiered
m = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                        torch.nn.Linear(48, 48), torch.nn.Tanh(), torch.nn.Linear(48, 8))
jm = thunder_ir.jit(m)
x = torch.randn(4, 32)
for _ in range(12):  # hot after 8 calls, then the fused program's first call
    jm(x).sum().backward()
time.sleep(0.5)  # past the compiler's quiet wait: the helper is compiling
status = thunder_ir.compile_status(jm)
print(status["pending"], tiered.helper_if_made().proc.pid, time.time())
"""


@needs_inductor
def test_an_exit_during_a_tier_up_leaves_no_process() -> None:
    out = subprocess.run([sys.executable, "-c", _EXIT], capture_output=True, text=True,
                         timeout=300, env={**os.environ, tu.AFTER_ENV: "0",
                                           region_cache.ENV: "0"})  # (compiling)
    exited = time.time()
    assert out.returncode == 0, out.stderr[-2000:]
    pending, pid, printed = out.stdout.split()[-3:]
    assert int(pending) >= 1  # the exit came while kernels were compiling
    assert exited - float(printed) < 5.0  # without waiting for them
    deadline = time.time() + 5
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), "the compile helper outlived the process"


class _ConvNet(nn.Module):
    """Batch norm (running statistics written each step) and dropout (random draws)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Linear(8 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.head(torch.tanh(h).flatten(1))


@needs_inductor
def test_after_the_swap_running_statistics_and_random_draws_are_eagers(
        hot_at_once: None) -> None:
    torch.manual_seed(0)
    model = _ConvNet()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    x = torch.randn(4, 3, 6, 6)
    calls = [0]

    def step() -> None:
        calls[0] += 1
        torch.manual_seed(calls[0])
        out = jm(x)
        torch.manual_seed(calls[0])
        want = ref(x)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        assert type(out) is torch.Tensor
        assert all(type(b) is torch.Tensor for b in model.buffers())
        out.square().mean().backward()
        want.square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean)
        torch.testing.assert_close(model.bn.running_var, ref.bn.running_var)
        assert model.bn.num_batches_tracked == ref.bn.num_batches_tracked

    _until_swapped(jm, step)
    for _ in range(3):
        step()
    assert thunder_ir.compile_status(jm)["failed"] == 0
