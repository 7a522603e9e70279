"""Policies: what the stages of a jitted callable consult for a feature.

A feature that changes how a callable keys, compiles or calls (dynamic sizes, tier-up,
data parallelism, autocast, a backend's fast path) is an object here, set once when the
callable is made (or by the feature's own entry point: ``thunder_ir.distributed.ddp``
registers its module's policy), and read by the stages (`thunder_ir.stages`). No stage
asks the user's module what it is (``hasattr(module, "_thunder_fsdp")``), and no feature
adds a branch to the callable's class.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from thunder_ir.frontend.autocast import autocast_state, without_autocast
from thunder_ir.runtime.dynamic import (
    Dynamic,
    ShapeGuard,
    changed,
    every_size,
    marked,
    merge,
    sizes_of,
)
from thunder_ir.runtime.pins import pinning_guards, previous_values


class DataParallel(Protocol):
    """How a data-parallel module's programs compile (`thunder_ir.distributed`)."""

    def passes(self, module: torch.nn.Module, input_kinds: Sequence[Any]) -> tuple[Any, ...]:
        """The passes of its training programs (the collectives), for these inputs."""

    def unshard(self, module: torch.nn.Module) -> Callable[..., Any] | None:
        """How tracing reads its sharded parameters (gathered), or None."""


_DATA_PARALLEL: weakref.WeakKeyDictionary[torch.nn.Module, DataParallel] = \
    weakref.WeakKeyDictionary()


def set_data_parallel(module: torch.nn.Module, policy: DataParallel) -> None:
    """Makes ``module``'s programs compile as ``policy`` says (``ddp``, ``fsdp``)."""
    _DATA_PARALLEL[module] = policy


def data_parallel(module: torch.nn.Module | None) -> DataParallel | None:
    """``module``'s data-parallel policy, if it has one."""
    return None if module is None else _DATA_PARALLEL.get(module)


@dataclass
class DynamicSizes:
    """Which sizes a compile keeps symbolic (`thunder_ir.runtime.dynamic`): ``mode`` is
    ``jit(cache=...)``; ``marks`` sizes known to be dynamic before any call (the ThunderFX
    backend's Dynamo symbols); ``seen`` and ``grown`` per call structure, the sizes of its
    last miss and those that changed since, ``before`` the sizes of the miss before the
    last; ``static_only`` the structures a symbolic compile failed for (compiled per
    size), and ``failures`` why, and why a symbolic program serves one size only
    (`note_pins`, `note_key`; ``noted``: each such reason once)."""

    mode: str = "auto"
    marks: Dynamic = field(default_factory=dict)
    seen: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    grown: dict[Any, Dynamic] = field(default_factory=dict)
    static_only: set[Any] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    before: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    noted: set[Any] = field(default_factory=set)

    def sizes(self, spec: Any, leaves: list[Any]) -> Dynamic:
        """The sizes a compile for this call keeps symbolic: the marked ones (in every
        mode), all of them (``"symbolic values"``), and (``"auto"``) those that changed
        between two misses of this call structure."""
        known = merge(marked(leaves), self.marks) if self.marks else marked(leaves)
        if self.mode == "static":  # the user's marks only
            return known
        now = sizes_of(leaves)
        dyn = every_size(leaves) if self.mode == "symbolic values" else known
        before = self.seen.get(spec)
        self.seen[spec] = now
        if before is not None and before != now:
            self.before[spec] = before
        if self.mode == "auto":
            grown = self.grown.get(spec, {})
            if before is not None:
                grown = self.grown[spec] = merge(grown, changed(before, now))
            dyn = merge(dyn, grown)
        return dyn

    def note_pins(self, spec: Any, guard: ShapeGuard, who: str) -> list[str]:
        """Records (in ``failures``) each guard of a new symbolic program of ``who`` that
        fixes a size which varied between this call structure's misses
        (`thunder_ir.runtime.pins.pinning_guards`): that program serves those sizes
        only, and each new size compiles again. Returns the reasons recorded now."""
        before = self.before.get(spec)
        if before is None or not guard.sites:
            return []
        out = []
        values = previous_values(guard.sources, before)
        for text, where in pinning_guards(guard.sites, values):
            if (spec, where) in self.noted:
                continue
            self.noted.add((spec, where))
            out.append(f"{who}: a size that varies between calls is fixed by the guard "
                       f"{text}, recorded by {where}: each size compiles a program of its "
                       "own (a symbolic program serves only the sizes that pass its guards)")
        self.failures.extend(out)
        return out

    def note_key(self, parts: list[str], who: str) -> None:
        """Records (once per part) that a part of ``who``'s cache key that is not a
        dynamic size changed with the sizes (`thunder_ir.runtime.pins.key_difference`):
        each size looks its symbolic programs up under a key of its own."""
        for part in parts:
            if ("key", part) in self.noted:
                continue
            self.noted.add(("key", part))
            self.failures.append(
                f"{who}: the cache key's part '{part}' changes with the dynamic sizes but is "
                "not blanked in the dynamic key: each size compiles a symbolic program of its "
                "own, which the next size never finds")


class Autocast:
    """Autocast while traced: the key holds the autocast state (`thunder_ir.dialects.guard`),
    the trace records autocast's casts as ops (`thunder_ir.frontend.autocast`), and a
    program traced under autocast runs with it off, its casts being explicit."""

    def under(self) -> bool:
        """Whether this call is traced under autocast."""
        return autocast_state() is not None

    def program(self, program: Any, under_autocast: bool) -> Any:
        """``program`` (a `thunder_ir.lowering.codegen.CompiledProgram`) as it runs."""
        return program.with_functions(without_autocast) if under_autocast else program


class FastPath(Protocol):
    """A caller that knows more than the key (the ThunderFX backend's partitions, which
    Dynamo guards): ``call`` runs the call its own way, or returns `NOT_TAKEN`; ``saw`` is
    told of every call that went the usual way. The dispatcher holds it
    (``Dispatcher.fast_path``: one attribute read on the cached call)."""

    def call(self, dispatcher: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call's result, or `NOT_TAKEN`."""

    def saw(self, dispatcher: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A call went the usual way (its entry is ``dispatcher.cache.last``)."""


NOT_TAKEN: Any = object()
"""What `FastPath.call` returns to let the call go the usual way."""


@dataclass
class Policies:
    """The policies of one jitted callable."""

    dynamic: DynamicSizes = field(default_factory=DynamicSizes)
    tier_up: Any = None
    """A `thunder_ir.lowering.tier_up.TierUp` where hot programs tier up (``jit``'s default
    on CPU without a fusion executor); None otherwise."""
    autocast: Autocast = field(default_factory=Autocast)


__all__ = ["NOT_TAKEN", "Autocast", "DataParallel", "DynamicSizes", "FastPath", "Policies",
           "data_parallel", "set_data_parallel"]
