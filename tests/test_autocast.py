"""``torch.autocast`` around and inside jitted code, against eager autocast.

Every result has eager autocast's dtype; values are as close to a float64 reference as
eager autocast's own (a ratio of errors, not a fixed tolerance); gradients of float32
parameters are float32; the casts are ops of the trace.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import thunder_ir

BF16 = torch.bfloat16


def MLP(d_in: int, d_hidden: int, d_out: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.GELU(),
                               torch.nn.LayerNorm(d_hidden), torch.nn.Linear(d_hidden, d_out))


def _auto(dtype: torch.dtype = BF16, device: str = "cpu", **kw: Any) -> Any:
    return torch.autocast(device, dtype=dtype, **kw)


def _leaves(x: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]


def _err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float((a.double() - ref.double()).abs().max())


def _as_close_as_eager(got: Any, eager: Any, ref: Any, slack: float = 2.0) -> None:
    """Each leaf has eager's dtype and is at most ``slack`` times as far from the float64
    reference as eager's (plus a few float32 ulps, where eager is exact)."""
    for g, e, r in zip(_leaves(got), _leaves(eager), _leaves(ref), strict=True):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        scale = float(r.double().abs().max()) + 1.0
        assert _err(g, r) <= slack * _err(e, r) + 1e-5 * scale, (_err(g, r), _err(e, r))


# --------------------------------------------------------------------------- op policy

