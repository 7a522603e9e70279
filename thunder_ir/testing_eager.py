"""Differential checks of ``thunder_ir.jit`` against eager PyTorch.

``check_against_eager(fn, *args, **kwargs)`` runs ``fn`` eagerly and through
``thunder_ir.jit`` on separate copies of the same inputs, with torch's generator at the
same seed, and asserts what eager semantics promise:

* the same output structure; each tensor output with eager's shape, dtype,
  ``requires_grad``, strides (where eager's result is dense; dims of size 1 aside) and
  values (exact for integer and bool results and for random draws compared under
  ``exact=True``; within a dtype's tolerance otherwise);
* the inputs after the call equal (in-place writes reach the caller's tensors);
* the generator advanced alike (the same random numbers were drawn);
* after a backward with the same cotangents, every input's (and parameter's) gradient
  equal, ``None`` where eager's is ``None``, laid out as eager's;

Each side gets its own copy of the inputs with their layouts (strides, storage offsets)
and aliasing kept: arguments that are views of one tensor are views of one copy.
* floating-point values within the dtype's tolerance of eager's, or else no further from a
  float64 run of the same code than eager's own are (a sum that eager rounds one way and
  a fused kernel another is not a mismatch; a wrong value is);
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
from thunder_ir.runtime.pystate import blank, plain_object

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
    """A copy of the call's inputs: each tensor a fresh leaf with the same requires_grad,
    the same layout (strides and storage offset) and the same aliasing (tensors that share
    a storage share its copy)."""
    storages: dict[int, Any] = {}

    def one(x: Any) -> Any:
        if plain_object(x):  # an argument object: a copy, its tensors copied too
            c = blank(type(x))
            c.__dict__.update((k, pytree.tree_map(one, v)) for k, v in vars(x).items())
            return c
        if not isinstance(x, torch.Tensor):
            return x
        d = x.detach()
        if d.layout != torch.strided or d.device.type == "meta":
            c = d.clone()
        else:
            s = d.untyped_storage()
            copy_ = storages.get(s.data_ptr()) if s.data_ptr() else None
            if copy_ is None:
                copy_ = s.clone()
                if s.data_ptr():
                    storages[s.data_ptr()] = copy_
            with torch.no_grad():
                c = torch.empty(0, dtype=d.dtype, device=d.device).set_(
                    copy_, d.storage_offset(), d.shape, d.stride())
        return c.requires_grad_(x.requires_grad) if x.is_leaf else c

    return pytree.tree_map(one, value)


def _same_strides(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` is laid out as eager's ``want`` (up to the strides of size-1 dims), where
    eager's is dense (a layout a result of eager's own kernels has)."""
    from thunder_ir.runtime.layout import is_dense, significant

    if want.layout != torch.strided or got.layout != torch.strided:
        return
    if not is_dense(want.shape, want.stride()):
        return
    assert significant(got.shape, got.stride()) == significant(want.shape, want.stride()), (
        f"{name}: strides {got.stride()} != eager {want.stride()}")


