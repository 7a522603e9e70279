"""Tier-up of a vision transformer's forward as one fusion region (issue 53): BEiT builds
its relative-position index each call (``arange``, ``meshgrid``, in-place adds into
slices of a fresh tensor: `thunder_ir.runtime.writes.scatter_strided`) and draws its
drop-path noise with ``torch.rand``. The fused program's region holds all of it: the
index (computed from no input), and the draws, which its kernel makes with eager's random
ops in program order (Inductor's ``fallback_random``), so values, gradients, the draws and
the generator's state after every call are eager's."""

from __future__ import annotations

import copy

import pytest
import torch
from tier_up_support import run_until_swapped
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


def _relative_index(w: int) -> torch.Tensor:
    """BEiT's ``generate_relative_position_index``, as transformers writes it."""
    coords = torch.flatten(torch.stack(torch.meshgrid(
        torch.arange(w), torch.arange(w), indexing="ij")), start_dim=1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += w - 1
    rel[:, :, 1] += w - 1
    rel[:, :, 0] *= 2 * w - 1
    index = torch.zeros(size=(w * w + 1,) * 2, dtype=rel.dtype)
    index[1:, 1:] = rel.sum(-1)
    index[0, 0:] = (2 * w - 1) ** 2
    index[0:, 0] = (2 * w - 1) ** 2 + 1
    index[0, 0] = (2 * w - 1) ** 2 + 2
    return index


def _drop_path(x: torch.Tensor, p: float) -> torch.Tensor:
    """timm's (and BEiT's) drop path: a ``torch.rand`` per sample."""
    keep = 1 - p
    noise = keep + torch.rand((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype,
                              device=x.device)
    noise.floor_()
    return x.div(keep) * noise


class Block(nn.Module):
    """Attention scores with BEiT's relative-position bias, two drop paths, a ``randn``
    jitter, a write through a view of values with gradients, a parameter that gets no
    gradient."""

    def __init__(self, w: int = 3, d: int = 8) -> None:
        super().__init__()
        self.w = w
        self.table = nn.Parameter(torch.randn((2 * w - 1) ** 2 + 3, 2))
        self.qk = nn.Linear(d, 2 * d)
        self.fc = nn.Linear(d, d)
        self.unused = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = self.w * self.w + 1
        bias = self.table[_relative_index(self.w).view(-1)].view(n, n, -1).permute(2, 0, 1)
        q, k = self.qk(x).chunk(2, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) + bias.sum(0), dim=-1)
        h = x + _drop_path(att @ x, 0.4)
        jitter = torch.randn(h.shape[-1])
        h = h + _drop_path(torch.tanh(self.fc(h)) + 0.01 * jitter, 0.3)
        h = h * 1.0
        h[:, 0] += h[:, 1] * 0.5  # a write through a view, with gradients
        return h.square().mean(), h, jitter


@needs_inductor
def test_index_and_drop_path_sit_in_one_region_with_eagers_draws(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = Block()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(4, 10, 8)

    def step(k: int) -> None:
        torch.manual_seed(k)
        loss, h, jitter = jm(x)
        state = torch.get_rng_state()
        torch.manual_seed(k)
        want, want_h, want_jitter = ref(x)
        assert torch.equal(state, torch.get_rng_state())  # the same draws, no more
        assert torch.equal(jitter, want_jitter)
        # a sample dropped by eager is dropped here (drop path zeroes whole samples)
        assert torch.equal(h.detach().flatten(1).abs().sum(1) == 0,
                           want_h.detach().flatten(1).abs().sum(1) == 0)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(h, want_h, rtol=1e-5, atol=1e-6)
        loss.backward()
        want.backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            if q.grad is None:
                assert p.grad is None, name
            else:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    k = run_until_swapped(jm, step)
    for j in range(k + 1, k + 4):  # the fused program, its kernels in
        step(j)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    outside = [line for line in fwd.splitlines() if not line.lstrip().startswith("#")
               and any(f in line for f in ("meshgrid", "scatter_strided", "torch.rand",
                                           "iota", "arange"))]
    assert outside == [], fwd
    assert fwd.count("= inductorFusion") == 1, fwd
    # each kernel's first call timed it against its function (`tiered.measured`), both
    # from the generator's state at the call: the steps after it checked the state
    status = thunder_ir.compile_status(jm)
    assert status["timings"], status


@needs_inductor
def test_drawing_kernels_make_eagers_draws() -> None:
    """The Inductor executor compiling at once (no timing against the function): the
    kernels themselves draw eager's numbers and leave the generator as eager does."""
    torch.manual_seed(0)
    model = Block()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model, executors=["torch_compile",
                                          *thunder_ir.get_default_executors()])
    x = torch.randn(4, 10, 8)
    for k in range(3):
        torch.manual_seed(k)
        loss, h, jitter = jm(x)
        state = torch.get_rng_state()
        torch.manual_seed(k)
        want, want_h, want_jitter = ref(x)
        assert torch.equal(state, torch.get_rng_state())
        assert torch.equal(jitter, want_jitter)
        torch.testing.assert_close(h, want_h, rtol=1e-5, atol=1e-6)
        loss.backward()
        want.backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None)
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        model.zero_grad()
        ref.zero_grad()
    fwd = str(thunder_ir.last_traces(jm)[-1])
    assert fwd.count("= inductorFusion") == 1, fwd


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_gives_eagers_views_and_gradients(indexing: str) -> None:
    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grids = torch.meshgrid(a, b, c, indexing=indexing)
        return (*grids, sum((g * (i + 1)).sum() for i, g in enumerate(grids)))

    a = torch.randn(3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    c = torch.randn((), requires_grad=True)
    jf = thunder_ir.jit(f)
    got, want = jf(a, b, c), f(a, b, c)
    for g, w in zip(got[:3], want[:3], strict=True):
        assert torch.equal(g, w)
        assert g.stride() == w.stride() and g.shape == w.shape
        assert g._base is not None and w._base is not None
    got_grads = torch.autograd.grad(got[3], (a, b, c))
    want_grads = torch.autograd.grad(want[3], (a, b, c))
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)
    source = str(thunder_ir.last_traces(jf)[-1])
    assert "torch.meshgrid" not in source, source



