"""In-place writes to arguments, against eager (issue 52): writes through a view of an
argument that requires grad and is not a leaf (values, the argument's autograd state,
gradients to the earlier graph and to the written value), and the version counter of
every written tensor (eager bumps it once per in-place write, not through ``.data``).

What still differs from eager, on purpose: a written argument's ``grad_fn`` is the
write-back's ``CopyBackwards`` (eager's is the last op's, ``AddBackward0`` or
``CopySlices``), which passes the gradient to the program's one autograd node: gradients
are eager's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir


def _slice_add(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[1:].add_(s[1:])
    return x * 2


def _slice_mul(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[1:].mul_(s[1:])
    return x.sum()


def _column_copy(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.view(3, 1)[:2, 0].copy_(s[:2])
    return x + 1


def _read_then_write(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    y = x * 3
    x[1:].add_(s[1:])
    return y + x


def _two_views(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[:1].mul_(s[:1])
    x[2:].add_(s[2:] * 2)
    return x.exp()


def _no_grad_view(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x[1:].mul_(2)
    return x * s


VIEW_WRITES = [_slice_add, _slice_mul, _column_copy, _read_then_write, _two_views,
               _no_grad_view]


def _run_view_write(impl: Callable[..., Any], x_grad: bool) -> tuple[Any, ...]:
    torch.manual_seed(0)
    w = torch.randn(3, requires_grad=True)
    s = torch.randn(3, requires_grad=True)
    x = w * 1 if x_grad else torch.randn(3)
    v0 = x._version
    y = impl(x, s)
    state = (x.requires_grad, x.is_leaf, x.grad_fn is None, y.requires_grad,
             x._version - v0)
    (y.sum() + (x * x).sum()).backward()
    return y.detach(), x.detach(), state, s.grad, w.grad


@pytest.mark.parametrize("x_grad", [True, False], ids=["nonleaf", "no_grad_arg"])
@pytest.mark.parametrize("fn", VIEW_WRITES, ids=lambda f: f.__name__)
def test_a_write_through_a_view_of_an_argument(fn: Callable[..., Any], x_grad: bool) -> None:
    """``x[1:].add_(s[1:])`` with ``x = w * 1`` (or ``x`` not requiring grad): eager's
    values, autograd state and version count, and gradients to ``w`` and ``s`` through the
    written ``x`` and the output (was refused where ``x`` required grad)."""
    e = _run_view_write(fn, x_grad)
    jf = thunder_ir.jit(fn)
    for _ in range(2):  # the cached call too
        j = _run_view_write(jf, x_grad)
        assert j[2] == e[2]
        for a, b in zip(j[:2] + j[3:], e[:2] + e[3:], strict=True):
            if b is None:
                assert a is None
            else:
                torch.testing.assert_close(a, b)
    assert thunder_ir.cache_misses(jf) == 1


# ------------------------------------------------------------------------ version counts


def _two_writes(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    x.mul_(2)
    return x + s


def _through_views(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x[0] = 1.0
    x[1:].add_(s[1:])
    return x * 1


def _detached_then_data(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.detach().add_(1)  # bumps (shares x's counter)
    x.data.mul_(2)  # does not
    return x * s


def _only_data(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.data.add_(1)
    return x * s


def _under_no_grad(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        x.mul_(2)
        x.add_(s)
    return x * 1


def _overwrites(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.zero_()
    x.fill_(2.0)
    x.copy_(s)
    return x + 1


def _loop(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    for _ in range(3):
        x.clamp_(min=-1.0)
    return x + s


def _out_argument(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    torch.add(s.detach(), 1, out=x)
    return x * 2


def _returns_a_view(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    x.mul_(2)
    return x[1:]


WRITES = [_two_writes, _through_views, _detached_then_data, _only_data, _under_no_grad,
          _overwrites, _loop, _out_argument, _returns_a_view]


def _versions(impl: Callable[..., Any], s_grad: bool) -> tuple[Any, ...]:
    torch.manual_seed(0)
    x = torch.randn(3)
    s = torch.randn(3, requires_grad=s_grad)
    v0 = x._version
    y = impl(x, s)
    return x._version - v0, x.detach().clone(), y.detach().clone()


@pytest.mark.parametrize("s_grad", [False, True])
@pytest.mark.parametrize("fn", WRITES, ids=lambda f: f.__name__)
def test_version_counts_are_eagers(fn: Callable[..., Any], s_grad: bool) -> None:
    """The caller's version counter moves as eager's: once per in-place write (views and
    detached aliases share it), not for writes through ``.data``."""
    e = _versions(fn, s_grad)
    jf = thunder_ir.jit(fn)
    for _ in range(2):
        j = _versions(jf, s_grad)
        assert j[0] == e[0]
        torch.testing.assert_close(j[1], e[1])
        torch.testing.assert_close(j[2], e[2])


def test_version_counts_of_arguments_sharing_memory() -> None:
    """Two views of one tensor passed as two arguments, three writes: the shared counter
    moves three times, as eager's (not once per write-back)."""
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        b.mul_(2)
        b.add_(1)
        return a.sum() + b.sum()

    got = []
    for impl in (f, thunder_ir.jit(f), thunder_ir.jit(f)):
        base = torch.zeros(4)
        a, b = base[:2], base[1:]
        v0 = base._version
        impl(a, b)
        got.append((base._version - v0, a._version, b._version, base.tolist()))
    assert got[1] == got[0] and got[2] == got[0]