def _leaves(value: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def _close(name: str, got: torch.Tensor, want: torch.Tensor, exact: bool | None,
           rtol: float | None, atol: float | None,
           ref: Callable[[], torch.Tensor | None] | None = None) -> None:
    """``got`` equals eager's ``want``: within the dtype's tolerance, or, failing that, its
    largest error against a float64 reference run (``ref``) is no larger than eager's plus
    that tolerance relative to the tensor's magnitude (the rule of PyTorch's
    decomposition tests: a kernel of our own may round differently from eager's, but not
    worse)."""
    assert isinstance(got, torch.Tensor), f"{name}: got {type(got).__name__}, eager a tensor"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != eager {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != eager {want.dtype}"
    g, w = got.detach(), want.detach()
    if exact is None:  # values unspecified (torch.empty): shape and dtype only
        return
    if w.dtype.itemsize == 1 and w.dtype.is_floating_point:  # float8: eager's own kernels
        g, w, exact = g.float(), w.float(), True
    if exact or not (w.dtype.is_floating_point or w.dtype.is_complex):
        assert torch.equal(g, w) or bool(((g == w) | (g.isnan() & w.isnan())).all()), (
            f"{name}: values differ from eager\n{g}\n{w}")
        return
    r, a = TOLERANCES.get(w.dtype, (1e-5, 1e-8))
    r, a = (rtol if rtol is not None else r), (atol if atol is not None else a)
    try:
        torch.testing.assert_close(g, w, rtol=r, atol=a, equal_nan=True,
                                   msg=lambda m: f"{name}: {m}")
    except AssertionError:
        r64 = ref() if ref is not None else None
        if r64 is None or r64.shape != w.shape:
            raise
        g64, w64, ref64 = (t.to(torch.complex128 if t.is_complex() else torch.float64)
                           for t in (g, w, r64.detach()))
        assert bool((g64.isnan() == w64.isnan()).all()), f"{name}: NaNs differ from eager"
        fin = ref64.isfinite() & g64.isfinite() & w64.isfinite()
        assert bool(((g64 == w64) | fin | ref64.isnan()).all()), f"{name}: infinities differ"
        if not bool(fin.any()):
            return
        ours, theirs = (g64 - ref64).abs()[fin].max(), (w64 - ref64).abs()[fin].max()
        scale = ref64.abs()[fin].max()  # the tensor's magnitude
        if not bool(ours <= theirs + a + r * scale):
            raise


def _compare(name: str, got: Any, want: Any, exact: bool | None, rtol: float | None,
             atol: float | None, refs: Callable[[], list[Any] | None] | None = None) -> None:
    g_leaves, g_spec = pytree.tree_flatten(got)
    w_leaves, w_spec = pytree.tree_flatten(want)
    assert type(got) is type(want), f"{name}: {type(got).__name__} != eager {type(want).__name__}"
    assert len(g_leaves) == len(w_leaves) and g_spec == w_spec, (
        f"{name}: structure {g_spec} != eager {w_spec}")
    for i, (g, w) in enumerate(zip(g_leaves, w_leaves, strict=True)):
        if isinstance(w, torch.Tensor):
            _close(f"{name}[{i}]", g, w, exact, rtol, atol, _nth(refs, i))
            _same_strides(f"{name}[{i}]", g, w)
            assert g.requires_grad == w.requires_grad, (
                f"{name}[{i}]: requires_grad {g.requires_grad} != eager {w.requires_grad}")
        elif isinstance(w, float) and w != w:
            assert isinstance(g, float) and g != g, f"{name}[{i}]: {g!r} != eager nan"
        elif plain_object(w) and g is not w:  # an argument object: its fields, as eager's
            assert type(g) is type(w), f"{name}[{i}]: {type(g).__name__} != eager's"
            assert list(vars(g)) == list(vars(w)), (
                f"{name}[{i}]: fields {list(vars(g))} != eager {list(vars(w))}")
            _compare(f"{name}[{i}]", list(vars(g).values()), list(vars(w).values()), exact,
                     rtol, atol)
        else:
            assert g == w, f"{name}[{i}]: {g!r} != eager {w!r}"


def _nth(refs: Callable[[], list[Any] | None] | None, i: int
         ) -> Callable[[], torch.Tensor | None] | None:
    if refs is None:
        return None

    def one() -> torch.Tensor | None:
        r = refs()
        return r[i] if r is not None and i < len(r) else None

    return one


def _upcast(value: Any) -> Any:
    """Float64 (complex128) copies of floating-point tensors, as fresh leaves."""
    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            c = x.detach().to(torch.complex128 if x.is_complex() else torch.float64)
            return c.requires_grad_(x.requires_grad)
        return _copy_inputs(x) if isinstance(x, torch.Tensor) else x

    return pytree.tree_map(one, value)


class _Reference64:
    """The eager computation again in float64, run once when a comparison needs it."""

    def __init__(self, fn: Any, inputs: Any, seed: int, is_module: bool) -> None:
        self.fn, self.inputs, self.seed, self.is_module = fn, inputs, seed, is_module
        self._out: Any = None
        self._done = False

    def run(self) -> Any:
        if not self._done:
            self._done = True
            fn = copy.deepcopy(self.fn).double() if self.is_module else self.fn
            self.fn = fn
            self.inputs = _upcast(self.inputs)
            out, err, _ = _run(fn, self.inputs[0], self.inputs[1], self.seed)
            self._out = None if err is not None else out
        return self._out

    def outputs(self) -> list[Any] | None:
        out = self.run()
        return None if out is None else [x for x in pytree.tree_leaves(out)]

    def grads(self, cts: list[torch.Tensor]) -> list[Any] | None:
        out = self.run()
        if out is None:
            return None
        outs = [o for o in _leaves(out) if o.requires_grad]
        if len(outs) != len(cts):
            return None
        try:
            torch.autograd.backward(outs, [c.to(o.dtype) for o, c in zip(outs, cts)])
        except RuntimeError:
            return None
        leaves = [t for t in _leaves(self.inputs) if t.requires_grad]
        if self.is_module:
            leaves += list(self.fn.parameters())
        return [t.grad for t in leaves]


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


def check_against_eager(fn: Callable[..., Any] | torch.nn.Module, *args: Any,
                        kwargs: dict[str, Any] | None = None, seed: int = 0,
                        backward: bool = True, exact: bool | None = False,
                        rtol: float | None = None, atol: float | None = None,
                        jit: Callable[..., Any] | None = None) -> EagerComparison:
    """Asserts that ``thunder_ir.jit(fn)(*args, **kwargs)`` behaves as eager (module doc).

    Args:
        fn: a function or an ``nn.Module`` (each side gets its own deep copy).
        args, kwargs: the call's arguments (each side gets its own copy of every tensor).
        seed: torch's generator seed before each side's call.
        backward: also compare gradients after a backward with the same cotangents.
        exact: compare floating-point outputs exactly (random draws, pure data movement;
            gradients are always compared within tolerance);
            ``None``: compare shapes, dtypes and ``requires_grad`` only (``torch.empty``'s
            values are unspecified).
        rtol, atol: override the per-dtype tolerances.
        jit: how to compile (default ``thunder_ir.jit``).

    Returns:
        The outputs and gradients, for further checks.
    """
    is_module = isinstance(fn, torch.nn.Module)
    eager_fn: Any = copy.deepcopy(fn) if is_module else fn
    jit_target: Any = copy.deepcopy(fn) if is_module else fn
    jitted_fn = (jit or thunder_ir.jit)(jit_target)
    kwargs = kwargs or {}
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
    ref = _Reference64(fn, _copy_inputs((args, kwargs)), seed, is_module)
    _compare("output", j_out, e_out, exact, rtol, atol, ref.outputs)
    _compare("inputs after the call", j_in, e_in, exact, rtol, atol)
    assert torch.equal(e_rng, j_rng), "the jitted call drew other random numbers than eager"
    if not backward:
        return EagerComparison(e_out, j_out, [], [])
    e_outs = [o for o in _leaves(e_out) if o.requires_grad]
    j_outs = [o for o in _leaves(j_out) if o.requires_grad]
    if not e_outs:
        return EagerComparison(e_out, j_out, [], [])
    gen = torch.Generator().manual_seed(seed + 1)
    cts = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device, o.dtype)
           if not o.dtype.is_complex else
           torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in e_outs]
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
    ref_grads: list[Any] = []

    def grads64() -> list[Any] | None:
        if not ref_grads:
            ref_grads.append(ref.grads(cts))
        return ref_grads[0]

    for i, (g, w) in enumerate(zip(j_grads, e_grads, strict=True)):
        assert (g is None) == (w is None), (
            f"gradient {i}: {'None' if g is None else 'a tensor'}, eager "
            f"{'None' if w is None else 'a tensor'}")
        if w is not None:  # computed by a backward of our own: within tolerance
            _close(f"gradient {i}", g, w, False, rtol, atol,  # type: ignore[arg-type]
                   _nth(grads64, i))
            _same_strides(f"gradient {i}", g, w)  # type: ignore[arg-type]
    return EagerComparison(e_out, j_out, e_grads, j_grads)


__all__ = ["EagerComparison", "TOLERANCES", "check_against_eager"]
