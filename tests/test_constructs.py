"""Eager semantics of constructs real models use (issue 28), each written as a user writes
it, against eager: values, gradients (``None`` where eager has ``None``), the module's state
after the call, or eager's own error.

Sections: NumPy scalars and 0-d arrays as operands; ``requires_grad`` set inside
``forward``; modules converted inside ``forward`` (``.to``, ``.double()``, ``.half()``,
``.float()``, ``.data =``);
empty batches through batch norm; ops without a meta kernel whose result shape is known
(``F.ctc_loss``); data-dependent conditions speculated and checked; torch's higher-order
ops (``cond``, ``scan``, ``associative_scan``, ...) and ``torch.vmap`` inside traced code.
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
from torch.func import vmap as func_vmap

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


_N = torch.randn(2, 3)  # NumPy computes with a tensor's values: eager refuses grad


def _rebinds_in_place(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = t
    y *= np.array(2.0)  # eager: Tensor.__imul__ declines the array; y = y * a
    return y, t


ARRAY_CASES: dict[str, tuple[Callable[..., Any], torch.Tensor]] = {
    "float64 array promotes float32": (lambda t: t * np.array(2.0), _N),
    "float32 array keeps float32": (lambda t: t + np.array(1.5, dtype=np.float32), _N),
    "int64 array divides int32": (lambda i: i / np.array(3), _I),
    "int64 array with int32": (lambda i: i * np.array(2), _I),
    "power, floor division, remainder": (
        lambda t: (t ** np.array(2), t // np.array(0.5), t % np.array(0.7)), _N),
    "transposed tensor keeps its layout": (lambda t: t.t() - np.array(1.0), _N),
    "== takes the array as a 0-d tensor": (lambda t: t == np.array(0.1), torch.tensor([0.1])),
    "!= is Python's identity fallback": (lambda t: t != np.array(1.0), _N),
    "in-place operator rebinds": (_rebinds_in_place, _N),
    "eager's error: requires grad": (lambda t: t * np.array(2.0), _X),
    "eager's error: bitwise on floats": (lambda t: t & np.array(2.0), _N),
    "eager's error: array on the left": (lambda t: np.array(2.0) * t, _N),
    "eager's error: ordering": (lambda t: t < np.array(2.0), _N),
}


@pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context")
@pytest.mark.parametrize("case", list(ARRAY_CASES))
def test_numpy_0d_arrays_are_computed_as_eager_computes_them(case: str) -> None:
    fn, x = ARRAY_CASES[case]
    check_against_eager(fn, x, backward=False)


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


class HalvesItsHead(ConvertsItsHead):
    """``self.classifier.half()`` inside ``forward`` (then computes in float16)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier.half()
        return self.classifier(self.body(x).half())


class FloatsItsHead(ConvertsItsHead):
    """``self.classifier.float()`` inside ``forward``, on a float32 head: a no-op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier.float()
        return self.classifier(self.body(x))


@pytest.mark.parametrize("cls", [ConvertsItsHead, FloatsItsHead], ids=["to", "float"])
def test_a_module_converted_to_its_own_dtype_inside_forward_trains_as_eager(
        cls: type[ConvertsItsHead]) -> None:
    torch.manual_seed(0)
    check_against_eager(cls(torch.float32), torch.randn(3, 4))


_CONVERTERS = {"to": (ConvertsItsHead, torch.float64), "double": (DoublesItsHead, torch.float64),
               "half": (HalvesItsHead, torch.float16)}


@pytest.mark.parametrize("convert", list(_CONVERTERS))
def test_a_module_converted_to_another_dtype_in_inference_is_converted_once(
        convert: str) -> None:
    """The first call converts the head's parameters (the user's tensors, kept as
    Parameters), later calls find them converted; results equal eager's each call."""
    torch.manual_seed(0)
    cls, dtype = _CONVERTERS[convert]
    m = cls(dtype).eval().requires_grad_(False)
    e = copy.deepcopy(m)
    jm = thunder_ir.jit(m)
    weight = m.classifier.weight
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4)
            got, want = jm(x), e(x)
            assert got.dtype == want.dtype == dtype
            torch.testing.assert_close(got, want)
    assert m.classifier.weight is weight and type(weight) is nn.Parameter
    assert weight.dtype == dtype
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


