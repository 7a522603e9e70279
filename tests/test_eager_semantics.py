"""Eager's semantics, exactly: one regression test per construct, written as users write it.

Each test runs the code eagerly and jitted (`check_against_eager`): outputs, dtypes,
``requires_grad``, inputs after the call, random draws and gradients (``None`` where
eager's are) must agree, or both must raise.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import thunder_ir
from thunder_ir.testing_eager import check_against_eager


def rand(*shape: int, seed: int = 0, rg: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(rg)


# --------------------------------------------------------------------------- gradient stoppers


@pytest.mark.parametrize("stop", [lambda t: t.detach(), torch.detach, lambda t: t.data],
                         ids=["detach", "torch.detach", "data"])
def test_gradient_stoppers(stop) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * stop(x * 2)).sum()

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    check_against_eager(f, x)
    thunder_ir.jit(f)(x).backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_detached_output_does_not_require_grad() -> None:
    check_against_eager(lambda x: (x * 2).detach() + 1, rand(3))
    check_against_eager(lambda x: (x.sin(), x.detach().cos()), rand(3))


def test_detach_of_a_parameter_in_a_module() -> None:
    class EMA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            target = self.lin(x).detach()
            return ((self.lin(x) - target.roll(1, 0)) ** 2).mean()

    check_against_eager(EMA(), rand(3, 4))


# --------------------------------------------------------------------------- grad modes


def test_no_grad_block_inside_forward() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = x * 2
        return x * y

    check_against_eager(f, rand(3))


def test_no_grad_decorated_helper_and_enable_grad() -> None:
    @torch.no_grad()
    def stats(t: torch.Tensor) -> torch.Tensor:
        return t.mean() * t.std()

    def f(x: torch.Tensor) -> torch.Tensor:
        s = stats(x)
        with torch.no_grad():
            with torch.enable_grad():
                z = x.exp()
            w = x.sin()
        return x * s + z + w

    check_against_eager(f, rand(4))


def test_set_grad_enabled_both_ways() -> None:
    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        with torch.set_grad_enabled(flag):
            y = x * 3
        torch.set_grad_enabled(False)
        z = x.cos()
        torch.set_grad_enabled(True)
        return y + z + x

    check_against_eager(f, rand(4), True)
    check_against_eager(f, rand(4), False)


def test_called_under_no_grad_with_enable_grad_inside() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * 2  # computed under the caller's no_grad
        with torch.enable_grad():
            b = a + x.exp()
        return b, a + b  # the second is computed under no_grad again

    x = rand(3)
    jf = thunder_ir.jit(f)
    with torch.no_grad():
        e, j = f(x), jf(x)
    assert e[0].requires_grad and j[0].requires_grad
    assert not e[1].requires_grad and not j[1].requires_grad
    (ge,) = torch.autograd.grad(e[0].sum(), x)
    (gj,) = torch.autograd.grad(j[0].sum(), x)
    torch.testing.assert_close(gj, ge)


def test_rotary_cache_under_no_grad_like_hugging_face() -> None:
    class Rotary(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, 8, 2) / 8)))

        @torch.no_grad()
        def forward(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
            freqs = pos[:, None].float() * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rot = Rotary()
            self.q = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            cos, sin = self.rot(x, torch.arange(x.shape[1]))
            q = self.q(x)
            return q * cos + q.roll(1, -1) * sin

    check_against_eager(M(), rand(2, 5, 8))


def test_ema_update_under_no_grad_keeps_the_parameter_a_leaf() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))
            self.register_buffer("avg", torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                self.avg.mul_(0.9).add_(self.w, alpha=0.1)
                self.w.mul_(0.5)  # an in-place update of the parameter itself
            return (self.w * x).sum() + self.avg.sum()

    check_against_eager(M(), rand(3))


def test_failure_restores_grad_mode() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if int(x.sum()) > 0:  # data-dependent: a number fails while tracing
                return x
        return -x

    with pytest.raises(thunder_ir.DataDependentError):
        thunder_ir.jit(f)(rand(3))
    assert torch.is_grad_enabled()


def test_inference_mode_inside_forward() -> None:
    def saves(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = x * 2
        return x * y  # eager: inference tensors cannot be saved for backward

    def adds(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = x * 2
        return x + y  # allowed: nothing is saved

    check_against_eager(saves, rand(3))
    check_against_eager(adds, rand(3))
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved"):
        thunder_ir.jit(saves)(rand(3))


def test_inplace_on_inference_tensor_outside_inference_mode_raises() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            y = x * 2
        y.add_(1)
        return y

    check_against_eager(f, rand(3, rg=False))


# --------------------------------------------------------------------------- custom Functions


class STRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        return g


def test_straight_through_round() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return STRound.apply(x) * x

    x = torch.tensor([0.2, 1.8, 2.1], requires_grad=True)
    check_against_eager(f, x)
    thunder_ir.jit(f)(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.2, 3.8, 4.1]))


class ScaledMul(torch.autograd.Function):
    """Saved tensors, a non-tensor argument, ctx attributes and needs_input_grad."""

    @staticmethod
    def forward(ctx, a, b, scale, note):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        ctx.note = note
        ctx.mask = a > 0  # a tensor kept on ctx directly
        return a * b * scale

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        a, b = ctx.saved_tensors
        assert ctx.note == "hi"
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = g * b * ctx.scale * ctx.mask  # a deliberately "wrong" gradient
        if ctx.needs_input_grad[1]:
            gb = g * a * ctx.scale
        return ga, gb, None, None


@pytest.mark.parametrize("rg", [(True, True), (True, False), (False, True)])
def test_function_saved_tensors_and_needs_input_grad(rg: tuple[bool, bool]) -> None:
    check_against_eager(lambda a, b: ScaledMul.apply(a, b, 3.0, "hi").sum(),
                        rand(5, rg=rg[0]), rand(5, seed=1, rg=rg[1]))


class SortWithIndex(torch.autograd.Function):
    """mark_non_differentiable, two outputs, set_materialize_grads, once_differentiable."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        values, idx = x.sort()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        ctx.set_materialize_grads(False)
        return values, idx

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g, g_idx):  # type: ignore[no-untyped-def]
        (idx,) = ctx.saved_tensors
        out = torch.zeros_like(g)
        return out.scatter(0, idx, g)


