"""`thunder_ir.transforms.QuantizeWeights` (issue 55): weight-only int8/int4 linears.

Every check compares against eager PyTorch on a *dequantized* copy of the model (the
weights replaced by what their quantized storage stands for, computed here with the
scheme's functions), the contract of a weight-only quantization.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tier_up_support import run_until_swapped

import thunder_ir
from thunder_ir.dialects import quant as Q
from thunder_ir.lowering.torch_executor import TorchExecutor
from thunder_ir.transforms import QuantizeWeights


def dequantized(w: torch.Tensor, bits: int, group_size: int = 32) -> torch.Tensor:
    if bits == 8:
        return Q.int8_dequantize(*Q.int8_qparams(w))
    return Q.int4_dequantize(*Q.int4_qparams(w, group_size), group_size)


def dequantized_copy(m: torch.nn.Module, bits: int, group_size: int = 32,
                     only: str = "") -> torch.nn.Module:
    ref = copy.deepcopy(m)
    with torch.no_grad():
        for name, mod in ref.named_modules():
            if isinstance(mod, torch.nn.Linear) and only in name:
                mod.weight.copy_(dequantized(mod.weight, bits, group_size))
    return ref


class LoRA(torch.nn.Module):
    """A frozen base linear plus a trainable low-rank adapter."""

    def __init__(self, base: torch.nn.Linear, r: int = 4) -> None:
        super().__init__()
        self.base = base
        self.a = torch.nn.Linear(base.in_features, r, bias=False)
        self.b = torch.nn.Linear(r, base.out_features, bias=False)
        torch.nn.init.normal_(self.b.weight)
        base.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(x))


def mlp(k: int = 64, n: int = 32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.GELU(), torch.nn.Linear(n, 16))


@pytest.mark.parametrize("bits", [8, 4])
def test_forward_equals_dequantized_model(bits: int) -> None:
    m = mlp()
    ref = dequantized_copy(m, bits)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits)])
    x = torch.randn(2, 5, 64)
    with torch.no_grad():
        y = jm(x)
        torch.testing.assert_close(y, ref(x), atol=1e-5, rtol=1e-5)
        assert (y - m(x)).abs().max() > 0  # quantized, not the float weights
        torch.testing.assert_close(jm(x), y, atol=0, rtol=0)  # the cached program
    trace = str(thunder_ir.last_traces(jm)[-1])
    assert f"tir.quantize_int{bits}(" in trace and f"tir.int{bits}_linear(" in trace
    assert "torch.nn.functional.linear" not in trace


def test_quantized_once_per_weight() -> None:
    m = mlp()
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(3, 64)
    with torch.no_grad():
        jm(x)
        q1 = Q.QUANTIZED.entries[id(m[0].weight)][3][0]
        jm(x)
        assert Q.QUANTIZED.entries[id(m[0].weight)][3][0] is q1  # not quantized again
        m[0].weight.mul_(2.0)  # an in-place update: quantized again, as eager sees it
        ref = dequantized_copy(m, 8)
        torch.testing.assert_close(jm(x), ref(x), atol=1e-5, rtol=1e-5)
        assert Q.QUANTIZED.entries[id(m[0].weight)][3][0] is not q1


def test_storage_made_in_inference_mode_serves_training() -> None:
    """The first call under ``torch.inference_mode()``, then a training step: the kept
    storage is made outside inference mode, so the backward can save it."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(LoRA(torch.nn.Linear(64, 32)))
    ref = dequantized_copy(m, 8, only="base")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8, modules=["base"])])
    x = torch.randn(3, 64)
    with torch.inference_mode():
        torch.testing.assert_close(jm(x), ref(x), atol=1e-5, rtol=1e-5)
    xg = x.clone().requires_grad_()
    xr = x.clone().requires_grad_()
    jm(xg).sum().backward()
    ref(xr).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(m[0].a.weight.grad, ref[0].a.weight.grad, atol=1e-4, rtol=1e-4)


def test_weight_data_swapped_is_quantized_again() -> None:
    """``weight.data = other`` keeps the tensor object (and may keep its version count):
    the kept storage is for the old data, so it is made again."""
    m = mlp()
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(3, 64)
    with torch.no_grad():
        jm(x)
        m[0].weight.data = torch.randn(32, 64)
        torch.testing.assert_close(jm(x), dequantized_copy(m, 8)(x), atol=1e-5, rtol=1e-5)


