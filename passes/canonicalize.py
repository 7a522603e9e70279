"""``canonicalize``: local simplifications of prims that never change a value or a type.

Why this pass: decompositions are written per op and compose blindly, so they leave
no-ops behind (a ``convert_element_type`` to the dtype a tensor already has, a reshape to
its own shape, a reshape of a reshape, a multiplication by a traced ``1``). Each costs a
kernel launch or a fusion boundary, and hides the real structure from later passes.

Every pattern replaces an op only by a value of *exactly* its result type, or by one new
op of the same result type, and only when the result is bit-for-bit the same:

* ``convert_element_type`` to the operand's dtype → the operand;
* ``convert(convert(x, A), B)`` when ``x → A`` is exact (every value of ``x``'s dtype is
  representable in ``A``, as in f16 → f32): ``x`` when ``B`` is ``x``'s dtype, or one
  ``convert(x, B)`` when ``A → B`` is exact too;
* ``reshape`` to the operand's shape → the operand; ``reshape(reshape(x))`` → one reshape;
* ``broadcast_in_dim`` to the operand's shape with dims ``0..r-1`` → the operand;
* ``transpose`` by the identity permutation → the operand;
* ``squeeze`` of no dims → the operand;
* ``x * 1``, ``1 * x``, ``x / 1``, ``x - 0`` → ``x`` (the number from ``prims.constant``);
  ``x + 0``, ``0 + x`` → ``x`` for integer tensors, and for floats only with ``-0.0``:
  ``-0.0 + 0.0`` is ``+0.0``, so adding ``+0.0`` is not an identity (MLIR folds the
  same way).

Ops left unused are erased (they are ``Pure``), as MLIR's canonicalizer does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

import torch
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import from_attr
from thunder_ir.dialects.types import TensorType, is_float
from thunder_ir.passes.cse_dce import dce

# --------------------------------------------------------------------------- helpers


def forward(op: Operation, value: SSAValue, rewriter: PatternRewriter) -> bool:
    """Replaces ``op``'s single result by ``value`` if their types are equal."""
    if value.type != op.results[0].type:
        return False
    rewriter.replace(op, [], [value])
    return True


def _is_identity(dims: Any, rank: int) -> bool:
    return tuple(dims) == tuple(range(rank))


def constant_value(v: SSAValue) -> Any:
    """The Python number a value holds if ``prims.constant`` defines it, else ``None``."""
    owner = v.owner
    if isinstance(owner, P.ConstantOp):
        return from_attr(owner.value)
    return None


@cache
def _digits(dtype: torch.dtype) -> int:
    """Significand bits of a float dtype, the implicit bit included (f32: 24)."""
    return 1 - round(math.log2(torch.finfo(dtype).eps))


@cache
def exact_conversion(src: torch.dtype, dst: torch.dtype) -> bool:
    """True when every value of ``src`` converts to ``dst`` exactly (no rounding, no
    overflow): bool to anything, integer widening, float widening, and integers into a
    float with enough significand bits (i16 → f32, u8 → bf16)."""
    if src == dst or src == torch.bool:
        return True
    if dst == torch.bool or (is_float(src) and not is_float(dst)):
        return False
    if is_float(src):
        s, d = torch.finfo(src), torch.finfo(dst)
        return (_digits(dst) >= _digits(src) and d.max >= s.max
                and d.smallest_normal * d.eps <= s.smallest_normal * s.eps)
    i = torch.iinfo(src)
    if is_float(dst):
        return max(-i.min, i.max) <= 2 ** _digits(dst) and torch.finfo(dst).max >= i.max
    o = torch.iinfo(dst)
    return o.min <= i.min and o.max >= i.max


# --------------------------------------------------------------------------- patterns


class PrimPattern(RewritePattern):
    """A pattern on one op class, ``OP``: `rewrite` runs only on instances of it.

    Patterns look at an op and at the ops defining its operands, never at its users, so
    one walk in program order reaches the fixpoint (operands are already canonical when
    their users are visited).
    """

    OP: ClassVar[type[Operation]]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, self.OP):
            self.rewrite(op, rewriter)

    def rewrite(self, op: Any, rewriter: PatternRewriter) -> None:
        """Rewrites ``op`` (an instance of ``OP``) through ``rewriter``, or does nothing."""
        raise NotImplementedError


class ConvertToSameDtype(PrimPattern):
    """``convert_element_type(x, dtype of x)`` → ``x``."""

    OP = P.ConvertElementTypeOp

    def rewrite(self, op: P.ConvertElementTypeOp, rewriter: PatternRewriter) -> None:
        forward(op, op.x, rewriter)


class ConvertOfExactConvert(PrimPattern):
    """``convert(convert(x, A), B)`` with an exact ``x → A``: ``x`` when ``B`` is ``x``'s
    dtype; one ``convert(x, B)`` when ``A → B`` is exact too."""

    OP = P.ConvertElementTypeOp

    def rewrite(self, op: P.ConvertElementTypeOp, rewriter: PatternRewriter) -> None:
        inner = op.x.owner
        if not isinstance(inner, P.ConvertElementTypeOp):
            return
        x = inner.x
        src, mid, dst = (_dtype(x), _dtype(inner.out), _dtype(op.out))
        if src is None or mid is None or dst is None or not exact_conversion(src, mid):
            return
        if dst == src:
            forward(op, x, rewriter)
        elif exact_conversion(mid, dst):
            rewriter.replace(op, _clone_with_operand(op, x))


class ReshapeToSameShape(PrimPattern):
    """``reshape(x, shape of x)`` → ``x``."""

    OP = P.ReshapeOp

    def rewrite(self, op: P.ReshapeOp, rewriter: PatternRewriter) -> None:
        forward(op, op.x, rewriter)


