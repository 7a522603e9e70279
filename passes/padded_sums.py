"""``join-padded-sums``: a sum of zero-padded slabs that do not overlap becomes one ``cat``.

Why this pass: the gradient of ``x[:, t]`` is the slice's cotangent padded with zeros to
``x``'s shape (one ``prims.pad``, `thunder_ir.passes.vjp_ltorch_core`'s ``getitem`` rule),
and autodiff sums the cotangents of every use of ``x``. A recurrence that reads ``x`` a
step at a time (Mamba's selective scan, RWKV's time mixing, an RNN over a sequence)
therefore sums ``T`` full-size tensors for ``T`` steps: ``O(T²)`` work, where the slabs
never overlap. Eager does the same (``select_backward`` makes a full tensor of zeros per
step and autograd adds them up), so this is a place to beat it.

The pattern: an ``add`` (``ltorch.add`` with no ``alpha``, or ``prims.add``) whose operands
are, through ``add`` ops used only by it, ``prims.pad`` ops with a zero padding value,
padded along one dim ``d`` only (no interior padding, no cropping), whose intervals along
``d`` are pairwise disjoint, and at most one other tensor (the dense rest). It becomes
``cat`` of the slabs along ``d`` in order (``prims.full`` zeros in the gaps), ``+ 0.0``,
``+ rest``.

Exactness: each element of the original sum is its one slab's value plus zeros (and the
rest's value). ``v + 0.0`` is ``v`` except that ``-0.0`` becomes ``+0.0``; the ``+ 0.0``
keeps that, so the result is bit for bit the original's. With two or more dense terms the
order of their sum with the slab would change the rounding, so such sums are left alone.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.program import program_functions
from thunder_ir.dialects.symbols import unbacked
from thunder_ir.dialects.types import TensorType
from thunder_ir.passes.change import ReportsChange
from thunder_ir.passes.cse_dce import dce

Slab = tuple[int, int, SSAValue]
"""A padded slab: its start and end along the padded dim, and the unpadded value."""


def _is_add(op: Operation | None) -> bool:
    if isinstance(op, P.AddOp):
        return True
    return isinstance(op, C.AddOp) and op.params().get("alpha") in (None, 1)


def _slab(v: SSAValue) -> tuple[int, Slab] | None:
    """``(dim, slab)`` if ``v`` is a zero ``prims.pad`` along one dim, else None."""
    op = v.owner
    if not isinstance(op, P.PadOp):
        return None
    params = op.params()
    if params["padding_value"] != 0:
        return None
    config = params["padding_config"]
    if any(unbacked(lo, hi) for lo, hi, _ in config):  # (u0: no decision on it)
        return None
    dims = [i for i, (lo, hi, inner) in enumerate(config) if lo or hi or inner]
    if len(dims) != 1:
        return None
    d = dims[0]
    lo, hi, inner = config[d]
    n = v.type.sizes[d] if isinstance(v.type, TensorType) else None
    if inner or lo < 0 or hi < 0 or not isinstance(n, int):
        return None
    return d, (lo, n - hi, op.operands[0])


def _terms(root: Operation) -> list[SSAValue] | None:
    """The leaves of the add tree at ``root`` (through adds used only inside the tree)."""
    out: list[SSAValue] = []
    stack = list(root.operands)
    while stack:
        v = stack.pop()
        owner = v.owner
        if isinstance(owner, Operation) and _is_add(owner) and v.has_one_use() \
                and v.type == root.results[0].type:
            stack.extend(owner.operands)
        else:
            out.append(v)
        if len(out) > 4096:
            return None
    return out


def _join(root: Operation, block: Block) -> bool:
    """Rewrites the add tree at ``root`` if it fits the pattern (module doc)."""
    t = root.results[0].type
    if not isinstance(t, TensorType):
        return False
    terms = _terms(root)
    if terms is None or any(v.type != t for v in terms):
        return False
    slabs: dict[int, list[Slab]] = {}
    rest: list[SSAValue] = []
    for v in terms:
        found = _slab(v)
        if found is None:
            rest.append(v)
        else:
            slabs.setdefault(found[0], []).append(found[1])
    if len(slabs) != 1 or len(rest) > 1:
        return False
    ((d, pieces),) = slabs.items()
    pieces.sort(key=lambda s: s[0])
    if len(pieces) < 2 or any(a[1] > b[0] for a, b in itertools.pairwise(pieces)):
        return False
    e = Emitter(lambda op: block.insert_op_before(op, root))
    e.loc = root.location
    p = e.ns(P.OPS)
    n = t.sizes[d]
    parts: list[SSAValue] = []
    at = 0
    for start, end, value in [*pieces, (n, n, None)]:
        if start > at:
            shape = list(t.sizes)
            shape[d] = start - at
            parts.append(p.full(shape=tuple(shape), fill_value=0.0 if t.dtype.is_floating_point
                                else 0, device=t.dev, dtype=t.dtype))
        if value is not None:
            parts.append(value)
        at = end
    joined = p.cat(parts, dim=d)
    if t.dtype.is_floating_point or t.dtype.is_complex:
        joined = p.add(joined, p.constant(value=0.0))  # -0.0 -> +0.0, as the sum had it
    if rest:
        joined = p.add(rest[0], joined)
    root.results[0].replace_all_uses_with(joined)
    return True


def join_padded_sums(fn: func.FuncOp) -> int:
    """Rewrites every add tree of ``fn`` that fits the pattern; returns how many."""
    block = fn.body.block
    n = 0
    for op in reversed(list(block.ops)):
        if op.parent is None or not _is_add(op) or op.results[0].first_use is None:
            continue
        user = op.results[0].get_user_of_unique_use()
        if user is not None and _is_add(user) and user.results[0].type == op.results[0].type:
            continue  # not a root: its tree is its consumer's
        n += _join(op, block)
    if n:
        dce(fn)
    return n


@dataclass(frozen=True)
class JoinPaddedSumsPass(ReportsChange):
    """Turns sums of non-overlapping zero-padded slabs into one ``cat`` (module doc)."""

    name = "join-padded-sums"

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        return sum(join_padded_sums(fn) for fn in program_functions(op)) > 0


__all__ = ["JoinPaddedSumsPass", "join_padded_sums"]
