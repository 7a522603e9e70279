"""Module attributes that ``forward`` writes before it reads them: not part of the key.

A module that writes a Python value into its own state on every call (``self.last =
y.item()``, ``self.aux = 0.5 * loss.item()``, ``self.count = int(n.item())``, a string, a
number computed from sizes) would compile on every call: the module guard
(`thunder_ir.runtime.guards.module_guard`) fingerprints every plain attribute's value, and
the epilogue writes a new one after each call. But a program whose trace wrote such an
attribute before reading it (or never read it) does not depend on its value: eager's
code, run on any value there, does what the trace did. So, for the jitted callable's life:

* the names an epilogue writes (a ``setattr`` or ``delattr`` of a plain attribute of a
  module of the tree, with anything but a tensor: tensors are rebound state,
  `thunder_ir.runtime.rebound`) are *watched* by every later trace
  (`thunder_ir.frontend.attr_reads`), which reports those it read before writing them
  (`learn_writes`, `settle`);
* a name that a watching trace did not read first is *free* (`by_module`, which the module
  guard reads as names to leave out of the fingerprint, value, type and presence alike:
  nothing of it determines the program) until some trace reads it first; then it is
  guarded by value for good (``read_first``), and the guard's fingerprints change shape,
  so the programs keyed while it was free are not found again;
* the names ``forward``'s own code assigns (`forward_stores`) are watched from the first
  trace on; a static compile that learns another written name traces again at once,
  watching it
  (`thunder_ir.stages.compiler.Compiler`), and keys its program with the name free where
  the trace did not read it: such a module compiles once for every value written.

What forward reads from the module is the current value: a program that read it first is
keyed by it. A free attribute that the epilogue writes leaves the guard's token as it was
(`writes_only_free`), so a cached call does not re-read the module tree.

Where a miss comes from a plain attribute's value (one forward reads), `FreeAttrs.miss`
names it for ``compile_status(...)["static"]``.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from thunder_ir.runtime.guards import MODULE_FIELDS, StateGuard
from thunder_ir.runtime.pystate import Action

_VALUE_KINDS = frozenset({"const", "sym", "sym_out", "list", "tuple", "dict", "new"})
"""Value templates of a write that can free its attribute: what the program computes or
makes, not a tensor the call passes (``ref``) or outputs (``out``: rebound state)."""


_STORES: dict[type, frozenset[str]] = {}


def forward_stores(cls: type) -> frozenset[str]:
    """The attribute names that ``cls.forward``'s code (and code nested in it) assigns or
    deletes (``self.last = ...``), but a module's bookkeeping fields: watched from the
    first trace on, so that a first compile need not trace again to learn whether they
    are read first (cached per class)."""
    names = _STORES.get(cls)
    if names is None:
        found: set[str] = set()
        code = getattr(getattr(cls, "forward", None), "__code__", None)
        todo = [code] if isinstance(code, types.CodeType) else []
        while todo:
            c = todo.pop()
            found.update(i.argval for i in dis.get_instructions(c)
                         if i.opname in ("STORE_ATTR", "DELETE_ATTR"))
            todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        names = _STORES[cls] = frozenset(found) - MODULE_FIELDS
    return names


def _plain_write(a: Action) -> bool:
    """Whether ``a`` sets or deletes an attribute with something other than a tensor."""
    if a.op == "delattr":
        return True
    if a.op != "setattr" or type(a.value) is not tuple or not a.value:
        return False
    kind = a.value[0]
    return kind in _VALUE_KINDS and not (kind == "const" and isinstance(a.value[1],
                                                                        torch.Tensor))


class FreeAttrs:
    """The watched and free plain attributes of one jitted module tree (see the module
    doc).

    Attributes:
        written: module id -> the names some epilogue wrote (watched by later traces,
            but those read first).
        read_first: module id -> the names some watching trace read before writing them
            (guarded by value for good).
        by_module: module id -> the free names (watched, never read first); the module
            guard reads this dict.
    """

    def __init__(self, root: torch.nn.Module) -> None:
        self.root = root
        self.written: dict[int, frozenset[str]] = {}
        self.read_first: dict[int, frozenset[str]] = {}
        self.by_module: dict[int, frozenset[str]] = {}
        self._miss_token = -1
        self._noted: set[str] = set()
        self._held: dict[int, torch.nn.Module] = {}
        """The modules named here by id (kept: their ids must not be reused)."""

    def watch(self) -> dict[int, frozenset[str]]:
        """Per module (by id), the names a trace watches: written (by an epilogue, or by
        an assignment in its class's ``forward``: `forward_stores`) and not read first."""
        out = {}
        for m in self.root.modules():
            k = id(m)
            names = self.written.get(k, frozenset()) | forward_stores(type(m))
            left = names - self.read_first.get(k, frozenset())
            if left:
                out[k] = left
        return out

    def learn_writes(self, epilogue: Sequence[Action],
                     watched: Mapping[int, tuple[frozenset[str], frozenset[str]]]) -> bool:
        """After a trace: the plain attributes its epilogue writes are watched from now on.
        Returns whether one of them was not watched by this trace (``watched``: its
        ``attr_reads``), so that it may have been read first unseen."""
        modules = {id(m): m for m in self.root.modules()}
        unseen = False
        for a in epilogue:
            if a.target[0] != "obj" or not _plain_write(a) or type(a.key) is not str:
                continue
            m = a.target[1]
            if id(m) not in modules or a.key in MODULE_FIELDS:
                continue
            have = self.written.get(id(m), frozenset())
            if a.key not in have:
                self.written[id(m)] = have | {a.key}
                self._held[id(m)] = m
            if a.key not in watched.get(id(m), (frozenset(),))[0]:
                unseen = True
        return unseen

    def settle(self, reads: Mapping[int, tuple[frozenset[str], frozenset[str]]]) -> bool:
        """After a trace: each watched name it read first is guarded by value for good;
        each other watched name that an epilogue writes is free unless read first before (a
        free name it did not watch counts as read first). Returns whether the
        free names changed (the module guard must then re-read the tree)."""
        changed = False
        for k, names in list(self.by_module.items()):  # free, yet not watched: unseen
            unseen = names - reads.get(k, (frozenset(), frozenset()))[0]
            if unseen:
                reads = {**reads, k: (reads.get(k, (frozenset(),))[0],
                                      reads.get(k, (frozenset(), frozenset()))[1] | unseen)}
        for k, (watched, read) in reads.items():
            if read:
                self.read_first[k] = self.read_first.get(k, frozenset()) | read
            free = (self.by_module.get(k, frozenset())
                    | (watched & self.written.get(k, frozenset()))) \
                - self.read_first.get(k, frozenset())
            if free != self.by_module.get(k, frozenset()):
                changed = True
                if free:
                    self.by_module[k] = free
                else:
                    self.by_module.pop(k, None)
        return changed

    def writes_only_free(self, a: Action) -> bool:
        """Whether ``a`` writes a free attribute (it leaves the guard's fingerprint as it
        was)."""
        return (a.target[0] == "obj" and a.op in ("setattr", "delattr")
                and a.key in self.by_module.get(id(a.target[1]), ()))

    def miss(self, guard: StateGuard, who: str) -> list[str]:
        """At a miss: why, where the module guard's token differs from the previous
        miss's because a plain attribute's value did (once per attribute): the reasons
        for ``compile_status(...)["static"]``."""
        tok, before = guard.tok, self._miss_token
        self._miss_token = tok
        if before < 0 or tok == before:
            return []
        out = []
        for change in attribute_changes(guard, self.root, before, tok):
            name = change.split(" ", 1)[0]
            if name in self._noted:
                continue
            self._noted.add(name)
            out.append(
                f"{who}: the module attribute {change} changed between calls, and the "
                "programs are keyed by its value: forward reads it (before writing it, "
                "if it writes it), so each value compiles a program of its own. Pass it "
                "as an argument, or have forward write it before reading it.")
        return out

    def labels(self) -> list[str]:
        """The free attributes as ``self.block.last``, for messages."""
        out = []
        for path, m in self.root.named_modules(prefix="self"):
            out += [f"{path}.{n}" for n in sorted(self.by_module.get(id(m), ()))]
        return out


def _shown(vk: Any) -> str:
    """A fingerprinted value (`thunder_ir.runtime.guards.value_key`) for messages."""
    if type(vk) is tuple and len(vk) == 2 and isinstance(vk[0], type):
        return str(vk[1]) if vk[0] is float else repr(vk[1])
    if type(vk) is tuple and vk and vk[0] == "id":
        return f"<{vk[1].__name__} object>"
    return "<object>"


def _ints(*vks: Any) -> bool:
    """Whether fingerprinted values are all ``int``s (numbers that automatic dynamic
    makes symbolic, `thunder_ir.runtime.symbolic_attrs`: not one program per value)."""
    return all(type(v) is tuple and len(v) == 2 and v[0] is int for v in vks)


def _plain(vk: Any) -> bool:
    """Whether a fingerprinted value is a number, string, None... (``(type, value)``) or
    not set: what one program per value comes from (a container's contents, an object's
    identity, a symbolic number's type say other things)."""
    return vk == ("<missing>",) or (type(vk) is tuple and len(vk) == 2
                                    and isinstance(vk[0], type))


def attribute_changes(guard: StateGuard, root: torch.nn.Module, old: int, new: int
                      ) -> list[str]:
    """The plain module attributes whose fingerprints differ between the module guard's
    tokens ``old`` and ``new``: ``self.block.scale (0.5 -> 0.7)`` (not ``int`` to ``int``:
    those become symbolic numbers, `thunder_ir.runtime.symbolic_attrs`)."""
    fps: dict[int, Any] = {tok: fp for fp, (tok, _) in guard.tokens.items()
                           if tok in (old, new)}
    if len(fps) != 2:
        return []
    paths = {id(m): p for p, m in root.named_modules(prefix="self")}

    def fields(fp: Any) -> dict[tuple[int, str], Any]:
        out: dict[tuple[int, str], Any] = {}
        for part in fp:
            if type(part) is tuple and len(part) >= 3 and type(part[0]) is int \
                    and type(part[2]) is tuple:
                out.update(((part[0], k), v) for k, v in part[2])
        return out

    a, b = fields(fps[old]), fields(fps[new])
    missing = ("<missing>",)
    out = []
    for key in [*a, *(k for k in b if k not in a)]:
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb and va is not missing and vb is not missing and key[0] in paths \
                and not _ints(va, vb) and _plain(va) and _plain(vb):
            # (one first set, deleted, or left out of the key now: not a value that changes)
            shown = [("not set" if v is missing else _shown(v)) for v in (va, vb)]
            out.append(f"{paths[key[0]]}.{key[1]} ({shown[0]} -> {shown[1]})")
    return out


def free_names(free: FreeAttrs | None) -> Mapping[int, Any]:
    """``free``'s names per module, or none."""
    return free.by_module if free is not None else {}


__all__ = ["FreeAttrs", "attribute_changes", "forward_stores", "free_names"]