class ConvBN(nn.Module):
    """Two convolutions with batch norms: each norm's ``num_batches_tracked + 1`` reads
    only a buffer and is only written back."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b2(self.c2(torch.relu(self.b1(self.c1(x))))).square().mean()


@needs_inductor
def test_batch_counts_join_the_region_and_train_as_eager() -> None:
    """The counts' adds (orphans: `thunder_ir.passes.fuse`) join the forward's region;
    every buffer and gradient stays eager's over the steps."""
    torch.manual_seed(0)
    model = ConvBN()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model, executors=["torch_compile",
                                          *thunder_ir.get_default_executors()])
    x = torch.randn(2, 3, 6, 6)
    for _ in range(3):
        loss, want = jm(x), ref(x)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
        loss.backward()
        want.backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            # (a bias before a batch norm: zero up to rounding, in eager too)
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        for (name, b), c in zip(model.named_buffers(), ref.buffers(), strict=True):
            assert b.dtype == c.dtype, name
            torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6)
        model.zero_grad()
        ref.zero_grad()
    assert int(model.b1.num_batches_tracked) == 3
    fwd = str(thunder_ir.last_traces(jm)[-1])
    lines = [line for line in fwd.splitlines() if not line.lstrip().startswith("#")]
    assert [line for line in lines if "torch.add" in line] == [], fwd
    assert fwd.count("= inductorFusion") == 1, fwd


@pytest.mark.parametrize("src", [torch.tensor([5.0]), torch.tensor(4), torch.arange(3.0)],
                         ids=["broadcast", "int", "exact"])
def test_write_through_a_view_as_eager(src: torch.Tensor) -> None:
    """``scatter_strided``'s one-op form is taken only where ``copy_`` would neither
    broadcast nor convert ``src``; values as eager's with and without a fusion region."""
    def f(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y[:, 1].copy_(s)
        return y + 1

    x = torch.randn(3, 4)
    want = f(x, src)
    for executors in (None, ["torch_compile", *thunder_ir.get_default_executors()]):
        if executors and not inductor_executor.InductorExecutor().is_available():
            continue
        got = thunder_ir.jit(f, executors=executors)(x, src)
        assert torch.equal(got, want), (executors, got, want)
