"""Hugging Face families whose sizes or routings depend on the data (issue 52, "one
program per model"), built from tiny configs: DBRX (a mixture of experts indexed by 0-d
tensors), Switch Transformers (experts with a capacity: tokens over it are dropped),
Reformer (LSH and local attention, ``.item()``), Longformer (sliding windows, a ``view``
whose size comes from a tensor), BigBird (block-sparse attention building NumPy arrays).

Each family runs in eval over several lengths, then trains with SGD over several lengths,
under ``jit`` as in eager: logits, losses, every gradient (``None`` where eager has
``None``), the parameters after each step; and compiles at most two programs for all the
lengths of each (the first sizes, then one symbolic program), the routing changing with
every call.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from test_hf_models import _close, _same_grads  # the zoo's checks
from torch import nn

import thunder_ir

T = pytest.importorskip("transformers", reason="transformers is in the test extra")

V = 64
LR = 0.1


def _dbrx() -> nn.Module:
    cfg = T.DbrxConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=V,
                       attn_config=dict(kv_n_heads=2, clip_qkv=8.0),
                       ffn_config=dict(ffn_hidden_size=64, moe_num_experts=4, moe_top_k=2))
    cfg.attn_config.rope_theta = 10000.0  # read by DbrxAttention, not set by its config
    return T.DbrxForCausalLM(cfg)


def _switch() -> nn.Module:
    """Four experts of capacity 3 for 2 * n tokens: most calls drop tokens."""
    return T.SwitchTransformersForConditionalGeneration(T.SwitchTransformersConfig(
        vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, num_experts=4, expert_capacity=3, num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1, decoder_start_token_id=0, pad_token_id=0))


def _reformer(**config: Any) -> nn.Module:
    return T.ReformerModelWithLMHead(T.ReformerConfig(
        vocab_size=V, hidden_size=32, num_attention_heads=2, attention_head_size=16,
        attn_layers=["local", "lsh"], feed_forward_size=64, axial_pos_embds=False,
        max_position_embeddings=64, local_attn_chunk_length=4, lsh_attn_chunk_length=4,
        num_buckets=4, num_hashes=1, is_decoder=True, pad_token_id=0, **config))


def _reformer_repeatable() -> nn.Module:
    """Reformer in training reseeds each layer with ``torch.seed()`` on every call (a
    nondeterministic seed: eager's own training steps do not repeat), then draws its
    dropout masks and its LSH rotations from it; with no dropout and a fixed hash seed
    (``hash_seed``: the rotations), eager's steps repeat, so jit's are compared with them.
    The seeds are still drawn, stored on the layers and read back by the reversible
    layers' backward (``tests/test_opaque_backward_and_seed.py`` checks the draw)."""
    return _reformer(hash_seed=3, hidden_dropout_prob=0.0,
                     local_attention_probs_dropout_prob=0.0,
                     lsh_attention_probs_dropout_prob=0.0)


def _longformer() -> nn.Module:
    return T.LongformerForMaskedLM(T.LongformerConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, attention_window=[4, 4], max_position_embeddings=80,
        pad_token_id=1))


def _bigbird() -> nn.Module:
    """Block-sparse attention (lengths over (5 + 2 * random blocks) * block size = 14)."""
    return T.BigBirdForMaskedLM(T.BigBirdConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, attention_type="block_sparse", block_size=2,
        num_random_blocks=1, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, sep_token_id=3))


FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "dbrx": _dbrx,
    "switch_transformers": _switch,
    "longformer": _longformer,
    "reformer": _reformer,
    "bigbird": _bigbird,
}
TRAINING_FAMILIES: dict[str, Callable[[], nn.Module]] = {**FAMILIES,
                                                        "reformer": _reformer_repeatable}
"""The models the training test builds (where eager's steps would not repeat, a config
with which they do)."""
LENGTHS: dict[str, tuple[int, ...]] = {  # Longformer and Reformer: multiples of 4
    "dbrx": (12, 16, 20, 16),
    "switch_transformers": (20, 24, 28, 24),  # every expert gets tokens (see below)
    "longformer": (12, 16, 20, 16),
    "reformer": (12, 16, 20, 16),
    "bigbird": (16, 20, 24, 20),
}
XFAIL: dict[str, str] = {
    "bigbird": (
        "BigBird's block-sparse attention builds its random blocks with NumPy in Python "
        "on every call (np.random.permutation in training, np.zeros of the sizes in eval) "
        "and passes them to torch.tensor (modeling_big_bird.py:374): thunder_ir does not "
        "trace NumPy and refuses the array rather than freeze one call's values "
        "(ThunderTraceError: torch.tensor got a NumPy array ... computed in Python while "
        "tracing)"),
}
XFAIL_TRAINING: dict[str, str] = {}
"""Expected failures of the training test only (the inference test passes)."""


