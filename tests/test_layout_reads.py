"""Layout reads per input (`thunder_ir.frontend.layout_reads`, `thunder_ir.runtime.layout_key`).

A program is keyed by the layouts its trace read, input by input: an input whose layout no
decision read is keyed without it, one read only through results computed from it is keyed
by its class (`ordered`: a contiguous tensor or a slice of one), one read exactly (a
``view`` of it, ``stride()``) by its strides. Each test runs the same calls eagerly and
compares values, strides and the objects after every call, and counts compiles.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.runtime.layout_key import (
    ORDERED,
    LayoutReads,
    Mask,
    layout_class,
    mask_of,
    ordered,
    relax,
)
from thunder_ir.runtime.origins import ArgLeaf, ArgPath


def _misses(jf: Any) -> int:
    return thunder_ir.cache_misses(jf)  # type: ignore[no-any-return]


def _same(a: Any, b: Any, where: str = "") -> None:
    """The jitted result (or object) holds what eager's does: values, shapes, strides."""
    assert type(a) is type(b), where
    if isinstance(b, torch.Tensor):
        assert a.shape == b.shape and a.stride() == b.stride(), (where, a.stride(), b.stride())
        torch.testing.assert_close(a, b, msg=where)
    elif isinstance(b, tuple | list):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif hasattr(b, "__dict__"):
        assert vars(a).keys() == vars(b).keys(), where
        for k in vars(b):
            _same(vars(a)[k], vars(b)[k], f"{where}.{k}")
    else:
        assert a == b, where


# ------------------------------------------------------------------ the key's helpers


def test_ordered_layouts_and_their_class() -> None:
    assert ordered((2, 3, 4), (12, 4, 1)) and ordered((1, 2, 3, 4), (32, 16, 4, 1))
    assert ordered((1, 2, 1, 4), (7, 4, 9, 1))  # (a size-1 dim's stride does not count)
    assert not ordered((3, 4), (1, 3)) and not ordered((3, 4), (0, 1))
    assert not ordered((0, 4), (4, 1)) and not ordered((3, 4), (4, 4))
    assert layout_class((2, 3), True) == ORDERED
    assert layout_class((2, 3), (6, 1)) == ORDERED  # a slice of a wider tensor
    assert layout_class((2, 3), ((6, 1), 3)) == ORDERED  # an exact key's
    assert layout_class((2, 3), (1, 2)) == (1, 2)  # transposed: its strides


def test_relax_keeps_classes_or_blanks_each_tensors_layout() -> None:
    meta = (torch.Size([2, 3]), torch.float32, torch.device("cpu"), False)
    obj = (object, (("k", (*meta, (6, 1))), ("v", (*meta, (1, 2))), ("n", (int, 3))))
    key = (torch.Size([2, 3]), torch.float32, torch.device("cpu"), False, (6, 1), obj, "tok")
    positions = {0: (0, True), 1: (5, False)}
    k_at = (1, (("attr", "k"),))
    # program inputs 0, 1, 2: argument 1, argument 0, argument 1's field k
    mask = mask_of(LayoutReads(frozenset({1}), frozenset({0, 2})),
                   [ArgLeaf(1), ArgLeaf(0), ArgPath(1, (("attr", "k"),))])
    assert mask == Mask(frozenset({(0, ())}), frozenset({(1, ()), k_at}))
    out = relax(key, positions, mask, {})
    assert out[:5] == key[:5] and out[6] == "tok"  # argument 0: read exactly
    assert out[5] == (object, (("k", (*meta, ORDERED)), ("v", (*meta, None)),
                               ("n", (int, 3))))  # v: not an input, not read
    only_k = Mask(frozenset(), frozenset({k_at}))
    assert relax(key, positions, only_k, {})[4] is None


# ------------------------------------------------------------------ a sliding window


class Window:
    """A hand-written sliding-window cache: the last three keys, kept as a slice of the
    concatenation (as Hugging Face's sliding-window cache layer keeps them)."""

    def __init__(self) -> None:
        self.k = torch.zeros(1, 2, 3, 4)
        self.seen = 3


def attend(x: torch.Tensor, st: Window) -> tuple[torch.Tensor, torch.Tensor]:
    full = torch.cat([st.k, x], dim=2)
    st.k = full[:, :, -3:]
    st.seen += x.shape[2]
    scores = (full * 2).reshape(1, 2, -1).softmax(-1)  # (a reshape: reads full's layout)
    return scores, full.transpose(1, 2)


def test_a_window_kept_as_a_slice_runs_the_program_of_a_contiguous_one() -> None:
    """The first call's window is contiguous, every later one a slice of a longer tensor
    (other strides): the program reads it by class only (``cat`` lays its result out
    contiguously from either), so one program serves every call (it compiled one per
    layout, and then one for the growing count)."""
    jf = thunder_ir.jit(attend)
    mine, theirs = Window(), Window()
    for i in range(6):
        assert mine.k.stride() == ((32, 16, 4, 1) if i else (24, 12, 4, 1))
        x = torch.randn(1, 2, 1, 4, generator=torch.Generator().manual_seed(i))
        _same(jf(x, mine), attend(x, theirs), f"call {i}")
        _same(mine, theirs, "st")
    assert _misses(jf) == 2  # the first count, then one program for every count


