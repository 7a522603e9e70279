"""The compile cache: one dict lookup per call, keyed on everything that changes a program.

The key covers, for every tensor input, parameter and buffer: shape, dtype, device and
requires_grad; the values of non-tensor inputs; grad mode, default dtype and autocast
state; every module's training flag; and a global counter that moves whenever any module
(re)registers a parameter, buffer or submodule (torch's registration hooks), so replaced
parameters are noticed without re-reading the module tree on each call.

The key function is generated Python with no loops (the *prologue*): attribute reads into
one tuple. ``last_prologue_traces`` prints it.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

_STATE_VERSION = [0]


def _bump(*_: Any) -> None:
    _STATE_VERSION[0] += 1


torch.nn.modules.module.register_module_parameter_registration_hook(_bump)
torch.nn.modules.module.register_module_buffer_registration_hook(_bump)
torch.nn.modules.module.register_module_module_registration_hook(_bump)


def state_version() -> int:
    """Moves whenever any module registers a parameter, buffer or submodule."""
    return _STATE_VERSION[0]


_autocast_state = torch._C._is_any_autocast_enabled


_counter = itertools.count()


@dataclass
class Prologue:
    """The generated key function for one input structure, and its source."""

    fn: Callable[..., Any]
    source: str


def make_prologue(n_args: int, modules: Sequence[torch.nn.Module],
                  state: Sequence[torch.Tensor], all_tensors: bool = False) -> Prologue:
    """Builds ``key(args) -> tuple`` for flat tensor args plus module state.

    ``args`` are the flat leaves of the call's arguments; the module state (parameters,
    buffers, training flags) is bound into the function's globals. With ``all_tensors``
    (the flat fast path: every argument is a tensor) each argument's metadata is read
    inline instead of through `tensor_meta`.
    """
    lines = ["def prologue(args):"]
    if n_args:
        lines.append(f"  ({', '.join(f'a{i}' for i in range(n_args))},) = args")
    parts: list[str] = []
    for i in range(n_args):
        if all_tensors:
            parts += [f"a{i}.shape", f"a{i}.dtype", f"a{i}.device", f"a{i}.requires_grad"]
        else:
            parts.append(f"_meta(a{i})")
    for i in range(len(state)):
        parts += [f"p{i}.shape", f"p{i}.dtype", f"p{i}.device", f"p{i}.requires_grad"]
    for i in range(len(modules)):
        parts.append(f"m{i}.training")
    parts += ["_grad()", "_default_dtype()", "_autocast()", "_version[0]"]
    lines.append(f"  return ({', '.join(parts)},)")
    src = "\n".join(lines) + "\n"
    g: dict[str, Any] = {"_meta": tensor_meta, "_grad": torch.is_grad_enabled,
                         "_default_dtype": torch.get_default_dtype,
                         "_autocast": _autocast_state, "_version": _STATE_VERSION}
    g.update({f"p{i}": p for i, p in enumerate(state)})
    g.update({f"m{i}": m for i, m in enumerate(modules)})
    filename = f"<thunder_ir prologue {next(_counter)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), g)
    return Prologue(g["prologue"], src)


def tensor_meta(x: Any) -> Any:
    """The cache-key part of one argument leaf."""
    if isinstance(x, torch.Tensor):
        return (x.shape, x.dtype, x.device, x.requires_grad)
    try:
        hash(x)
    except TypeError:
        return (type(x), id(x))
    return (type(x), x)


@dataclass
class Entry:
    """One compiled program and how to feed it and unpack its outputs."""

    fn: Callable[..., Any]
    gather: Callable[[list[Any]], list[Any]]
    output_leaves: list[tuple[str, Any]]
    output_spec: Any
    writebacks: list[tuple[int, tuple[Any, ...]]]
    traces: list[Any]
    prologue_source: str
    single_output: bool
    n_outputs: int = 1
    backward_traces: list[Any] = field(default_factory=list)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0


class Cache:
    """Compiled entries keyed by the prologue's tuple."""

    def __init__(self) -> None:
        self.entries: dict[Any, Entry] = {}
        self.stats = CacheStats()
        self.last: Entry | None = None


def flatten_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Any]:
    """Flat leaves of (args, kwargs) and the structure; fast path for plain tensors."""
    if not kwargs:
        for a in args:
            if not isinstance(a, torch.Tensor):
                break
        else:
            return list(args), len(args)
    leaves, spec = pytree.tree_flatten((args, kwargs), is_leaf=_is_size)
    return leaves, spec


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def unflatten_outputs(entry: Entry, outs: Any) -> Any:
    """The user's output structure from the program's flat outputs."""
    if entry.single_output:
        return outs
    if entry.n_outputs == 1:
        outs = (outs,)
    leaves = [outs[v] if kind == "out" else v for kind, v in entry.output_leaves]
    return pytree.tree_unflatten(leaves, entry.output_spec)
