"""Eager semantics of constructs real models use (issue 28), each written as a user writes
it, against eager: values, gradients (``None`` where eager has ``None``), the module's state
after the call, or eager's own error.

Sections: NumPy scalars as operands; ``requires_grad`` set inside ``forward``; modules
converted inside ``forward`` (``.to``, ``.double()``, ``.data =``); empty batches through
batch norm; ops without a meta kernel whose result shape is known (``F.ctc_loss``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder_ir
from thunder_ir.frontend.fallback import SHAPE_RULES
from thunder_ir.testing_eager import check_against_eager

# --------------------------------------------------------------------------- NumPy scalars

_X = torch.randn(2, 3, requires_grad=True)
_I = torch.arange(4, dtype=torch.int32)
_H = torch.ones(3, dtype=torch.float16)

NUMPY_CASES: dict[str, tuple[Callable[..., Any], torch.Tensor]] = {
    "attention scale": (lambda t: t / np.sqrt(t.shape[-1]), _X),
    "scalar on the left": (lambda t: np.float64(2.0) * t, _X),
    "float32 scalar": (lambda t: t * np.float32(0.5), _X),
    "int64 with int32": (lambda i: i + np.int64(3), _I),
    "float64 with int32": (lambda i: i * np.float64(1.5), _I),
    "float64 keeps float16": (lambda h: h * np.float64(2.0), _H),
    "bool": (lambda t: t + np.bool_(True), _X),
    "alpha": (lambda t: torch.add(t, t, alpha=np.float32(2.0)), _X),
    "fill value": (lambda t: torch.full((3,), np.float32(3.0)) + t, _X),
    "clamp bound": (lambda t: t.clamp(min=np.float64(0.1)), _X),
    "exponent": (lambda t: t.pow(np.int64(2)), _X),
    "view size": (lambda t: t.view(np.int64(6)), _X),
    "reshape sizes": (lambda t: t.reshape((np.int64(3), np.int64(2))), _X),
    "dim": (lambda t: t.sum(dim=np.int64(1)), _X),
    "index": (lambda t: t[np.int64(1)], _X),
    "slice bounds": (lambda t: t[:, np.int64(1):np.int64(3)], _X),
}


@pytest.mark.parametrize("case", list(NUMPY_CASES))
def test_numpy_scalars_are_the_python_numbers_eager_takes_them_for(case: str) -> None:
    fn, x = NUMPY_CASES[case]
    check_against_eager(fn, x, backward=x.requires_grad)


class NumpyAttention(nn.Module):
    """Attention scaled by ``np.sqrt(head_size)`` (as several speech and vision models)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
        return scores.softmax(-1) @ v


def test_a_model_scaling_by_a_numpy_scalar_trains_as_eager() -> None:
    torch.manual_seed(0)
    check_against_eager(NumpyAttention(), torch.randn(2, 5, 8))


# --------------------------------------------------------------------------- requires_grad


def _leaf_from_a_product(t: torch.Tensor) -> torch.Tensor:
    h = t * 2
    h.requires_grad = True
    return h.sin() * 3


def _detached_leaf(t: torch.Tensor) -> torch.Tensor:
    h = t.detach()
    h.requires_grad_(True)
    return h * 3 + t


def _computed_made_not_to_require_grad(t: torch.Tensor) -> torch.Tensor:
    h = t * 2
    h.requires_grad = False  # eager: only leaves' flags may change
    return h


def _integer_made_to_require_grad(t: torch.Tensor) -> torch.Tensor:
    h = (t > 0).long()
    h.requires_grad = True  # eager: only floating-point and complex tensors
    return h


REQUIRES_GRAD_CASES: dict[str, tuple[Callable[..., Any], torch.Tensor]] = {
    "a leaf made inside, nothing else requires grad": (_leaf_from_a_product,
                                                       torch.randn(3, 4)),
    "a detached alias of an input that requires grad": (_detached_leaf,
                                                        torch.randn(3, 4, requires_grad=True)),
    "a detached alias of an input": (_detached_leaf, torch.randn(3, 4)),
    "eager's error: a computed tensor": (_computed_made_not_to_require_grad,
                                         torch.randn(3, 4, requires_grad=True)),
    "eager's error: an integer tensor": (_integer_made_to_require_grad, torch.randn(3, 4)),
}


@pytest.mark.parametrize("case", list(REQUIRES_GRAD_CASES))
def test_requires_grad_set_inside_forward_follows_eagers_rules(case: str) -> None:
    fn, x = REQUIRES_GRAD_CASES[case]
    check_against_eager(fn, x)


class FrozenEmbeddingWithAdapter(nn.Module):
    """Hugging Face's ``enable_input_require_grads`` (gradient checkpointing with frozen
    embeddings): a forward hook makes the embeddings' output require grad."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.emb.weight.requires_grad_(False)
        self.adapter = nn.Linear(4, 2)
        self.emb.register_forward_hook(lambda m, i, out: out.requires_grad_(True))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.adapter(self.emb(ids)).sum()


def test_an_output_made_to_require_grad_by_a_hook_trains_as_eager() -> None:
    torch.manual_seed(0)
    check_against_eager(FrozenEmbeddingWithAdapter(), torch.randint(0, 10, (2, 3)))
    m = FrozenEmbeddingWithAdapter()
    thunder_ir.jit(m)(torch.randint(0, 10, (2, 3))).backward()
    assert m.adapter.weight.grad is not None and m.emb.weight.grad is None


class FreezesItself(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.lin.weight.requires_grad_(False)
        return self.lin(x)


def test_requires_grad_of_a_parameter_inside_forward_is_refused_with_the_line() -> None:
    m = FreezesItself()
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_constructs\.py:\d+: requires_grad_\(False\) on an argument"):
        thunder_ir.jit(m)(torch.ones(2))
    assert m.lin.weight.requires_grad


# --------------------------------------------------------------------------- modules converted


class ConvertsItsHead(nn.Module):
    """``self.classifier = self.classifier.to(self.dtype)`` inside ``forward``."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.classifier = nn.Linear(4, 2)
        self.head_dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier = self.classifier.to(self.head_dtype)
        return self.classifier(self.body(x).to(self.head_dtype))