def test_modules_selects_weights() -> None:
    m = mlp()
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8, modules=["0"])])
    x = torch.randn(3, 64)
    with torch.no_grad():
        torch.testing.assert_close(jm(x), dequantized_copy(m, 8, only="0")(x),
                                   atol=1e-5, rtol=1e-5)
    trace = str(thunder_ir.last_traces(jm)[-1])
    assert trace.count("tir.int8_linear(") == 1 and trace.count("functional.linear(") == 1


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("compute", [None, torch.bfloat16])
def test_decomposition_without_the_kernel(bits: int, compute: torch.dtype | None) -> None:
    """An executor that does not claim the quant ops: they decompose (dequantize, then
    linear), and the program equals the dequantized model (float32 compute), or the
    kernels' program (bfloat16 compute)."""
    m = mlp()
    ref = dequantized_copy(m, bits)
    ex = TorchExecutor(claims=lambda op: not isinstance(op, Q.QuantOp)
                       and getattr(type(op), "TORCH_FN", None) is not None)
    transform = QuantizeWeights(bits=bits, compute_dtype=compute)
    jm = thunder_ir.jit(m, executors=[ex], transforms=[transform])
    x = torch.randn(4, 64)
    with torch.no_grad():
        if compute is None:
            torch.testing.assert_close(jm(x), ref(x), atol=1e-5, rtol=1e-5)
        else:
            kernels = thunder_ir.jit(m, transforms=[transform])
            torch.testing.assert_close(jm(x), kernels(x), atol=2e-2, rtol=2e-2)
    trace = str(thunder_ir.last_traces(jm)[-1])
    assert "quantize_int" not in trace and "int8_linear" not in trace


@pytest.mark.parametrize("bits", [8, 4])
def test_lora_gradients_equal_eager_on_dequantized(bits: int) -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(LoRA(torch.nn.Linear(64, 32)), torch.nn.ReLU(),
                            LoRA(torch.nn.Linear(32, 16)))
    ref = dequantized_copy(m, bits, only="base")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits, modules=["base"])])
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.01)
    for _ in range(3):
        x = torch.randn(3, 64, requires_grad=True)
        xr = x.detach().clone().requires_grad_()
        c = torch.randn(3, 16)  # a loss linear in the output: the gradients do not
        (jm(x) * c).sum().backward()  # depend on the kernel's forward rounding
        (ref(xr) * c).sum().backward()
        torch.testing.assert_close(x.grad, xr.grad, atol=1e-4, rtol=1e-4)
        for (name, p), pr in zip(m.named_parameters(), ref.parameters()):
            if pr.grad is None:
                assert p.grad is None, name
            else:
                torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4)
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    assert m[0].base.weight.grad is None


@pytest.mark.parametrize("bits", [8, 4])
def test_trainable_base_is_refused_naming_it(bits: int) -> None:
    """A quantized weight that requires grad in a differentiated call is refused naming it
    and what to do (the base is frozen; eager on the dequantized model would give it a
    gradient), leaving the model as it was; each remedy then gives eager's gradients on
    the dequantized model."""
    from thunder_ir.passes.quant_rules import QuantizedBaseRequiresGrad

    m = mlp()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits)])
    x = torch.randn(3, 64)
    with pytest.raises(QuantizedBaseRequiresGrad, match=r"`[02]_weight`.*requires_grad_"):
        jm(x)
    assert all(p.grad is None and p.requires_grad for p in m.parameters())
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    with torch.no_grad():  # inference: nothing is differentiated
        torch.testing.assert_close(jm(x), dequantized_copy(m, bits)(x), atol=1e-5, rtol=1e-5)

    # leave the trainable layer out: it trains as eager, the quantized one is frozen
    m[0].weight.requires_grad_(False)
    ref = dequantized_copy(m, bits, only="0")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits, modules=["0"])])
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    c = torch.randn(3, 16)
    (jm(xg) * c).sum().backward()
    (ref(xr) * c).sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, atol=1e-4, rtol=1e-4)
    for (name, p), pr in zip(m.named_parameters(), ref.parameters(), strict=True):
        assert (p.grad is None) == (pr.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4)
    assert m[0].weight.grad is None and m[2].weight.grad is not None


def test_peft_lora_gradients() -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = torch.nn.Linear(64, 32)
            self.out = torch.nn.Linear(32, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.relu(self.q(x)))

    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q", "out"], lora_dropout=0.0,
                          init_lora_weights=False)
    m = peft.get_peft_model(Net(), cfg)
    ref = dequantized_copy(m, 8, only="base_layer")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8, modules=["base_layer"])])
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    opt_ref = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # gradients, then the adapters after an optimizer step, as eager's
        x = torch.randn(5, 64)
        y, yr = jm(x), ref(x)
        torch.testing.assert_close(y, yr, atol=1e-5, rtol=1e-5)
        y.sum().backward()
        yr.sum().backward()
        for (name, p), pr in zip(m.named_parameters(), ref.parameters(), strict=True):
            assert (p.grad is None) == (pr.grad is None), name
            if p.grad is not None:
                assert "lora" in name
                torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-5)
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
        for (name, p), pr in zip(m.named_parameters(), ref.parameters(), strict=True):
            if "lora" in name:
                torch.testing.assert_close(p, pr, atol=1e-5, rtol=1e-5)
    assert "tir.int8_linear(" in str(thunder_ir.last_traces(jm)[-1])


