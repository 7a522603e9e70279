"""torch's higher-order ops inside traced code: ``torch.cond``, ``map``, ``scan``,
``while_loop``, ``associative_scan``; and ``torch.vmap`` called inside traced code.

In eager, each user-facing function validates its arguments and hands the op to
``torch.compile`` (``_hop_compile_and_call``), whose result is what the op's dense kernel
computes: plain Python over torch ops (``if pred: true_fn(...)``, a loop over the scanned
dimension, ``while cond_fn(...)``). While a trace runs, that hand-off calls the op
directly (a swap, `thunder_ir.frontend.takeover.while_traced`), the op reaches the
tracer's mode, and its handler runs that same dense kernel under the trace
(`Builder.run_python`): the bodies are
traced, inline, once per iteration, and a condition on a traced tensor (``cond``'s
predicate, ``while_loop``'s) is speculated (`thunder_ir.frontend.speculation`): the
program follows the branch, or the iteration count, of the call it was traced for, and
checks it on every call. Gradients are thunder_ir's own, of the traced computation.

``torch.vmap`` (``torch.func.vmap``, however it was imported, and a function it wrapped
before the trace) called inside traced code (``associative_scan``'s generic mode wraps its
combine function in it) maps the function over the batch dimension one slice at a time
and stacks the results: eager's values and gradients, one traced call per slice; an
elementwise function is called once more on the whole batch instead and the other
slices are not traced (`thunder_ir.frontend.vmap_batch`, which says when). torch's
own checks of ``in_dims``/``out_dims`` run (eager's errors); a function that draws random
numbers gets eager's error under ``randomness="error"`` and is refused under ``"same"``
and ``"different"`` (slice by slice would not draw eager's numbers). Results are stacked
copies where eager's may be views of another layout.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree
from xdsl.ir import Operation

from thunder_ir.dialects.traits import Random, kind_of
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.context import current, tracing_now
from thunder_ir.frontend.errors import ThunderTraceError, user_location, where
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.frontend.table import register_handlers, traces_python
from thunder_ir.frontend.takeover import while_traced
from thunder_ir.frontend.vmap_batch import batch_elementwise, ops_after

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
    register_handlers([_op], _dense_handler(_op))


# --------------------------------------------------------------------------- while tracing

def _call_directly(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(fn: Callable[..., Any], args: Any, kwargs: Any = None) -> Any:
        if not (tracing_now() and torch._C._len_torch_function_stack() > 0):
            return original(fn, args, kwargs)
        return fn(*args, **(kwargs or {}))

    return call


def _vmap_impl_emulated(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap_impl(func: Callable[..., Any], in_dims: Any, out_dims: Any, randomness: str,
                  chunk_size: int | None, *args: Any, **kwargs: Any) -> Any:
        if not (tracing_now() and torch._C._len_torch_function_stack() > 0):
            return original(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs)
        return _loop_map(func, in_dims, out_dims, randomness, args, kwargs)

    return vmap_impl


def _loop_map(func: Callable[..., Any], in_dims: Any, out_dims: Any, randomness: str,
              args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``vmap(func, in_dims, out_dims, randomness)(*args, **kwargs)`` inside traced code:
    ``func`` on each slice of the mapped dimension (``kwargs`` unmapped, as eager passes
    them), the results stacked along ``out_dims``; torch's own checks of the arguments
    (eager's errors), and eager's rules for results that do not depend on the batch
    (``out_dims=None``: returned as they are; else expanded)."""
    from torch._functorch import vmap as functorch_vmap

    functorch_vmap._check_out_dims_is_int_or_int_pytree(out_dims, func)
    n, flat_dims, flat_args, spec = functorch_vmap._process_batched_inputs(in_dims, args, func)
    name = getattr(func, "__name__", repr(func))
    ctx = current()
    results = []
    mapped: set[Any] = set()  # the first call's slices: what depends on the batch
    whole: list[Any] | None = None  # the results' leaves from one call on the batch
    for i in range(max(n, 1)):
        # An empty batch (eager maps no example): the function on one example of zeros
        # (a sum over the empty dimension: the input's zero gradient flows) gives the
        # results' structure and shapes, each then taken zero times.
        sliced = [x if d is None else x.select(d, i) if n else _zeros_without(x, d)
                  for x, d in zip(flat_args, flat_dims, strict=True)]
        if i == 0:
            mapped = {x._value for x, d in zip(sliced, flat_dims, strict=True)
                      if d is not None and isinstance(x, TensorProxy)}
        start = ctx.build.block.last_op
        writes = len(ctx.aliases.written)
        results.append(func(*pytree.tree_unflatten(sliced, spec), **kwargs))
        _check_draws(ctx, start, randomness)
        if i == 0 and len(ctx.aliases.written) == writes:  # an elementwise function: once
            whole = batch_elementwise(ctx, func, ops_after(ctx.build.block, start),
                                      sliced, flat_args, flat_dims, spec, kwargs,
                                      results[0], n)
            if whole is not None:
                break
    leaves, out_spec = pytree.tree_flatten(results[0])
    odims = _out_dims(results[0], out_dims, out_spec, name)
    out = []
    for j, (leaf, d) in enumerate(zip(leaves, odims, strict=True)):
        batched = isinstance(leaf, TensorProxy) and _depends_on(leaf._value, mapped)
        if d is None:
            if batched:
                raise ValueError(f"vmap({name}, ...): `{name}` can not return a "
                                 "BatchedTensor when out_dim is None")
            out.append(leaf)
        elif not isinstance(leaf, torch.Tensor):
            raise ValueError(f"vmap({name}, ...): `{name}` must only return Tensors, got "
                             f"type {type(leaf)}. Did you mean to set out_dims= to None for "
                             "output?")
        elif not batched:  # eager expands a result that does not depend on the batch
            sizes = list(leaf.shape)
            sizes.insert(d if d >= 0 else d + leaf.dim() + 1, n)
            out.append(leaf.expand(sizes))
        elif whole is not None:
            assert whole[j] is not None, "a result that depends on the batch, batched"
            out.append(whole[j].movedim(0, d))
        else:
            stacked = torch.stack([pytree.tree_leaves(r)[j] for r in results])
            out.append((stacked if n else stacked.narrow(0, 0, 0)).movedim(0, d))
    return pytree.tree_unflatten(out, out_spec)


