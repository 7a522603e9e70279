"""Snapshots of IR for traces: an eager copy (`snapshot`) and a frozen record (`freeze`).

A `Trace` keeps the IR a pass left, while later passes go on rewriting the module in
place, so it needs a copy. Most traces are never read (``last_traces`` is for people and
tests), so the pipeline records `freeze`'s form: one tuple per op holding what a copy
needs (class, properties, attributes, location, result types and names, operands as
numbers of the values defined before them, nested regions). `FrozenIR.thaw` builds the
xDSL IR from it when a trace is first read. Recording costs about 2 µs an op, against
5 µs for building the copy at once (measured on the Llama-style training program,
``docs/passes.md``).

Both forms create each op once with its final operands, where xDSL's ``clone()`` creates
it bare and sets its operands in a second walk. IR with block successors or multi-block
regions (where a use may precede its definition in walk order) takes xDSL's clone.
"""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue

from thunder_ir.dialects.construct import new_op


class _GenericCloneNeeded(Exception):
    pass


def snapshot(module: ModuleOp) -> ModuleOp:
    """A deep copy of ``module`` (a third cheaper than ``module.clone()``)."""
    try:
        return _clone_op(module, {})  # type: ignore[return-value]
    except _GenericCloneNeeded:
        return module.clone()


def snapshot_function(fn: Operation) -> ModuleOp:
    """A deep copy of one function of a module, as a module of its own (see `snapshot`)."""
    try:
        return ModuleOp([_clone_op(fn, {})])
    except _GenericCloneNeeded:
        return ModuleOp([fn.clone()])


def clone_op(op: Operation, mapper: dict[SSAValue, SSAValue]) -> Operation:
    """``op.clone(value_mapper=mapper)``: a copy of ``op`` reading ``mapper[v]`` for each
    operand ``v`` it maps, whose results (and blocks' arguments) ``mapper`` then maps to
    the copy's, in a third of the time."""
    try:
        return _clone_op(op, mapper)
    except _GenericCloneNeeded:
        return op.clone(value_mapper=mapper)


def _clone_op(op: Operation, mapper: dict[SSAValue, SSAValue]) -> Operation:
    if op.successors:
        raise _GenericCloneNeeded
    regions = []
    for region in op.regions:
        if len(region.blocks) > 1:
            raise _GenericCloneNeeded
        new_region = Region()
        for block in region.blocks:
            new_block = Block(arg_types=block.arg_types)
            for a, na in zip(block.args, new_block.args, strict=True):
                mapper[a] = na
                if a.name_hint is not None:
                    na.name_hint = a.name_hint
            for inner in block.ops:
                new_block.add_op(_clone_op(inner, mapper))
            new_region.add_block(new_block)
        regions.append(new_region)
    get = mapper.get
    new = new_op(type(op), [get(v, v) for v in op.operands], [r.type for r in op.results],
                 dict(op.properties), dict(op.attributes), op.location, regions,
                 defaults=False)
    for r, nr in zip(op.results, new.results, strict=True):
        mapper[r] = nr
        if r.name_hint is not None:
            nr.name_hint = r.name_hint
    return new


# --------------------------------------------------------------------------- frozen form

_Record = tuple[Any, ...]
"""The ops of one block, flat: per op its class; the number of properties, then name and
value of each; the same for attributes; the number of operands, then each (the number
of a value in definition order, an int, or for a value defined outside the frozen op,
the value itself); the number of results, then type and name hint of each; its
location; and its regions, None or a tuple of blocks ``(arg_types, arg_names, ops)``
whose ops are records of this form.

One tuple per block, not a few per op: what the pipeline records stays alive with
``last_traces``, and Python's collector runs a full collection (100 ms and more in a
process with torch) once the objects that outlive young collections number a quarter of
those that outlived the last full one. Tuples of tuples per op made a first training
step cross that line."""


