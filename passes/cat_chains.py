"""``flatten-cat-chains``: a buffer written slice by slice becomes one ``cat`` of its slices.

Why this pass: the frontend writes ``x[:, t] = v`` as ``x`` rebuilt around the written
box (`thunder_ir.frontend.setitem`): ``cat([x[:, :t], v, x[:, t+1:]], 1)``. A loop that
fills a buffer a step at a time (RWKV's CPU time mixing, ``output[:, t] = ...``) thus
rebuilds the whole buffer at every step, ``T`` full-size copies where eager writes ``T``
slices in place, and its gradient is the same chain backwards (each step's cotangent
split and rebuilt with a zeroed slab). Measured on RWKV's loop alone (batch 2, 16 steps,
width 64; docs/fusion.md), the fused forward ran at 1.44x torch.compile's until this pass.

The rewrite: the operands of an ``ltorch.cat`` along ``d`` are expanded, through

* an ``ltorch.cat`` along the same ``d`` that only such ``cat``s read, directly or through
  such slices (its operands, restricted to the range used; a buffer also read elsewhere,
  between two writes, stays a piece: it is computed anyway, and flattening through it
  would copy its pieces into every later buffer, ``O(T²)`` operands), and
* an ``ltorch.getitem`` that is a slice of step 1 along ``d`` only (``x[:, a:b]``: every
  other dimension kept whole, no tensor, int or ``None`` index), the same range of ``x``,

down to pieces of other values; adjacent pieces of one value are merged, and a piece that
is not a whole value is one new ``getitem`` slice. The ``cat`` becomes one ``cat`` of
those pieces: the last write's ``cat`` of a loop that filled ``x[:, 0] ... x[:, T-1]``
becomes ``cat([v0, ..., v(T-1)], 1)``, and the intermediate buffers, no longer read, are
erased, so the gradient is one ``split``. A buffer read between the writes keeps its own
(``cat``) value for that read, and the writes after it are a chain from it.

Exactness: the new ``cat`` holds element for element the values the old one held (each
piece is the same range of the same value: slices and ``cat`` only move elements), of the
same type, and the result keeps its SSA value (its layout as recorded by the frontend).
Only values are rewritten: a ``getitem`` or ``cat`` result the program uses elsewhere (a
view of the buffer, returned or written through) keeps its op. Only ``cat``s whose pieces
all have the result's dtype and device are rewritten (``cat`` promotes otherwise), only
static sizes, and only while a ``cat`` has at most `MAX_PIECES` pieces (beyond that it is
left as it was: a bound on the program's size, the ``O(T)`` chain of a very long loop).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.ir.core import SSAValues

from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects.base import build, from_attr
from thunder_ir.dialects.program import program_functions
from thunder_ir.dialects.traits import Creation, NoDerivative, kind_of
from thunder_ir.dialects.types import TensorType
from thunder_ir.passes.change import ReportsChange
from thunder_ir.passes.cse_dce import dce

MAX_PIECES = 512
"""The most pieces a rewritten ``cat`` takes (a longer expansion leaves the ``cat`` as is)."""

Piece = tuple[SSAValue, int, int]
"""A range ``[start, end)`` along the ``cat``'s dim of a value."""


def _static(t: object) -> TensorType | None:
    if not isinstance(t, TensorType) or not all(type(s) is int for s in t.sizes):
        return None
    return t


def _cat_dim(op: Operation | None) -> int | None:
    """The dim of an ``ltorch.cat`` of static sizes whose operands all have its rank
    (None: not one)."""
    if not isinstance(op, C.CatOp):
        return None
    t = _static(op.results[0].type)
    if t is None or not t.sizes:
        return None
    if not all((o := _static(x.type)) is not None and len(o.sizes) == len(t.sizes)
               for x in op.operands):
        return None  # (cat takes a 1-d empty tensor among others of any rank)
    d = 0 if op.dim is None else from_attr(op.dim)
    return d % len(t.sizes) if type(d) is int and -len(t.sizes) <= d < len(t.sizes) else None


def slice_along(op: Operation | None) -> tuple[int, int, SSAValue] | None:
    """``(d, a, x)`` when ``op`` is ``x[:, ..., a:b]`` of step 1 along ``d`` only (every
    dim of ``x`` before ``d`` a whole ``slice(None)``, those after left out)."""
    if not isinstance(op, C.GetitemOp) or op.indices or op.index is None:
        return None
    src = _static(op.input.type)
    if src is None:
        return None
    index = from_attr(op.index)
    items = index if isinstance(index, tuple) else (index,)
    if not items or len(items) > len(src.sizes):
        return None
    if not all(isinstance(s, slice) for s in items):
        return None
    if any(s != slice(None) for s in items[:-1]):
        return None
    last = items[-1]
    if not all(e is None or type(e) is int for e in (last.start, last.stop, last.step)):
        return None
    d = len(items) - 1
    a, _b, step = last.indices(src.sizes[d])
    if step != 1:
        return None
    return d, a, op.input


def _only_joined(v: SSAValue, d: int) -> bool:
    """Whether ``v`` is read only by ``cat``s along ``d``, directly or through slices
    along ``d`` that only such ``cat``s read: a buffer of a chain that nothing else
    reads, which dies once the ``cat``s reading it are flattened. (One read elsewhere, a
    buffer read between the writes, keeps it alive: flattening through it would copy its
    pieces into every later buffer, ``O(T²)`` operands for a loop that reads each step.)"""
    for use in v.uses:
        user = use.operation
        if _cat_dim(user) == d:
            continue
        found = slice_along(user)
        if found is None or found[0] != d or not all(
                _cat_dim(u.operation) == d for u in user.results[0].uses):
            return False
    return True


