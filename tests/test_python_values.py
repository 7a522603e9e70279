"""Torch calls on plain Python values under jit, against eager (issue 50).

While a function is traced, torch's ``has_torch_function`` says yes for any argument, so
``torch._assert(flag, "msg")`` with a Python ``bool`` (timm's and torchvision's shape
checks), ``torch.result_type(1, 2.0)`` and the like reach the tracer although no traced
tensor takes part (`thunder_ir.frontend.python_calls`). Each must give eager's result or
raise eager's own error; creation ops with Python arguments stay ops of the program (their
random draws are the program's, call after call). ``torch._assert`` on a traced tensor
checks the value when the program runs, raising eager's ``AssertionError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ir


def _raises_as_eager(fn: Callable[..., Any], jitted: Callable[..., Any], *args: Any) -> None:
    """Eager raises; the jitted call raises the same error type with the same message."""
    with pytest.raises(Exception) as eager:  # (any error: compared below)
        fn(*args)
    with pytest.raises(type(eager.value)) as got:
        jitted(*args)
    assert type(got.value) is type(eager.value)
    assert str(got.value) == str(eager.value)


# --------------------------------------------------------------------------- torch._assert


def _checks(x: torch.Tensor, flag: Any) -> torch.Tensor:
    torch._assert(flag, "must hold")
    torch._assert(x.shape[0] == 2, "shape")
    return x + 1


def test_assert_on_a_python_bool_passes_and_fails_as_eager() -> None:
    jf = thunder_ir.jit(_checks)
    x = torch.randn(2)
    got = jf(x, True)
    assert not isinstance(got, thunder_ir.frontend.TensorProxy)
    torch.testing.assert_close(got, _checks(x, True), rtol=0, atol=0)
    _raises_as_eager(_checks, jf, x, False)  # a compile for False: eager's AssertionError
    _raises_as_eager(_checks, jf, torch.randn(3), True)
    torch.testing.assert_close(jf(x, 1), _checks(x, 1), rtol=0, atol=0)  # truthy, not bool
    _raises_as_eager(_checks, jf, x, 0)


def test_assert_on_a_false_python_bool_raises_eagers_assertion_error() -> None:
    with pytest.raises(AssertionError, match=r"^must hold$"):
        thunder_ir.jit(_checks)(torch.randn(2), False)


def test_assert_on_a_symbolic_size_checks_the_size_as_eager() -> None:
    jf = thunder_ir.jit(_checks, cache="symbolic values")
    x = torch.randn(2)
    torch.testing.assert_close(jf(x, True), _checks(x, True), rtol=0, atol=0)
    _raises_as_eager(_checks, jf, torch.randn(3), True)
    _raises_as_eager(_checks, jf, torch.randn(5), True)
    torch.testing.assert_close(jf(x, True), _checks(x, True), rtol=0, atol=0)


def _positive(x: torch.Tensor) -> torch.Tensor:
    torch._assert(x.sum() > 0, "the sum must be positive")
    return x * 2


@pytest.mark.parametrize("requires_grad", [False, True])
def test_assert_on_a_traced_tensor_is_checked_when_the_program_runs(requires_grad: bool
                                                                    ) -> None:
    jf = thunder_ir.jit(_positive)
    for sign in (1.0, -1.0, 1.0):  # the first compiles; the others run the cached program
        x = (sign * torch.rand(3) + sign).requires_grad_(requires_grad)
        if sign < 0:
            _raises_as_eager(_positive, jf, x)
            continue
        xe = x.detach().clone().requires_grad_(requires_grad)
        got, want = jf(x), _positive(xe)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.requires_grad == want.requires_grad
        if requires_grad:
            got.sum().backward()
            want.sum().backward()
            assert x.grad is not None
            torch.testing.assert_close(x.grad, xe.grad, rtol=0, atol=0)


def test_assert_on_a_tensor_of_several_values_raises_eagers_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch._assert(x > 0, "all positive")
        return x + 1

    _raises_as_eager(f, thunder_ir.jit(f), torch.ones(3))  # bool() of 3 values: ambiguous


def test_assert_under_autocast_as_eager() -> None:
    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        torch._assert(flag, "flag")
        torch._assert(x.sum() > 0, "sum")
        return x @ x.T

    jf = thunder_ir.jit(f)
    x = torch.rand(2, 2) + 0.5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = jf(x, True), f(x, True)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        _raises_as_eager(f, jf, x, False)
        _raises_as_eager(f, jf, -x, True)


# --------------------------------------------------------------------------- other calls

PLAIN_CALLS: dict[str, Callable[[], Any]] = {
    "result_type": lambda: torch.result_type(1, 2.0),
    "promote_types": lambda: torch.promote_types(torch.int32, torch.float16),
    "can_cast": lambda: torch.can_cast(torch.float32, torch.int32),
    "sym_max": lambda: torch.sym_max(2, 3),
    "sym_not": lambda: torch.sym_not(True),
    "broadcast_shapes": lambda: torch.broadcast_shapes((2, 1), (1, 3)),
}


@pytest.mark.parametrize("case", list(PLAIN_CALLS))
def test_calls_on_python_values_return_eagers_python_value(case: str) -> None:
    call = PLAIN_CALLS[case]

    def f(x: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return x + 1, call()

    seen: list[Any] = []

    def g(x: torch.Tensor) -> torch.Tensor:
        seen.append(call())  # the value user code sees while traced
        return x + 1

    x = torch.randn(2)
    got, want = thunder_ir.jit(f)(x)[1], call()
    assert type(got) is type(want) and got == want
    thunder_ir.jit(g)(x)
    assert len(seen) == 1 and type(seen[0]) is type(want) and seen[0] == want


ERROR_CALLS: dict[str, Callable[[], Any]] = {
    "atleast_1d of an int": lambda: torch.atleast_1d(3),
    "promote_types of ints": lambda: torch.promote_types(1, 2),
    "result_type of a str": lambda: torch.result_type("a", 1),
    # the meta kernel words this one differently: eager's own words are raised
    "hann_window of a negative length": lambda: torch.hann_window(-1),
}


@pytest.mark.parametrize("case", list(ERROR_CALLS))
def test_calls_on_python_values_raise_eagers_error(case: str) -> None:
    call = ERROR_CALLS[case]

    def f(x: torch.Tensor) -> torch.Tensor:
        call()
        return x + 1

    _raises_as_eager(f, thunder_ir.jit(f), torch.randn(2))


def test_creation_ops_with_python_arguments_stay_in_the_program() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x + torch.randn(3), torch.hann_window(3) * x, torch.tril_indices(3, 3)

    jf = thunder_ir.jit(f)
    x = torch.randn(3)
    for seed in (0, 1, 2):  # each call draws anew, as eager does (the draw is no constant)
        torch.manual_seed(seed)
        want = f(x)
        want_state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = jf(x)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        assert torch.equal(torch.get_rng_state(), want_state)  # drawn as much as eager
