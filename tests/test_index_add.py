"""``index_add`` and ``index_add_`` as a traced op (``ltorch.index_add``), and
``scatter_add``/``scatter_add_`` as ``prims.scatter_add``, against eager.

The functional and in-place forms, ``alpha``, negative dims, int32 indices, repeated
positions, writes into arguments, intermediates and views, eager's errors; gradients for
both ``input`` and ``source`` from the op's own VJP (no opaque call torch differentiates);
and an index whose length only the values decide (an unbacked symbol): one program for
every length, forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.testing_eager import check_against_eager


def _traces(jf: Any) -> tuple[str, str]:
    fwd = str(thunder_ir.last_traces(jf)[-1])
    bwd = thunder_ir.last_backward_traces(jf)
    return fwd, (str(bwd[-1]) if bwd else "")


def _no_opaque_index_add(jf: Any, backward: bool = True) -> None:
    """The forward calls ``torch.index_add`` itself (not as a torch call torch
    differentiates); with ``backward``, the backward has no opaque VJP at all (a write
    through a view of an intermediate has one: the write itself, `scatter_strided`)."""
    fwd, bwd = _traces(jf)
    assert "torch.index_add(" in fwd, fwd
    assert not [ln for ln in fwd.splitlines() if "call_with_grad" in ln and "index_add" in ln]
    if backward:
        assert "handle_vjp" not in bwd and "operator_vjp" not in bwd, bwd


CASES: dict[str, Callable[..., Any]] = {
    "functional": lambda x, i, s: torch.index_add(x, 0, i, s),
    "method_alpha": lambda x, i, s: x.index_add(0, i, s, alpha=-1.5),
    "negative_dim": lambda x, i, s: torch.index_add(x.t(), -1, i, s.t(), alpha=2),
    "int32_index": lambda x, i, s: x.index_add(0, i.int(), s * 2),
    "inplace_intermediate": lambda x, i, s: (x * 2).index_add_(0, i, s).exp(),
    "inplace_returns_self": lambda x, i, s: (lambda y: (y.index_add_(0, i, s) is y, y))(
        x + 1),
    "inplace_view_of_intermediate": lambda x, i, s: (
        lambda y: (y[1:].index_add_(0, i.clamp(max=2), s), y))(x.clone()),
    "inplace_chained": lambda x, i, s: x.clone().index_add_(0, i, s).mul_(3).sum(1),
    "zeros_into": lambda x, i, s: torch.zeros_like(x).index_add_(0, i, s * x[i]),
    "bool_alpha": lambda x, i, s: x.index_add(0, i, s, alpha=True),
    "source_disjoint_view_of_self": lambda x, i, s: (
        lambda y: (y[:2].index_add_(0, torch.tensor([1, 0]), y[2:4]), y))(x * 1),
    "ints_float_alpha": lambda x, i, s: (x.detach().long().index_add(0, i, (s * 3).long(),
                                                                     alpha=1.7), x * 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_add_matches_eager_with_gradients(name: str) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    s = torch.randn(5, 3, requires_grad=True)
    i = torch.tensor([0, 2, 2, 3, 0])  # repeated positions sum
    check_against_eager(CASES[name], x, i, s)
    if name == "source_disjoint_view_of_self":
        return  # (eager's backward raises: the write changed a view saved by AsStrided)
    jf = thunder_ir.jit(CASES[name])
    out = jf(x, i, s)
    loss = sum(o.float().sum() for o in (out if isinstance(out, tuple) else (out,))
               if isinstance(o, torch.Tensor))
    loss.backward()
    _no_opaque_index_add(jf, backward=name != "inplace_view_of_intermediate")


def test_writes_into_an_argument_as_eager() -> None:
    """``x.index_add_`` on an argument: the caller's tensor holds the sum and its version
    counter moved, as in eager; an integer tensor too."""
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x.index_add_(0, i, s, alpha=2) * 1

    i = torch.tensor([1, 1, 0])
    for dtype in (torch.float32, torch.int64):
        x, s = torch.arange(8).reshape(4, 2).to(dtype), torch.ones(3, 2, dtype=dtype)
        check_against_eager(f, x, i, s)
        jf = thunder_ir.jit(f)
        xj, xe = x.clone(), x.clone()
        v = xj._version
        jf(xj, i, s)
        f(xe, i, s)
        assert torch.equal(xj, xe)
        assert xj._version > v
        assert "torch.index_add(" in _traces(jf)[0]


def test_scatter_add_writes_into_an_argument_as_eager() -> None:
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x.scatter_add_(1, i, s).sum(0)

    i = torch.tensor([[0, 0], [2, 1], [1, 1]])
    check_against_eager(f, torch.randn(3, 3), i, torch.randn(3, 2))
    x = torch.randn(3, 3)
    xe = x.clone()
    thunder_ir.jit(f)(x, i, torch.ones(3, 2))
    f(xe, i, torch.ones(3, 2))
    assert torch.equal(x, xe)


def test_a_view_of_an_argument_sees_the_write() -> None:
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        v = x[:, 1:]
        v.index_add_(1, i, s)
        return x.sum()

    check_against_eager(f, torch.randn(3, 4), torch.tensor([2, 0]), torch.randn(3, 2))


ERRORS: dict[str, Callable[..., Any]] = {
    "leaf_requires_grad": lambda x, i, s: x.index_add_(0, i, s),
    "dtype_mismatch": lambda x, i, s: x.detach().index_add(0, i, s.double()),
    "index_out_of_range": lambda x, i, s: x.index_add(0, i + 10, s),
    "source_shape": lambda x, i, s: x.index_add(0, i, s[:, :2]),
    "source_overlaps_self": lambda x, i, s: (lambda y: y.index_add_(0, i, y[:3]))(x * 1),
    "source_is_self": lambda x, i, s: (lambda y: y.index_add_(0, torch.arange(4), y))(x * 1),
    "scatter_src_overlaps_self": lambda x, i, s: (lambda y: y.scatter_add_(
        0, torch.zeros(2, 3, dtype=torch.long), y[1:3]))(x * 1),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_eagers_errors(name: str) -> None:
    check_against_eager(ERRORS[name], torch.randn(4, 3, requires_grad=True),
                        torch.tensor([0, 1, 3]), torch.randn(3, 3))


def test_a_write_after_a_saved_read_raises_on_backward_as_eager() -> None:
    """``y.exp()`` saves its result; eager's backward then raises after ``index_add_``
    writes into it."""
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        y = (x * 1).exp()
        y.index_add_(0, i, s)
        return y

    x, s, i = torch.randn(4, 3, requires_grad=True), torch.randn(2, 3), torch.tensor([0, 1])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        f(x, i, s).sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        thunder_ir.jit(f)(x, i, s).sum().backward()


def test_routed_rows_train_as_one_program_for_every_count() -> None:
    """The index is ``nonzero`` of a mask (an unbacked length): one forward and one
    backward program for every count, zero included; gradients for ``x`` and ``w`` as
    eager's."""
    def f(x: torch.Tensor, m: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        idx = torch.nonzero(m).squeeze(1)
        rows = x[idx] @ w
        return torch.zeros(x.shape[0], w.shape[1]).index_add_(0, idx, rows.tanh(), alpha=0.5)

    jf = thunder_ir.jit(f)
    g = torch.Generator().manual_seed(0)
    masks = [torch.zeros(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool)]
    masks += [torch.rand(6, generator=g) < 0.5 for _ in range(4)]
    for m in masks:
        x = torch.randn(6, 4, requires_grad=True)
        w = torch.randn(4, 5, requires_grad=True)
        check_against_eager(f, x, m, w)
        out = jf(x, m, w)
        out.square().sum().backward()
        xe, we = x.detach().requires_grad_(), w.detach().requires_grad_()
        f(xe, m, we).square().sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(w.grad, we.grad)
    assert thunder_ir.cache_misses(jf) == 1
    fwd, bwd = _traces(jf)
    assert "u0" in fwd and "u0" in bwd, (fwd, bwd)
    _no_opaque_index_add(jf)


SCATTER: dict[str, Callable[..., Any]] = {
    "functional": lambda x, i, s: torch.scatter_add(x, 0, i, s),
    "method_negative_dim": lambda x, i, s: x.t().scatter_add(-1, i.t(), s.t()),
    "inplace_intermediate": lambda x, i, s: (x * 2).scatter_add_(0, i, s).exp(),
    "smaller_index": lambda x, i, s: torch.scatter_add(x, 0, i[:2, :2], s[:2, :2]),
}


@pytest.mark.parametrize("name", sorted(SCATTER))
def test_scatter_add_matches_eager_with_gradients(name: str) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    s = torch.randn(5, 3, requires_grad=True)
    i = torch.tensor([[0, 1, 3], [2, 2, 0], [3, 0, 0], [1, 1, 1], [0, 3, 2]])
    check_against_eager(SCATTER[name], x, i, s)


def test_routed_scatter_add_trains_as_one_program() -> None:
    """``scatter_add`` of rows routed by ``nonzero`` (an unbacked length): one program,
    the prim's own VJP (no opaque call)."""
    def f(x: torch.Tensor, m: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        idx = torch.nonzero(m).squeeze(1)
        rows = (x[idx] @ w).tanh()
        return torch.zeros(x.shape[0], w.shape[1]).scatter_add(
            0, idx[:, None].expand(-1, w.shape[1]), rows)

    jf = thunder_ir.jit(f)
    g = torch.Generator().manual_seed(1)
    for m in [torch.zeros(6, dtype=torch.bool)] + [torch.rand(6, generator=g) < 0.5
                                                   for _ in range(4)]:
        x = torch.randn(6, 4, requires_grad=True)
        w = torch.randn(4, 5, requires_grad=True)
        check_against_eager(f, x, m, w)
        jf(x, m, w).square().sum().backward()
    assert thunder_ir.cache_misses(jf) == 1
    fwd, bwd = _traces(jf)
    assert "prims_scatter_add" in fwd and "call_with_grad" not in fwd, fwd
    assert "handle_vjp" not in bwd and "u0" in bwd, bwd


def test_moe_trains_under_the_inductor_executor() -> None:
    """The traced ``index_add_`` goes into Inductor's regions with the routed counts'
    unbacked sizes: a symbol per size (two counts equal on the first call are not one
    size), values and gradients as eager's over new routings."""
    import copy
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_data_dependent import SparseMoE

    torch.manual_seed(0)
    model = SparseMoE(k=2)
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model, executors=["torch_compile"])
    for _ in range(4):
        x = torch.randn(2, 5, 8)
        y, logits = jm(x)
        (y.square().sum() + logits.sum()).backward()
        ry, rlogits = ref(x)
        (ry.square().sum() + rlogits.sum()).backward()
        torch.testing.assert_close(y, ry)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
    assert thunder_ir.cache_misses(jm) == 1
