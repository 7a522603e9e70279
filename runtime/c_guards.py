"""Checks a cached call makes in C: torch's guard managers (Dynamo's, ``RootGuardManager``)
over a fixed tuple of objects, one C call for all of them.

A cached call re-reads what decides whether its program is valid: every parameter's
and buffer's metadata (the prologue's part of the key, `StateMeta`) and the versions of
the dicts that hold the module tree's state (`thunder_ir.runtime.guards.StateGuard`).
Read in Python, that is five attribute reads per tensor and a call per dict (ResNet's 50
tensors and 433 dicts: 20-30 µs each on the shared machine); torch's guard managers read
the same in C. Each manager is built for the objects as they are now and answers
whether all of them still are: a tensor's type, dispatch keys, dtype, device,
``requires_grad``, sizes and strides (``TENSOR_MATCH``), a dict's version
(``DICT_VERSION``: CPython bumps it on every write). Where it says no, the caller reads
the state in Python as before, so a manager only ever skips a read whose answer it
proved unchanged. Where this torch lacks them (`available` is False), nothing changes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

try:  # torch's own guard managers (Dynamo's C++ guards)
    from torch._C._dynamo.guards import RootGuardManager
except ImportError:  # pragma: no cover - depends on the torch build
    RootGuardManager = None  # type: ignore[assignment,misc]

MIN_TENSORS = 4
"""A prologue checks its parameters and buffers through `StateMeta` from this many on
(fewer: inline reads cost less than the call)."""


def _kind() -> Any:
    """Dynamo's ``GuardManagerType.GUARD_MANAGER`` (a plain manager for each item)."""
    from torch._dynamo.guards import GuardManagerType

    return GuardManagerType.GUARD_MANAGER


def tensors_manager(tensors: Sequence[torch.Tensor]) -> Any:
    """A manager whose ``check(tuple(tensors))`` is True while every tensor's type,
    dispatch keys (as the thread's dispatch state shows them), dtype, device,
    ``requires_grad``, sizes and strides are what they are now; None where torch has no
    manager or cannot build one for these tensors."""
    def guard(m: Any, t: torch.Tensor, name: str) -> None:
        m.add_tensor_match_guard(t, list(t.shape), list(t.stride()), name, [name], None,
                                 type(t), torch._C._dispatch_keys(t))

    return _manager(tensors, "p", guard)


def dicts_manager(dicts: Sequence[dict[Any, Any]]) -> Any:
    """A manager whose ``check(tuple(dicts))`` is True while no dict of ``dicts`` was
    written since (each one's version as now); None where torch has none."""
    return _manager(dicts, "d", lambda m, d, name: m.add_dict_version_guard(d, [name], None))


def _manager(items: Sequence[Any], prefix: str, guard: Callable[[Any, Any, str], None]
             ) -> Any:
    """A root manager over the tuple ``items``, ``guard(manager, item, name)`` adding each
    item's check; None where torch has none, cannot build it, or it fails at once."""
    if RootGuardManager is None:
        return None
    try:
        root = RootGuardManager()
        kind = _kind()
        for i, item in enumerate(items):
            guard(root.tuple_getitem_manager(i, f"{prefix}{i}", item, kind), item,
                  f"{prefix}{i}")
        if not root.check(tuple(items)):
            return None
    except Exception:  # a torch without these entry points, or an item they refuse
        return None
    return root


def plain_tensors(tensors: Sequence[Any]) -> bool:
    """Whether every one is a plain strided tensor or parameter (no subclass, no
    functorch wrapper): what `StateMeta` checks in C."""
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    return all((type(t) is torch.Tensor or type(t) is torch.nn.Parameter)
               and t.layout == torch.strided and not wrapped(t) for t in tensors)


def read_state(tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
    """The key's reads of each tensor, in Python: its shape, dtype, device,
    ``requires_grad`` and layout (``is_contiguous() or stride()``), as the prologue's
    inline expression reads them (`thunder_ir.dialects.guard.StateMetaOp`)."""
    out: list[Any] = []
    for t in tensors:
        out += (t.shape, t.dtype, t.device, t.requires_grad, t.is_contiguous() or t.stride())
    return tuple(out)


class StateMeta:
    """The parameters' and buffers' part of the key (``*_state()`` in the prologue):
    ``read()``'s tuple (the prologue's inline reads, `read_state`), read again only
    where a C check (`tensors_manager`) says a tensor's metadata may have changed since
    it was last read; before the managers are `ready`, read on every call.

    Two managers are kept: the check compares dispatch keys as the thread's dispatch
    state shows them, which inference mode and autocast change, so a loop that
    alternates (a training step, then an evaluation under ``inference_mode``) keeps one
    for each instead of reading again on every call. A failed check whose fresh reads
    are the ones held (only the thread's state moved) adds a manager; reads that differ
    replace both."""

    __slots__ = ("memo", "read", "refused", "tensors")

    def __init__(self, tensors: Sequence[torch.Tensor],
                 read: Callable[[], tuple[Any, ...]] | None = None) -> None:
        self.tensors = tuple(tensors)
        self.read: Callable[[], tuple[Any, ...]] = read or (lambda: read_state(self.tensors))
        self.memo: tuple[tuple[Any, ...], Any, Any] | None = None
        """(the reads, the manager last passed, the other one or None), replaced as
        one tuple (a concurrent call sees one or the other)."""
        self.refused = False
        """torch could not build a manager for these tensors: read on every call."""

    def __call__(self) -> tuple[Any, ...]:
        memo = self.memo
        if memo is not None:
            tensors = self.tensors
            parts, first, second = memo
            if first.check(tensors):
                return parts
            if second is not None and second.check(tensors):
                self.memo = (parts, second, first)
                return parts
        fresh = self.read()
        if self.refused or not ready():
            return fresh
        manager = tensors_manager(self.tensors)
        if manager is None:
            self.refused = True
        elif memo is not None and fresh == memo[0]:  # only the thread's state moved
            self.memo = (memo[0], manager, memo[1])
        else:
            self.memo = (fresh, manager, None)
        return fresh


_USABLE: list[bool] = []


def ready() -> bool:
    """Whether the guard managers can be used now: once ``torch._dynamo`` is imported
    (building a manager imports it, 2-5 s, which a process that never fuses must not
    pay: tier-up's kernels import it), and where they work (tried once, on a small
    tensor and a dict, with a change each must see)."""
    if _USABLE:
        return _USABLE[0]
    if "torch._dynamo" not in sys.modules:
        return False
    t, d = torch.zeros(2), {"a": 1}
    tm, dm = tensors_manager([t]), dicts_manager([d])
    ok = tm is not None and dm is not None
    if ok:
        t.requires_grad_(True)
        d["a"] = 2
        ok = not tm.check((t,)) and not dm.check((d,))
    _USABLE.append(ok)
    return ok


__all__ = ["MIN_TENSORS", "StateMeta", "dicts_manager", "plain_tensors", "read_state",
           "ready", "tensors_manager"]