def test_function_non_differentiable_output_and_once_differentiable() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, i = SortWithIndex.apply(x)
        return v * 2, i

    check_against_eager(f, rand(6))


class SetupContextExp(torch.autograd.Function):
    @staticmethod
    def forward(x, k=2.0):  # type: ignore[no-untyped-def]
        return torch.exp(x) * k

    @staticmethod
    def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        (out,) = ctx.saved_tensors
        return g * out, None


def test_function_setup_context_style() -> None:
    check_against_eager(lambda x: SetupContextExp.apply(x) + SetupContextExp.apply(x, 3.0),
                        rand(4))


class BadCount(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):  # type: ignore[no-untyped-def]
        return x + y

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        return (g,)


def test_function_backward_with_wrong_gradient_count_raises_eagers_error() -> None:
    """Eager raises when the backward runs; thunder_ir traces the backward with the
    forward, so it raises eager's error then, naming the line of ``apply``."""
    x, y = rand(3), rand(3, seed=1)
    with pytest.raises(RuntimeError, match="incorrect number of gradients") as eager:
        BadCount.apply(x, y).sum().backward()
    with pytest.raises(RuntimeError, match="incorrect number of gradients") as jitted:
        thunder_ir.jit(lambda x, y: BadCount.apply(x, y))(x, y)
    assert str(eager.value) in str(jitted.value)
    assert "test_eager_semantics.py:" in str(jitted.value)


class BroadcastGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return x.expand(3, 4).clone()

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        return g.double()  # shape (3, 4) for an input of shape (4,), another dtype


def test_function_gradient_is_summed_and_cast_to_its_input() -> None:
    check_against_eager(lambda x: BroadcastGrad.apply(x), rand(4))


def test_function_in_a_module_trains() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return STRound.apply(self.lin(x) * 4) / 4

    check_against_eager(M(), rand(2, 4))


def test_function_without_inputs_requiring_grad() -> None:
    check_against_eager(lambda x: STRound.apply(x) + 1, rand(3, rg=False))


def test_checkpoint_reentrant_and_not() -> None:
    lin = nn.Linear(4, 4)

    def block(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.tanh(lin(x)), 0.3, training=True)

    for reentrant in (True, False):
        def f(x: torch.Tensor, reentrant: bool = reentrant) -> torch.Tensor:
            return checkpoint(block, x, use_reentrant=reentrant).sum()

        check_against_eager(f, rand(3, 4), exact=False)


# --------------------------------------------------------------------------- random ops


@pytest.mark.parametrize("fn", [
    lambda x: F.dropout(x, 0.3, True),
    lambda x: F.dropout1d(x, 0.5, True),
    lambda x: F.dropout2d(x.unsqueeze(-1), 0.5, True),
    lambda x: F.dropout3d(x.unsqueeze(-1).unsqueeze(-1), 0.5, True),
    lambda x: F.alpha_dropout(x, 0.2, True),
    lambda x: F.feature_alpha_dropout(x, 0.4, True),
    lambda x: F.rrelu(x, training=True),
    lambda x: torch.bernoulli(x.sigmoid()) * x,
    lambda x: x * torch.rand_like(x) + torch.randn(x.shape),
    lambda x: F.scaled_dot_product_attention(x[None], x[None], x[None], dropout_p=0.4),
    lambda x: F.fractional_max_pool2d(x[None], 2, output_size=(2, 2)),
], ids=["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
        "feature_alpha_dropout", "rrelu", "bernoulli", "rand_like", "sdpa_dropout",
        "fractional_max_pool2d"])
def test_random_ops_draw_as_eager_and_differentiate_that_draw(fn) -> None:
    check_against_eager(fn, rand(4, 6, 5), exact=True)


def test_dropout_in_place_and_modules() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        F.dropout(y, 0.5, True, inplace=True)
        return y + nn.AlphaDropout(0.3)(x)

    check_against_eager(f, rand(3, 8), exact=True)


def test_multihead_attention_with_dropout_in_training() -> None:
    mha = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True)
    x = rand(2, 5, 8)
    check_against_eager(lambda x: mha(x, x, x)[0], x, exact=False)
    check_against_eager(lambda x: mha(x, x, x, need_weights=False)[0], x)


@pytest.mark.parametrize("method", ["uniform_", "normal_", "exponential_", "bernoulli_",
                                    "cauchy_", "log_normal_", "geometric_", "random_"])
def test_inplace_random_ops(method: str) -> None:
    args = {"geometric_": (0.3,), "bernoulli_": (0.4,), "random_": (0, 10)}.get(method, ())

    def f(x: torch.Tensor) -> torch.Tensor:
        buf = torch.empty_like(x)
        getattr(buf, method)(*args)
        return x * buf

    check_against_eager(f, rand(4, 3), exact=True)


def test_random_draws_follow_torch_manual_seed_across_calls() -> None:
    f = thunder_ir.jit(lambda x: F.dropout(x, 0.5, True))
    x = torch.ones(100)
    torch.manual_seed(1)
    a, b = f(x), f(x)
    torch.manual_seed(1)
    c, d = F.dropout(x, 0.5, True), F.dropout(x, 0.5, True)
    assert torch.equal(a, c) and torch.equal(b, d) and not torch.equal(a, b)


# --------------------------------------------------------------------------- differentiability


@pytest.mark.parametrize("fn", [torch.floor, torch.ceil, torch.round, torch.sign, torch.trunc,
                                lambda x: torch.floor_divide(x, 0.7)])
def test_piecewise_constant_ops_give_zero_gradients(fn) -> None:
    check_against_eager(lambda x: fn(x) * 2, rand(5))


def test_non_differentiable_outputs_do_not_require_grad() -> None:
    check_against_eager(lambda x: torch.special.bessel_j0(x), rand(5))
    check_against_eager(lambda x: torch.special.bessel_j0(x) + x, rand(5))
    check_against_eager(lambda x: (torch.zeros_like(x), torch.argmax(x)), rand(5))