def test_state_dict_round_trip() -> None:
    m = mlp()
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(3, 64)
    with torch.no_grad():
        jm(x)
    sd = jm.state_dict()
    assert sd.keys() == m.state_dict().keys()
    for k, v in m.state_dict().items():
        assert torch.equal(sd[k], v) and sd[k].dtype == torch.float32
    other = mlp(64, 32)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    jm.load_state_dict(other.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(jm(x), dequantized_copy(other, 8)(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bits", [8, 4])
def test_bfloat16_compute_of_a_float32_model(bits: int) -> None:
    """``compute_dtype=torch.bfloat16``: scales in bfloat16, the input converted to it, the
    kernel's result converted back and the bias added, as computed here in eager."""
    m = mlp()
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits,
                                                       compute_dtype=torch.bfloat16)])
    x = torch.randn(3, 64)

    def linear(h: torch.Tensor, mod: torch.nn.Linear) -> torch.Tensor:
        if bits == 8:
            w = Q.int8_dequantize(*Q.int8_qparams(mod.weight, torch.bfloat16))
        else:
            w = Q.int4_dequantize(*Q.int4_qparams(mod.weight, 32, torch.bfloat16), 32)
        return torch.nn.functional.linear(h.bfloat16(), w).float() + mod.bias

    with torch.no_grad():
        want = linear(torch.nn.functional.gelu(linear(x, m[0])), m[2])
        got = jm(x)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert got.dtype == torch.float32
    assert "dtype=torch.bfloat16" in str(thunder_ir.last_traces(jm)[-1])


def test_bfloat16_int8() -> None:
    m = mlp().to(torch.bfloat16)
    ref = dequantized_copy(m, 8)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(jm(x), ref(x), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_greedy_tokens_equal_dequantized(cache: str, bits: int) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=128, max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.pad_token_id = 0
    ref = dequantized_copy(model, bits)
    prompt = torch.randint(1, 128, (1, 6))
    kw: dict = {"max_new_tokens": 8, "do_sample": False}
    if cache == "static":
        kw["cache_implementation"] = "static"
    want = ref.generate(prompt, **kw)
    Q.QUANTIZED.clear()
    jm = thunder_ir.jit(model, transforms=[QuantizeWeights(bits=bits)])
    got = jm.generate(prompt, **kw)
    assert torch.equal(got, want)
    assert thunder_ir.cache_misses(jm) == 2  # the prefill and every decode step
    linears = [mod.weight for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    assert all(id(w) in Q.QUANTIZED.entries for w in linears)  # every linear ran quantized


def test_generate_tiers_up_with_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """``generate()`` under tier-up: the decode program goes hot and its fused version is
    swapped in (the module's tier-up applies to its generate steps), the quantized
    linears stay kernel calls between Inductor's regions, and the greedy tokens stay the
    dequantized model's."""
    from thunder_ir.lowering import inductor_executor
    from thunder_ir.lowering import tier_up as tu

    transformers = pytest.importorskip("transformers")
    if not inductor_executor.InductorExecutor().is_available():
        pytest.skip("the Inductor executor needs a C++ compiler on the CPU")
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=128, max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.pad_token_id = 0
    ref = dequantized_copy(model, 8)
    prompt = torch.randint(1, 128, (1, 5))
    kw = {"max_new_tokens": 2 * tu.HOT_CALLS, "do_sample": False}
    want = ref.generate(prompt, **kw)
    jm = thunder_ir.jit(model, transforms=[QuantizeWeights(bits=8)])
    for _ in range(3):
        assert torch.equal(jm.generate(prompt, **kw), want)
        status = thunder_ir.compile_status(jm, wait=None)
        if status["swapped"]:
            break
    assert status["swapped"] >= 1 and status["failed"] == 0, status
    assert torch.equal(jm.generate(prompt, **kw), want)
    fused = str(thunder_ir.last_traces(jm._forward_jit)[-1])
    assert "inductorFusion" in fused and "tir.int8_linear(" in fused
    assert thunder_ir.cache_misses(jm) == 2


def test_free_float_weights_keeps_generating() -> None:
    """`free_float_weights` after the first generation: the quantized linears' float
    storage is gone (a tied weight another module reads stays), and generation goes on
    with the dequantized model's tokens, a new prompt length included."""
    from thunder_ir.transforms import free_float_weights

    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=128, max_position_embeddings=64, pad_token_id=0,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.generation_config.pad_token_id = 0
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ref = dequantized_copy(model, 8)
    with torch.no_grad():  # (the tied lm_head's quantization is the reference's too)
        ref.model.embed_tokens.weight.copy_(model.model.embed_tokens.weight)
    ref.lm_head.weight = torch.nn.Parameter(dequantized(model.lm_head.weight, 8))
    kw = {"max_new_tokens": 6, "do_sample": False}
    jm = thunder_ir.jit(model, transforms=[QuantizeWeights(bits=8)])
    first = torch.randint(1, 128, (1, 6))
    assert torch.equal(jm.generate(first, **kw), ref.generate(first, **kw))
    proj = model.model.layers[0].self_attn.q_proj.weight
    freed = free_float_weights(jm)
    assert freed == sum(m.weight.numel() * 4 for m in model.modules()
                        if isinstance(m, torch.nn.Linear) and m is not model.lm_head)
    assert proj.untyped_storage().nbytes() == 0 and proj.shape == (64, 64)
    assert model.lm_head.weight.untyped_storage().nbytes() > 0  # tied: the embedding reads it
    for prompt in (first, torch.randint(1, 128, (1, 9))):
        assert torch.equal(jm.generate(prompt, **kw), ref.generate(prompt, **kw))
    assert free_float_weights(jm) == 0


def test_free_float_weights_keeps_training_adapters() -> None:
    from thunder_ir.transforms import free_float_weights

    torch.manual_seed(0)
    m = torch.nn.Sequential(LoRA(torch.nn.Linear(64, 32)), torch.nn.ReLU(),
                            LoRA(torch.nn.Linear(32, 16)))
    ref = dequantized_copy(m, 8, only="base")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8, modules=["base"])])
    for step in range(2):
        x = torch.randn(3, 64)
        c = torch.randn(3, 16)
        (jm(x) * c).sum().backward()
        (ref(x) * c).sum().backward()
        for (name, p), pr in zip(m.named_parameters(), ref.parameters()):
            assert (p.grad is None) == (pr.grad is None), name
            if p.grad is not None:
                torch.testing.assert_close(p.grad, pr.grad, atol=1e-4, rtol=1e-4)
        if step == 0:
            assert free_float_weights(jm) == (32 * 64 + 16 * 32) * 4


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="bits is 8 or 4"):
        QuantizeWeights(bits=3)
    with pytest.raises(ValueError, match="group_size"):
        QuantizeWeights(bits=4, group_size=48)


