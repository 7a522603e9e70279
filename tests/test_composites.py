"""Torch calls that were opaque (``tir.call_with_grad``: torch's autograd per call, and a
break in every fusion region) and are now the program's own ops, against eager at the
values where their formulas branch: ``F.softplus`` (``ltorch.softplus`` and its backward
kernel), ``F.hardswish`` and ``F.hardsigmoid`` (ops with eager's backward kernels),
``Tensor.repeat``, ``repeat_interleave`` by an int and ``Tensor.reshape_as``.
What stays opaque is checked to stay so, and still eager. The in-place forms of the
activations without an op (``nn.ReLU6(inplace=True)``...) are their functional call and
an in-place assignment, with eager's errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import thunder_ir
from thunder_ir.testing_eager import check_against_eager

SPECIAL = torch.tensor([-30.0, -4.0, -3.0, -1.0, 0.0, 1.0, 2.5, 3.0, 4.0, 10.0, 21.0, 100.0,
                        float("nan"), float("inf"), -float("inf")])

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus": lambda x: F.softplus(x) * 2,
    "softplus beta threshold": lambda x: F.softplus(x, beta=2, threshold=3.0),
    "softplus module": lambda x: torch.nn.Softplus(beta=0.5, threshold=1)(x),
    "softplus float64": lambda x: F.softplus(x.double()),
    "hardswish": lambda x: F.hardswish(x) * 2,
    "hardswish module": lambda x: torch.nn.Hardswish()(x * 1.5),
    "hardswish in place": lambda x: F.hardswish(x * 1, True),
    "hardswish float64": lambda x: F.hardswish(x.double()),
    "hardsigmoid": lambda x: F.hardsigmoid(x) * x,
    "hardsigmoid module in place": lambda x: torch.nn.Hardsigmoid(inplace=True)(x + 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_at_the_branch_points(name: str) -> None:
    """Values and gradients, NaN and infinities included (a where's untaken branch must
    not send a NaN into the gradient)."""
    check_against_eager(CASES[name], SPECIAL.clone().requires_grad_())


@pytest.mark.parametrize("name", list(CASES))
def test_no_opaque_call_is_left(name: str) -> None:
    jf = thunder_ir.jit(CASES[name])
    jf(SPECIAL.clone().requires_grad_()).sum().backward()
    src = str(thunder_ir.last_traces(jf)[-1]) + str(thunder_ir.last_backward_traces(jf)[-1])
    assert "call_with_grad" not in src and "handle_vjp" not in src, src


@pytest.mark.parametrize("fn", [lambda x: F.softplus(x, beta=2.0), F.hardswish, F.hardsigmoid],
                         ids=["softplus", "hardswish", "hardsigmoid"])
def test_in_bfloat16_matches_eager(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    check_against_eager(fn, (torch.randn(4, 8) * 4).bfloat16().requires_grad_())


@pytest.mark.parametrize("fn", [F.softplus, F.hardswish, F.hardsigmoid],
                         ids=["softplus", "hardswish", "hardsigmoid"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool], ids=str)
def test_on_integers_raises_eagers_error(fn: Callable[..., torch.Tensor], dtype: torch.dtype
                                         ) -> None:
    """Eager's kernels refuse integers and bools (the meta kernels would type them)."""
    check_against_eager(fn, torch.arange(4).to(dtype), backward=False)
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"test_composites\.py:"):
        thunder_ir.jit(fn)(torch.arange(4).to(dtype))


def test_reshape_as() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.reshape_as(y) * y

    check_against_eager(f, torch.randn(6, requires_grad=True), torch.randn(2, 3))
    check_against_eager(f, torch.randn(6), torch.randn(4, 2), backward=False)  # eager's error
    jf = thunder_ir.jit(f)
    jf(torch.randn(6), torch.randn(3, 2))
    assert "call_with_grad" not in str(thunder_ir.last_traces(jf)[-1])


# --------------------------------------------------------------------------- in place

_INPLACE = (F.hardtanh, F.relu6, F.leaky_relu, F.elu, F.selu, F.celu, F.hardsigmoid, F.mish,
            F.hardswish, F.rrelu)