def test_a_saved_input_modified_in_place_before_backward_raises_eagers_error() -> None:
    """Residuals go through ``save_for_backward``, so autograd's version check sees an
    input changed between forward and backward (an optimizer step in between), as in
    eager, instead of differentiating with the new values."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sin().sum()

    for fn in (f, thunder_ir.jit(f)):
        x, w = rand(3), rand(3, seed=1)
        loss = fn(x, w)
        with torch.no_grad():
            w.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_unused_inputs_and_outputs_get_none_gradients() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 2

    check_against_eager(f, rand(3), rand(3, seed=1))

    def g(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sin(), y.cos()

    x, y = rand(3), rand(3, seed=1)
    out = thunder_ir.jit(g)(x, y)
    out[0].sum().backward()
    assert x.grad is not None and y.grad is None


def test_parameter_feeding_only_an_unused_output_gets_none() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.a(x), self.b(x)

    m = Two()
    tm = thunder_ir.jit(m)
    tm(rand(2, 3))[0].sum().backward()
    assert m.a.weight.grad is not None and m.b.weight.grad is None


# --------------------------------------------------------------------------- isinstance, autocast


def test_parameters_and_buffers_are_what_model_code_checks() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("b", torch.ones(3))
            self.register_buffer("scratch", torch.zeros(3), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            assert isinstance(self.lin.weight, nn.Parameter)
            assert not isinstance(self.b, nn.Parameter | nn.Buffer)  # eager: plain tensors
            assert torch.is_tensor(x) and not isinstance(x, nn.Parameter)
            return self.lin(x) + self.b + self.scratch

    m = M()
    check_against_eager(m, rand(2, 3))
    thunder_ir.jit(m)(rand(2, 3))
    assert set(m.state_dict()) == {"lin.weight", "lin.bias", "b"}  # persistence kept


def test_autocast_inside_forward_follows_eager() -> None:
    """An autocast region inside ``forward`` gives eager autocast's dtypes (it was refused
    before autocast was followed: `tests/test_autocast.py` holds the rest), and leaves
    the autocast state as it found it."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b = nn.Linear(4, 4)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.b(h)
            return h

    m, x = M(), rand(2, 4)
    out = thunder_ir.jit(m)(x)
    assert out.dtype == m(x).dtype == torch.bfloat16
    torch.testing.assert_close(out, m(x))
    assert not torch.is_autocast_enabled("cpu")


# --------------------------------------------------------------------------- fallback crashes


@pytest.mark.parametrize("cls", [nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d])
def test_batch_norm_in_training_updates_running_stats_once(cls) -> None:
    m = cls(4)
    shape = {nn.BatchNorm1d: (3, 4), nn.BatchNorm2d: (3, 4, 2, 2),
             nn.BatchNorm3d: (3, 4, 2, 2, 2)}[cls]
    x = rand(*shape)
    check_against_eager(m, x)
    tm = thunder_ir.jit(m)
    tm(x).sum().backward()
    ref = cls(4)
    ref(x).sum().backward()
    torch.testing.assert_close(m.running_mean, ref.running_mean)
    assert m.num_batches_tracked.item() == ref.num_batches_tracked.item() == 1


_T = torch.randint(0, 5, (4, 5), generator=torch.Generator().manual_seed(2)).float()
_W = torch.rand(5, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("loss", [
    lambda x: F.nll_loss(F.log_softmax(x, -1), _T[:, 0].long(), weight=_W),
    lambda x: F.cross_entropy(x, _T[:, 0].long(), weight=_W, label_smoothing=0.1),
    lambda x: F.binary_cross_entropy(x.sigmoid(), _T / 5, weight=_W.expand(4, 5)),
    lambda x: F.soft_margin_loss(x, _T.sign() * 2 - 1),
    lambda x: F.multilabel_soft_margin_loss(x, (_T > 2).float()),
], ids=["nll_loss", "cross_entropy", "binary_cross_entropy", "soft_margin_loss",
        "multilabel_soft_margin"])
def test_losses_with_weights_and_targets(loss) -> None:
    check_against_eager(loss, rand(4, 5))


def test_transformer_layers_and_attention_masks() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=True), 2,
                                enable_nested_tensor=False)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = rand(2, 5, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    check_against_eager(layer, x)
    check_against_eager(lambda x: enc(x, mask=mask, is_causal=True), x)
    check_against_eager(lambda x: mha(x, x, x, need_weights=False)[0], x)
    check_against_eager(lambda x: mha(x, x, x, attn_mask=mask.bool())[0], x)
    check_against_eager(lambda x: mha(x, x, x)[1], x)


@pytest.mark.parametrize("fn", [
    lambda x: torch.sort(x, dim=1).values * 2,
    lambda x: x.sort().indices,
    lambda x: torch.topk(x, 2).values + torch.topk(x, 2).indices,
    lambda x: torch.median(x, dim=1).values,
    lambda x: torch.kthvalue(x, 2, dim=1).values,
    lambda x: torch.mode(x.round(), dim=1).values,
    lambda x: torch.cummax(x, dim=1).values,
    lambda x: torch.aminmax(x, dim=1).max,
    lambda x: torch.linalg.qr(x).Q,
    lambda x: x.max(dim=0).values - x.min(1).indices,
], ids=["sort", "sort_indices", "topk", "median", "kthvalue", "mode", "cummax", "aminmax",
        "qr", "max_min"])
def test_named_tuple_results(fn) -> None:
    check_against_eager(fn, rand(4, 4))


@torch.library.custom_op("thunder_ir_test::scaled_sin", mutates_args=())
def scaled_sin(x: torch.Tensor, k: float) -> torch.Tensor:
    return x.sin() * k


@scaled_sin.register_fake
def _(x: torch.Tensor, k: float) -> torch.Tensor:
    return torch.empty_like(x)


def _scaled_sin_setup(ctx, inputs, output):  # type: ignore[no-untyped-def]
    ctx.save_for_backward(inputs[0])
    ctx.k = inputs[1]


def _scaled_sin_backward(ctx, g):  # type: ignore[no-untyped-def]
    (x,) = ctx.saved_tensors
    return g * x.cos() * ctx.k, None


scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)