# --------------------------------------------------------------------------- properties

@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 48), k=st.integers(1, 96), mag=st.sampled_from([1e-6, 1e-2, 1.0, 1e3]),
       seed=st.integers(0, 2**16))
def test_int8_scheme_properties(n: int, k: int, mag: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * mag
    q, scale = Q.int8_qparams(w)
    assert q.dtype == torch.int8 and scale.shape == (n,)
    err = (Q.int8_dequantize(q, scale) - w).abs()
    # half a step, plus float32 rounding of the dequantized value (a few ulps of |w|)
    assert bool((err <= scale[:, None] * 0.5 + 4e-7 * w.abs()).all())
    x = torch.randn(3, k, generator=g)
    got = torch.ops.aten._weight_int8pack_mm(x, q, scale)
    torch.testing.assert_close(got, x @ Q.int8_dequantize(q, scale).T, atol=1e-4 * mag * k,
                               rtol=1e-4)


@settings(max_examples=30, deadline=None)
@given(n16=st.integers(1, 3), groups=st.integers(1, 3), gs=st.sampled_from(Q.INT4_GROUP_SIZES),
       mag=st.sampled_from([1e-3, 1.0, 1e2]), shift=st.sampled_from([0.0, 1.0, -3.0]),
       seed=st.integers(0, 2**16))
def test_int4_scheme_properties(n16: int, groups: int, gs: int, mag: float, shift: float,
                                seed: int) -> None:
    n, k = 16 * n16, gs * groups
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) + shift) * mag
    codes, sz = Q.int4_qparams(w, gs)
    assert codes.shape == (n, k // 2) and sz.shape == (k // gs, n, 2)
    scale = sz[:, :, 0].t().repeat_interleave(gs, dim=1)
    err = (Q.int4_dequantize(codes, sz, gs) - w).abs()
    assert bool((err <= scale * 0.5 + 4e-7 * (w.abs() + scale * 16)).all())
    x = torch.randn(2, k, generator=g)
    packed = Q.int4_kernel_layout(codes)
    got = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, gs, sz)
    want = x @ Q.int4_dequantize(codes, sz, gs).T
    torch.testing.assert_close(got, want, atol=1e-4 * mag * k, rtol=1e-4)


@pytest.mark.parametrize("bits,shape", [(8, (24, 40)), (8, (1, 7)), (4, (32, 64)),
                                        (4, (16, 256)), (4, (208, 64))])
def test_decomposed_quantize_equals_scheme(bits: int, shape: tuple[int, int]) -> None:
    """The quantize ops' decompositions (run by the reference interpreter) give the
    scheme's storage bit for bit: for int4 on the CPU, the kernel's packed layout (208
    rows: full blocks and a short one), which is also what the kernel keeps."""
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import tensor_type
    from thunder_ir.passes import Pipeline
    from thunder_ir.runtime.interpreter import run

    w = torch.randn(*shape) * 3
    prog = Program("forward", [tensor_type(shape, torch.float32)], ["w"])
    op = Q.QuantizeInt8Op if bits == 8 else Q.QuantizeInt4Op
    params = {} if bits == 8 else {"group_size": 32 if shape[1] == 64 else 128}
    outs = prog.emitter.emit(op, prog.args[0], **params)
    module = prog.finish(list(outs))
    Pipeline(("decompose-ltorch",), verify=True).run(module)
    assert "quant." not in str(module)
    got = run(module, w)
    want = Q.int8_qparams(w) if bits == 8 else Q.int4_qparams(w, **params)
    if bits == 4:
        want = (Q.int4_kernel_layout(want[0]), want[1])
    for a, b, kept in zip(got, want, op.TORCH_FN(w, **params), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b) and torch.equal(kept, b)


