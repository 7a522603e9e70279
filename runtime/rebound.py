"""Module state that ``forward`` rebinds on every call: a program input and output, not a
guard by identity.

A module that keeps a running value in a buffer or a plain tensor attribute and gives it a
new tensor on each call (``self.avg = self.avg * 0.9 + y.mean(0) * 0.1``, a recurrent
state ``self.h = torch.tanh(...)``) would otherwise compile once per call: the module guard
(`thunder_ir.runtime.guards.module_guard`) fingerprints buffers and tensor attributes by
identity, the program binds the tensor it was traced with, and the epilogue's write gives
the next call another tensor. Once a compiled program's epilogue is seen to rebind one
(`ReboundState.learn`: an action that sets a module's attribute, or an item of its
``_buffers``, to a tensor the call computes or receives), from then on, for the jitted
callable's life:

* the module guard fingerprints it by its type while it holds a tensor (not a parameter;
  `thunder_ir.runtime.guards.REBOUND_TENSOR`), not by its identity, and no longer keeps
  the tensor alive;
* the prologue reads its metadata (shape, dtype, device, requires_grad, layout) into the
  key from the module on each call (`thunder_ir.dialects.guard.AttrMetaOp`), and the
  module's bound parameters and buffers (``p<i>``) no longer include it;
* tracing gives the module's copy a proxy for it that is a program input of its own
  (`thunder_ir.runtime.origins.ModuleTensor`), which the generated gather reads from the
  module on each call (``m3._buffers['avg']``, ``m3.h``); an in-place write to it is
  copied back into the tensor read;
* the epilogue rebinds it to the program's output as eager's ``self.avg = ...`` would (a
  buffer stays in ``_buffers``, a plain attribute in ``__dict__``); an epilogue that writes
  nothing else (and symbolic ``int`` attributes) leaves the guard's token as it was
  (`leaves_guard_as_is`, then `thunder_ir.runtime.guards.StateGuard.resync`), so a cached
  call does not re-read the module tree. Only a state the program read as a tensor counts:
  one that held ``None`` when traced changes the fingerprint when it gets its tensor.

A static compile whose trace finds a new rebound state traces again at once, with the
state read from the module (`thunder_ir.stages.compiler.Compiler`), so such a module
compiles once and every later call with state of the same metadata hits; a symbolic
compile learns after (its program binds the tensor; the next call compiles once more). A
state of another shape, dtype or requires_grad misses, as an argument's would.

Its sizes follow the automatic-dynamic policy of arguments
(`thunder_ir.runtime.dynamic.changed`): the dims of a state that changed between two
misses (a KV cache grown by ``torch.cat`` on every call) are symbolic from then on
(`ReboundState.grow`). The states stand for leaves after the call's own and its symbolic
``int`` attributes (`ReboundState.dynamic`; `thunder_ir.stages.keyer.Keyer.with_attrs`):
the trace gives the state's proxy those symbols, the dynamic key blanks them
(`thunder_ir.runtime.dynamic.key_positions`) and the shape guard reads them from the
state; a growing cache then runs one symbolic program after its first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from thunder_ir.runtime.dynamic import Dynamic, changed, merge
from thunder_ir.runtime.origins import ModuleTensor
from thunder_ir.runtime.pystate import Action


@dataclass(frozen=True, eq=False)
class ReboundTensor:
    """One rebound state: buffer (``buffer``) or plain attribute ``name`` of ``module``,
    shown as ``label`` (``self.block.h``); ``origin`` is its program input's origin."""

    module: torch.nn.Module
    name: str
    buffer: bool
    label: str
    origin: ModuleTensor

    def value(self) -> torch.Tensor | None:
        """The tensor it holds now (not a parameter), or None."""
        d = self.module.__dict__
        v = d["_buffers"].get(self.name) if self.buffer else d.get(self.name)
        if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
            return v
        return None


class _IntWrites(Protocol):
    def writes_only_ints(self, actions: Sequence[Action]) -> bool: ...


def _rebinding_template(value: Any) -> bool:
    """Whether a value template gives a tensor that changes from call to call: a program
    output, or what the caller passed (``("ref", ...)``)."""
    return type(value) is tuple and bool(value) and value[0] in ("out", "ref")


