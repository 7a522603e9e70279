"""Global modes against eager: every cache keyed by what changes its answer.

The matrix (``tests/mode_matrix.py``) runs the layout and aliasing cases, fuzzed programs
and an OpInfo sample under ``no_grad``, ``inference_mode``, bf16 autocast and grad mode,
in several orders, each in a fresh process (a process-wide cache is wrong only after a
first call under another mode). The tests below it are the findings, written as a user
writes them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import thunder_ir
from thunder_ir.testing_eager import check_against_eager

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from mode_matrix import ORDERS  # noqa: E402


@pytest.mark.parametrize("order", ORDERS)
def test_the_mode_matrix_in_a_fresh_process(order: str) -> None:
    run = subprocess.run([sys.executable, str(HERE / "mode_matrix.py"), order],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-4000:]
    assert run.stdout.strip().endswith("0 failure(s)"), run.stdout[-4000:]


_INFERENCE_FIRST = textwrap.dedent("""
    import torch, thunder_ir

    def f(t, v):
        t[:1].add_(v)                      # a write through a view
        return v * 1

    with torch.inference_mode():
        a = torch.zeros(2, 3)
        thunder_ir.jit(f)(a, torch.ones(1, 3))
    b = torch.zeros(2, 3)
    thunder_ir.jit(f)(b, torch.ones(1, 3))  # grad mode, a new jit
    print(a[0].tolist(), b[0].tolist())
""")


def test_a_write_through_a_view_under_inference_mode_first_in_the_process() -> None:
    """The issue's example: the first call of the process runs under inference mode. The
    view probe there saw no ``_base`` and cached "not a view" for every later call."""
    run = subprocess.run([sys.executable, "-c", _INFERENCE_FIRST], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.split("\n")[-2] == "[1.0, 1.0, 1.0] [1.0, 1.0, 1.0]", run.stdout


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_views_made_under_no_grad_require_grad_as_eager(mode: type) -> None:
    """A view of a leaf that requires grad made under no_grad (or inference mode) requires
    grad in eager; a detached alias does not."""
    x = torch.randn(4, 4, requires_grad=True)
    cases = [lambda x: x.t(), lambda x: x.H, lambda x: torch.split(x, [1, 3]),
             lambda x: x.unbind(0), lambda x: x.narrow(0, 0, 2), lambda x: x.view(-1),
             lambda x: x.detach().t(), lambda x: x.t().detach(), lambda x: x.data.view(-1),
             lambda x: x[1:].detach()[0], lambda x: (x * 2).t()]
    for fn in cases:
        with mode():
            e, j = fn(x), thunder_ir.jit(fn)(x)
        e = list(e) if isinstance(e, tuple | list) else [e]
        j = list(j) if isinstance(j, tuple | list) else [j]
        assert [(o.requires_grad, o.is_leaf, type(o)) for o in j] == \
            [(o.requires_grad, o.is_leaf, type(o)) for o in e]
        for a, b in zip(j, e, strict=True):
            assert torch.equal(a, b)


def test_one_callable_under_each_mode_in_turn() -> None:
    """One jitted callable called under inference mode, no_grad, autocast and grad mode:
    the cache key holds each (a program of one mode never runs under another)."""
    lin = torch.nn.Linear(4, 3)

    def f(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        buf[1:].mul_(2)
        return lin(x).relu() + buf[:1]

    jf = thunder_ir.jit(f)
    for mode in (torch.inference_mode, torch.no_grad,
                 lambda: torch.autocast("cpu", dtype=torch.bfloat16), torch.enable_grad):
        x = torch.randn(2, 4)
        be, bj = torch.ones(3, 3), torch.ones(3, 3)
        with mode():
            e, j = f(x, be), jf(x, bj)
        assert j.dtype == e.dtype and j.requires_grad == e.requires_grad
        assert j.is_inference() == e.is_inference()
        torch.testing.assert_close(j, e, rtol=1.6e-2, atol=1e-2)
        assert torch.equal(bj, be)


def test_deterministic_algorithms_and_the_default_device_are_in_the_key() -> None:
    jf = thunder_ir.jit(lambda x: x + torch.ones(3))
    x = torch.randn(3)
    jf(x)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        jf(x)
    finally:
        torch.use_deterministic_algorithms(was)
    with torch.device("cpu"):
        torch.testing.assert_close(jf(x), x + 1)
    assert thunder_ir.cache_misses(jf) == 3


def test_default_dtype_and_autocast_change_a_probe_as_eager() -> None:
    """An integer tensor times a Python float follows the default dtype, under autocast
    too: the autocast probe's cache holds the default dtype."""
    def f(n: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return (n * 0.5) @ x

    n, x = torch.arange(6).reshape(2, 3), torch.randn(3, 2, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        was = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                check_against_eager(f, n, x.to(dtype), backward=False, rtol=1.6e-2,
                                    atol=1e-2)
        finally:
            torch.set_default_dtype(was)


class _KVCachedGPT(torch.nn.Module):
    """LitGPT's shape of decoding: one attention layer whose key/value cache buffers are
    written in place through a view (``k[:b].index_copy_``) at the input positions,
    driven by a generation loop under ``torch.inference_mode()``."""

    def __init__(self, vocab: int = 32, dim: int = 16, heads: int = 2, max_len: int = 24):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.emb = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.head = torch.nn.Linear(dim, vocab)
        shape = (1, heads, max_len, dim // heads)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("mask", torch.ones(max_len, max_len).tril().bool(),
                             persistent=False)

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        q, k, v = self.qkv(self.emb(idx)).split(self.dim, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        k = self.k_cache[:b, ...].index_copy_(2, input_pos, k)  # (through a view, as LitGPT)
        v = self.v_cache[:b, ...].index_copy_(2, input_pos, v)
        mask = self.mask.index_select(0, input_pos)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None])
        return self.head(y.transpose(1, 2).reshape(b, t, self.dim))


def _generate(model: Any, prompt: torch.Tensor, steps: int) -> list[int]:
    tokens = prompt.tolist()[0]
    with torch.inference_mode():
        pos = torch.arange(prompt.shape[1])
        logits = model(prompt, pos)
        for _ in range(steps):
            nxt = int(logits[0, -1].argmax())
            tokens.append(nxt)
            pos = torch.tensor([len(tokens) - 1])
            logits = model(torch.tensor([[nxt]]), pos)
    return tokens


def test_kv_cached_generation_under_inference_mode_gives_eagers_tokens() -> None:
    """The issue's LitGPT finding: under ``inference_mode`` the jitted model's KV cache was
    never written, and tokens diverged from the third on. Every token and both caches are
    eager's; a second generation (cached programs) too."""
    torch.manual_seed(0)
    eager = _KVCachedGPT()
    jitted = _KVCachedGPT()
    jitted.load_state_dict(eager.state_dict())
    jm = thunder_ir.jit(jitted)
    prompt = torch.tensor([[3, 7, 1, 4]])
    for _ in range(2):
        for m in (eager, jitted):
            m.k_cache.zero_()
            m.v_cache.zero_()
        assert _generate(jm, prompt, 12) == _generate(eager, prompt, 12)
        for name in ("k_cache", "v_cache", "mask"):  # real tensors, eager's layout
            j, e = getattr(jitted, name), getattr(eager, name)
            assert type(j) is torch.Tensor and j.stride() == e.stride()
            assert torch.equal(j, e) if name == "mask" else torch.allclose(j, e, atol=1e-6)