def test_tier_up_keeps_the_kernels_and_trains_as_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tier-up (Inductor regions around the other ops): the quantized linears stay kernel
    calls between regions, the backward's dequantized product is fused, and values and
    adapter gradients remain eager's on the dequantized model."""
    from thunder_ir.lowering import inductor_executor
    from thunder_ir.lowering import tier_up as tu

    if not inductor_executor.InductorExecutor().is_available():
        pytest.skip("the Inductor executor needs a C++ compiler on the CPU")
    monkeypatch.setenv(tu.AFTER_ENV, "0")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    m = torch.nn.Sequential(LoRA(torch.nn.Linear(64, 32)), torch.nn.GELU(),
                            LoRA(torch.nn.Linear(32, 16)))
    ref = dequantized_copy(m, 8, only="base")
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8, modules=["base"])])
    x = torch.randn(3, 64)

    def check() -> None:
        m.zero_grad()
        ref.zero_grad()
        y, want = jm(x), ref(x)
        torch.testing.assert_close(y, want, atol=1e-4, rtol=1e-4)
        y.sum().backward()
        want.sum().backward()
        for p, q in zip(m.parameters(), ref.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None)
            if p.grad is not None:
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)

    run_until_swapped(jm, lambda _: check())
    check()
    fwd = str(thunder_ir.last_traces(jm)[-1])
    assert "inductorFusion" in fwd and fwd.count("tir.int8_linear(") == 2


TORCHAO = Path(__file__).resolve().parents[1] / ".venv" / "torchao"
"""Where scripts/setup.sh installs torchao: beside site-packages, not in it (transformers
imports torchao wherever it finds it, at every import of a model class)."""

_TORCHAO_SCRIPT = """
import sys, warnings, torch
warnings.simplefilter("ignore")
sys.path.insert(0, sys.argv[1])
try:
    import torchao.quantization as tq
except ImportError as e:
    print("IMPORT", e); sys.exit(0)
m = torch.load(sys.argv[2], weights_only=False)
x = torch.load(sys.argv[3])
try:
    tq.quantize_(m, tq.Int8WeightOnlyConfig() if sys.argv[4] == "8" else
                 tq.Int4WeightOnlyConfig(group_size=32))
except ImportError as e:
    print("IMPORT", e); sys.exit(0)
with torch.no_grad():
    y = m(x).float()
lin = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
storage = [(mod.weight.qdata, mod.weight.scale) for mod in lin] if sys.argv[4] == "8" else []
torch.save((y, storage), sys.argv[5])
print("OK")
"""


