"""Op traits: the facts about an op that passes and executors ask, declared on the op.

A pass asks the op (``op.has_trait(Elementwise)``, ``op.get_trait(ViewLike)``) instead of
looking its name up in a list of its own, so a new op declared on a family base gets the
passes' behaviour from its family, and no pass holds a list to forget (xDSL's
``xdsl.traits``; tinygrad's ``GroupOp``).

Every op of the ``prims``, ``ltorch``, ``torch``, ``autograd``, ``fusion`` and ``guard``
dialects carries exactly one **kind** (an instance of a subclass of `OpKind`), except terminators
(``tests/test_traits.py`` holds this). A family base declares the kind its leaves share. xDSL
collects the traits of every class in the MRO into one set, so a leaf cannot override its
family's kind: where leaves differ, the family is split into bases that each declare one
(``prims.CreationOp`` and ``prims.BernoulliOp`` share ``FactoryOp``, which declares none).

=================  =====================================================  ====================
kind               meaning                                                who asks
=================  =====================================================  ====================
`Elementwise`      each result element is a function of the operands'     remat (cheap),
                   elements at the same index (math, casts, ``where``,    Inductor
                   activations)
`ViewLike`         the result holds the operand's elements unchanged,     remat (free; a
                   re-indexed; ``kind``: `RESHAPE`, `RESTRIDE`, `VIEW`,   reshape of a
                   `COPY`                                                 restride copies),
                                                                          fuse (computes
                                                                          nothing), Inductor
`Movement`         copies elements to new places (pad, flip, getitem);    remat (cheap unless
                   ``many``: joins or splits several tensors (cat,        ``many``), Inductor
                   stack, split, chunk)
`Reduction`        reduces dims (sum, amax, var, softmax's rows);         Inductor, Triton
                   ``indices``: returns positions (argmax, max_dim)
`Creation`         makes a tensor from static arguments only (full,       remat (cheap),
                   iota, zeros, constants)                                Inductor
`Random`           draws from the RNG (bernoulli, dropout)                (never recomputed
                                                                          or fused)
`Collective`       communicates with other processes (the ``dist``        (never recomputed
                   dialect: all-reduce, all-gather, wait)                 or fused)
`Library`          a call into a library kernel (matmul, attention,       (not recomputed;
                   gather/scatter, a compiled region)                     executors choose)
`Opaque`           computes what the compiler cannot see (a torch call,   (nothing)
                   a custom autograd function)
`Marker`           tells autodiff something and computes nothing          (nothing)
                   (``autograd.stop_gradient``)
`Guard`            reads what the cache key covers, or assembles the key  (nothing: passes
                   (the ``guard`` dialect of ``@prologue``)               leave it alone)
=================  =====================================================  ====================

Besides its kind, an op may carry `DeviceLayout` (its result's memory layout is the device
kernel's: tracing asks torch's fake tensors, `thunder_ir.frontend.layout`) and
`NoDerivative` (no gradient flows through it: autodiff and tracing's ``requires_grad``
read it).

``prims.constant`` also carries xDSL's `ConstantLike`: remat recomputes it for free.
Effects stay xDSL's own traits (``Pure``, ``MemoryEffect``): a kind says what an op
computes, not whether it may be removed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from xdsl.ir import Operation
from xdsl.traits import (
    ConstantLike,
    IsTerminator,
    MemoryEffect,
    NoMemoryEffect,
    OpTrait,
    SymbolOpInterface,
    is_side_effect_free,
)

RESHAPE = "reshape"
"""A view when the operand's layout allows it, else a copy (reshape, view, flatten)."""
RESTRIDE = "restride"
"""A view with permuted or zero strides (transpose, permute, expand, broadcast): a reshape
of its result usually copies."""
VIEW = "view"
"""Any other view that keeps the layout's order (squeeze, unsqueeze, slice)."""
COPY = "copy"
"""The operand's values in its own shape, as a fresh tensor (clone, contiguous)."""

ViewKind = Literal["reshape", "restride", "view", "copy"]


class OpKind(OpTrait):
    """Base of the kind traits: what an op computes. Every op has exactly one kind."""


@dataclass(frozen=True)
class Elementwise(OpKind):
    """Each result element depends only on the operands' elements at the same index."""


@dataclass(frozen=True)
class ViewLike(OpKind):
    """The result holds the operand's elements, unchanged, at new indices.

    Args:
        kind: how the result relates to the operand's storage: `RESHAPE`, `RESTRIDE`,
            `VIEW` or `COPY`.
    """

    kind: ViewKind = "view"

    @property
    def free(self) -> bool:
        """True for a view (no copy, whatever the layout): recomputing it costs nothing."""
        return self.kind != COPY


@dataclass(frozen=True)
class Movement(OpKind):
    """Copies the operands' elements to new places without arithmetic.

    Args:
        many: it joins several tensors into one or splits one into several (cat, stack,
            split, chunk), which remat does not recompute.
    """

    many: bool = False


@dataclass(frozen=True)
class Reduction(OpKind):
    """Reduces dims of its operand (softmax-like normalizations reduce, then broadcast).

    Args:
        indices: it returns positions (argmax, argmin, ``max(x, dim)``), not only values.
    """

    indices: bool = False


