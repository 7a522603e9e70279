"""Tensors made inside a jitted function that require grad (``torch.zeros(...,
requires_grad=True)``, ``t.requires_grad_()``): eager's new leaf on each call.

Used inside only, the results computed from it require grad as eager's do and the inputs'
gradients are eager's. Returned or stored where the caller can see it, thunder_ir raises a
clear error naming the user's line (the program's other results cannot depend on a tensor
it makes itself through autograd: its ``.grad`` would stay None), and leaves the caller's
objects as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.testing_eager import check_against_eager

FACTORIES: dict[str, Callable[[], torch.Tensor]] = {
    "zeros": lambda: torch.zeros(3, requires_grad=True),
    "ones": lambda: torch.ones(3, requires_grad=True),
    "full": lambda: torch.full((3,), 1.5, requires_grad=True),
    "arange": lambda: torch.arange(3.0, requires_grad=True),
    "tensor": lambda: torch.tensor([1.0, -2.0, 3.0], requires_grad=True),
    "randn": lambda: torch.randn(3, requires_grad=True),
    "scalar_tensor": lambda: torch.tensor(2.0, requires_grad=True),
    "ones_like": lambda: torch.ones_like(torch.zeros(3), requires_grad=True),
    "new_full": lambda: torch.zeros(3).new_full((3,), 0.5, requires_grad=True),
    "rand_double": lambda: torch.rand(3, dtype=torch.float64, requires_grad=True),
    "requires_grad_": lambda: torch.linspace(0, 1, 3).requires_grad_(),
    "set_flag": lambda: _flagged(torch.ones(3) * 2),
}


def _flagged(t: torch.Tensor) -> torch.Tensor:
    t.requires_grad = True
    return t


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_a_leaf_made_inside_and_used_is_eagers(name: str) -> None:
    """The results computed from the new leaf require grad (eager: a ``grad_fn`` reaching
    the leaf), and the input's gradient is eager's."""
    make = FACTORIES[name]

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = make()
        return (x * w).sum(), w.to(x.dtype) * 2

    check_against_eager(f, torch.randn(3, requires_grad=True))  # (requires_grad compared)


def test_a_leaf_made_inside_with_no_input_requiring_grad() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        w = torch.ones(3, requires_grad=True)
        return (x * w).sin()

    check_against_eager(f, torch.randn(3))


def test_a_leaf_made_under_no_grad_then_used() -> None:
    """A factory's ``requires_grad=True`` holds under no-grad too (eager's leaf)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            w = torch.full((3,), 3.0, requires_grad=True)
        return x * w

    check_against_eager(f, torch.randn(3, requires_grad=True))


def test_each_call_is_eagers() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        w = torch.ones(3, requires_grad=True)
        return (x * w * w).sum()

    jf = thunder_ir.jit(f)
    for _ in range(2):
        xe = torch.randn(3, requires_grad=True)
        xj = xe.detach().clone().requires_grad_()
        le, lj = f(xe), jf(xj)
        assert lj.requires_grad == le.requires_grad
        le.backward()
        lj.backward()
        assert torch.allclose(lj, le) and torch.equal(xj.grad, xe.grad)


def test_an_integer_factory_requiring_grad_raises_eagers_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.zeros(3, dtype=torch.int64, requires_grad=True)

    with pytest.raises(RuntimeError) as eager:
        f(torch.ones(3))
    with pytest.raises(RuntimeError, match="test_inner_leaves") as got:
        thunder_ir.jit(f)(torch.ones(3))
    assert str(eager.value) in str(got.value)


def _returns_leaf(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.zeros(3, requires_grad=True)
    return (x * 2).sum() + w.sum(), w


def _returns_flagged(x: torch.Tensor) -> list[torch.Tensor]:
    w = torch.zeros(3).requires_grad_()
    return [(x * w).sum(), w]


def _returns_only_leaf(x: torch.Tensor) -> torch.Tensor:
    return torch.randn(3, requires_grad=True)


def _returns_written_leaf(x: torch.Tensor) -> dict[str, Any]:
    w = torch.ones(3, requires_grad=True)
    with torch.no_grad():
        w.mul_(2)
    return {"loss": (x * w).sum(), "w": w}


@pytest.mark.parametrize("fn", [_returns_leaf, _returns_flagged, _returns_only_leaf,
                                _returns_written_leaf], ids=lambda f: f.__name__)
def test_a_returned_leaf_made_inside_raises_naming_the_line(fn: Any) -> None:
    """Eager returns a new leaf each call that the loss reaches through autograd
    (``w.grad`` filled by backward): not supported yet, so a clear error at trace time
    (not a tensor that does not require grad, or a non-leaf whose ``.grad`` stays None)."""
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(ThunderTraceError, match=r"test_inner_leaves\.py:\d+: a tensor made "
                       r"inside the jitted function with requires_grad=True .* is returned"
                       r".*outside the jitted function and pass it in"):
        thunder_ir.jit(fn)(x)
    assert x.grad is None and torch.equal(x.detach(), torch.ones(3))


class _Stores(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.state: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.state = torch.zeros(3, requires_grad=True)
        return self.lin(x) + self.state


def test_a_leaf_made_inside_and_stored_raises_and_leaves_the_module() -> None:
    m = _Stores()
    with pytest.raises(ThunderTraceError, match=r"test_inner_leaves\.py:\d+: .* is stored in "
                       r"self\.state"):
        thunder_ir.jit(m)(torch.ones(3))
    assert m.state is None