def torchao_run(m: torch.nn.Module, x: torch.Tensor, bits: int, tmp: Path) -> Any:
    """torchao's weight-only quantization of ``m`` and its output on ``x``, computed in a
    subprocess that puts `TORCHAO` on its path (importing torchao registers pytree nodes
    and ops in torch, which no other test should inherit): ``(output, [(qdata, scale)
    per linear])``; skips where torchao is missing or does not run."""
    if not (TORCHAO / "torchao").is_dir():
        pytest.skip(f"torchao is not installed in {TORCHAO} (scripts/setup.sh)")
    torch.save(m, tmp / "m.pt")
    torch.save(x, tmp / "x.pt")
    done = subprocess.run(
        [sys.executable, "-c", _TORCHAO_SCRIPT, str(TORCHAO), str(tmp / "m.pt"),
         str(tmp / "x.pt"), str(bits), str(tmp / "out.pt")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if last.startswith("IMPORT"):  # 0.18 int4 on the CPU: "Requires mslk >= 1.0.0"
        pytest.skip(f"torchao's int{bits} weight-only does not run on this CPU install: "
                    f"{last.removeprefix('IMPORT ')}")
    return torch.load(tmp / "out.pt")


def test_int8_agrees_with_torchao(tmp_path: Path) -> None:
    """torchao's ``Int8WeightOnlyConfig`` on the same model: the same int8 storage and
    scales bit for bit, and outputs within the kernels' rounding."""
    m = mlp(256, 128)
    x = torch.randn(4, 256)
    y_ao, storage = torchao_run(m, x, 8, tmp_path)
    for mod, (qdata, scale) in zip((m[0], m[2]), storage, strict=True):
        q, s = Q.int8_qparams(mod.weight)
        assert torch.equal(qdata, q)
        assert torch.equal(scale.flatten(), s)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    with torch.no_grad():
        torch.testing.assert_close(jm(x), y_ao, atol=1e-5, rtol=1e-5)


def test_int4_against_torchao(tmp_path: Path) -> None:
    m = mlp(64, 32)
    x = torch.randn(4, 64)
    y_ao, _ = torchao_run(m, x, 4, tmp_path)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=4)])
    with torch.no_grad():  # (the same asymmetric scheme with a float zero point)
        torch.testing.assert_close(jm(x), y_ao, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("op", Q.QUANT_OPS, ids=lambda op: op.name)
def test_every_quant_op_has_its_rules(op: type[Q.QuantOp]) -> None:
    """Coverage of the rule tables: every quant op has a shape rule, a kernel, a
    decomposition and a VJP rule, is pure, parses in the opt tool's context, and says
    its IR in its docstring."""
    from xdsl.traits import Pure

    from thunder_ir.dialects.program import context
    from thunder_ir.passes.decompositions import load_rules
    from thunder_ir.passes.vjp import load_vjp_rules

    assert op in load_rules(), f"{op.name} has no decomposition"
    assert op in load_vjp_rules(), f"{op.name} has no VJP rule"
    assert callable(op.SHAPE_RULE) and callable(op.TORCH_FN)
    assert op.has_trait(Pure)
    assert op.__doc__ and op.__doc__.startswith("`%")
    assert context().get_optional_op(op.name) is op


@pytest.mark.parametrize("rows", [1, 7])
def test_float32_path_dequantizes_in_row_blocks(rows: int) -> None:
    """The float32 int8 path (`quant.dequantized_mm`, blocks of `DEQUANTIZE_ROWS` rows,
    the last one partial) equals eager's linear on the dequantized weight."""
    n = Q.DEQUANTIZE_ROWS * 2 + 40
    w = torch.randn(n, 96)
    q, scale = Q.int8_qparams(w)
    x = torch.randn(rows, 96)
    want = torch.nn.functional.linear(x, Q.int8_dequantize(q, scale))
    torch.testing.assert_close(Q.dequantized_mm(x, q, scale), want, atol=1e-6, rtol=1e-6)


def linear_error_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """How far two float32 sums of ``x_k w_k`` in different orders may be apart:
    ``2 K 2^-24 sum_k |x_k w_k|`` per output (each is within ``K 2^-24`` of the exact sum,
    relative to the sum of absolute values)."""
    return 2 * x.shape[-1] * 2.0 ** -24 * (x.abs() @ w.abs().T)


def test_float32_decode_row_is_fused_within_its_bound() -> None:
    """One row of float32 activations on a weight of `FUSED_MIN_ELEMENTS` or more: the
    fused product (Inductor's kernel, one pass over the int8 bytes) is within the stated
    bound of eager's linear on the dequantized weight; two rows multiply a block at a
    time."""
    from thunder_ir.dialects import quant_cpu

    torch.manual_seed(0)
    m = torch.nn.Linear(640, 512)
    with torch.no_grad():
        m.weight.mul_(torch.linspace(0.01, 10, 512)[:, None])  # rows of other magnitudes
    ref = dequantized_copy(m, 8)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    with torch.no_grad():
        for x in (torch.randn(1, 1, 640), torch.randn(1, 640) * 100, torch.randn(2, 640)):
            got, want = jm(x), ref(x)
            bound = linear_error_bound(x, ref.weight) + 2.0 ** -24 * want.abs()  # (+ bias)
            assert bool(((got - want).abs() <= bound).all())
            assert got.shape == want.shape and got.dtype == want.dtype
    key = (512, 640, torch.get_num_threads())
    assert key in quant_cpu.FUSED.kernels  # the one-row calls asked for the fused product
    if quant_cpu.FUSED.kernels[key] is None:
        pytest.skip("Inductor cannot compile here (no C++ compiler): the fused product "
                    "was not used")


# --------------------------------------------------------------------------- int4 storage


@settings(max_examples=40, deadline=None)
@given(n16=st.integers(1, 13), k2=st.integers(1, 80), low=st.integers(0, 15),
       seed=st.integers(0, 2**16))
def test_int4_cpu_layout_round_trip(n16: int, k2: int, low: int, seed: int) -> None:
    """The kernel's packing (`quant_cpu.int4_cpu_pack`, torch's own) read back by
    `int4_cpu_unpack` gives the codes, over row counts with and without a short block,
    any even column count and code ranges (``low..15``); the plain layout round trips
    through the kernel's."""
    from thunder_ir.dialects import quant_cpu

    n, k = 16 * n16, 2 * k2
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(low, 16, (n, k), generator=g, dtype=torch.uint8)
    packed = quant_cpu.int4_cpu_pack(codes)
    assert packed.shape == (n, k // 2) and packed.dtype == torch.uint8
    assert torch.equal(quant_cpu.int4_cpu_unpack(packed), codes)
    plain = codes[:, 0::2] | (codes[:, 1::2] << 4)
    assert torch.equal(Q.int4_kernel_layout(plain), packed)
    assert torch.equal(Q.int4_plain_layout(packed), plain)


@settings(max_examples=15, deadline=None)
@given(n16=st.integers(1, 9), groups=st.integers(1, 3), gs=st.sampled_from(Q.INT4_GROUP_SIZES),
       mag=st.sampled_from([1e-3, 1.0, 1e2]), shift=st.sampled_from([0.0, 1.0, -3.0]),
       seed=st.integers(0, 2**16))
def test_int4_storage_is_one_copy_and_dequantizes(n16: int, groups: int, gs: int, mag: float,
                                                  shift: float, seed: int) -> None:
    """What `quant.quantize_int4` keeps for a CPU weight is the kernel's packed codes and
    the scales and zeros, nothing else (N K / 2 + 8 N K / group_size bytes for float32);
    the dequantization read from it (the kernel path's fallback) is the scheme's weight
    within its error, and the kernel computes on it."""
    n, k = 16 * n16, gs * groups
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) + shift) * mag
    before = len(Q.QUANTIZED)
    packed, sz = Q.QuantizeInt4Op.TORCH_FN(w, gs)
    assert len(Q.QUANTIZED) == before + 1  # one entry: no second layout kept beside it
    assert packed.numel() * packed.element_size() + sz.numel() * sz.element_size() \
        == n * k // 2 + 8 * n * k // gs
    codes, sz_ref = Q.int4_qparams(w, gs)
    assert torch.equal(sz, sz_ref) and torch.equal(Q.int4_plain_layout(packed), codes)
    w_deq = Q.int4_dequantize(codes, sz, gs)
    x = torch.randn(3, k, generator=g)
    want = x @ w_deq.T
    with torch.enable_grad():  # (an input that requires grad: the dequantizing path)
        y = Q.Int4LinearOp.TORCH_FN(x.clone().requires_grad_(), packed, sz, None, gs)
    torch.testing.assert_close(y.detach(), want, atol=1e-5 * mag * k, rtol=1e-5)
    got = Q.Int4LinearOp.TORCH_FN(x, packed, sz, None, gs)  # the kernel
    torch.testing.assert_close(got, want, atol=1e-4 * mag * k, rtol=1e-4)


