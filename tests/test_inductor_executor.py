"""The torch.compile (Inductor) fusion executor: ``jit(fn, executors=["torch_compile"])``
matches eager on small functions, in inference and training.

torch.compile is slow to compile (seconds per region on CPU), so the functions are tiny and
few; the kernel cache makes repeated regions free. Compiling failures would fall back to
eager with a RuntimeWarning: these tests turn that warning into an error.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.lowering.executors import get_default_executors, get_executor
from thunder_ir.lowering.inductor_executor import InductorExecutor

EX = get_executor("torch_compile")

pytestmark = [
    pytest.mark.skipif(
        not EX.is_available(),
        reason="torch.compile cannot run here (no Inductor or no C++ compiler)",
    ),
    pytest.mark.filterwarnings("error::RuntimeWarning"),
]


def _kernels(trace: Any) -> list[str]:
    return re.findall(r"^  (?:\(.*\)|\w+) = (inductorFusion\d+)\(", str(trace), flags=re.M)


def test_registered_as_a_fusion_executor_not_in_the_cpu_defaults() -> None:
    assert isinstance(EX, InductorExecutor) and EX.is_fusion
    assert EX.kernel_prefix == "inductorFusion"
    if not torch.cuda.is_available():
        # docs/fusion.md: it wins in the steady step but costs seconds of compiling
        assert EX not in get_default_executors()


def test_a_new_stride_layout_compiles_its_own_kernel() -> None:
    """Inductor kernels assume their inputs' strides: a transposed input gets a kernel of
    its own, and both layouts compute the right values."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * y + 1.0

    jf = thunder_ir.jit(f, executors=["torch_compile"])
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    torch.testing.assert_close(jf(x, y), f(x, y))
    xt = torch.randn(6, 5).t()  # same shape, other strides
    torch.testing.assert_close(jf(xt, y), f(xt, y))
    torch.testing.assert_close(jf(x, y), f(x, y))


def test_region_results_have_eagers_strides_and_the_trace_shows_the_restride() -> None:
    """A region's result is laid out as Inductor writes it; where eager's differs (a
    transposed or channels-last input makes a result laid out as the input), the program
    restrides it (``tir.restride``, shown in the trace), so the caller gets eager's
    strides."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2.0 + x

    jf = thunder_ir.jit(f, executors=["torch_compile"])
    for x in (torch.randn(8, 6).t(), torch.randn(2, 3, 4, 5).to(
            memory_format=torch.channels_last)):
        out = jf(x)
        torch.testing.assert_close(out, f(x))
        assert out.stride() == f(x).stride()
        assert "tir.restride(" in str(thunder_ir.last_traces(jf)[-1])


def test_a_number_first_operand_fuses() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(x)
        return x * s * (1.0 - s)

    x = torch.randn(4, 8)
    jf = thunder_ir.jit(f, executors=["torch_compile"])
    torch.testing.assert_close(jf(x), f(x))
    src = str(thunder_ir.last_traces(jf)[-1])
    assert _kernels(src) == ["inductorFusion0"]
    code = [ln for ln in src.splitlines() if not ln.lstrip().startswith("#")]
    assert not any("sub(" in ln or "sigmoid(" in ln for ln in code), src


def test_kernels_go_through_the_fx_graph_cache() -> None:
    """Regions are traced with a static ShapeEnv, so Inductor's FX graph cache applies:
    a later process loads the kernel instead of compiling it."""
    from torch._dynamo.utils import counters

    before = counters["inductor"]["fxgraph_cache_bypass"]
    jf = thunder_ir.jit(lambda x: torch.cos(x) * 3.0 + x, executors=["torch_compile"])
    x = torch.randn(7, 3)
    torch.testing.assert_close(jf(x), torch.cos(x) * 3.0 + x)
    assert counters["inductor"]["fxgraph_cache_bypass"] == before


def test_a_llama_training_step_is_one_region_each_way() -> None:
    """Matmuls, linears and the fused attention calls join the regions (Inductor plans
    their buffers and calls the BLAS and attention kernels itself): the forward and the
    backward are one Inductor graph each, as under torch.compile. Gradients match eager."""
    from models import Config, LlamaGPT

    torch.manual_seed(0)
    cfg = Config(n_layer=2, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=48,
                 block_size=16, vocab_size=64)
    model = LlamaGPT(cfg)
    ours = LlamaGPT(cfg)
    ours.load_state_dict(model.state_dict())
    jm = thunder_ir.jit(ours, executors=["torch_compile", *get_default_executors()])
    idx = torch.randint(0, 64, (2, 16))
    out = jm(idx)
    ref = model(idx)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    out.logsumexp(-1).mean().backward()
    ref.logsumexp(-1).mean().backward()
    for (name, p), q in zip(model.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    bwd = str(thunder_ir.last_backward_traces(jm)[-1])
    code = [ln for ln in (fwd + bwd).splitlines() if not ln.lstrip().startswith("#")]
    assert not any("linear(" in ln or "matmul(" in ln or "sdpa_" in ln for ln in code), \
        "\n".join(code)
    assert "sdpa_forward_cpu(" in fwd and "sdpa_backward_cpu(" in bwd  # in region bodies
    assert _kernels(fwd) == ["inductorFusion0"] and _kernels(bwd) == ["inductorFusion0"]


def test_llama_inference_is_one_region_with_attention_inside() -> None:
    """Without grad the SDPA executor claims attention whole; it consents to Inductor
    taking it (`FUSIBLE_CLAIMS`), so the forward is one region, as in training."""
    from models import Config, LlamaGPT

    torch.manual_seed(0)
    cfg = Config(n_layer=2, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=48,
                 block_size=16, vocab_size=64)
    model = LlamaGPT(cfg).eval().requires_grad_(False)
    jm = thunder_ir.jit(model, executors=["torch_compile", *get_default_executors()])
    idx = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(jm(idx), model(idx), atol=1e-5, rtol=1e-5)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    assert _kernels(fwd) == ["inductorFusion0"], fwd
    assert "# t" in fwd and "ltorch.scaled_dot_product_attention(" in fwd  # in the body


@pytest.mark.parametrize("case", ["causal", "bool mask", "float mask", "gqa", "3-d, scale"])
def test_inference_attention_inside_a_region_matches_eager(case: str) -> None:
    """Attention the SDPA executor claimed, compiled inside an Inductor region without
    grad: masks, grouped-query heads, 3-D inputs and a scale give eager's output."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    q_shape, kv_shape = ((2, 8, 16), (2, 8, 16)) if case == "3-d, scale" else \
        ((1, 4, 8, 16), (1, 2, 8, 16)) if case == "gqa" else ((1, 2, 8, 16), (1, 2, 8, 16))
    mask = {"bool mask": torch.rand(8, 8) > 0.3,
            "float mask": torch.randn(1, 1, 8, 8)}.get(case)
    kw = {"causal": {"is_causal": True}, "gqa": {"enable_gqa": True, "is_causal": True},
          "3-d, scale": {"scale": 0.3}}.get(case, {})

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        y = F.scaled_dot_product_attention(q * 2.0, k, v, attn_mask=mask, **kw)
        return torch.tanh(y) + 1.0

    q, k, v = torch.randn(q_shape), torch.randn(kv_shape), torch.randn(kv_shape)
    jf = thunder_ir.jit(f, executors=["torch_compile", "sdpa"])
    torch.testing.assert_close(jf(q, k, v), f(q, k, v), atol=1e-5, rtol=1e-5)
    trace = str(thunder_ir.last_traces(jf)[-1])
    assert _kernels(trace) == ["inductorFusion0"], trace


