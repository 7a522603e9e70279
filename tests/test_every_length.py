"""Every length, one program (issue 52): after a second call structure with other sizes,
a callable compiles one symbolic program for every length. ``nn.MultiheadAttention``
(self-attention passes one tensor as query, key and value) and a Hugging Face causal LM
called with ``labels=input_ids`` (the standard training call) used to compile once per
length: the cache key's aliasing entry held the shared tensor's strides (which change
with its length), and a layout probe made an ``int`` of a view's symbolic storage offset
(``proj[1]`` of MHA's packed projection: ``Eq(16*s0*s1, 224)``). Forward and training
(gradients, parameters after SGD steps) are measured against eager; what must stay per
size says why (`thunder_ir.compile_status`'s ``static``)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch

import thunder_ir
from thunder_ir.dialects.symbols import SymbolSource
from thunder_ir.runtime.cache import aliases
from thunder_ir.runtime.pins import key_difference, pinning_guards, previous_values

LENGTHS = (5, 7, 9, 11, 13)
STEPS_LR = 0.1


def _close(a: Any, b: Any) -> None:
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _train_against_eager(model: torch.nn.Module, inputs: Callable[[int], tuple[tuple, dict]],
                         loss_of: Callable[[Any], torch.Tensor]) -> Any:
    """Runs one SGD step per length on ``model`` (eager) and on a jitted copy, checking
    the forward values, the loss, every gradient and the parameters after each step;
    returns the jitted model."""
    eager = model
    mine = copy.deepcopy(model)
    jm = thunder_ir.jit(mine)
    opt_e = torch.optim.SGD(eager.parameters(), lr=STEPS_LR)
    opt_j = torch.optim.SGD(mine.parameters(), lr=STEPS_LR)
    for n in LENGTHS:
        args, kwargs = inputs(n)
        torch.manual_seed(n)  # (the same dropout draws: GPT-2 trains with dropout)
        ref_out = eager(*args, **kwargs)
        torch.manual_seed(n)
        out = jm(*args, **kwargs)
        ref, got = loss_of(ref_out), loss_of(out)
        _close(got, ref)
        ref.backward()
        got.backward()
        for (name, pe), pj in zip(eager.named_parameters(), mine.parameters(), strict=True):
            if pe.grad is None:
                assert pj.grad is None, name
                continue
            _close(pj.grad, pe.grad)
        opt_e.step()
        opt_j.step()
        opt_e.zero_grad(set_to_none=True)
        opt_j.zero_grad(set_to_none=True)
        for pe, pj in zip(eager.parameters(), mine.parameters(), strict=True):
            _close(pj, pe)
    return jm


def _one_program(jm: Any) -> None:
    """At most two programs for the five lengths (the first sizes, then the symbolic
    one), and nothing reported as static."""
    assert thunder_ir.cache_misses(jm) <= 2, thunder_ir.compile_status(jm)["static"]
    assert thunder_ir.compile_status(jm)["static"] == []


# --------------------------------------------------------------------------- attention

MHA_CASES = {
    "self": dict(),
    "self-no-weights": dict(need_weights=False),
    "self-per-head-weights": dict(average_attn_weights=False),
    "causal-bool-mask": dict(mask="bool"),
    "causal-float-mask-no-weights": dict(mask="float", need_weights=False),
    "key-padding": dict(padding=True),
    "key-padding-and-mask-no-weights": dict(padding=True, mask="bool", need_weights=False),
    "seq-first": dict(batch_first=False),
    "seq-first-padding-no-weights": dict(batch_first=False, padding=True,
                                         need_weights=False),
    "cross": dict(cross=True),
    "cross-no-weights-seq-first": dict(cross=True, need_weights=False, batch_first=False),
}


def _mha_inputs(case: dict[str, Any]) -> Callable[[int], tuple[tuple, dict]]:
    batch_first = case.get("batch_first", True)

    def inputs(n: int) -> tuple[tuple, dict]:
        shape = (2, n, 16) if batch_first else (n, 2, 16)
        x = torch.randn(shape)
        kwargs: dict[str, Any] = {}
        for k in ("need_weights", "average_attn_weights"):
            if k in case:
                kwargs[k] = case[k]
        if case.get("mask") == "bool":
            kwargs["attn_mask"] = torch.ones(n, n, dtype=torch.bool).triu(1)
        elif case.get("mask") == "float":
            kwargs["attn_mask"] = torch.zeros(n, n).masked_fill(
                torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        if case.get("padding"):
            pad = torch.zeros(2, n, dtype=torch.bool)
            pad[0, -2:] = True
            kwargs["key_padding_mask"] = pad
        if case.get("cross"):
            mem = torch.randn(shape)
            return (x, mem, mem), kwargs
        return (x, x, x), kwargs
    return inputs


def _mha_loss(out: Any) -> torch.Tensor:
    y, w = out
    loss = y.pow(2).mean()
    return loss if w is None else loss + w.pow(2).mean()


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_multihead_attention_every_length_one_program(name: str) -> None:
    """``nn.MultiheadAttention`` with and without masks, weights and batch-first: five
    lengths, one SGD step each, eager's outputs, gradients and parameters, and at most
    two programs."""
    torch.manual_seed(0)
    case = MHA_CASES[name]
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=case.get("batch_first", True))
    jm = _train_against_eager(mha, _mha_inputs(case), _mha_loss)
    _one_program(jm)


def test_multihead_attention_inference_every_length_one_program() -> None:
    """The same without gradients (eval mode, under no_grad)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    jm = thunder_ir.jit(mha)
    with torch.no_grad():
        for n in LENGTHS:
            x = torch.randn(2, n, 16)
            mask = torch.ones(n, n, dtype=torch.bool).triu(1)
            got = jm(x, x, x, attn_mask=mask)
            ref = mha(x, x, x, attn_mask=mask)
            _close(got[0], ref[0])
            _close(got[1], ref[1])
    _one_program(jm)


