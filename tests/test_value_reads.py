"""Ops and reads that depend on a traced tensor's values (``thunder_ir/frontend/value_reads.py``,
``unbacked.py``, ``meta_rules.py``), against eager, with the programs they compile counted.

A size that depends on values (``bincount``'s length, ``one_hot``'s ``max + 1``, a
``tensor_split`` index) is an unbacked symbol: one program for every value. A Python
number read from a value (``int(t)``) or a check on values (``gaussian_nll_loss``'s
``var >= 0``) is speculated: eager's branch, checked on every call. A float ``.item()``
returned, or used as an operand, is each call's number. Ops whose meta run fails on a
check of values (``cov``, ``istft``) or a count (``combinations``) are typed by a meta
rule and run by torch itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import thunder_ir
from thunder_ir.testing_eager import check_against_eager


def _checked(f: Callable[..., Any], calls: list[tuple[Any, ...]], backward: bool = True,
             **kw: Any) -> Any:
    """Each call against eager through one jitted ``f``; returns the jitted callable."""
    jf = thunder_ir.jit(f)
    for args in calls:
        check_against_eager(f, *args, backward=backward, jit=lambda _f: jf, **kw)
    return jf


def _source(jf: Any) -> str:
    return str(thunder_ir.last_traces(jf)[-1])


# --------------------------------------------------------------------------- sizes


def test_bincount_is_one_program_for_every_length() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> Any:
        return torch.bincount(x) * 2, torch.bincount(x, w, minlength=3), x.bincount(
            minlength=9)

    calls = [(torch.tensor(v), torch.rand(len(v))) for v in
             ([1, 2, 2], [0, 5, 3], [4, 4, 0], [0, 0, 0], [7, 1, 2])]
    jf = _checked(f, calls, backward=False)
    assert thunder_ir.cache_misses(jf) == 1
    assert "u0" in _source(jf) and "assume" not in _source(jf)


def test_bincount_of_an_empty_tensor_and_eagers_errors() -> None:
    f = torch.bincount
    _checked(lambda x: f(x, minlength=4), [(torch.zeros(0, dtype=torch.int64),)],
             backward=False)
    _checked(lambda x: f(x), [(torch.tensor([1, -1]),)], backward=False)  # eager raises


def test_one_hot_infers_its_classes_in_one_program() -> None:
    def f(x: torch.Tensor) -> Any:
        y = F.one_hot(x)
        return y, y.sum(0), y.shape[-1] + 1

    calls = [(torch.tensor(v),) for v in ([1, 2, 2], [0, 5, 3], [4, 4, 0], [0, 0, 0])]
    jf = _checked(f, calls, backward=False)
    assert thunder_ir.cache_misses(jf) == 1


def test_one_hot_decision_on_its_classes_is_speculated() -> None:
    def f(x: torch.Tensor) -> Any:
        y = F.one_hot(x)
        return y * 2 if y.shape[-1] > 3 else y - 1

    calls = [(torch.tensor(v),) for v in ([1, 2, 2], [0, 5, 3], [0, 1, 1], [7, 6, 2])]
    jf = _checked(f, calls, backward=False)
    assert thunder_ir.cache_misses(jf) == 2  # one program on each side of the decision


def test_one_hot_errors_as_eager() -> None:
    _checked(F.one_hot, [(torch.tensor([1, -2]),)], backward=False)  # negative class
    _checked(F.one_hot, [(torch.zeros(0, dtype=torch.int64),)], backward=False)  # empty


def test_tensor_split_by_an_index_tensor_is_one_program() -> None:
    """Each piece's offset and length are unbacked symbols: one program for every index,
    negative (from the end), past the end or out of order, as eager slices."""
    def f(x: torch.Tensor, t: torch.Tensor) -> Any:
        return tuple(p * 2 for p in torch.tensor_split(x, t)) + x.tensor_split(t)

    x = torch.randn(6, 8, requires_grad=True)
    calls = [(x, torch.tensor(v)) for v in
             ([2, 5], [1, 7], [0, 9], [6, 3], [4, 4], [3, -2], [-9, 20], [-1, -3])]
    jf = _checked(f, calls)
    assert thunder_ir.cache_misses(jf) == 1


def test_tensor_split_along_an_inner_dim() -> None:
    """Pieces along dim 1 are views whose contiguity depends on their lengths (a layout
    decision, speculated): eager's values, strides and gradients on every call."""
    def f(x: torch.Tensor, t: torch.Tensor) -> Any:
        return tuple(p * 2 for p in torch.tensor_split(x, t, dim=1)) + x.tensor_split(t, -1)

    x = torch.randn(6, 8, requires_grad=True)
    _checked(f, [(x, torch.tensor(v)) for v in ([3, -2], [-7, 2], [-1, -3], [-9, 20], [0, 8])])


