"""``cumsum`` is the ``ltorch.cumsum`` op: values, dtypes, gradients and errors as eager's,
the program's own op (no opaque call, so it fuses), and the Inductor executor takes it
inside a region (Mamba-2's segment sums; a mixture of experts' offsets).

The op's decomposition, VJP rule and round trip are checked with the op tables
(``test_decomp_core``, ``test_vjp_ltorch``, ``test_roundtrip``); these tests are the user's
view.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

import thunder_ir
from thunder_ir.lowering.executors import get_executor
from thunder_ir.testing_eager import check_against_eager


def _segsum(x: torch.Tensor) -> torch.Tensor:
    """Mamba-2's segment sum (Hugging Face's ``segment_sum``): a ``cumsum`` of a masked
    broadcast, masked again with ``-inf``."""
    n = x.size(-1)
    x = x[..., None].expand(*x.size(), n)
    below = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
    sums = torch.cumsum(x.masked_fill(~below, 0), dim=-2)
    return sums.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool)), -torch.inf)


CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "torch.cumsum": lambda x: torch.cumsum(x, 1) * 2,
    "method, negative dim": lambda x: x.cumsum(-1).sin(),
    "dim as a keyword": lambda x: x.cumsum(dim=0),
    "in float64": lambda x: torch.cumsum(x, 2, dtype=torch.float64),
    "in bfloat16": lambda x: torch.cumsum(x, 1, dtype=torch.bfloat16),
    "a bfloat16 input": lambda x: x.bfloat16().cumsum(2),
    "ints sum to int64": lambda x: (x > 0).int().cumsum(1) + x,
    "bools sum to int64": lambda x: torch.cumsum(x > 0, -1),
    "a 0-d tensor": lambda x: x.sum().cumsum(0),
    "a size-1 dim": lambda x: x[:, :1].cumsum(1),
    "an empty dim": lambda x: x[:, :0].cumsum(1),
    "a transposed view": lambda x: x.transpose(0, 2).cumsum(1),
    "twice": lambda x: x.cumsum(0).cumsum(2),
    "segment sum": lambda x: torch.exp(_segsum(x)),
    # eager's kernel (an out= call) and eager's errors
    "out=": lambda x: torch.cumsum(x.detach(), 1, out=torch.empty(2, 3, 4)),
    "dim out of range": lambda x: x.cumsum(3),
    "no dim": lambda x: torch.cumsum(x),  # type: ignore[call-arg]
    "an int dtype of a tensor that requires grad": lambda x: torch.cumsum(
        x, 0, dtype=torch.int32),
    "an int dtype without grad": lambda x: torch.cumsum(x.detach(), 0, dtype=torch.int32),
    "a bool dtype": lambda x: torch.cumsum(x.detach(), 0, dtype=torch.bool),
}
_NOT_TRACED = {"out=", "dim out of range", "no dim", "an int dtype of a tensor that requires grad",
               "a bool dtype"}


@pytest.mark.parametrize("name", list(CASES))
def test_cumsum_matches_eager(name: str) -> None:
    x = torch.randn(2, 3, 4, requires_grad=True)
    check_against_eager(CASES[name], x)
    if name in _NOT_TRACED:
        return
    jf = thunder_ir.jit(CASES[name])
    out = jf(x)
    assert type(out) is torch.Tensor  # no proxy reaches the user
    traced = str(thunder_ir.last_traces(jf)[0])  # the program's op, not an opaque call
    assert "ltorch.cumsum(" in traced and "tir.call" not in traced, traced


def test_an_in_place_cumsum_matches_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.cumsum_(1)
        return y

    check_against_eager(f, torch.randn(3, 4, requires_grad=True))


def test_an_integer_cumsum_is_exact() -> None:
    """A position count from a mask (RoBERTa's ``create_position_ids_from_input_ids``)."""
    def positions(ids: torch.Tensor) -> torch.Tensor:
        mask = ids.ne(1).int()
        return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + 1

    ids = torch.randint(0, 4, (3, 50))
    out = check_against_eager(positions, ids, exact=True)
    assert out is not None


@pytest.mark.skipif(not get_executor("torch_compile").is_available(),
                    reason="torch.compile cannot run here (no Inductor or no C++ compiler)")
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_inductor_takes_cumsum_inside_its_region() -> None:
    """Forward and backward each are one Inductor region with the scans inside; values
    and gradients are eager's."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (torch.exp(_segsum(x * w)).sum(-1).cumsum(1) * 0.1).tanh()

    x, w = torch.randn(2, 4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    check_against_eager(f, x, w, jit=lambda fn: thunder_ir.jit(fn, executors=["torch_compile"]))
    jf = thunder_ir.jit(f, executors=["torch_compile"])
    jf(x, w).sum().backward()
    for trace in (thunder_ir.last_traces(jf)[-1], thunder_ir.last_backward_traces(jf)[-1]):
        src = str(trace)
        calls = [ln for ln in src.splitlines() if not ln.lstrip().startswith("#")]
        assert len(re.findall(r"inductorFusion\d+\(", "\n".join(calls))) == 1, src
        assert "ltorch.cumsum" in src and not any("cumsum" in ln for ln in calls), src


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize("op", ["sum", "prod", "cumsum"])
def test_an_integer_dtype_of_a_tensor_that_requires_grad_raises_eagers_error(
        op: str, dtype: torch.dtype) -> None:
    """Eager's autograd refuses to record these with an integer or bool result ("Autograd
    not support dtype"); ``to`` and ``argmax`` give a result that does not require grad."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return getattr(torch, op)(x, 0, dtype=dtype)

    check_against_eager(f, torch.randn(3, 4, requires_grad=True))
    with pytest.raises(Exception, match="Autograd not support dtype") as info:
        thunder_ir.jit(f)(torch.randn(3, 4, requires_grad=True))
    assert "test_scan.py:" in str(info.value)  # the user's line
    check_against_eager(lambda x: (x.to(torch.int32), x.argmax(0)),
                        torch.randn(3, 4, requires_grad=True))
