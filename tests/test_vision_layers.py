"""Convolution, batch norm and pooling as ltorch ops, against eager.

``F.conv1d/2d/3d`` trace to ``ltorch.convolution``, ``torch.batch_norm`` (what
``F.batch_norm`` calls after its checks) to ``ltorch.native_batch_norm``, ``F.max_pool2d``
to ``ltorch.max_pool2d_with_indices``, and adaptive average pooling to size 1 to the mean
ATen computes for it; their backward is torch's own kernels (``convolution_backward``,
``native_batch_norm_backward``, ``max_pool2d_with_indices_backward``), as eager's autograd
runs them. So values, gradients and running statistics are eager's bit for bit in
float32, and the cases the ops do not take (unbatched inputs, uneven ``"same"`` padding,
other dtypes for batch norm, other adaptive output sizes) still run through the torch
fallback.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder_ir
from thunder_ir.lowering.torch_executor import TorchExecutor
from thunder_ir.testing_eager import check_against_eager


def _train_as_eager(build: Callable[[], nn.Module], shape: tuple[int, ...],
                    dtype: torch.dtype = torch.float32, steps: int = 3,
                    jit: Callable[..., Any] = thunder_ir.jit) -> Any:
    """Trains a jitted copy and an eager copy side by side on inputs that require grad:
    outputs, every gradient (the input's too; ``None`` where eager has ``None``) and every
    buffer after each step are eager's, exactly in float32 and float64, within tolerance
    otherwise. Returns the jitted module."""
    torch.manual_seed(0)
    model = build().to(dtype).train()
    eager = copy.deepcopy(model)
    jm = jit(model)
    exact = dtype in (torch.float32, torch.float64)

    def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
        assert a.dtype == b.dtype, what
        if exact:
            assert torch.equal(a, b), what
        else:
            torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2, msg=what)

    for step in range(steps):
        x = torch.randn(shape).to(dtype)
        x_j, x_e = x.clone().requires_grad_(), x.clone().requires_grad_()
        out_j, out_e = jm(x_j), eager(x_e)
        same(out_j, out_e, f"output at step {step}")
        (out_j.float() ** 2).sum().backward()
        (out_e.float() ** 2).sum().backward()
        assert x_j.grad is not None and x_e.grad is not None
        same(x_j.grad, x_e.grad, f"the input's gradient at step {step}")
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                same(p.grad, q.grad, f"{name}'s gradient at step {step}")
        for (name, b), c in zip(model.named_buffers(), eager.buffers(), strict=True):
            same(b, c, f"buffer {name} at step {step}")
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    return jm


# --------------------------------------------------------------------------- convolution

_CONVS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1), (2, 4, 11)),
    "conv2d_groups_dilation": (lambda: nn.Conv2d(4, 6, (3, 2), stride=(1, 2), padding=(2, 0),
                                                 dilation=(2, 1), groups=2), (2, 4, 9, 8)),
    "conv2d_depthwise_no_bias": (lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False),
                                 (2, 4, 6, 6)),
    "conv2d_same": (lambda: nn.Conv2d(3, 5, 3, padding="same", dilation=2), (1, 3, 7, 7)),
    "conv2d_valid": (lambda: nn.Conv2d(3, 5, 2, padding="valid"), (2, 3, 5, 5)),
    "conv2d_reflect": (lambda: nn.Conv2d(3, 5, 3, padding=1, padding_mode="reflect"),
                       (2, 3, 6, 6)),
    "conv3d": (lambda: nn.Conv3d(2, 3, (2, 3, 1), stride=(1, 2, 1), padding=(1, 0, 0)),
               (2, 2, 4, 6, 3)),
    "patch_embedding": (lambda: nn.Conv2d(3, 8, 4, stride=4), (2, 3, 16, 16)),
}


@pytest.mark.parametrize("case", list(_CONVS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_convolution_trains_as_eager(case: str, dtype: torch.dtype) -> None:
    """Every convolution option (strides, paddings, ``"same"``/``"valid"``, dilation,
    groups, a padding mode, no bias, 1-3 spatial dims): outputs and gradients as eager's,
    and the program holds ``ltorch.convolution`` and its backward kernel."""
    build, shape = _CONVS[case]
    jm = _train_as_eager(build, shape, dtype)
    assert "tir.convolution(" in str(thunder_ir.last_traces(jm)[-1])
    assert "tir.convolution_backward(" in str(thunder_ir.last_backward_traces(jm)[-1])


def test_convolution_computes_no_gradient_for_an_input_without_grad() -> None:
    """As eager's autograd: the backward kernel is asked only for the gradients that are
    needed (``output_mask``), not the image's."""
    conv = nn.Conv2d(3, 4, 3)
    jm = thunder_ir.jit(conv)
    jm(torch.randn(2, 3, 5, 5)).sum().backward()
    assert "output_mask=(0, 1, 1)" in str(thunder_ir.last_backward_traces(jm)[-1])


def test_convolution_input_gradient_is_eagers() -> None:
    """An input that requires grad gets eager's gradient, through the backward kernel."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.conv2d(x, w, padding=1), w, stride=2).tanh()

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 7, 7, generator=gen, requires_grad=True)
    w = torch.randn(3, 3, 3, 3, generator=gen, requires_grad=True)
    check_against_eager(f, x, w, exact=True)


@pytest.mark.parametrize("case", ["unbatched", "same_even_kernel"])
def test_convolutions_the_op_does_not_take_run_through_the_fallback(case: str) -> None:
    """An unbatched input and a ``"same"`` padding torch pads unevenly take the torch
    fallback: still eager's values and gradients."""
    w = torch.randn(4, 3, 2, 2, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        if case == "unbatched":
            return F.conv2d(x, w, padding=1)
        return F.conv2d(x, w, padding="same")

    x = torch.randn(3, 5, 5) if case == "unbatched" else torch.randn(2, 3, 5, 5)
    check_against_eager(f, x.requires_grad_())
    jf = thunder_ir.jit(f)
    jf(x)
    assert "tir.convolution(" not in str(thunder_ir.last_traces(jf)[-1])


def test_convolution_errors_are_eagers() -> None:
    """A channel mismatch raises where eager raises, naming the user's line."""
    w = torch.randn(4, 3, 3, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w)

    check_against_eager(f, torch.randn(1, 2, 5, 5))
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"test_vision_layers\.py:\d+"):
        thunder_ir.jit(f)(torch.randn(1, 2, 5, 5))


# --------------------------------------------------------------------------- pooling

_POOLS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "resnet_stem": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(),
                                          nn.MaxPool2d(3, stride=2, padding=1)), (2, 3, 9, 9)),
    "ceil_dilation": (lambda: nn.Sequential(nn.Conv2d(2, 3, 1), nn.MaxPool2d(
        (2, 3), stride=(2, 1), dilation=(1, 2), ceil_mode=True)), (1, 2, 7, 8)),
    "ties_after_relu": (lambda: nn.Sequential(nn.Conv2d(2, 3, 1, bias=False), nn.ReLU(),
                                              nn.MaxPool2d(2)), (2, 2, 6, 6)),
    "adaptive_2d_to_1": (lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.AdaptiveAvgPool2d(1),
                                               nn.Flatten()), (2, 2, 6, 5)),
    "adaptive_2d_none": (lambda: nn.Sequential(nn.Conv2d(2, 3, (5, 3)),
                                               nn.AdaptiveAvgPool2d((None, 1))), (2, 2, 5, 6)),
    "adaptive_1d_to_1": (lambda: nn.Sequential(nn.Conv1d(2, 3, 3), nn.AdaptiveAvgPool1d(1)),
                         (2, 2, 9)),
}


