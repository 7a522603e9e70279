"""Which plain attributes of a module a trace reads before it writes them.

A module whose ``forward`` writes a Python value into its own state (``self.last =
y.item()``, ``self.count = int(n.item())``) would otherwise compile on every call: the
module guard (`thunder_ir.runtime.guards.module_guard`) keys programs by every plain
attribute's value, and the epilogue writes a new one after each call. An attribute that
the traced code writes before it reads it (or never reads) does not determine the program,
so the guard need not key it (`thunder_ir.runtime.free_attrs`). This module finds, while a
trace runs, which of the attributes the runtime asks about (``watch``: per module, names
that some earlier trace's epilogue wrote) are read first.

The traced copy of such a module (`thunder_ir.frontend.tracer._shadow_modules`) is an
instance of a subclass of the module's class (`watching_class`, made once per class and
set of names; same name, ``__class__`` answers the module's own class) that holds a data
descriptor per watched name: reading ``self.last`` (``getattr``, ``hasattr``, a method of
the class) records a read unless the trace wrote it before; ``self.last = v`` and ``del
self.last`` record a write. Reading the copy's ``__dict__`` (``vars(self)``,
``self.__dict__[...]``) from anywhere but the attribute machinery of ``nn.Module`` counts
as reading every watched name not written yet. What is not seen is counted as read: a
class that cannot be subclassed leaves its names read. Recording happens only while the
user's code runs (`AttrLog.active`); the tracer's own reads of the copy do not count.
A read through another reference to the user's module (a closure or a global holding
the model rather than ``self``) reads the user's object, not the copy: while the user's
code runs, each original with watched names is an instance of the same watching class
(`originals_watched`, its own class put back after, failure or not), and any read of a
watched name there counts as read first.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

_REAL_DICT: Any = torch.nn.Module.__dict__["__dict__"]
"""The instance-dict descriptor of ``nn.Module`` subclasses (the copy's real ``__dict__``)."""

_M = torch.nn.Module
_QUIET = frozenset(f.__code__ for f in (
    _M.__getattr__, _M.__setattr__, _M.__delattr__, _M.register_buffer,
    _M.register_parameter))
"""Code of ``nn.Module`` that reads ``self.__dict__`` for its bookkeeping fields only."""


class AttrLog:
    """The reads and writes of watched attributes during one trace.

    Attributes:
        watched: id of a module copy -> the names watched on it.
        written: id of a module copy -> the names the trace wrote (or deleted).
        read: id of a module copy -> the names it read before writing them.
    """

    __slots__ = ("read", "stands_for", "watched", "written")

    def __init__(self) -> None:
        self.watched: dict[int, frozenset[str]] = {}
        self.written: dict[int, set[str]] = {}
        self.read: dict[int, set[str]] = {}
        self.stands_for: dict[int, int] = {}  # an original's id -> its copy's

    def note_read(self, obj: Any, name: str) -> None:
        """``obj.name`` was read: a read first unless written before (through the copy;
        a read of the user's original, another reference, always counts)."""
        k = id(obj)
        copy = self.stands_for.get(k)
        if copy is not None:
            self.read.setdefault(copy, set()).add(name)
        elif name not in self.written.get(k, ()):
            self.read.setdefault(k, set()).add(name)

    def note_write(self, obj: Any, name: str) -> None:
        """``obj.name`` was written or deleted."""
        k = id(obj)
        self.written.setdefault(self.stands_for.get(k, k), set()).add(name)

    def note_all(self, obj: Any) -> None:
        """``obj``'s ``__dict__`` was exposed: every watched name not written, read."""
        k = id(obj)
        if k in self.stands_for:
            k = self.stands_for[k]
            self.read.setdefault(k, set()).update(self.watched.get(k, frozenset()))
            return
        done = self.written.get(k, set())
        self.read.setdefault(k, set()).update(self.watched.get(k, frozenset()) - done)

    def result(self, originals: Mapping[int, Any]
               ) -> dict[int, tuple[frozenset[str], frozenset[str]]]:
        """Per original module (by id, through ``originals``: a copy's id -> the
        original): the names watched and those read first."""
        out: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
        for k, names in self.watched.items():
            original = originals.get(k)
            if original is None:
                continue
            out[id(original)] = (names, frozenset(self.read.get(k, ())) & names)
        return out

    @contextmanager
    def active(self) -> Iterator[None]:
        """Records while the block runs (the user's code), in this thread."""
        before = getattr(_ACTIVE, "log", None)
        _ACTIVE.log = self
        try:
            yield
        finally:
            _ACTIVE.log = before


_ACTIVE = threading.local()


def _log() -> AttrLog | None:
    return getattr(_ACTIVE, "log", None)


class _Watched:
    """The data descriptor of one watched name (see the module doc)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)
        log = _log()
        if log is not None:
            log.note_read(obj, self.name)
        d = _REAL_DICT.__get__(obj)
        try:
            return d[self.name]
        except KeyError:
            # not in the instance: the class's, else ``nn.Module.__getattr__`` (Python
            # calls it on this AttributeError)
            return getattr(super(type(obj), obj), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        log = _log()
        if log is not None:
            log.note_write(obj, self.name)
        _REAL_DICT.__get__(obj)[self.name] = value

    def __delete__(self, obj: Any) -> None:
        log = _log()
        if log is not None:
            log.note_write(obj, self.name)
        try:
            del _REAL_DICT.__get__(obj)[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


def _exposed_dict(self: Any) -> Any:
    log = _log()
    if log is not None and sys._getframe(1).f_code not in _QUIET:
        log.note_all(self)
    return _REAL_DICT.__get__(self)


_NONE = object()


def _nothing(cls: type, **kwargs: Any) -> None:
    """An ``__init_subclass__`` that does nothing."""


_CLASSES: dict[tuple[type, frozenset[str]], type | None] = {}


def watchable(cls: type, name: str) -> bool:
    """Whether ``name`` can be watched on instances of ``cls``: the class (nor a base)
    defines nothing of that name (a property, a method, a class default)."""
    return not any(name in c.__dict__ for c in cls.__mro__)


def watching_class(cls: type, names: frozenset[str]) -> type | None:
    """The subclass of ``cls`` whose instances record reads and writes of ``names`` (made
    once per class and names, without running ``cls``'s ``__init_subclass__``), or None
    where ``cls`` cannot be subclassed so."""
    key = (cls, names)
    if key in _CLASSES:
        return _CLASSES[key]
    made: type | None
    try:
        ns: dict[str, Any] = {n: _Watched(n) for n in names}
        ns["__dict__"] = property(_exposed_dict)
        ns["__class__"] = property(lambda self: cls)
        ns["__qualname__"] = cls.__qualname__
        ns["__module__"] = cls.__module__
        ns["__slots__"] = ()
        own = cls.__dict__.get("__init_subclass__", _NONE)
        # The user's ``__init_subclass__`` (a registry of subclasses, a wrapped forward)
        # is not run for this private class: set aside for the moment it is made.
        type.__setattr__(cls, "__init_subclass__", classmethod(_nothing))
        try:
            made = type(cls)(cls.__name__, (cls,), ns)
        finally:
            if own is _NONE:
                type.__delattr__(cls, "__init_subclass__")
            else:
                type.__setattr__(cls, "__init_subclass__", own)
    except Exception:
        made = None
    _CLASSES[key] = made
    return made


def watch_copy(copy: Any, cls: type, names: frozenset[str], log: AttrLog) -> Any:
    """``copy`` (a new module copy with an empty ``__dict__``) made an instance of the
    watching subclass for ``names`` (those ``cls`` lets be watched), logged in ``log``;
    unchanged where none can be."""
    names = frozenset(n for n in names if watchable(cls, n))
    if not names:
        return copy
    sub = watching_class(cls, names)
    if sub is None:
        return copy
    copy.__class__ = sub
    log.watched[id(copy)] = names
    return copy


@contextmanager
def originals_watched(log: AttrLog, originals: Mapping[int, Any],
                      copies: Mapping[int, Any]) -> Iterator[None]:
    """While the block runs, each user's module whose copy is watched (``originals``: a
    copy's id -> the original; ``copies``: an original's id -> the copy) is an instance
    of the copy's watching class, so that a read through another reference to it is seen
    (see the module doc); its own class is put back after, whatever happens."""
    swapped: list[tuple[Any, type]] = []
    try:
        for k in list(log.watched):
            original = originals.get(k)
            copy = copies.get(id(original)) if original is not None else None
            if copy is None or id(copy) != k:
                continue
            cls, watching = type(original), type(copy)
            if cls is watching or not issubclass(watching, cls):
                continue
            _SET_CLASS(original, watching)
            swapped.append((original, cls))
            log.stands_for[id(original)] = k
        yield
    finally:
        for original, cls in reversed(swapped):
            _SET_CLASS(original, cls)  # (the watching class's ``__class__`` is read-only)
            log.stands_for.pop(id(original), None)


_SET_CLASS: Any = object.__dict__["__class__"].__set__
"""Sets an object's class past a ``__class__`` property of its class."""


__all__ = ["AttrLog", "originals_watched", "watch_copy", "watchable", "watching_class"]