def test_custom_op_and_aten_overloads() -> None:
    check_against_eager(lambda x: scaled_sin(x, 3.0) + 1, rand(4))
    check_against_eager(lambda x: torch.ops.aten.mul.Tensor(x, x) + torch.ops.aten.sin(x),
                        rand(4))
    f = thunder_ir.jit(lambda x: scaled_sin(x, 2.0))
    f(rand(3, rg=False))
    assert "torch.ops.thunder_ir_test.scaled_sin.default(" in str(thunder_ir.last_traces(f)[-1])


def test_tensors_where_numbers_are_expected() -> None:
    lo, hi = torch.tensor(-0.5), torch.tensor([0.1, 0.2, 0.3])
    check_against_eager(lambda x: torch.clamp(x, min=lo, max=hi), rand(2, 3))
    check_against_eager(lambda x: x.masked_fill(x > 0, torch.tensor(2.0)), rand(2, 3))
    check_against_eager(lambda x: x.narrow(1, torch.tensor(1), 2), rand(2, 3))
    check_against_eager(lambda x: x.repeat_interleave(torch.tensor([1, 2, 3]), dim=1,
                                                      output_size=6), rand(2, 3))
    # without output_size, the result's length is an unbacked symbol (torch's fake kernel)
    check_against_eager(lambda x: x.repeat_interleave(torch.tensor([1, 2, 3]), dim=1),
                        rand(2, 3))


def test_complex_dtypes_through_the_fallback() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        c = torch.fft.fft(x)
        return (c * c.conj()).real + torch.view_as_real(c).sum(-1)

    check_against_eager(f, rand(4, 8))
    check_against_eager(lambda z: (z * 2).abs(), torch.randn(3, dtype=torch.complex64))


def test_torch_functions_that_read_metadata() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if torch.is_floating_point(x) and not torch.is_complex(x) and torch.numel(x) == 6:
            return x * 2
        return x

    check_against_eager(f, rand(2, 3))


# --------------------------------------------------------------------------- error locations


def test_data_dependent_error_from_stdin_names_the_pseudo_file(tmp_path) -> None:
    code = textwrap.dedent("""
        import torch, thunder_ir
        def f(x):
            if int(x.sum()) > 0:
                return x
            return -x
        try:
            thunder_ir.jit(f)(torch.ones(2))
        except thunder_ir.DataDependentError as e:
            print(str(e).splitlines()[0])
    """)
    out = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True,
                         cwd=str(tmp_path.parent), check=True).stdout
    assert out.startswith("<stdin>:4:"), out
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("<string>:4:"), out


def test_errors_in_library_code_name_the_full_path(tmp_path) -> None:
    lib = tmp_path / "mylib" / "layers.py"
    lib.parent.mkdir()
    lib.write_text("def gate(x):\n    return x if int(x.mean()) > 0 else -x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        from mylib.layers import gate  # type: ignore[import-not-found]

        with pytest.raises(thunder_ir.DataDependentError) as e:
            thunder_ir.jit(gate)(torch.ones(2))
        assert f"{lib}:2:" in str(e.value)
    finally:
        sys.path.remove(str(tmp_path))


_ATTN_MASKS: dict[str, Callable[[], torch.Tensor | str | None]] = {
    "none": lambda: None,
    "causal": lambda: "causal",
    "bool": lambda: torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(5)) > 0.3,
    "bool_empty_row": lambda: torch.tensor([True] * 5).expand(5, 5).clone().index_fill_(
        0, torch.tensor([2]), False),
    "float": lambda: rand(2, 1, 5, 5, seed=6),
}