def test_tensor_split_pieces_are_views_of_the_input() -> None:
    def f(x: torch.Tensor, t: torch.Tensor) -> Any:
        a, b, c = torch.tensor_split(x, t)
        b.mul_(10)  # eager writes through the view into x
        return a, b, c

    _checked(f, [(torch.randn(6, 2), torch.tensor(v)) for v in ([2, 4], [1, 5])],
             backward=False)


def test_tensor_split_into_a_number_of_sections_is_speculated() -> None:
    x = torch.randn(7, 3, requires_grad=True)
    jf = _checked(lambda x, t: torch.tensor_split(x, t),
                  [(x, torch.tensor(k)) for k in (2, 3, 2, 3)])
    assert thunder_ir.cache_misses(jf) == 2  # one program per number of results


def test_combinations_over_changing_lengths() -> None:
    def f(x: torch.Tensor) -> Any:
        return torch.combinations(x, 2) * 2, torch.combinations(x, 3, with_replacement=True)

    jf = _checked(f, [(torch.randn(n, requires_grad=True),) for n in (4, 5, 6, 7)])
    assert thunder_ir.cache_misses(jf) <= 2


# --------------------------------------------------------------------------- numbers


def test_int_of_a_tensor_is_speculated_as_int_of_item() -> None:
    def f(x: torch.Tensor, t: torch.Tensor) -> Any:
        return x[: int(t)] * 2, int(t) + 1

    x = torch.randn(6, 2, requires_grad=True)
    jf = _checked(f, [(x, torch.tensor(k)) for k in (2, 3, 2, 3, 0)])
    assert thunder_ir.cache_misses(jf) == 3  # one program per value met, checked each call
    assert "assume" in _source(jf)


def test_int_of_a_bool_or_a_float_tensor() -> None:
    _checked(lambda x, b: x * int(b), [(torch.randn(3), torch.tensor(v)) for v in (True, False)])
    _checked(lambda x: x * int(x.long()), [(torch.ones(2),)])  # eager's ValueError
    with pytest.raises(thunder_ir.DataDependentError, match=r"test_value_reads\.py"):
        thunder_ir.jit(lambda x: x.new_zeros(int(x.sum().abs())))(torch.randn(3))


def test_float_item_returned_is_each_calls_number() -> None:
    def f(x: torch.Tensor) -> Any:
        loss = (x * x).sum()
        return loss, {"loss": loss.item(), "half": loss.item() / 2}

    jf = _checked(f, [(torch.randn(4, requires_grad=True),) for _ in range(4)])
    assert thunder_ir.cache_misses(jf) == 1
    out = jf(torch.ones(4))[1]
    assert type(out["loss"]) is float and out == {"loss": 4.0, "half": 2.0}


def test_int_item_returned_is_a_python_int() -> None:
    def f(x: torch.Tensor) -> Any:
        return x * 2, (x > 0).sum().item(), (x > 0).sum().item() + 10

    jf = _checked(f, [(torch.randn(5),) for _ in range(5)], backward=False)
    assert thunder_ir.cache_misses(jf) == 1
    assert type(jf(torch.ones(5))[1]) is int


