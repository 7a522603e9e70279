"""The SDPA executor: attention forward and backward through torch's fused kernels.

Jitted attention functions with ``executors=["sdpa"]`` are compared with eager PyTorch
(float32, small shapes): outputs and input gradients, with is_causal, scale, float and
boolean masks, grouped-query attention and unbatched inputs. The backward trace must call
`sdpa_backward` or, where CPU flash attention runs, `sdpa_backward_cpu` on the log-sum-exp
the forward saved (not the table's matmul/softmax recomputation), and `sdpa_backward_path`
must name the kernel that runs. The CUDA kernels (flash, memory-efficient) are checked
only where a GPU exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import thunder_ir
from thunder_ir.dialects import ltorch
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.types import tensor_type
from thunder_ir.lowering.executors import get_default_executors, get_executor
from thunder_ir.lowering.sdpa_executor import (
    PATHS,
    SdpaExecutor,
    may_need_grad,
    saves_statistics,
    sdpa_backward,
    sdpa_backward_cpu,
    sdpa_backward_path,
    sdpa_forward_cpu,
)

B, H, L, S, E = 2, 4, 5, 7, 8


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    """float32 agreement with eager (fused and math kernels differ in summation order)."""
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _qkv(heads_kv: int = H, batched: bool = True) -> tuple[torch.Tensor, ...]:
    lead = (B,) if batched else ()
    q = torch.randn(*lead, H, L, E, requires_grad=True)
    k = torch.randn(*lead, heads_kv, S, E, requires_grad=True)
    v = torch.randn(*lead, heads_kv, S, E, requires_grad=True)
    return q, k, v


def _check(fn: Callable[..., torch.Tensor], *args: Any) -> Any:
    """Runs ``fn`` jitted with the sdpa executor and eagerly; compares the outputs and the
    gradients of every input that requires grad. Returns the jitted function."""
    jf = thunder_ir.jit(fn, executors=["sdpa"])
    out = jf(*args)
    expected = fn(*args)
    close(out, expected)
    grad_args = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    cot = torch.randn_like(expected)
    got = torch.autograd.grad(out, grad_args, cot)
    want = torch.autograd.grad(expected, grad_args, cot)
    for g, w in zip(got, want, strict=True):
        close(g, w)
    return jf


def _backward_source(jf: Any) -> str:
    return str(thunder_ir.last_backward_traces(jf)[-1])


def _saves_statistics(jf: Any) -> bool:
    """Whether the forward kept the log-sum-exp: it calls `sdpa_forward_cpu` and the
    backward `sdpa_backward_cpu`, which recomputes no attention forward."""
    fwd, bwd = str(thunder_ir.last_traces(jf)[-1]), _backward_source(jf)
    saved = "tir.sdpa_forward_cpu(" in fwd
    assert saved == ("tir.sdpa_backward_cpu(" in bwd), bwd
    if saved:
        assert "scaled_dot_product_attention(" not in fwd, fwd  # attention runs once
        assert "sdpa_backward(" not in bwd, bwd
    return saved


def _assert_fused_backward(jf: Any, only_attention: bool = True) -> None:
    """The backward calls `sdpa_backward` or `sdpa_backward_cpu`; with ``only_attention``
    (a function that is just the attention) it recomputes no probabilities: no softmax,
    no matmul."""
    src = _backward_source(jf)
    assert _saves_statistics(jf) or "tir.sdpa_backward(" in src
    assert "softmax" not in src, src
    if only_attention:
        assert "matmul" not in src, src


# --------------------------------------------------------------------------- jit vs eager


def test_plain_attention() -> None:
    """On CPU the forward keeps the log-sum-exp (its output is a program output here)."""
    jf = _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), *_qkv())
    _assert_fused_backward(jf)
    assert _saves_statistics(jf)


def test_inference_calls_torch_attention() -> None:
    q, k, v = (t.detach() for t in _qkv())
    jf = thunder_ir.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    close(jf(q, k, v), F.scaled_dot_product_attention(q, k, v))
    assert "torch.nn.functional.scaled_dot_product_attention(" in str(
        thunder_ir.last_traces(jf)[-1])


def test_which_cases_save_the_statistics() -> None:
    """CPU flash cases keep the log-sum-exp; a mask gradient, GQA head repetition and
    unbatched inputs recompute it in `sdpa_backward`."""
    mask = torch.rand(L, S) > 0.5
    saving = {
        "causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                   _qkv()),
        "bool mask": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v,
                                                                         attn_mask=m),
                      (*_qkv(), mask)),
    }
    recomputing = {
        "mask grad": (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v,
                                                                         attn_mask=m),
                      (*_qkv(), torch.randn(L, S, requires_grad=True))),
        "gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                _qkv(heads_kv=2)),
        "unbatched": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                      _qkv(batched=False)),
    }
    for name, (fn, args) in {**saving, **recomputing}.items():
        jf = _check(fn, *args)
        assert _saves_statistics(jf) == (name in saving), name


def test_saved_statistics_functions_match_eager() -> None:
    q, k, v = (t.detach() for t in _qkv())
    mask = torch.rand(B, 1, L, S) > 0.3
    out, lse = sdpa_forward_cpu(q, k, v, mask, is_causal=False, scale=0.5)
    close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5))
    assert lse.shape == (B, H, L)
    go = torch.randn_like(out)
    got = sdpa_backward_cpu(go, q, k, v, out, lse, mask, scale=0.5)
    for g, w in zip(got, _reference_grads(go, q, k, v, mask, scale=0.5), strict=True):
        close(g, w)


def test_saves_statistics_reads_types() -> None:
    p = Program("f", [tensor_type((B, H, L, E), torch.float32, "cpu")] * 3)
    q, k, v = p.args
    assert saves_statistics(q, k, v, None, True, None)
    m = Program("g", [tensor_type((B, H, L, E), torch.float32, "meta")] * 3)
    assert not saves_statistics(*m.args, None, True, None)


def test_causal_with_scale() -> None:
    jf = _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                scale=0.3), *_qkv())
    src = _backward_source(jf)
    _assert_fused_backward(jf)
    assert "is_causal=True" in src and "scale=0.3" in src


def test_boolean_mask() -> None:
    mask = torch.rand(B, 1, L, S) > 0.3
    mask[0, 0, 1] = False  # a fully masked row: zero output and gradients, as eager
    jf = _check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                *_qkv(), mask)
    _assert_fused_backward(jf)
    assert "mask_grad" not in _backward_source(jf)  # a bool mask has no gradient


def test_float_mask_built_from_a_bool_input_needs_no_gradient() -> None:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor
           ) -> torch.Tensor:
        bias = (keep.to(q.dtype) - 1.0) * 1e4
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    jf = _check(fn, *_qkv(), torch.rand(L, S) > 0.2)
    _assert_fused_backward(jf)
    assert "mask_grad" not in _backward_source(jf)


def test_float_mask_requiring_grad_gets_its_gradient() -> None:
    """On CPU eager runs its math kernel for a mask that requires grad: in float32 the
    executor leaves the op to the table's rule, whose forward is that kernel's steps and
    whose backward reads the saved probabilities (bfloat16, where `sdpa_backward` gives the
    mask's gradient itself, is in test_eager_semantics)."""
    mask = torch.randn(L, S, requires_grad=True)
    jf = _check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                *_qkv(), mask)
    assert "torch._safe_softmax(" in str(thunder_ir.last_traces(jf)[-1])
    bwd = _backward_source(jf)
    assert "sdpa_backward" not in bwd and "softmax(" not in bwd.replace("softmax_backward(", "")


