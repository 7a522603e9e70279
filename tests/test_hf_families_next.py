"""The next Hugging Face families (issue 28), built from tiny configs: state-space and
recurrent models, more mixtures of experts, encoders with relative attention, speech
models with convolutional feature extractors and CTC heads, vision models with relative
position tables. Each trains two steps and a step at a new length, then runs in eval, under
``jit`` as in eager: losses, every gradient (``None`` where eager has ``None``), logits.

The constructs they rely on are tested one by one in ``tests/test_constructs.py``.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_hf_models import _close, train_steps_as_eager  # the zoo's checks
from torch import nn

import thunder_ir

T = pytest.importorskip("transformers", reason="transformers is in the test extra")

V, H, L = 128, 64, 16
_ENC = dict(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=2,
            num_attention_heads=4, vocab_size=V, max_position_embeddings=64, pad_token_id=0)
_MOE = dict(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, vocab_size=V, num_experts=4,
            num_experts_per_tok=2, pad_token_id=0)
_SPEECH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, vocab_size=32, conv_dim=(16, 16), conv_stride=(5, 4),
               conv_kernel=(10, 8), num_conv_pos_embeddings=16,
               num_conv_pos_embedding_groups=2, mask_time_prob=0.0, pad_token_id=0,
               ctc_loss_reduction="mean")
_VISION = dict(hidden_size=H, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=2 * H, image_size=32, patch_size=8, num_labels=3)


def _text(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, V, (2, n))
    return {"input_ids": ids, "labels": ids}


def _ctc(n: int) -> dict[str, torch.Tensor]:
    """Raw audio and CTC labels (``-100``: padding, which the loss drops with
    ``masked_select``: the count is speculated)."""
    labels = torch.randint(1, 30, (2, 5))
    labels[1, 4:] = -100
    return {"input_values": torch.randn(2, 50 * n), "labels": labels}


def _image(n: int) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 32, 32), "labels": torch.tensor([0, 2])}


FAMILIES: dict[str, tuple[Callable[[], nn.Module], Callable[[int], dict[str, Any]]]] = {
    "mamba": (lambda: T.MambaForCausalLM(T.MambaConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, state_size=8, pad_token_id=0)),
        _text),
    "mamba2": (lambda: T.Mamba2ForCausalLM(T.Mamba2Config(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, state_size=8, num_heads=4,
        head_dim=32, n_groups=1, chunk_size=8, pad_token_id=0)), _text),
    "rwkv": (lambda: T.RwkvForCausalLM(T.RwkvConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=2, attention_hidden_size=H,
        intermediate_size=2 * H, context_length=64)), _text),
    "jamba": (lambda: T.JambaForCausalLM(T.JambaConfig(
        **_MOE, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
        expert_layer_offset=1, mamba_d_state=8, mamba_expand=2, use_mamba_kernels=False)),
        _text),
    "olmoe": (lambda: T.OlmoeForCausalLM(T.OlmoeConfig(**_MOE)), _text),
    "xlnet": (lambda: T.XLNetLMHeadModel(T.XLNetConfig(
        vocab_size=V, d_model=H, n_layer=2, n_head=4, d_inner=2 * H)), _text),
    "funnel": (lambda: T.FunnelForMaskedLM(T.FunnelConfig(
        vocab_size=V, d_model=H, n_head=4, d_head=16, d_inner=2 * H, block_sizes=[1, 1],
        num_decoder_layers=1)), _text),
    "wav2vec2_ctc": (lambda: T.Wav2Vec2ForCTC(T.Wav2Vec2Config(**_SPEECH)), _ctc),
    "hubert_ctc": (lambda: T.HubertForCTC(T.HubertConfig(**_SPEECH)), _ctc),
    "sew_ctc": (lambda: T.SEWForCTC(T.SEWConfig(**_SPEECH)), _ctc),
    "beit": (lambda: T.BeitForImageClassification(T.BeitConfig(
        **_VISION, use_relative_position_bias=True)), _image),
    "dinov2": (lambda: T.Dinov2ForImageClassification(T.Dinov2Config(**_VISION)), _image),
    "segformer": (lambda: T.SegformerForImageClassification(T.SegformerConfig(
        num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
        hidden_sizes=[16, 32], num_attention_heads=[1, 2], num_labels=3,
        decoder_hidden_size=32)), _image),
    "levit": (lambda: T.LevitForImageClassification(T.LevitConfig(
        image_size=32, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2],
        depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=3)), _image),
}


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("family", list(FAMILIES))
def test_next_family_matches_eager(family: str) -> None:
    build, inputs = FAMILIES[family]
    torch.manual_seed(0)
    model = build()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)
    train_steps_as_eager(jm, model, eager, inputs, (L, L, L - 4))  # then a new length
    model.eval(), eager.eval()
    kw = inputs(L)
    with torch.no_grad():
        _close(jm(**kw).logits, eager(**kw).logits, "inference logits")
