"""Which inputs' layouts a program depends on: the part of the cache key a program found
by layout needs.

The exact key holds every tensor's layout (its contiguity, or its strides), inside
argument objects and rebound module state too (`thunder_ir.runtime.pystate.object_key`,
`thunder_ir.runtime.rebound`). A trace records, per program input, how much of its layout
any decision depended on (`thunder_ir.frontend.layout_reads`, `LayoutReads`):

* *exactly* (a ``view`` that works or raises by its strides, ``x.stride()``, a write
  through aliases): the key keeps its layout as it is;
* *by its class* (`layout_class`): only through the results ops computed from it (not
  views of it), which a kernel lays out as from a contiguous operand whenever every
  operand is `ordered` (the strides of the dims not of size 1 strictly falling from the
  first to the last: a contiguous tensor, or a slice of one such as a sliding window's
  keys). Such an input's layout is keyed as `ORDERED` where it is one;
* *not at all*: the key holds ``None`` for it.

A call that misses the cache looks for a program under its key relaxed that way for each
set of reads a program recorded (`relax`): the first decode step after a prefill (whose
cache holds the window as a slice of a longer tensor) and every later one (a slice of a
shorter one) then run one program, and its outputs are still eager's (the program's
kernels lay them out from the real inputs; a program that restrides an output to the
traced layout is never relaxed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Loc = tuple[Any, tuple[Any, ...]]
"""A tensor's place in the key: the flat argument leaf (or a rebound state,
`state_loc`) and the steps inside an argument object (``()`` for the leaf itself)."""

ORDERED = ("ordered",)
"""The key's layout of an `ordered` tensor whose layout a program reads only by class."""


@dataclass(frozen=True)
class LayoutReads:
    """What a trace read of its inputs' layouts, by program input index (`every`: some
    decision could not say whose layout it read; then every layout counts)."""

    exact: frozenset[int] = frozenset()
    classes: frozenset[int] = frozenset()
    every: bool = False


@dataclass(frozen=True)
class Mask:
    """The key locations whose layouts a program read exactly (``exact``) or by class
    (``classes``); every other tensor's layout is blanked (`relax`)."""

    exact: frozenset[Loc]
    classes: frozenset[Loc]


def ordered(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no size is 0 and the strides of the dims whose size is not 1 fall strictly
    from the first to the last (none 0): a contiguous tensor, or a slice of one. A kernel
    lays its result out from such operands as from contiguous ones (TensorIterator keeps
    their dims in order, ``empty_like`` and ``cat`` suggest the contiguous format), up to
    the strides of dims of size 1."""
    if len(sizes) != len(strides):
        return False
    last = None
    for n, st in zip(sizes, strides):
        if n == 0:
            return False
        if n == 1:
            continue
        if st <= 0 or (last is not None and st >= last):
            return False
        last = st
    return True


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def layout_class(shape: Any, layout: Any) -> Any:
    """A key's layout of a tensor of ``shape`` (``True`` contiguous, its strides, or
    ``(strides, offset)`` where the key is exact) as `ORDERED` where the tensor is
    `ordered`, else as it is."""
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        return layout
    if layout is True:
        strides: Any = _contiguous(shape)
    elif type(layout) is tuple and len(layout) == 2 and type(layout[0]) is tuple:
        strides = layout[0]
    elif type(layout) is tuple and all(type(s) is int for s in layout):
        strides = layout
    else:
        return layout
    return ORDERED if ordered(shape, strides) else layout


def _is_meta(k: Any) -> bool:
    """A tensor's metadata in a key: ``(shape, dtype, device, requires_grad, layout)``."""
    return type(k) is tuple and len(k) == 5 and isinstance(k[0], torch.Size)


def _relaxed(shape: Any, layout: Any, loc: Loc, mask: Mask) -> Any:
    if loc in mask.exact:
        return layout
    if loc in mask.classes:
        return layout_class(shape, layout)
    return None


def _relax_object(key: Any, leaf: int, at: tuple[Any, ...], mask: Mask) -> Any:
    """An argument object's key (`object_key`) with its tensors' layouts relaxed."""
    if _is_meta(key):
        return (*key[:4], _relaxed(tuple(key[0]), key[4], (leaf, at), mask))
    if not (type(key) is tuple and len(key) == 2 and isinstance(key[0], type)
            and type(key[1]) is tuple):
        return key
    t, items = key
    if t is list or t is tuple:
        return (t, tuple(_relax_object(v, leaf, (*at, ("item", i)), mask)
                         for i, v in enumerate(items)))
    if not all(type(p) is tuple and len(p) == 2 for p in items):
        return key
    kind = "item" if t is dict else "attr"
    return (t, tuple((k, _relax_object(v, leaf, (*at, (kind, k)), mask)) for k, v in items))


def state_loc(module: Any, name: str, buffer: bool, item: str | None) -> tuple[Any, ...]:
    """The leaf of a rebound state (buffer or attribute ``name`` of ``module``; ``item``:
    the ``repr`` of its key in the container the attribute holds) in a `Loc`."""
    return ("state", id(module), name, buffer, item)


def relax(key: tuple[Any, ...], positions: Mapping[int, tuple[int, bool]],
          mask: Mask, leaves: Mapping[int, Any]) -> tuple[Any, ...]:
    """``key`` (a prologue's) with each tensor's layout kept, classed or blanked by
    ``mask`` (``positions``: where each leaf sits, `key_positions`; ``leaves``: the
    `state_loc` of the leaves numbered after the arguments)."""
    k = list(key)
    for at, (pos, is_shape) in positions.items():
        leaf = leaves.get(at, at)
        if is_shape:  # (`G.TensorMetaOp`, `G.AttrMetaOp`: the layout is the fifth part)
            if pos + 4 < len(k):
                k[pos + 4] = _relaxed(tuple(key[pos]), key[pos + 4], (leaf, ()), mask)
        else:
            k[pos] = _relax_object(key[pos], leaf, (), mask)
    return tuple(k)


def mask_of(reads: LayoutReads, kinds: Sequence[Any]) -> Mask:
    """The key locations of a trace's reads (``kinds``: each program input's origin)."""
    from thunder_ir.runtime.origins import ArgLeaf, ArgPath, ModuleTensor

    def loc(i: int) -> Loc | None:
        k: Any = kinds[i] if i < len(kinds) else None
        if type(k) is ArgLeaf:
            return (k.index, ())
        if type(k) is ArgPath:
            return (k.leaf, tuple(k.steps))
        if type(k) is ModuleTensor:
            return (state_loc(k.module, k.name, k.buffer,
                              repr(k.item[0]) if k.item else None), ())
        return None

    exact = {x for x in map(loc, reads.exact) if x is not None}
    classes = {x for x in map(loc, reads.classes) if x is not None} - exact
    return Mask(frozenset(exact), frozenset(classes))


__all__ = ["ORDERED", "LayoutReads", "Loc", "Mask", "layout_class", "mask_of", "ordered",
           "relax", "state_loc"]