@pytest.mark.parametrize("case", list(_POOLS))
def test_pooling_trains_as_eager(case: str) -> None:
    """Max pooling (paddings, strides, dilations, ``ceil_mode``, ties between zeros after a
    relu, where the gradient goes to the first maximum only) and adaptive average pooling
    to size 1: eager's values and gradients, with no torch fallback in the program."""
    build, shape = _POOLS[case]
    jm = _train_as_eager(build, shape)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    assert "call_with_grad" not in fwd, fwd
    if "adaptive" in case:
        assert "torch.mean(" in fwd
    else:
        assert "tir.max_pool2d_with_indices(" in fwd
        assert "tir.max_pool2d_with_indices_backward(" in str(
            thunder_ir.last_backward_traces(jm)[-1])


def test_unflatten_is_a_view_as_in_eager() -> None:
    """``unflatten`` (``nn.Unflatten``, ``-1`` included) traces as a view (no torch
    fallback): eager's values and gradients."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x * 2).unflatten(1, (2, -1)), torch.unflatten(x, -1, (3, 2)).sin()

    check_against_eager(f, torch.randn(2, 6, requires_grad=True), exact=True)
    jf = thunder_ir.jit(f)
    jf(torch.randn(2, 6))
    assert "call" not in str(thunder_ir.last_traces(jf)[0]).replace("torch.call", "")


def test_max_pool_returns_eagers_indices() -> None:
    """``return_indices=True`` (and ``F.max_pool2d_with_indices``): eager's indices."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        return values, indices, F.max_pool2d_with_indices(x.relu(), 2)[1]

    check_against_eager(f, torch.randn(2, 3, 7, 7, requires_grad=True), exact=True)


