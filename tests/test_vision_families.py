"""Vision, diffusion and adapter families under plain ``thunder_ir.jit``, against eager:
timm, torchvision, diffusers and peft models built from tiny configs with random weights
(no download, no pretrained weights), fed 32x32 images (16x16 latents) in batches of 2.

For each: the inference output (eval, no grad); the training loss and every parameter's
gradient (``None`` where eager has ``None``: a LoRA model's frozen base) over two steps,
the second a cache hit; a step with a batch of 3; the buffers after training (batch norm's
running statistics). Every result and gradient is a real tensor. Drop-path, dropout and
LoRA's dropout stay on in training: thunder_ir draws what eager draws for the same seed.

timm and the other families' shape checks call ``torch._assert`` on Python bools
(tests/test_python_values.py tests it on its own). torchvision's C++ ops do not load beside
the CPU torch; tests/torchvision_ops.py lets it import from the folder scripts/setup.sh
installs it in, out of site-packages.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision_ops import import_vision

import thunder_ir

try:  # (from .venv/vision: tests/torchvision_ops.py)
    tv, timm = import_vision()
except ImportError as e:
    pytest.skip(f"torchvision and timm are installed by scripts/setup.sh ({e})",
                allow_module_level=True)
diffusers = pytest.importorskip("diffusers", reason="diffusers is in the test extra")
peft = pytest.importorskip("peft", reason="peft is in the test extra")
T = pytest.importorskip("transformers", reason="transformers is in the test extra")

from timm.models import convnext as timm_convnext  # noqa: E402
from timm.models import mlp_mixer as timm_mixer  # noqa: E402
from timm.models import resnet as timm_resnet  # noqa: E402
from timm.models import swin_transformer as timm_swin  # noqa: E402
from timm.models import vision_transformer as timm_vit  # noqa: E402
from torchvision import models as tvm  # noqa: E402

N_CLASSES = 3


@dataclass
class Family:
    """How to build a model, feed it a batch of ``n`` and score its output.

    Attributes:
        build: makes the model (seeded by the caller).
        inputs: the call's arguments for a batch of ``n``: positional (a tuple) or by
            keyword (a dict).
        loss: the training loss from the output and the batch size.
        output: the tensor to compare from the output (logits, a sample).
        frozen: some parameters are frozen (a LoRA model's base): their gradients stay
            ``None``, and every trainable one gets a gradient.
    """

    build: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[Any, ...] | dict[str, Any]]
    loss: Callable[[Any, int], torch.Tensor]
    output: Callable[[Any], torch.Tensor] = lambda out: out
    frozen: bool = False


def _image(n: int) -> tuple[Any, ...]:
    return (torch.randn(n, 3, 32, 32),)


def _classify(logits: torch.Tensor, n: int) -> torch.Tensor:
    return F.cross_entropy(logits, torch.arange(n) % N_CLASSES)


def _classifier(build: Callable[[], nn.Module]) -> Family:
    return Family(build, _image, _classify)


def _latents(n: int, channels: int = 3) -> torch.Tensor:
    return torch.randn(n, channels, 16, 16)


def _denoise(out: Any, n: int) -> torch.Tensor:
    """A denoiser's loss: the mean square of its prediction against a fixed target."""
    sample = out.sample
    g = torch.Generator().manual_seed(n)
    return F.mse_loss(sample, torch.randn(sample.shape, generator=g))


def _sample(out: Any) -> torch.Tensor:
    return out.sample


# --------------------------------------------------------------------------- timm

_TIMM: dict[str, Family] = {
    "timm_vit": _classifier(lambda: timm_vit.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
        num_classes=N_CLASSES, drop_path_rate=0.1)),
    "timm_deit_distilled": _classifier(lambda: timm.create_model(
        "deit_tiny_distilled_patch16_224", pretrained=False, img_size=32, patch_size=8,
        embed_dim=32, depth=2, num_heads=2, num_classes=N_CLASSES)),
    "timm_resnet": _classifier(lambda: timm_resnet.ResNet(
        block=timm_resnet.BasicBlock, layers=(1, 1, 1, 1), channels=(8, 16, 32, 64),
        stem_width=8, num_classes=N_CLASSES)),
    "timm_convnext": _classifier(lambda: timm_convnext.ConvNeXt(
        depths=(1, 1, 1, 1), dims=(16, 32, 64, 128), num_classes=N_CLASSES,
        drop_path_rate=0.1)),
    # EfficientNet's smallest (timm builds MobileNetV3 from the same blocks; torchvision's
    # is below). At 32x32 its last stage normalizes 2 values per channel and eager's own
    # gradients are 3% off float64's (the two agree to 1e-5 of that): 64x64
    "timm_efficientnet": Family(lambda: timm.create_model(
        "tinynet_e", pretrained=False, num_classes=N_CLASSES),
        lambda n: (torch.randn(n, 3, 64, 64),), _classify),
    # two blocks in the first stage: the second's windows are shifted (with its mask)
    "timm_swin": _classifier(lambda: timm_swin.SwinTransformer(
        img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(2, 1),
        num_heads=(1, 2), num_classes=N_CLASSES, drop_path_rate=0.1)),
    "timm_mixer": _classifier(lambda: timm_mixer.MlpMixer(
        img_size=32, patch_size=8, num_blocks=2, embed_dim=32, num_classes=N_CLASSES)),
}