@pytest.mark.parametrize("mask", list(_ATTN_MASKS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_attention_dropout_is_native_with_eagers_draw(mask: str, dtype: torch.dtype) -> None:
    """SDPA with dropout in training: eager's values and draw, thunder_ir's backward. In
    float32 and float64 the forward is the steps of eager's math kernel (probabilities and
    noise saved, nothing recomputed); in other dtypes it is that kernel itself."""
    m = _ATTN_MASKS[mask]()
    causal = isinstance(m, str)
    gqa = mask == "none"  # grouped heads: 4 query heads share 2 key/value heads
    scale = -0.3 if mask == "bool" else None  # ATen scales q by -√|s| and kᵀ by √|s|

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *mask: torch.Tensor
          ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, mask[0] if mask else None,
                                              dropout_p=0.25, is_causal=causal,
                                              scale=scale, enable_gqa=gqa)

    heads = 2 if gqa else 4
    q = rand(2, 4, 5, 4).detach().to(dtype).requires_grad_()
    k, v = (rand(2, heads, 5, 4, seed=s).detach().to(dtype).requires_grad_() for s in (1, 2))
    extra = () if m is None or causal else (m.to(dtype) if m.is_floating_point() else m,)
    check_against_eager(f, q, k, v, *extra, exact=True)
    jf = thunder_ir.jit(f)
    jf(q, k, v, *extra).sum().backward()
    fwd = str(thunder_ir.last_traces(jf)[-1])
    bwd = str(thunder_ir.last_backward_traces(jf)[-1])
    if dtype == torch.bfloat16:
        assert "sdpa_dropout_forward(" in fwd
    else:
        assert "torch._safe_softmax(" in fwd and "bernoulli_like(" in fwd
        assert "softmax(" not in bwd.replace("softmax_backward(", "")  # nothing recomputed
    assert "softmax_backward(" in bwd


@pytest.mark.parametrize("case", ["broadcast_bias", "full_bias", "gqa", "3d", "causal_q_only"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_attention_with_a_mask_that_requires_grad_is_eagers_math_kernel(
        case: str, dtype: torch.dtype) -> None:
    """A float mask that requires grad (a learned position bias: Swin, T5-style models):
    on CPU eager runs its math kernel and saves its probabilities. In float32 and float64
    the forward is that kernel's steps (eager's values bit for bit) and the backward reads
    the probabilities, nothing recomputed; the bias gets eager's gradient. In bfloat16 the
    SDPA executor's backward differentiates the math kernel."""
    heads, kv_heads = (4, 2) if case == "gqa" else (2, 2)
    shape = (5, 4) if case == "3d" else (2, heads, 5, 4)
    kv_shape = (5, 4) if case == "3d" else (2, kv_heads, 5, 4)
    bias_shape = {"broadcast_bias": (1, heads, 5, 5), "full_bias": (2, heads, 5, 5),
                  "gqa": (heads, 5, 5), "3d": (5, 5), "causal_q_only": (5, 5)}[case]

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
          ) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, bias.tanh() * 2, scale=0.4,
                                              enable_gqa=case == "gqa")

    if case == "3d":
        shape, kv_shape = (3, *shape), (3, *kv_shape)
    q = rand(*shape).detach().to(dtype).requires_grad_()
    k, v = (rand(*kv_shape, seed=s).detach().to(dtype).requires_grad_(case != "causal_q_only")
            for s in (1, 2))
    bias = rand(*bias_shape, seed=3).detach().to(dtype).requires_grad_()
    math_steps = dtype != torch.bfloat16
    check_against_eager(f, q, k, v, bias, exact=math_steps)
    jf = thunder_ir.jit(f)
    jf(q, k, v, bias).sum().backward()
    fwd = str(thunder_ir.last_traces(jf)[-1])
    bwd = str(thunder_ir.last_backward_traces(jf)[-1])
    if math_steps:
        assert "torch._safe_softmax(" in fwd, fwd
        assert "softmax(" not in bwd.replace("softmax_backward(", ""), bwd
        assert "sdpa_backward(" not in bwd, bwd
    else:
        assert "sdpa_backward(" in bwd and "mask_grad=True" in bwd, bwd


def test_attention_with_a_mask_that_needs_no_grad_keeps_the_fused_kernel() -> None:
    """The same float mask without grad: eager runs its fused CPU kernel, and so does the
    jitted forward, saving the log-sum-exp for the fused backward."""
    def f(q: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, bias)

    q, bias = rand(2, 2, 5, 4), rand(1, 2, 5, 5, seed=3).detach()
    check_against_eager(f, q, bias)
    jf = thunder_ir.jit(f)
    jf(q, bias).sum().backward()
    assert "sdpa_forward_cpu(" in str(thunder_ir.last_traces(jf)[-1])
    assert "sdpa_backward_cpu(" in str(thunder_ir.last_backward_traces(jf)[-1])


def test_attention_dropout_keeps_the_query_dtype_under_a_float64_default() -> None:
    """The bool mask becomes an additive mask in the query's dtype, whatever the default
    dtype (a float64 mask would promote float32 scores), also after a first compile under
    the float32 default (shape rules are cached per default dtype)."""
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(3)) > 0.3

    def f(q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, mask, dropout_p=0.5)

    q = rand(2, 5, 4)
    check_against_eager(f, q, exact=True)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = check_against_eager(f, q, exact=True)
    finally:
        torch.set_default_dtype(default)
    assert out.jitted.dtype == torch.float32


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_attention_mask_with_more_dims_than_the_scores_raises_as_eager(dropout_p: float
                                                                       ) -> None:
    """Eager adds the mask to the scores in place: a ``[1, 1, L, S]`` mask on 3-d inputs
    raises there (torch's meta kernel would broadcast); jitted, the error names the line."""
    mask = torch.rand(1, 1, 5, 5, generator=torch.Generator().manual_seed(4)) > 0.3

    def f(q: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, q, q, mask, dropout_p=dropout_p)

    check_against_eager(f, rand(4, 5, 8))
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"test_eager_semantics\.py:"):
        thunder_ir.jit(f)(rand(4, 5, 8))


_CLASS_WEIGHTS = torch.rand(5, generator=torch.Generator().manual_seed(1))
_NLL_CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "batch": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t),
    "batch_weighted_sum": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t.clamp(min=0),
                                                  _CLASS_WEIGHTS, reduction="sum",
                                                  ignore_index=2),
    "one_sample_none": lambda x, t: F.nll_loss(F.log_softmax(x[0], 0), t[0],
                                               reduction="none"),
    "legacy_size_average": lambda x, t: F.nll_loss(F.log_softmax(x, 1), t,
                                                   size_average=False),
    "spatial_fallback": lambda x, t: F.nll_loss(F.log_softmax(x, 1)[None].transpose(1, 2),
                                                t[None]),
}


@pytest.mark.parametrize("case", list(_NLL_CASES))
def test_nll_loss_is_eagers_kernel(case: str) -> None:
    """``F.nll_loss`` on ``[N, C]`` or ``[C]`` log-probabilities traces to
    ``ltorch.nll_loss_forward``: eager's values and gradients exactly (its kernels, forward
    and backward); other shapes take the fallback."""
    x = rand(6, 5)
    t = torch.tensor([0, 4, -100, 2, 2, 1])
    check_against_eager(_NLL_CASES[case], x, t, exact=True)
    jf = thunder_ir.jit(_NLL_CASES[case])
    jf(x, t).sum().backward()
    native = "nll_loss_forward(" in str(thunder_ir.last_traces(jf)[-1])
    assert native == (case != "spatial_fallback")


@pytest.mark.parametrize("loss", [F.cross_entropy,
                                  lambda x, t, w: F.nll_loss(F.log_softmax(x, 1), t, w)],
                         ids=["cross_entropy", "nll_loss"])