# --------------------------------------------------------------------------- causal LM


def _llama() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg)


def _gpt2() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=128, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("labels", ["input_ids", "padded"])
def test_causal_lm_with_labels_every_length_one_program(make: Callable[[], Any],
                                                         labels: str) -> None:
    """A Hugging Face causal LM's training call, ``model(input_ids=ids, labels=...)``:
    the labels are the very input ids (the usual call), or a copy with padding positions
    set to -100 (with the attention mask): five lengths, SGD steps, eager's loss,
    gradients and parameters, at most two programs."""
    model = make()
    torch.manual_seed(1)

    def inputs(n: int) -> tuple[tuple, dict]:
        ids = torch.randint(0, 64, (2, n))
        if labels == "input_ids":
            return (), {"input_ids": ids, "labels": ids}
        lab = ids.clone()
        lab[0, -3:] = -100
        mask = torch.ones(2, n, dtype=torch.long)
        mask[0, -3:] = 0
        return (), {"input_ids": ids, "attention_mask": mask, "labels": lab}

    jm = _train_against_eager(model, inputs, lambda out: out.loss)
    _one_program(jm)


def test_causal_lm_loss_ignores_the_padding_labels() -> None:
    """The jitted loss is the mean cross entropy over the labels that are not -100
    (shifted by one, as the model's loss shifts them), over lengths; a length whose
    labels are all -100 past the first token still gives eager's loss."""
    model = _llama().eval()
    jm = thunder_ir.jit(model)
    torch.manual_seed(2)
    with torch.no_grad():
        for n in LENGTHS:
            ids = torch.randint(0, 64, (2, n))
            lab = ids.clone()
            lab[0, n // 2:] = -100
            lab[1, 1:] = -100 if n == 9 else lab[1, 1:]
            out = jm(input_ids=ids, labels=lab)
            logits = model(input_ids=ids).logits
            shift = lab[:, 1:].reshape(-1)
            manual = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, 64).float(), shift, ignore_index=-100)
            _close(out.loss, manual)
            _close(out.loss, model(input_ids=ids, labels=lab).loss)
    _one_program(jm)


# --------------------------------------------------------------------------- what says why


def test_a_size_fixed_by_user_code_reports_the_guard_and_line() -> None:
    """``int(x.shape[1])`` fixes the size: each length compiles its own program (correct,
    not shared), and `compile_status` names the guard and the user's line."""
    def f(x: torch.Tensor) -> torch.Tensor:
        n = int(x.shape[1])
        return x * n

    line = inspect.getsourcelines(f)[1] + 1
    jf = thunder_ir.jit(f)
    for n in LENGTHS[:4]:
        x = torch.randn(2, n)
        _close(jf(x), f(x))
    assert thunder_ir.cache_misses(jf) == 4
    static = thunder_ir.compile_status(jf)["static"]
    assert len(static) == 1, static
    why = static[0]
    assert "Eq(s1, 7)" in why and f"{__file__}:{line}" in why, why


