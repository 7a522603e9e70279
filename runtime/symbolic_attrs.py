"""Numbers a module keeps (``self.step += 1``) as symbolic numbers: one program for every
value.

A plain ``int`` attribute of a module of the jitted tree is, by default, part of the module
guard's fingerprint (`thunder_ir.runtime.guards.module_guard`): the trace reads it as a
constant, and a new value compiles a new program. Automatic dynamic (``jit(cache="auto")``,
and ``"symbolic values"``) treats such an attribute as it treats an ``int`` argument: one
whose value changed between two calls that missed the cache is *symbolic* from then on
(`SymbolicAttrs.grow`), for the jitted callable's life:

* the module guard fingerprints it by its type alone (`thunder_ir.runtime.guards
  .SYMBOLIC_INT`), and the prologue reads its value into the key where an ``int``
  argument's would be (`thunder_ir.dialects.guard.AttrValueOp`): a new value misses the
  exact key, and `thunder_ir.runtime.dynamic.DynamicKey` finds the symbolic program (its
  shape guard checks the value), which is then stored under the exact key too;
* the attributes stand, for the miss path (`values`, the shape guard, `DynamicKey`), for
  leaves numbered after the call's own;
* tracing gives the module's copy a ``SymInt`` in its place
  (`thunder_ir.frontend.tracer.trace_program`'s ``attrs``), which is a program input of its
  own, read from the module on each call (`thunder_ir.runtime.origins.ModuleAttr`);
* what user code writes back (``self.step = self.step + 1``: ``s0 + 1``) is computed by the
  epilogue from this call's values (`thunder_ir.runtime.pystate` ``("sym", ...)``
  templates), not a constant of the trace.

An ``int`` field of a plain object a module of the tree holds (one level:
``self.mem.calls += 1``) is such an attribute too (`int_attrs`, labelled
``self.mem.calls``): its object stands where the module would (the prologue reads it
there); the module guard fingerprints the field by its type inside the object's
fingerprint (`thunder_ir.runtime.guards.fields_key`'s ``object_ints``); tracing puts the
``SymInt`` in the object's shadow (`thunder_ir.frontend.pystate.Recorder.inputs`); the
epilogue writes the field back. The object is held by identity: a new one compiles again.

Values 0 and 1 stay in the key (a program of their own each, as for sizes and ``int``
arguments), and so do negative values. ``cache="static"`` keeps every attribute a guarded
constant. A compile that cannot be symbolic falls back to one for the call's values, keyed
by them exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from thunder_ir.runtime.guards import MODULE_FIELDS
from thunder_ir.runtime.pystate import Action, plain_object


@dataclass(frozen=True, eq=False)
class SymbolicAttr:
    """One symbolic ``int`` attribute: ``module.name``, shown as ``label``
    (``self.block.step``)."""

    module: torch.nn.Module
    name: str
    label: str


def int_attrs(root: torch.nn.Module) -> dict[tuple[int, str], tuple[SymbolicAttr, int]]:
    """Every plain ``int`` attribute (not ``bool``) of the modules of ``root``'s tree, by
    (module id, name): the attribute and its value."""
    out: dict[tuple[int, str], tuple[SymbolicAttr, int]] = {}
    for path, m in root.named_modules(prefix="self"):
        for k, v in m.__dict__.items():
            if type(v) is int and k not in MODULE_FIELDS:
                out[(id(m), k)] = (SymbolicAttr(m, k, f"{path}.{k}"), v)
            elif k not in MODULE_FIELDS and plain_object(v):
                for f, n in vars(v).items():  # (a plain object it holds: one level)
                    if type(n) is int and type(f) is str:
                        out.setdefault((id(v), f), (SymbolicAttr(v, f, f"{path}.{k}.{f}"), n))
    return out


def holders(root: torch.nn.Module) -> set[int]:
    """The ids of the modules of ``root``'s tree and of the plain objects they hold (whose
    ``int`` fields may be symbolic too)."""
    out: set[int] = set()
    for m in root.modules():
        out.add(id(m))
        out.update(id(v) for k, v in m.__dict__.items()
                   if k not in MODULE_FIELDS and plain_object(v))
    return out


class SymbolicAttrs:
    """The symbolic ``int`` attributes of one jitted module tree (see the module doc).

    Attributes:
        attrs: the symbolic attributes, in the order they became so (never removed: each
            is a leaf of the miss path, numbered after the call's own leaves).
        by_module: module id -> the names of its symbolic attributes; the module guard
            reads this dict (`thunder_ir.runtime.guards.module_guard`'s ``ints``).
    """

    def __init__(self, root: torch.nn.Module) -> None:
        self.root = root
        self.attrs: list[SymbolicAttr] = []
        self.by_module: dict[int, frozenset[str]] = {}
        self._seen: dict[tuple[int, str], tuple[SymbolicAttr, int]] | None = None
        self._tree: tuple[int, set[int]] = (-1, set())

    def grow(self, free: Mapping[int, Any] | None = None) -> bool:
        """At a miss: every ``int`` attribute whose value differs from the one it had at
        the previous miss becomes symbolic, but those ``free`` names (per module id:
        written before read, not in the key, `thunder_ir.runtime.free_attrs`). Returns
        whether one did (the caller then invalidates the module guard and its
        prologues)."""
        now = int_attrs(self.root)
        before, self._seen = self._seen, now
        if before is None:
            return False
        grown = False
        self._tree = (-1, set())  # (a new attribute's module: read on the next walk)
        for key, (attr, value) in now.items():
            old = before.get(key)
            if old is None or old[1] == value or attr.name in self.by_module.get(key[0], ()) \
                    or (free and attr.name in free.get(key[0], ())):
                continue
            self.attrs.append(attr)
            self.by_module[key[0]] = self.by_module.get(key[0], frozenset()) | {attr.name}
            grown = True
        return grown

    def writes_only_ints(self, actions: Sequence[Action]) -> bool:
        """Whether an epilogue writes nothing but symbolic attributes, each an ``int``
        (a constant, or a symbolic number that is no ``float(...)``): it leaves the module
        guard's fingerprint as it was, so the guard need not re-read the tree after it
        (`thunder_ir.runtime.guards.StateGuard.resync`)."""
        return bool(actions) and all(
            a.op == "setattr" and a.target[0] == "obj"
            and a.key in self.by_module.get(id(a.target[1]), ())
            and ((a.value[0] == "const" and type(a.value[1]) is int)
                 or (a.value[0] == "sym" and not a.value[1].startswith("float(")))
            for a in actions)

    def prologue_attrs(self) -> list[tuple[int, str, str]]:
        """``(i, label, name)`` of each attribute the key reads now, for
        `thunder_ir.runtime.prologue.make_prologue` (with `modules`): those that are
        ``int``s of a module of the tree (a prologue is built for the tokens the module
        guard gives, which change when one is deleted, holds another type or leaves the
        tree)."""
        return [(i, a.label, a.name) for i, (a, v) in enumerate(zip(self.attrs, self.values()))
                if type(v) is int]

    def modules(self) -> list[torch.nn.Module]:
        """The module of each attribute (the prologue's ``m<i>``)."""
        return [a.module for a in self.attrs]

    def values(self, tree_token: int = -1) -> list[Any]:
        """Their values now (the leaves they stand for on the miss path): None for one
        that is not set, or whose module left the tree (``tree_token``: the module
        guard's token, which changes with the tree; the tree is walked once per token)."""
        if not self.attrs:
            return []
        if tree_token < 0 or self._tree[0] != tree_token:
            self._tree = (tree_token, holders(self.root))
        tree = self._tree[1]
        return [a.module.__dict__.get(a.name) if id(a.module) in tree else None
                for a in self.attrs]


__all__ = ["SymbolicAttr", "SymbolicAttrs", "holders", "int_attrs"]
