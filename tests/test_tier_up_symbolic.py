"""Tier-up of symbolic programs (issue 53): a callable trained over several lengths runs a
symbolic program from the second length on; once hot, that program is lowered again with
the Inductor executor over its own symbols, one fused program serves every length, and
each result is eager's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from tier_up_support import run_until_swapped
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor, tiered
from thunder_ir.lowering import symbolic_regions as sr
from thunder_ir.lowering import tier_up as tu

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


class _Tagger(nn.Module):
    """A token tagger: (batch, length, 32) -> (batch, length, 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 48)
        self.norm = nn.LayerNorm(48)
        self.b = nn.Linear(48, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(nn.functional.gelu(self.a(x)))
        return self.b(torch.tanh(h) * h.amax(-1, keepdim=True))


def _programs(jm: Any) -> list[Any]:
    """The distinct programs of a jitted module (a symbolic one is also found under
    each length's key)."""
    out: list[Any] = []
    for e in jm._compiled.cache.entries.values():
        if all(e is not o for o in out):
            out.append(e)
    return out


@needs_inductor
def test_a_variable_length_training_program_swaps_in_one_fused_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first length's static program and the symbolic one of the others both swap:
    the symbolic one made hot by hand, the static one goes hot once it has swapped, as
    its sibling (`tier_up.SIBLING_SHARE`), its kernels compiled by the same helper; a
    program called fewer than `HOT_CALLS` times (an evaluation under ``no_grad``) does
    not."""
    monkeypatch.setenv(tu.AFTER_ENV, "3600")  # hot only where made so
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = _Tagger()
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
    lengths = (5, 7, 9, 12)
    steps = [0]

    def step(n: int | None = None) -> None:
        n = lengths[steps[0] % len(lengths)] if n is None else n
        steps[0] += 1
        x, y = torch.randn(32, n, 32), torch.randn(32, n, 8)
        losses = []
        for m, o in ((jm, opt), (ref, opt_ref)):
            o.zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            losses.append(loss)
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert type(p.grad) is torch.Tensor
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.step()
        opt_ref.step()

    for _ in range(2 * tu.HOT_CALLS):  # 12 timed calls of the symbolic program
        step()
    for _ in range(8 * tu.HOT_CALLS):  # the static one's time well over its share
        step(lengths[0])
    for _ in range(tu.HOT_CALLS // 2):  # rarely: evaluation
        x = torch.randn(32, lengths[0], 32)
        with torch.no_grad():
            torch.testing.assert_close(jm(x), ref(x), rtol=1e-5, atol=1e-6)
    watches = list(jm._compiled.tier_up.watches)
    assert len(watches) == 3 and all(w.state == tu.COUNTING for w in watches)
    rare = next(w for w in watches if w.calls < tu.HOT_CALLS)
    symbolic_watch = next(w for w in watches if w.entry.shape_guard is not None
                          and w is not rare)
    static = next(w for w in watches if w is not symbolic_watch and w is not rare)
    symbolic_watch.hot_s = 0.0  # hot at its next call
    starts = tiered.helper_starts()
    run_until_swapped(jm, lambda _: step(), 12 * tu.HOT_CALLS, programs=2)
    assert static.joined and not symbolic_watch.joined, (static.calls, static.spent)
    assert rare.state == tu.COUNTING and not rare.joined
    assert tiered.helper_starts() - starts <= 1  # (kept up for the sibling's kernels)
    status = thunder_ir.compile_status(jm)
    assert status["swapped"] == 2 and status["failed"] == 0 and not status["kept"], status
    compiled = status["compiled"]
    assert compiled == 4, status  # each program's forward and backward region, once
    programs = _programs(jm)
    assert len(programs) == 3 and thunder_ir.cache_misses(jm) == 3  # (and the evaluation)
    symbolic = [e for e in programs if e.shape_guard is not None and e is not rare.entry]
    assert len(symbolic) == 1 and symbolic[0] is symbolic_watch.entry
    for _ in range(2 * len(lengths)):  # every length again: no compile, no program more
        step()
    if steps[0] % len(lengths) == 1:  # (the first length's static program ran last)
        step()
    status = thunder_ir.compile_status(jm)
    assert status["compiled"] == compiled and status["pending"] == 0, status
    assert thunder_ir.cache_misses(jm) == 3
    assert steps[0] % len(lengths) != 1  # the last call ran the symbolic program
    assert jm._compiled.cache.last is symbolic[0]
    forward = str(thunder_ir.last_traces(jm)[-1])
    assert "inductorFusion" in forward and "s1" in forward  # fused, over the symbols
    assert "inductorFusion" in str(thunder_ir.last_backward_traces(jm)[-1])
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@needs_inductor
def test_a_decision_on_a_size_the_program_does_not_check_is_checked_by_the_kernel() -> None:
    """A symbolic region's compile over the program's symbols: a decision its trace takes
    on this call's size (``n > 4``) comes back as a check, and the kernel runs only where
    it holds (the region's function otherwise); a transposed input keeps its order for
    every size."""

    def region(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        scale = 2.0 if x.shape[0] > 4 else 3.0  # (a region of a program never does this)
        return torch.tanh(x * scale) @ w

    call = sr.SymbolicCall(hints=(("s0", 6),), guards=("s0 >= 2",))
    cpu = torch.device("cpu")
    meta = (sr.SymbolicMeta(("s0", 16), (1, 0), torch.float32, cpu),
            sr.SymbolicMeta((16, 4), None, torch.float32, cpu))
    mode, fake, new_guards = sr.symbolic_fakes(meta, call)
    assert fake[0].stride()[0] == 1  # transposed, as the layout said
    graph = inductor_executor.compile_graph(region, mode, fake, True, sr.symbolic_options(None))
    checks = new_guards()
    assert checks and all("s0" in c for c in checks), checks
    kernel = sr.guarded(lambda *xs: graph(list(xs))[0], region, {"s0": (0, 0)}, checks)
    w = torch.randn(16, 4)
    for n in (3, 6, 11):
        x = torch.randn(16, n).t()
        assert sr.layout_of(x) == (1, 0)
        torch.testing.assert_close(kernel(x, w), region(x, w), rtol=1e-5, atol=1e-5)


@needs_inductor
def test_a_kernel_whose_decision_fails_gets_another_compiled_for_the_other_side() -> None:
    """Inductor's C++ code generation decides per reduction whether it is longer than
    4,096 (``s0 <= 4096``, a check of the kernel compiled at 2,000 rows): a call of
    6,000 rows compiles the kernel of the other decision once, and both serve every
    length on their side."""
    import torch._inductor.compile_fx as compile_fx

    compiles = []
    inner = compile_fx.compile_fx_inner

    def counted(*args: object, **kwargs: object) -> object:
        compiles.append(1)
        return inner(*args, **kwargs)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 2 + 1).sum(0)

    jf = thunder_ir.jit(f, executors=["torch_compile"])
    compile_fx.compile_fx_inner = counted
    try:
        for n in (1000, 2000, 3000, 6000, 9000, 2500, 7000):
            x = torch.randn(n, 8)
            torch.testing.assert_close(jf(x), f(x), rtol=1e-5, atol=1e-4)
    finally:
        compile_fx.compile_fx_inner = inner
    assert thunder_ir.cache_misses(jf) == 2  # the first length's program, the symbolic one
    assert len(compiles) == 3  # the first program's kernel, then one per decision


def test_a_sibling_goes_hot_with_a_hot_program_where_it_has_run_its_share() -> None:
    """`tier_up.joins`: at least `HOT_CALLS` calls, for at least `SIBLING_SHARE` of the
    hot program's seconds."""
    hot = 2.0
    assert tu.joins(tu.HOT_CALLS, tu.SIBLING_SHARE * hot, hot)
    assert not tu.joins(tu.HOT_CALLS - 1, 10 * hot, hot)  # few calls, however long
    assert not tu.joins(100 * tu.HOT_CALLS, 0.99 * tu.SIBLING_SHARE * hot, hot)
