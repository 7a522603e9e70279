"""The program cache: compiled programs by key, and the ways a miss may still find one.

Besides the keyed entries (`thunder_ir.runtime.cache.Cache`, LRU), a miss looks in two
places before compiling: programs whose trace made no decision by layout, by their key
without layouts (a transposed argument after a contiguous one runs the same program), and
symbolic programs by dynamic key, the first whose shape guard holds for the call
(`thunder_ir.runtime.dynamic`). Speculation variants hang off their entry
(``Entry.variant``).
"""

from __future__ import annotations

import warnings
from typing import Any

from thunder_ir.frontend import TracedProgram
from thunder_ir.runtime.cache import CACHE_CAPACITY, RECOMPILE_LIMIT, Cache, Entry
from thunder_ir.runtime.dynamic import Dynamic, dynamic_key, holding, key_positions
from thunder_ir.runtime.layout_key import Mask, mask_of, relax, state_loc
from thunder_ir.runtime.pins import key_difference
from thunder_ir.runtime.prologue import Prologue
from thunder_ir.stages.reasons import Reasons


class ProgramCache:
    """One jitted callable's programs (see the module doc).

    Attributes:
        cache: the keyed entries, hit and miss counts, and the last entry that ran.
        layout_free: programs whose trace read no layout, by their key without layouts.
        shape_entries: symbolic programs by dynamic key.
        compiles: how many programs were compiled (the recompile warning past
            `RECOMPILE_LIMIT`).
    """

    def __init__(self) -> None:
        self.cache = Cache()
        self.layout_free: dict[Any, Entry] = {}
        self.shape_entries: dict[Any, list[Entry]] = {}
        self.masks: list[Mask] = []
        """The layouts each program read (`thunder_ir.runtime.layout_key`), one each."""
        self.relaxed: dict[Any, list[Entry]] = {}
        """Programs by ``(mask, key)``, the key (for a symbolic one, its dynamic key) with
        the layouts its trace did not read relaxed."""
        self.compiles = 0
        self.warned = False
        self.reasons = Reasons()
        """Why each compile after the first compiled (`thunder_ir.compile_reasons`)."""

    def without_layouts(self, pro: Prologue, key: Any, leaves: list[Any]) -> Entry | None:
        """A program whose trace read no layout, or not the layouts that differ, for a
        call that missed by layout alone (entered under ``key`` when found)."""
        entry = self.layout_free.get(pro.layout_free(leaves)) if self.layout_free else None
        if entry is None and self.masks:
            found = [e for mask in self.masks
                     for e in self.relaxed.get((mask, self._relax(pro, key, mask)), ())
                     if e.shape_guard is None]
            entry = found[0] if found else None
        if entry is not None:  # the same program: its trace read no layout that differs
            self.cache.insert(key, entry, alias=True)
        return entry

    def _add_relaxed(self, key: Any, entry: Entry, pro: Prologue, dynamic: Dynamic,
                     mask: Mask) -> None:
        """Enters a program under its key relaxed by the layouts its trace read."""
        if mask not in self.masks:
            if len(self.masks) >= MAX_MASKS:  # (a miss tries each: a few)
                return
            self.masks.append(mask)
        if len(self.relaxed) >= CACHE_CAPACITY:
            self.relaxed.clear()
        relaxed = self._relax(pro, key, mask)
        if entry.shape_guard is not None:
            relaxed = dynamic_key(pro, dynamic, relaxed)
        self.relaxed.setdefault((mask, relaxed), []).append(entry)

    def _relax(self, pro: Prologue, key: Any, mask: Mask) -> Any:
        if pro.positions is None:
            pro.positions = key_positions(pro.ir)
        return relax(key, pro.positions, mask, _state_leaves(pro))

    def symbolic(self, pro: Prologue, key: Any, dynamic: Dynamic, leaves: list[Any],
                 name: str, failures: list[str]) -> Entry | None:
        """A symbolic program whose shape guard holds for this call, if one was compiled
        (one whose guard cannot be evaluated is dropped, with a warning)."""
        found = self.shape_entries.get(dynamic_key(pro, dynamic, key), [])
        before = list(found)
        entry: Entry | None = holding(found, leaves, name, failures)
        dropped = [e for e in before if e not in found]  # (a guard that cannot answer)
        self._purge(dropped)
        for mask in self.masks if entry is None else ():
            found = self.relaxed.get(
                (mask, dynamic_key(pro, dynamic, self._relax(pro, key, mask))), [])
            before = list(found)
            entry = holding(found, leaves, name, failures)
            self._purge([e for e in before if e not in found])
            if entry is not None:
                break
        return entry

    def _purge(self, dropped: list[Entry]) -> None:
        """Takes programs whose shape guard cannot answer out of every list that holds
        them (a program is under its dynamic key and under its relaxed one)."""
        if not dropped:
            return
        for lists in (self.shape_entries, self.relaxed):
            for found in lists.values():
                found[:] = [e for e in found if not any(e is d for d in dropped)]

    def unblanked(self, pro: Prologue, key: Any, dynamic: Dynamic) -> list[str]:
        """Where a call found no symbolic program under its dynamic key but one is stored
        under a key that differs from it in a part or two that are not an argument's
        own, a module attribute's, the guards' or a mode's (`_NOT_SIZES_PARTS`): those
        parts, by label (they change with the sizes; see
        `thunder_ir.runtime.pins.key_difference`)."""
        labels = pro.labels
        if not self.shape_entries or len(labels) != len(key):  # (unlabelled: no guess)
            return []
        dkey = dynamic_key(pro, dynamic, key)
        parts = key_difference(dkey, list(self.shape_entries), labels)
        return [p for p in parts if p not in _NOT_SIZES
                and (not any(w in p for w in _NOT_SIZES_PARTS) or "' ." in p)]

    def add(self, key: Any, entry: Entry, pro: Prologue, dynamic: Dynamic,
            traced: TracedProgram, leaves: list[Any], name: str) -> None:
        """Enters a compiled program under ``key`` (a symbolic one by its dynamic key too;
        one whose trace read no layout by its key without layouts)."""
        if entry.shape_guard is not None:
            assert dynamic
            self.shape_entries.setdefault(dynamic_key(pro, dynamic, key), []).append(entry)
        restrides = _restrides(entry)
        if not traced.layout_read and not restrides:
            if len(self.layout_free) >= CACHE_CAPACITY:
                self.layout_free.clear()
            self.layout_free[pro.layout_free(leaves)] = entry
        reads = traced.layout_reads
        if reads is not None and not reads.every and not restrides and not entry.speculative:
            self._add_relaxed(key, entry, pro, dynamic, mask_of(reads, traced.input_kinds))
        if self.compiles:  # (a reason `explain` found for this miss; none for the first)
            self.reasons.record(entry, name)
        self.compiles += 1
        if self.compiles > RECOMPILE_LIMIT and not self.warned:
            self.warn_recompiles(key, pro, name)
        self.cache.insert(key, entry)

    def warn_recompiles(self, key: Any, pro: Prologue, name: str) -> None:
        """Warns, once, that ``name`` keeps compiling, naming the key part that changed."""
        self.warned = True
        what = "of a change in its inputs or the state it reads"
        prev = next(reversed(self.cache.entries), None)
        if self.reasons.log:  # the last compile's reason (`thunder_ir.compile_reasons`)
            what = f"of this change: {self.reasons.log[-1]}"
        elif isinstance(prev, tuple) and len(prev) == len(key):
            for label, old, new in zip(pro.labels, prev, key):
                if old != new:
                    what = f"of a change in {label} ({_shown(old)} -> {_shown(new)})"
                    break
        warnings.warn(
            f"thunder_ir.jit: {name} has compiled {self.compiles} programs; the last one "
            f"because {what} (thunder_ir.compile_reasons lists every "
            "compile's). A value that changes on every call, such as a "
            "step counter passed as a Python number, compiles a new program each time where "
            "it cannot be symbolic (cache='static', or a use of it that fixes its value; "
            "see symbolic_failures): pass it as a tensor (torch.tensor(step)) instead. The "
            f"cache keeps the {CACHE_CAPACITY} most recently used programs.", stacklevel=5)


