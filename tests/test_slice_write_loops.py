"""A buffer written slice by slice in a loop (``out[:, t] = ...``, RWKV's and Mamba's CPU
loops) against eager: `thunder_ir.passes.cat_chains` makes the writes one ``cat`` of the
written slices instead of a rebuild of the buffer per write, and values, gradients (zero
where eager's is zero, ``None`` where eager's is ``None``), views of the buffer, version
counters and the fused (tier-up) program stay eager's."""

from __future__ import annotations

import pytest
import torch
from tier_up_support import run_until_swapped

import thunder_ir
from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu
from thunder_ir.passes import cat_chains
from thunder_ir.testing_eager import check_against_eager

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


K = torch.randn(2, 6, 3, generator=_gen(), requires_grad=True)
W = torch.rand(3, generator=_gen(), requires_grad=True)


def _recurrence(k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RWKV's shape of loop: a state carried over the steps, one slice written per step."""
    out = torch.zeros_like(k)
    state = torch.zeros_like(k[:, 0])
    for t in range(k.shape[1]):
        state = state * w + k[:, t]
        out[:, t] = state.tanh()
    return out


def _flattened(jf: object) -> str:
    """The program after `cat_chains` ran (the trace of the last call it made)."""
    traces = thunder_ir.last_traces(jf)
    return next(str(t) for t in traces if "flatten-cat-chains" in str(t).splitlines()[0])


def test_a_filled_buffer_is_one_cat_of_its_slices() -> None:
    check_against_eager(_recurrence, K, W)
    jf = thunder_ir.jit(_recurrence)
    jf(K, W)
    src = _flattened(jf)
    assert src.count("ltorch.cat(") == 1, src  # not one rebuild per step
    assert "zeros_like(k)" not in src, src  # the buffer it overwrote is gone
    with torch.no_grad():
        check_against_eager(_recurrence, K.detach(), W.detach(), backward=False)


def test_reads_between_the_writes() -> None:
    """A read of the buffer between writes sees the writes made so far."""
    def f(k: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.zeros_like(k)
        acc = torch.zeros_like(k[:, 0])
        for t in range(k.shape[1]):
            out[:, t] = (k[:, t] * w + out[:, :t].sum(1)).sin()
            acc = acc + out.mean(1)  # the whole buffer, half written
        return out, acc

    check_against_eager(f, K, W)
    jf = thunder_ir.jit(f)
    jf(K, W)
    # each buffer is read: the next write stays a cat around one slice of it (flattening
    # through it would copy its pieces into every later buffer, O(T²) operands)
    cats = [line.split("]")[0] for line in _flattened(jf).splitlines() if "ltorch.cat(" in line]
    assert len(cats) == K.shape[1] and max(c.count(",") for c in cats) <= 2, cats


def test_overlapping_and_repeated_writes() -> None:
    """Boxes that overlap, a slot written twice (the first value's gradient is eager's
    zero, not ``None``), a write of a part of a dimension."""
    def f(k: torch.Tensor, w: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(2, 7, 3)
        out[:, 0] = a * 2  # overwritten in full below
        for t in range(k.shape[1]):
            out[:, t:t + 2] = (k[:, t:t + 1] * w).expand(2, 2, 3)
        out[:, 3, 1:] = w[:2]
        out[:, 2:5] = out[:, 1:4] + 1  # reads what it overwrites (a copy: not refused)
        return out

    check_against_eager(f, K, W, torch.randn(2, 3, requires_grad=True))


def test_an_overwritten_copy_of_an_input_gets_a_zero_gradient() -> None:
    """The buffer is a clone of an input that requires grad, every slot overwritten: eager
    gives the input a zero gradient (the written box's), not ``None``."""
    def f(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        for t in range(k.shape[1]):
            out[:, t] = k[:, t] * 2
        return out

    res = check_against_eager(f, torch.randn(2, 6, 3, requires_grad=True), K)
    assert res.jitted_grads[0] is not None and not res.jitted_grads[0].any()


def test_views_of_the_buffer() -> None:
    """A view taken before the loop sees the writes; a view returned aliases the
    returned buffer, as eager's does; writes through a view reach the buffer."""
    def f(k: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = torch.zeros_like(k)
        first = out[:, 0]
        for t in range(k.shape[1]):
            out[:, t] = k[:, t] * w
        tail = out[:, 3:]
        tail[:, 0] = w  # through the view: out[:, 3]
        return out, first * 1, tail

    check_against_eager(f, K, W)
    jf = thunder_ir.jit(f)
    out, _, tail = jf(K, W)
    e_out, _, e_tail = f(K, W)
    assert (tail._base is out) == (e_tail._base is e_out)
    assert tail.data_ptr() - out.data_ptr() == e_tail.data_ptr() - e_out.data_ptr()
    assert tail.stride() == e_tail.stride()
    assert tail.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()


def test_writes_into_an_input_bump_its_version_as_eager() -> None:
    def f(buf: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        for t in range(k.shape[1]):
            buf[:, t] = k[:, t] + t
        return buf.sum()

    k = K.detach()
    mine, theirs = torch.zeros(2, 6, 3), torch.zeros(2, 6, 3)
    v0, e0 = mine._version, theirs._version
    out = thunder_ir.jit(f)(mine, k)
    want = f(theirs, k)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(mine, theirs)
    assert mine._version - v0 == theirs._version - e0
    check_against_eager(f, torch.zeros(2, 6, 3), k, backward=False)


def test_a_chain_longer_than_the_bound_is_left_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cat_chains, "MAX_PIECES", 3)
    check_against_eager(_recurrence, K, W)
    jf = thunder_ir.jit(_recurrence)
    jf(K, W)
    assert _flattened(jf).count("ltorch.cat(") > 1


@needs_inductor
def test_the_fused_program_writes_as_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced hot: the tier-up program's values and gradients are eager's, and its
    forward's region holds the one ``cat``."""
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    jf = thunder_ir.jit(_recurrence)
    k, w = K.detach().clone().requires_grad_(), W.detach().clone().requires_grad_()

    def check(_: int) -> None:
        k.grad = w.grad = None
        out = jf(k, w)
        want = _recurrence(K, W)
        torch.testing.assert_close(out, want)
        g = torch.randn(out.shape, generator=_gen())
        out.backward(g)
        gk, gw = torch.autograd.grad(want, (K, W), g)
        torch.testing.assert_close(k.grad, gk)
        torch.testing.assert_close(w.grad, gw)

    run_until_swapped(jf, check)
    check(0)
    fwd = str(thunder_ir.last_traces(jf)[-1])
    assert "inductorFusion" in fwd and fwd.count("cat(") == 1, fwd


def test_a_long_loop_and_boxes_along_other_dims() -> None:
    """48 steps (the pass looks at each step's buffer once: an exponential walk would not
    end), boxes of part of two dims, along dim 0 and along the last dim."""
    def f(k: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = torch.zeros(2, k.shape[1], 3)
        part = torch.zeros(2, k.shape[1], 3)
        rows = torch.zeros(k.shape[1], 3)
        cols = torch.zeros(3, k.shape[1])
        for t in range(k.shape[1]):
            out[:, t] = k[:, t] * w
            part[:, t, :2] = k[:, t, 1:]
            rows[t] = k[0, t] + w
            cols[:, -1 - t] = k[1, t]
        return out, part, rows, cols

    k = torch.randn(2, 48, 3, generator=_gen(), requires_grad=True)
    check_against_eager(f, k, W)
    jf = thunder_ir.jit(f)
    jf(k, W)
    # out, rows and cols: one cat each of their 48 slices (a box of part of two dims,
    # part's, reads the buffer before it: its chain stays)
    src = _flattened(jf)
    lines = {line.split(" = ")[0].strip(): line for line in src.splitlines() if " = " in line}
    returned = src.split("return (")[1].split(")")[0].split(", ")
    for name in (returned[0], returned[2], returned[3]):
        line = lines[name]
        assert "ltorch.cat(" in line and line.split("]")[0].count(",") == 47, line


def test_a_cat_with_a_legacy_empty_operand() -> None:
    """``cat`` takes a 1-d empty tensor among operands of another rank (a key/value cache
    started empty, Falcon's): such a ``cat`` is left as it is."""
    def f(k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        cache = torch.cat([torch.empty(0), k], dim=1)
        cache[:, 0] = w
        return torch.cat([cache[:, :2], cache[:, 2:] * 2], dim=1)

    check_against_eager(f, K, W)
