"""The compile cache: one dict lookup per call, keyed on everything that changes a program.

The key covers, for every tensor input, parameter and buffer: shape, dtype, device,
requires_grad and layout (``x.is_contiguous() or x.stride()``: one C call for a contiguous
tensor, the strides otherwise); which tensor arguments share memory, and where
(`aliases`); the values of non-tensor inputs (floats by ``repr``: ``-0.0`` is not ``0.0``,
NaN is NaN); grad mode, default dtype and autocast state; and the tokens of the guarded
Python state that tracing read (module attributes, submodules, hooks, globals, closure
cells: `thunder_ir.runtime.guards`).

The key function (the *prologue*, `thunder_ir.runtime.prologue`) is built as IR and
generated from it as Python with no loops: attribute reads into one tuple.
``last_prologue_traces`` prints it. The cache keeps the `CACHE_CAPACITY` most recently used
programs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunder_ir.runtime.origins import Captured, Origin
from thunder_ir.runtime.pystate import build, object_key, plain_object
from thunder_ir.runtime.writes import PLAIN, WritePlan

CACHE_CAPACITY = 64
"""Programs kept per jitted callable; the least recently used goes first."""

RECOMPILE_LIMIT = 8
"""After this many compiles of one jitted callable, thunder_ir warns (once) and names what
keeps changing (torch.compile's default limit is 8 too)."""


def tensor_meta(x: Any, exact: bool | None = False) -> Any:
    """The cache-key part of one argument leaf: a tensor's metadata and its layout (its
    contiguity or strides; with ``exact``, its strides and storage offset; with ``None``,
    none), a number's value."""
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            layout: Any = x.layout
        elif exact is None:
            layout = None
        elif exact:
            layout = (x.stride(), x.storage_offset())
        else:
            layout = x.is_contiguous() or x.stride()
        return (x.shape, x.dtype, x.device, x.requires_grad, layout)
    t = type(x)
    if t is float:  # -0.0 is not 0.0 (x / -0.0 is -inf); NaN is NaN (nan != nan)
        return (t, x) if x == x and x != 0.0 else (t, repr(x))
    if t is not int and t is not bool and t is not str and x is not None and plain_object(x):
        return object_key(x)  # an argument object: its fields, its tensors' metadata
    try:
        hash(x)
    except TypeError:
        return (t, id(x))
    return (t, x)


def storage_ptr(x: Any) -> int:
    """The address of a tensor's storage, or 0 where it has none to share (meta, sparse,
    a subclass without storage)."""
    try:
        return x.untyped_storage().data_ptr()  # type: ignore[no-any-return]
    except (AttributeError, RuntimeError, NotImplementedError):  # not a strided tensor
        return 0


def aliases(*leaves: Any) -> Any:
    """Which argument leaves share memory: None when no two do (the usual case), else per
    leaf that shares, the first leaf it shares with, whether it is that very tensor, and
    where each lies in the storage (the difference of their storage offsets, and both
    strides: a write through one reaches the other's elements there). The same tensor
    passed twice is ``(i, j, True)``: its place in memory is the tensor's own (the trace
    reads it once, as one proxy), and strides that change with its sizes would give every
    length its own key, where a symbolic program serves them all."""
    ptrs = [storage_ptr(x) if isinstance(x, torch.Tensor) else 0 for x in leaves]
    used = [p for p in ptrs if p]
    if len(set(used)) == len(used):
        return None
    first: dict[int, int] = {}
    out: list[tuple[Any, ...]] = []
    for i, p in enumerate(ptrs):
        if not p:
            continue
        j = first.setdefault(p, i)
        if j != i:
            a, b = leaves[i], leaves[j]
            if a is b:
                out.append((i, j, True))
                continue
            out.append((i, j, a is b, a.storage_offset() - b.storage_offset(), a.stride(),
                        b.stride()))
    return tuple(out)


@dataclass
class Entry:
    """One compiled program and how to feed it and unpack its outputs."""

    fn: Callable[..., Any]
    gather: Callable[[list[Any]], list[Any]]
    output_leaves: list[tuple[str, Any]]
    output_spec: Any
    writebacks: list[tuple[int, Origin]]
    traces: list[Any]
    prologue_source: str
    single_output: bool
    n_outputs: int = 1
    backward_traces: list[Any] = field(default_factory=list)
    replays: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = field(
        default_factory=list)
    epilogue: list[Any] = field(default_factory=list)
    """Writes to Python objects replayed after each call (`thunder_ir.runtime.pystate`)."""
    after: bool = False
    """Whether anything follows the program's call: write-backs, replays, the epilogue, or
    a returned object made on each call."""
    speculative: bool = False
    """The program checks conditions it was traced under (`tir.assume`): a call where one
    differs raises `thunder_ir.runtime.speculation.SpeculationFailed`."""
    draws: bool = False
    """A speculative program with effects (random draws, possibly) before a check."""
    variant: Entry | None = None
    """The program traced for a call whose conditions differed from this one's (tried
    next, before tracing again)."""
    shape_guard: Any = None
    """A symbolic program's `thunder_ir.runtime.dynamic.ShapeGuard`: the checks under
    which it runs for a call of other sizes (None: a program for one set of sizes)."""
    dynamic: Any = None
    """A symbolic program's dynamic sizes (`thunder_ir.runtime.dynamic.Dynamic`): its
    speculation variants are compiled symbolic in them too."""
    writes_symbolic_ints: bool = False
    """The epilogue writes nothing but the module's symbolic ``int`` attributes, with
    ``int``s (``self.step += 1``): the module guard's token stays what it was
    (`thunder_ir.runtime.symbolic_attrs.SymbolicAttrs.writes_only_ints`)."""
    symbols: Callable[[Sequence[Any]], dict[str, Any]] | None = None
    """Where the epilogue or a returned value computes a symbolic number (``self.step =
    s0 + 1``): this call's values of the symbols it uses, read before anything is written
    back (`thunder_ir.runtime.dynamic.symbol_reader`)."""

    writeback_modes: tuple[int, ...] = ()
    """Per write-back, how it writes (`thunder_ir.runtime.writes.write_back`); empty when
    every one is a plain copy under no-grad."""

    write_plan: WritePlan | None = field(default=None, init=False, repr=False)
    """How the write-backs run (`thunder_ir.runtime.writes.WritePlan`), made from
    ``writebacks`` and ``writeback_modes`` (None: no write-back)."""

    def __post_init__(self) -> None:
        self.after = bool(self.writebacks or self.replays or self.epilogue or any(
            kind == "build" for kind, _ in self.output_leaves))
        if self.writebacks:
            kinds = [kind for _, kind in self.writebacks]
            fixed = [k.tensor for k in kinds] if all(  # type: ignore[union-attr]
                type(k) is Captured for k in kinds) else None
            self.write_plan = WritePlan(self.writeback_modes or (PLAIN,) * len(kinds),
                                        fixed)


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    eager_calls: int = 0
    """Calls run eagerly because no program's speculated conditions held for them."""


class Cache:
    """Compiled entries keyed by the prologue's tuple, at most `CACHE_CAPACITY` of them.

    Until it is full, a hit costs one dict lookup; once full, a hit also moves its entry to
    the end, so that the least recently used entry is the one evicted. An *alias* (a key
    under which a program compiled for another key was found: a symbolic program for a
    new value, ``pos = 67``) goes first: finding it again costs a lookup, not a compile,
    so a decode loop of hundreds of steps does not evict the prefill's program."""

    def __init__(self, capacity: int = CACHE_CAPACITY) -> None:
        self.entries: dict[Any, Entry] = {}
        self.stats = CacheStats()
        self.last: Entry | None = None
        self.capacity = capacity
        self.full = False
        self.aliases: dict[Any, None] = {}
        """The keys inserted as aliases, oldest first (some may have left ``entries``)."""

    def insert(self, key: Any, entry: Entry, alias: bool = False) -> None:
        """Adds ``entry`` (``alias``: found for ``key``, compiled for another), evicting
        the oldest alias, else the least recently used entry, if the cache is full."""
        entries, aliases = self.entries, self.aliases
        entries.pop(key, None)
        aliases.pop(key, None)
        if len(entries) >= self.capacity:
            victim = None
            while aliases and victim is None:
                oldest = next(iter(aliases))
                del aliases[oldest]
                victim = oldest if oldest in entries else None
            del entries[next(iter(entries)) if victim is None else victim]
        entries[key] = entry
        if alias:
            aliases[key] = None
        self.full = len(entries) >= self.capacity

    def touch(self, key: Any) -> None:
        """Marks ``key`` as the most recently used (only matters once the cache is full)."""
        self.entries[key] = self.entries.pop(key)


def flatten_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], Any]:
    """Flat leaves of (args, kwargs) and the structure; fast paths for tensors: positional
    ones (the structure is their number), and keyword ones too (the number and the
    keywords, in order: ``model(input_ids=..., labels=...)``). `all_tensors` tells them."""
    for a in args:
        if not isinstance(a, torch.Tensor):
            break
    else:
        if not kwargs:
            return list(args), len(args)
        for v in kwargs.values():
            if not isinstance(v, torch.Tensor):
                break
        else:
            return [*args, *kwargs.values()], (len(args), tuple(kwargs))
    leaves, spec = pytree.tree_flatten((args, kwargs), is_leaf=_is_size)
    return leaves, spec


def all_tensors(spec: Any) -> bool:
    """Whether `flatten_args` took a fast path: every leaf is a tensor."""
    return type(spec) is int or type(spec) is tuple


def _is_size(x: Any) -> bool:
    return isinstance(x, torch.Size)


def unflatten_outputs(entry: Entry, outs: Any, args: Sequence[Any] = (),
                      tops: Sequence[Any] = (), env: dict[str, Any] | None = None) -> Any:
    """The user's output structure from the program's flat outputs (``args``: the call's
    argument leaves, some of which the user's function returns: ``("arg", i)``, or views of
    them: ``("argview", (i, sizes, strides, offset))``; ``tops``: its top-level arguments;
    ``("build", template)``: an object or symbolic number made on each call,
    `thunder_ir.runtime.pystate`, with ``env`` the symbols' values)."""
    if entry.single_output:
        return outs
    if entry.n_outputs == 1:
        outs = (outs,)
    leaves = [outs[v] if kind == "out" else args[v] if kind == "arg"
              else args[v[0]].as_strided(*v[1:]) if kind == "argview"
              else build(v, args, tops, outs, env) if kind == "build" else v
              for kind, v in entry.output_leaves]
    return pytree.tree_unflatten(leaves, entry.output_spec)
