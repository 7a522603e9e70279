"""torch's higher-order ops inside traced code: ``torch.cond``, ``map``, ``scan``,
``while_loop``, ``associative_scan``; and ``torch.vmap`` called inside traced code.

In eager, each user-facing function validates its arguments and hands the op to
``torch.compile`` (``_hop_compile_and_call``), whose result is what the op's dense kernel
computes: plain Python over torch ops (``if pred: true_fn(...)``, a loop over the scanned
dimension, ``while cond_fn(...)``). While a trace runs, that hand-off calls the op
directly (`hop_calls_while_traced`), the op reaches the tracer's mode, and its handler
runs that same dense kernel under the trace (`Builder.run_python`): the bodies are
traced, inline, once per iteration, and a condition on a traced tensor (``cond``'s
predicate, ``while_loop``'s) is speculated (`thunder_ir.frontend.speculation`): the
program follows the branch, or the iteration count, of the call it was traced for, and
checks it on every call. Gradients are thunder_ir's own, of the traced computation.

``torch.vmap`` called inside traced code (``associative_scan``'s generic mode wraps its
combine function in it) maps the function over the batch dimension one slice at a time
and stacks the results: eager's values, one traced call per slice.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.context import tracing_now
from thunder_ir.frontend.table import HANDLERS, TRACING_CONTEXTS, traces_python
from thunder_ir.frontend.takeover import swapped_while_traced

HOP_MODULES = {
    "cond": ("torch._higher_order_ops.cond", "cond_op"),
    "map": ("torch._higher_order_ops.map", "map_impl"),
    "scan": ("torch._higher_order_ops.scan", "scan_op"),
    "while_loop": ("torch._higher_order_ops.while_loop", "while_loop_op"),
    "associative_scan": ("torch._higher_order_ops.associative_scan", "associative_scan_op"),
}
"""The higher-order ops traced through their dense kernels: name -> (module, operator)."""


def _hops() -> dict[str, Any]:
    """The operators of `HOP_MODULES` this torch has."""
    out = {}
    for name, (module, attr) in HOP_MODULES.items():
        try:
            out[name] = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    return out


def _dense_handler(op: Any) -> Callable[..., Any]:
    dense = op.py_kernels[torch._C.DispatchKey.CompositeExplicitAutograd]

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        return ctx.run_python(dense, args, kwargs)

    return traces_python(handler)


HOPS = _hops()
for _op in HOPS.values():
    HANDLERS[_op] = _dense_handler(_op)


# --------------------------------------------------------------------------- while tracing

def _call_directly(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(fn: Callable[..., Any], args: Any, kwargs: Any = None) -> Any:
        if not (tracing_now() and torch._C._len_torch_function_stack() > 0):
            return original(fn, args, kwargs)
        return fn(*args, **(kwargs or {}))

    return call


def _vmap_emulated(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
             randomness: str = "error", *, chunk_size: int | None = None) -> Any:
        if not (tracing_now() and torch._C._len_torch_function_stack() > 0):
            return original(func, in_dims, out_dims, randomness, chunk_size=chunk_size)
        return _LoopMap(func, in_dims, out_dims)

    return vmap


class _LoopMap:
    """``vmap(func, in_dims, out_dims)`` inside traced code: ``func`` on each slice of the
    mapped dimension, the results stacked along ``out_dims``."""

    def __init__(self, func: Callable[..., Any], in_dims: Any, out_dims: Any) -> None:
        self.func, self.in_dims, self.out_dims = func, in_dims, out_dims

    def __call__(self, *args: Any) -> Any:
        dims = self.in_dims if isinstance(self.in_dims, tuple) else (self.in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(args)} "
                             "arguments")
        flat: list[Any] = []
        flat_dims: list[int | None] = []
        specs = []
        for a, d in zip(args, dims, strict=True):
            leaves, spec = pytree.tree_flatten(a)
            specs.append(spec)
            if isinstance(d, int) or d is None:
                ds: list[int | None] = [d] * len(leaves)
            else:
                ds = pytree.tree_flatten(d)[0]
                if len(ds) != len(leaves):
                    raise ValueError("vmap: in_dims does not match the arguments' structure")
            flat += leaves
            flat_dims += [None if not isinstance(x, torch.Tensor) else dd
                          for x, dd in zip(leaves, ds, strict=True)]
        sizes = {x.shape[d] for x, d in zip(flat, flat_dims, strict=True) if d is not None}
        if len(sizes) != 1:
            raise ValueError("vmap: Expected all tensors to have the same size in the mapped "
                             f"dimension, got sizes {sorted(sizes)} for the mapped dimension")
        n = sizes.pop()
        results = []
        for i in range(max(n, 1)):
            # An empty batch (eager maps no example): the function on one example of zeros
            # gives the results' structure and shapes, each then taken zero times.
            sliced = [x if d is None else x.select(d, i) if n else
                      x.new_zeros(x.shape[:d] + x.shape[d + 1:])
                      for x, d in zip(flat, flat_dims, strict=True)]
            rebuilt, k = [], 0
            for spec in specs:
                m = spec.num_leaves
                rebuilt.append(pytree.tree_unflatten(sliced[k:k + m], spec))
                k += m
            results.append(self.func(*rebuilt))
        out_leaves = [pytree.tree_flatten(r) for r in results]
        spec = out_leaves[0][1]
        odims = ([self.out_dims] * spec.num_leaves if isinstance(self.out_dims, int)
                 else pytree.tree_flatten(self.out_dims)[0])
        stacked = [torch.stack([leaves[j] for leaves, _ in out_leaves], dim=odims[j])
                   for j in range(spec.num_leaves)]
        if n == 0:
            stacked = [t.narrow(d, 0, 0) for t, d in zip(stacked, odims, strict=True)]
        return pytree.tree_unflatten(stacked, spec)


def _swaps() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    from torch._higher_order_ops import utils

    out: list[tuple[Any, str, Callable[[Any], Any]]] = []
    if hasattr(utils, "_hop_compile_and_call"):
        out.append((utils, "_hop_compile_and_call", _call_directly))
    from torch import func as torch_func

    out.append((torch, "vmap", _vmap_emulated))
    out.append((torch_func, "vmap", _vmap_emulated))
    return out


hop_calls_while_traced = swapped_while_traced(_swaps)
"""While any thread traces: the higher-order ops' hand-off to torch.compile calls them
directly when user code is traced, and ``torch.vmap`` maps slice by slice there; both are
torch's own everywhere else, and outside tracing."""


TRACING_CONTEXTS.append(hop_calls_while_traced)


__all__ = ["HOPS", "HOP_MODULES", "hop_calls_while_traced"]