def test_class_weights_that_require_grad_raise_as_eager(loss: Any) -> None:
    """Eager refuses class weights that require grad with class-index targets; under
    ``no_grad`` it computes the loss."""
    x, w = rand(4, 3), rand(3, seed=1).abs()
    t = torch.tensor([0, 1, 2, 0])
    check_against_eager(loss, x, t, w)
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"not differentiable .*'weight'"):
        thunder_ir.jit(loss)(x, t, w)

    def no_grad_loss(x: torch.Tensor, t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return loss(x, t, w)

    check_against_eager(no_grad_loss, x, t, w, backward=False)


def test_safe_softmax_traces_natively() -> None:
    """``torch._safe_softmax`` (torch's attention softmax): zeros along fully masked rows,
    values and gradients as eager's."""
    rows = torch.tensor([[True], [False], [True]])

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch._safe_softmax(x.masked_fill(rows, float("-inf")), -1)

    check_against_eager(f, rand(3, 4))
    jf = thunder_ir.jit(f)
    jf(rand(3, 4))
    assert "torch._safe_softmax(" in str(thunder_ir.last_traces(jf)[-1])


def test_failure_leaves_module_attributes_as_they_were_and_a_cache_holds_a_real_tensor(
        ) -> None:
    """A forward that fails while traced leaves its module's attributes as they were; one
    that stores a tensor on the module (a lazily built cache) leaves a real tensor there,
    as eager does, never a traced one."""
    class Failing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            self.lin.last = x  # a new attribute on a submodule
            if int(x.sum()) > 0:
                return x
            return self.lin(x)

    m = Failing()
    with pytest.raises(thunder_ir.DataDependentError):
        thunder_ir.jit(m)(rand(2, 3))
    assert m.calls == 0 and not hasattr(m.lin, "last")

    class Cached(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mask_cache: torch.Tensor | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.mask_cache is None:
                self.mask_cache = torch.arange(x.shape[-1]) * 0.5
            return x * self.mask_cache

    c = Cached()
    check_against_eager(c, rand(2, 3))
    jc = thunder_ir.jit(c)
    for _ in range(3):
        torch.testing.assert_close(jc(rand(2, 3)), rand(2, 3) * torch.arange(3) * 0.5)
    assert type(c.mask_cache) is torch.Tensor
    torch.testing.assert_close(c.mask_cache, torch.arange(3) * 0.5)


def _sin_then_add(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = a.clone()
    x.sin_()
    return x.add_(1)


def _pow_then_mul(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = a + 0
    x.pow_(2)
    return x.mul_(y)


def _mul_then_mul(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = a * 1
    x.mul_(y)
    return x.mul_(2)


def _square_in_place_then_add(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = a * 1
    x.mul_(x)
    return x.add_(1)


@pytest.mark.parametrize("fn", [
    _sin_then_add, _pow_then_mul, _mul_then_mul, _square_in_place_then_add,
], ids=lambda f: f.__name__.strip("_"))
def test_chains_of_in_place_writes_raise_only_where_eager_raises(fn: Any) -> None:
    """An in-place op saves its input as it was before the write (eager saves a copy), so
    a later write to the same tensor leaves its backward alone; only a saved tensor that
    is then written (batch norm's running statistics: test_fuzz_eager; ``x.mul_(x)``'s
    other operand, ``x`` itself, which its own write modifies) makes it raise."""
    a = rand(3).requires_grad_()
    y = (rand(3, seed=1).abs() + 0.5).requires_grad_()
    check_against_eager(fn, a, y)


def test_what_eager_saves_is_worked_out_only_when_a_write_asks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The meta runs that say which tensors each op's backward saves are made when an
    in-place write asks (none in a program that writes nothing in place), for the ops
    traced before it; such a write still raises where eager raises."""
    from thunder_ir.frontend import eager_autograd

    asked: list[str] = []
    saves = eager_autograd.eager_saves

    def counted(op: Any, active: Any) -> Any:
        asked.append(op.name)
        return saves(op, active)

    monkeypatch.setattr(eager_autograd, "eager_saves", counted)
    a = rand(3).requires_grad_()
    y = (rand(3, seed=1).abs() + 0.5).requires_grad_()
    check_against_eager(lambda a, y: (a.sin() * y).exp().sum(), a, y)
    assert asked == []
    check_against_eager(_square_in_place_then_add, a, y)
    assert "ltorch.mul" in asked


# --------------------------------------------------------------------------- memory layout


def _base(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 6, generator=g)


LAYOUTS: dict[str, Callable[[], torch.Tensor]] = {
    "contiguous": lambda: _base(),
    "transposed": lambda: _base().t(),
    "sliced": lambda: _base()[:, ::2],
    "expanded": lambda: _base()[:1].expand(4, 6),
    "zero_stride": lambda: torch.randn(6).as_strided((4, 6), (0, 1)),
    "storage_offset": lambda: _base()[1:],
    "offset_and_transposed": lambda: _base()[1:, 2:].t(),
    "size_one_dims": lambda: torch.randn(4, 4)[:, :1],
    "channels_last": lambda: torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
}
"""Argument layouts the layout section runs every query on (each a view of its own base,
so that storage offsets and gaps are the caller's)."""


def _queries(x: torch.Tensor) -> tuple[Any, ...]:
    """Every layout question library code asks, of the argument and of what it makes."""
    from torch._prims_common import is_non_overlapping_and_dense, suggest_memory_format

    cl = torch.channels_last if x.ndim == 4 else torch.contiguous_format
    y = x * 2
    return (x.stride(), x.stride(0), x.storage_offset(), x.is_contiguous(),
            x.is_contiguous(memory_format=cl), is_non_overlapping_and_dense(x),
            suggest_memory_format(x), x.t().is_contiguous() if x.ndim == 2 else None,
            x.transpose(0, 1).stride(), x.contiguous().stride(), x.clone().stride(),
            torch.zeros_like(x).stride(), y.stride(), y.is_contiguous(memory_format=cl),
            x.unsqueeze(1).stride(), x[1:].storage_offset(), x.flatten(1).is_contiguous(),
            y * (3 if x.is_contiguous() else 5))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_queries_answer_as_eager(layout: str) -> None:
    """Strides, storage offsets, contiguity (row-major and channels-last), density and the
    suggested memory format, of the argument and of views and results made of it, answer
    as eager's; so does the result's layout (`check_against_eager` compares strides)."""
    check_against_eager(_queries, LAYOUTS[layout]())


def _by_layout(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.is_contiguous() else x * 3


def test_a_layout_query_on_a_transposed_argument_matches_eager() -> None:
    x = rand(3, 3).t()
    torch.testing.assert_close(thunder_ir.jit(_by_layout)(x), _by_layout(x))


def test_contiguous_then_transposed_calls_run_the_program_of_their_layout() -> None:
    """Where the trace asked about layout, each layout gets its own program; a layout seen
    before hits its program again."""
    j = thunder_ir.jit(_by_layout)
    x = rand(4, 4, rg=False)
    for arg in (x, x.t(), x, x.t(), x[:, ::2], x[:, ::2]):
        torch.testing.assert_close(j(arg), _by_layout(arg), rtol=0, atol=0)
    assert thunder_ir.cache_misses(j) == 3 and thunder_ir.cache_hits(j) == 3


def test_a_program_that_asked_nothing_about_layout_serves_every_layout() -> None:
    """Where the trace made no decision by layout, a transposed or sliced argument runs
    the program compiled for the contiguous one (eager's kernels lay its results out as
    eager's), with eager's values and strides; one that reads layout gets its own."""
    def free(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + x.sum(0)

    j = thunder_ir.jit(free)
    x = rand(4, 4, rg=False)
    for arg in (x, x.t(), x[::2, ::2].t(), x.t()):
        check_against_eager(free, arg)
        out = j(arg)
        assert out.stride() == free(arg).stride()
    assert thunder_ir.cache_misses(j) == 2  # (4, 4) and the (2, 2) slice: shapes differ
    assert thunder_ir.cache_hits(j) == 2


def test_storage_offsets_and_size_one_strides_read_by_the_trace_are_keyed() -> None:
    """A contiguous tensor's key is its contiguity; where the trace reads its exact strides
    or storage offset, the key holds them (a slice at another offset recompiles)."""
    base = torch.arange(12.0)
    f = thunder_ir.jit(lambda x: x * x.storage_offset())
    for start in (1, 2, 1, 0):
        arg = base[start:start + 4]
        torch.testing.assert_close(f(arg), arg * start)
    g = thunder_ir.jit(lambda x: x * x.stride(1))
    for arg in (torch.ones(4, 4)[:, :1], torch.ones(4, 1)):
        torch.testing.assert_close(g(arg), arg * arg.stride(1))


@pytest.mark.parametrize("fn", [
    lambda x: x.contiguous() + 0,
    lambda x: x.contiguous(),
    lambda x: x.t() * 2,
    lambda x: x.clone(),
    lambda x: x.clone(memory_format=torch.contiguous_format),
    lambda x: torch.zeros_like(x),
    lambda x: x.to(torch.float64),
    lambda x: x.sum(0, keepdim=True),
    lambda x: x.exp() + x.t().t(),
    lambda x: torch.cat([x, x], 1),
], ids=["contiguous_then_add", "contiguous", "transpose", "clone", "clone_contiguous",
        "zeros_like", "to_dtype", "sum_keepdim", "elementwise", "cat"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "storage_offset"])
def test_results_have_eagers_strides(fn: Callable[..., Any], layout: str) -> None:
    """``contiguous()`` is the identity only where the input is contiguous, ``clone``
    preserves a dense layout, elementwise results follow their inputs' layout: the caller
    can ``view`` each result exactly where eager's can be viewed."""
    check_against_eager(fn, LAYOUTS[layout]().requires_grad_())
    out = thunder_ir.jit(fn)(LAYOUTS[layout]())
    try:
        ref: Any = fn(LAYOUTS[layout]()).view(-1)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            out.view(-1)
        ref = e
    if not isinstance(ref, Exception):
        torch.testing.assert_close(out.view(-1), ref)


def _in_order_operands() -> tuple[torch.Tensor, ...]:
    """Non-contiguous tensors whose nonzero strides fall from the first dim to the last (a
    slice of the last dim, a strided slice under a size-1 dim, a slice at an offset, one
    with a zero stride), and operands that broadcast against them."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(2, 3, 8, generator=g) + 0.5
    return (base[..., 4:], torch.rand(1, 3, 8, generator=g)[..., ::2] + 0.5,
            base[:, :, 1:5], torch.rand(2, 1, 4, generator=g).expand(2, 3, 4) + 0,
            torch.rand(3, 8, generator=g)[:, 2:6] + 0.5, torch.rand(4, generator=g) + 0.5)


def _elementwise_ops() -> list[Any]:
    from thunder_ir.dialects.ltorch import LTORCH  # (every op declared)
    from thunder_ir.dialects.traits import Elementwise

    return [cls for cls in LTORCH if cls.has_trait(Elementwise)
            and len(cls.get_irdl_definition().operands) in (1, 2)]


def test_elementwise_and_cat_results_of_in_order_slices_have_eagers_strides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout rules of our own (`thunder_ir.frontend.layout._in_order`): every
    elementwise ltorch op, and ``cat``, on slices whose strides fall in dim order (what
    rotary embeddings cut) and on operands that broadcast against them, gives eager's
    values and strides, and so do ``bmm`` and ``matmul`` of transposed operands; the rule answered,
    with no meta kernel asked."""
    from thunder_ir.frontend import layout

    answered: list[str] = []
    in_order = layout._in_order

    def counted(op: Any, layouts: Any) -> bool:
        ok = in_order(op, layouts)
        if ok:
            answered.append(op.name)
        return ok

    monkeypatch.setattr(layout, "_in_order", counted)
    xs = _in_order_operands()
    checked = 0
    for cls in _elementwise_ops():
        fn = cls.TORCH_FN
        binary = len(cls.get_irdl_definition().operands) == 2

        def apply(*ts: torch.Tensor, fn: Any = fn, binary: bool = binary) -> Any:
            a, b, c, d, e, f = ts
            outs = ((fn(a, f), fn(b, a[:1]), fn(c, e), fn(d, a), fn(a, c)) if binary
                    else (fn(a), fn(b), fn(c), fn(d)))
            return outs, [o.stride() for o in outs]  # (as the trace answers them)

        try:
            apply(*xs)
        except (RuntimeError, TypeError):  # an op eager takes only on other dtypes
            continue
        check_against_eager(apply, *xs, backward=False)
        checked += 1
    def cat(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any) -> Any:
        outs = (torch.cat([a, c, d], 2), torch.cat([a, c], -1), torch.cat([b, b]),
                torch.bmm(a, c.transpose(1, 2)), torch.bmm(a.transpose(1, 2), d),
                a.transpose(1, 2) @ c, a @ e.t(), a.unsqueeze(0) @ c.transpose(1, 2),
                torch.matmul(a, f), torch.matmul(e, f), torch.matmul(e, a.transpose(1, 2)))
        return outs, [o.stride() for o in outs]

    cat(*xs)  # (eager takes every product: the check compares results, not errors)
    check_against_eager(cat, *xs, backward=False)

    def with_params(a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, i: Any, m: Any) -> Any:
        outs = (a.to(torch.float64), b.to(torch.bfloat16), a.masked_fill(m, 0.5),
                c.clamp(0.6, 1.2), torch.where(m, a, c), torch.where(m, b, 1.0),
                torch.bitwise_and(i, i), ~i, torch.gt(a, c), a == 0.75)
        return outs, [o.stride() for o in outs]

    ints = torch.randint(0, 9, (2, 3, 8), generator=torch.Generator().manual_seed(1))
    with_params(*xs, ints[..., 4:], ints[..., :4] > 4)
    check_against_eager(with_params, *xs, ints[..., 4:], ints[..., :4] > 4, backward=False)
    assert checked > 40 and len(set(answered)) > 40 and "ltorch.cat" in answered


def test_contiguous_of_a_contiguous_argument_is_the_argument() -> None:
    x = torch.randn(3, 4)
    assert thunder_ir.jit(lambda t: t.contiguous())(x) is x
    assert thunder_ir.jit(lambda t: t.to(memory_format=torch.contiguous_format))(x) is x
    assert thunder_ir.jit(lambda t: t.contiguous())(x.t()) is not x


def test_view_of_a_layout_eager_cannot_view_raises_eagers_error_with_the_line() -> None:
    with pytest.raises(RuntimeError, match=r"view size is not compatible.*\n.*"
                                           r"test_eager_semantics\.py:\d+"):
        thunder_ir.jit(lambda x: x.view(-1))(torch.randn(4, 6).t())
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        thunder_ir.jit(lambda x: x.view_as(torch.empty(24)))(torch.randn(4, 6).t())
    check_against_eager(lambda x: x.reshape(-1) * 2, rand(4, 6).t())
    check_against_eager(lambda x: x.t().contiguous().view(-1), rand(4, 6))


def test_reshape_that_copies_does_not_alias_and_one_that_views_does() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.sin(x)
        copied = y.t().reshape(-1)  # a copy: not written below
        viewed = y.reshape(-1)  # a view: sees the write
        y.mul_(2)
        return copied, viewed

    check_against_eager(f, rand(3, 4))


def test_channels_last_convolution_network_trains_as_eager() -> None:
    """Inputs and weights in channels-last: outputs, gradients and the gradients' strides
    (eager's ``.grad`` follows the parameter's layout) as eager's."""
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 2))
    net = net.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    check_against_eager(net, x)
    out = thunder_ir.jit(net)(x)
    assert out.shape == (2, 2)


# --------------------------------------------------------------------------- writes through views


def _write_a_read_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return b * 2


def _row_write_then_use(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[0].add_(1)
    return y.sum(0)


def _view_sees_later_write(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 1
    v = y.t()[1:]  # a view of a view
    w = v[0]
    y.mul_(3)
    return v * 1, w * 1


def _square_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.mul_(y)
    return y


def _write_through_chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.view(2, 6)[:, ::2].unsqueeze(0).mul_(2)
    return y


def _write_through_detach(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    d = y.detach()
    d.zero_()  # reaches y's values; y keeps its gradient
    return y + x


@pytest.mark.parametrize("fn", [_row_write_then_use, _view_sees_later_write,
                                _square_in_place, _write_through_chain,
                                _write_through_detach],
                         ids=lambda f: f.__name__.strip("_"))
def test_writes_through_views_compute_and_differentiate_as_eager(fn: Any) -> None:
    check_against_eager(fn, rand(4, 3))


@pytest.mark.parametrize("parts", [(slice(0, 4), slice(2, 6)), (slice(0, 3), slice(3, 6)),
                                   (slice(0, 6), slice(2, 4))],
                         ids=["overlapping", "adjacent", "nested"])
def test_a_write_to_one_of_two_arguments_that_share_memory(parts: tuple[slice, ...]) -> None:
    """Both arguments are views of one tensor: the write reaches the other, and the
    caller's tensor afterwards, as in eager."""
    def twice(base: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return base[parts[0]], base[parts[1]]

    t_e, t_j = torch.arange(6.0), torch.arange(6.0)
    e = _write_a_read_b(*twice(t_e))
    j = thunder_ir.jit(_write_a_read_b)(*twice(t_j))
    torch.testing.assert_close(j, e)
    torch.testing.assert_close(t_j, t_e)
    check_against_eager(_write_a_read_b, *twice(torch.arange(6.0)))


def test_a_write_to_a_view_of_an_argument_reaches_the_caller() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x[1:, 0].mul_(-1)
        return x.sum()

    for layout in ("contiguous", "transposed", "storage_offset"):
        check_against_eager(f, LAYOUTS[layout]())


def test_a_result_written_in_place_is_the_callers_tensor() -> None:
    """As ``out=`` returns ``out``, ``x.add_(1); return x`` returns the caller's ``x``
    itself, and a view of a written argument is a view of the caller's tensor: a later
    write to the result reaches the caller's tensor, as in eager."""
    x = torch.randn(3, 4)
    f = thunder_ir.jit(lambda t: t.add_(1))
    assert f(x) is x
    g = thunder_ir.jit(lambda t: (t.mul_(2), t[1]))
    a, row = g(x)
    assert a is x and row._base is x
    row.fill_(7.0)
    assert bool((x[1] == 7.0).all())


@pytest.mark.parametrize("fn", [
    lambda x: (x * 1).split(2)[0].mul_(2),
    lambda x: x[0].mul_(2),
], ids=["one_of_several_views", "view_of_a_leaf"])
def test_writes_eager_refuses_raise_its_error(fn: Callable[..., Any]) -> None:
    check_against_eager(fn, rand(4, 3))


def test_a_write_to_a_view_made_under_no_grad_raises_as_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        with torch.no_grad():
            v = y[0]
        v.mul_(2)
        return y

    def g(x: torch.Tensor) -> torch.Tensor:  # both under no_grad: allowed
        y = x * 1
        with torch.no_grad():
            y[0].mul_(2)
        return y * y

    check_against_eager(f, rand(4, 3))
    check_against_eager(g, rand(4, 3))


def test_a_write_to_an_expanded_tensor_raises_eagers_error() -> None:
    check_against_eager(lambda x: x.expand(3, 3).add_(1), rand(1, 3, rg=False))