def _inputs(n: int, step: int) -> dict[str, torch.Tensor]:
    """Token ids of length ``n`` as inputs and labels, with an attention mask (Switch
    Transformers' encoder makes none of its own when it is compiled:
    ``is_torchdynamo_compiling()`` is true under ``jit`` too)."""
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(3, V, (2, n), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _params_close(jitted: nn.Module, eager: nn.Module) -> None:
    for (k, p), q in zip(jitted.named_parameters(), eager.parameters(), strict=True):
        _close(p.detach(), q.detach(), f"parameter {k}")


def _train_as_eager(model: nn.Module, lengths: Sequence[int]) -> Any:
    """One SGD step per length on ``model`` and on a jitted copy (the same draws for
    both): the logits, the loss, every gradient and the parameters after the step as
    eager's. Returns the jitted module."""
    mine = copy.deepcopy(model)
    jm = thunder_ir.jit(mine)
    opt_e = torch.optim.SGD(model.parameters(), lr=LR)
    opt_j = torch.optim.SGD(mine.parameters(), lr=LR)
    for step, n in enumerate(lengths):
        kw = _inputs(n, step)
        torch.manual_seed(step)
        out_e = model(**kw)
        torch.manual_seed(step)
        out_j = jm(**kw)
        _close(out_j.logits, out_e.logits, f"training logits at step {step}")
        _close(out_j.loss, out_e.loss, f"loss at step {step}")
        out_e.loss.backward()
        out_j.loss.backward()
        _same_grads(mine, model)
        opt_e.step(), opt_j.step()
        opt_e.zero_grad(set_to_none=True), opt_j.zero_grad(set_to_none=True)
        _params_close(mine, model)
    return jm


def _marks(family: str, training: bool = False) -> list[Any]:
    reason = XFAIL.get(family) or (XFAIL_TRAINING.get(family) if training else None)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


CASES = [pytest.param(f, marks=_marks(f)) for f in FAMILIES]
TRAINING_CASES = [pytest.param(f, marks=_marks(f, training=True)) for f in FAMILIES]


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("family", CASES)
def test_family_inference_over_lengths_one_program(family: str) -> None:
    """Eval logits and loss as eager's at every length; at most two programs."""
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    jm = thunder_ir.jit(copy.deepcopy(model))
    with torch.no_grad():
        for step, n in enumerate(LENGTHS[family]):
            kw = _inputs(n, step)
            torch.manual_seed(step)  # (the same draws: Reformer's LSH rotations)
            out_j = jm(**kw)
            torch.manual_seed(step)
            out_e = model(**kw)
            _close(out_j.logits, out_e.logits, f"inference logits at length {n}")
            _close(out_j.loss, out_e.loss, f"inference loss at length {n}")
    assert thunder_ir.cache_misses(jm) <= 2, thunder_ir.compile_status(jm)["static"]


@pytest.mark.parametrize("family", TRAINING_CASES)
def test_family_trains_as_eager_over_lengths_one_program(family: str) -> None:
    """SGD steps over lengths (routings and sizes change): eager's logits, losses,
    gradients and parameters; at most two programs."""
    torch.manual_seed(0)
    jm = _train_as_eager(TRAINING_FAMILIES[family]().train(), LENGTHS[family])
    assert thunder_ir.cache_misses(jm) <= 2, thunder_ir.compile_status(jm)["static"]


def test_switch_a_new_set_of_experts_is_a_speculated_variant() -> None:
    """Switch Transformers picks each expert module by its index's text
    (``self[f"expert_{expert_idx[0]}"]``): the set of experts that get tokens is
    speculated, so a call where one gets none (eval, length 16, the decoder's expert 2)
    compiles one variant, with eager's logits; the earlier programs still serve the
    calls whose experts all get tokens."""
    torch.manual_seed(0)
    model = _switch().eval()
    jm = thunder_ir.jit(copy.deepcopy(model))
    with torch.no_grad():
        for step, n in ((0, 20), (1, 24), (0, 16), (2, 28)):
            kw = _inputs(n, step)
            _close(jm(**kw).logits, model(**kw).logits, f"logits at length {n}")
    assert thunder_ir.cache_misses(jm) == 3


def test_reformer_trains_on_the_seeds_it_draws() -> None:
    """Reformer as configured (dropout on, LSH rotations drawn from the layer's seed):
    each jitted step draws a new seed per layer and part (``torch.seed()``, a new one
    every call) and stores it on the layer; the reversible backward reseeds with them to
    recompute the forward. Eager run with those seeds (its ``torch.seed()`` handed the
    program's draws, in its order) gives the same logits, loss, gradients and
    parameters; at most two programs."""
    from unittest import mock

    torch.manual_seed(0)
    model = _reformer().train()
    mine = copy.deepcopy(model)
    jm = thunder_ir.jit(mine)
    opt_e = torch.optim.SGD(model.parameters(), lr=LR)
    opt_j = torch.optim.SGD(mine.parameters(), lr=LR)
    seen: set[int] = set()
    for step, n in enumerate(LENGTHS["reformer"]):
        kw = _inputs(n, step)
        torch.manual_seed(step)
        out_j = jm(**kw)
        seeds = [s for layer in mine.reformer.encoder.layers
                 for s in (layer.attention_seed, layer.feed_forward_seed)]
        assert all(type(s) is int for s in seeds) and not seen & set(seeds)
        seen.update(seeds)
        torch.manual_seed(step)
        with mock.patch("torch.seed", side_effect=seeds):
            out_e = model(**kw)
        _close(out_j.logits, out_e.logits, f"training logits at step {step}")
        _close(out_j.loss, out_e.loss, f"loss at step {step}")
        out_e.loss.backward()
        out_j.loss.backward()
        _same_grads(mine, model)
        opt_e.step(), opt_j.step()
        opt_e.zero_grad(set_to_none=True), opt_j.zero_grad(set_to_none=True)
        _params_close(mine, model)
    assert thunder_ir.cache_misses(jm) <= 2, thunder_ir.compile_status(jm)["static"]


def test_bigbird_numpy_random_blocks_are_refused_naming_the_line() -> None:
    """BigBird's block-sparse attention hands torch.tensor a NumPy array it built in
    Python (eager rebuilds it on every call, with NumPy's random draws in training): the
    error names the model's line and says why, rather than freezing one call's array."""
    torch.manual_seed(0)
    jm = thunder_ir.jit(_bigbird().train())
    with pytest.raises(thunder_ir.ThunderTraceError,
                       match=r"modeling_big_bird\.py:\d+: torch\.tensor got a NumPy array"):
        jm(**_inputs(16, 0))


# --------------------------------------------------------------------------- constructs


def _lengths_as_eager(f: Callable[..., Any], make: Callable[[int], tuple[Any, ...]],
                      lengths: Sequence[int] = (8, 12, 16, 20)) -> Any:
    jf = thunder_ir.jit(f)
    for n in lengths:
        args = make(n)
        torch.testing.assert_close(jf(*args), f(*args))
    return jf


def test_a_size_computed_as_a_tensor_from_numbers_one_program() -> None:
    """``torch.div(n, w, rounding_mode="trunc")`` of sizes is a 0-d tensor, which eager
    takes as a size by its value (Longformer's chunks: ``view`` and ``as_strided``); it
    is that number (``s1 // 4`` in a symbolic compile), so every length shares one
    program, and the strides the trace read do not key the length."""
    def f(x: torch.Tensor) -> torch.Tensor:
        n = torch.div(x.size(1), 4, rounding_mode="trunc")
        chunks = x.view(x.size(0), n, 4)
        over = x.as_strided(size=(x.size(0), n - 1, 8), stride=(x.stride(0), 4, 1))
        return chunks.sum(-1)[:, :-1] * n + over.sum(-1)

    jf = _lengths_as_eager(f, lambda n: (torch.randn(2, n),))
    assert thunder_ir.cache_misses(jf) <= 2, thunder_ir.compile_status(jf)["static"]


def test_formatting_a_traced_index_reads_its_value_as_eager() -> None:
    """``f"e{idx}"`` of a 0-d integer tensor is its value's text (eager's
    ``Tensor.__format__``): a module picked by it runs as eager's; another value
    compiles a variant; a float tensor's text is refused naming the line."""
    experts = nn.ModuleDict({f"e{i}": nn.Linear(4, 4) for i in range(3)})

    def f(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return experts[f"e{i[0]}"](x)

    jf = thunder_ir.jit(f)
    x = torch.randn(2, 4)
    for k in (1, 1, 2):
        i = torch.tensor([k, 0])
        torch.testing.assert_close(jf(x, i), f(x, i))
    assert thunder_ir.cache_misses(jf) == 2
    jg = thunder_ir.jit(lambda x: x * len(f"{x.sum()}"))
    with pytest.raises(thunder_ir.DataDependentError, match=r"test_hf_families_dynamic"):
        jg(x)


def test_einsum_and_speculation_in_a_symbolic_compile() -> None:
    """In a symbolic compile ``einsum`` lays out its result from a meta run over the
    symbolic sizes, and a condition computed through ops sized by symbols
    (``view(s0, s1, -1)``) is evaluated on this call's sizes: one program for every
    length."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.einsum("bij,bjk->bik", x, y)
        if z.view(x.size(0), x.size(1), -1).sum() > -1e9:
            return z * 2
        return z

    jf = _lengths_as_eager(f, lambda n: (torch.randn(2, n, 3), torch.randn(2, 3, n)))
    assert thunder_ir.cache_misses(jf) <= 2, thunder_ir.compile_status(jf)["static"]


@pytest.mark.parametrize("training", [False, True])
def test_bigbird_numpy_blocks_are_refused_naming_the_line(training: bool) -> None:
    """BigBird builds its random blocks with NumPy from each call (the issue allows a
    refusal naming the line): the error names Hugging Face's line, and the model is left
    as it was (its parameters, its mode)."""
    torch.manual_seed(0)
    model = _bigbird().train(training)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(thunder_ir.ThunderTraceError, match=r"modeling_big_bird\.py:\d+"):
        thunder_ir.jit(model)(**_inputs(16, 0))
    assert model.training is training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