class DoublesItsHead(ConvertsItsHead):
    """``self.classifier.double()`` inside ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier.double()
        return self.classifier(self.body(x).double())


def test_a_module_converted_to_its_own_dtype_inside_forward_trains_as_eager() -> None:
    torch.manual_seed(0)
    check_against_eager(ConvertsItsHead(torch.float32), torch.randn(3, 4))


@pytest.mark.parametrize("convert", ["to", "double"])
def test_a_module_converted_to_another_dtype_in_inference_is_converted_once(
        convert: str) -> None:
    """The first call converts the head's parameters (the user's tensors, kept as
    Parameters), later calls find them converted; results equal eager's each call."""
    torch.manual_seed(0)
    m = (ConvertsItsHead if convert == "to" else DoublesItsHead)(torch.float64)
    m = m.eval().requires_grad_(False)
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    weight = m.classifier.weight
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4)
            got, want = jm(x), e(x)
            assert got.dtype == want.dtype == torch.float64
            torch.testing.assert_close(got, want)
    assert m.classifier.weight is weight and type(weight) is nn.Parameter
    assert weight.dtype == torch.float64
    torch.testing.assert_close(weight, e.classifier.weight)


def test_converting_a_parameter_that_requires_grad_to_another_dtype_is_refused() -> None:
    m = ConvertsItsHead(torch.float64)
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_constructs\.py:\d+: `\.data = ` with another dtype"):
        thunder_ir.jit(m)(torch.randn(3, 4))
    assert m.classifier.weight.dtype == torch.float32  # left as it was


def test_data_assigned_with_the_same_dtype_is_a_write_without_gradient() -> None:
    def replace(t: torch.Tensor) -> torch.Tensor:
        h = t * 2
        h.data = torch.ones(3, 4)
        return h + t

    check_against_eager(replace, torch.randn(3, 4, requires_grad=True))


# --------------------------------------------------------------------------- empty batches


@pytest.mark.parametrize("build,shape", [
    (lambda: nn.BatchNorm1d(4), (0, 4)),
    (lambda: nn.BatchNorm2d(3), (0, 3, 2, 2)),
    (lambda: nn.BatchNorm1d(4, affine=False), (0, 4, 5)),
    (lambda: nn.BatchNorm1d(4).eval(), (0, 4)),
], ids=["1d", "2d", "no-affine", "eval"])
def test_batch_norm_on_an_empty_batch_is_eagers(build: Callable[[], nn.Module],
                                                shape: tuple[int, ...]) -> None:
    """Empty outputs, zero weight and bias gradients, the running statistics unchanged and
    ``num_batches_tracked`` counted, as eager."""
    x = torch.randn(*shape, requires_grad=True)
    check_against_eager(build(), x)
    m = build()
    e = copy.deepcopy(m)
    thunder_ir.jit(m)(x).sum().backward()
    e(x).sum().backward()
    for (name, a), (_, b) in zip(m.state_dict().items(), e.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    for a, b in zip(m.parameters(), e.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.equal(a.grad, b.grad)


# --------------------------------------------------------------------------- shape rules


def _ctc_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    log_probs = torch.randn(10, 2, 5).log_softmax(2).detach().requires_grad_()
    targets = torch.randint(1, 5, (2, 4))
    return log_probs, targets, torch.tensor([10, 8]), torch.tensor([4, 3])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_with_tensor_lengths_is_eagers(reduction: str) -> None:
    check_against_eager(
        lambda lp, tg, il, tl: F.ctc_loss(lp, tg, il, tl, reduction=reduction),
        *_ctc_inputs())


def test_ctc_loss_unbatched_and_as_a_module() -> None:
    check_against_eager(
        lambda lp, tg, il, tl: F.ctc_loss(lp[:, 0], tg[0], il[0], tl[0], reduction="none"),
        *_ctc_inputs())
    check_against_eager(
        lambda lp, tg, il, tl: nn.CTCLoss(zero_infinity=True)(lp, tg, il, tl),
        *_ctc_inputs())


def test_every_shape_rule_names_a_torch_function_without_a_meta_kernel() -> None:
    """Coverage of the rule table: each entry is a real torch function, and its rule
    agrees with eager's result on the test inputs."""
    lp, tg, il, tl = _ctc_inputs()
    for name, rule in SHAPE_RULES.items():
        fn: Any = torch
        for part in name.split(".")[1:]:
            fn = getattr(fn, part)
        args = (lp, tg, il, tl, 0, 0 if name == "torch.ctc_loss" else "none")
        out = fn(*args)
        assert rule(*args) == (tuple(out.shape), out.dtype), name