class ReshapeOfReshape(PrimPattern):
    """``reshape(reshape(x, s1), s2)`` → ``reshape(x, s2)`` (or ``x`` if it has shape s2)."""

    OP = P.ReshapeOp

    def rewrite(self, op: P.ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.x.owner
        if not isinstance(inner, P.ReshapeOp):
            return
        if not forward(op, inner.x, rewriter):
            rewriter.replace(op, _clone_with_operand(op, inner.x))


class BroadcastToSameShape(PrimPattern):
    """``broadcast_in_dim(x, shape of x, dims 0..r-1)`` → ``x``."""

    OP = P.BroadcastInDimOp

    def rewrite(self, op: P.BroadcastInDimOp, rewriter: PatternRewriter) -> None:
        t = op.x.type
        if isinstance(t, TensorType) and _is_identity(op.broadcast_dims.get_values(), t.rank):
            forward(op, op.x, rewriter)


class TransposeIdentity(PrimPattern):
    """``transpose(x, (0, 1, ..., r-1))`` → ``x``."""

    OP = P.TransposeOp

    def rewrite(self, op: P.TransposeOp, rewriter: PatternRewriter) -> None:
        t = op.x.type
        if isinstance(t, TensorType) and _is_identity(op.permutation.get_values(), t.rank):
            forward(op, op.x, rewriter)


class SqueezeNoDims(PrimPattern):
    """``squeeze(x, ())`` → ``x``."""

    OP = P.SqueezeOp

    def rewrite(self, op: P.SqueezeOp, rewriter: PatternRewriter) -> None:
        if not op.dims.get_values():
            forward(op, op.x, rewriter)


class MulByOne(PrimPattern):
    """``x * 1`` and ``1 * x`` → ``x``."""

    OP = P.MulOp

    def rewrite(self, op: P.MulOp, rewriter: PatternRewriter) -> None:
        if _is(constant_value(op.rhs), 1):
            forward(op, op.lhs, rewriter)
        elif _is(constant_value(op.lhs), 1):
            forward(op, op.rhs, rewriter)


class DivByOne(PrimPattern):
    """``x / 1`` → ``x`` (true or truncating division alike)."""

    OP = P.DivOp

    def rewrite(self, op: P.DivOp, rewriter: PatternRewriter) -> None:
        if _is(constant_value(op.rhs), 1):
            forward(op, op.lhs, rewriter)


class AddZero(PrimPattern):
    """``x + 0`` and ``0 + x`` → ``x``: integers; floats only with ``-0.0``."""

    OP = P.AddOp

    def rewrite(self, op: P.AddOp, rewriter: PatternRewriter) -> None:
        dtype = _dtype(op.out)
        if dtype is None:
            return
        for zero, x in ((op.rhs, op.lhs), (op.lhs, op.rhs)):
            if _is_additive_identity(constant_value(zero), dtype) and forward(op, x, rewriter):
                return


class SubZero(PrimPattern):
    """``x - 0`` → ``x`` (``-0.0 - 0.0`` is ``-0.0``: exact for floats too)."""

    OP = P.SubOp

    def rewrite(self, op: P.SubOp, rewriter: PatternRewriter) -> None:
        if _is(constant_value(op.rhs), 0):
            forward(op, op.lhs, rewriter)


def _is(value: Any, n: int) -> bool:
    return value is not None and value == n


def _is_additive_identity(value: Any, dtype: torch.dtype) -> bool:
    if value is None or value != 0:
        return False
    if not is_float(dtype):
        return True
    return isinstance(value, float) and math.copysign(1.0, value) < 0


def _dtype(v: SSAValue) -> torch.dtype | None:
    t = v.type
    return t.dtype if isinstance(t, TensorType) else None


def _clone_with_operand(op: Operation, operand: SSAValue) -> Operation:
    """A copy of single-operand ``op`` (properties, attributes, result type, location)
    reading ``operand``."""
    new = type(op).create(operands=[operand], result_types=[op.results[0].type],
                          properties=dict(op.properties), attributes=dict(op.attributes))
    new.location = op.location
    return new


PATTERNS: tuple[type[PrimPattern], ...] = (
    ConvertToSameDtype,
    ConvertOfExactConvert,
    ReshapeToSameShape,
    ReshapeOfReshape,
    BroadcastToSameShape,
    TransposeIdentity,
    SqueezeNoDims,
    MulByOne,
    DivByOne,
    AddZero,
    SubZero,
)
"""Every canonicalization pattern; those on the same op class are tried in this order."""


class ByOpType(RewritePattern):
    """Applies patterns by the matched op's exact class: one dict look-up per op instead
    of trying every pattern in turn. The first pattern that acts wins, as in
    ``GreedyRewritePatternApplier``."""

    def __init__(self, patterns: Sequence[PrimPattern]) -> None:
        table: dict[type[Operation], list[PrimPattern]] = {}
        for p in patterns:
            table.setdefault(p.OP, []).append(p)
        self.table = {k: tuple(v) for k, v in table.items()}

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        for p in self.table.get(type(op), ()):
            p.rewrite(op, rewriter)
            if rewriter.has_done_action:
                return


@dataclass(frozen=True)
class CanonicalizePass(ModulePass):
    """Applies the `PATTERNS` in one walk, then erases the pure ops left unused."""

    name = "canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ByOpType([p() for p in PATTERNS]),
                             apply_recursively=False).rewrite_module(op)
        dce(op)


__all__ = [
    "PATTERNS",
    "ByOpType",
    "CanonicalizePass",
    "PrimPattern",
    "constant_value",
    "exact_conversion",
    "forward",
]
