"""Builtin ``max``/``min`` of symbolic sizes in user code answer ``torch.sym_max`` /
``torch.sym_min`` (issue 52, `thunder_ir.frontend.symbolic_minmax`): no decision, so one
symbolic program serves the lengths on both sides; values as eager's."""

from __future__ import annotations

import builtins

import torch

import thunder_ir


def test_max_min_of_sizes_decide_nothing() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        n = max(x.shape[0] - 4, 0)
        m = min(x.shape[0], 5)
        return x.sum(0) * n + m, n, m

    jf = thunder_ir.jit(f)
    for length in (2, 3, 4, 5, 6, 7, 8, 3, 9):
        x = torch.randn(length, 3)
        got, want = jf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and type(got[1]) is int and type(got[2]) is int
    assert thunder_ir.cache_misses(jf) <= 2  # (Python's max and min: 4 programs)


def test_other_calls_are_pythons() -> None:
    """Iterables, ``key=``, ``default=``, floats and plain ints: Python's own, while
    tracing too; builtins are back after the call."""
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int, int, float, int, int]:
        n = x.shape[0]
        a = max([n, 3])
        b = min(n, 7, key=lambda v: -v)
        c = max(2.5, 1.0)
        d = max((), default=4)
        e = min(n - 1, 1)
        return x * (a + b + d + e), a, b, c, d, e

    original = builtins.max
    jf = thunder_ir.jit(f)
    for length in (2, 5, 8, 6):
        x = torch.randn(length)
        got, want = jf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert builtins.max is original