@pytest.mark.parametrize("compute", [None, torch.bfloat16])
def test_int4_decomposition_unpacks_full_and_short_blocks(compute: torch.dtype | None) -> None:
    """An executor without the kernels: the int4 linear's decomposition unpacks the
    kernel's layout in ltorch ops (208 rows: full blocks and a short one) and equals the
    dequantized model; with an input that requires grad, its gradient too."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 208), torch.nn.ReLU(), torch.nn.Linear(208, 80))
    ref = dequantized_copy(m, 4, only="0")  # (208 columns: no int4 groups of 32)
    ex = TorchExecutor(claims=lambda op: not isinstance(op, Q.QuantOp)
                       and getattr(type(op), "TORCH_FN", None) is not None)
    for p in m.parameters():
        p.requires_grad_(False)
    transform = QuantizeWeights(bits=4, compute_dtype=compute, modules=["0"])
    jm = thunder_ir.jit(m, executors=[ex], transforms=[transform])
    kernels = thunder_ir.jit(m, transforms=[transform])
    x = torch.randn(5, 64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    y = jm(x)
    want = ref(xr) if compute is None else kernels(xr)
    tol = 1e-5 if compute is None else 2e-2
    torch.testing.assert_close(y, want, atol=tol, rtol=tol)
    y.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, atol=tol, rtol=tol)
    assert "quantize_int" not in str(thunder_ir.last_traces(jm)[-1])


def test_int8_storage_is_codes_and_scales_only() -> None:
    """What a jitted int8 model keeps per weight is its codes and scales (one entry, N K
    + 4 N bytes for float32; the fused one-row product compiles per shape and keeps no
    data); after `free_float_weights` nothing else of the weight is left, and it still
    computes the dequantized model's values."""
    from thunder_ir.transforms import free_float_weights

    m = mlp()
    ref = dequantized_copy(m, 8)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=8)])
    x = torch.randn(1, 64)
    with torch.no_grad():
        jm(x)
    # (not a count of entries: the process-wide table drops a dead weight's entry whenever
    # it is next touched, so the count depends on earlier tests' garbage)
    assert all(id(lin.weight) in Q.QUANTIZED.entries for lin in (m[0], m[2]))
    for lin in (m[0], m[2]):
        n, k = lin.weight.shape
        kept = Q.QUANTIZED.entries[id(lin.weight)][3]
        assert sum(t.untyped_storage().nbytes() for t in kept) == n * k + 4 * n
    assert free_float_weights(jm) == (32 * 64 + 16 * 32) * 4
    assert all(lin.weight.untyped_storage().nbytes() == 0 for lin in (m[0], m[2]))
    with torch.no_grad():
        torch.testing.assert_close(jm(x), ref(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bits", [8, 4])
def test_bfloat16_compute_within_its_stated_error(bits: int) -> None:
    """``compute_dtype=torch.bfloat16`` against the float32 dequantized model: within
    ``2^-7 sum_k |x_k| m_k`` per output (the activations, the scales and the kernel's
    result rounded to bfloat16, 2^-9 each; ``m_k = |w_k|`` for int8, ``|code - 8| scale +
    |zero|`` for int4, whose zero is rounded too)."""
    torch.manual_seed(0)
    m = torch.nn.Linear(128, 64, bias=False)
    with torch.no_grad():
        m.weight.mul_(torch.linspace(0.01, 10, 64)[:, None])
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits,
                                                       compute_dtype=torch.bfloat16)])
    if bits == 8:
        mag = Q.int8_dequantize(*Q.int8_qparams(m.weight)).abs()
    else:
        codes, sz = Q.int4_qparams(m.weight, 32)
        each = torch.stack([codes & 15, codes >> 4], dim=2).reshape(64, 128).float()
        scale, zero = (sz[:, :, i].t().repeat_interleave(32, dim=1) for i in (0, 1))
        mag = (each - 8).abs() * scale + zero.abs()
    ref = dequantized_copy(m, bits)
    with torch.no_grad():
        for x in (torch.randn(1, 128), torch.randn(5, 128) * 100):
            got, want = jm(x), ref(x)
            assert got.dtype == torch.float32
            assert bool(((got - want).abs() <= 2.0 ** -7 * (x.abs() @ mag.T)).all())