@pytest.mark.parametrize("case", ["unbatched_max", "adaptive_to_2"])
def test_pools_the_ops_do_not_take_run_through_the_fallback(case: str) -> None:
    """An unbatched max pool and adaptive pooling to other sizes take the torch fallback:
    still eager's values and gradients."""
    def f(x: torch.Tensor) -> torch.Tensor:
        if case == "unbatched_max":
            return F.max_pool2d(x, 2)
        return F.adaptive_avg_pool2d(x, 2)

    x = torch.randn(3, 6, 6) if case == "unbatched_max" else torch.randn(2, 3, 5, 5)
    check_against_eager(f, x.requires_grad_())


# --------------------------------------------------------------------------- batch norm

_NORMS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "batch_norm_1d": (lambda: nn.BatchNorm1d(4), (6, 4)),
    "batch_norm_1d_sequence": (lambda: nn.BatchNorm1d(4, momentum=0.3), (3, 4, 5)),
    "batch_norm_2d_no_affine": (lambda: nn.BatchNorm2d(3, affine=False), (2, 3, 4, 4)),
    "batch_norm_2d_no_running_stats": (
        lambda: nn.BatchNorm2d(3, track_running_stats=False), (2, 3, 4, 4)),
    "batch_norm_3d": (lambda: nn.BatchNorm3d(2, eps=1e-3), (2, 2, 3, 2, 2)),
    "conv_bn_relu": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False),
                                           nn.BatchNorm2d(4), nn.ReLU(),
                                           nn.Conv2d(4, 4, 3, stride=2), nn.BatchNorm2d(4)),
                     (2, 3, 8, 8)),
}


@pytest.mark.parametrize("case", list(_NORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_batch_norm_trains_as_eager(case: str, dtype: torch.dtype) -> None:
    """Training: outputs, gradients, running statistics and ``num_batches_tracked`` after
    every step are eager's (the running statistics' update is written back to the
    buffers), with or without affine params or running statistics; the program holds
    ``ltorch.native_batch_norm`` and its backward kernel."""
    build, shape = _NORMS[case]
    jm = _train_as_eager(build, shape, dtype)
    assert "tir.native_batch_norm(" in str(thunder_ir.last_traces(jm)[-1])
    assert "tir.native_batch_norm_backward(" in str(thunder_ir.last_backward_traces(jm)[-1])


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "frozen"])
def test_batch_norm_in_evaluation_uses_the_running_statistics(grad: bool) -> None:
    """In ``eval()`` batch norm normalizes with the running statistics and leaves them
    alone, under ``no_grad`` and with gradients (a frozen batch norm being fine-tuned
    through): eager's values and gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with torch.no_grad():
        model(torch.randn(4, 3, 6, 6))  # running statistics away from their init
    model.eval()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 3, 6, 6)
    with torch.set_grad_enabled(grad):
        out_j, out_e = thunder_ir.jit(model)(x), eager(x)
    assert torch.equal(out_j, out_e)
    if grad:  # (a cotangent of ones would reach the kernel expanded in eager, contiguous
        # here: its reduction order, so its last bit, follows the layout)
        out_j.square().sum().backward()
        out_e.square().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            assert p.grad is not None and torch.equal(p.grad, q.grad)
    for b, c in zip(model.buffers(), eager.buffers(), strict=True):
        assert torch.equal(b, c)


def test_batch_norm_training_under_no_grad_updates_the_running_statistics() -> None:
    """``train()`` mode under ``no_grad`` (warming up statistics): normalized by the batch,
    running statistics and ``num_batches_tracked`` updated, as eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 6, 6)
            assert torch.equal(jm(x), eager(x))
    for (name, b), c in zip(model.named_buffers(), eager.buffers(), strict=True):
        assert torch.equal(b, c), name


def test_batch_norm_in_bfloat16_runs_through_the_fallback() -> None:
    """Batch norm in a dtype whose statistics' dtype depends on the device takes the torch
    fallback: eager's values, gradients and running statistics."""
    _train_as_eager(lambda: nn.BatchNorm2d(3), (2, 3, 4, 4), torch.bfloat16, steps=2)


def test_batch_norm_with_a_cumulative_average_runs_as_eager() -> None:
    """``momentum=None`` makes ``nn.BatchNorm`` read its step count as a Python number
    (``float(num_batches_tracked)``): each call's value, checked on every call (a program
    per value; it was refused), so outputs and running statistics are eager's."""
    bn = nn.BatchNorm2d(3, momentum=None)
    eager = copy.deepcopy(bn)
    jm = thunder_ir.jit(bn)
    for i in range(4):
        x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jm(x), eager(x))
        for name, buf in eager.named_buffers():
            torch.testing.assert_close(getattr(bn, name), buf)


