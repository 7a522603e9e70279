"""``out=`` arguments and in-place metadata ops (``x.t_()``) behave as in eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir

torch.manual_seed(0)


def _same_as_eager(f: Callable[..., Any], *args: Any) -> None:
    """Result and every argument afterwards (values, shape and strides) equal eager's."""
    ea = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    ja = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    e = f(*ea)
    j = thunder_ir.jit(f)(*ja)
    torch.testing.assert_close(j, e)
    for a, b in zip(ja, ea):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)
            assert a.shape == b.shape and a.stride() == b.stride()


@pytest.mark.parametrize("case", [
    ("add", lambda x, o: torch.add(x, 1, out=o), (3, 4)),
    ("mul", lambda x, o: torch.mul(x, x, out=o) * 1, (3, 4)),
    ("matmul", lambda x, o: torch.matmul(x, x.t(), out=o), (3, 3)),
    ("sum", lambda x, o: torch.sum(x, 0, out=o), (4,)),
    ("cat", lambda x, o: torch.cat([x, x], out=o), (6, 4)),
    ("where", lambda x, o: torch.where(x > 0, x, -x, out=o), (3, 4)),
], ids=lambda c: c[0])
def test_out_argument_is_written_and_returned(case: Any) -> None:
    _, f, out_shape = case
    _same_as_eager(f, torch.randn(3, 4), torch.empty(out_shape))


def test_out_returns_the_out_tensor_itself() -> None:
    def f(x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        r = torch.add(x, 1, out=o)
        assert r is o
        return r * 2

    _same_as_eager(f, torch.randn(3, 4), torch.empty(3, 4))


def test_out_created_inside_the_function() -> None:
    _same_as_eager(lambda x: torch.add(x, 1, out=torch.empty(3, 4)) * 2, torch.randn(3, 4))


def test_out_of_another_dtype_raises_eagers_error() -> None:
    f = thunder_ir.jit(lambda x, o: torch.add(x, 1, out=o))
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           r"output type Long\n  at .*\.py:\d+"):
        f(torch.randn(3), torch.empty(3, dtype=torch.long))


def test_out_that_eager_would_resize_is_refused_clearly() -> None:
    f = thunder_ir.jit(lambda x, o: torch.add(x, 1, out=o))
    o = torch.empty(0)
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"would resize the out= tensor from \[0\] to \[3\]"):
        f(torch.randn(3), o)
    assert o.shape == (0,)


def test_out_with_an_input_requiring_grad_raises_eagers_error() -> None:
    f = thunder_ir.jit(lambda x, o: torch.add(x, 1, out=o))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        f(torch.randn(3, requires_grad=True), torch.empty(3))


def _t_then_write(x: torch.Tensor) -> torch.Tensor:
    x.t_()
    x.mul_(2)  # lands through the transposed layout
    return x + 1


def _transpose_internal(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.transpose_(0, 1)
    return y @ x


@pytest.mark.parametrize("f", [
    lambda x: x.t_() * 1,
    lambda x: x.swapdims_(0, 1) + x,
    _t_then_write,
    _transpose_internal,
], ids=["t_ on the input", "swapdims_ on the input", "t_ then a write", "transpose_ inside"])
def test_inplace_metadata_ops_on_square_tensors(f: Callable[..., Any]) -> None:
    _same_as_eager(f, torch.randn(3, 3))


def _unsqueeze_then_write(x: torch.Tensor) -> torch.Tensor:
    x.unsqueeze_(1)
    x.mul_(2)
    return x * 1


def _resize_smaller_then_write(x: torch.Tensor) -> torch.Tensor:
    x.resize_(2, 3)
    x.add_(1)
    return x.sum(0)


def _as_strided_then_read(x: torch.Tensor) -> torch.Tensor:
    x.as_strided_((2, 2), (1, 4))
    return x * 2


@pytest.mark.parametrize("f", [
    lambda x: (x * 1).unsqueeze_(0),
    lambda x: x.unsqueeze_(0) * 1,
    lambda x: x.t_() @ torch.ones(4, 2),
    lambda x: (x * 1).t_().squeeze_(),
    _unsqueeze_then_write,
    _resize_smaller_then_write,
    _as_strided_then_read,
    lambda x: (x * 1).resize_(2, 2, 2),
], ids=["unsqueeze_ inside", "unsqueeze_ on the input", "t_ on a non-square input",
        "t_ then squeeze_", "unsqueeze_ then a write", "resize_ smaller then a write",
        "as_strided_ then a read", "resize_ inside"])
def test_inplace_metadata_ops_that_change_the_shape(f: Callable[..., Any]) -> None:
    """The tensor the user holds changes shape and strides as eager's does, inside the
    function and, for an argument, in the caller's hands afterwards."""
    _same_as_eager(f, torch.randn(4, 3))


def test_resize_of_a_tensor_that_requires_grad_raises_eagers_error() -> None:
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        thunder_ir.jit(lambda x: x.resize_(2))(torch.randn(3, requires_grad=True))