class _Buffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(3))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        self.b.add_(s)
        self.b.mul_(0.5)
        return self.b * 1


def test_a_buffers_version_count_is_eagers() -> None:
    m, e = _Buffer(), _Buffer()
    jm = thunder_ir.jit(m)
    for _ in range(3):
        s = torch.randn(3)
        v0, w0 = m.b._version, e.b._version
        torch.testing.assert_close(jm(s), e(s))
        assert m.b._version - v0 == e.b._version - w0 == 2
    assert thunder_ir.cache_misses(jm) == 1


@pytest.mark.parametrize("make,shape,channels_last,grad", [
    (lambda: nn.BatchNorm1d(3), (4, 3), False, True),
    (lambda: nn.BatchNorm2d(3), (2, 3, 4, 4), True, True),
    (lambda: nn.BatchNorm1d(3, momentum=None), (4, 3), False, False),
])
def test_batch_norm_statistics_keep_their_version_as_eager(
        make: Callable[[], nn.Module], shape: tuple[int, ...], channels_last: bool,
        grad: bool) -> None:
    """Eager's batch-norm kernel writes the running statistics without a version bump;
    ``num_batches_tracked += 1`` bumps its own: the program's write-back ends the same."""
    torch.manual_seed(0)
    e, m = make(), make()
    jm = thunder_ir.jit(m)
    for _ in range(3):
        x = torch.randn(shape)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        v0 = [b._version for b in m.buffers()]
        w0 = [b._version for b in e.buffers()]
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(jm(x), e(x))
        moved = [b._version - v for b, v in zip(m.buffers(), v0, strict=True)]
        assert moved == [b._version - w for b, w in zip(e.buffers(), w0, strict=True)]
        assert moved == [0, 0, 1]
    for a, b in zip(m.buffers(), e.buffers(), strict=True):
        torch.testing.assert_close(a, b)