def _zeros_without(x: torch.Tensor, d: int) -> torch.Tensor:
    """An example of zeros for an empty batch along ``d`` of ``x``."""
    if x.dtype.is_floating_point or x.dtype.is_complex:
        return x.sum(d, dtype=x.dtype)
    return x.new_zeros(x.shape[:d] + x.shape[d + 1:])


def _out_dims(first: Any, out_dims: Any, out_spec: Any, name: str) -> list[Any]:
    """``out_dims`` per result leaf, or eager's error where they do not fit."""
    flat: list[Any] | None
    if isinstance(first, torch.Tensor):
        flat = [out_dims] if isinstance(out_dims, int) or out_dims is None else \
            list(out_dims) if isinstance(out_dims, tuple) and len(out_dims) == 1 else None
    else:
        flat = pytree._broadcast_to_and_flatten(out_dims, out_spec)
    if flat is None:
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible "
            "with the structure of `outputs`. out_dims has structure "
            f"{pytree.tree_flatten(out_dims)[1]} but outputs has structure {out_spec}.")
    return flat


def _depends_on(value: Any, sources: set[Any]) -> bool:
    """Whether ``value`` is computed from any of ``sources`` (SSA values)."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v in sources:
            return True
        if id(v) in seen:
            continue
        seen.add(id(v))
        owner = getattr(v, "owner", None)
        if isinstance(owner, Operation):
            stack.extend(owner.operands)
    return False


def _check_draws(ctx: Any, start: Operation | None, randomness: str) -> None:
    """Eager's error where the mapped function draws under ``randomness="error"``; a
    clear refusal under ``"same"`` or ``"different"`` (eager draws for the whole batch
    at once, or once for all of it: slice by slice would draw other numbers)."""
    op = start.next_op if start is not None else ctx.build.block.first_op
    while op is not None and not any(_draws(o) for o in op.walk()):
        op = op.next_op
    if op is None:
        return
    if randomness == "error":
        raise RuntimeError(
            "vmap: called random operation while in randomness error mode. Please either "
            "use the 'same' or 'different' randomness flags on vmap or perform the "
            "randomness operation out of vmap")
    raise ThunderTraceError(
        f"{where(user_location())}: torch.vmap(..., randomness={randomness!r}) over a "
        "function that draws random numbers, inside the jitted function: thunder_ir maps "
        "it slice by slice, which would not draw eager's numbers. Draw outside vmap, or "
        "apply vmap to the jitted function instead.")


def _draws(op: Operation) -> bool:
    """Whether ``op`` draws random numbers: a `Random` op, or an opaque call of a torch
    function whose ATen op of the same name is seeded (``torch.rand``, ``x.uniform_``)."""
    if isinstance(kind_of(op), Random):
        return True
    if op.name != "torch.call":
        return False
    callee = op.properties["callee"].data  # type: ignore[attr-defined]
    if callee.endswith(".inplace_on_copy"):
        callee = op.properties["args"].data[0].data  # type: ignore[attr-defined]
    return _seeded(callee.rsplit(".", 1)[-1])


@functools.cache
def _seeded(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(torch.Tag.nondeterministic_seeded in getattr(packet, o).tags
               for o in packet.overloads())


def _swaps() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    from torch._higher_order_ops import utils

    out: list[tuple[Any, str, Callable[[Any], Any]]] = []
    if hasattr(utils, "_hop_compile_and_call"):
        out.append((utils, "_hop_compile_and_call", _call_directly))
    from torch._functorch import apis

    out.append((apis, "vmap_impl", _vmap_impl_emulated))  # every vmap's call goes there
    return out


while_traced(_swaps)
"""(While any thread traces: the higher-order ops' hand-off to torch.compile calls them
directly when user code is traced, and ``torch.vmap`` maps slice by slice there; both are
torch's own everywhere else, and outside tracing.)"""


__all__ = ["HOPS", "HOP_MODULES"]