def test_item_returned_with_the_calls_sizes_over_every_size() -> None:
    """``count + x.shape[0]``: an unbacked symbol and a backed size, each call's."""
    def f(x: torch.Tensor) -> Any:
        return x * 2, (x > 0).sum().item() + x.shape[0], x[x > 0].shape[0] * x.shape[0]

    jf = _checked(f, [(torch.randn(n),) for n in (3, 4, 5, 6, 7)], backward=False)
    assert thunder_ir.cache_misses(jf) <= 2


def test_float_item_as_an_operand_is_one_program() -> None:
    def f(x: torch.Tensor) -> Any:
        scale = x.detach().abs().max().item()
        return x * scale, x + scale

    jf = _checked(f, [(torch.randn(4, requires_grad=True),) for _ in range(4)])
    assert thunder_ir.cache_misses(jf) == 1


def test_decision_on_a_float_item_is_speculated() -> None:
    def f(x: torch.Tensor) -> Any:
        return x * 2 if x.sum().item() > 0 else x - 1

    calls = [(torch.tensor(v, requires_grad=True),) for v in
             ([1.0, 2.0], [-3.0, 1.0], [0.5, 0.0], [-1.0, -1.0])]
    jf = _checked(f, calls)
    assert thunder_ir.cache_misses(jf) == 2


# --------------------------------------------------------------------------- checks


def test_gaussian_nll_loss_checks_var_every_call() -> None:
    def f(x: torch.Tensor, t: torch.Tensor, var: torch.Tensor) -> Any:
        return F.gaussian_nll_loss(x, t, var)

    x, t = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    jf = _checked(f, [(x, t, torch.rand(4, 3) + 0.1) for _ in range(3)])
    assert thunder_ir.cache_misses(jf) == 1
    bad = -torch.rand(4, 3)  # eager's ValueError, on a call after the program was made
    with pytest.raises(ValueError, match="var has negative entry"):
        jf(x, t, bad)
    with pytest.raises(ValueError, match="var has negative entry"):
        f(x, t, bad)


@pytest.mark.parametrize("name", ["cov", "cov_weights", "corrcoef", "corrcoef_int"])
def test_cov_and_corrcoef_run_eagers_checks(name: str) -> None:
    fns: dict[str, Callable[..., Any]] = {
        "cov": lambda x: torch.cov(x) * 2,
        "cov_weights": lambda x: torch.cov(x, correction=0, fweights=torch.tensor(
            [1, 2, 1, 3, 1]), aweights=x.detach().abs()[0]),
        "corrcoef": lambda x: x.corrcoef() + 1,
        "corrcoef_int": lambda x: torch.corrcoef((x * 10).long()),
    }
    jf = _checked(fns[name], [(torch.randn(n, 5, requires_grad=True),) for n in (3, 4, 5)])
    assert thunder_ir.cache_misses(jf) <= 2


def test_cov_of_one_observation_warns_as_eager() -> None:
    x = torch.randn(3, 1)
    jf = thunder_ir.jit(torch.cov)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = jf(x)
    with warnings.catch_warnings(record=True) as want:
        warnings.simplefilter("always")
        ref = torch.cov(x)
    torch.testing.assert_close(out, ref, equal_nan=True)
    assert any("degrees of freedom" in str(w.message) for w in got)
    assert {str(w.message) for w in want} <= {str(w.message) for w in got}


def test_istft_against_eager() -> None:
    win = torch.hann_window(16, dtype=torch.float64)
    spec = torch.stft(torch.randn(2, 64, dtype=torch.float64), 16, window=win,
                      return_complex=True).requires_grad_()
    _checked(lambda s, w: torch.istft(s, 16, window=w), [(spec, win)])
    _checked(lambda s, w: torch.istft(s, 16, window=w, length=60), [(spec, win)])