def test_a_written_argument_saved_by_an_earlier_graph_raises_as_eager() -> None:
    """A graph built before the call saved ``x``; the call writes ``x`` twice: eager's
    backward of that graph raises naming the version it expected; so does this one,
    with the same versions."""
    def f(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        x.mul_(2)
        return x

    msgs = []
    for impl in (f, thunder_ir.jit(f)):
        w = torch.randn(3, requires_grad=True)
        x = torch.randn(3)
        y = w * x  # saves x (version 0)
        impl(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as err:
            y.sum().backward()
        msgs.append(str(err.value).split("Hint")[0])
    assert msgs[0] == msgs[1] and "is at version 2" in msgs[0]


# ---------------------------------------- a written argument that did not require grad


def _grad_add(b: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b.add_(k)
    return b * 2


def _grad_add_mul(b: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b.add_(k)
    b.mul_(k)  # b is no leaf now: eager writes it again
    return b * 2


def _grad_add_view_mul(b: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b.add_(k)
    b[1:].mul_(k[1:])
    return b * 2


def _grad_add_transpose(b: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    b.add_(k)
    b.t_()
    return b * 2


GRAD_WRITES = [_grad_add, _grad_add_mul, _grad_add_view_mul, _grad_add_transpose]


def _grad_written(impl: Callable[..., Any], b: torch.Tensor, k: torch.Tensor,
                  state: Callable[[], torch.Tensor]) -> tuple[Any, ...]:
    """One call writing ``b`` (an argument, or a buffer ``state()``) with ``k``, which
    requires grad: the output, ``b``'s autograd state and version count, ``k``'s gradient
    through the output, then through ``b`` itself."""
    v0 = state()._version
    out = impl(b, k) if b is not None else impl(k)
    written = state()
    facts = (out.requires_grad, out.grad_fn is not None, written.requires_grad,
             written.is_leaf, written.grad_fn is not None, written._version - v0,
             written.stride())
    out.sum().backward(retain_graph=True)  # (eager's earlier nodes may have saved tensors)
    through_out = k.grad.clone()
    k.grad = None
    (written * written).sum().backward(retain_graph=True)
    through_b = k.grad.clone()
    k.grad = None
    return facts, out.detach().clone(), written.detach().clone(), through_out, through_b


@pytest.mark.parametrize("fn", GRAD_WRITES, ids=lambda f: f.__name__)
def test_an_argument_without_grad_written_with_grad_twice(fn: Callable[..., Any]) -> None:
    """``b.add_(k); b.mul_(k)`` with ``b`` not requiring grad and ``k`` requiring it: the
    first write makes ``b`` a non-leaf, which eager then writes again (was refused as a
    leaf that requires grad). Values, ``b``'s autograd state and version count, and ``k``'s
    gradients through the output and through ``b`` are eager's, over two calls (the second
    call's ``b`` is a non-leaf from the first's graph)."""
    got = []
    for impl in (fn, thunder_ir.jit(fn)):
        b = torch.ones(3, 3) if fn is _grad_add_transpose else torch.ones(3)
        k = torch.full(b.shape, 2.0, requires_grad=True)
        got.append([_grad_written(impl, b, k, lambda b=b: b) for _ in range(2)])
    for e, j in zip(*got, strict=True):
        assert j[0] == e[0]
        for a, x in zip(j[1:], e[1:], strict=True):
            torch.testing.assert_close(a, x)


class _GradBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.ones(3))

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        self.b.add_(k)
        self.b.mul_(k)
        return self.b * 2


def test_a_buffer_written_with_grad_twice_is_eagers() -> None:
    """The same two writes to a module's buffer: the buffer ends a non-leaf with a
    ``grad_fn``, eager's values and gradients, over two calls."""
    got = []
    for jit in (False, True):
        m = _GradBuffer()
        impl = thunder_ir.jit(m) if jit else m
        k = torch.full((3,), 2.0, requires_grad=True)
        got.append([_grad_written(impl, None, k, lambda m=m: m.b) for _ in range(2)])
    for e, j in zip(*got, strict=True):
        assert j[0] == e[0]
        for a, x in zip(j[1:], e[1:], strict=True):
            torch.testing.assert_close(a, x)


def _no_grad_then_grad(w: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        w.mul_(2)
    w.add_(1)
    return w


def _leaf_transpose(w: torch.Tensor) -> torch.Tensor:
    w.t_()
    return w


@pytest.mark.parametrize("fn", [_no_grad_then_grad, _leaf_transpose],
                         ids=lambda f: f.__name__)
def test_a_leaf_that_requires_grad_still_refuses_a_write(fn: Callable[..., Any]) -> None:
    """A leaf that requires grad stays one after a write under no-grad: eager's error, and
    the caller's tensor as it was."""
    for impl in (fn, thunder_ir.jit(fn)):
        w = torch.ones(2, 2, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation"):
            impl(w)
        if impl is not fn:
            assert torch.equal(w.detach(), torch.ones(2, 2)) and w._version == 0


def test_a_second_backward_through_a_node_that_saved_nothing_runs_as_eager() -> None:
    """``b.add_(k); return b * 2``: the output's backward, then one through ``b`` without
    ``retain_graph``: eager's nodes saved nothing, so both run; so does the program's
    node, which saved no residual (was "backward through the graph a second time"). A
    program that saved one still raises eager's error (`test_training`)."""
    got = []
    for impl in (_grad_add, thunder_ir.jit(_grad_add)):
        for _ in range(2):
            b, k = torch.ones(3), torch.full((3,), 2.0, requires_grad=True)
            out = impl(b, k)
            out.sum().backward()
            first = k.grad.clone()
            b.sum().backward()
            got.append((out.detach(), b.detach(), first, k.grad, b._version))
    for j, e in zip(got[2:], got[:2], strict=True):
        assert j[4] == e[4]
        for a, x in zip(j[:4], e[:4], strict=True):
            torch.testing.assert_close(a, x)