class ReboundState:
    """The rebound state of one jitted module tree (see the module doc).

    Attributes:
        tensors: the rebound states, in the order they were found (never removed).
        by_module: module id -> the names of its rebound buffers and attributes; the
            module guard reads this dict (`thunder_ir.runtime.guards.module_guard`'s
            ``tensors``).
    """

    def __init__(self, root: torch.nn.Module) -> None:
        self.root = root
        self.tensors: list[ReboundTensor] = []
        self.by_module: dict[int, frozenset[str]] = {}
        self._known: set[tuple[int, str]] = set()
        self.seen: dict[tuple[int, str], tuple[int, ...]] = {}
        """Each state's shape at the last miss (or at the compile that found it)."""
        self.grown: dict[tuple[int, str], tuple[int, ...]] = {}
        """Each state's dims that changed between misses: symbolic from then on."""

    def learn(self, epilogue: Sequence[Action]) -> bool:
        """After a compile: the module tensors its epilogue rebinds become rebound state.
        Returns whether one is new (the caller then invalidates the module guard and its
        prologues)."""
        wanted = [a for a in epilogue if a.target[0] == "obj" and a.op in ("setattr", "setitem")
                  and _rebinding_template(a.value) and type(a.key) is str]
        if not wanted:
            return False
        paths = {id(m): p for p, m in self.root.named_modules(prefix="self")}
        owners = {id(m.__dict__.get("_buffers")): m for m in self.root.modules()}
        new = False
        for a in wanted:
            obj = a.target[1]
            if a.op == "setattr" and id(obj) in paths and isinstance(obj, torch.nn.Module):
                module, buffer = obj, False
            elif a.op == "setitem" and id(obj) in owners:
                module, buffer = owners[id(obj)], True
            else:
                continue
            if (id(module), a.key) in self._known:
                continue
            self._known.add((id(module), a.key))
            label = f"{paths[id(module)]}.{a.key}"
            self.tensors.append(ReboundTensor(module, a.key, buffer, label,
                                              ModuleTensor(module, a.key, buffer)))
            self.by_module[id(module)] = self.by_module.get(id(module), frozenset()) | {a.key}
            new = True
        return new

    def note_shapes(self) -> None:
        """Records the shapes the states hold now (the sizes a later miss compares)."""
        for r, v in self.current():
            self.seen[(id(r.module), r.name)] = tuple(v.shape)

    def grow(self) -> bool:
        """On a miss: the dims of each state that changed since the last miss become
        symbolic from now on, by the arguments' policy (`changed`); whether any did."""
        new = False
        for r, v in self.current():
            k = (id(r.module), r.name)
            shape, old = tuple(v.shape), self.seen.get(k)
            self.seen[k] = shape
            if old is None or old == shape:
                continue
            dims = changed((old,), (shape,)).get(0, ())
            have = self.grown.get(k, ())
            if set(dims) - set(have):
                self.grown[k] = merge({0: have}, {0: dims})[0]
                new = True
        return new

    def dynamic(self, first: int) -> Dynamic:
        """The symbolic dims of the states holding a tensor now (`current`), as the
        leaves ``first``, ``first + 1``... they stand for."""
        if not self.grown:
            return {}
        out: Dynamic = {}
        for k, (r, v) in enumerate(self.current()):
            dims = self.grown.get((id(r.module), r.name))
            if dims and all(d < v.ndim for d in dims):
                out[first + k] = dims
        return out

    def buffer_names(self) -> set[str]:
        """The qualified names (``block.avg``, as ``named_buffers`` gives them) of the
        rebound buffers of modules in the tree now: not bound as the module's state."""
        if not self.tensors:
            return set()
        paths = {id(m): p for p, m in self.root.named_modules()}
        return {f"{paths[id(r.module)]}.{r.name}".lstrip(".") for r in self.tensors
                if r.buffer and id(r.module) in paths}

    def current(self) -> list[tuple[ReboundTensor, torch.Tensor]]:
        """The rebound states that hold a tensor now, in modules of the tree, with it."""
        if not self.tensors:
            return []
        tree = {id(m) for m in self.root.modules()}
        return [(r, v) for r in self.tensors
                if id(r.module) in tree and (v := r.value()) is not None]

    def prologue_tensors(self, first: int) -> tuple[list[tuple[int, str, str, bool]],
                                                    list[torch.nn.Module]]:
        """What the key reads now, for `thunder_ir.runtime.prologue.make_prologue`:
        ``(i, label, name, buffer)`` of each rebound state holding a tensor (its module
        the prologue's ``m<i>``, numbered from ``first``), and those modules."""
        out: list[tuple[int, str, str, bool]] = []
        modules: list[torch.nn.Module] = []
        for r, _ in self.current():
            out.append((first + len(modules), r.label, r.name, r.buffer))
            modules.append(r.module)
        return out, modules

    def rebinds(self, a: Action, read: set[tuple[int, str]]) -> bool:
        """Whether ``a`` gives a rebound state that the program read as an input (``read``:
        (module id, name) of its `ModuleTensor` inputs) a program output: a tensor for a
        tensor, which leaves the module guard's fingerprint as it was. (A state that held
        ``None`` when traced changes the fingerprint: the guard must see it.)"""
        if a.target[0] != "obj" or type(a.value) is not tuple or a.value[0] != "out":
            return False
        obj = a.target[1]
        if a.op == "setattr":
            return (id(obj), a.key) in read
        if a.op == "setitem":
            return any(r.buffer and r.name == a.key and (id(r.module), r.name) in read
                       and r.module.__dict__.get("_buffers") is obj for r in self.tensors)
        return False


def leaves_guard_as_is(actions: Sequence[Action], ints: _IntWrites | None,
                       rebound: ReboundState | None, inputs: Sequence[Any] = ()) -> bool:
    """Whether an epilogue writes nothing but symbolic ``int`` attributes with ``int``s
    (`thunder_ir.runtime.symbolic_attrs.SymbolicAttrs.writes_only_ints`) and rebound
    states the program read (among the origins of its ``inputs``) with its outputs: the
    module guard's fingerprint stays as it was, so it need not re-read the tree after it."""
    if not actions:
        return False
    read = {(id(k.module), k.name) for k in inputs if type(k) is ModuleTensor}
    return all((ints is not None and ints.writes_only_ints([a]))
               or (rebound is not None and rebound.rebinds(a, read)) for a in actions)


__all__ = ["ReboundState", "ReboundTensor", "leaves_guard_as_is"]