def test_histograms_against_eager() -> None:
    x = torch.randn(50, 3)
    edges = [torch.tensor([-2.0, 0.0, 2.0]), torch.tensor([-1.0, 0.0, 1.0, 3.0]),
             torch.tensor([-3.0, 3.0])]
    _checked(lambda x: torch.histogram(x[:, 0], 5), [(x,)], backward=False)
    _checked(lambda x, b: torch.histogram(x[:, 0], b, density=True), [(x, edges[1])],
             backward=False)
    _checked(lambda x: torch.histogramdd(x, [2, 3, 4], range=[-1.0, 1, -2, 2, -3, 3]),
             [(x,)], backward=False)
    _checked(lambda x, a, b, c: torch.histogramdd(x, [a, b, c]), [(x, *edges)],
             backward=False)
    jf = thunder_ir.jit(lambda x, a, b, c: torch.histogramdd(x, [a, b, c]))
    assert all(e is b for e, b in zip(jf(x, *edges).bin_edges, edges, strict=True))


def test_cov_with_weights_under_autocast_has_eagers_dtype() -> None:
    """The autocast probe of an opaque call runs it on zeros, which ``cov`` refuses as
    weights (they sum to 0): it tries ones then, and finds eager's bfloat16 result."""
    def f(x: torch.Tensor, w: torch.Tensor) -> Any:
        return torch.cov(x, correction=0, aweights=w)

    with torch.autocast("cpu", dtype=torch.bfloat16):
        check_against_eager(f, torch.randn(3, 4, requires_grad=True), torch.rand(4) + 0.1,
                            rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("name", ["bincount", "one_hot", "tensor_split", "item"])
def test_where_sizes_are_speculated_each_value_is_checked(name: str) -> None:
    """The compile after an unbacked one failed (`sizes_speculated`): each size is this
    call's value, checked on every call (a new value compiles a variant)."""
    from thunder_ir.frontend.errors import sizes_speculated

    fns: dict[str, Callable[..., Any]] = {
        "bincount": lambda x: torch.bincount(x) + 1,
        "one_hot": lambda x: F.one_hot(x) * 2,
        "tensor_split": lambda x: torch.tensor_split(torch.arange(8.0), x[:2].abs()),
        "item": lambda x: torch.arange(x[0].abs().item()),
    }
    with sizes_speculated():
        jf = _checked(fns[name], [(torch.tensor(v),) for v in ([1, 2, 2], [0, 5, 3],
                                                               [1, 2, 2], [4, 4, 0])],
                      backward=False)
    assert thunder_ir.cache_misses(jf) == 3
    assert "assume" in _source(jf)


def test_python_reads_of_a_float_item_are_speculated(capsys: Any) -> None:
    """``float(l)``, ``print(l)``, ``math.isnan(l)`` of a float ``.item()`` read its value:
    this call's, checked on every call (NaN checked as NaN)."""
    import math

    def f(x: torch.Tensor) -> Any:
        loss = x.sum().item()
        print("loss", loss)
        return x * 2 if not math.isnan(loss) else x - 1, float(loss)

    calls = [(torch.tensor(v),) for v in ([1.0, 2.0], [1.0, float("nan")], [3.0, float("nan")])]
    jf = _checked(f, calls, backward=False)
    assert thunder_ir.cache_misses(jf) == 2  # (1, 2) and (nan: the same check for every nan)
    assert "loss 3.0" in capsys.readouterr().out


def test_item_written_to_module_state_is_each_calls_number() -> None:
    """``self.loss = y.item()`` in ``forward``: the module holds eager's Python number after
    every call (each new value is a new key of the module's state: a compile per value)."""
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.loss: Any = None
            self.positive: Any = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x).sum()
            self.loss = y.item()
            self.positive = (x > 0).sum().item()
            return y

    m = M()
    e = M()
    e.load_state_dict(m.state_dict())
    jm = thunder_ir.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(jm(x), e(x))
        assert type(m.loss) is float and m.loss == e.loss
        assert type(m.positive) is int and m.positive == e.positive