# --------------------------------------------------------------------------- torchvision

_TORCHVISION: dict[str, Family] = {
    "tv_resnet": _classifier(lambda: tvm.resnet.ResNet(
        tvm.resnet.BasicBlock, [1, 1, 1, 1], num_classes=N_CLASSES)),
    "tv_mobilenet_v3_small": _classifier(lambda: tvm.mobilenet_v3_small(
        num_classes=N_CLASSES, width_mult=0.25)),
    "tv_vit": _classifier(lambda: tvm.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=N_CLASSES)),
    # one stage of two blocks, the second's windows shifted (timm_swin merges patches too;
    # a second stage doubles the compile at a new batch size, all in torch's ShapeEnv)
    "tv_swin": _classifier(lambda: tvm.SwinTransformer(
        patch_size=[4, 4], embed_dim=16, depths=[2], num_heads=[2],
        window_size=[4, 4], stochastic_depth_prob=0.1, num_classes=N_CLASSES)),
    "tv_convnext": _classifier(lambda: tvm.ConvNeXt(
        [tvm.convnext.CNBlockConfig(16, 32, 1), tvm.convnext.CNBlockConfig(32, None, 1)],
        stochastic_depth_prob=0.1, num_classes=N_CLASSES)),
}

# --------------------------------------------------------------------------- diffusers

_UNET = dict(sample_size=16, layers_per_block=1, block_out_channels=(16, 32),
             norm_num_groups=8)


def _unet_inputs(n: int) -> tuple[Any, ...]:
    return (_latents(n), torch.tensor(10))


def _cond_unet_inputs(n: int) -> tuple[Any, ...]:
    return (_latents(n, 4), torch.tensor(10), torch.randn(n, 4, 16))


def _dit_inputs(n: int) -> tuple[Any, ...]:
    return (_latents(n, 4)[:, :, :8, :8].contiguous(), torch.tensor([10] * n),
            torch.arange(n) % 4)


_DIFFUSERS: dict[str, Family] = {
    "diffusers_unet2d": Family(lambda: diffusers.UNet2DModel(
        **_UNET, in_channels=3, out_channels=3, attention_head_dim=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D")), _unet_inputs, _denoise, _sample),
    "diffusers_unet2d_condition": Family(lambda: diffusers.UNet2DConditionModel(
        **_UNET, in_channels=4, out_channels=4, cross_attention_dim=16, attention_head_dim=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")), _cond_unet_inputs, _denoise,
        _sample),
    "diffusers_autoencoder_kl": Family(lambda: diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
        layers_per_block=1, norm_num_groups=8, sample_size=16), lambda n: (_latents(n),),
        _denoise, _sample),
    "diffusers_dit": Family(lambda: diffusers.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=4,
        num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10,
        norm_num_groups=8), _dit_inputs, _denoise, _sample),
}

# --------------------------------------------------------------------------- peft


def _lora_llama() -> nn.Module:
    config = T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                           max_position_embeddings=32, pad_token_id=0)
    base = T.LlamaForCausalLM(config)
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1,
                           target_modules=["q_proj", "v_proj"])
    return peft.get_peft_model(base, lora)


def _lora_vit() -> nn.Module:
    base = timm_vit.VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                                      num_heads=2, num_classes=N_CLASSES)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["qkv", "fc1"],
                           modules_to_save=["head"])
    return peft.get_peft_model(base, lora)


def _tokens(n: int) -> dict[str, Any]:
    ids = torch.randint(3, 64, (n, 12))
    return {"input_ids": ids, "attention_mask": torch.ones(n, 12, dtype=torch.long),
            "labels": ids}


_PEFT: dict[str, Family] = {
    "peft_lora_llama": Family(_lora_llama, _tokens, lambda out, n: out.loss,
                              lambda out: out.logits, frozen=True),
    "peft_lora_timm_vit": Family(_lora_vit, _image, _classify, frozen=True),
}

