"""Hooks as eager runs them: tensor hooks inside ``forward``, modules' full backward hooks
and backward pre-hooks, and forward hooks. Each test runs the same model eagerly and
jitted, and compares outputs, gradients and every hook call with its arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir

torch.manual_seed(0)


def _grads(m: nn.Module) -> dict[str, torch.Tensor | None]:
    return {k: p.grad for k, p in m.named_parameters()}


def _both(make: Callable[[list[Any]], nn.Module], x: torch.Tensor, steps: int = 2
          ) -> None:
    """Runs ``make(log)`` eagerly and jitted for ``steps`` backward passes; the outputs,
    input and parameter gradients and the hook logs must agree."""
    eager, log_e, jitted, log_j = _pair(make)
    for _ in range(steps):
        xe = x.detach().clone().requires_grad_(x.requires_grad)
        xj = x.detach().clone().requires_grad_(x.requires_grad)
        oe, oj = eager(xe), jitted(xj)
        torch.testing.assert_close(oj, oe)
        oe.sum().backward()
        oj.sum().backward()
        if x.requires_grad:
            torch.testing.assert_close(xj.grad, xe.grad)
        ge, gj = _grads(eager), _grads(jitted)
        assert ge.keys() == gj.keys()
        for k in ge:
            torch.testing.assert_close(gj[k], ge[k], msg=k)
    assert len(log_j) == len(log_e) > 0
    for (ne, *ae), (nj, *aj) in zip(log_e, log_j, strict=True):
        assert nj == ne
        torch.testing.assert_close(aj, ae, msg=ne)


def _pair(make: Callable[[list[Any]], nn.Module]
          ) -> tuple[nn.Module, list[Any], nn.Module, list[Any]]:
    """The model eagerly and jitted, built from the same seed, each with its hook log."""
    torch.manual_seed(1)
    log_e: list[Any] = []
    eager = make(log_e)
    torch.manual_seed(1)
    log_j: list[Any] = []
    return eager, log_e, thunder_ir.jit(make(log_j)), log_j


def _tensors(xs: Any) -> Any:
    return tuple(None if t is None else t.detach().clone() for t in xs)


class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


# ---- tensor.register_hook inside forward


class TensorHook(TwoLayer):
    def __init__(self, log: list[Any], scale: float = 3.0) -> None:
        super().__init__()
        self.log, self.scale = log, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        early = h * 2  # a use before the hook is registered: its gradient goes through too

        def hook(g: torch.Tensor) -> torch.Tensor:
            self.log.append(("h", g.detach().clone()))
            return g * self.scale

        h.register_hook(hook)
        return self.fc2(torch.tanh(h)) + early.sum(-1, keepdim=True)


def test_register_hook_on_an_intermediate_sees_and_replaces_its_gradient() -> None:
    _both(TensorHook, torch.randn(2, 4, requires_grad=True))


def test_register_hook_on_the_input_and_a_hook_returning_none() -> None:
    class M(TwoLayer):
        def __init__(self, log: list[Any]) -> None:
            super().__init__()
            self.log = log

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.register_hook(lambda g: self.log.append(("x", g.clone())))
            y = self.fc1(x)
            y.register_hook(lambda g: g.clamp(-0.1, 0.1))
            return self.fc2(y)

    _both(M, torch.randn(3, 4, requires_grad=True))


def test_removed_tensor_hook_is_not_called() -> None:
    calls: list[int] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        handle = y.register_hook(lambda g: calls.append(1) or g * 100)
        handle.remove()
        return (y * y).sum()

    x = torch.randn(3, requires_grad=True)
    thunder_ir.jit(f)(x).backward()
    torch.testing.assert_close(x.grad, 8 * x.detach())
    assert calls == []


def test_register_hook_on_a_tensor_without_grad_raises_eagers_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.register_hook(lambda g: g)
        return y

    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't "
                                           r"require gradient\n  at .*test_hooks.py:\d+"):
        thunder_ir.jit(f)(torch.randn(3))


def test_tensor_hook_under_no_grad_raises_as_eager_does() -> None:
    model = TensorHook([])
    jm = thunder_ir.jit(model)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            model(torch.ones(1, 4))
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            jm(torch.ones(1, 4))
    assert model.log == []


# ---- module backward hooks


def _full_hook(log: list[Any], name: str, scale: float | None = None) -> Callable[..., Any]:
    def hook(mod: nn.Module, grad_in: Any, grad_out: Any) -> Any:
        log.append((f"{name} {type(mod).__name__}", _tensors(grad_in), _tensors(grad_out)))
        if scale is not None:
            return tuple(None if g is None else g * scale for g in grad_in)
        return None

    return hook


def _pre_hook(log: list[Any], name: str, scale: float | None = None) -> Callable[..., Any]:
    def hook(mod: nn.Module, grad_out: Any) -> Any:
        log.append((f"{name} {type(mod).__name__}", _tensors(grad_out)))
        if scale is not None:
            return tuple(None if g is None else g * scale for g in grad_out)
        return None

    return hook


def test_full_backward_hooks_on_submodules_see_eagers_gradients() -> None:
    def make(log: list[Any]) -> nn.Module:
        m = TwoLayer()
        m.fc1.register_full_backward_hook(_full_hook(log, "fc1"))
        m.fc2.register_full_backward_hook(_full_hook(log, "fc2", scale=0.5))
        m.fc2.register_full_backward_pre_hook(_pre_hook(log, "fc2 pre", scale=2.0))
        return m

    _both(make, torch.randn(2, 4, requires_grad=True))


def test_full_backward_hook_on_the_root_and_inputs_without_grad() -> None:
    def make(log: list[Any]) -> nn.Module:
        m = TwoLayer()
        m.register_full_backward_hook(_full_hook(log, "root"))  # x needs no grad: None in
        m.fc2.register_full_backward_hook(_full_hook(log, "fc2"))
        return m

    with pytest.warns(UserWarning, match="Full backward hook is firing"):
        _both(make, torch.randn(2, 4))


def test_full_backward_hook_on_a_module_used_twice() -> None:
    class Twice(nn.Module):
        def __init__(self, log: list[Any]) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.fc.register_full_backward_hook(_full_hook(log, "fc"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.fc(x)))

    _both(Twice, torch.randn(3, 4, requires_grad=True))


def test_backward_hook_receives_the_users_module() -> None:
    seen: list[nn.Module] = []
    m = TwoLayer()
    m.fc1.register_full_backward_hook(lambda mod, gi, go: seen.append(mod))
    thunder_ir.jit(m)(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert seen == [m.fc1]


# ---- forward hooks (traced into the program)


def test_forward_hooks_with_kwargs_and_replacements() -> None:
    def make(log: list[Any]) -> nn.Module:
        m = TwoLayer()

        def pre(mod: nn.Module, args: Any, kwargs: Any) -> Any:
            log.append(("pre", args[0].detach().clone()))
            return (args[0] * 2,), kwargs

        def post(mod: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
            return out + 1

        m.fc1.register_forward_pre_hook(pre, with_kwargs=True)
        m.fc2.register_forward_hook(post)
        return m

    # A forward pre-hook is traced: its tensor math runs on every call, its Python side
    # effects (this log) only while tracing, like any Python in forward.
    eager, _, jm, log_j = _pair(make)
    for _ in range(2):
        x = torch.randn(2, 4)
        torch.testing.assert_close(jm(x), eager(x))
    assert len(log_j) == 1
