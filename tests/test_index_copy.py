"""``index_copy``/``index_copy_`` as a traced op (``ltorch.index_copy``, eager's kernel via
``prims.index_copy``), and the forms of ``index_add`` eager allows beyond the plain one
(a 0-d index, ``out=``), against eager: values, gradients (the op's own VJP, no opaque
call), writes into arguments and views, an index whose length only the values decide
(one program for every length), and the forms left to eager's kernel (bool, complex).
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


def _traced(jf: Any, name: str, backward: bool = True) -> None:
    """The forward calls ``torch.<name>`` itself, not as an opaque call torch
    differentiates; with ``backward``, the backward has no opaque VJP."""
    fwd, bwd = _traces(jf)
    assert f"torch.{name}(" in fwd, fwd
    assert not [ln for ln in fwd.splitlines() if "call_with_grad" in ln and name in ln], fwd
    if backward:
        assert "handle_vjp" not in bwd and "operator_vjp" not in bwd, bwd


def _kv_write(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> Any:
    """A cache written at the input positions through a view of it (LitGPT's KV cache)."""
    cache = torch.zeros(2, 4, 3)
    cache[:1].index_copy_(1, i.clamp(max=3), s[None, :, :])
    return cache * x.sum()


CASES: dict[str, Callable[..., Any]] = {
    "functional": lambda x, i, s: torch.index_copy(x, 0, i, s),
    "method": lambda x, i, s: x.index_copy(0, i, s * 2).exp(),
    "negative_dim": lambda x, i, s: torch.index_copy(x.t(), -1, i, s.t()),
    "zero_dim_index": lambda x, i, s: x.index_copy(0, i[1], s[1:2]),
    "inplace_intermediate": lambda x, i, s: (x * 2).index_copy_(0, i, s).sin(),
    "inplace_returns_self": lambda x, i, s: (lambda y: (y.index_copy_(0, i, s) is y, y))(
        x + 1),
    "inplace_view_of_intermediate": lambda x, i, s: (
        lambda y: (y[1:].index_copy_(0, i.clamp(max=2), s), y))(x.clone()),
    "kv_cache_view": _kv_write,
    "ints": lambda x, i, s: (x.detach().long().index_copy(0, i, (s * 3).long()), x * 1),
    "inf_nan_kept": lambda x, i, s: (x / 0).index_copy(0, i, s),
    "add_zero_dim_index": lambda x, i, s: x.index_add(0, i[2], s[:1], alpha=2),
    "add_inplace_zero_dim_index": lambda x, i, s: (x * 1).index_add_(0, i[0], s[2:]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_with_gradients(name: str) -> None:
    x = torch.randn(4, 3, requires_grad=True)
    s = torch.randn(3, 3, requires_grad=True)
    i = torch.tensor([3, 0, 2])
    check_against_eager(CASES[name], x, i, s)
    jf = thunder_ir.jit(CASES[name])
    out = jf(x, i, s)
    loss = sum(o.float().nan_to_num().sum() for o in
               (out if isinstance(out, tuple) else (out,)) if isinstance(o, torch.Tensor))
    loss.backward()
    op = "index_add" if name.startswith("add_") else "index_copy"
    _traced(jf, op, backward=name not in ("inplace_view_of_intermediate", "kv_cache_view"))


def test_writes_into_an_argument_as_eager() -> None:
    """``x.index_copy_`` on an argument: the caller's tensor holds the copy and its version
    counter moved, as in eager."""
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return x.index_copy_(1, i, s) * 1

    i = torch.tensor([2, 0])
    for dtype in (torch.float32, torch.int64):
        x, s = torch.arange(8).reshape(2, 4).to(dtype), -torch.ones(2, 2, dtype=dtype)
        check_against_eager(f, x, i, s)
        jf = thunder_ir.jit(f)
        xj, xe = x.clone(), x.clone()
        v = xj._version
        jf(xj, i, s)
        f(xe, i, s)
        assert torch.equal(xj, xe) and xj._version > v
        _traced(jf, "index_copy", backward=False)


OUT: dict[str, Callable[..., Any]] = {
    "copy_out": lambda x, i, s, o: (torch.index_copy(x, 0, i, s, out=o) is o, o * 1),
    "add_out": lambda x, i, s, o: (torch.index_add(x, 0, i, s, alpha=3, out=o) is o, o * 1),
    "add_out_zero_dim": lambda x, i, s, o: (torch.index_add(x, 0, i[1], s[:1], out=o), o),
}


@pytest.mark.parametrize("name", sorted(OUT))
def test_out_is_written_as_eager(name: str) -> None:
    """``out=`` of the result's shape and dtype: the caller's tensor holds the result, and
    it is what eager returns."""
    x, s, i = torch.randn(4, 3), torch.randn(3, 3), torch.tensor([1, 3, 0])
    oj, oe = torch.full((4, 3), 7.0), torch.full((4, 3), 7.0)
    jf = thunder_ir.jit(OUT[name])
    rj, re = jf(x, i, s, oj), OUT[name](x, i, s, oe)
    assert torch.equal(oj, oe)
    for a, b in zip(rj, re, strict=True):
        assert (torch.equal(a, b) if isinstance(b, torch.Tensor) else a == b)
    _traced(jf, "index_add" if "add" in name else "index_copy", backward=False)


ERRORS: dict[str, Callable[..., Any]] = {
    "leaf_requires_grad": lambda x, i, s: x.index_copy_(0, i, s),
    "dtype_mismatch": lambda x, i, s: x.detach().index_copy(0, i, s.double()),
    "int32_index": lambda x, i, s: x.index_copy(0, i.int(), s),
    "index_out_of_range": lambda x, i, s: x.index_copy(0, i + 10, s),
    "source_shape": lambda x, i, s: x.index_copy(0, i, s[:, :2]),
    "source_overlaps_self": lambda x, i, s: (lambda y: y.index_copy_(0, i, y[:3]))(x * 1),
    "out_requires_grad": lambda x, i, s: torch.index_copy(x, 0, i, s, out=torch.empty(4, 3)),
    "out_wrong_dtype": lambda x, i, s: torch.index_add(
        x.detach(), 0, i, s, out=torch.empty(4, 3, dtype=torch.float64)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_eagers_errors(name: str) -> None:
    check_against_eager(ERRORS[name], torch.randn(4, 3, requires_grad=True),
                        torch.tensor([0, 1, 3]), torch.randn(3, 3))


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_bool_and_complex_run_eagers_kernel(dtype: torch.dtype) -> None:
    """Left opaque (eager's own kernel runs in the program): values as eager's."""
    def f(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> Any:
        return x.index_copy(0, i, s), x.clone().index_copy_(1, i[:2], s[:2].t())

    x, s = torch.randn(3, 3).to(dtype), torch.randn(2, 3).to(dtype)
    check_against_eager(f, x, torch.tensor([2, 0]), s, backward=False)


def test_routed_rows_copied_train_as_one_program_for_every_count() -> None:
    """The index is ``nonzero`` of a mask (an unbacked length): one forward and one
    backward program for every count, zero included; gradients as eager's."""
    def f(x: torch.Tensor, m: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        idx = torch.nonzero(m).squeeze(1)
        rows = (x[idx] @ w).tanh()
        return (x @ w).index_copy(0, idx, rows * 2)

    jf = thunder_ir.jit(f)
    g = torch.Generator().manual_seed(0)
    masks = [torch.zeros(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool)]
    masks += [torch.rand(6, generator=g) < 0.5 for _ in range(4)]
    for m in masks:
        x = torch.randn(6, 4, requires_grad=True)
        w = torch.randn(4, 5, requires_grad=True)
        check_against_eager(f, x, m, w)
        jf(x, m, w).square().sum().backward()
        xe, we = x.detach().requires_grad_(), w.detach().requires_grad_()
        f(xe, m, we).square().sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(w.grad, we.grad)
    assert thunder_ir.cache_misses(jf) == 1
    fwd, bwd = _traces(jf)
    assert "u0" in fwd and "u0" in bwd, (fwd, bwd)
    _traced(jf, "index_copy")