FAMILIES: dict[str, Family] = {**_TIMM, **_TORCHVISION, **_DIFFUSERS, **_PEFT}

XFAIL: dict[str, str] = {}
"""Families that do not run as eager yet, with the reason (strict: a pass is reported)."""

# --------------------------------------------------------------------------- checks


def _real(*values: Any) -> None:
    """Every tensor among ``values`` (nested) is a real tensor, never a tracing proxy."""
    for v in torch.utils._pytree.tree_leaves(values):
        if isinstance(v, torch.Tensor):
            assert type(v) in (torch.Tensor, nn.Parameter), type(v)


def _close(a: torch.Tensor, b: torch.Tensor, what: str, scale: float | None = None) -> None:
    """Within float32's rounding of eager's: the absolute tolerance grows with ``scale``,
    by default the largest magnitude of ``b`` (as in tests/test_hf_models.py)."""
    _real(a)
    assert a.dtype == b.dtype and a.shape == b.shape, what
    if scale is None:
        scale = max(1.0, float(b.detach().abs().max())) if b.numel() else 1.0
    torch.testing.assert_close(a, b, atol=1e-5 * scale, rtol=1e-4, msg=lambda m: f"{what}: {m}")


def _same_grads(jitted: nn.Module, eager: nn.Module) -> None:
    """Every gradient as eager's, ``None`` where eager's is. The tolerance scales with the
    largest gradient of the parameter's module: a batch-norm bias followed by another batch
    norm in training has a gradient of exactly 0, which both sides compute as the rounding
    noise of a sum whose terms are as large as the norm's weight's gradient."""
    scale: dict[str, float] = {}
    for k, q in eager.named_parameters():
        if q.grad is not None and q.grad.numel():
            owner = k.rpartition(".")[0]
            scale[owner] = max(scale.get(owner, 1.0), float(q.grad.abs().max()))
    for (k, p), (_, q) in zip(jitted.named_parameters(), eager.named_parameters(),
                              strict=True):
        assert (p.grad is None) == (q.grad is None), f"{k}: None gradient differs"
        if p.grad is not None:
            _close(p.grad, q.grad, f"{k}'s gradient", scale[k.rpartition(".")[0]])


def _same_buffers(jitted: nn.Module, eager: nn.Module) -> None:
    for (k, b), (_, c) in zip(jitted.named_buffers(), eager.named_buffers(), strict=True):
        _real(b)
        if b.is_floating_point():
            _close(b, c, k)
        else:
            assert torch.equal(b, c), k


def _call(model: Any, args: tuple[Any, ...] | dict[str, Any]) -> Any:
    return model(**args) if isinstance(args, dict) else model(*args)


def _step(jm: Any, model: nn.Module, eager: nn.Module, family: Family, n: int,
          step: int) -> None:
    """One training step of both with the same draws: loss, gradients, buffers."""
    args = family.inputs(n)
    torch.manual_seed(step)
    out = _call(jm, args)
    _real(tuple(out.values()) if isinstance(out, Mapping) else out)
    loss_j = family.loss(out, n)
    loss_j.backward()
    if family.frozen:
        frozen = [k for k, p in model.named_parameters() if not p.requires_grad]
        assert frozen and all(p.grad is None for p in model.parameters()
                              if not p.requires_grad)
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    torch.manual_seed(step)
    loss_e = family.loss(_call(eager, args), n)
    loss_e.backward()
    _close(loss_j, loss_e, f"loss at step {step}")
    _same_grads(model, eager)
    _same_buffers(model, eager)
    model.zero_grad(set_to_none=True)
    eager.zero_grad(set_to_none=True)


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("family", [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=XFAIL[f])) if f in XFAIL
    else f for f in FAMILIES])
def test_vision_family_matches_eager(family: str) -> None:
    fam = FAMILIES[family]
    torch.manual_seed(0)
    model = fam.build()
    eager = copy.deepcopy(model)
    jm = thunder_ir.jit(model)

    model.eval(), eager.eval()
    args = fam.inputs(2)
    with torch.no_grad():
        _close(fam.output(_call(jm, args)), fam.output(_call(eager, args)), "inference output")

    model.train(), eager.train()
    _step(jm, model, eager, fam, 2, 0)
    _step(jm, model, eager, fam, 2, 1)
    assert thunder_ir.cache_misses(jm) == 2  # inference, then training; the second hit
    _step(jm, model, eager, fam, 3, 2)  # a batch of another size
