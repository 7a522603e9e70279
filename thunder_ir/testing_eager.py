"""Differential checks of ``thunder_ir.jit`` against eager PyTorch.

``check_against_eager(fn, *args, **kwargs)`` runs ``fn`` eagerly and through
``thunder_ir.jit`` on separate copies of the same inputs, with torch's generator at the
same seed, and asserts what eager semantics promise:

* the same output structure; each tensor output with eager's shape, dtype,
  ``requires_grad`` and values (exact for integer and bool results and for random draws
  compared under ``exact=True``; within a dtype's tolerance otherwise);
* the inputs after the call equal (in-place writes reach the caller's tensors);
* the generator advanced alike (the same random numbers were drawn);
* after a backward with the same cotangents, every input's (and parameter's) gradient
  equal, ``None`` where eager's is ``None``;
* where eager raises, the jitted call raises too (eager's own error, or a thunder_ir
  error that names the user's line).

It is what the regression tests, the OpInfo sweep and the differential fuzzer share.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

import thunder_ir

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5), torch.complex128: (1e-7, 1e-7),
}
"""Default ``(rtol, atol)`` per dtype (torch.testing's, or tighter)."""


@dataclass
class EagerComparison:
    """What `check_against_eager` ran: the outputs, and the gradients when it ran a backward."""

    eager: Any
    jitted: Any
    eager_grads: list[torch.Tensor | None]
    jitted_grads: list[torch.Tensor | None]


def _copy_inputs(value: Any) -> Any:
    """A copy of the call's inputs: each tensor a fresh leaf with the same requires_grad."""
    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            return c.requires_grad_(x.requires_grad) if x.is_leaf else c
        return x

    return pytree.tree_map(one, value)


def _leaves(value: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def _close(name: str, got: torch.Tensor, want: torch.Tensor, exact: bool,
           rtol: float | None, atol: float | None) -> None:
    assert isinstance(got, torch.Tensor), f"{name}: got {type(got).__name__}, eager a tensor"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != eager {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != eager {want.dtype}"
    g, w = got.detach(), want.detach()
    if exact or not (w.dtype.is_floating_point or w.dtype.is_complex):
        assert torch.equal(g, w) or bool(((g == w) | (g.isnan() & w.isnan())).all()), (
            f"{name}: values differ from eager\n{g}\n{w}")
        return
    r, a = TOLERANCES.get(w.dtype, (1e-5, 1e-8))
    torch.testing.assert_close(g, w, rtol=rtol if rtol is not None else r,
                               atol=atol if atol is not None else a, equal_nan=True,
                               msg=lambda m: f"{name}: {m}")


def _compare(name: str, got: Any, want: Any, exact: bool, rtol: float | None,
             atol: float | None) -> None:
    g_leaves, g_spec = pytree.tree_flatten(got)
    w_leaves, w_spec = pytree.tree_flatten(want)
    assert type(got) is type(want), f"{name}: {type(got).__name__} != eager {type(want).__name__}"
    assert len(g_leaves) == len(w_leaves) and g_spec == w_spec, (
        f"{name}: structure {g_spec} != eager {w_spec}")
    for i, (g, w) in enumerate(zip(g_leaves, w_leaves, strict=True)):
        if isinstance(w, torch.Tensor):
            _close(f"{name}[{i}]", g, w, exact, rtol, atol)
            assert g.requires_grad == w.requires_grad, (
                f"{name}[{i}]: requires_grad {g.requires_grad} != eager {w.requires_grad}")
        elif isinstance(w, float) and w != w:
            assert isinstance(g, float) and g != g, f"{name}[{i}]: {g!r} != eager nan"
        else:
            assert g == w, f"{name}[{i}]: {g!r} != eager {w!r}"


@contextlib.contextmanager
def pytest_raises(kind: type[BaseException]) -> Iterator[None]:
    """Asserts that the block raises ``kind`` (without depending on pytest)."""
    try:
        yield
    except kind:
        return
    raise AssertionError(f"eager raises {kind.__name__} here; the jitted program did not")


def _run(fn: Callable[..., Any], args: Any, kwargs: Any, seed: int
         ) -> tuple[Any, BaseException | None, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # compared below: eager's errors must be raised too
            return None, e, torch.random.get_rng_state()
        return out, None, torch.random.get_rng_state()


def check_against_eager(fn: Callable[..., Any] | torch.nn.Module, *args: Any, seed: int = 0,
                        backward: bool = True, exact: bool = False,
                        rtol: float | None = None, atol: float | None = None,
                        jit: Callable[..., Any] | None = None, **kwargs: Any
                        ) -> EagerComparison:
    """Asserts that ``thunder_ir.jit(fn)(*args, **kwargs)`` behaves as eager (module doc).

    Args:
        fn: a function or an ``nn.Module`` (each side gets its own deep copy).
        args, kwargs: the call's arguments (each side gets its own copy of every tensor).
        seed: torch's generator seed before each side's call.
        backward: also compare gradients after a backward with the same cotangents.
        exact: compare floating-point values exactly (random draws, pure data movement).
        rtol, atol: override the per-dtype tolerances.
        jit: how to compile (default ``thunder_ir.jit``).

    Returns:
        The outputs and gradients, for further checks.
    """
    is_module = isinstance(fn, torch.nn.Module)
    eager_fn: Any = copy.deepcopy(fn) if is_module else fn
    jit_target: Any = copy.deepcopy(fn) if is_module else fn
    jitted_fn = (jit or thunder_ir.jit)(jit_target)
    e_in = _copy_inputs((args, kwargs))
    j_in = _copy_inputs((args, kwargs))
    e_out, e_err, e_rng = _run(eager_fn, e_in[0], e_in[1], seed)
    j_out, j_err, j_rng = _run(jitted_fn, j_in[0], j_in[1], seed)
    if e_err is not None:
        assert j_err is not None, (f"eager raises {type(e_err).__name__}: {e_err}; "
                                   "the jitted call returned")
        assert isinstance(j_err, type(e_err) | thunder_ir.ThunderTraceError), (
            f"eager raises {type(e_err).__name__}: {e_err}; jitted raises "
            f"{type(j_err).__name__}: {j_err}")
        return EagerComparison(None, None, [], [])
    if j_err is not None:
        raise AssertionError(f"eager returns, the jitted call raises {type(j_err).__name__}: "
                             f"{j_err}") from j_err
    _compare("output", j_out, e_out, exact, rtol, atol)
    _compare("inputs after the call", j_in, e_in, exact, rtol, atol)
    assert torch.equal(e_rng, j_rng), "the jitted call drew other random numbers than eager"
    if not backward:
        return EagerComparison(e_out, j_out, [], [])
    e_outs = [o for o in _leaves(e_out) if o.requires_grad]
    j_outs = [o for o in _leaves(j_out) if o.requires_grad]
    if not e_outs:
        return EagerComparison(e_out, j_out, [], [])
    gen = torch.Generator().manual_seed(seed + 1)
    cts = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype)
           if not o.dtype.is_complex else
           torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in e_outs]
    try:
        torch.autograd.backward(e_outs, cts)
    except RuntimeError as e:  # eager cannot differentiate this: neither may we
        with pytest_raises(type(e)):
            torch.autograd.backward(j_outs, [c.clone() for c in cts])
        return EagerComparison(e_out, j_out, [], [])
    torch.autograd.backward(j_outs, [c.clone() for c in cts])
    e_leaves = [t for t in _leaves(e_in) if t.requires_grad]
    j_leaves = [t for t in _leaves(j_in) if t.requires_grad]
    if is_module:
        e_leaves += list(eager_fn.parameters())
        j_leaves += list(jit_target.parameters())
    e_grads = [t.grad for t in e_leaves]
    j_grads = [t.grad for t in j_leaves]
    for i, (g, w) in enumerate(zip(j_grads, e_grads, strict=True)):
        assert (g is None) == (w is None), (
            f"gradient {i}: {'None' if g is None else 'a tensor'}, eager "
            f"{'None' if w is None else 'a tensor'}")
        if w is not None:
            _close(f"gradient {i}", g, w, exact, rtol, atol)  # type: ignore[arg-type]
    return EagerComparison(e_out, j_out, e_grads, j_grads)


__all__ = ["EagerComparison", "TOLERANCES", "check_against_eager"]
