"""Python decisions on sizes in a symbolic program (issue 52, "every length, one program").

- ``int()`` of a size that user code only compares (Reformer's ``assert
  int(buckets.shape[-1]) == num_hashes * sequence_length``) keeps the size symbolic: the
  comparison is made on the size itself, proved or guarded as a comparison of sizes is
  (`thunder_ir.frontend.int_sizes`); ``int()`` of a size used otherwise, or compared
  with a plain number, still fixes it, as eager's branch needs.
- A decision mixing an ``.item()`` (an unbacked symbol) with the call's sizes (Reformer's
  ``attention_mask.sum().item() < batch_size * attention_mask.shape[-1]``) is speculated:
  eager's branch on this call's values, the program checking the same expression on the
  real tensors and sizes of every call.

Each against eager, forward and training, with the compile count.

PYTEST_DONT_REWRITE: pytest's rewriting of ``assert`` statements would also rewrite the
traced functions' own checks (``assert int(...) == n`` stores the ``int()`` in a
temporary), which then are not the construct under test.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

import thunder_ir

LENGTHS = (8, 12, 16, 20, 12)


def _as_eager(f: Callable[..., Any], make: Callable[[int], tuple[Any, ...]],
              lengths: Sequence[int] = LENGTHS, train: bool = False) -> Any:
    """``jit(f)`` called on ``make(n)`` for each length: the results (and with ``train``,
    the gradients of the first argument) as eager's. Returns the jitted function."""
    jf = thunder_ir.jit(f)
    for n in lengths:
        args = make(n)
        if not train:
            torch.testing.assert_close(jf(*args), f(*args), msg=f"length {n}")
            continue
        xe = args[0].clone().requires_grad_()
        xj = args[0].clone().requires_grad_()
        ye, yj = f(xe, *args[1:]), jf(xj, *args[1:])
        torch.testing.assert_close(yj, ye, msg=f"length {n}")
        ye.square().sum().backward()
        yj.square().sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad, msg=f"gradient at length {n}")
    return jf


# --------------------------------------------------------------------------- int(size)


