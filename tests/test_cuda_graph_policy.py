"""Tier-up on CUDA, the parts that run on the CPU (issue 53): which device types tier up,
and the CUDA-graph policy's bookkeeping (`thunder_ir.lowering.cuda_graphs`) on the
programs of CUDA-shaped models run on CPU tensors. Capturing and replaying need a GPU:
tests/test_cuda.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.lowering import cuda_graphs as cg
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering.inductor_executor import InductorExecutor
from thunder_ir.lowering.torch_executor import TorchExecutor


def _entry(jm: Any) -> Any:
    return getattr(jm, "_compiled", jm).cache.last


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16), nn.Tanh())


def test_which_device_types_tier_up() -> None:
    plain, fusing = [TorchExecutor()], [InductorExecutor(), TorchExecutor()]
    assert tu.tier_devices(plain, cuda_available=False) == {"cpu"}
    assert tu.tier_devices(plain, cuda_available=True) == {"cpu", "cuda"}
    # a GPU machine's defaults fuse (Triton): its CUDA programs tier up, its CPU ones not
    assert tu.tier_devices(fusing, cuda_available=True) == {"cuda"}
    assert tu.tier_devices(fusing, cuda_available=False) == frozenset()
    x = torch.ones(2)
    assert tu.program_device([x, 3, torch.zeros(1)]) == "cpu"
    assert tu.program_device([x, torch.zeros(1, device="meta")]) is None
    assert tu.program_device([1, "a"]) is None


def test_a_cuda_only_tier_up_leaves_cpu_programs_alone(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    jm = thunder_ir.jit(_mlp())
    x = torch.randn(4, 16)
    jm(x)
    entry = _entry(jm)
    state = dict(jm.named_parameters())
    assert not tu.TierUp(frozenset({"cuda"})).worth(entry, state, (x,), {})
    tier = tu.TierUp()
    assert tier.devices == {"cpu"} and not tier.cuda
    if InductorExecutor().is_available():
        assert tier.worth(entry, state, (x,), {})


def test_what_keeps_a_program_from_a_cuda_graph() -> None:
    model = _mlp()
    x = torch.randn(4, 16)
    with torch.no_grad():
        jm = thunder_ir.jit(model, tiered=False)
        jm(x)
    inference = _entry(jm)
    # a CUDA-shaped inference program: on CPU tensors, only the device keeps it out
    assert cg.blockers(inference, (x,)) == ["its tensors are not all on one CUDA device"]

    jt = thunder_ir.jit(_mlp(), tiered=False)
    jt(x).sum().backward()
    assert "a training program (its backward runs under autograd)" in cg.blockers(
        _entry(jt), (x,))

    drop = thunder_ir.jit(nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5)), tiered=False)
    with torch.no_grad():
        drop(x)
    assert any("random numbers" in w for w in cg.blockers(_entry(drop), (x,)))

    def sizes(t: torch.Tensor) -> torch.Tensor:
        return (t * 2).tanh() + 1

    js = thunder_ir.jit(sizes, tiered=False)
    for n in (3, 5, 7):
        js(torch.randn(n, 4))
    assert "symbolic sizes" in cg.blockers(_entry(js), (torch.randn(9, 4),))


def test_static_inputs_keep_parameters_by_address_and_copy_the_rest() -> None:
    w = nn.Parameter(torch.randn(3, 3))
    x = torch.randn(2, 3)
    inputs = cg.StaticInputs([w, x, 2], same=[True, False, False])
    buf = inputs.values[1]
    assert inputs.values[0] is w and buf is not x
    assert buf.shape == x.shape and buf.stride() == x.stride()
    y = torch.randn(2, 3)
    assert inputs.load([w, y, 2])
    assert torch.equal(buf, y) and inputs.values[1].data_ptr() == buf.data_ptr()
    with torch.no_grad():
        w.mul_(2)  # an in-place update keeps the address: the graph reads the new values
    assert inputs.load([w, x, 2]) and torch.equal(buf, x)
    before = buf.clone()
    # another parameter object, another layout, another number: nothing is copied
    assert not inputs.load([nn.Parameter(w.detach().clone()), y, 2])
    assert not inputs.load([w, y.t().contiguous().t(), 2])
    assert not inputs.load([w, y, 3])
    assert not inputs.load([w, y.double(), 2])
    assert torch.equal(buf, before) and inputs.loads == 2


def test_the_choice_is_measured() -> None:
    assert cg.choose([1.0, 1.1, 1.0], [0.5, 0.6, 0.5])
    assert not cg.choose([1.0, 1.0, 1.0], [0.95, 0.95, 0.95])  # under the margin: kept
    assert not cg.choose([], [0.1])
    x = torch.randn(4)
    assert cg.outputs_alias_inputs((x[1:], torch.ones(1)), [x])
    assert not cg.outputs_alias_inputs({"a": x.clone()}, [x, 3])


def test_the_policy_is_off_without_a_gpu_or_when_asked(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    model = _mlp()
    x = torch.randn(4, 16)
    with torch.no_grad():
        jm = thunder_ir.jit(model, tiered=False)
        jm(x)
    entry = _entry(jm)
    fn = entry.fn
    if not torch.cuda.is_available():
        assert cg.maybe_graphed(entry, fn, "m", lambda f: None, (x,)) is fn
    monkeypatch.setenv(cg.GRAPHS_ENV, "0")
    assert not cg.enabled()
    assert cg.maybe_graphed(entry, fn, "m", lambda f: None, (x,)) is fn