# --------------------------------------------------------------------------- speculation


def _validated(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if labels.max() >= 10:
        raise ValueError("a label is out of range")
    if torch.any(x < -100):
        x = x.clamp(min=-100)
    return x * 2


def _cache(fn: Any) -> Any:
    return fn.cache if hasattr(fn, "cache") else fn._compiled.cache


def test_a_validation_that_only_raises_is_speculated_and_checked() -> None:
    """The first call's branch is traced and checked on every call: a call that breaks
    the assumption raises eager's own error (the other branch, traced for it); valid
    calls keep hitting the first program; the check is in the trace."""
    check_against_eager(_validated, torch.randn(3, requires_grad=True), torch.tensor([1, 2]))
    jf = thunder_ir.jit(_validated)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x, torch.tensor([1, 2])), x * 2)
    assert "tir.assume(" in str(thunder_ir.last_traces(jf)[-1])
    with pytest.raises(ValueError, match="a label is out of range"):
        jf(x, torch.tensor([1, 20]))
    for _ in range(3):
        y = torch.randn(3)
        labels = torch.tensor([3, 4])
        torch.testing.assert_close(jf(y, labels), _validated(y, labels))
    big, labels = torch.tensor([-200.0, 1.0, 2.0]), torch.tensor([1, 2])
    torch.testing.assert_close(jf(big, labels), _validated(big, labels))
    assert thunder_ir.cache_misses(jf) == 2  # the first program, and the clamping variant


def _three_branches(x: torch.Tensor) -> torch.Tensor:
    out = x
    for i in range(3):
        out = out + i if x[i] > 0 else out * 2
    return out


def test_branches_that_change_compile_variants_then_run_eagerly() -> None:
    """Eight combinations of three conditions: the first four compile variants, the
    others run eagerly; every result is eager's."""
    import itertools

    jf = thunder_ir.jit(_three_branches)
    for signs in itertools.product([1.0, -1.0], repeat=3):
        x = torch.tensor([*signs, 5.0], requires_grad=True)
        got, want = jf(x), _three_branches(x)
        torch.testing.assert_close(got, want)
        (g1,) = torch.autograd.grad(got.sum(), x)
        (g2,) = torch.autograd.grad(want.sum(), x)
        torch.testing.assert_close(g1, g2)
    assert thunder_ir.cache_misses(jf) == 4
    assert _cache(jf).stats.eager_calls == 4
    assert str(thunder_ir.last_traces(jf)[-1]).startswith("# This call ran eagerly: ")
    jf(torch.tensor([1.0, 1.0, 1.0, 5.0]))  # the first variant again
    assert "ran eagerly" not in str(thunder_ir.last_traces(jf)[-1])
    assert "tir.assume(" in str(thunder_ir.last_traces(jf)[-1])


def _coin(x: torch.Tensor) -> torch.Tensor:
    y = F.dropout(x, 0.5, training=True)
    return y * 2 if y.sum() > 0 else y * 3