@pytest.mark.parametrize("bits", [8, 4])
def test_dequantized_state_dict_from_the_kept_storage(bits: int) -> None:
    """`dequantized_state_dict` after `free_float_weights`: read from the quantized
    storage alone (int4 unpacked from the kernel's layout), it is the dequantized model's
    state, bit for bit; loaded into a fresh float model it computes the jitted one's
    values; the biases are the model's."""
    from thunder_ir.transforms import dequantized_state_dict, free_float_weights

    m = mlp()
    ref = dequantized_copy(m, bits)
    jm = thunder_ir.jit(m, transforms=[QuantizeWeights(bits=bits)])
    x = torch.randn(3, 64)
    with torch.no_grad():
        y = jm(x)
    assert free_float_weights(jm) > 0
    sd = dequantized_state_dict(jm)
    assert sd.keys() == ref.state_dict().keys()
    for k, v in ref.state_dict().items():
        assert sd[k].dtype == v.dtype and torch.equal(sd[k], v), k
    fresh = mlp()
    fresh.load_state_dict(sd)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), y, atol=1e-5, rtol=1e-5)


def test_fused_product_falls_back_where_inductor_cannot_compile(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Where Inductor cannot compile (no C++ compiler), the shape is remembered as
    failed with a warning, and the float32 int8 linear dequantizes a block at a time:
    the dequantized weight's values."""
    import logging

    import torch._inductor

    from thunder_ir.dialects import quant_cpu

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch._inductor, "compile", fail)
    fused = quant_cpu.FusedGemv()
    q, s = Q.int8_qparams(torch.randn(512, 576))
    x = torch.randn(1, 576)
    with caplog.at_level(logging.WARNING, logger=quant_cpu.__name__):
        assert fused.int8(x, q, s) is None
    assert "no fused int8 product for a [512, 576] weight" in caplog.text
    assert fused.kernels == {(512, 576, torch.get_num_threads()): None}
    monkeypatch.setitem(quant_cpu.FUSED.kernels, (512, 576, torch.get_num_threads()), None)
    want = torch.nn.functional.linear(x, Q.int8_dequantize(q, s))
    torch.testing.assert_close(Q.Int8LinearOp.TORCH_FN(x, q, s, None), want,
                               atol=1e-5, rtol=1e-5)


def test_int4_on_float32_activations_warns_once_naming_the_line() -> None:
    """int4 on float32 linears on the CPU (torch's kernel: several times eager's time) warns
    once per process with the user's line and what to do; bfloat16 compute and int8 do
    not; the values are still the dequantized model's."""
    import warnings

    from thunder_ir.passes import quantize

    quantize._WARNED_INT4_FLOAT32.clear()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    x = torch.randn(3, 64)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for bits, cd in [(8, None), (4, torch.bfloat16), (4, None), (4, None)]:
            jm = thunder_ir.jit(copy.deepcopy(model), transforms=[
                QuantizeWeights(bits=bits, compute_dtype=cd)])
            with torch.no_grad():
                y = jm(x)
        msgs = [str(w.message) for w in seen if "QuantizeWeights(bits=4)" in str(w.message)]
    assert len(msgs) == 1
    assert "test_quantize.py" in msgs[0] and "compute_dtype=torch.bfloat16" in msgs[0]
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for lin in reference:
            lin.weight.copy_(Q.int4_dequantize(*Q.int4_qparams(lin.weight, 32), 32))
        torch.testing.assert_close(y, reference(x), atol=1e-4, rtol=1e-4)