def test_a_size_fixed_inside_a_torch_op_names_the_op() -> None:
    """A guard recorded while a torch function is traced names that function, with the
    user's line that called it: ``x.unbind(1)`` returns one tensor per position, so its
    result fixes the length (each length compiles its own program)."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.stack(x.unbind(1), 0).sum(0)

    line = inspect.getsourcelines(f)[1] + 1
    jf = thunder_ir.jit(f)
    for n in LENGTHS[:3]:
        x = torch.randn(2, n)
        _close(jf(x), f(x))
    static = thunder_ir.compile_status(jf)["static"]
    assert len(static) == 1, static
    assert f"Tensor.unbind at {__file__}:{line}" in static[0], static


def test_what_stays_per_size_because_of_a_symbolic_failure_says_why() -> None:
    """A symbolic compile that fails (a dynamic size of a non-contiguous argument, here
    a view of another argument) is reported under ``static`` too."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum() + y.sum()

    jf = thunder_ir.jit(f)
    for n in LENGTHS[:3]:
        x = torch.randn(2, n)
        _close(jf(x, x[:, 1:]), f(x, x[:, 1:]))
    static = thunder_ir.compile_status(jf)["static"]
    assert static and "non-contiguous" in static[0], static


def test_the_same_tensor_twice_keys_without_its_strides() -> None:
    """The aliasing entry of the key: the same tensor passed twice is ``(i, j, True)``
    (its strides change with its length); views of one storage keep where they lie."""
    x = torch.randn(2, 5)
    assert aliases(x, x) == ((1, 0, True),)
    assert aliases(x, x[:, 1:]) == ((1, 0, False, 1, (5, 1), (5, 1)),)
    assert aliases(x, torch.randn(2, 5)) is None


def test_pinning_guards_are_equalities_that_fix_a_value() -> None:
    """A pin fixes a size (a polynomial equality the earlier sizes fail); a range, a
    divisibility or a relation the earlier sizes satisfy does not."""
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    sites = [(sympy.Eq(16 * s0 * s1, 224), "a"), (sympy.Le(s0, 64), "b"),
             (sympy.Eq(sympy.Mod(s1, 8), 0), "c"), (sympy.Eq(s0, 2), "d"),
             (sympy.Eq(s1, 7), "e")]
    sources = {"s0": SymbolSource(0, 0), "s1": SymbolSource(0, 1)}
    values = previous_values(sources, [(2, 5)])
    assert values == {"s0": 2, "s1": 5}
    assert pinning_guards(sites, values) == [("Eq(16*s0*s1, 224)", "a"), ("Eq(s1, 7)", "e")]


def test_key_difference_names_the_part_that_changed() -> None:
    """Of stored dynamic keys of the same dynamic sizes, the closest: the parts in which
    it differs, by label."""
    dyn = ((0, (1,)),)
    stored = [((2, None), ("f32",), ((1, 0, True, 0, (80, 1)),), dyn)]
    now = ((2, None), ("f32",), ((1, 0, True, 0, (112, 1)),), dyn)
    labels = ["shape", "dtype", "which arguments share memory", "sizes"]
    assert key_difference(now, stored, labels) == ["which arguments share memory"]
    assert key_difference(now, [], labels) == []


def test_a_number_inside_an_argument_object_is_named() -> None:
    """A cache object whose tensors grow and whose numbers change with them: its ``int``
    counter (a sliding window cache layer's ``cumulative_length``) is a symbolic number
    (`thunder_ir.runtime.object_ints`), but a ``float`` is keyed by value, so each call
    compiles; `compile_status(jm)["static"]` names that field and its values, not another
    part that merely differs from the first program."""

    class Cache:
        def __init__(self) -> None:
            self.k = torch.zeros(1, 0, 4)
            self.seen = 0
            self.scale = 1.0

    def step(x: torch.Tensor, cache: Cache) -> torch.Tensor:
        cache.k = torch.cat([cache.k, x], 1)
        cache.seen += x.shape[1]
        cache.scale = cache.scale * 0.5
        return cache.k.sum(1) * cache.seen * cache.scale

    jf = thunder_ir.jit(step, tiered=False)
    mine, theirs = Cache(), Cache()
    for n in (3, 1, 1, 1, 1):
        x = torch.randn(1, n, 4)
        torch.testing.assert_close(jf(x, mine), step(x, theirs))
        assert vars(mine).keys() == vars(theirs).keys() and type(mine.seen) is int
        assert (mine.seen, mine.scale) == (theirs.seen, theirs.scale)
        assert torch.equal(mine.k, theirs.k)
    static = " ".join(thunder_ir.compile_status(jf)["static"])
    assert "argument 'cache' .scale (" in static, static
    assert ".seen" not in static, static