def test_a_condition_on_random_values_draws_what_eager_draws() -> None:
    """A stopped program's draws are taken back before the call runs another way."""
    jf = thunder_ir.jit(_coin)
    for seed in range(8):
        x = torch.randn(4)
        torch.manual_seed(seed)
        got = jf(x)
        after = torch.rand(2)
        torch.manual_seed(seed)
        want = _coin(x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(after, torch.rand(2))


class LayerDrop(nn.Module):
    """Wav2Vec2's LayerDrop: each layer is skipped when a fresh ``torch.rand([])`` falls
    under ``p``, after a dropout that draws first."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = F.dropout(x, 0.2, training=self.training)
            if self.training and torch.rand([]) < 0.5:
                continue
            x = x + layer(x).tanh()
        return x


def test_layerdrop_compiles_each_combination_once_and_draws_as_eager() -> None:
    """The speculated value of a draw is the one the program makes (the draws before it
    replayed in program order; tracing draws nothing): each call runs the variant of its
    combination of skipped layers (at most four programs, none run eagerly), with eager's
    values, gradients and generator state afterwards."""
    torch.manual_seed(0)
    m = LayerDrop()
    jm = thunder_ir.jit(copy.deepcopy(m))
    for seed in range(12):
        x = torch.randn(3, 4)
        xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        torch.manual_seed(seed)
        got = jm(xj)
        got.sum().backward()
        after = torch.rand(2)
        torch.manual_seed(seed)
        want = m(xe)
        want.sum().backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xj.grad, xe.grad)
        torch.testing.assert_close(after, torch.rand(2))
    for p, q in zip(jm.parameters(), m.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert thunder_ir.cache_misses(jm) <= 4
    assert _cache(jm).stats.eager_calls == 0


def test_a_first_call_with_random_factories_draws_as_eager() -> None:
    """Tracing ``torch.rand`` (an opaque call: typed by a run on the meta device) leaves
    the generator as it was: the first call's draws are eager's."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rand([]) + torch.rand(3) + torch.randn(3, dtype=torch.float64).float()

    for seed in range(2):
        torch.manual_seed(seed)
        got = thunder_ir.jit(f)(torch.ones(3))
        torch.manual_seed(seed)
        torch.testing.assert_close(got, f(torch.ones(3)))


@pytest.mark.parametrize("fn", [
    lambda a, b: a * 2 if torch.equal(a, b) else a,
    lambda a, b: a * 2 if torch.allclose(a, b + 1e-9) else a,
    lambda a, b: a * 2 if a.equal(b[:2]) else a,  # other shapes: not equal, no check
    lambda a, b: a * 2 if torch.is_nonzero(a.sum() > 0) else a,
    lambda a, b: a * 2 if (a > b).all().item() else a,
], ids=["equal", "allclose", "equal-shapes", "is_nonzero", "bool-item"])
def test_value_comparisons_are_speculated(fn: Callable[..., Any]) -> None:
    a = torch.randn(3, requires_grad=True)
    check_against_eager(fn, a, a.detach().clone())
    check_against_eager(fn, a, torch.randn(3))


def test_bool_of_several_values_raises_eagers_error_with_the_line() -> None:
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        thunder_ir.jit(lambda t: t * 2 if t > 0 else t)(torch.randn(3))


def test_masked_select_sizes_are_unbacked_symbols() -> None:
    """A CTC loss's target flattening: the count of selected elements is an unbacked
    symbol of the one program."""
    def flat(x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return (x.masked_select(labels >= 0) * 2).sum() + torch.nonzero(labels > 0).sum()

    labels = torch.tensor([[1, 2, -1], [3, -1, -1]])
    check_against_eager(flat, torch.randn(2, 3, requires_grad=True), labels)
    jf = thunder_ir.jit(flat)
    x = torch.randn(2, 3)
    for lab in (labels, labels.flip(0), torch.tensor([[1, 1, 1], [-1, -1, -1]])):
        torch.testing.assert_close(jf(x, lab), flat(x, lab))
    assert thunder_ir.cache_misses(jf) == 1  # (each count: the same program)


def _masked_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    keep = labels != -100  # the rows a token-classification loss keeps
    return F.cross_entropy(logits[keep], labels[keep])


def _masked_write(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[m] = x[m] * 3
    return y


def test_boolean_mask_indexing_is_sized_by_an_unbacked_symbol() -> None:
    """``x[mask]`` over leading dims: as many rows as the mask's true values, an unbacked
    symbol (``u0``; ``tests/test_data_dependent.py``): one program for every count,
    gradients through the rows."""
    logits = torch.randn(2, 4, 5, requires_grad=True)
    labels = torch.tensor([[1, -100, 2, 3], [-100, -100, 4, 0]])
    check_against_eager(_masked_loss, logits, labels)
    check_against_eager(_masked_write, torch.randn(4, 3, requires_grad=True),
                        torch.tensor([True, False, True, True]))
    jf = thunder_ir.jit(_masked_loss)
    for lab in (labels, labels.flip(1), torch.full((2, 4), 1)):
        torch.testing.assert_close(jf(logits, lab), _masked_loss(logits, lab))
    assert thunder_ir.cache_misses(jf) == 1  # five rows twice, then eight: one program


class CausalEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.enc(x, mask=mask)  # is_causal detected by comparing the mask


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_transformer_encoder_causal_mask_detection(train: bool) -> None:
    torch.manual_seed(0)
    m = CausalEncoder().train(train)
    check_against_eager(m, torch.randn(2, 5, 8), backward=train)


# --------------------------------------------------------------------------- higher-order ops


def _hop(name: str) -> Any:
    import importlib

    module = importlib.import_module(f"torch._higher_order_ops.{name}")
    return getattr(module, "map" if name == "map" else name)


def _scan_step(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return carry * 0.5 + x, (carry + x).sin()


HOP_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "cond on a tensor": lambda t: torch.cond(t.sum() > 0, lambda u: u.sin(),
                                             lambda u: u.cos() * 2, (t,)),
    "cond on a bool": lambda t: torch.cond(True, lambda u: u.sin(), lambda u: u.cos(), (t,)),
    "map": lambda t: _hop("map")(lambda row, w: (row * w).tanh(), t, torch.ones(3)),
    "scan": lambda t: _hop("scan")(_scan_step, torch.zeros(3), t),
    "while_loop, counted": lambda t: _hop("while_loop")(
        lambda i, u: i < 3, lambda i, u: (i + 1, u * 2), (torch.tensor(0), t)),
    "while_loop, on values": lambda t: _hop("while_loop")(
        lambda u: u.abs().sum() < 100, lambda u: (u * 2 + 1,), (t,)),
    "associative_scan, generic": lambda t: _hop("associative_scan")(
        lambda a, b: a * b + b, t, dim=0, combine_mode="generic"),
    "vmap inside": lambda t: torch.vmap(lambda r: (r * r).sum())(t),
}


@pytest.mark.parametrize("case", list(HOP_CASES))
def test_higher_order_ops_inside_traced_code_are_eagers(case: str) -> None:
    torch.manual_seed(0)
    check_against_eager(HOP_CASES[case], torch.randn(5, 3, requires_grad=True))


_ROWS_SIN = torch.vmap(lambda r: r.sin() * 2)  # wrapped before any trace runs

VMAP_CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "torch.vmap": lambda t, w: torch.vmap(lambda r: (r * w).sum())(t),
    "torch.func.vmap": lambda t, w: torch.func.vmap(lambda r: r * w)(t),
    "vmap imported by name": lambda t, w: func_vmap(lambda r: (r * w).tanh())(t),
    "wrapped before the trace": lambda t, w: _ROWS_SIN(t) * w,
    "in_dims with None": lambda t, w: torch.vmap(torch.dot, in_dims=(0, None))(t, w),
    "negative in_dims": lambda t, w: torch.vmap(lambda c: c.softmax(0), in_dims=-1)(t),
    "out_dims": lambda t, w: torch.vmap(lambda r: r * w, out_dims=-1)(t),
    "nested": lambda t, w: torch.vmap(torch.vmap(lambda a: a * w.sum()))(t),
    "keyword arguments, not mapped": lambda t, w: torch.vmap(lambda r, scale: r * scale)(
        t, scale=w),
    "nested outputs": lambda t, w: torch.vmap(lambda r: (r.sum(), {"d": [r * w]}))(t),
    "an output that does not depend on the batch": lambda t, w: torch.vmap(
        lambda r: (r * 2, w.exp()), out_dims=(0, None))(t),
    "a result expanded over the batch": lambda t, w: torch.vmap(lambda r: w.exp())(t),
    "chunk_size": lambda t, w: torch.vmap(lambda r: r.softmax(0) * w, chunk_size=2)(t),
    "an empty batch": lambda t, w: torch.vmap(lambda r: r * w)(t[:0]),
    "in_dims that do not fit (eager's error)": lambda t, w: torch.vmap(
        lambda r: r, in_dims=(0, 1))(t),
    "out_dims=None of a batched result (eager's error)": lambda t, w: torch.vmap(
        lambda r: r * 2, out_dims=None)(t),
    "a number returned (eager's error)": lambda t, w: torch.vmap(lambda r: 3)(t),
}


@pytest.mark.parametrize("case", list(VMAP_CASES))
def test_vmap_inside_traced_code_is_eagers(case: str) -> None:
    """``torch.vmap`` called in a jitted function, however it was reached (``torch.vmap``,
    ``torch.func.vmap``, a name imported before, a function wrapped before the trace):
    eager's values and gradients, or eager's own error."""
    torch.manual_seed(0)
    out = check_against_eager(VMAP_CASES[case], torch.randn(5, 3, requires_grad=True),
                              torch.randn(3, requires_grad=True))
    if out.jitted is not None:
        for t in torch.utils._pytree.tree_leaves((out.jitted, out.jitted_grads)):
            assert not isinstance(t, torch.Tensor) or type(t) is torch.Tensor, type(t)


def test_vmap_of_a_function_that_draws_is_eagers_error_or_refused() -> None:
    """Eager's error under ``randomness="error"``; under ``"different"`` and ``"same"``
    (eager draws for the whole batch at once) a clear refusal naming the line."""
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        torch.vmap(lambda r: r + torch.rand(()))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        thunder_ir.jit(lambda t: torch.vmap(lambda r: F.dropout(r, 0.5))(t))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        thunder_ir.jit(lambda t: torch.vmap(lambda r: r + torch.rand(()))(t))(x)
    for randomness in ("different", "same"):
        with pytest.raises(thunder_ir.ThunderTraceError,
                           match=r"test_constructs\.py:\d+: torch\.vmap\(\.\.\., "
                                 f"randomness='{randomness}'\\)"):
            thunder_ir.jit(lambda t: torch.vmap(lambda r: r.clone().uniform_(),
                                                randomness=randomness)(t))(x)  # noqa: B023
    # an op without a native op that draws nothing is mapped as any other
    check_against_eager(lambda t: torch.vmap(torch.special.bessel_j0)(t), x)


def test_a_per_sample_gradient_inside_traced_code_is_refused_with_the_line() -> None:
    """vmap is mapped; ``torch.func.grad`` inside traced code is not supported: refused
    clearly, naming the line, never a wrong value."""
    def per_sample(x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(torch.func.grad(lambda r: (r ** 3).sum()))(x)

    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"test_constructs\.py:\d+: a torch.func transform"):
        thunder_ir.jit(per_sample)(torch.randn(4, 3))


def test_a_cond_whose_predicate_flips_follows_it() -> None:
    fn = HOP_CASES["cond on a tensor"]
    jf = thunder_ir.jit(fn)
    for sign in (1.0, -1.0, 1.0, -1.0):
        x = torch.rand(5, 3) * sign
        torch.testing.assert_close(jf(x), fn(x))
    assert thunder_ir.cache_misses(jf) == 2


class SelectiveScan(nn.Module):
    """A state-space block whose recurrence is an ``associative_scan`` over
    ``(decay, input)`` pairs (as selective-scan implementations write it on CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        decay, inp = self.proj(x).sigmoid().chunk(2, dim=-1)

        def combine(a: tuple[torch.Tensor, torch.Tensor],
                    b: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            return a[0] * b[0], a[1] * b[0] + b[1]

        _, h = _hop("associative_scan")(combine, (decay, inp), dim=1, combine_mode="generic")
        return h.sum(-1)


def test_a_selective_scan_model_trains_as_eager() -> None:
    torch.manual_seed(0)
    check_against_eager(SelectiveScan(), torch.randn(2, 6, 4))


VIEW_CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "select": lambda t: t.select(1, 2) * 2,
    "select, negative": lambda t: torch.select(t, -1, -1).sin(),
    "aten.slice": lambda t: torch.ops.aten.slice(t, 2, 1, 4) * 3,
    "aten.slice, clamped": lambda t: torch.ops.aten.slice(t, 1, -100, 100).exp(),
    "aten.slice, step": lambda t: torch.ops.aten.slice.Tensor(t, 0, -2, None, 2).cos(),
    "narrow": lambda t: t.narrow(1, 1, 2) * 2,
    "narrow, negative start": lambda t: t.narrow(-1, -3, 3).tan(),
    "movedim": lambda t: torch.movedim(t, 0, -1) * 2,
    "moveaxis, several": lambda t: t.moveaxis((0, 2), (2, 1)).exp(),
    "eager's error: movedim repeated": lambda t: t.movedim((0, 0), (1, 2)),
    "eager's error: narrow past the end": lambda t: t.narrow(1, 3, 2),
    "eager's error: select out of range": lambda t: t.select(1, 7),
}


@pytest.mark.parametrize("case", list(VIEW_CASES))
def test_views_a_scan_takes_per_step_are_native(case: str) -> None:
    """``select``, ``aten.slice`` (what torch's Python kernels call) and ``narrow`` with
    int bounds are views of the program, differentiated by its own rules: a recurrence
    written with them per step (Mamba's slow path: hundreds) has no opaque call left."""
    fn = VIEW_CASES[case]
    x = torch.randn(3, 4, 5, requires_grad=True)
    check_against_eager(fn, x)
    if not case.startswith("eager's error"):
        jf = thunder_ir.jit(fn)
        jf(x).sum().backward()
        assert "call_with_grad" not in str(thunder_ir.last_traces(jf)[-1])


def _recurrence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = torch.zeros_like(b[:, 0])
    outs = []
    for i in range(a.shape[1]):
        h = a.select(1, i) * h + b.select(1, i)
        outs.append(h)
    return torch.stack(outs, 1)


def test_a_recurrence_over_selected_steps_trains_as_eager() -> None:
    a = torch.rand(2, 6, 3, requires_grad=True)
    b = torch.randn(2, 6, 3, requires_grad=True)
    check_against_eager(_recurrence, a, b)


# --------------------------------------------------------------------------- einsum

EINSUM_CASES: dict[str, list[tuple[int, ...]]] = {
    "bij,bjk->bik": [(2, 3, 4), (2, 4, 5)],
    "bij,bjk->bki": [(2, 3, 4), (2, 4, 5)],
    "bij,bjk->ik": [(2, 3, 4), (2, 4, 5)],
    "ibnd,jbnd->bnij": [(5, 2, 3, 4), (6, 2, 3, 4)],  # XLNet's attention scores
    "ibh,hnd->ibnd": [(5, 2, 8), (8, 2, 4)],
    "bclhn,bcshn->bclsh": [(2, 2, 3, 2, 4), (2, 2, 3, 2, 4)],  # Mamba-2's chunked scan
    "bclsh,bcshp->bclhp": [(2, 2, 3, 3, 2), (2, 2, 3, 2, 5)],  # (a permuted view in eager)
    "...ij,...jk": [(2, 3, 4), (2, 4, 5)],
    "...i,i": [(2, 3, 4), (4,)],
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 5)],
    "i,j->ij": [(3,), (4,)],
    "ij,kj->": [(3, 4), (5, 4)],
    "bij,bjk->bik broadcast": [(1, 3, 4), (2, 4, 5)],
    "ij,ij->ij": [(3, 4), (3, 4)],
}
EINSUM_OPAQUE = {"ii->i": [(3, 3)], "ij->ji": [(3, 4)]}  # a diagonal; a single operand


@pytest.mark.parametrize("case", list(EINSUM_CASES) + list(EINSUM_OPAQUE))
def test_einsum_is_the_programs_own_contraction(case: str) -> None:
    """Two or more operands: permutes, reshapes and ``bmm`` in the program (no opaque
    call), with eager's values, gradients and strides (permuted views included)."""
    shapes = EINSUM_CASES.get(case) or EINSUM_OPAQUE[case]
    equation = case.split(" ")[0]

    def f(*ts: torch.Tensor) -> torch.Tensor:
        return torch.einsum(equation, *ts)

    torch.manual_seed(0)
    ts = [torch.randn(*s, requires_grad=True) for s in shapes]
    check_against_eager(f, *ts)
    jf = thunder_ir.jit(f)
    jf(*ts).sum().backward()
    assert ("einsum" in str(thunder_ir.last_traces(jf)[-1])) == (case in EINSUM_OPAQUE)
