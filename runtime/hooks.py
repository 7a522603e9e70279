"""Backward hooks at run time: ``tensor.register_hook`` and modules' full backward hooks.

A traced program cannot inline a user's hook: hooks have effects (they log, collect
statistics, count calls) and must run on every backward with real gradients, as eager
runs them. The tracer records each hook point as an ``autograd.function`` whose forward is
the identity and whose backward is a ``torch.call`` to one of the functions below; the
call names the hook's state by a key into `_STATE` (the hooks, the original module, the
argument layout), registered at trace time and kept as long as the process runs.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

_STATE: dict[int, Any] = {}
_KEYS = itertools.count()


def keep(state: Any) -> int:
    """Registers a hook's state for the program's calls; returns its key."""
    key = next(_KEYS)
    _STATE[key] = state
    return key


def _conform(name: str, grad: torch.Tensor, new: Any) -> torch.Tensor:
    """A hook's replacement gradient, checked as autograd checks it."""
    if new is None:
        return grad
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"{name} returned {type(new).__name__}; expected a tensor or None")
    if new.shape != grad.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")
    return new


def _replaced(name: str, grad: torch.Tensor, new: Any) -> torch.Tensor:
    """An entry of a module hook's result: ``None`` drops the gradient (zeros here, where
    eager passes ``None`` on)."""
    return torch.zeros_like(grad) if new is None else _conform(name, grad, new)


def run_tensor_hook(grad: torch.Tensor, *, key: int) -> torch.Tensor:
    """The gradient of a tensor that ``register_hook(fn)`` was called on, through ``fn``."""
    fn = _STATE[key]
    return _conform(getattr(fn, "__name__", "hook"), grad, fn(grad))


@dataclass
class ModuleHooks:
    """One traced call of a module with full backward hooks (torch's ``BackwardHook``).

    ``inputs``/``outputs``: the positions, among the call's arguments and results, of the
    tensors that get gradients (``inputs`` None: no input requires grad, and the hooks
    fire when the output gradients arrive, as eager's do)."""

    module: torch.nn.Module
    hooks: list[Any]
    pre_hooks: list[Any]
    n_inputs: int = 0
    inputs: list[int] | None = None
    n_outputs: int = 0
    outputs: list[int] = field(default_factory=list)
    grad_outputs: tuple[Any, ...] | None = None


def _pack(positions: Sequence[int], values: Sequence[Any], size: int) -> tuple[Any, ...]:
    out: list[Any] = [None] * size
    for i, v in zip(positions, values, strict=True):
        out[i] = v
    return tuple(out)


def _chain(what: str, kind: str, hooks: Sequence[Any], grads: tuple[Any, ...],
           call: Callable[[Any, tuple[Any, ...]], Any]) -> tuple[Any, ...]:
    """Each hook in turn may replace the tuple of gradients (eager's length check)."""
    for hook in hooks:
        new = call(hook, grads)
        if new is None:
            continue
        if len(new) != len(grads):
            raise RuntimeError(f"{what} returned an invalid number of {kind}, got {len(new)}, "
                               f"but expected {len(grads)}")
        grads = tuple(new)
    return grads


def run_output_hooks(*grads: torch.Tensor, key: int) -> tuple[torch.Tensor, ...]:
    """The module's output gradients arrive: backward pre-hooks may replace them; with no
    input requiring grad, the full backward hooks fire now (with ``None`` input grads)."""
    st: ModuleHooks = _STATE[key]
    grad_outputs = _chain("Backward pre hook", "grad_output", st.pre_hooks,
                          _pack(st.outputs, grads, st.n_outputs),
                          lambda hook, g: hook(st.module, g))
    st.grad_outputs = grad_outputs
    if st.inputs is None:
        warnings.warn("Full backward hook is firing when gradients are computed with respect "
                      "to module outputs since no inputs require gradients.", stacklevel=2)
        nones = (None,) * st.n_inputs
        for hook in st.hooks:
            res = hook(st.module, nones, grad_outputs)
            if res is not None and not (isinstance(res, tuple) and all(r is None for r in res)):
                raise RuntimeError("Backward hook for Modules where no input requires gradient "
                                   "should always return None or None for all gradients.")
        st.grad_outputs = None
    return tuple(_replaced("backward pre hook", g, grad_outputs[i])
                 for i, g in zip(st.outputs, grads))


def run_input_hooks(*grads: torch.Tensor, key: int) -> tuple[torch.Tensor, ...]:
    """The module's input gradients arrive: the full backward hooks see them with the
    output gradients, and may replace them."""
    st: ModuleHooks = _STATE[key]
    assert st.inputs is not None
    grad_outputs = st.grad_outputs
    if grad_outputs is None:  # the gradient reached the inputs without the outputs
        return grads
    grad_inputs = _chain("Backward hook", "grad_input", st.hooks,
                         _pack(st.inputs, grads, st.n_inputs),
                         lambda hook, g: hook(st.module, g, grad_outputs))
    st.grad_outputs = None
    return tuple(_replaced("backward hook", g, grad_inputs[i])
                 for i, g in zip(st.inputs, grads))


__all__ = ["ModuleHooks", "keep", "run_input_hooks", "run_output_hooks", "run_tensor_hook"]
