"""Writes through detached aliases, and arguments written with values that require grad,
against eager (issue 52).

1. ``x.detach().add_(s)`` / ``x.data.mul_(2)`` on an argument leaf that requires grad (or a
   module parameter in forward): eager allows the write (a detached alias is no autograd
   view); the value lands in ``x``'s storage, ``x`` stays the leaf it was, and gradients
   through later uses of ``x`` are eager's.
2. ``x.add_(s)`` with ``x`` not requiring grad and ``s`` requiring grad: eager leaves the
   caller's ``x`` requiring grad, no longer a leaf, with a ``grad_fn`` through which
   gradients reach ``s``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir


def _detach_add(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.detach().add_(s)
    return x * 2


def _data_mul(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.data.mul_(2)
    return x * 2


def _data_slice(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.data[1:].mul_(s[1:])
    return x * x


def _read_then_detach_write(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    y = x * 3
    x.detach().add_(s)
    return y + x


def _no_grad_detach_copy(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x.detach().copy_(s * 2)
    return x.sin()


def _detach_view_write(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[:2].detach().add_(s[:2])
    return (x * s).sum(0, keepdim=True)


DETACHED = [_detach_add, _data_mul, _data_slice, _read_then_detach_write,
            _no_grad_detach_copy, _detach_view_write]


def _run_detached(fn: Callable[..., Any], impl: Callable[..., Any], mode: Any
                  ) -> tuple[Any, ...]:
    torch.manual_seed(0)
    x = torch.randn(3, requires_grad=True)
    s = torch.randn(3)
    v0 = x._version
    with mode():
        y = impl(x, s)
    state = (x.requires_grad, x.is_leaf, x.grad_fn is None, y.requires_grad)
    if y.requires_grad:
        y.sum().backward()
    return y.detach(), x.detach().clone(), state, x._version > v0, x.grad


@pytest.mark.parametrize("mode", [torch.enable_grad, torch.no_grad])
@pytest.mark.parametrize("fn", DETACHED, ids=lambda f: f.__name__)
def test_write_through_a_detached_alias_of_a_leaf(fn: Callable[..., Any], mode: Any) -> None:
    """The write lands in the leaf's storage; the leaf stays a leaf requiring grad; the
    gradient of a later use is eager's (through ``x``, with the written values)."""
    e = _run_detached(fn, fn, mode)
    jf = thunder_ir.jit(fn)
    for _ in range(2):  # the cached call too
        j = _run_detached(fn, jf, mode)
        assert torch.equal(j[0], e[0]) and torch.equal(j[1], e[1])
        assert j[2] == e[2]
        assert j[4] is None if e[4] is None else torch.equal(j[4], e[4])
        assert j[3] == e[3]  # a bump through detach(), none through .data
    assert thunder_ir.cache_misses(jf) == 1


def _data_add_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.data.add_(s)
    return x * 2


def _detach_add_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    d = x.detach()
    d.add_(s)
    return x * 2 + d