def test_attention_claimed_by_another_executor_stays_whole() -> None:
    """Consent is per claimer: attention claimed by an executor that Inductor does not
    name in `FUSIBLE_CLAIMS` stays outside the regions."""
    import torch.nn.functional as F

    from thunder_ir.lowering.sdpa_executor import SdpaExecutor

    class OtherAttention(SdpaExecutor):
        name = "other_attention"

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.tanh(F.scaled_dot_product_attention(q * 2.0, k, v) + 1.0)

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    for claimer, inside in ((OtherAttention(), False), ("sdpa", True)):
        jf = thunder_ir.jit(f, executors=["torch_compile", claimer])
        torch.testing.assert_close(jf(q, k, v), f(q, k, v))
        code = [ln.strip() for ln in str(thunder_ir.last_traces(jf)[-1]).splitlines()]
        outside = any(ln.startswith("t") and "scaled_dot_product_attention(" in ln
                      for ln in code)
        assert outside != inside, "\n".join(code)


def test_elementwise_chain_compiles_once_per_structure(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    compile_region = InductorExecutor.compile_region

    def counting(self: InductorExecutor, region: Any) -> Any:
        calls.append(region.kernel.data)
        return compile_region(self, region)

    monkeypatch.setattr(InductorExecutor, "compile_region", counting)

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.tanh(x * 0.5 + 1.0)
        b = torch.sigmoid(y) * a
        return torch.where(b > 0.25, b, -a)

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    jf = thunder_ir.jit(f, executors=["torch_compile"])
    torch.testing.assert_close(jf(x, y), f(x, y))
    assert _kernels(thunder_ir.last_traces(jf)[-1]) == ["inductorFusion0"]
    assert len(calls) == 1
    again = thunder_ir.jit(f, executors=["torch_compile"])  # a new program, same region
    torch.testing.assert_close(again(2 * x, y), f(2 * x, y))
    assert len(calls) == 1


def test_softmax_written_with_reductions() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    x = torch.randn(3, 5, 7)
    jf = thunder_ir.jit(f, executors=["torch_compile"])
    torch.testing.assert_close(jf(x), torch.softmax(x, -1))
    assert len(_kernels(thunder_ir.last_traces(jf)[-1])) == 1


def test_llama_mlp_forward_and_backward() -> None:
    from models import LLaMAMLP

    torch.manual_seed(0)
    model = LLaMAMLP(16, 24)
    jm = thunder_ir.jit(model, executors=["torch_compile"])
    x = torch.randn(2, 4, 16, requires_grad=True)
    out = jm(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    gx = x.grad.clone()
    model.zero_grad()
    x.grad = None
    ref = model(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, x.grad)
    for g, p in zip(grads, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)
    assert _kernels(thunder_ir.last_traces(jm)[-1])
    assert _kernels(thunder_ir.last_backward_traces(jm)[-1])


def test_masked_attention_trains_inside_a_region() -> None:
    """CPU flash attention with a boolean mask, forward and backward inside Inductor
    regions: outputs and gradients match eager."""
    import torch.nn.functional as F

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
          ) -> torch.Tensor:
        return torch.tanh(F.scaled_dot_product_attention(q * 2.0, k, v, attn_mask=mask)) * q

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 8, 16) for _ in range(3))
    mask = torch.rand(8, 8) > 0.3
    mask[:, 0] = True  # no fully masked row
    jf = thunder_ir.jit(f, executors=["torch_compile", *get_default_executors()])
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = [t.clone().requires_grad_() for t in (q, k, v)]
    out, expected = jf(*ours, mask), f(*ref, mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    out.square().sum().backward()
    expected.square().sum().backward()
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)
    bwd = str(thunder_ir.last_backward_traces(jf)[-1])
    assert "sdpa_backward_cpu(" in bwd and _kernels(bwd) == ["inductorFusion0"], bwd


