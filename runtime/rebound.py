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

Tensors held in a dict or list that a module attribute holds are state too where
``forward`` rebinds them (``self.cache["k"] = ...``, ``self.states[i] = ...``): the entry
(`ReboundTensor.item`) is read from the container on each call (the trace's shadow of the
container holds the program input there, `thunder_ir.frontend.pystate.Recorder.inputs`),
keyed by metadata (``m1.cache['k']`` in the prologue), written back by the epilogue's
``setitem`` (a dict) or list assignment, and fingerprinted by type in the module guard
(`by_container`, by the container's id). A list's items are compared by identity on
every call, a rebound one as any tensor of its type (`thunder_ir.runtime.guards`); a
dict's write is recognised (`rebinds`) and keeps the guard's token as is: a cached call
does not re-read the module tree.

So are the tensor fields of a plain (non-Module) object a module attribute holds that
``forward`` rebinds (``self.mem.h = ...``): the entry is ``(Field("h"),)``
(`thunder_ir.runtime.origins.Field`), read as ``m1.mem.h``, the object's shadow holds the
input there, the guard fingerprints that field of the object by type (`by_container`, by
the object's id) and the epilogue's ``setattr`` on the object keeps its token. An object
the user puts on the module in place of the old one is learnt by the compile that first
meets it (`new_container`), which traces again at once: one compile more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from thunder_ir.runtime.dynamic import Dynamic, changed, merge
from thunder_ir.runtime.origins import Field, ModuleTensor
from thunder_ir.runtime.pystate import Action, plain_object


@dataclass(frozen=True, eq=False)
class ReboundTensor:
    """One rebound state: buffer (``buffer``) or plain attribute ``name`` of ``module``,
    shown as ``label`` (``self.block.h``); ``origin`` is its program input's origin."""

    module: torch.nn.Module
    name: str
    buffer: bool
    label: str
    origin: ModuleTensor
    item: tuple[Any, ...] = ()
    """``(key,)``: an entry of the dict or list attribute ``name`` holds
    (``self.cache["k"] = ...``, ``self.states[i] = ...``), or ``(Field(f),)``: field
    ``f`` of the plain object it holds (``self.state.h = ...``); ``()``: the attribute."""

    def value(self) -> torch.Tensor | None:
        """The tensor it holds now (not a parameter), or None."""
        d = self.module.__dict__
        v = d["_buffers"].get(self.name) if self.buffer else d.get(self.name)
        if self.item:
            v = _entry(v, self.item[0])
        if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
            return v
        return None

    def container(self) -> Any:
        """The dict or list holding it (an entry), else None."""
        return self.module.__dict__.get(self.name) if self.item else None


def _entry(container: Any, key: Any) -> Any:
    """``container[key]`` of a plain dict or list (``container.name`` of a plain object,
    ``key`` a `Field`), or None."""
    if type(key) is Field:
        return vars(container).get(key.name) if plain_object(container) else None
    if type(container) is dict:
        return container.get(key)
    if type(container) is list and type(key) is int and 0 <= key < len(container):
        return container[key]
    return None


class _IntWrites(Protocol):
    def writes_only_ints(self, actions: Sequence[Action]) -> bool: ...


class _FreeWrites(Protocol):
    def writes_only_free(self, a: Action) -> bool: ...


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
        self.by_container: dict[int, frozenset[Any]] = {}
        """Id of a dict or list a module attribute holds -> the keys of its rebound
        entries; the module guard reads this dict (fingerprinted by type)."""
        self._known: set[tuple[int, str, tuple[Any, ...]]] = set()
        self._held: dict[int, Any] = {}
        self.seen: dict[tuple[int, str, tuple[Any, ...]], tuple[int, ...]] = {}
        """Each state's shape at the last miss (or at the compile that found it)."""
        self.grown: dict[tuple[int, str, tuple[Any, ...]], tuple[int, ...]] = {}
        """Each state's dims that changed between misses: symbolic from then on."""
        self.new_container = False
        """Whether the last `learn` found a known state in a container it had not seen (a
        dict, list or plain object the user put on the module in place of the old one)."""

    def learn(self, epilogue: Sequence[Action]) -> bool:
        """After a compile: the module tensors its epilogue rebinds become rebound state.
        Returns whether one is new (the caller then invalidates the module guard and its
        prologues)."""
        wanted = [(a, a.key) for a in epilogue if a.target[0] == "obj"
                  and a.op in ("setattr", "setitem") and _rebinding_template(a.value)
                  and type(a.key) in (str, int)]
        wanted += [(a, i) for a in epilogue if a.target[0] == "obj" and a.op == "assign"
                   and type(a.value) is tuple and a.value[0] == "list"
                   for i, v in enumerate(a.value[1]) if _rebinding_template(v)]
        self.new_container = False
        if not wanted:
            return False
        paths = {id(m): p for p, m in self.root.named_modules(prefix="self")}
        owners = {id(m.__dict__.get("_buffers")): m for m in self.root.modules()}
        held = {id(v): (m, k) for m in self.root.modules() for k, v in m.__dict__.items()
                if type(v) in (dict, list) or plain_object(v)}  # a module's container
        new = False
        containers = dict(self.by_container)
        for a, key in wanted:
            obj = a.target[1]
            item: tuple[Any, ...] = ()
            if a.op == "setattr" and id(obj) in paths and isinstance(obj, torch.nn.Module):
                module, name, buffer = obj, key, False
            elif a.op == "setitem" and id(obj) in owners and type(key) is str:
                module, name, buffer = owners[id(obj)], key, True
            elif id(obj) in held and type(obj) in (dict, list) \
                    and (type(obj) is list) == (a.op == "assign"):
                (module, name), buffer, item = held[id(obj)], False, (key,)
            elif id(obj) in held and a.op == "setattr" and type(key) is str \
                    and key.isidentifier() and plain_object(obj):
                (module, name), buffer, item = held[id(obj)], False, (Field(key),)
                key = item[0]
            else:
                continue
            if item:  # (a container the attribute holds anew is learnt again)
                self.by_container[id(obj)] = self.by_container.get(id(obj), frozenset()) \
                    | {key}
                self._held[id(obj)] = obj  # (kept: its id is a key of `by_container`)
            if (id(module), name, item) in self._known:
                continue
            self._known.add((id(module), name, item))
            label = f"{paths[id(module)]}.{name}" + (
                "" if not item else repr(key) if type(key) is Field else f"[{key!r}]")
            self.tensors.append(ReboundTensor(module, name, buffer, label,
                                              ModuleTensor(module, name, buffer, item), item))
            if not item:
                self.by_module[id(module)] = self.by_module.get(id(module), frozenset()) \
                    | {name}
            new = True
        self.new_container = containers != self.by_container
        return new or self.new_container

    def note_shapes(self) -> None:
        """Records the shapes the states hold now (the sizes a later miss compares)."""
        for r, v in self.current():
            self.seen[(id(r.module), r.name, r.item)] = tuple(v.shape)

    def grow(self) -> bool:
        """On a miss: the dims of each state that changed since the last miss become
        symbolic from now on, by the arguments' policy (`changed`); whether any did."""
        new = False
        for r, v in self.current():
            k = (id(r.module), r.name, r.item)
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
            dims = self.grown.get((id(r.module), r.name, r.item))
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

    def prologue_tensors(self, first: int) -> tuple[list[tuple[Any, ...]],
                                                    list[torch.nn.Module]]:
        """What the key reads now, for `thunder_ir.runtime.prologue.make_prologue`:
        ``(i, label, name, buffer, item)`` of each rebound state holding a tensor (its
        module the prologue's ``m<i>``, numbered from ``first``), and those modules."""
        out: list[tuple[Any, ...]] = []
        modules: list[torch.nn.Module] = []
        for r, _ in self.current():
            out.append((first + len(modules), r.label, r.name, r.buffer, r.item))
            modules.append(r.module)
        return out, modules

    def rebinds(self, a: Action, read: set[tuple[int, str, tuple[Any, ...]]]) -> bool:
        """Whether ``a`` gives a rebound state that the program read as an input (``read``:
        (module id, name, item) of its `ModuleTensor` inputs) a program output: a tensor for a
        tensor, which leaves the module guard's fingerprint as it was. (A state that held
        ``None`` when traced changes the fingerprint: the guard must see it.)"""
        if a.target[0] != "obj" or type(a.value) is not tuple or a.value[0] != "out":
            return False
        obj = a.target[1]
        if a.op == "setattr" and isinstance(obj, torch.nn.Module):
            return (id(obj), a.key, ()) in read
        if a.op == "setattr":  # a field of a plain object a module attribute holds
            return type(a.key) is str and any(
                r.item == (Field(a.key),) and (id(r.module), r.name, r.item) in read
                and r.container() is obj for r in self.tensors)
        if a.op == "setitem":
            return any((r.buffer and r.name == a.key and (id(r.module), r.name, ()) in read
                        and r.module.__dict__.get("_buffers") is obj)
                       or (r.item == (a.key,) and (id(r.module), r.name, r.item) in read
                           and r.container() is obj) for r in self.tensors)
        return False


def leaves_guard_as_is(actions: Sequence[Action], ints: _IntWrites | None,
                       rebound: ReboundState | None, inputs: Sequence[Any] = (),
                       free: _FreeWrites | None = None) -> bool:
    """Whether an epilogue writes nothing but symbolic ``int`` attributes with ``int``s
    (`thunder_ir.runtime.symbolic_attrs.SymbolicAttrs.writes_only_ints`) and rebound
    states the program read (among the origins of its ``inputs``) with its outputs, and
    attributes left out of the key (``free``, `thunder_ir.runtime.free_attrs`): the
    module guard's fingerprint stays as it was, so it need not re-read the tree after it."""
    if not actions:
        return False
    read = {(id(k.module), k.name, k.item) for k in inputs if type(k) is ModuleTensor}
    return all((ints is not None and ints.writes_only_ints([a]))
               or (rebound is not None and rebound.rebinds(a, read))
               or (free is not None and free.writes_only_free(a)
                   and (rebound is None  # (a rebound state's name stays in the fingerprint)
                        or a.key not in rebound.by_module.get(id(a.target[1]), ())))
               for a in actions)


__all__ = ["ReboundState", "ReboundTensor", "leaves_guard_as_is"]
