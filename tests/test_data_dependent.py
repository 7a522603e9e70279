"""Data-dependent sizes as unbacked symbols (``thunder_ir/frontend/unbacked.py``).

``nonzero``, one-argument ``torch.where``, ``x[mask]`` and ``masked_select`` return as
many elements as a mask has true values: that count is an unbacked symbol (``u0``) of the
program, so one program serves every count (every routing of a mixture of experts),
forward and backward, against eager.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder_ir
from thunder_ir.testing_eager import check_against_eager


def _source(jf: Any) -> str:
    return str(thunder_ir.last_traces(jf)[-1])


def _unbacked(jf: Any) -> None:
    """The program typed the count with an unbacked symbol, and speculated nothing."""
    src = _source(jf)
    assert "u0" in src, src
    assert "assume" not in src, src


def _masks(shape: tuple[int, ...], n: int) -> list[torch.Tensor]:
    """``n`` masks of ``shape`` with different counts, an empty and a full one among them."""
    g = torch.Generator().manual_seed(0)
    out = [torch.zeros(shape, dtype=torch.bool), torch.ones(shape, dtype=torch.bool)]
    while len(out) < n:
        out.append(torch.rand(shape, generator=g) < 0.5)
    return out


CASES: dict[str, Callable[..., Any]] = {
    "nonzero": lambda x, m: (torch.nonzero(m), m.nonzero() * 2, torch.argwhere(m)),
    "nonzero_as_tuple": lambda x, m: torch.nonzero(m, as_tuple=True),
    "where_one_arg": lambda x, m: torch.where(m),
    "mask_index": lambda x, m: x[m] * 2,
    "mask_index_rows": lambda x, m: x[m[:, 0]].sum(0),
    "masked_select": lambda x, m: torch.masked_select(x, m).exp(),
    "masked_select_broadcast": lambda x, m: x.masked_select(m[:, :1]) + 1,
    "one_count_two_uses": lambda x, m: x[m] * (x * 3)[m],
    "size_as_value": lambda x, m: x[m].reshape(x[m].shape[0], 1) + torch.arange(
        x[m].shape[0]).unsqueeze(1),
    "expand_back": lambda x, m: x[m].view(-1, 1).expand(-1, 3).sum() + x.sum(),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients_match_eager_with_one_program(name: str) -> None:
    f = CASES[name]
    for m in _masks((4, 3), 4):
        check_against_eager(f, torch.randn(4, 3, requires_grad=True), m)
    jf = thunder_ir.jit(f)
    x = torch.randn(4, 3, requires_grad=True)
    for m in _masks((4, 3), 6):
        out, ref = jf(x, m), f(x, m)
        torch.testing.assert_close(out, ref)
    assert thunder_ir.cache_misses(jf) == 1
    _unbacked(jf)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_dtypes(dtype: torch.dtype) -> None:
    def f(x: torch.Tensor, m: torch.Tensor) -> Any:
        return x[m], torch.masked_select(x, m)

    x = (torch.randn(5, 2) * 4).to(dtype)
    for m in _masks((5, 2), 3):
        check_against_eager(f, x, m)


def test_uint8_mask_index_like_eager() -> None:
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return x[m] + 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in _masks((3, 4), 3):
            check_against_eager(f, torch.randn(3, 4, requires_grad=True), m.to(torch.uint8))


def test_none_gradients_and_grads_through_the_count() -> None:
    """An input the selected values do not depend on gets ``None``, as eager's."""
    def f(x: torch.Tensor, y: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        rows = x[m]
        return (rows * rows.shape[0]).sum() + y.detach().sum()

    for m in _masks((6,), 3):
        check_against_eager(f, torch.randn(6, 2, requires_grad=True),
                            torch.randn(2, requires_grad=True), m)


def test_token_classification_loss_one_program_for_every_padding() -> None:
    """``logits[keep]`` and ``labels[keep]`` share the count: the loss type-checks."""
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        keep = labels != -100
        return F.cross_entropy(logits[keep], labels[keep])

    jl = thunder_ir.jit(loss)
    logits = torch.randn(2, 6, 5, requires_grad=True)
    for k in range(1, 6):
        labels = torch.randint(0, 5, (2, 6))
        labels[0, :k] = -100
        check_against_eager(loss, logits, labels)
        out = jl(logits, labels)
        out.backward()
        g = logits.grad
        logits.grad = None
        ref = loss(logits, labels)
        ref.backward()
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g, logits.grad)
        logits.grad = None
    assert thunder_ir.cache_misses(jl) == 1
    _unbacked(jl)
    assert "u0" in str(thunder_ir.last_backward_traces(jl)[-1])


def test_sizes_branched_on_fall_back_to_speculation() -> None:
    """A Python decision on the count (control flow on values) is speculated as before."""
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        rows = x[m]
        return rows * 2 if rows.shape[0] > 2 else rows - 1

    jf = thunder_ir.jit(f)
    x = torch.randn(5)
    for m in _masks((5,), 5):
        torch.testing.assert_close(jf(x, m), f(x, m))


# --------------------------------------------------------------------------- mixture of experts


