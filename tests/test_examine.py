"""`thunder_ir.examine` (a report before running) and `thunder_ir.compile_reasons` (why each
recompile happened), issue 54.

Every place a report or a reason must name is marked in this file with a comment
(``# <mark>``); the tests find its line by the mark, so the expected ``file:line`` is the
user's own line, not a number written down. Where jit runs a model, its results are
compared with eager's.
"""

from __future__ import annotations

import copy
import logging
import random
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.frontend import DataDependentError


def _at(mark: str) -> str:
    """``this file:line`` of the line holding ``# <mark>``."""
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# {mark}"):
                return f"{__file__}:{i}"
    raise AssertionError(f"no line marked {mark!r}")


# ---- models


class WithFallback(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.special.bessel_j0(self.lin(x))  # fallback-1
        z = torch.special.bessel_j0(y * 2)  # fallback-2
        return z.relu() + y


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        a = float(y.detach().numpy().sum())  # data-1
        b = [y.data_ptr()]  # data-2
        if y.mean() > 0:  # speculated
            y = y * 2
        return y * a + len(b)


class Refused(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.tensor(np.ones((2, 4)) * 3)  # refused-went-on
        y = x * t
        z = complex(y.sum()).real  # data-after-refused
        return y + z


class RefusedStops(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.relu()
        return y + np.ones((2, 4))  # refused-stops


class Cfg:
    def __init__(self) -> None:
        self.scale = 2.0


class Configured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.cfg = Cfg()
        self.shift = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x) * self.cfg.scale  # config-read
        return y + self.shift  # attribute-read


class Stateful(nn.Module):
    """Batch norm (buffers a call updates), dropout (random draws) and a plain attribute
    the forward writes: what a call would change, and an examination must not."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = self.drop(self.bn(self.lin(x)))
        if y.sum() > 0:
            y = y + torch.rand_like(y)
        return y


# ---- examine


def test_fallback_ops_are_named_counted_with_lines() -> None:
    m = WithFallback()
    x = torch.randn(2, 4)
    report = thunder_ir.examine(m, x)
    assert report.compiles
    assert [f.name for f in report.fallbacks] == ["torch.special.bessel_j0"]
    f = report.fallbacks[0]
    assert f.count == 2 and f.lines == [_at("fallback-1"), _at("fallback-2")]
    assert report.fallback_count == 2 and report.native > 0
    text = str(report)
    assert "torch.special.bessel_j0 x2" in text and _at("fallback-1") in text
    torch.testing.assert_close(thunder_ir.jit(m)(x), m(x))  # (and jit runs it as eager)


def test_fusion_regions_are_counted_by_executor() -> None:
    pytest.importorskip("triton")

    class Chain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return (y.sin() * 2 + y.cos()).tanh()

    m = Chain()
    x = torch.randn(4, 8)
    with torch.no_grad():
        jm = thunder_ir.jit(m, executors=["triton"])
        report = thunder_ir.examine(jm, x)
        torch.testing.assert_close(jm(x), m(x))
    from thunder_ir.dialects.fusion import RegionOp

    regions = [op for op in thunder_ir.last_traces(jm)[-1].ir.walk()
               if isinstance(op, RegionOp)]
    assert regions and report.kernels == {"triton": len(regions)}
    assert report.fused["triton"] == sum(
        len([o for o in r.body.block.ops if o.name != "fusion.yield"]) for r in regions)
    assert "triton kernels fuse" in str(report)


def test_data_dependent_points_found_in_one_run() -> None:
    m = DataDependent()
    x = torch.randn(2, 4)
    with pytest.raises(DataDependentError, match=_at("data-1")):  # jit stops at the first
        thunder_ir.jit(m)(x)
    report = thunder_ir.examine(m, x)
    assert not report.compiles
    assert [(p.where, p.went_on) for p in report.data_dependent] == [
        (_at("data-1"), True), (_at("data-2"), True)]
    assert ".numpy()" in report.data_dependent[0].message
    assert ".data_ptr()" in report.data_dependent[1].message
    assert "Keep the computation in tensors" in report.data_dependent[0].message
    speculated = [p.where for p in report.points if p.kind == "speculated"]
    assert speculated == [_at("speculated")]
    assert report.stopped is None
    text = str(report)
    assert f"data-dependent at {_at('data-1')}" in text
    assert f"data-dependent at {_at('data-2')}" in text


def test_refused_construct_and_what_follows() -> None:
    x = torch.randn(2, 4)
    report = thunder_ir.examine(Refused(), x)
    assert [(p.kind, p.where, p.went_on) for p in report.points] == [
        ("refused", _at("refused-went-on"), True),
        ("data-dependent", _at("data-after-refused"), True)]
    assert "NumPy array" in report.refused[0].message

    stops = thunder_ir.examine(RefusedStops(), x)
    assert stops.stopped == _at("refused-stops")
    assert [(p.kind, p.where, p.went_on) for p in stops.points] == [
        ("refused", _at("refused-stops"), False)]
    assert "not examined" in str(stops)
    assert stops.native == 1 and stops.fallbacks == []  # (x.relu(), traced before it)
    with pytest.raises(thunder_ir.ThunderTraceError, match=_at("refused-stops")):
        thunder_ir.jit(RefusedStops())(x)


def test_guarded_state_names_the_lines_that_read_it() -> None:
    m = Configured()
    report = thunder_ir.examine(m, torch.randn(2, 4))
    assert "self.cfg.scale == 2.0" in report.guarded
    assert "self.shift == 1.0" in report.guarded
    assert report.read_at["self.cfg.scale"] == _at("config-read")
    assert report.read_at["self.shift"] == _at("attribute-read")
    assert "self.cfg.scale == 2.0 (read at" in str(report)
    assert report.dynamic == []
    x = torch.randn(2, 4)
    thunder_ir.mark_dynamic(x, 0)
    assert thunder_ir.examine(m, x).dynamic == ["x dim 0"]
    every = thunder_ir.jit(m, cache="symbolic values")
    assert thunder_ir.examine(every, torch.randn(2, 4)).dynamic == ["x dim 0", "x dim 1"]


def test_training_report() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    x = torch.randn(4, 8)
    report = thunder_ir.examine(thunder_ir.jit(m, remat="min-cut"), x)
    assert report.training
    jm = thunder_ir.jit(m, remat="min-cut")
    jm(x).sum().backward()
    fwd = thunder_ir.last_traces(jm)[-1].ir
    from thunder_ir.dialects.program import main_function

    outs = main_function(fwd).function_type.outputs.data[1:]  # what the jitted call saves
    assert report.saved_bytes == sum(t.nbytes() for t in outs) > 0
    assert report.recomputed and all(where for _, where in report.recomputed)
    with torch.no_grad():
        assert not thunder_ir.examine(m, x).training


def _rng() -> tuple[Any, ...]:
    return torch.random.get_rng_state(), random.getstate()


def test_examine_leaves_model_and_global_state_as_they_were() -> None:
    torch.manual_seed(0)
    m = Stateful()
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4)
    params = {k: v.clone() for k, v in m.state_dict().items()}
    tensors = {k: v for k, v in m.state_dict(keep_vars=True).items()}
    attrs = copy.copy({k: v for k, v in m.__dict__.items() if not k.startswith("_")})
    rng = _rng()
    grad_mode = torch.is_grad_enabled()
    versions = {k: v._version for k, v in m.state_dict(keep_vars=True).items()}
    report = thunder_ir.examine(jm, x)
    assert report.compiles and report.training
    assert thunder_ir.cache_misses(jm) == 0 and not jm._compiled.cache.entries
    state = m.state_dict(keep_vars=True)
    assert all(state[k] is t for k, t in tensors.items())  # the same tensors
    for k, v in params.items():
        assert torch.equal(state[k], v), k
        assert state[k]._version == versions[k], k
    assert all(p.grad is None for p in m.parameters())
    assert {k: v for k, v in m.__dict__.items() if not k.startswith("_")} == attrs
    assert m.calls == 0
    after = _rng()
    assert torch.equal(after[0], rng[0]) and after[1] == rng[1]
    assert torch.is_grad_enabled() == grad_mode
    assert type(m) is Stateful and type(m.lin) is nn.Linear
    # and the jitted model then runs as eager does, from the same state
    ref = copy.deepcopy(m)
    torch.manual_seed(1)
    out = jm(x)
    torch.manual_seed(1)
    torch.testing.assert_close(out, ref(x))
    torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
    assert m.calls == ref.calls == 1


def test_examine_leaves_model_as_it_was_when_refused() -> None:
    m = DataDependent()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(2, 4)
    rng = _rng()
    thunder_ir.examine(m, x)
    assert all(torch.equal(m.state_dict()[k], v) for k, v in before.items())
    assert torch.equal(_rng()[0], rng[0]) and _rng()[1] == rng[1]


def test_examine_reports_what_jit_raises() -> None:
    m = nn.Linear(4, 4)
    x = torch.randn(2, 5)
    with pytest.raises(RuntimeError):
        m(x)  # (eager refuses it too)
    with pytest.raises(thunder_ir.ThunderTraceError) as jitted:
        thunder_ir.jit(m)(x)  # call-mismatch
    report = thunder_ir.examine(m, x)  # examine-mismatch
    assert report.stopped == _at("examine-mismatch") and not report.compiles
    assert str(jitted.value).startswith(_at("call-mismatch") + ": ")
    assert report.points[0].message.split(": ", 1)[1] == \
        str(jitted.value).split("\n")[0].split(": ", 1)[1]


# ---- compile_reasons


def test_reasons_name_each_change_in_the_users_terms(caplog: pytest.LogCaptureFixture) -> None:
    m = Configured()
    jm = thunder_ir.jit(m)
    calls: list[Any] = []

    def call(x: torch.Tensor) -> None:
        out = jm(x)
        torch.testing.assert_close(out, m(x))  # (eager's result, the state as it is now)
        calls.append(out)

    with caplog.at_level(logging.INFO, logger="thunder_ir.recompiles"):
        call(torch.randn(2, 4))
        call(torch.randn(3, 4))  # a new length
        call(torch.randn(5, 4))  # (the symbolic program: no compile)
        m.cfg.scale = 3.0
        call(torch.randn(3, 4))
        m.shift = 2.0
        call(torch.randn(3, 4))
        with torch.no_grad():
            call(torch.randn(3, 4))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            call(torch.randn(3, 4))
    reasons = thunder_ir.compile_reasons(jm)
    assert reasons == [
        "argument 'x' dim 0: 2 -> 3 (now symbolic)",
        f"self.cfg.scale changed 2.0 -> 3.0 (read at {_at('config-read')})",
        f"self.shift changed 1.0 -> 2.0 (read at {_at('attribute-read')})",
        "grad mode: enabled -> disabled",
        reasons[4],
    ]
    assert reasons[4].startswith("autocast: off -> ")
    static = thunder_ir.jit(Configured(), cache="static")
    for n in (2, 3, 4):
        static(torch.randn(n, 4))
    assert thunder_ir.compile_reasons(static) == ["argument 'x' dim 0: 2 -> 3",
                                                  "argument 'x' dim 0: 3 -> 4"]
    assert thunder_ir.cache_misses(jm) == 6
    logged = [r.getMessage() for r in caplog.records if r.name == "thunder_ir.recompiles"]
    assert logged == [f"Configured compiled again: {r}" for r in reasons]


def test_reasons_for_a_speculated_condition_and_the_warning() -> None:
    m = DataDependent()
    m.forward = _no_reads.__get__(m)  # (the speculated condition alone)
    jm = thunder_ir.jit(m)
    pos, neg = torch.full((2, 4), 5.0), torch.full((2, 4), -5.0)
    with torch.no_grad():
        m.lin.weight.copy_(torch.eye(4))
        m.lin.bias.zero_()
    for x in (pos, neg):
        torch.testing.assert_close(jm(x), m(x))
    assert thunder_ir.compile_reasons(jm) == [
        f"the condition at {_at('speculated-2')} came out False (traced True)"]

    g = thunder_ir.jit(_scaled)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(10):
            _SCALE[0] = float(i)
            torch.testing.assert_close(g(torch.ones(2)), _scaled(torch.ones(2)))
    reasons = thunder_ir.compile_reasons(g)
    assert reasons == [f"global _SCALE[0] changed {i}.0 -> {i + 1}.0 (read at "
                       f"{_at('global-read')})" for i in range(9)]
    recompile = [str(x.message) for x in w if "has compiled" in str(x.message)]
    assert len(recompile) == 1  # (once, past the limit: the 9th program)
    assert f"the last one because of this change: {reasons[7]}" in recompile[0]


def _no_reads(self: DataDependent, x: torch.Tensor) -> torch.Tensor:
    y = self.lin(x)
    if y.mean() > 0:  # speculated-2
        y = y * 2
    return y


_SCALE = [1.0]


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * _SCALE[0]  # global-read


def test_reasons_for_another_call_structure() -> None:
    def f(x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return x if y is None else x + y

    jf = thunder_ir.jit(f)
    x = torch.randn(3)
    for args, kwargs in (((x,), {}), ((x, x), {}), ((x,), {"y": x})):
        torch.testing.assert_close(jf(*args, **kwargs), f(*args, **kwargs))
    assert thunder_ir.compile_reasons(jf) == [
        "another call structure (the arguments' count, keywords or nesting)"] * 2


def _branch_on_size(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 64:  # size-branch
        return x * 2
    return x + 1


def test_reasons_name_the_shape_guard_a_new_size_fails() -> None:
    jf = thunder_ir.jit(_branch_on_size)
    for n in (16, 32, 64):
        x = torch.randn(2, n)
        torch.testing.assert_close(jf(x), _branch_on_size(x))
    reasons = thunder_ir.compile_reasons(jf)
    assert reasons[0] == "argument 'x' dim 1: 16 -> 32 (now symbolic)"
    assert reasons[1].startswith(
        "argument 'x' dim 1: 32 -> 64 (symbolic, but fixed by its guard Eq(s1, 64))")
    assert "the symbolic program's guard Ne(s1, 64) fails" in reasons[1]
    assert _at("size-branch") in reasons[1]


def test_reasons_for_a_closure_variable_and_examine_of_a_function() -> None:
    scale = 2.0

    def f(x: torch.Tensor, *, bias: float = 0.0) -> torch.Tensor:
        return torch.special.bessel_j0(x) * scale + bias  # closure-read

    jf = thunder_ir.jit(f)
    x = torch.randn(3)
    report = thunder_ir.examine(jf, x, bias=1.0)
    assert report.fallbacks[0].lines == [_at("closure-read")]
    assert "closure scale == 2.0" in report.guarded
    assert report.read_at["closure scale"] == _at("closure-read")
    assert thunder_ir.cache_misses(jf) == 0
    torch.testing.assert_close(jf(x, bias=1.0), f(x, bias=1.0))
    scale = 3.0
    torch.testing.assert_close(jf(x, bias=1.0), f(x, bias=1.0))
    assert thunder_ir.compile_reasons(jf) == [
        f"closure variable scale changed 2.0 -> 3.0 (read at {_at('closure-read')})"]
