"""``schedule-collectives``: waits as late as possible, all-gathers one ahead.

Tracing and autodiff place each collective where its value is made: a ``dist.wait`` right
after its start. This pass moves them so that communication overlaps computation, in
every function of the program:

* each ``dist.wait`` (with the views of its result that only reshape or slice it) moves
  down to just before the first op that uses it;
* the all-gathers start one computation ahead: those read by the k-th op that computes
  with gathered values start just before the waits of those the (k-1)-th reads (layer
  i+1's weight and bias travel while layer i computes; two layers' parameters at most
  are in flight), or where their operand is made if that is later;
* the other collectives (a gradient's reduce-scatter or all-reduce) start right after
  their operand is made, with the pure ops that only lay it out (pad, reshape, cat,
  slice): autodiff emits a gathered parameter's reduce-scatter where the backward sweep
  reaches the gather, at the end; hoisted, it overlaps the rest of the backward.

Every process runs the same program, so the collectives start in the same order on all of
them, as ``torch.distributed`` requires. Waits that nothing uses stay where they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from thunder_ir.dialects import dist, prims
from thunder_ir.dialects.program import program_functions

LAYOUT_OPS = frozenset({"prims.slice", "prims.reshape", "ltorch.reshape", "ltorch.split",
                        "ltorch.getitem"})
"""Single-operand ops that only lay a waited buffer out as the values used (a bucket's
reshape and split, a padding's slice): they move with their wait."""


def _lays_out(op: Operation) -> bool:
    return op.name in LAYOUT_OPS and len(op.operands) == 1


def _sinks(op: Operation, sinking: set[Operation]) -> bool:
    """A wait, or a layout op of a value a sinking op makes."""
    if isinstance(op, dist.WaitOp):
        return True
    return _lays_out(op) and op.operands[0].owner in sinking


def sink_waits(block: Block) -> int:
    """Moves each wait (and the views of its result) to just before its first use."""
    ops = list(block.ops)
    sinking = {op for op in ops if _sinks(op, set())}
    for op in ops:  # views of sinking values sink with them
        if op not in sinking and _sinks(op, sinking):
            sinking.add(op)
    moved = 0
    for op in reversed(ops):
        if op not in sinking:
            continue
        users = [u.operation for r in op.results for u in r.uses
                 if u.operation.parent_block() is block]
        if not users:
            continue
        order = {o: i for i, o in enumerate(block.ops)}
        first = min(users, key=order.__getitem__)
        if op.next_op is first:
            continue
        op.detach()
        block.insert_op_before(op, first)
        moved += 1
    return moved


def _consumer(wait: Operation) -> Operation | None:
    """The first op that computes with a wait's result (through the views of it)."""
    found: list[Operation] = []
    todo = [wait]
    while todo:
        op = todo.pop()
        for r in op.results:
            for use in r.uses:
                user = use.operation
                if _lays_out(user):
                    todo.append(user)
                else:
                    found.append(user)
    block = wait.parent_block()
    if not found or block is None:
        return None
    order = {o: i for i, o in enumerate(block.ops)}
    return min((u for u in found if u in order), key=order.__getitem__, default=None)


def prefetch_gathers(block: Block) -> int:
    """Starts the all-gathers one computation ahead: those whose results the k-th
    computing op reads start just before the waits of those the (k-1)-th reads (the first
    group at the top), or where their operand is made if that is later. Returns how many
    moved."""
    order = {o: i for i, o in enumerate(block.ops)}
    waits = [op for op in block.ops if isinstance(op, dist.WaitOp)
             and isinstance(op.operands[0].owner, dist.AllGatherOp)]
    groups: dict[Operation | None, list[Operation]] = {}
    for w in waits:
        groups.setdefault(_consumer(w), []).append(w)
    ordered = sorted(groups.values(), key=lambda ws: min(order[w] for w in ws))
    moved = 0
    previous: Operation | None = block.first_op
    for ws in ordered:
        first_wait = min(ws, key=order.__getitem__)
        for w in sorted(ws, key=order.__getitem__):
            start = w.operands[0].owner
            assert isinstance(start, Operation)
            anchor = previous
            made = start.operands[0].owner
            if isinstance(made, Operation) and made.parent_block() is block and (
                    anchor is None or order[made] >= order[anchor]):
                anchor = made.next_op
            if anchor is None or anchor is start or start.next_op is anchor:
                continue
            start.detach()
            block.insert_op_before(start, anchor)
            order = {o: i for i, o in enumerate(block.ops)}
            moved += 1
        previous = first_wait
    return moved


_MOVABLE = (prims.PadOp, prims.ReshapeOp, prims.CatOp, prims.SliceOp)
"""Pure ops that only lay a collective's operand out (a gradient padded for a
reduce-scatter, flattened and joined into a bucket): they move with their collective."""


def hoist_starts(block: Block) -> int:
    """Starts each collective other than an all-gather (a gradient's reduce-scatter or
    all-reduce) right after its operand is made, moving the ops that only lay that operand
    out with it. Returns how many moved."""
    moved = 0

    def hoist(op: Operation) -> None:
        nonlocal moved
        for v in op.operands:
            owner = v.owner
            if isinstance(owner, _MOVABLE) and owner.parent_block() is block and \
                    v.has_one_use():
                hoist(owner)
        order = {o: i for i, o in enumerate(block.ops)}
        owners = [v.owner for v in op.operands
                  if isinstance(v.owner, Operation) and v.owner.parent_block() is block]
        if owners:
            anchor = max(owners, key=order.__getitem__).next_op
        else:
            anchor = block.first_op
        if anchor is None or anchor is op or op.next_op is anchor:
            return
        if order[anchor] > order[op]:
            return  # already as early as it can be
        op.detach()
        block.insert_op_before(op, anchor)
        moved += 1

    for op in [o for o in block.ops if isinstance(o, dist.CollectiveOp)
               and not isinstance(o, dist.AllGatherOp)]:
        hoist(op)
    return moved


@dataclass(frozen=True)
class ScheduleCollectivesPass(ModulePass):
    """Waits as late as possible, all-gathers prefetched one ahead (see the module doc)."""

    name = "schedule-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in program_functions(op):
            assert isinstance(fn, func.FuncOp)
            block = fn.body.block
            hoist_starts(block)
            sink_waits(block)
            prefetch_gathers(block)


__all__ = ["LAYOUT_OPS", "ScheduleCollectivesPass", "hoist_starts", "prefetch_gathers",
           "sink_waits"]
