"""Which plain attributes of a module a trace reads before it writes them.

A module whose ``forward`` writes a Python value into its own state (``self.last =
y.item()``, ``self.count = int(n.item())``) would otherwise compile on every call: the
module guard (`thunder_ir.runtime.guards.module_guard`) keys programs by every plain
attribute's value, and the epilogue writes a new one after each call. An attribute that
the traced code writes before it reads it (or never reads) does not determine the program,
so the guard need not key it (`thunder_ir.runtime.free_attrs`). This module finds, while a
trace runs, which of the attributes the runtime asks about (``watch``: per module, names
that some earlier trace's epilogue wrote) are read first.

The module copies the trace runs (`thunder_ir.frontend.tracer._shadow_modules`) keep the
user's class: ``type(self) is M``, ``__name__``, ``__mro__``, zero-argument ``super()``, a
registry keyed by ``type(self)``, pickling by qualified name all answer as in eager. While
the user's code runs (`watching`), the class of each watched copy holds, in its own
``__dict__``, a data descriptor per watched name (`_Watched`: reading ``self.last`` through
``getattr``, ``hasattr``, a method, records a read unless the trace wrote it before;
``self.last = v`` and ``del self.last`` record a write; the value lives in the instance's
``__dict__`` as always) and a ``__getattribute__`` that notes reads of ``self.__dict__``
(``vars(self)``, ``self.__dict__[...]``: every watched name not written yet counts as
read) from anywhere but the attribute machinery of ``nn.Module``, and otherwise defers to
the class's own. They are set with ``type.__setattr__`` (no metaclass, ``__set_name__`` or
``__init_subclass__`` code of the user's runs), counted per class and name across threads
(`_install`), and taken away when the last trace that watches them ends, failure or not.
Outside a watching trace's thread they only pass through: another thread running the
model eagerly meanwhile gets what it would anyway. What the user's code can still tell
while a trace runs: the class's own ``__dict__`` (``vars(type(self))``, ``dir(type(self))``)
lists the watched names and ``__getattribute__``; ``object.__getattribute__(self,
"__dict__")`` is not seen as a read.

Recording happens only while the user's code runs (`AttrLog.active`) and only for the
copies (and originals) this trace watches; the tracer's own reads do not count. A read
through another reference to the user's module (a closure or a global holding the model
rather than ``self``) reads the user's object, which is an instance of the same class: any
read of a watched name there counts as read first (``stands_for``). What is not seen is
counted as read: a name the class (or a base) defines, or a class that cannot take the
descriptor, leaves its names read; so does a descriptor the user's code replaced while
the trace ran.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

_REAL_DICT: Any = torch.nn.Module.__dict__["__dict__"]
"""The instance-dict descriptor of ``nn.Module`` subclasses (a module's real ``__dict__``)."""

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
        stands_for: id of a user's module whose copy is watched -> the copy's id.
        classes: id of a module copy -> its class.
    """

    __slots__ = ("classes", "read", "stands_for", "watched", "written")

    def __init__(self) -> None:
        self.watched: dict[int, frozenset[str]] = {}
        self.classes: dict[int, type] = {}
        self.written: dict[int, set[str]] = {}
        self.read: dict[int, set[str]] = {}
        self.stands_for: dict[int, int] = {}

    def note_read(self, obj: Any, name: str) -> None:
        """``obj.name`` was read: a read first unless written before (through the copy;
        a read of the user's original, another reference, always counts). Objects and
        names this trace does not watch (another instance of the class) are not noted."""
        k = id(obj)
        copy = self.stands_for.get(k)
        if copy is not None:
            if name in self.watched.get(copy, ()):
                self.read.setdefault(copy, set()).add(name)
        elif name in self.watched.get(k, ()) and name not in self.written.get(k, ()):
            self.read.setdefault(k, set()).add(name)

    def note_write(self, obj: Any, name: str) -> None:
        """``obj.name`` was written or deleted."""
        k = id(obj)
        k = self.stands_for.get(k, k)
        if name in self.watched.get(k, ()):
            self.written.setdefault(k, set()).add(name)

    def note_all(self, obj: Any) -> None:
        """``obj``'s ``__dict__`` was exposed: every watched name not written, read."""
        k = id(obj)
        if k in self.stands_for:
            k = self.stands_for[k]
            self.read.setdefault(k, set()).update(self.watched[k])
        elif k in self.watched:
            done = self.written.get(k, set())
            self.read.setdefault(k, set()).update(self.watched[k] - done)

    def unwatch(self, cls: type, names: frozenset[str]) -> None:
        """``names`` could not be watched on ``cls``: its copies do not watch them (so
        they count as read, `thunder_ir.runtime.free_attrs`)."""
        if not names:
            return
        for k in [k for k, c in self.classes.items() if c is cls]:
            left = self.watched[k] - names
            if left:
                self.watched[k] = left
            else:
                del self.watched[k], self.classes[k]

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
    """The data descriptor of one watched name on a module class (see the module doc):
    reads and writes the instance's ``__dict__`` as Python would without it."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:  # the class has no such attribute (`watchable`): Python's words
            raise AttributeError(f"type object '{getattr(owner, '__name__', owner)}' has no "
                                 f"attribute '{self.name}'", name=self.name, obj=owner)
        log = _log()
        if log is not None:
            log.note_read(obj, self.name)
        try:
            return _REAL_DICT.__get__(obj)[self.name]
        except KeyError:
            # not in the instance: Python then calls ``nn.Module.__getattr__``, as it
            # would without the descriptor
            raise AttributeError(self.name) from None

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


def _dict_watcher(cls: type, own: Any) -> Callable[[Any, str], Any]:
    """The ``__getattribute__`` set on ``cls`` while it is watched: notes a read of
    ``__dict__`` (see the module doc), then answers as ``own`` (the class's own
    ``__getattribute__``, or None: its bases')."""

    def __getattribute__(self: Any, name: str) -> Any:
        if name == "__dict__":
            log = _log()
            if log is not None and sys._getframe(1).f_code not in _QUIET:
                log.note_all(self)
        if own is not None:
            return own(self, name)
        return _SUPER(cls, self).__getattribute__(name)

    return __getattribute__


_SUPER: Any = super


_LOCK = threading.Lock()
_NAMES: dict[tuple[type, str], tuple[_Watched, int]] = {}
"""(class, name) -> the descriptor set there, and how many running traces watch it."""
_GETATTRS: dict[type, tuple[Any, Any, int]] = {}
"""class -> the ``__getattribute__`` set there, the class's own before (or `_NONE`), and
how many running traces watch the class."""
_NONE = object()


def watchable(cls: type, name: str) -> bool:
    """Whether ``name`` can be watched on instances of ``cls``: the class (nor a base)
    defines nothing of that name (a property, a method, a class default)."""
    return not any(name in c.__dict__ and not isinstance(c.__dict__[name], _Watched)
                   for c in cls.__mro__)


def _install(cls: type, names: frozenset[str]) -> frozenset[str] | None:
    """Sets the descriptors of ``names`` and the ``__dict__`` watcher on ``cls`` (or counts
    one more trace watching those already set). Returns the names now watched there, or
    None where the class cannot take the watcher (nothing set)."""
    got: set[str] = set()
    with _LOCK:
        try:
            entry = _GETATTRS.get(cls)
            if entry is None:
                own = cls.__dict__.get("__getattribute__", _NONE)
                fn = _dict_watcher(cls, None if own is _NONE else own)
                type.__setattr__(cls, "__getattribute__", fn)
                entry = (fn, own, 0)
            _GETATTRS[cls] = (entry[0], entry[1], entry[2] + 1)
        except (TypeError, AttributeError):
            return None
        for n in names:
            have = _NAMES.get((cls, n))
            if have is not None and cls.__dict__.get(n) is have[0]:
                _NAMES[(cls, n)] = (have[0], have[1] + 1)
                got.add(n)
            elif have is None and watchable(cls, n) and n not in cls.__dict__:
                d = _Watched(n)
                try:
                    type.__setattr__(cls, n, d)
                except (TypeError, AttributeError):
                    continue
                _NAMES[(cls, n)] = (d, 1)
                got.add(n)
    return frozenset(got)


def _uninstall(cls: type, names: frozenset[str]) -> frozenset[str]:
    """Undoes one `_install` of ``names`` on ``cls`` (what the last trace watching them
    set is taken away). Returns the names whose descriptor the user's code replaced (their
    reads were not all seen)."""
    lost = set()
    with _LOCK:
        for n in names:
            d, count = _NAMES[(cls, n)]
            if cls.__dict__.get(n) is not d:
                lost.add(n)
            if count > 1:
                _NAMES[(cls, n)] = (d, count - 1)
                continue
            del _NAMES[(cls, n)]
            if n not in lost:
                type.__delattr__(cls, n)
        fn, own, count = _GETATTRS[cls]
        if count > 1:
            _GETATTRS[cls] = (fn, own, count - 1)
        else:
            del _GETATTRS[cls]
            if cls.__dict__.get("__getattribute__") is fn:
                if own is _NONE:
                    type.__delattr__(cls, "__getattribute__")
                else:
                    type.__setattr__(cls, "__getattribute__", own)
    return frozenset(lost)


def watch_copy(copy: Any, cls: type, names: frozenset[str], log: AttrLog) -> Any:
    """Notes in ``log`` that ``copy`` (a new module copy of class ``cls``) watches
    ``names`` (those ``cls`` lets be watched; `watching` sets them on the class while the
    user's code runs). Returns ``copy``, whose class stays ``cls``."""
    names = frozenset(n for n in names if watchable(cls, n))
    if names:
        log.watched[id(copy)] = names
        log.classes[id(copy)] = cls
    return copy


@contextmanager
def watching(log: AttrLog, originals: Mapping[int, Any], copies: Mapping[int, Any]
             ) -> Iterator[None]:
    """While the block runs (the user's code), the classes of the copies ``log`` watches
    record reads and writes of the watched names (see the module doc), and each user's
    module whose copy is watched (``originals``: a copy's id -> the original; ``copies``:
    an original's id -> the copy) stands for its copy, so that a read through another
    reference to it is seen. Everything set on the classes is taken away after, failure
    or not."""
    by_class: dict[type, set[str]] = {}
    for k, watched in log.watched.items():
        by_class.setdefault(log.classes[k], set()).update(watched)
    done: list[tuple[type, frozenset[str]]] = []
    try:
        for cls, names in by_class.items():
            got = _install(cls, frozenset(names))
            if got is not None:
                done.append((cls, got))
            log.unwatch(cls, frozenset(names) - (got or frozenset()))
        for k in log.watched:
            original = originals.get(k)
            if original is not None and id(copies.get(id(original))) == k:
                log.stands_for[id(original)] = k
        yield
    finally:
        for cls, got in reversed(done):
            lost = _uninstall(cls, got)
            if lost:  # replaced by the user's code: reads there were not all seen
                for k, on in log.watched.items():
                    if log.classes[k] is cls:
                        log.read.setdefault(k, set()).update(on & lost)
        log.stands_for.clear()


__all__ = ["AttrLog", "watch_copy", "watchable", "watching"]