MAX_MASKS = 8
"""The most sets of layout reads a callable's programs are relaxed by (each costs a miss a
lookup)."""

_NOT_SIZES = frozenset({"grad mode", "inference mode", "the default dtype",
                        "deterministic algorithms", "the default device", "autocast"})
"""Key parts that change by a mode, never with the sizes."""

_NOT_SIZES_PARTS = ("argument '", "module attribute", "argument structure")
"""Key parts (by label) that change by a value of their own: an argument's metadata or
an ``int``'s value 0 or 1, a module ``int`` attribute's, the guards' tokens. (A field
inside an argument object, ``argument 'cache' .scale``, is reported: an object's sizes
are dynamic, and so are its ``int`` fields that change, `thunder_ir.runtime.object_ints`,
but not its other numbers.)"""


def _state_leaves(pro: Prologue) -> dict[int, Any]:
    """The leaves the prologue numbers after the arguments for the rebound states whose
    metadata it reads (`key_positions`), as `state_loc`s."""
    from thunder_ir.dialects import guard as G
    from thunder_ir.dialects.program import prologue_function

    fn = prologue_function(pro.ir)
    if fn is None:
        return {}
    block = fn.body.block
    n = len(block.args)
    return {n + op.index.value.data: state_loc(pro.modules[op.index.value.data], op.attr.data,
                                               op.buffer is not None,
                                               op.item.data if op.item is not None else None)
            for op in block.ops if isinstance(op, G.AttrMetaOp)}


def _restrides(entry: Entry) -> bool:
    """Whether the program restrides results to the layout eager's had for the traced
    inputs (`thunder_ir.passes.restride`): then it serves those layouts only."""
    from thunder_ir.dialects.torch import CallOp
    from thunder_ir.passes.restride import RESTRIDE

    return any(isinstance(op, CallOp) and op.callee.data == RESTRIDE
               for op in entry.traces[-1].ir.walk())


def _shown(v: Any) -> str:
    """A key part, as a warning shows it: a value's repr (without its type tag)."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], type):
        v = v[1]
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


__all__ = ["ProgramCache"]
