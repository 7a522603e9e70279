"""Rule tables: frozen built-in entries, and the user's additions in a layer of their own.

thunder_ir keeps its rules in tables keyed by op class or torch callable: decompositions
(`thunder_ir.passes.decompositions`), VJP rules (`thunder_ir.passes.vjp`), the tracer's
handlers (`thunder_ir.frontend.table`) and the input strategies of the property tests
(`thunder_ir.testing.inputs`). Each is a `RuleTable`:

* a **built-in** entry is one a thunder_ir module registers; it is written once, when its
  module is imported, and is frozen from then on: nothing replaces or deletes it;
* an **addition** is one registered from anywhere else (a user's op, the public
  ``register_*`` calls, a test): it lives beside the built-ins, may be replaced by its
  owner (``replace=True``: a notebook cell run twice), and `scoped_additions` undoes every
  addition made while it is open;
* a rule for **one compilation** goes in its `thunder_ir.passes.context.CompileContext`
  (``decompositions=``, ``vjp_rules=``), ahead of the table, and never into it.

A table is a ``dict`` so that a lookup (one per op while tracing and in every pass) stays a
dict lookup; its mutating methods refuse, and `RuleTable.register` is the one way in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Generic, NoReturn, TypeVar

K = TypeVar("K")
V = TypeVar("V")

BUILTIN_PREFIX = "thunder_ir."
"""Modules whose registrations are built-in entries."""


def is_builtin(obj: Any) -> bool:
    """Whether ``obj`` (a rule function, a handler) was defined by a thunder_ir module."""
    return str(getattr(obj, "__module__", "") or "").startswith(BUILTIN_PREFIX)


def _name(key: Any) -> str:
    return str(getattr(key, "name", None) or getattr(key, "__qualname__", None) or key)


class RuleTable(dict[K, V], Generic[K, V]):
    """A table of rules by key: built-in entries frozen, additions tracked (module doc).

    Attributes:
        title: what the table holds, for messages (``"decomposition"``).
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = title
        self._added: set[Any] = set()
        TABLES.append(self)

    def register(self, key: K, value: V, *, builtin: bool, replace: bool = False) -> None:
        """Puts ``value`` under ``key``: a built-in entry (``builtin``) or an addition.

        Raises:
            ValueError: ``key`` has an entry already and this is not an addition replacing
                an addition with ``replace``; a built-in entry is never replaced.
        """
        old = dict.get(self, key)
        if old is not None and old is not value:
            if key not in self._added:
                raise ValueError(
                    f"{_name(key)} already has a built-in {self.title} "
                    f"({_name(old)}); built-in entries are frozen. To use another rule for "
                    "one compilation, pass it in its CompileContext (decompositions=, "
                    "vjp_rules=) or through an executor (thunder_ir.extend)")
            if not replace:
                raise ValueError(f"{_name(key)} already has a {self.title} ({_name(old)}); "
                                 "pass replace=True to replace it")
        dict.__setitem__(self, key, value)
        if builtin:
            self._added.discard(key)
        else:
            self._added.add(key)

    def additions(self) -> dict[K, V]:
        """The entries registered from outside thunder_ir."""
        return {k: dict.__getitem__(self, k) for k in self._added}

    def _restore(self, added: dict[K, V]) -> None:
        for k in self._added - added.keys():
            dict.__delitem__(self, k)
        for k, v in added.items():
            dict.__setitem__(self, k, v)
        self._added = set(added)

    def _frozen(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"the {self.title} table is written only through register() "
                        "(built-in entries are frozen; see thunder_ir.dialects.tables)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _frozen
    __ior__ = _frozen


TABLES: list[RuleTable[Any, Any]] = []
"""Every rule table, in the order they were made."""


@contextlib.contextmanager
def scoped_additions() -> Iterator[None]:
    """Undoes, on exit, every addition made to any rule table while open (and restores the
    additions it replaced): for a test or a tutorial that registers an op's rules, so that
    later coverage tests see none of them. Built-in entries are never touched."""
    saved = [(t, t.additions()) for t in TABLES]
    try:
        yield
    finally:
        for t, added in saved:
            t._restore(added)
        for t in TABLES[len(saved):]:
            t._restore({})


__all__ = ["BUILTIN_PREFIX", "TABLES", "RuleTable", "is_builtin", "scoped_additions"]
