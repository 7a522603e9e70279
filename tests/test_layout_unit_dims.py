"""Traced strides of results whose operands have size-1 dims with unusual strides equal
eager's (issue 52): ``k.t()`` of a ``(4, 1)`` tensor is ``(1, 4)`` with strides
``(1, 1)``, and eager's TensorIterator lays ``k * 2`` out as ``(1, 1)`` where torch's meta
kernels say ``(4, 1)``. Each case returns the trace's ``.stride()`` answer and compares it
with eager's."""

from __future__ import annotations

import random

import pytest
import torch

import thunder_ir
from thunder_ir.frontend.iterator_layout import iterator_strides, like_strides


def _k() -> torch.Tensor:
    return torch.arange(4.0).reshape(4, 1).t()  # (1, 4), strides (1, 1)


CASES = {
    "mul_scalar": (lambda k: k * 2, _k),
    "add_self": (lambda k: k + k, _k),
    "neg": (lambda k: -k, _k),
    "gt_scalar": (lambda k: k > 0, _k),
    "where_scalar": (lambda k: torch.where(k > 1, k, 2.0), _k),
    "clamp": (lambda k: k.clamp(min=1.0), _k),
    "t_mul": (lambda k: k.t() * 2, _k),
    "expand_mul": (lambda k: k.expand(3, 4) * 2, _k),
    "unsqueeze_mul": (lambda k: k.unsqueeze(0) * 2, _k),
    "unsqueeze_end_mul": (lambda k: k.unsqueeze(2) * 2, _k),
    "empty_like": (lambda k: torch.empty_like(k), _k),
    "zeros_like": (lambda k: torch.zeros_like(k), _k),
    "clone": (lambda k: k.clone(), _k),
    "ones_like": (lambda k: torch.ones_like(k), _k),
    "full_like": (lambda k: torch.full_like(k, 3.0), _k),
    "to_dtype": (lambda k: k.to(torch.float64), _k),
    "mul_double": (lambda k: (k * 2).double(), _k),
    "col_stride4": (lambda k: k * 2,
                    lambda: torch.arange(4.0).as_strided((4, 1), (1, 4))),
    "col_ones": (lambda k: k * 2 + k,
                 lambda: torch.arange(4.0).as_strided((4, 1), (1, 1))),
    "mixed": (lambda a: a + torch.ones(1, 4), _k),
    "channels_last_unit": (lambda x: x * 2, lambda: torch.randn(1, 3, 4, 1).contiguous(
        memory_format=torch.channels_last)),
    "channels_last_unit_hw": (lambda x: x * 2 + x.clone(), lambda: torch.randn(
        2, 3, 1, 1).contiguous(memory_format=torch.channels_last)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_unit_dim_strides_as_eager(name: str) -> None:
    f, make = CASES[name]

    def g(x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        y = f(x)
        return y, tuple(y.stride())

    x = make()
    want_y, want = g(x)
    got_y, got = thunder_ir.jit(g)(x)
    assert got == want
    assert got_y.stride() == want_y.stride()
    if name != "empty_like":  # (its values are whatever memory held)
        torch.testing.assert_close(got_y, want_y)


def test_key_tells_unit_strides_apart() -> None:
    """A program whose trace read a result's strides serves only the layouts it was traced
    for: a contiguous ``(1, 4)`` tensor with strides ``(4, 1)`` and one with ``(1, 1)``."""
    def g(k: torch.Tensor) -> tuple[int, ...]:
        return tuple((k * 2).stride())

    jg = thunder_ir.jit(g)
    for x in (torch.randn(1, 4), _k(), torch.randn(1, 4), _k()):
        assert jg(x) == g(x)


def _strided(shape: list[int], rng: random.Random) -> torch.Tensor:
    order = list(range(len(shape)))
    rng.shuffle(order)
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    for d, n in enumerate(shape):
        if n == 1 and rng.random() < 0.6:
            strides[d] = rng.choice([0, 1, 2, 3, 4, 6, 12])
    if shape and rng.random() < 0.2:
        strides[rng.randrange(len(shape))] *= 2
    n = 1 + sum((a - 1) * b for a, b in zip(shape, strides))
    return torch.zeros(n).as_strided(shape, strides)


def test_rules_match_eager_kernels() -> None:
    """`iterator_strides` and `like_strides` against eager's CPU kernels on random layouts
    with size-1 dims (unary, with a scalar, broadcast binary, empty_like, clone)."""
    rng = random.Random(0)
    for _ in range(1500):
        shape = [rng.choice([1, 1, 2, 3]) for _ in range(rng.randint(1, 4))]
        a = _strided(shape, rng)
        sa = (tuple(a.shape), tuple(a.stride()))
        assert iterator_strides(a.shape, [sa, ((), ())]) == (a * 2).stride()
        assert iterator_strides(a.shape, [sa]) == (-a).stride()
        assert like_strides(*sa) == torch.empty_like(a).stride() == a.clone().stride()
        bs = [n if rng.random() < 0.7 else 1 for n in shape][rng.randint(0, len(shape) - 1):]
        b = _strided(bs, rng)
        y = a + b
        assert iterator_strides(y.shape, [sa, (tuple(b.shape), tuple(b.stride()))]) \
            == y.stride()