def test_float_mask_that_requires_no_grad_keeps_the_fused_kernels() -> None:
    """A float mask passed as an input that does not require grad asks for no gradient
    (autodiff knows it is inactive): the forward keeps the log-sum-exp, as with no mask."""
    jf = _check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                *_qkv(), torch.randn(L, S))
    _assert_fused_backward(jf)
    assert _saves_statistics(jf) and "mask_grad" not in _backward_source(jf)


def test_grouped_query_attention() -> None:
    jf = _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True,
                                                                is_causal=True),
                *_qkv(heads_kv=2))
    _assert_fused_backward(jf)
    assert "enable_gqa=True" in _backward_source(jf)


def test_unbatched_inputs() -> None:
    """3-D inputs: eager's selector picks its math kernel, so the forward is that kernel's
    steps (eager's values exactly) and the backward reads the saved probabilities."""
    q, k, v = _qkv(batched=False)
    jf = _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    assert torch.equal(jf(q, k, v), F.scaled_dot_product_attention(q, k, v))
    assert "torch._safe_softmax(" in str(thunder_ir.last_traces(jf)[-1])
    assert "sdpa_backward" not in _backward_source(jf)


def test_broadcast_key_value_heads_are_eagers_math_kernel() -> None:
    """Multi-query attention written as broadcasting (one key/value head, no
    ``enable_gqa``: Falcon): eager runs its math kernel, and so does the jitted forward,
    step for step; the key/value gradients are summed over the broadcast heads."""
    q, k, v = _qkv(heads_kv=1)
    jf = _check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                q, k, v)
    assert torch.equal(jf(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert "sdpa_backward" not in _backward_source(jf)


def test_attention_inside_a_block() -> None:
    """Attention between projections: gradients reach the weights through the backward."""
    proj = torch.nn.Linear(E, 3 * E)

    def fn(x: torch.Tensor) -> torch.Tensor:
        q, k, v = proj(x).view(B, L, 3, 2, E // 2).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1)

    x = torch.randn(B, L, E, requires_grad=True)
    jf = _check(fn, x)
    _assert_fused_backward(jf, only_attention=False)  # the projection's matmuls stay


def test_default_executors_use_the_fused_backward() -> None:
    q, k, v = _qkv()
    jf = thunder_ir.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    jf(q, k, v).sum().backward()
    _assert_fused_backward(jf)


# --------------------------------------------------------------------------- paths


def _reference_grads(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: torch.Tensor | None = None, **kw: Any) -> tuple[torch.Tensor, ...]:
    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    m = mask
    if mask is not None and mask.is_floating_point():
        m = mask.detach().requires_grad_()
        inputs.append(m)
    out = F.scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], attn_mask=m, **kw)
    return torch.autograd.grad(out, inputs, go)


def test_paths_on_cpu() -> None:
    q, k, v = (t.detach() for t in _qkv())
    assert sdpa_backward_path(q, k, v) == "flash_cpu"
    assert sdpa_backward_path(q, k, v, torch.randn(L, S), is_causal=True) == "flash_cpu"
    assert sdpa_backward_path(q, k, v, torch.rand(L, S) > 0.5) == "flash_cpu"
    # The CPU flash backward gives no mask gradient: the math kernel does.
    assert sdpa_backward_path(q, k, v, torch.randn(L, S), mask_grad=True) == "math"
    # Unequal head dims: no fused kernel.
    assert sdpa_backward_path(q, k, torch.randn(B, H, S, 6)) == "math"
    assert set(PATHS) == {"flash_cpu", "flash_cuda", "efficient_cuda", "math"}


@pytest.mark.parametrize("mask_grad", [False, True])
def test_sdpa_backward_matches_autograd(mask_grad: bool) -> None:
    q, k, v = (t.detach() for t in _qkv())
    mask = torch.randn(B, 1, L, S)
    go = torch.randn(B, H, L, E)
    got = sdpa_backward(go, q, k, v, mask, scale=0.2, mask_grad=mask_grad)
    want = _reference_grads(go, q, k, v, mask, scale=0.2)
    assert len(got) == (4 if mask_grad else 3)
    for g, w in zip(got, want[:len(got)], strict=True):
        close(g, w)


def test_math_fallback_matches_autograd() -> None:
    q, k = (t.detach() for t in _qkv()[:2])
    v = torch.randn(B, H, S, 6)
    go = torch.randn(B, H, L, 6)
    assert sdpa_backward_path(q, k, v, is_causal=True) == "math"
    for g, w in zip(sdpa_backward(go, q, k, v, is_causal=True),
                    _reference_grads(go, q, k, v, is_causal=True), strict=True):
        close(g, w)


def test_may_need_grad() -> None:
    f32 = tensor_type((L, S), torch.float32)
    p = Program("f", [f32, tensor_type((L, S), torch.bool)], ["m", "keep"])
    lt = p.emitter.ns(ltorch.OPS)
    m, keep = p.args
    assert may_need_grad(m)  # a float input may require grad
    assert not may_need_grad(keep)
    assert not may_need_grad(lt.to_dtype(keep, dtype=torch.float32))
    assert not may_need_grad(lt.ones(size=(L, S), dtype=torch.float32, device="cpu"))
    assert may_need_grad(lt.mul(lt.to_dtype(keep, dtype=torch.float32), m))


# --------------------------------------------------------------------------- registration


def test_registered_by_default_ahead_of_torch() -> None:
    ex = get_executor("sdpa")
    assert isinstance(ex, SdpaExecutor) and ex.is_available()
    names = [e.name for e in get_default_executors()]
    assert "sdpa" in names and names.index("sdpa") < names.index("torch")


# --------------------------------------------------------------------------- CUDA


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="the flash and memory-efficient CUDA kernels need a "
                                       "CUDA device; this machine has none")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("masked", [False, True])
def test_cuda_fused_backward_matches_autograd(dtype: torch.dtype, masked: bool) -> None:
    dev = "cuda"
    q = torch.randn(B, H, 64, 64, device=dev, dtype=dtype)
    k = torch.randn(B, 2, 80, 64, device=dev, dtype=dtype)
    v = torch.randn(B, 2, 80, 64, device=dev, dtype=dtype)
    go = torch.randn(B, H, 64, 64, device=dev, dtype=dtype)
    mask = torch.randn(64, 80, device=dev, dtype=dtype) if masked else None
    path = sdpa_backward_path(q, k, v, mask, enable_gqa=True, mask_grad=masked)
    assert path == ("efficient_cuda" if masked else "flash_cuda")
    got = sdpa_backward(go, q, k, v, mask, enable_gqa=True, mask_grad=masked)
    want = _reference_grads(go, q, k, v, mask, enable_gqa=True)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2)