def _checked(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reformer's form: ``int()`` of a size checked against an expression of sizes, and a
    branch on ``int()`` of a size against another size."""
    n = x.shape[1]
    y = (x @ w).view(x.shape[0], n, 2, -1)
    assert int(y.shape[1]) == 1 * n, f"{y.shape[1]} != {n}"
    if int(x.shape[-2]) != 2 * n:  # a comparison of sizes, decided without a guard
        y = y * 2
    return y.flatten(2)


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_int_of_a_compared_size_keeps_it_symbolic(train: bool) -> None:
    """``assert int(y.shape[1]) == n`` and ``if int(x.shape[-2]) != 2 * n``: eager's
    values and gradients at every length, one symbolic program for them all."""
    w = torch.randn(4, 6)
    jf = _as_eager(_checked, lambda n: (torch.randn(2, n, 4), w), train=train)
    assert thunder_ir.cache_misses(jf) == 2, thunder_ir.compile_status(jf)["static"]
    assert thunder_ir.compile_status(jf)["static"] == []


def test_int_of_a_size_in_a_module_assert_one_program() -> None:
    """The same in a module trained by SGD over lengths: eager's losses, gradients and
    parameters, two programs."""
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lin(x)
            assert int(h.shape[-2]) == x.shape[1], "lengths differ"
            return h.relu().sum(1)

    torch.manual_seed(0)
    eager = Block()
    mine = Block()
    mine.load_state_dict(eager.state_dict())
    jm = thunder_ir.jit(mine)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(mine.parameters(), lr=0.1)
    for n in LENGTHS:
        x = torch.randn(3, n, 4)
        le, lj = eager(x).square().mean(), jm(x).square().mean()
        torch.testing.assert_close(lj, le)
        le.backward(), lj.backward()
        for p, q in zip(mine.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
        opt_e.step(), opt_j.step()
        opt_e.zero_grad(), opt_j.zero_grad()
    for p, q in zip(mine.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    assert thunder_ir.cache_misses(jm) == 2, thunder_ir.compile_status(jm)["static"]


def test_int_of_a_size_compared_with_a_number_still_fixes_it() -> None:
    """``int(n) == 12`` compares two Python ints, which no symbolic program can follow:
    the size is fixed (a program per length met, eager's branch in each), and the static
    report names the ``int()`` line."""
    def f(x: torch.Tensor) -> torch.Tensor:
        if int(x.shape[1]) == 12:
            return x * 2
        return x * 3

    jf = _as_eager(f, lambda n: (torch.randn(2, n),), lengths=(8, 12, 16, 12, 20))
    assert thunder_ir.cache_misses(jf) == 4
    static = thunder_ir.compile_status(jf)["static"]
    assert any("int() at" in s and "test_symbolic_decisions.py" in s for s in static), static


def test_int_of_a_size_used_otherwise_still_fixes_it() -> None:
    """``int()`` of a size passed on (``max`` of them, arithmetic) is the number eager
    has: the size is fixed where it is taken; a comparison of the result with a size
    is not taken for a comparison of the size."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if max(map(int, x.shape)) == y.shape[0]:
            return x * 2
        return x * 3 + int(x.shape[1]) * 0.5

    jf = thunder_ir.jit(f)
    for n, m in ((8, 8), (12, 12), (16, 16), (20, 12), (12, 20)):
        x, y = torch.randn(2, n), torch.randn(m)
        torch.testing.assert_close(jf(x, y), f(x, y), msg=f"sizes {n}, {m}")


def test_int_of_a_size_compared_with_a_tensor_as_eager() -> None:
    """``int(n) == t`` with a tensor ``t``: the tensor's comparison with the number,
    eager's values at every length (the size is fixed: a tensor op holds the number)."""
    def f(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x.sum(1) * (int(x.shape[1]) == t)

    jf = _as_eager(f, lambda n: (torch.randn(2, n), torch.tensor([12, 16])))
    assert thunder_ir.cache_misses(jf) >= 2


# --------------------------------------------------------------------------- .item() vs sizes


def _padded(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Reformer's form: a branch on a mask's count (``.item()``) against the mask's
    size."""
    if mask.sum().item() < mask.shape[0] * mask.shape[-1]:
        x = x.masked_fill(mask[..., None] == 0, 0.0) * 3
    return (x * 2).sum(-1)


def _mask(n: int, pad: int = 0) -> torch.Tensor:
    m = torch.ones(2, n, dtype=torch.long)
    if pad:
        m[1, n - pad:] = 0
    return m


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_item_against_sizes_one_program_checked_with_each_calls_sizes(train: bool) -> None:
    """Full masks over lengths 12, 16, 8, 20: one symbolic program, whose check computes
    ``u0 < s0*s1`` from each call's mask and sizes (a check with the traced call's sizes,
    ``u0 < 32``, would take the other branch at length 8, where the count is 16)."""
    jf = _as_eager(_padded, lambda n: (torch.randn(2, n, 3), _mask(n)),
                   lengths=(12, 16, 8, 20), train=train)
    assert thunder_ir.cache_misses(jf) == 2, thunder_ir.compile_status(jf)["static"]


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_item_against_sizes_other_branch_is_a_variant(train: bool) -> None:
    """A padded mask takes the other branch: its check fails, that call compiles a
    variant, with eager's values (the variant, as any new call structure, first for its
    sizes, then symbolic: two programs per branch); later calls of either kind, at any
    length, hit one of them."""
    jf = thunder_ir.jit(_padded)
    calls = [(12, 0), (16, 0), (8, 3), (20, 0), (12, 5), (16, 2), (8, 0)]
    for n, pad in calls:
        x, m = torch.randn(2, n, 3), _mask(n, pad)
        if not train:
            torch.testing.assert_close(jf(x, m), _padded(x, m), msg=f"{n}, pad {pad}")
            continue
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yj = _padded(xe, m), jf(xj, m)
        torch.testing.assert_close(yj, ye, msg=f"{n}, pad {pad}")
        ye.sum().backward(), yj.sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad, msg=f"gradient at {n}, pad {pad}")
    assert thunder_ir.cache_misses(jf) == 4


def test_item_against_sizes_check_reads_the_real_sizes() -> None:
    """The program's check is the expression over the call's sizes, not the traced
    call's numbers: its text holds the size symbols."""
    jf = _as_eager(_padded, lambda n: (torch.randn(2, n, 3), _mask(n)), lengths=(12, 16))
    src = str(thunder_ir.last_traces(jf)[-1])
    assert "s2*s3" in src.replace(" ", ""), src
    assert "get_rng_state" not in src, src  # (the speculation's own run is not traced)


def test_ellipsis_index_with_an_unbacked_bound_one_program() -> None:
    """``x[..., :n.item()]`` and ``m[..., None]``: the closed-form getitem rule expands
    the ``...`` to the dims the other items leave (it appended them a second time, an
    IndexError that failed the unbacked compile: a speculated program per count)."""
    def f(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return x[..., :n.item()][..., None] * 2

    jf = thunder_ir.jit(f)
    for k in (3, 5, 2, 6):
        x, n = torch.randn(2, 8), torch.tensor(k)
        torch.testing.assert_close(jf(x, n), f(x, n), msg=f"bound {k}")
    assert thunder_ir.cache_misses(jf) == 1
    assert thunder_ir.compile_status(jf)["static"] == []