@dataclass(frozen=True)
class Creation(OpKind):
    """Makes a tensor (or number) from its static arguments only."""


@dataclass(frozen=True)
class Random(OpKind):
    """Draws from the random number generator: never recomputed, never fused."""


@dataclass(frozen=True)
class Collective(OpKind):
    """Communicates with the other processes of a group (``dist``): never merged, dropped,
    recomputed or fused."""


@dataclass(frozen=True)
class Library(OpKind):
    """A call into a library kernel (BLAS, attention, gather/scatter, a compiled region)."""


@dataclass(frozen=True)
class Opaque(OpKind):
    """Computes what the compiler cannot see (a torch call, a user's autograd function)."""


@dataclass(frozen=True)
class Marker(OpKind):
    """Tells autodiff something about its operand; computes nothing."""


@dataclass(frozen=True)
class Guard(OpKind):
    """Reads what the cache key covers (an argument's metadata, grad mode, the guard
    tokens) or assembles the key: the ops of ``@prologue``, which no pass transforms."""


@dataclass(frozen=True)
class DeviceLayout(OpTrait):
    """The result's memory layout depends on the device's kernel, not only on the
    operands' layouts: tracing asks torch's fake tensors of the operands' device for it
    (`thunder_ir.frontend.layout`) where the operands are not all contiguous, and on the
    devices in ``always`` even where they are (a convolution's memory format; attention,
    whose CUDA kernels return the heads transposed). Not a kind: any op may carry it.

    Args:
        always: device types ("cuda") where even contiguous operands are asked about.
    """

    always: tuple[str, ...] = ()


@dataclass(frozen=True)
class NoDerivative(OpTrait):
    """Its results carry no gradient back to its operands: boolean and integer results
    (comparisons, predicates, bitwise ops, argmax), tensors made from static arguments or
    drawn (iota, full, bernoulli, constants, ``zeros_like``: eager marks them as not
    requiring grad), and ``autograd.stop_gradient``. Autodiff skips such ops, tracing
    does not mark their results as requiring grad. Not a kind: any op may carry it (a
    coverage test keeps every prim either here or in the VJP rule table)."""


def has_no_derivative(op: Operation | type[Operation]) -> bool:
    """Whether ``op`` (an op or its class) carries `NoDerivative` (one lookup per class)."""
    return _no_derivative(op if isinstance(op, type) else type(op))


@functools.cache
def _no_derivative(cls: type[Operation]) -> bool:
    return cls.has_trait(NoDerivative)


@functools.cache
def pure_by_class(cls: type[Operation]) -> bool:
    """Whether every op of ``cls`` without regions is side-effect free by its class alone:
    its only effect traits are ``NoMemoryEffect``'s (``Pure``), and it is neither a
    terminator nor a symbol. Ops whose effects depend on the op (``PureIfMarked`` calls,
    dropout's ``PureWithoutDropout``, ``RecursiveMemoryEffect`` regions) are not."""
    traits = list(getattr(cls, "traits", ()))
    effects = [t for t in traits if isinstance(t, MemoryEffect)]
    return (bool(effects) and all(isinstance(t, NoMemoryEffect) for t in effects)
            and not any(isinstance(t, IsTerminator | SymbolOpInterface) for t in traits))


def side_effect_free(op: Operation) -> bool:
    """xDSL's ``is_side_effect_free(op)``, answered once per class where the class decides
    it (`pure_by_class`): passes ask it of every op."""
    return (not op.regions and pure_by_class(type(op))) or is_side_effect_free(op)


class NumberConstant(ConstantLike):
    """xDSL's `ConstantLike` for ``prims.constant``: a number baked into the program."""


def kind_of(op: Operation | type[Operation]) -> OpKind | None:
    """The op's kind (its one `OpKind` trait), or None."""
    return op.get_trait(OpKind)


def cheap_to_recompute(op: Operation) -> bool:
    """Elementwise, view, creation and single-tensor movement ops: recomputing one in the
    backward costs at most a memory pass (remat's default policy)."""
    kind = op.get_trait(OpKind)
    if isinstance(kind, Movement):
        return not kind.many
    return isinstance(kind, Elementwise | ViewLike | Creation)


def free_to_recompute(op: Operation) -> bool:
    """Views (no copy) and number constants: recomputing one costs nothing."""
    view = op.get_trait(ViewLike)
    if view is not None:
        return view.free
    return op.has_trait(ConstantLike)


def computes_nothing(op: Operation) -> bool:
    """Ops that only view or copy their operand: they do not count towards a fusion
    region's size."""
    return op.has_trait(ViewLike)


__all__ = [
    "COPY",
    "RESHAPE",
    "RESTRIDE",
    "VIEW",
    "Collective",
    "Creation",
    "DeviceLayout",
    "Elementwise",
    "Guard",
    "Library",
    "Marker",
    "Movement",
    "NumberConstant",
    "OpKind",
    "Opaque",
    "Random",
    "Reduction",
    "ViewLike",
    "pure_by_class",
    "side_effect_free",
    "cheap_to_recompute",
    "computes_nothing",
    "free_to_recompute",
    "kind_of",
]