def test_inplace_activation_modules_train_as_eager() -> None:
    """``nn.ReLU6(inplace=True)`` and friends in a model that trains (their meta run
    refused any input that requires grad)."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(
        nn.Linear(4, 8), nn.ReLU6(inplace=True), nn.Linear(8, 8),
        nn.LeakyReLU(0.1, inplace=True), nn.ELU(inplace=True), nn.Hardswish(inplace=True),
        nn.Linear(8, 8), nn.Hardtanh(-0.5, 0.5, inplace=True), nn.SELU(inplace=True),
        nn.CELU(0.5, inplace=True), nn.Hardsigmoid(inplace=True), nn.Mish(inplace=True),
        nn.Threshold(0.1, 20, inplace=True), nn.Linear(8, 8), nn.RReLU(inplace=True))
    check_against_eager(model, torch.randn(3, 4) * 3)  # (RReLU draws its slopes in training)
    check_against_eager(model.eval(), torch.randn(3, 4) * 3)


@pytest.mark.parametrize("fn", _INPLACE, ids=lambda f: f.__name__)
def test_inplace_activation_then_a_write(fn: Callable[..., torch.Tensor]) -> None:
    """A later in-place write to the activated tensor: eager's backward raises where its
    in-place kernel saved its result (``leaky_relu_``, ``elu_``, ``selu_``, ``celu_``)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        fn(y, inplace=True)
        y.mul_(2)
        return y

    check_against_eager(f, SPECIAL[:12].clone().requires_grad_())


@pytest.mark.parametrize("fn", _INPLACE, ids=lambda f: f.__name__)
def test_inplace_activation_of_a_leaf_raises_eagers_error(fn: Callable[..., torch.Tensor]
                                                          ) -> None:
    check_against_eager(lambda w: fn(w, inplace=True), torch.randn(3, requires_grad=True))


# --------------------------------------------------------------------------- repeat

REPEATS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "repeat": lambda x: x.repeat(2, 1, 3),
    "repeat more dims": lambda x: x.repeat(2, 1, 1, 2),
    "repeat a list": lambda x: x.repeat([1, 2, 1]),
    "repeat_interleave dim": lambda x: torch.repeat_interleave(x, 2, 1),
    "repeat_interleave negative dim": lambda x: x.repeat_interleave(3, dim=-1),
    "repeat_interleave flat": lambda x: torch.repeat_interleave(x, 2),
    "repeat_interleave of a 0-d": lambda x: torch.repeat_interleave(x.sum(), 3),
    "repeat of a transposed view": lambda x: x.transpose(0, 2).repeat(1, 2, 2),
    "repeat once": lambda x: x.transpose(0, 2).repeat(1, 1, 1),
    "repeat size-1 dims": lambda x: x[:, :1, :1].repeat(1, 3, 2),
    "repeat_interleave once": lambda x: x.repeat_interleave(1, 2),
    "repeat_interleave a size-1 dim": lambda x: x[:, :1].repeat_interleave(4, 1),
    "repeat_interleave with its output_size": lambda x: x.repeat_interleave(
        2, dim=2, output_size=8),
    "repeat_interleave flat with its output_size": lambda x: torch.repeat_interleave(
        x, 2, output_size=48),
    # opaque (eager's kernel, checks and errors)
    "repeat with a 0": lambda x: x.repeat(2, 0, 1),
    "repeat too few sizes": lambda x: x.repeat(2, 2),
    "repeat_interleave dim out of range": lambda x: torch.repeat_interleave(x, 2, 3),
    "repeat_interleave along a 0-d's dim 0": lambda x: torch.repeat_interleave(x.sum(), 3, 0),
    "repeat_interleave with a wrong output_size": lambda x: x.repeat_interleave(
        2, dim=2, output_size=7),
}


def test_a_repeat_is_a_new_tensor() -> None:
    """Eager's result never aliases ``x``: a write into it leaves ``x`` as it was."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b = x.repeat(1, 1), x[:1].repeat_interleave(1, 0)
        a.add_(1)
        b.mul_(3)
        return x, a, b, x.repeat(1, 1).stride()

    check_against_eager(f, torch.randn(2, 3))


@pytest.mark.parametrize("name", list(REPEATS))
def test_repeat_matches_eager(name: str) -> None:
    x = torch.randn(2, 3, 4, requires_grad=True)
    check_against_eager(REPEATS[name], x)
    if name in ("repeat with a 0", "repeat too few sizes", "repeat_interleave dim out of range",
                "repeat_interleave along a 0-d's dim 0",
                "repeat_interleave with a wrong output_size"):
        return
    jf = thunder_ir.jit(REPEATS[name])
    jf(x)
    assert "repeat" not in str(thunder_ir.last_traces(jf)[-1])


# --------------------------------------------------------------------------- in-place views


def _metadata_writes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 1
    y.t_()
    y.unsqueeze_(0)
    z = y[0]
    z.squeeze_()
    return y * 2, z


def _t_of_a_leaf(x: torch.Tensor) -> torch.Tensor:
    x.t_()
    return x * 2


def _unsqueeze_of_a_leafs_view(x: torch.Tensor) -> torch.Tensor:
    y = x[0]
    y.unsqueeze_(0)
    return y * 2


@pytest.mark.parametrize("fn", [_metadata_writes, _t_of_a_leaf, _unsqueeze_of_a_leafs_view,
                                lambda x: F.dropout1d(x * 1, 0.5, True, True)],
                         ids=["non-leaf", "leaf", "view of a leaf", "dropout1d"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no grad"])
def test_inplace_metadata_ops_on_tensors_that_require_grad(fn: Callable[..., Any],
                                                           grad: bool) -> None:
    """``y.t_()``, ``y.unsqueeze_(0)`` (and ``F.dropout1d(..., inplace=True)``, which calls
    it) on a tensor that requires grad: allowed on a non-leaf, eager's error on a leaf and
    on a leaf's view (every such call raised the leaf error, its proxy being a leaf)."""
    check_against_eager(fn, torch.randn(3, 2, requires_grad=grad))


