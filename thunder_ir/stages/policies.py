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
from thunder_ir.runtime.dynamic import Dynamic, changed, every_size, marked, merge, sizes_of


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
    last miss and those that changed since; ``static_only`` the structures a symbolic
    compile failed for (compiled per size), and ``failures`` why."""

    mode: str = "auto"
    marks: Dynamic = field(default_factory=dict)
    seen: dict[Any, tuple[Any, ...]] = field(default_factory=dict)
    grown: dict[Any, Dynamic] = field(default_factory=dict)
    static_only: set[Any] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)

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
        if self.mode == "auto":
            grown = self.grown.get(spec, {})
            if before is not None:
                grown = self.grown[spec] = merge(grown, changed(before, now))
            dyn = merge(dyn, grown)
        return dyn


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
