"""``join-padded-sums`` in training: a recurrence that reads its input a step at a time
gets one ``cat`` of the per-step gradients instead of a sum of ``T`` zero-padded tensors:
gradients as eager's, and bit for bit those of the program without the pass (the pass's
golden test is ``tests/filecheck/passes/join-padded-sums.mlir``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import thunder_ir
from thunder_ir.passes import padded_sums
from thunder_ir.testing_eager import check_against_eager


def _recurrence(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.zeros(x.shape[0], x.shape[2])
    outs = []
    for t in range(x.shape[1]):
        h = torch.tanh(h * w + x[:, t])
        outs.append(h)
    return torch.stack(outs, 1)


def _every_other_step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Steps 0, 2, 4: the rows between get zeros."""
    return sum(x[:, t] * w * (t + 1) for t in range(0, x.shape[1], 2))  # type: ignore[return-value]


def _slices_and_a_dense_use(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return _recurrence(x, w) + (x * w).sin()


def _negative_zeros(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each step's gradient is -0.0 (the slice times -0.0): the sum makes it +0.0."""
    nz = torch.where(w > 1e9, w, -0.0)
    return sum((x[:, t] * nz).sum() for t in range(x.shape[1]))  # type: ignore[return-value]


def _grad(fn: Callable[..., torch.Tensor], x: torch.Tensor, w: torch.Tensor
          ) -> tuple[torch.Tensor, str]:
    jf = thunder_ir.jit(fn)
    x = x.detach().clone().requires_grad_()
    jf(x, w).sum().backward()
    assert type(x.grad) is torch.Tensor  # a real tensor, never a proxy
    return x.grad, str(thunder_ir.last_backward_traces(jf)[-1])


@pytest.mark.parametrize("fn", [_recurrence, _every_other_step, _slices_and_a_dense_use,
                                _negative_zeros], ids=lambda f: f.__name__)
def test_gradients_are_the_sums_bit_for_bit(fn: Callable[..., torch.Tensor],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    check_against_eager(fn, x, w, exact=True)
    joined, bwd = _grad(fn, x, w)
    assert "prims_pad" not in bwd and bwd.count("prims_cat(") == 1, bwd
    monkeypatch.setattr(padded_sums, "join_padded_sums", lambda fn: 0)
    summed, bwd = _grad(fn, x, w)
    assert "prims_pad" in bwd and "prims_cat(" not in bwd, bwd
    assert torch.equal(joined, summed)
    assert torch.equal(joined.signbit(), summed.signbit())  # no -0.0 where the sum had +0.0