class Expert(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """Mixtral's sparse MoE block: top-k routing, ``torch.where`` per expert, the routed
    tokens' outputs added back with ``index_add_``; expert ``E-1`` is never routed to
    (its gate bias is very negative), so it is always empty."""

    def __init__(self, d: int = 8, f: int = 16, experts: int = 4, k: int = 2) -> None:
        super().__init__()
        self.experts_n, self.k = experts, k
        self.gate = nn.Linear(d, experts)
        with torch.no_grad():
            self.gate.bias.zero_()
            self.gate.bias[-1] = -1e4
        self.experts = nn.ModuleList(Expert(d, f) for _ in range(experts))

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, d = h.shape
        h = h.view(-1, d)
        logits = self.gate(h)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.k, dim=-1)
        if self.k > 1:
            w = w / w.sum(dim=-1, keepdim=True)
        w = w.to(h.dtype)
        out = torch.zeros((b * s, d), dtype=h.dtype, device=h.device)
        mask = F.one_hot(sel, num_classes=self.experts_n).permute(2, 1, 0)
        for e in range(self.experts_n):
            idx, top_x = torch.where(mask[e])
            cur = h[None, top_x].reshape(-1, d)
            cur = self.experts[e](cur) * w[top_x, idx, None]
            out.index_add_(0, top_x, cur.to(h.dtype))
        return out.reshape(b, s, d), logits


@pytest.mark.parametrize("k", [1, 2])
def test_moe_trains_as_one_program_for_every_routing(k: int) -> None:
    torch.manual_seed(k)
    model = SparseMoE(k=k)
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    routings = set()
    for _ in range(6):
        x = torch.randn(2, 5, 8)
        y, logits = jm(x)
        (y.square().sum() + logits.sum()).backward()
        ry, rlogits = ref(x)
        (ry.square().sum() + rlogits.sum()).backward()
        torch.testing.assert_close(y, ry)
        torch.testing.assert_close(logits, rlogits)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            if q.grad is None:
                assert p.grad is None
            else:
                torch.testing.assert_close(p.grad, q.grad)
        routings.add(tuple(torch.topk(rlogits, k, dim=-1).indices.flatten().tolist()))
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    assert len(routings) > 1
    assert thunder_ir.cache_misses(jm) == 1  # one forward and one backward program
    _unbacked(jm)
    # index_add_ is the traced op, differentiated by its own rule: no opaque torch call
    # (call_with_grad) in the forward, no opaque VJP (handle_vjp) in the backward
    forward = _source(jm)
    backward = str(thunder_ir.last_backward_traces(jm)[-1])
    assert "torch.index_add(" in forward and "call_with_grad" not in forward, forward
    assert "handle_vjp" not in backward and "u0" in backward, backward


# --------------------------------------------------------------------------- values as sizes

ITEM_CASES: dict[str, Callable[..., Any]] = {
    "slice_stop": lambda x, n: x[:n.item()] * 2,
    "slice_start": lambda x, n: x[n.item():].sum(0),
    "arange": lambda x, n: torch.arange(n.item()) + x.sum(),
    "new_zeros": lambda x, n: x.new_zeros((n.item(), 2)) + 1,
    "narrow": lambda x, n: x.narrow(0, 0, n.item()) * 3,
    "zeros_varargs": lambda x, n: torch.zeros(n.item(), 2) + x.sum(),
    "bound_expression": lambda x, n: x[:n.item() + 1] * x.shape[0],
    "scalar_operand": lambda x, n: x * n.item(),
    "tensor_bound": lambda x, n: x[1:n] * 2,
}


@pytest.mark.parametrize("name", sorted(ITEM_CASES))
def test_a_value_as_a_size_is_an_unbacked_symbol(name: str) -> None:
    """``.item()`` of an integer tensor used as a size or slice bound, a 0-d integer
    tensor as a slice bound or an index: one program for every value of one sign (the
    sign is speculated: a value of the other sign compiles one more)."""
    f = ITEM_CASES[name]
    x = torch.randn(6, 2, requires_grad=True)
    for k in (0, 3, 5):
        check_against_eager(f, x, torch.tensor(k))
    jf = thunder_ir.jit(f)
    for k in (0, 2, 5, 3, 1):
        torch.testing.assert_close(jf(x, torch.tensor(k)), f(x, torch.tensor(k)))
    assert thunder_ir.cache_misses(jf) == 1
    assert "u0" in _source(jf)


