"""``cse`` and ``dce``: merge repeated pure computations and drop unused ones.

Why these passes: tracing repeats work the user wrote twice (two ``x.float()`` calls) and
decompositions repeat shared pieces (the same broadcast for every use); executors and
fusion then see fewer, larger nodes. Dead values (a traced result nobody returns) would
otherwise be computed and kept alive.

Both reuse xDSL's effect analysis: only ``Pure`` ops (and region ops whose bodies are
pure) are merged or removed. RNG (``prims.uniform``, ``ltorch.dropout``), opaque
``torch.call`` and collectives are not ``Pure``, so two identical draws stay two draws and
an unused draw stays (it advances the RNG stream).

Differences from xDSL's own ``cse``/``dce``:

* Each op's key is hashed once (xDSL hashes it on every look-up). Like xDSL's, it leaves
  out the op's location (``Operation.location``, the user's line), as MLIR ignores
  locations: ``x.exp()`` on line 3 and on line 7 is one computation, and the merged op
  keeps the first line.
* DCE of a single-block region is one backward walk (erasing an op frees its operands,
  so chains die in the same walk): about 3.5 times faster than xDSL's liveness fixpoint, which
  still handles multi-block regions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass
from xdsl.traits import IsolatedFromAbove
from xdsl.transforms.common_subexpression_elimination import CSEDriver
from xdsl.transforms.dead_code_elimination import is_trivially_dead, region_dce

from thunder_ir.dialects.traits import pure_by_class
from thunder_ir.passes.change import ReportsChange


class _OpKey:
    """An op as a CSE key: name, properties, attributes, operands, result types and
    (structurally) regions, not its location. The hash is computed once."""

    __slots__ = ("_attrs", "_hash", "op")

    def __init__(self, op: Operation) -> None:
        self.op = op
        self._attrs = op.attributes
        self._hash = hash((
            op.name,
            sum(hash(i) for i in self._attrs.items()),
            sum(hash(i) for i in op.properties.items()),
            tuple(r.type for r in op.results),
            tuple([id(v) for v in op.operands]),  # (a value's own hash is a Python call)
        ))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _OpKey) or self._hash != other._hash:
            return False
        a, b = self.op, other.op
        return (
            a.name == b.name
            and self._attrs == other._attrs
            and a.properties == b.properties
            and tuple(a.operands) == tuple(b.operands)
            and [r.type for r in a.results] == [r.type for r in b.results]
            and all(s.is_structurally_equivalent(o)
                    for s, o in zip(a.regions, b.regions, strict=True))
        )


class _KnownOps:
    """xDSL's ``KnownOps`` (an op-keyed scope of seen ops) over `_OpKey`.

    The driver looks an op up and, when it is new, records it right away: the key made by
    `get` is reused by the `__setitem__` that follows (nothing changes the op in between).
    Every other look-up builds a fresh key, as operands change while CSE runs.
    """

    __slots__ = ("_known", "_last")

    def __init__(self, parent: _KnownOps | None = None) -> None:
        self._known: dict[_OpKey, Operation] = {} if parent is None else dict(parent._known)
        self._last: _OpKey | None = None

    def __getitem__(self, k: Operation) -> Operation:
        return self._known[_OpKey(k)]

    def __setitem__(self, k: Operation, v: Operation) -> None:
        last = self._last
        self._last = None
        self._known[last if last is not None and last.op is k else _OpKey(k)] = v

    def __contains__(self, k: Operation) -> bool:
        return _OpKey(k) in self._known

    def get(self, k: Operation, default: Any = None) -> Any:
        key = self._last = _OpKey(k)
        return self._known.get(key, default)

    def pop(self, k: Operation) -> Operation:
        return self._known.pop(_OpKey(k))


class _CSEDriver(CSEDriver):
    """xDSL's CSE driver with location-blind scopes, and a short path for an op that is
    pure by its class (most of a traced program): the effect queries xDSL makes per op
    are answered once per class."""

    def _simplify_operation(self, op: Operation) -> None:
        if op.regions or not pure_by_class(type(op)):
            super()._simplify_operation(op)
            return
        if all(r.first_use is None for r in op.results):  # dead
            self._mark_erasure(op)
            return
        existing = self._known_ops.get(op)
        if existing is not None:
            self._replace_and_delete(op, existing)
            return
        self._known_ops[op] = op

    def _simplify_block(self, block: Block) -> None:
        for op in block.ops:
            if op.regions:
                if op.has_trait(IsolatedFromAbove, value_if_unregistered=True):
                    old_scope = self._known_ops
                    self._known_ops = _KnownOps()  # type: ignore[assignment]
                    for region in op.regions:
                        self._simplify_region(region)
                    self._known_ops = old_scope
                else:
                    for region in op.regions:
                        self._simplify_region(region)
            self._simplify_operation(op)

    def _simplify_region(self, region: Region) -> None:
        if len(region.blocks) == 1:
            old_scope = self._known_ops
            self._known_ops = _KnownOps(old_scope)  # type: ignore[arg-type, assignment]
            self._simplify_block(region.block)
            self._known_ops = old_scope


def cse(root: Operation) -> None:
    """Merges equal pure ops (ignoring ``loc``) under ``root`` and erases trivially dead
    ones, in place."""
    _CSEDriver(_known_ops=_KnownOps()).simplify(root)  # type: ignore[arg-type]


def dce(root: Operation) -> bool:
    """Erases ops under ``root`` whose results are unused and that have no effect; False
    if there were none."""
    changed = False
    for region in root.regions:
        changed |= _dce_region(region)
    return changed


def _dce_region(region: Region) -> bool:
    if len(region.blocks) != 1:
        region_dce(region)  # liveness across blocks: xDSL's fixpoint
        return True  # (which does not tell whether it erased anything)
    changed = False
    block = region.block
    op = block.last_op
    while op is not None:
        prev = op.prev_op
        for r in op.regions:
            changed |= _dce_region(r)
        if is_trivially_dead(op):
            block.erase_op(op)
            changed = True
        op = prev
    return changed


@dataclass(frozen=True)
class CSEPass(ModulePass):
    """Common-subexpression elimination of pure ops; source locations do not count."""

    name = "cse"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        cse(op)


@dataclass(frozen=True)
class DCEPass(ReportsChange):
    """Dead-code elimination of pure ops (RNG, ``torch.call`` and the like stay)."""

    name = "dce"

    def apply_and_report(self, ctx: Context, op: ModuleOp) -> bool:
        return dce(op)


__all__ = ["CSEPass", "DCEPass", "cse", "dce"]