def test_inplace_metadata_op_under_no_grad_on_a_tensor_that_requires_grad() -> None:
    """Eager keeps the tensor's autograd history with its new shape: refused clearly."""
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            x.t_()
        return x * 2

    with pytest.raises(thunder_ir.ThunderTraceError, match=r"in-place t_ under no_grad"):
        thunder_ir.jit(f)(torch.randn(3, 2, requires_grad=True))


def test_no_proxy_reaches_the_user() -> None:
    """After calls through each new handler, what the user holds (results, the argument
    written in place, a module's parameters) is a real tensor with eager's strides."""
    from thunder_ir.frontend.proxy import TensorProxy

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x @ w
        y[:, 1] = 0.5
        F.leaky_relu(y, 0.1, True)
        z = y.repeat(1, 2).repeat_interleave(2, 0)
        x.t_()
        return y, F.softplus(z), z.reshape_as(z)

    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU6(inplace=True))
    jm = thunder_ir.jit(model)
    jf = thunder_ir.jit(f)
    for _ in range(2):  # the first call and a cached one
        x, w = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
        ex = x.clone()
        outs = [*jf(x, w), jm(torch.randn(2, 3))]
        eouts = f(ex, w.detach().clone().requires_grad_())
        reached = [*outs, x, w, *model.parameters()]
        assert all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in reached)
        assert not any(isinstance(t, TensorProxy) for t in reached)
        assert x.stride() == ex.stride() and x.shape == ex.shape
        for o, e in zip(outs, eouts, strict=False):
            assert o.stride() == e.stride()


# --------------------------------------------------------------------------- group norm

_GN = torch.nn.GroupNorm(3, 6)
with torch.no_grad():
    _GN.weight.normal_()
    _GN.bias.normal_()
_GN_PLAIN = torch.nn.GroupNorm(2, 6, eps=0.1, affine=False)

GROUP_NORMS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "module": lambda x: _GN(x),
    "no affine": lambda x: _GN_PLAIN(x) * x,
    "one group": lambda x: F.group_norm(x, 1),
    "a group per channel": lambda x: F.group_norm(x.flatten(2), 6, _GN.weight * 2),
    "rank 2": lambda x: F.group_norm(x[:, :, 0, 0], 2),
    "channels last": lambda x: _GN(x.to(memory_format=torch.channels_last)),
    "a transposed input": lambda x: F.group_norm(x.transpose(2, 3), 3),
    "float64": lambda x: F.group_norm(x.double(), 3),
    # eager's kernel and errors (the fallback)
    "bfloat16": lambda x: F.group_norm(x.bfloat16(), 3),
    "empty": lambda x: F.group_norm(x[:, :, :0], 3),
    "channels not divisible": lambda x: F.group_norm(x, 4),
    "weight of the wrong size": lambda x: F.group_norm(x, 3, torch.ones(5)),
    "a bias without a weight": lambda x: F.group_norm(x, 3, None, torch.ones(6)),
}
_GN_OPAQUE = {"bfloat16", "empty", "channels not divisible", "weight of the wrong size"}


@pytest.mark.parametrize("name", list(GROUP_NORMS))
def test_group_norm_matches_eager(name: str) -> None:
    """Values, gradients (of the weight and bias too) and strides as eager's; eager's
    errors where it raises (a bias without a weight: in its backward)."""
    torch.manual_seed(0)
    x = torch.randn(2, 6, 4, 5, requires_grad=True)
    check_against_eager(GROUP_NORMS[name], x)
    if name in _GN_OPAQUE:
        return
    torch.manual_seed(0)
    jf = thunder_ir.jit(GROUP_NORMS[name])
    out = jf(x)
    assert type(out) is torch.Tensor
    traced = str(thunder_ir.last_traces(jf)[0])
    assert "ltorch.native_group_norm(" in traced and "tir.call" not in traced, traced


def test_group_norm_trains_in_a_model_as_eager() -> None:
    """A convolutional block with group norms: parameters after optimizer steps."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(),
                          nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.Flatten(),
                          nn.Linear(8 * 25, 3))
    ref = __import__("copy").deepcopy(model)
    jm = thunder_ir.jit(model)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        for m, o in ((jm, opt), (ref, ref_opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)