def test_backward_kernels_fuse_into_the_backward_region() -> None:
    """The backward kernels VJP rules emit (embedding, layer norm, GELU, cross entropy)
    join the backward's region, and layer norm's forward (which saves its statistics) and
    the loss join the forward's: one Inductor region each way, values and gradients as
    eager's."""
    import copy

    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(20, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 10))
    ref = copy.deepcopy(model)

    def loss(m: nn.Module, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(m(x).flatten(0, 1), t, ignore_index=3)

    x, t = torch.randint(0, 20, (4, 5)), torch.randint(0, 10, (20,))
    jl = thunder_ir.jit(lambda x, t: loss(model, x, t),
                        executors=["torch_compile", *get_default_executors()])
    got, want = jl(x, t), loss(ref, x, t)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
    bwd = thunder_ir.last_backward_traces(jl)[-1]
    assert len(_kernels(bwd)) == 1, str(bwd)
    fwd = str(thunder_ir.last_traces(jl)[-1])
    code = [ln for ln in fwd.splitlines() if not ln.lstrip().startswith("#")]
    assert len(_kernels(fwd)) == 1, fwd
    assert not any("layer_norm(" in ln or "nll_loss" in ln for ln in code), fwd


class _BasicBlock(torch.nn.Module):
    """A ResNet basic block on a stem with max pooling: convolutions, batch norms and
    pooling are library kernels this executor takes inside its regions."""

    def __init__(self) -> None:
        super().__init__()
        from torch import nn

        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.conv1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)) + x)
        return self.head(y.mean((2, 3)))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "eval"])
def test_a_convolutional_block_trains_inside_regions(layout: str) -> None:
    """Convolutions, batch norms (their running statistics included) and max pooling,
    forward and backward, run inside Inductor regions with eager's values, gradients,
    buffers and result strides; the forward is one region."""
    from thunder_ir.testing_eager import check_against_eager

    torch.manual_seed(0)
    model = _BasicBlock()
    if layout == "eval":
        model.train()(torch.randn(4, 3, 8, 8))  # running statistics that are not the start
        model.eval()
    x = torch.randn(4, 3, 8, 8)
    if layout == "channels_last":
        model, x = model.to(memory_format=torch.channels_last), x.to(
            memory_format=torch.channels_last)
    x.requires_grad_()

    def jit(m: Any) -> Any:
        return thunder_ir.jit(m, executors=["torch_compile", *get_default_executors()])

    check_against_eager(model, x, jit=jit, atol=1e-4, rtol=1e-4)
    jm, ref = jit(model), __import__("copy").deepcopy(model)
    out, want = jm(x), ref(x)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    for a, b in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    fwd = str(thunder_ir.last_traces(jm)[-1])
    code = [ln for ln in fwd.splitlines() if not ln.lstrip().startswith("#")]
    assert len(_kernels(fwd)) == 1, fwd
    assert not any(re.search(r"torch\.\w*(conv|batch_norm|pool)", ln) for ln in code), fwd


def test_an_unbacked_count_of_one_then_more_gets_its_own_kernel() -> None:
    """A region over rows picked by a mask (an unbacked count): the fake inputs of a
    symbolic region specialize sizes 0 and 1, so the kernel compiled for one row is not
    the one a call with three rows runs (it asserted the size, and the next call
    crashed)."""
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        idx = torch.nonzero(m).squeeze(1)
        return (x[idx] * 2).exp().sum(0) + 1

    jf = thunder_ir.jit(f, executors=["torch_compile"])
    for n in (1, 3, 0, 5, 1, 2):
        m = torch.zeros(6, dtype=torch.bool)
        m[:n] = True
        x = torch.randn(6, 4)
        torch.testing.assert_close(jf(x, m), f(x, m))
    assert thunder_ir.cache_misses(jf) == 1