class FrozenIR:
    """A function's (or module's) IR as `freeze` recorded it; `thaw` builds it."""

    __slots__ = ("_module", "_record")

    def __init__(self, record: _Record | None, module: ModuleOp | None = None) -> None:
        self._record = record
        self._module = module  # the generic clone, when the IR needed one

    def thaw(self) -> ModuleOp:
        """A new module holding the recorded IR (each call builds a new one)."""
        if self._module is not None:
            return self._module.clone()
        assert self._record is not None
        ops: list[Operation] = []
        _thaw(self._record, [], ops.append)
        op = ops[0]
        return op if isinstance(op, ModuleOp) else ModuleOp([op])


def freeze(op: Operation) -> FrozenIR:
    """What `FrozenIR.thaw` needs to rebuild ``op`` (a module, or a function that thaws
    as a module of its own), recorded without creating any IR."""
    out: list[Any] = []
    try:
        _freeze(op, {}, out)
    except _GenericCloneNeeded:
        return FrozenIR(None, op.clone() if isinstance(op, ModuleOp) else ModuleOp([op.clone()]))
    return FrozenIR(tuple(out))


def _freeze(op: Operation, index: dict[int, int], out: list[Any]) -> None:
    # (`_successors` and `_operands` are the tuples behind xDSL's views of them: a third
    # of the cost of reading through the views, at a few million reads a second; values
    # are numbered by ``id``, alive in the IR meanwhile: xDSL hashes a value by a Python
    # call)
    if op._successors:
        raise _GenericCloneNeeded
    regions = None
    if op.regions:
        frozen_regions = []
        for region in op.regions:
            if len(region.blocks) > 1:
                raise _GenericCloneNeeded
            blocks = []
            for block in region.blocks:
                args = block.args
                for a in args:
                    index[id(a)] = len(index)
                inner: list[Any] = []
                for nested in block.ops:
                    _freeze(nested, index, inner)
                blocks.append((block.arg_types, tuple([a.name_hint for a in args]),
                               tuple(inner)))
            frozen_regions.append(tuple(blocks))
        regions = tuple(frozen_regions)
    add, extend = out.append, out.extend
    add(type(op))
    props = op.properties
    add(len(props))
    for item in props.items():
        extend(item)
    attrs = op.attributes
    add(len(attrs))
    for item in attrs.items():
        extend(item)
    operands = op._operands
    add(len(operands))
    get = index.get
    extend([get(id(v), v) for v in operands])
    results = op.results
    add(len(results))
    for r in results:
        index[id(r)] = len(index)
        add(r.type)
        add(r.name_hint)
    add(op.location)
    add(regions)


def _thaw(record: _Record, values: list[SSAValue], add: Any) -> None:
    """Builds the ops of ``record`` (one block's), handing each to ``add`` in order."""
    i, n = 0, len(record)
    while i < n:
        cls = record[i]
        k = record[i + 1]
        i += 2
        props = {record[j]: record[j + 1] for j in range(i, i + 2 * k, 2)}
        i += 2 * k
        k = record[i]
        i += 1
        attrs = {record[j]: record[j + 1] for j in range(i, i + 2 * k, 2)}
        i += 2 * k
        k = record[i]
        i += 1
        operands = record[i:i + k]
        i += k
        k = record[i]
        i += 1
        types, names = record[i:i + 2 * k:2], record[i + 1:i + 2 * k:2]
        i += 2 * k
        location, frozen_regions = record[i], record[i + 1]
        i += 2
        regions = []
        for blocks in frozen_regions or ():
            region = Region()
            for arg_types, arg_names, ops in blocks:
                block = Block(arg_types=arg_types)
                for a, name in zip(block.args, arg_names, strict=True):
                    values.append(a)
                    if name is not None:
                        a.name_hint = name
                _thaw(ops, values, block.add_op)
                region.add_block(block)
            regions.append(region)
        new = new_op(cls, [values[v] if type(v) is int else v for v in operands], types,
                     props, attrs, location, regions, defaults=False)
        for r, name in zip(new.results, names, strict=True):
            values.append(r)
            if name is not None:
                r.name_hint = name
        add(new)


__all__ = ["FrozenIR", "clone_op", "freeze", "snapshot", "snapshot_function"]