def test_a_0d_index_gives_eagers_view() -> None:
    """``x[t]`` with a 0-d integer tensor is eager's view of row ``t``: a write through
    the row reaches ``x`` and the row is a view of it. The index's value is speculated
    (checked on every call: a program per row met, as eager's view needs its offset); a
    copy by ``index_select`` gave the right values but lost the writes."""
    def f(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x[t]
        y.add_(1)
        return x * 2, y

    jf = thunder_ir.jit(f)
    for k in (1, 2, 0, -1, 1, -3):
        x, xe = torch.zeros(3, 2), torch.zeros(3, 2)
        got, want = jf(x, torch.tensor(k)), f(xe, torch.tensor(k))
        torch.testing.assert_close(got, want)
        assert torch.equal(x, xe) and got[1]._base is x
        assert got[1].storage_offset() == want[1].storage_offset()
    assert thunder_ir.cache_misses(jf) <= 5
    with pytest.raises(IndexError, match="out of bounds"):
        jf(torch.zeros(3, 2), torch.tensor(5))
    check_against_eager(lambda x, n: x[n] * 2, torch.randn(6, 2, requires_grad=True),
                        torch.tensor(4))


def test_negative_values_compile_once_more() -> None:
    def f(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return x[n.item():].sum(0) * 2

    jf = thunder_ir.jit(f)
    x = torch.randn(6, 2)
    for k in (2, 5, -2, -4, 0, -6, 3):
        torch.testing.assert_close(jf(x, torch.tensor(k)), f(x, torch.tensor(k)))
    assert thunder_ir.cache_misses(jf) == 2


@pytest.mark.parametrize("name", ["unique", "unique_inverse_counts", "unique_dim",
                                  "unique_consecutive", "repeat_interleave"])
def test_ops_sized_by_torchs_fake_kernels(name: str) -> None:
    f = {
        "unique": lambda x: torch.unique(x) * 2,
        "unique_inverse_counts": lambda x: torch.unique(x, return_inverse=True,
                                                        return_counts=True),
        "unique_dim": lambda x: torch.unique(x.reshape(3, 2), dim=0),
        "unique_consecutive": lambda x: torch.unique_consecutive(x),
        "repeat_interleave": lambda x: torch.repeat_interleave(x.clamp(0, 3)),
    }[name]
    jf = thunder_ir.jit(f)
    for k in range(4):
        x = torch.randint(0, 2 + k, (6,))
        check_against_eager(f, x)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 1
    assert "u0" in _source(jf)


def test_moe_over_lengths_and_routings_compiles_twice() -> None:
    """A new sequence length makes the length symbolic too (automatic dynamic): the
    second program serves every length and every routing (``s0`` and ``u0`` together)."""
    torch.manual_seed(3)
    model = SparseMoE(k=2)
    ref = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    for length in (5, 7, 9, 6, 11):
        x = torch.randn(2, length, 8)
        y, logits = jm(x)
        (y.square().sum() + logits.sum()).backward()
        ry, rlogits = ref(x)
        (ry.square().sum() + rlogits.sum()).backward()
        torch.testing.assert_close(y, ry)
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad)
    assert thunder_ir.cache_misses(jm) == 2


# --------------------------------------------------------------------------- decisions on counts

DECISIONS: dict[str, Callable[..., Any]] = {
    "branch": lambda x, m: x[m] * 2 if x[m].shape[0] > 2 else x[m] - 1,
    "len": lambda x, m: x[m] * len(x[m]),
    "iterate": lambda x, m: sum(r.sum() for r in x[m]) + x.sum(),
    "int_of_item": lambda x, m: x * int(m.sum().item()),
}


@pytest.mark.parametrize("name", sorted(DECISIONS))
def test_decisions_on_a_count_are_speculated(name: str) -> None:
    """Python control flow on a count (``if``, ``len``, iteration, ``int``): the decision
    is speculated and checked (a program per outcome, the sizes it does not decide on
    still unbacked), as eager's."""
    f = DECISIONS[name]
    jf = thunder_ir.jit(f)
    for k in range(5):
        x = torch.randn(6, requires_grad=True)
        m = torch.arange(6) < k + 1
        check_against_eager(f, x, m)
        torch.testing.assert_close(jf(x, m), f(x, m))
        torch.testing.assert_close(jf(x, m), f(x, m))  # (a cached call checks it again)
    if name == "branch":  # two outcomes: two programs, each for every count of its side
        assert thunder_ir.cache_misses(jf) == 2
        assert "u0" in _source(jf)


def test_slice_bound_of_unknown_sign_is_one_program() -> None:
    """``x[:n.item() - 3]``: a bound whose sign is not known is a conditional expression
    (``max(0, 3 + u0) if u0 < 3 else min(6, (-3) + u0)``), not a decision."""
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return x[:m.sum().item() - 3].sum() + x.sum()

    jf = thunder_ir.jit(f)
    for k in range(6):
        x = torch.randn(6, requires_grad=True)
        m = torch.arange(6) < k + 1
        check_against_eager(f, x, m)
        torch.testing.assert_close(jf(x, m), f(x, m))
    assert thunder_ir.cache_misses(jf) == 1


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_zero_d_integer_index_of_each_dtype(dtype: torch.dtype) -> None:
    def f(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return x[t] * 2

    jf = thunder_ir.jit(f)
    x = torch.randn(4, 3, requires_grad=True)
    for v in (0, 3, -1, -4, 2):
        t = torch.tensor(v, dtype=dtype)
        check_against_eager(f, x, t)
        torch.testing.assert_close(jf(x, t), f(x, t))
    assert thunder_ir.cache_misses(jf) <= 5  # (the index speculated: eager's view per row)
