"""``x[index] = value`` (`thunder_ir.frontend.setitem`) against eager: values, gradients of
``x`` and of the value, writes through views, eager's errors; the box writes become the
program's ops, the rest stays the opaque ``tir.setitem`` call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thunder_ir
from thunder_ir.frontend.setitem import box_of
from thunder_ir.testing_eager import check_against_eager

X = torch.randn(3, 4, requires_grad=True)
ROW = torch.randn(4, requires_grad=True)


def _written(write: Callable[[torch.Tensor, torch.Tensor], None]
             ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``write`` applied to an intermediate (``x * 2``), then a use of the result."""
    def f(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = x * 2
        write(y, v)
        return y.sin()

    return f


def _set(index: Any, value: Callable[[torch.Tensor, torch.Tensor], Any]
         ) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def write(y: torch.Tensor, v: torch.Tensor) -> None:
        y[index] = value(y, v)

    return write


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], None]] = {
    "row of a tensor": _set(1, lambda y, v: v),
    "column, broadcast from a 0-d": _set((slice(None), 2), lambda y, v: v.sum()),
    "python float into a block": _set((slice(0, 2), slice(1, 3)), lambda y, v: 5.0),
    "python int into a float tensor": _set(-1, lambda y, v: 3),
    "ellipsis and negative slice": _set((Ellipsis, slice(-2, None)), lambda y, v: v[:2]),
    "None adds a dim": _set((None, 0), lambda y, v: v[None]),
    "leading ones dropped": _set(0, lambda y, v: v.reshape(1, 1, 4)),
    "float64 value cast": _set(2, lambda y, v: v.double() * 3),
    "whole tensor": _set(Ellipsis, lambda y, v: v),
    "empty slice": _set(slice(2, 1), lambda y, v: 1.0),
    "another row of itself": _set(0, lambda y, v: y[2]),
    "itself": _set(Ellipsis, lambda y, v: y),
    "step 2 (opaque)": _set((slice(None), slice(None, None, 2)), lambda y, v: v[:2]),
    "tensor index (opaque)": _set(torch.tensor([0, 2]), lambda y, v: v),
    "mask (opaque)": _set(torch.tensor([True, False, True]), lambda y, v: v),
    "overlapping rows (eager refuses)": _set(slice(1, None), lambda y, v: y[:-1]),
    "transposed itself (eager refuses)": _set(Ellipsis, lambda y, v: y[:, :3].t()[:3]),
    "out of range (eager's error)": _set(3, lambda y, v: v),
    "wrong size (eager's error)": _set(0, lambda y, v: v[:3]),
    "too many indices (eager's error)": _set((0, 0, 0), lambda y, v: 1.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_setitem_matches_eager(name: str) -> None:
    check_against_eager(_written(CASES[name]), X, ROW)


def test_write_through_a_view_reaches_the_base() -> None:
    def f(x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        base = x * 1
        row = base[1]
        row[1:3] = v[:2]
        return base, row

    check_against_eager(f, X, ROW)


def test_write_into_an_input_is_seen_by_the_caller() -> None:
    def f(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x[:, 0] = v[:3]
        return x * 2

    check_against_eager(f, X.detach().clone(), ROW.detach().clone(), backward=False)


def test_a_step_loop_is_one_program_of_ops() -> None:
    """RWKV's and Mamba's CPU loops fill a buffer a step at a time: no opaque call is left
    (each would be a call recorded by torch's autograd, and a break in fusion)."""
    def f(k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(k)
        state = torch.zeros_like(k[:, 0])
        for t in range(k.shape[1]):
            state = state * w + k[:, t]
            out[:, t] = state.tanh()
        return out

    k = torch.randn(2, 5, 3, requires_grad=True)
    w = torch.rand(3, requires_grad=True)
    check_against_eager(f, k, w)
    jf = thunder_ir.jit(f)
    jf(k, w)
    src = str(thunder_ir.last_traces(jf)[0])
    assert "setitem" not in src and "call_with_grad" not in src, src


def test_opaque_writes_stay_the_setitem_call() -> None:
    jf = thunder_ir.jit(_written(CASES["step 2 (opaque)"]))
    jf(X, ROW)
    assert "'thunder_ir.runtime.namespace.setitem'" in str(thunder_ir.last_traces(jf)[-1])


def test_refused_overlap_names_the_users_line() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        y[1:] = y[:-1]
        return y

    with pytest.raises(RuntimeError, match=r"single memory location[\s\S]*test_setitem\.py:\d+"):
        thunder_ir.jit(f)(torch.randn(5))


def test_box_of() -> None:
    assert box_of((3, 4), 1) == ([(1, 2), (0, 4)], (4,))
    assert box_of((3, 4), (None, Ellipsis, slice(-3, -1))) == ([(0, 3), (1, 3)], (1, 3, 2))
    assert box_of((3, 4), (slice(5, 9),)) == ([(3, 3), (0, 4)], (0, 4))
    for unmodeled in (slice(None, None, 2), 3, (0, 0, 0), torch.tensor([1]), True,
                      (Ellipsis, Ellipsis), [0, 1]):
        assert box_of((3, 4), unmodeled) is None, unmodeled


@st.composite
def _basic_write(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[Any, ...], tuple[int, ...]]:
    """A shape, a basic index of it (ints, slices of step 1, None, at most one ellipsis)
    and the shape of a value that broadcasts to the view ``x[index]``."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    items: list[Any] = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "full"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            items.append(slice(draw(st.integers(-n - 1, n)), draw(st.integers(-n - 1, n + 1))))
        else:
            items.append(slice(None))
        if draw(st.booleans()) and draw(st.booleans()):
            items.append(None)
    if draw(st.booleans()):  # an ellipsis in place of a run of full slices
        i = draw(st.integers(0, len(items)))
        j = draw(st.integers(i, len(items)))
        if all(it == slice(None) for it in items[i:j]):
            items[i:j] = [Ellipsis]
    view = torch.empty(shape)[tuple(items)].shape
    value = tuple(1 if draw(st.booleans()) else d for d in view[draw(st.integers(0, len(view))):])
    return shape, tuple(items), value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_basic_write(), st.booleans())
def test_basic_writes_match_eager(case: tuple[Any, ...], scalar: bool) -> None:
    """Any basic write, of a tensor that broadcasts or of a Python float: the result and
    the gradients of ``x`` and of the value are eager's."""
    shape, index, vshape = case

    def f(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        y[index] = 2.5 if scalar else v * 3
        return y * y

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen, requires_grad=True)
    v = torch.randn(vshape, generator=gen, requires_grad=True)
    check_against_eager(f, x, v)