def _data_twice(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    d = x.data
    d.add_(s)
    d.mul_(s)
    return x + 1


def _data_assign(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.data = s * 2
    return x - 1


@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("fn", [_data_add_grad, _detach_add_grad, _data_twice, _data_assign],
                         ids=lambda f: f.__name__)
def test_write_through_a_detached_alias_with_a_value_that_requires_grad(
        fn: Callable[..., Any], x_grad: bool) -> None:
    """The alias takes the gradient, the tensor it aliases does not (a tensor that does
    not require grad still does not); version counters as eager's."""
    def run(impl: Callable[..., Any]) -> tuple[Any, ...]:
        torch.manual_seed(0)
        x = torch.randn(3, requires_grad=x_grad)
        s = torch.randn(3, requires_grad=True)
        v0 = x._version
        y = impl(x, s)
        state = (x.requires_grad, x.is_leaf, x.grad_fn is None, y.requires_grad,
                 x._version - v0)
        if y.requires_grad:
            y.sum().backward()
        return y.detach(), x.detach().clone(), state, s.grad, x.grad

    e = run(fn)
    jf = thunder_ir.jit(fn)
    for _ in range(2):
        j = run(jf)
        assert torch.equal(j[0], e[0]) and torch.equal(j[1], e[1])
        assert j[2][:4] == e[2][:4] and (j[2][4] > 0) == (e[2][4] > 0)
        for a, b in zip(j[3:], e[3:], strict=True):
            assert a is None if b is None else torch.equal(a, b)
    assert thunder_ir.cache_misses(jf) == 1


def _saved_then_data_mul(x: torch.Tensor) -> torch.Tensor:
    y = x * x
    x.data.add_(1)
    return y


def _saved_then_data_sin(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    x.data.mul_(2)
    return y * 3


def _saved_view_then_data(x: torch.Tensor) -> torch.Tensor:
    y = x[1:] * x[1:]
    x.data.add_(1)
    return y


def _saved_result_then_data(x: torch.Tensor) -> torch.Tensor:
    y = x.exp()  # saves its result, not x
    x.data.add_(1)
    return y + torch.tanh(x) * x


class _DataEma(nn.Module):
    """Uses its parameter, then moves it through ``.data`` in the same forward."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.w * x * self.w
        self.w.data.mul_(0.5)
        return y


@pytest.mark.parametrize("fn", [_saved_then_data_mul, _saved_then_data_sin,
                                _saved_view_then_data, _saved_result_then_data],
                         ids=lambda f: f.__name__)
def test_a_saved_argument_written_through_data(fn: Callable[..., Any]) -> None:
    """``y = x * x; x.data.add_(1)``: eager's backward silently uses the written values
    (``.data`` bumps no version, the saved ``x`` is the same memory); so does the
    program's, whose residual is the caller's tensor that the write-back changes."""
    out = []
    impls = (fn, thunder_ir.jit(fn))
    for impl in (*impls, impls[1]):
        torch.manual_seed(0)
        x = torch.randn(4, requires_grad=True)
        y = impl(x)
        y.sum().backward()
        out.append((y.detach(), x.detach().clone(), x.grad, x._version))
    for got in out[1:]:
        for a, b in zip(got, out[0], strict=True):
            if isinstance(b, torch.Tensor):
                torch.testing.assert_close(a, b)
            else:
                assert a == b


def test_a_saved_parameter_written_through_data_in_training() -> None:
    torch.manual_seed(0)
    m = _DataEma()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(3):
        x = torch.randn(3)
        for mod in (jm, e):
            mod(x).sum().backward()
        torch.testing.assert_close(m.w.grad, e.w.grad)
        torch.testing.assert_close(m.w.detach(), e.w.detach())
    assert thunder_ir.cache_misses(jm) == 1


def _inter_mul(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h * h
    h.data.add_(1)
    return y


def _inter_view(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h[1:] * h[1:]  # saves a view no name holds
    h.data.add_(1)
    return y


def _inter_view_kept(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    v = h[1:]
    y = v * v
    h.data.add_(1)
    return y + v


def _inter_twice(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h * h
    h.data.add_(1)
    h.data.mul_(2)
    return y


def _inter_data_of_a_view(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h * h
    h[1:].data.add_(1)
    return y


def _inter_used_after(x: torch.Tensor) -> torch.Tensor:
    h = torch.matmul(x.view(2, 2), x.view(2, 2))
    y = h * h
    h.data.add_(1)
    return y + h


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("fn", [_inter_mul, _inter_view, _inter_view_kept, _inter_twice,
                                _inter_data_of_a_view, _inter_used_after],
                         ids=lambda f: f.__name__)
def test_a_saved_intermediate_written_through_data(fn: Callable[..., Any], grad: bool) -> None:
    """``h = x * 2; y = h * h; h.data.add_(1)``: eager's backward of ``h * h`` reads
    ``h``'s new values; so does the program's (an ``autograd.saved_as`` note: the op's
    backward reads the value after the write), its gradient still to ``x``."""
    out = []
    impls = (fn, thunder_ir.jit(fn))
    for impl in (*impls, impls[1]):
        torch.manual_seed(0)
        x = torch.randn(4, requires_grad=grad)
        y = impl(x)
        if grad:
            y.sum().backward()
        out.append((y.detach(), x.detach().clone(), x.grad))
    for got in out[1:]:
        for a, b in zip(got, out[0], strict=True):
            if b is None:
                assert a is None
            else:
                torch.testing.assert_close(a, b)


class _InterModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        y = h * h
        h.data.mul_(0.5)
        return y.sum() + h.sum()


def test_a_saved_intermediate_written_through_data_in_training() -> None:
    torch.manual_seed(0)
    m = _InterModule()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for _ in range(3):
        x = torch.randn(2, 4)
        for mod in (jm, e):
            mod(x).backward()
        for a, b in zip(m.parameters(), e.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
    assert thunder_ir.cache_misses(jm) == 1


def _result_then_data(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h.exp()  # saves its result
    y.data.add_(1)
    return y * 1


def _decomposed_then_data(x: torch.Tensor) -> torch.Tensor:
    h = x * 2
    y = h.sin()  # differentiated through its decomposition
    h.data.mul_(3)
    return y


@pytest.mark.parametrize("fn", [_result_then_data, _decomposed_then_data],
                         ids=lambda f: f.__name__)
def test_a_saved_value_written_through_data_is_refused_clearly(fn: Callable[..., Any]) -> None:
    """Where the program cannot say which value the backward reads after the write (a
    saved result, an op differentiated through its decomposition), its backward raises,
    naming both lines and saying why, rather than give other gradients than eager's."""
    x = torch.randn(3, requires_grad=True)
    y = thunder_ir.jit(fn)(x)
    with pytest.raises(RuntimeError, match=r"(?s)test_detached_writes.py:\d+.*through `\.data`"):
        y.sum().backward()


def test_a_saved_tensor_written_through_detach_raises_at_backward() -> None:
    """``y = x * x; x.detach().add_(1)``: eager's backward raises (the saved ``x`` was
    modified); so does the program's."""
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * x
        x.detach().add_(1)
        return y

    for impl in (f, thunder_ir.jit(f)):
        x = torch.randn(3, requires_grad=True)
        y = impl(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


class _Ema(nn.Module):
    """Writes its own parameters through ``.data`` and ``detach()`` in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.w.data.mul_(0.9)
        y = self.lin(x) * self.w
        with torch.no_grad():
            self.lin.bias.detach().copy_(self.lin.bias * 0.5)
        return y


def test_training_a_module_that_writes_its_parameters_through_detached_aliases() -> None:
    torch.manual_seed(0)
    m = _Ema()
    mj = copy.deepcopy(m)
    jm = thunder_ir.jit(mj)
    oe = torch.optim.SGD(m.parameters(), lr=0.1)
    oj = torch.optim.SGD(mj.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(2, 4)
        outs = []
        for mod, f, opt in ((m, m, oe), (mj, jm, oj)):
            opt.zero_grad()
            y = f(x)
            y.square().sum().backward()
            opt.step()
            outs.append((y.detach(), [(p.detach().clone(), p.grad.clone(), p.is_leaf,
                                       p.requires_grad) for p in mod.parameters()]))
        (ye, pe), (yj, pj) = outs
        assert torch.allclose(yj, ye)
        for (a, ga, la, ra), (b, gb, lb, rb) in zip(pj, pe, strict=True):
            assert torch.allclose(a, b) and torch.allclose(ga, gb) and (la, ra) == (lb, rb)
    with torch.no_grad():
        x = torch.randn(2, 4)
        assert torch.allclose(jm(x), m(x))
    for a, b in zip(mj.parameters(), m.parameters(), strict=True):
        assert torch.allclose(a, b)
    assert thunder_ir.cache_misses(jm) == 2  # one program per grad mode


# ------------------------------------------------ arguments written with values requiring grad


def _add_return_x(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.add_(s)
    return x


def _add_then_use(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.add_(s)
    return x * 2


def _index_add(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.index_add_(0, torch.tensor([0, 2]), s[:2])
    return x.sum()


def _scatter_add(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.scatter_add_(0, torch.tensor([1, 1]), s[:2])
    return x + 1


def _copy(x: torch.Tensor, s: torch.Tensor) -> None:
    x.copy_(s * 3)


def _slice_write(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[1:].mul_(s[1:])
    return x[:1] * 2


def _mul_whole(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.mul_(s)  # the backward needs x's value before the write (eager saves a copy)
    return x.sum()


def _slice_div(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[1:].div_(s[1:])
    return x


WRITTEN = [_add_return_x, _add_then_use, _index_add, _scatter_add, _copy, _slice_write,
           _mul_whole, _slice_div]


def _run_written(impl: Callable[..., Any], mode: Any) -> tuple[Any, ...]:
    torch.manual_seed(0)
    x = torch.randn(3)
    s = torch.randn(3, requires_grad=True)
    v0 = x._version
    with mode():
        y = impl(x, s)
    state = (x.requires_grad, x.is_leaf, x.grad_fn is None, x._version > v0,
             None if y is None else y.requires_grad)
    grads = []
    if x.requires_grad:  # a backward the user runs on x itself, after the call
        (x * x).sum().backward(retain_graph=True)
        grads.append(s.grad.clone())
        s.grad = None
    if y is not None and y.requires_grad:
        y.sum().backward()
        grads.append(s.grad)
    return None if y is None else y.detach(), x.detach().clone(), state, grads


@pytest.mark.parametrize("mode", [torch.enable_grad, torch.no_grad])
@pytest.mark.parametrize("fn", WRITTEN, ids=lambda f: f.__name__)
def test_argument_written_with_a_value_that_requires_grad(fn: Callable[..., Any],
                                                          mode: Any) -> None:
    """The caller's tensor ends with eager's autograd state (requires grad, not a leaf, a
    grad_fn) and gradients reach ``s`` through it as in eager."""
    e = _run_written(fn, mode)
    jf = thunder_ir.jit(fn)
    for _ in range(2):  # the cached call too
        j = _run_written(jf, mode)
        assert (j[0] is None) == (e[0] is None)
        if e[0] is not None:
            assert torch.allclose(j[0], e[0])
        assert torch.allclose(j[1], e[1])
        assert j[2] == e[2]
        assert len(j[3]) == len(e[3])
        for a, b in zip(j[3], e[3], strict=True):
            assert torch.allclose(a, b)
    assert thunder_ir.cache_misses(jf) == 1


class _Accumulate(nn.Module):
    """Writes its input in place with a value computed from its parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, acc: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        acc.add_(self.lin(x))
        return acc.relu().sum()


def test_training_a_module_that_accumulates_into_its_input() -> None:
    torch.manual_seed(0)
    m = _Accumulate()
    mj = copy.deepcopy(m)
    jm = thunder_ir.jit(mj)
    oe = torch.optim.SGD(m.parameters(), lr=0.1)
    oj = torch.optim.SGD(mj.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(2, 4)
        res = []
        for mod, f, opt in ((m, m, oe), (mj, jm, oj)):
            opt.zero_grad()
            acc = torch.ones(2, 4)
            loss = f(acc, x)
            assert acc.requires_grad and not acc.is_leaf and acc.grad_fn is not None
            (loss + acc.square().mean()).backward()
            opt.step()
            res.append((loss.detach(), acc.detach(),
                        [p.detach().clone() for p in mod.parameters()]))
        (le, ae, pe), (lj, aj, pj) = res
        assert torch.allclose(lj, le) and torch.allclose(aj, ae)
        for a, b in zip(pj, pe, strict=True):
            assert torch.allclose(a, b)
    assert thunder_ir.cache_misses(jm) == 1


# ------------------------------------------------ arguments that are not leaves, written in place


def _nonleaf_add(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.add_(s)
    return x * 2


def _nonleaf_mul(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.mul_(s)
    return x.sum()


def _nonleaf_copy(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.copy_(s * 3)
    return x + 1


def _nonleaf_no_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x.mul_(2)
    return x * s


@pytest.mark.parametrize("fn", [_nonleaf_add, _nonleaf_mul, _nonleaf_copy, _nonleaf_no_grad],
                         ids=lambda f: f.__name__)
def test_an_argument_that_is_not_a_leaf_written_in_place(fn: Callable[..., Any]) -> None:
    """The caller's tensor takes the write's history (a grad_fn through which gradients
    reach the earlier graph and ``s``), as eager's; under no_grad it keeps its own."""
    def run(impl: Callable[..., Any]) -> tuple[Any, ...]:
        torch.manual_seed(0)
        w = torch.randn(3, requires_grad=True)
        s = torch.randn(3, requires_grad=True)
        x = w * 1
        y = impl(x, s)
        state = (x.requires_grad, x.is_leaf, x.grad_fn is None, y.requires_grad)
        (y.sum() + (x * x).sum()).backward()
        return y.detach(), x.detach(), state, s.grad, w.grad

    e = run(fn)
    jf = thunder_ir.jit(fn)
    for _ in range(2):
        j = run(jf)
        assert j[2] == e[2]
        for a, b in zip(j[:2] + j[3:], e[:2] + e[3:], strict=True):
            assert torch.allclose(a, b)
    assert thunder_ir.cache_misses(jf) == 1


class _Buffered(nn.Module):
    """Adds a value that requires grad to its buffer on each call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        self.buf.add_(s)
        return self.buf * 2


def test_a_buffer_written_with_a_value_that_requires_grad_on_each_call() -> None:
    """The first call leaves the buffer requiring grad (not a leaf); the next writes it
    again, extending its history, as eager's."""
    res = []
    for wrap in (lambda m: m, thunder_ir.jit):
        m = _Buffered()
        f = wrap(m)
        s = torch.ones(3, requires_grad=True)
        out = []
        for _ in range(3):
            y = f(s)
            out.append((y.detach(), m.buf.detach().clone(), m.buf.requires_grad,
                        m.buf.is_leaf))
        (y.sum() + m.buf.sum()).backward()
        res.append((out, s.grad))
    (oe, ge), (oj, gj) = res
    for a, b in zip(oj, oe, strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and a[2:] == b[2:]
    assert torch.equal(gj, ge)


def _alias_then_base_no_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    d = x.detach()
    d.add_(s)
    with torch.no_grad():
        x.mul_(2)
    return d * x


def _data_alias_then_base_no_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    d = x.data
    d.mul_(s)
    with torch.no_grad():
        x.add_(1)
    return d.sin() + x


@pytest.mark.parametrize("fn", [_alias_then_base_no_grad, _data_alias_then_base_no_grad],
                         ids=lambda f: f.__name__)
def test_a_detached_alias_with_a_gradient_of_its_own_sees_a_later_write(
        fn: Callable[..., Any]) -> None:
    """The alias keeps its own history (the gradient to ``s``) and takes the values a
    later write to its base leaves, as eager's."""
    def run(impl: Callable[..., Any]) -> tuple[Any, ...]:
        torch.manual_seed(0)
        x = torch.randn(3, requires_grad=True)
        s = torch.randn(3, requires_grad=True)
        v0 = x._version
        y = impl(x, s)
        state = (y.requires_grad, x.requires_grad, x.is_leaf, x._version > v0)
        y.sum().backward()
        return y.detach(), x.detach().clone(), state, s.grad, x.grad

    e = run(fn)
    jf = thunder_ir.jit(fn)
    for _ in range(2):
        j = run(jf)
        assert j[2] == e[2]
        for a, b in zip(j[:2] + j[3:], e[:2] + e[3:], strict=True):
            assert a is None if b is None else torch.allclose(a, b)
    assert thunder_ir.cache_misses(jf) == 1


def test_a_returned_detached_alias_is_a_new_tensor() -> None:
    """``return x.detach()`` of an argument that does not require grad: eager returns a
    new tensor sharing ``x``'s memory, not ``x`` (its ``requires_grad_()`` leaves ``x``
    as it was)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.detach()

    jf = thunder_ir.jit(f)
    for impl in (f, jf, jf):
        x = torch.zeros(3)
        y = impl(x)
        assert y is not x and y.data_ptr() == x.data_ptr()
        y.requires_grad_()
        assert not x.requires_grad