def _pieces(root: SSAValue, d: int, end: int) -> list[Piece] | None:
    """``root[..., 0:end]`` along ``d`` as pieces: through ``root``'s own operands, slices
    along ``d`` and the ``cat``s along ``d`` that only the chain reads (`_only_joined`),
    down to other values. None: nothing to flatten (no such ``cat`` met, no pieces
    merged), or more than `MAX_PIECES` pieces."""
    out: list[Piece] = []
    stack: list[Piece] = [(root, 0, end)]
    flattened = False
    while stack:
        v, lo, hi = stack.pop()
        if hi <= lo:
            continue
        op = v.owner if isinstance(v.owner, Operation) else None
        if _cat_dim(op) == d and (v is root or _only_joined(v, d)):
            assert op is not None
            flattened |= v is not root
            parts: list[Piece] = []
            at = 0
            for x in op.operands:
                n = x.type.sizes[d]  # type: ignore[attr-defined]
                if at < hi and at + n > lo:
                    parts.append((x, max(lo, at) - at, min(hi, at + n) - at))
                at += n
            stack.extend(reversed(parts))
            continue
        found = slice_along(op)
        if found is not None and found[0] == d and v is not root:
            stack.append((found[2], lo + found[1], hi + found[1]))
            continue
        if out and out[-1][0] is v and out[-1][2] == lo:
            out[-1] = (v, out[-1][1], hi)
            flattened = True
        else:
            out.append((v, lo, hi))
            if len(out) > MAX_PIECES:
                return None
    return out if flattened else None


def _piece_value(p: Piece, d: int, before: Operation, block: Block) -> SSAValue:
    v, lo, hi = p
    if lo == 0 and hi == v.type.sizes[d]:  # type: ignore[attr-defined]
        return v
    index = (*(slice(None),) * d, slice(lo, hi))
    op = build(C.GetitemOp, v, [], index=index)
    op.location = before.location
    block.insert_op_before(op, before)
    return op.results[0]


def _dropped_ok(op: C.CatOp, pieces: list[Piece], d: int) -> bool:
    """Whether every value the old ``cat`` read through its chain but the new one does not
    (a buffer overwritten in full) is made by a creation op or one with no derivative
    (``zeros_like``): such a value has no gradient, where dropping another would turn the
    zero gradient eager gives an overwritten tensor into none."""
    seen = {id(p[0]) for p in pieces}  # (kept, or already looked at)
    stack = list(op.operands)
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        owner = v.owner
        if _cat_dim(owner) == d or (slice_along(owner) or (None,))[0] == d:
            assert isinstance(owner, Operation)
            stack.extend(owner.operands[:1] if isinstance(owner, C.GetitemOp)
                         else owner.operands)
            continue
        if not (isinstance(owner, Operation) and (isinstance(kind_of(owner), Creation)
                                                  or owner.has_trait(NoDerivative))):
            return False
    return True


def _flatten(op: C.CatOp, block: Block, keep_gradients: bool) -> bool:
    d = _cat_dim(op)
    if d is None:
        return False
    t = op.results[0].type
    assert isinstance(t, TensorType)
    pieces = _pieces(op.results[0], d, t.sizes[d])
    olds = list(op.operands)
    if not pieces:
        return False
    for v, _, _ in pieces:
        vt = v.type
        if not (isinstance(vt, TensorType) and vt.dtype == t.dtype and vt.dev == t.dev
                and len(vt.sizes) == len(t.sizes)):
            return False
    if keep_gradients and not _dropped_ok(op, pieces, d):
        return False
    values = [_piece_value(p, d, op, block) for p in pieces]
    new = build(C.CatOp, values, dim=d)
    new.location = op.location
    assert new.results[0].type == t, (new.results[0].type, t)
    block.insert_op_before(new, op)
    # the new op takes over the old result value: its uses, name and recorded layout
    res = op.results[0]
    res.op = new
    new.results = op.results
    op.results = SSAValues(())
    block.erase_op(op)
    _erase_dead(olds)
    return True


def _erase_dead(values: list[SSAValue]) -> None:
    """Erases the ``getitem``s and ``cat``s left unused among ``values``' owners, and
    theirs in turn, so that an earlier buffer of a chain is dead when it is reached."""
    work = [v.owner for v in values]
    while work:
        op = work.pop()
        if (isinstance(op, C.CatOp | C.GetitemOp) and op.parent is not None
                and op.results[0].first_use is None):
            operands = [v.owner for v in op.operands]
            op.parent.erase_op(op)
            work.extend(operands)


def flatten_cat_chains(fn: func.FuncOp, keep_gradients: bool = True) -> int:
    """Rewrites the ``cat``s of ``fn``'s body, last first (so that a chain's earlier
    buffers, which only the later ones read, are erased before they are reached); returns
    how many. ``keep_gradients``: the program is differentiated after this pass, so no
    value that may have a gradient is dropped (`_dropped_ok`)."""
    block = fn.body.block
    n = 0
    for op in reversed(list(block.ops)):
        if op.parent is None or not isinstance(op, C.CatOp) or op.results[0].first_use is None:
            continue
        n += _flatten(op, block, keep_gradients)
    if n:
        dce(fn)
    return n


@dataclass(frozen=True)
class FlattenCatChainsPass(ReportsChange):
    """A buffer written slice by slice becomes one ``cat`` of its slices (module doc)."""

    name = "flatten-cat-chains"

    keep_gradients: bool = True
    """The program is differentiated later: values that may have a gradient are kept."""

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        return sum(flatten_cat_chains(fn, self.keep_gradients)
                   for fn in program_functions(op)) > 0


__all__ = ["MAX_PIECES", "FlattenCatChainsPass", "flatten_cat_chains", "slice_along"]