def test_an_input_read_exactly_is_keyed_by_its_strides() -> None:
    """``st.k.view(-1)`` works or raises by ``k``'s strides: a program traced with a
    contiguous ``k`` never serves a strided one (eager's error), nor the other way round."""
    def flat(x: torch.Tensor, st: Window) -> torch.Tensor:
        return st.k.view(-1) + x.sum()

    jf = thunder_ir.jit(flat)
    base = torch.randn(1, 2, 5, 4)
    for k in (base[:, :, :3].contiguous(), base[:, :, 2:], base[:, :, :3].contiguous()):
        mine, theirs = Window(), Window()
        mine.k, theirs.k = k, k.clone() if k.is_contiguous() else k
        x = torch.randn(3)
        if theirs.k.is_contiguous():
            _same(jf(x, mine), flat(x, theirs))
        else:
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                flat(x, theirs)
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                jf(x, mine)
    assert _misses(jf) == 1  # (the strided call's trace raised eager's error)


def test_a_layout_outside_the_class_is_a_program_of_its_own() -> None:
    """``(k * 2).view(-1)``: eager's product follows ``k``'s layout, so the view works for
    a contiguous ``k`` and a slice of one (contiguous products: one program) and raises
    for a transposed one (eager's error, not the program traced for the others)."""
    def scaled(st: Window) -> torch.Tensor:
        return (st.k * 2).view(-1)

    jf = thunder_ir.jit(scaled)
    base = torch.randn(1, 2, 6, 4)
    ks = [base[:, :, :3].contiguous(), base[:, :, 3:], base[:, :, 1:4]]
    for k in ks:
        mine, theirs = Window(), Window()
        mine.k = theirs.k = k
        _same(jf(mine), scaled(theirs))
    assert _misses(jf) == 1
    mine, theirs = Window(), Window()
    mine.k = theirs.k = torch.randn(1, 2, 4, 3).transpose(2, 3)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        scaled(theirs)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jf(mine)


def test_an_unread_layout_outputs_eagers_strides() -> None:
    """A program that read no layout of ``k`` serves a transposed ``k`` too; its outputs
    are laid out as eager's (its kernels run on the real tensor)."""
    def double(x: torch.Tensor, st: Window) -> tuple[torch.Tensor, torch.Tensor]:
        return st.k * 2 + x, torch.cat([st.k, st.k], 0)

    jf = thunder_ir.jit(double)
    x = torch.randn(4)
    for k in (torch.randn(1, 2, 3, 4), torch.randn(4, 3, 2, 1).permute(3, 2, 1, 0),
              torch.randn(1, 2, 6, 4)[:, :, ::2]):
        mine, theirs = Window(), Window()
        mine.k = theirs.k = k
        _same(jf(x, mine), double(x, theirs))
    assert _misses(jf) == 1


def test_a_strided_tensor_of_a_growing_object_keeps_its_sizes() -> None:
    """An object whose tensors' sizes changed is keyed without them (every size dynamic);
    a tensor in it that is not contiguous is traced with its sizes, which the program's
    guard checks: another size runs eager's values (it ran the program of the first
    size, silently wrong)."""
    class Holder:
        def __init__(self, n: int, strided: bool) -> None:
            base = torch.arange(n * 8.0).reshape(n, 8)
            self.k = base[:, :4] if strided else base[:, :4].contiguous()

    def f(x: torch.Tensor, st: Holder) -> torch.Tensor:
        return x + st.k.sum(0) * st.k.shape[0]

    jf = thunder_ir.jit(f)
    for n, strided in [(3, False), (5, False), (6, True), (7, True), (9, True), (4, False)]:
        st = Holder(n, strided)
        x = torch.randn(4)
        _same(jf(x, st), f(x, copy.copy(st)), f"{n} {strided}")
    assert _misses(jf) <= 3


def test_a_3d_cat_reads_no_layout_of_its_operands() -> None:
    """A convolution state transposed on the first call and contiguous on later ones (as
    RecurrentGemma's after its prefill) reaches the program only through a 3-d ``cat``,
    whose result is contiguous whatever its operands' layouts: one program, whose
    reshape of the product reads no layout of the state."""
    def conv(x: torch.Tensor, st: Window) -> torch.Tensor:
        full = torch.cat([st.k, x], -1)
        st.k = full[:, :, 1:]
        return (full * 2).reshape(-1)  # (a reshape: reads full's layout)

    jf = thunder_ir.jit(conv)
    mine, theirs = Window(), Window()
    mine.k = theirs.k = torch.randn(1, 3, 4).transpose(1, 2)  # (1, 4, 3), transposed
    for i in range(4):
        x = torch.randn(1, 4, 1, generator=torch.Generator().manual_seed(i))
        _same(jf(x, mine), conv(x, theirs))
        _same(mine, theirs)
    assert _misses(jf) == 1


class Recurrent(torch.nn.Module):
    """State rebound on every call as a slice of a longer tensor (a window of the last
    three columns: other strides than the first state's)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.h = torch.zeros(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        full = torch.cat([self.h, self.lin(x).t()], 1)
        self.h = full[:, -3:].detach()
        return full.tanh().sum(1)


def test_rebound_state_kept_as_a_slice_runs_one_program() -> None:
    torch.manual_seed(0)
    m = Recurrent()
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    for i in range(6):
        assert m.h.stride() == ((5, 1) if i else (3, 1))
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        _same(jm(x), e(x))
        _same(m.h, e.h, "self.h")
    assert _misses(jm) == 1
