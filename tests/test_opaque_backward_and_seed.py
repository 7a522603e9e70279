"""A custom ``autograd.Function`` whose backward cannot be traced, and ``torch.seed()``
(issue 52: Reformer's reversible layers train under ``jit``).

- A backward that recomputes part of the forward with grad enabled and calls
  ``.backward()`` / ``torch.autograd.grad`` / ``torch.autograd.backward`` inside runs at
  run time, as eager's engine runs it: on the real cotangents, with a ``ctx`` holding the
  forward's real tensors and the user's modules; the gradients it accumulates into
  parameters and the ones it returns are eager's.
- ``torch.seed()`` is drawn by the program on every call: the module attribute it is
  stored in holds each call's Python ``int``, reseeding with which reproduces the call's
  draws; the generator is left as eager's; one program for every call.
"""

from __future__ import annotations

import copy
import gc
import sys
import weakref
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir


class _Recompute(torch.autograd.Function):
    """Saves only its input (detached) and recomputes ``lin`` in its backward, calling
    ``.backward()`` there (the parameters' gradients accumulate straight into ``.grad``);
    ``how`` picks ``.backward()``, ``torch.autograd.grad`` or ``torch.autograd.backward``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lin: nn.Module, how: str) -> torch.Tensor:
        ctx.save_for_backward(x.detach())
        ctx.parts = (lin, [x.detach() * 2])  # a module and a tensor inside containers
        ctx.how = how
        return torch.tanh(lin(x))

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        lin, (x2,) = ctx.parts
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            y = torch.tanh(lin(x)) + 0 * x2
            if ctx.how == "grad":
                (gx,) = torch.autograd.grad(y, x, g)
                return gx, None, None
            if ctx.how == "autograd.backward":
                torch.autograd.backward(y, g)
            else:
                y.backward(g)
        return x.grad, None, None


class _Model(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.lin = nn.Linear(4, 4)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Recompute.apply(self.pre(x) * 2, self.lin, self.how).square().sum()


def _grads(m: nn.Module) -> list[torch.Tensor | None]:
    return [p.grad for p in m.parameters()]


@pytest.mark.parametrize("how", ["backward", "grad", "autograd.backward"])
def test_custom_backward_calling_backward_runs_as_eager(how: str) -> None:
    """Loss, input and parameter gradients (accumulated over two calls without zeroing,
    and None for ``lin`` under ``torch.autograd.grad``, as eager), the parameters after
    SGD steps: eager's; one program."""
    torch.manual_seed(0)
    model = _Model(how)
    mine = copy.deepcopy(model)
    jm = thunder_ir.jit(mine)
    opt_e = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(mine.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(3, 4, requires_grad=True)
        xj = x.detach().clone().requires_grad_(True)
        for _ in range(2):  # (gradients accumulate)
            le, lj = model(x), jm(xj)
            torch.testing.assert_close(lj, le)
            le.backward()
            lj.backward()
        torch.testing.assert_close(xj.grad, x.grad)
        for ge, gj in zip(_grads(model), _grads(mine), strict=True):
            assert (ge is None) == (gj is None), step
            if ge is not None:
                torch.testing.assert_close(gj, ge)
        opt_e.step(), opt_j.step()
        opt_e.zero_grad(), opt_j.zero_grad()
        for p, q in zip(mine.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(p, q)
    if how == "grad":
        assert mine.lin.weight.grad is None and model.lin.weight.grad is None
    assert thunder_ir.cache_misses(jm) == 1


def test_a_custom_backwards_state_does_not_keep_the_model_alive() -> None:
    """The state a program's run-time backward keeps (the user's modules its ``ctx``
    holds) does not keep the model alive once the jitted module is dropped."""
    m = _Model("backward")
    jm = thunder_ir.jit(m)
    jm(torch.randn(3, 4, requires_grad=True)).backward()
    ref = weakref.ref(m.lin)
    del m, jm
    gc.collect()
    assert ref() is None


def test_custom_backward_ctx_holding_a_tensor_in_an_object_is_refused() -> None:
    """A tensor inside a plain object on ``ctx`` cannot be rebuilt with each call's
    values: refused naming the line."""

    class Box:
        def __init__(self, t: torch.Tensor) -> None:
            self.t = t

    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.box = Box(x * 2)
            return x * 3

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            with torch.enable_grad():
                t = ctx.box.t.detach().requires_grad_(True)
                (t * 3).sum().backward()
            return g * 3

    jf = thunder_ir.jit(lambda x: F.apply(x))
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"test_opaque_backward_and_seed"):
        jf(torch.randn(2, requires_grad=True))


class _Seeded(nn.Module):
    """Reformer's form: a seed drawn with ``torch.seed()`` each call, kept on the module,
    the generator reseeded with it, then random draws."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seed: int | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seed = int(torch.seed() % sys.maxsize)
        torch.manual_seed(self.seed)
        return nn.functional.dropout(self.lin(x), 0.5) + torch.rand(x.shape)


def test_torch_seed_is_drawn_on_every_call() -> None:
    """The attribute holds each call's Python int (a new one each call); reseeding eager
    with it reproduces the call's result, and the generator state after the call is the
    one eager leaves after that reseeding and those draws; one program."""
    m = _Seeded()
    jm = thunder_ir.jit(m)
    x = torch.randn(3, 4)
    seen = set()
    for _ in range(4):
        y = jm(x)
        after = torch.get_rng_state()
        s = m.seed
        assert type(s) is int and 0 <= s < sys.maxsize
        seen.add(s)
        torch.manual_seed(s)
        with torch.no_grad():
            expected = nn.functional.dropout(m.lin(x), 0.5) + torch.rand(x.shape)
        torch.testing.assert_close(y, expected)
        assert torch.equal(torch.get_rng_state(), after)
    assert len(seen) == 4
    assert thunder_ir.cache_misses(jm) == 1


def test_torch_seed_int_used_otherwise_is_refused_leaving_the_generator() -> None:
    """``int()`` of a seed that is not stored on a module at once would keep this call's
    seed: refused naming the line; the generator is as it was."""

    def f(x: torch.Tensor) -> torch.Tensor:
        s = int(torch.seed() % 1000)
        torch.manual_seed(s + 1)
        return x + torch.rand(x.shape)

    torch.manual_seed(5)
    x = torch.randn(3)
    before = torch.get_rng_state()
    jf = thunder_ir.jit(f)
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_opaque_backward_and_seed\.py:\d+: int\(\) of a number "
                             r"computed from torch\.seed\(\)"):
        jf(x)
    assert torch.equal(torch.get_rng_state(), before)


def test_torch_seed_without_int_reseeds_each_call() -> None:
    """``torch.manual_seed(torch.seed())``: the program reseeds with each call's draw
    (two calls draw differently; the result is a fresh draw of ``rand``)."""
    jf = thunder_ir.jit(lambda x: (torch.manual_seed(torch.seed()), x + torch.rand(x.shape))[1])
    x = torch.zeros(1000)
    a, b = jf(x), jf(x)
    assert not torch.equal(a, b)
    assert 0.4 < float(a.mean()) < 0.6
    assert thunder_ir.cache_misses(jf) == 1


def test_torch_seed_int_stored_around_module_setattr_is_refused() -> None:
    """A module class whose own ``__setattr__`` stores the seed without
    ``nn.Module.__setattr__`` would keep the traced ``int``: refused naming the line,
    the module and the generator as they were."""

    class Own(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seed: int | None = None

        def __setattr__(self, name: str, value: Any) -> None:
            if name == "seed":
                object.__setattr__(self, name, value)
            else:
                super().__setattr__(name, value)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seed = int(torch.seed() % sys.maxsize)
            torch.manual_seed(self.seed)
            return x + torch.rand(x.shape)

    m = Own()
    x = torch.zeros(3)
    before = torch.get_rng_state()
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_opaque_backward_and_seed\.py:\d+: .*number computed "
                             r"from torch\.seed\(\) is stored on a module whose __setattr__"):
        thunder_ir.jit(m)(x)
    assert m.seed is None
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("reseed", [lambda: torch.default_generator.seed(),
                                    lambda: torch.default_generator.manual_seed(1234)],
                         ids=["seed", "manual_seed"])
def test_reseeding_a_generator_object_is_refused(reseed: Any) -> None:
    """``Generator.seed()`` / ``.manual_seed()`` on the default generator object (a C
    method: Reformer calls ``torch.cuda.default_generators[i].seed()`` where CUDA is
    present) would reseed once, while traced: refused, the generator as it was."""

    def f(x: torch.Tensor) -> torch.Tensor:
        reseed()
        return x + torch.rand(x.shape)

    torch.manual_seed(3)
    x = torch.zeros(3)
    before = torch.get_rng_state()
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"reseeded through its own methods"):
        thunder_ir.jit(f)(x)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.default_generator.initial_seed() == 3


def test_torch_seed_returned_or_stored_is_each_calls_number() -> None:
    """``torch.seed()`` returned, or stored on a module without ``int()``: each call's
    Python int (up to ``2**64 - 1``, as eager's: half of them do not fit an int64),
    reseeding with which reproduces the call's draws; one program each."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, int]:
        s = torch.seed()
        return x + torch.rand(3), s

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.s = torch.seed()
            return x + torch.rand(3)

    jf = thunder_ir.jit(f)
    m = M()
    jm = thunder_ir.jit(m)
    for _ in range(6):
        y, s = jf(torch.zeros(3))
        assert type(s) is int and 0 <= s < 2**64
        torch.manual_seed(s)
        assert torch.equal(y, torch.rand(3))
        y = jm(torch.zeros(3))
        assert type(m.s) is int
        torch.manual_seed(m.s)
        assert torch.equal(y, torch.rand(3))
    assert thunder_ir.cache_misses(jf) == 1 and thunder_ir.cache_misses(jm) == 1


def test_custom_backward_at_run_time_conforms_gradients_as_eager() -> None:
    """A run-time backward's gradient of another shape that the input broadcasts to is
    summed to it, and one of another dtype cast, as eager's engine does; over lengths
    (the shapes the call takes are each call's)."""

    class Widen(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x * w

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                t = x.detach().requires_grad_(True)
                (t * 2).sum().backward()
            return (g * x * t.grad / 2).float(), None  # [n, 4] float32 for w: [4] float64

    def f(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return Widen.apply(w, x).sum()

    jf = thunder_ir.jit(f)
    for n in (3, 5, 7):
        x = torch.randn(n, 4, dtype=torch.float64)
        w = torch.randn(4, dtype=torch.float64, requires_grad=True)
        wj = w.detach().clone().requires_grad_(True)
        f(w, x).backward()
        jf(wj, x).backward()
        assert wj.grad is not None and wj.grad.dtype == torch.float64
        torch.testing.assert_close(wj.grad, w.grad)
    assert thunder_ir.cache_misses(jf) <= 2
