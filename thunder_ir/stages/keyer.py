"""The keyer: what a call's cache key is, and the guards behind it.

A key is what the call's prologue returns (`thunder_ir.runtime.prologue`): its leaves'
metadata, the global modes, the module's symbolic ``int`` attributes and one token per
guard of Python state (`thunder_ir.runtime.guards`: the module tree, the globals and the
closure cells the traces read), and the metadata of the module tensors ``forward`` rebinds
on every call (`thunder_ir.runtime.rebound`: read from the module, not bound). The keyer
keeps a prologue per call structure and guard tokens, numbers the structures, and re-keys
when a trace read more: new globals (their guards join every key) or exact layouts (the
structure's key then holds every tensor's strides).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder_ir.frontend import TracedProgram
from thunder_ir.frontend.tracer import arg_names
from thunder_ir.runtime.cache import CACHE_CAPACITY, Cache, all_tensors
from thunder_ir.runtime.dynamic import Dynamic, merge
from thunder_ir.runtime.free_attrs import FreeAttrs, free_names
from thunder_ir.runtime.guards import StateGuard, closure_guard, globals_guard, module_guard
from thunder_ir.runtime.prologue import Prologue, make_prologue
from thunder_ir.runtime.rebound import ReboundState
from thunder_ir.runtime.symbolic_attrs import SymbolicAttrs


class Keyer:
    """The prologues and guards of one jitted callable (see the module doc).

    Attributes:
        prologues: per ``(call structure, guard tokens)``, the prologue that keys it.
        guards: the guards of Python state, in the order their tokens join the key (the
            module tree's first, where there is a module).
        attrs: the module tree's ``int`` attributes that are symbolic numbers.
        rebound: the module tree's buffers and tensor attributes that ``forward`` rebinds
            on every call (program inputs read from the module, keyed by metadata).
        free: the module tree's plain attributes that ``forward`` writes before reading
            them (`thunder_ir.runtime.free_attrs`): not in the key.
    """

    def __init__(self, fn: Callable[..., Any] | None, module: torch.nn.Module | None,
                 lock: threading.RLock) -> None:
        self.fn, self.module, self.lock = fn, module, lock
        self.prologues: dict[Any, Prologue] = {}
        self.structures: dict[Any, int] = {}
        """Each call structure seen (positional count, keywords in order, nesting): its
        number, the first token of every key (``f(a=x, b=y)`` and ``f(b=y, a=x)`` flatten
        to the same leaves in another order). Never reused: entries hold them."""
        self.general: set[Any] = set()
        """Call structures whose tensors are not all strided (sparse): their key reads
        each leaf through ``tensor_meta``, which knows layouts without strides."""
        self.exact: set[Any] = set()
        """Call structures a trace read exact strides or storage offsets for: their key
        holds every tensor's (`thunder_ir.dialects.guard`)."""
        self.guards: list[StateGuard] = []
        self.attrs = SymbolicAttrs(module) if module is not None else None
        self.rebound = ReboundState(module) if module is not None else None
        self.free = FreeAttrs(module) if module is not None else None
        if self.attrs is not None and self.rebound is not None and self.free is not None:
            self.guards.append(module_guard(self.attrs.root, self.attrs.by_module,
                                            self.rebound.by_module,
                                            self.rebound.by_container,
                                            self.free.by_module))
        cg = closure_guard(fn)
        if cg is not None:
            self.guards.append(cg)
        self.guarded_globals: dict[int, set[str]] = {}

    def state(self) -> dict[str, torch.Tensor]:
        """The module's parameters and buffers, by name (none for a function), but the
        buffers ``forward`` rebinds (read from the module on each call instead)."""
        if self.module is None:
            return {}
        state: dict[str, torch.Tensor] = dict(self.module.named_parameters())
        state.update(dict(self.module.named_buffers()))
        if self.rebound is not None and self.rebound.tensors:
            for name in self.rebound.buffer_names():
                state.pop(name, None)
        return state

    def tokens(self) -> tuple[int, ...]:
        """Each guard's token for the state as it is now."""
        return tuple([g.check() for g in self.guards])

    def names(self, args: tuple[Any, ...], kwargs: dict[str, Any], n: int) -> list[str]:
        """A name per flat argument leaf, for messages: the parameter's name, with the
        leaf's index when an argument holds several."""
        from torch.utils import _pytree as pytree

        target = self.module.forward if self.module is not None else self.fn
        assert target is not None
        names = arg_names(target, len(args), kwargs)
        if len(names) == n:
            return list(names)
        out: list[str] = []
        for name, value in zip(names, [*args, *kwargs.values()]):
            k = len(pytree.tree_leaves(value, is_leaf=lambda x: isinstance(x, torch.Size)))
            out += [name] if k == 1 else [f"{name}[{j}]" for j in range(k)]
        return out + [f"leaf {i}" for i in range(len(out), n)]

    def prologue(self, spec: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n: int,
                 tokens: tuple[int, ...]) -> Prologue:
        """The prologue of call structure ``spec`` (``n`` leaves) for these tokens, made
        and kept."""
        if len(self.prologues) > 4 * CACHE_CAPACITY:
            self.prologues.clear()
        structure = self.structures.get(spec)
        if structure is None:
            with self.lock:  # two threads' new structures must not get one number
                structure = self.structures.setdefault(spec, len(self.structures))
        attrs = self.attrs
        modules = attrs.modules() if attrs else []
        tensors: list[tuple[Any, ...]] = []
        if self.rebound is not None and self.rebound.tensors:
            tensors, more = self.rebound.prologue_tensors(len(modules))
            modules = [*modules, *more]
        pro = make_prologue(self.names(args, kwargs, n), self.state(),
                            all_tensors=all_tensors(spec) and spec not in self.general,
                            exact=spec in self.exact, tokens=(structure, *tokens),
                            token_names=["argument structure", *(g.name for g in self.guards)],
                            attrs=attrs.prologue_attrs() if attrs else (),
                            modules=modules, tensors=tensors)
        self.prologues[(spec, tokens)] = pro
        return pro

    def current(self, spec: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                n: int) -> Prologue:
        """The prologue for ``spec`` and the guards' tokens as they are now."""
        tokens = self.tokens()
        return self.prologues.get((spec, tokens)) or self.prologue(spec, args, kwargs, n,
                                                                   tokens)

    def generalize(self, spec: Any) -> bool:
        """Keys ``spec`` through ``tensor_meta`` from now on (a leaf without strides: a
        sparse tensor); False where it already was."""
        if spec in self.general:
            return False
        self.general.add(spec)
        return True

    def keyed(self, traced: TracedProgram, spec: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any], n: int, pro: Prologue, exact: bool, cache: Cache
              ) -> Prologue:
        """The prologue the cache keys a traced program by: ``pro``, or the one rebuilt
        where the trace added guards (globals it read: ``cache``'s entries, compiled before
        and not depending on them, are re-keyed to match any state of theirs) or, with
        ``exact``, read exact strides or storage offsets for this call structure."""
        rekey = self._guard_reads(traced, cache)
        if exact and traced.exact_layout and spec not in self.exact:
            # The key now holds exact layouts for this structure; the entries keyed by
            # contiguity are not hit again (the cache's LRU drops them).
            self.exact.add(spec)
            for k in [k for k in self.prologues if k[0] == spec]:
                del self.prologues[k]
            rekey = True
        if not rekey:
            return pro
        return self.prologue(spec, args, kwargs, n, self.tokens())

    def _guard_reads(self, traced: TracedProgram, cache: Cache) -> bool:
        added: list[StateGuard] = []
        for namespace, names in traced.global_reads:
            have = self.guarded_globals.setdefault(id(namespace), set())
            new = names - have
            if new:
                have.update(new)
                added.append(globals_guard(namespace, new))
        if not added:
            return False
        self.guards += added  # (in place: the dispatcher holds the list)
        extra = tuple(g.check() for g in added)
        entries = cache.entries
        rekeyed = {(*k[:-1], k[-1] + extra): e for k, e in entries.items()}
        entries.clear()
        entries.update(rekeyed)
        self.prologues.clear()
        return True

    def with_attrs(self, dynamic: Dynamic, leaves: list[Any]) -> tuple[Dynamic, list[Any]]:
        """``dynamic`` and the leaves, with the module's symbolic ``int`` attributes
        (`thunder_ir.runtime.symbolic_attrs`) as leaves after the call's own, then the
        tensors of its rebound state (`thunder_ir.runtime.rebound`), with the dims of
        theirs that grew symbolic."""
        ext = leaves
        if self.attrs is not None and self.attrs.attrs:
            ext = [*leaves, *self.attrs.values(self.guards[0].tok)]
            dynamic = merge(dynamic, {i: () for i in range(len(leaves), len(ext))
                                      if type(ext[i]) is int})
        if self.rebound is not None and self.rebound.tensors:
            current = self.rebound.current()
            if current:
                first = len(ext)
                ext = [*ext, *(v for _, v in current)]
                grown = self.rebound.dynamic(first)
                if grown:
                    dynamic = merge(dynamic, grown)
        return dynamic, ext

    def grow(self) -> bool:
        """Makes the module ints that changed symbolic from now on (the module guard no
        longer holds their values, the key does), and the dims of rebound state tensors
        that changed (the key holds their metadata already); whether any did."""
        tensors = self.rebound is not None and self.rebound.grow()
        if self.attrs is None or not self.attrs.grow(free_names(self.free)):
            return tensors
        self.guards[0].invalidate()
        self.prologues.clear()
        return True

    def rebind(self, traced: TracedProgram) -> bool:
        """After a trace: the module tensors its epilogue rebinds are read from the
        module and keyed by metadata from now on (`thunder_ir.runtime.rebound`); whether
        one is new (the module guard then re-reads the tree, and the prologues are made
        again: the compiler traces the call again, or the next call compiles)."""
        if self.rebound is None or not self.rebound.learn(traced.epilogue):
            return False
        self.rebound.note_shapes()  # the sizes traced with: the next miss compares them
        self.guards[0].invalidate()
        self.prologues.clear()
        return True

    def learn_writes(self, traced: TracedProgram) -> bool:
        """After a trace: the plain attributes its epilogue writes are watched from now on;
        whether one was not watched by it (a trace that watches it tells whether it is
        read first)."""
        return self.free is not None and self.free.learn_writes(traced.epilogue,
                                                                traced.attr_reads)

    def settle(self, traced: TracedProgram) -> bool:
        """After a trace: the attributes it watched and did not read first are left out of
        the key, those it read first are keyed by value for good; whether that changed
        (the module guard then re-reads the tree and the prologues are made again)."""
        if self.free is None or not self.free.settle(traced.attr_reads):
            return False
        self.guards[0].invalidate()
        self.prologues.clear()
        return True

    def attr_names(self) -> Sequence[str]:
        """The names of the leaves after the call's own (`with_attrs`): the symbolic
        ``int`` attributes, then the rebound state tensors."""
        names = [a.label for a in self.attrs.attrs] if self.attrs is not None else []
        if self.rebound is not None and self.rebound.tensors:
            names += [r.label for r, _ in self.rebound.current()]
        return names


__all__ = ["Keyer"]