def test_batch_norm_checks_are_eagers() -> None:
    """``F.batch_norm``'s own checks run as they are: one value per channel in training
    raises eager's error."""
    bn = nn.BatchNorm1d(3)
    check_against_eager(bn, torch.randn(1, 3))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        thunder_ir.jit(bn)(torch.randn(1, 3))


def test_decompositions_train_as_eager() -> None:
    """With no executor claiming them, convolution, batch norm and their backward kernels
    run as their prims decompositions: values, gradients and running statistics within
    float64 rounding of eager's."""
    declining = [TorchExecutor(claims=lambda op: op.name not in (
        "ltorch.convolution", "ltorch.convolution_backward", "ltorch.native_batch_norm",
        "ltorch.native_batch_norm_backward"))]

    def build() -> nn.Module:
        return nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1, groups=2),
                             nn.BatchNorm2d(4), nn.Tanh(), nn.Conv2d(4, 3, 2, dilation=(1, 2)))

    torch.manual_seed(0)
    model = build().double().train()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model, executors=declining)
    for _ in range(2):
        x = torch.randn(2, 2, 9, 9, dtype=torch.float64)
        out_j, out_e = jm(x), eager(x)
        torch.testing.assert_close(out_j, out_e)
        out_j.square().sum().backward()
        out_e.square().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        for b, c in zip(model.buffers(), eager.buffers(), strict=True):
            torch.testing.assert_close(b, c)
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    assert "tir.convolution(" not in fwd and "native_batch_norm(" not in fwd


@pytest.mark.parametrize("rank", [4, 5])
def test_batch_norm_keeps_a_channels_last_layout_as_eager(rank: int) -> None:
    """A channels-last input's batch norm output (training and evaluation) and its input
    gradient are channels-last in eager; the traced layout probe ran ``torch.batch_norm``,
    which returns one tensor of the op's five, and fell back to contiguous."""
    fmt = torch.channels_last if rank == 4 else torch.channels_last_3d
    shape = (2, 3, 4, 4) if rank == 4 else (2, 3, 2, 4, 4)
    torch.manual_seed(0)
    e = nn.BatchNorm2d(3) if rank == 4 else nn.BatchNorm3d(3)
    m = copy.deepcopy(e)
    jm = thunder_ir.jit(m)
    x = torch.randn(shape).to(memory_format=fmt).requires_grad_()
    xj = x.detach().clone().requires_grad_()
    y, yj = e(x), jm(xj)
    assert yj.stride() == y.stride()
    torch.testing.assert_close(yj, y)
    y.square().sum().backward()
    yj.square().sum().backward()
    assert xj.grad is not None and x.grad is not None
    assert xj.grad.stride() == x.grad.stride()
    torch.testing.assert_close(xj.grad, x.grad)
    e.eval()
    m.eval()
    with torch.no_grad():
        assert jm(xj).stride() == e(x).stride()


_BN_LAYOUTS: dict[str, Callable[[], torch.Tensor]] = {
    "transposed 3-d": lambda: torch.randn(2, 4, 4).transpose(1, 2),
    "permuted to channels-last": lambda: torch.randn(2, 3, 3, 4).permute(0, 3, 1, 2),
    "permuted otherwise": lambda: torch.randn(3, 2, 4, 3).permute(1, 2, 0, 3),
    "channels-last slice": lambda: torch.randn(2, 4, 3, 6).to(
        memory_format=torch.channels_last)[..., ::2],
    "channels-last of unit dims": lambda: torch.randn(2, 4, 1, 1).to(
        memory_format=torch.channels_last),
}


@pytest.mark.parametrize("case", sorted(_BN_LAYOUTS))
def test_batch_norm_output_layout_is_eagers_for_any_input_layout(case: str) -> None:
    """The kernel lays its output out in the input's suggested memory format (not the
    input's own strides, as torch's meta kernel does): training and evaluation."""
    torch.manual_seed(0)
    x = _BN_LAYOUTS[case]()
    e = nn.BatchNorm1d(4) if x.dim() == 3 else nn.BatchNorm2d(4)
    m = copy.deepcopy(e)
    jm = thunder_ir.jit(m)
    for training in (True, False):
        e.train(training)
        m.train(training)
        y, yj = e(x), jm(x)
        assert yj.stride() == y.stride(), (case, training)
        torch.testing.assert_close(yj, y)