CASES: list[tuple[str, Any, Any]] = [
    ("linear", lambda x, w: F.linear(x, w), lambda: (torch.randn(4, 8), torch.randn(6, 8))),
    ("matmul", torch.matmul, lambda: (torch.randn(3, 4, 8), torch.randn(8, 5))),
    ("bmm", torch.bmm, lambda: (torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
    ("addmm", torch.addmm, lambda: (torch.randn(3, 5), torch.randn(3, 4), torch.randn(4, 5))),
    ("conv2d", lambda x, w: F.conv2d(x, w, padding=1),
     lambda: (torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3))),
    ("softmax", lambda x: torch.softmax(x @ x.T, -1), lambda: (torch.randn(4, 8),)),
    ("layer_norm", lambda x, w: F.layer_norm(F.linear(x, w), (6,)),
     lambda: (torch.randn(4, 8), torch.randn(6, 8))),
    ("exp_after_mm", lambda x, w: torch.exp(x @ w), lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    ("cat_mixed", lambda x, w: torch.cat([x @ w, x[:, :2]], 0),
     lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    ("stack_mixed", lambda x, w: torch.stack([x @ w, x[:, :2]]),
     lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    ("cross_entropy", lambda x, w, t: F.cross_entropy(x @ w, t),
     lambda: (torch.randn(5, 4), torch.randn(4, 3), torch.tensor([0, 2, 1, 1, 0]))),
    ("mse_loss", lambda x, w, y: F.mse_loss(x @ w, y),
     lambda: (torch.randn(5, 4), torch.randn(4, 3), torch.randn(5, 3))),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda: (torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8))),
    ("sum_of_bf16", lambda x, w: (x @ w).sum(), lambda: (torch.randn(3, 4), torch.randn(4, 2))),
    ("prod", lambda x, w: torch.prod(x @ w, 0), lambda: (torch.randn(3, 4), torch.randn(4, 2))),
]


@pytest.mark.parametrize("name,fn,make", CASES, ids=[c[0] for c in CASES])
def test_each_op_as_eager_autocast(name: str, fn: Any, make: Any) -> None:
    torch.manual_seed(0)
    args = make()
    with _auto():
        want = fn(*args)
        got = thunder_ir.jit(fn)(*args)
    ref = fn(*[a.double() if a.is_floating_point() else a for a in args])
    _as_close_as_eager(got, want, ref)


def test_the_casts_are_ops_of_the_trace() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w).softmax(-1)

    jf = thunder_ir.jit(f)
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    with _auto():
        out = jf(x, w)
    assert out.dtype == BF16
    first = str(thunder_ir.last_traces(jf)[0])
    assert first.count("ltorch.to_dtype") == 2 and "bf16" in first


# --------------------------------------------------------------------------- the cache


def test_the_autocast_state_is_part_of_the_key() -> None:
    jf = thunder_ir.jit(lambda x, w: x @ w)
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    assert jf(x, w).dtype == torch.float32
    with _auto():
        assert jf(x, w).dtype == BF16
    with _auto(torch.float16):
        assert jf(x, w).dtype == torch.float16
    with _auto(enabled=False):
        assert jf(x, w).dtype == torch.float32
    assert jf(x, w).dtype == torch.float32
    assert thunder_ir.cache_misses(jf) == 3


def test_the_program_runs_with_autocast_off() -> None:
    """A region with ``enabled=False`` inside the traced code stays float32 even though
    the call is made under autocast."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", enabled=False):
            return x @ w

    x, w = torch.randn(2, 3), torch.randn(3, 2)
    with _auto():
        want = f(x, w)
        got = thunder_ir.jit(f)(x, w)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)


# --------------------------------------------------------------------------- regions


class Regions(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 4)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def decorated(self, h: torch.Tensor) -> torch.Tensor:
        return self.b(h)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.a(x)
            with torch.autocast("cpu", enabled=False):
                f32 = self.b(h.float())
            inner = torch.relu(h)
        out = self.decorated(inner)
        with torch.autocast("cuda", dtype=torch.float16):  # another device type: no effect
            cpu = self.b(x)
        return h, f32, inner, out, cpu


def test_regions_inside_the_model() -> None:
    torch.manual_seed(0)
    m = Regions()
    x = torch.randn(3, 8, requires_grad=True)
    want = m(x)
    jm = thunder_ir.jit(copy.deepcopy(m))
    x2 = x.detach().clone().requires_grad_()
    got = jm(x2)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [
        BF16, torch.float32, BF16, BF16, torch.float32]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)
    sum(t.float().sum() for t in want).backward()
    sum(t.float().sum() for t in got).backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=2e-2, rtol=2e-2)
    for (n, p), (_, q) in zip(m.named_parameters(), jm.named_parameters()):
        assert q.grad is not None and q.grad.dtype == torch.float32, n
        torch.testing.assert_close(q.grad, p.grad, atol=2e-2, rtol=2e-2)


def test_mixed_dtype_inputs() -> None:
    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
        return a @ b, torch.cat([a, c]), a + c

    a, b, c = torch.randn(2, 3), torch.randn(3, 3, dtype=torch.float64), torch.randn(2, 3,
                                                                                   dtype=BF16)
    with _auto():
        want = f(a, b.float(), c)
        got = thunder_ir.jit(f)(a, b.float(), c)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)


def test_cat_of_bf16_and_fp16_halves() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.to(torch.bfloat16), x.to(torch.float16)], -1)

    x = torch.randn(2, 3)
    with _auto(), pytest.raises(RuntimeError, match="prioritize") as eager:
        f(x)
    with _auto(), pytest.raises(RuntimeError, match="prioritize") as jitted:
        thunder_ir.jit(f)(x)
    # eager's own error, at the user's line
    assert type(jitted.value) is type(eager.value)
    assert "test_autocast.py" in str(jitted.value)


# --------------------------------------------------------------------------- training


def _train(model: torch.nn.Module, steps: int, x: torch.Tensor, y: torch.Tensor
           ) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with _auto():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def test_twenty_training_steps_track_eager_autocast() -> None:
    torch.manual_seed(0)
    m = MLP(32, 64, 10)
    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    eager = _train(copy.deepcopy(m), 20, x, y)
    jitted = _train(thunder_ir.jit(copy.deepcopy(m)), 20, x, y)
    assert jitted[-1] < jitted[0]
    for a, b in zip(jitted, eager):
        assert abs(a - b) <= 0.02 * abs(b) + 0.02, (jitted, eager)


def test_grad_scaler() -> None:
    torch.manual_seed(0)
    m = MLP(8, 16, 4)
    x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
    results = []
    for model in (copy.deepcopy(m), thunder_ir.jit(copy.deepcopy(m))):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        for step in range(4):
            opt.zero_grad()
            with _auto(torch.float16):
                loss = F.cross_entropy(model(x), y)
                if step == 2:
                    loss = loss * float("inf")  # an overflow: the step is skipped
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        results.append(([p.detach().clone() for p in model.parameters()], scaler.get_scale()))
    (pe, se), (pj, sj) = results
    assert se == sj < 2.0**8
    for a, b in zip(pe, pj):
        torch.testing.assert_close(b, a, atol=5e-3, rtol=5e-3)


# --------------------------------------------------------------------------- models


def _lm(name: str) -> torch.nn.Module:
    from models import GPT2, Config, LlamaGPT

    cfg = Config(block_size=16, vocab_size=64, n_layer=2, n_embd=32, intermediate_size=86)
    return LlamaGPT(cfg) if name == "llama" else GPT2(cfg)


def _hf(name: str) -> torch.nn.Module:
    from test_hf_models import FAMILIES

    return FAMILIES[name][0]()


def _logits(out: Any) -> torch.Tensor:
    if isinstance(out, tuple):
        return out[0]
    return out.logits if hasattr(out, "logits") else out


@pytest.mark.parametrize("name", ["llama", "gpt2", "hf_llama", "hf_gpt2"])
def test_language_models_as_eager_autocast(name: str) -> None:
    """Logits and every gradient: eager autocast's dtypes, and as close to a float64
    reference as eager autocast's; 20 SGD steps track eager autocast's losses."""
    import warnings

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = _hf(name[3:]) if name.startswith("hf_") else _lm(name)
    model.eval()  # no dropout: the float64 reference draws no masks to compare
    idx = torch.randint(3, 64, (2, 12))
    ref = copy.deepcopy(model).double()
    eager, jm = copy.deepcopy(model), thunder_ir.jit(copy.deepcopy(model))

    def run(m: Any) -> torch.Tensor:  # nanoGPT returns every position's logits with targets
        return _logits(m(idx, idx) if name == "gpt2" else m(idx))

    def loss_of(m: Any, out: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.float().flatten(0, 1), idx.flatten())

    outs = []
    for m, auto in ((ref, False), (eager, True), (jm, True)):
        with _auto(enabled=auto):
            out = run(m)
            loss = loss_of(m, out)
        loss.backward()
        outs.append((out, [p.grad for p in m.parameters() if p.grad is not None]))
    (r_out, r_grads), (e_out, e_grads), (j_out, j_grads) = outs
    _as_close_as_eager(j_out, e_out, r_out)
    assert len(j_grads) == len(e_grads)
    for g, e, r in zip(j_grads, e_grads, r_grads):
        assert g.dtype == e.dtype == torch.float32
        _as_close_as_eager(g, e, r, slack=3.0)

    def train(m: Any) -> list[float]:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        losses = []
        for _ in range(20):
            opt.zero_grad()
            with _auto():
                loss = loss_of(m, run(m))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    le, lj = train(eager), train(jm)
    assert lj[-1] < lj[0]
    for a, b in zip(lj, le):
        assert abs(a - b) <= 0.03 * abs(b) + 0.03, (lj, le)


class _Scale(torch.autograd.Function):
    """A custom Function that asks autocast to run it in float32 (``cast_inputs``)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return g @ w.T, x.T @ g


def test_custom_fwd_and_custom_bwd() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _Scale.apply(x @ v, w)  # x @ v is bfloat16; the Function runs in float32

    x = torch.randn(3, 4)
    w, v = torch.randn(4, 2, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    w2, v2 = w.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
    with _auto():
        want = f(x, w, v)
        got = thunder_ir.jit(f)(x, w2, v2)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    for a, b in ((w2, w), (v2, v)):
        assert a.grad is not None and b.grad is not None and a.grad.dtype == b.grad.dtype
        torch.testing.assert_close(a.grad, b.grad, atol=2e-2, rtol=2e-2)


def test_a_weight_is_cast_once_per_program() -> None:
    """Autocast's cast cache: a weight used twice in a region is cast once (CSE merges
    the two casts the calls record)."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w) + F.linear(x * 2, w)

    jf = thunder_ir.jit(f)
    x, w = torch.randn(2, 4), torch.randn(3, 4, requires_grad=True)
    with _auto():
        out = jf(x, w)
        want = f(x, w)
    torch.testing.assert_close(out, want)
    first, last = thunder_ir.last_traces(jf)[0], thunder_ir.last_traces(jf)[-1]
    assert str(first).count("ltorch.to_dtype(w") == 2
    assert last.source is not None and last.source.count("to_dtype(w, ") == 1


def test_the_seeds_mlp_trains_as_eager_autocast() -> None:
    from models import MLP as SeedMLP  # torchvision's MLP(784, [784, 784, 784, 28, 10])

    torch.manual_seed(0)
    m = SeedMLP().eval()  # (dropout off: the float64 reference draws no masks)
    x, y = torch.randn(8, 784), torch.randint(0, 10, (8,))
    ref = copy.deepcopy(m).double()(x.double())
    with _auto():
        want = m(x)
        got = thunder_ir.jit(copy.deepcopy(m))(x)
    _as_close_as_eager(got, want, ref)
    eager = _train(copy.deepcopy(m), 20, x, y)
    jitted = _train(thunder_ir.jit(copy.deepcopy(m)), 20, x, y)
    for a, b in zip(jitted, eager):
        assert abs(a - b) <= 0.02 * abs(b) + 0.02, (jitted, eager)


class _PlainMm(torch.autograd.Function):
    """A custom Function without ``custom_bwd``: its backward runs outside autocast."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return g @ w.T, x.T @ g


def test_a_custom_backward_runs_without_autocast_as_in_eager() -> None:
    """The forward is autocast (bfloat16 out); the backward, run when ``.backward()`` is
    called outside the region, mixes bfloat16 and float32 and raises eager's error."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _PlainMm.apply(x, w)

    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    with _auto():
        want, got = f(x, w), thunder_ir.jit(f)(x, w)
    assert got.dtype == want.dtype == BF16
    torch.testing.assert_close(got, want)
    with pytest.raises(RuntimeError, match="same dtype") as eager:
        want.float().sum().backward()
    with pytest.raises(RuntimeError, match="same dtype") as jitted:
        got.float().sum().backward()
    assert str(jitted.value) == str(eager.value)


_CAPTURED_LINEAR = torch.nn.Linear(5, 5)
_CAPTURED_WEIGHT = torch.randn(5, 5)
_CAPTURED_NORM = torch.nn.GroupNorm(2, 4)


def test_tensors_the_function_captured_are_cast_as_eager_casts_them() -> None:
    """A global module or weight used inside the autocast region: autocast casts it as it
    casts the arguments (it was left float32, and the call with it, a silent difference)."""
    def f(x: torch.Tensor) -> Any:
        with torch.autocast("cpu", BF16):
            return (_CAPTURED_LINEAR(x), F.linear(x, _CAPTURED_WEIGHT), x @ _CAPTURED_WEIGHT,
                    torch.cat([x, _CAPTURED_WEIGHT]),
                    _CAPTURED_NORM(_CAPTURED_LINEAR(x.reshape(2, 4, 5))))

    torch.manual_seed(0)
    x = torch.randn(8, 5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    want, got = f(x), thunder_ir.jit(f)(x2)
    assert all(type(t) is torch.Tensor for t in got)  # no proxy reaches the user
    # (cat promotes: two float32 tensors stay float32; group norm runs in bfloat16 on CPU)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [BF16, BF16, BF16,
                                                                 torch.float32, BF16]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)
    sum(t.float().sum() for t in want).backward()
    sum(t.float().sum() for t in got).backward()
    torch.testing.assert_close(x2.grad, x.grad, atol=2e-2, rtol=2e-2)
