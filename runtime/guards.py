"""Guards on the Python state a traced program baked in.

Tracing reads more than the call's arguments: a module's plain attributes (``self.scale``,
``self.use_relu``, ``self.mask_cache``), its submodules, parameters, buffers and hooks, the
globals and closure cells its code reads, and config objects hanging off those. The
program is only valid while they are unchanged, so the cache key carries a small integer
per group of such state (a *token*), and a change gives a new token: a miss, then a new
trace, or a hit on the program already traced for that state.

A token costs little on a cached call. Each group lists the dicts that hold its state
(``module.__dict__``, ``_parameters``, hook dicts, a module's globals, a config object's
``__dict__``) and remembers their versions: CPython bumps a dict's version on every write
(read here through torch's ``dict_version``), so a cached call compares one tuple of
integers per group (or, once nothing moved for a few calls, one C call over all of them:
`thunder_ir.runtime.c_guards`) and only re-reads the state when a version moved.
Re-reading builds a *fingerprint* (primitive values by value, with ``-0.0`` and NaN told
apart; other objects by identity, kept alive so that identities are not reused) and
interns it as the token.
Closure cells cannot be watched; their contents are fingerprinted on every call.
"""

from __future__ import annotations

import dis
import enum
import types
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import torch

from thunder_ir.runtime.c_guards import dicts_manager, ready
from thunder_ir.runtime.origins import Field

# ---- dict versions


def _snapshot_version(d: dict[Any, Any]) -> Hashable:
    """Stand-in for ``dict_version`` where torch's is unavailable: the keys and the
    identities of the values (slower, as precise)."""
    return (tuple(d), tuple(map(id, d.values())))


def _probe_dict_version() -> Callable[[dict[Any, Any]], Hashable]:
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:  # pragma: no cover - depends on the torch build
        return _snapshot_version
    try:
        d: dict[str, Any] = {"a": 1}
        v0 = dict_version(d)
        same = dict_version(d) == v0
        d["a"] = object()
        moved = dict_version(d) != v0
    except Exception:  # pragma: no cover - depends on the torch build
        return _snapshot_version
    return dict_version if same and moved else _snapshot_version


dict_version: Callable[[dict[Any, Any]], Hashable] = _probe_dict_version()
"""A value that changes whenever the dict is written (torch's, else `_snapshot_version`)."""

_summary: Callable[[Iterable[Any]], Any] = sum if dict_version is not _snapshot_version else tuple
"""What a guard compares of its dicts' versions: their sum where versions are integers that
only grow (CPython's, drawn from one global counter: any write raises the sum), else the
tuple of snapshots."""

# ---- fingerprints

_PRIMITIVE = (type(None), bool, int, str, bytes, torch.dtype, torch.device, torch.layout,
              torch.memory_format)


def value_key(v: Any, keep: list[Any]) -> Hashable:
    """What a guard compares for one Python value: primitives by value (floats by ``repr``,
    so ``-0.0`` differs from ``0.0`` and NaN equals NaN), tuples of them element-wise,
    anything else by identity (appended to ``keep`` so its id stays unique while the guard
    lives). Mutable containers (a list a function appends to) go by identity too: their
    contents change without a rebinding the guard could see."""
    t = type(v)
    if t in _PRIMITIVE:
        return (t, v)
    if t is float or t is complex:
        return (t, repr(v))
    if isinstance(v, enum.Enum):
        return (t, v.value)
    if (t is tuple or t is torch.Size) and len(v) <= 64:
        return (t, tuple(value_key(x, keep) for x in v))
    keep.append(v)
    return ("id", t, id(v))


_MACHINERY = frozenset({"logging", "threading", "_thread", "weakref", "queue", "concurrent",
                        "asyncio", "multiprocessing", "io", "_io", "socket", "subprocess",
                        "selectors", "tempfile", "sqlite3", "tqdm"})
"""Packages whose objects carry run-time bookkeeping, not configuration: a logger's level
cache fills as it is asked (``logger.warning_once``), a lock or a progress bar changes
as the program runs. Guards take such an object by identity, never its fields."""


def _config_like(v: Any) -> bool:
    """An object whose fields model code reads (``self.config.use_cache``): a plain
    instance with a ``__dict__``, not a module, tensor, function or class, nor the
    machinery of a logger, a thread or a stream (`_MACHINERY`)."""
    return (hasattr(v, "__dict__") and not isinstance(
        v, torch.nn.Module | torch.Tensor | type | types.FunctionType | types.MethodType
        | types.ModuleType | types.BuiltinFunctionType | Callable)
        and type(v).__module__.partition(".")[0] not in _MACHINERY)


SYMBOLIC_INT = "symbolic int"
"""What a fingerprint holds for an ``int`` field whose value the programs read as a symbolic
number (`thunder_ir.runtime.symbolic_attrs`): its type, not its value, which the cache key
holds instead."""

REBOUND_TENSOR = "rebound tensor"
"""What a fingerprint holds (with the tensor's type) for a buffer or plain tensor attribute
that ``forward`` rebinds on every call (`thunder_ir.runtime.rebound`): not its identity;
the programs read it on each call and the cache key holds its metadata."""


def rebound_key(v: Any) -> Hashable | None:
    """The fingerprint of a rebound state's value while it holds a tensor (not a
    parameter), else None (then it is fingerprinted as any value)."""
    if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter):
        return (REBOUND_TENSOR, type(v))
    return None


class _AnyTensorOf:
    """What a list's item that ``forward`` rebinds (`rebound_key`) is compared with on each
    call (`StateGuard.check` compares a list's items' `value_key` with what it stored):
    equal to any tensor of type ``t`` (not a parameter), so a new tensor there each call
    does not make the guard re-read the module tree; anything else there differs."""

    __slots__ = ("t",)

    def __init__(self, t: type) -> None:
        self.t = t

    def __eq__(self, other: object) -> bool:
        return (type(other) is tuple and len(other) == 3 and other[0] == "id"
                and other[1] is self.t)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((REBOUND_TENSOR, self.t))


MAX_DEPTH = 8
"""How deep guards follow config objects, dicts and lists from a module's fields or a
global (``self.cfg.inner.table["bias"]`` is depth 3)."""
MAX_FIELDS = 4096
"""How many values one guard fingerprints at most; past it (or past `MAX_DEPTH`), a
value is guarded by identity alone and the user is told (`StateGuard.unguarded`)."""
MAX_ITEMS = 64
"""A dict or list longer than this is guarded by identity (its contents are not read)."""


class _Walk:
    """One fingerprint's walk: the dicts to watch, the lists to compare on each call, the
    objects kept alive, the values seen (cycles), a budget, and where it stopped."""

    __slots__ = ("budget", "containers", "ints", "keep", "lists", "seen", "stopped",
                 "watched")

    def __init__(self, keep: list[Any], watched: list[dict[Any, Any]] | None,
                 lists: list[tuple[list[Any], tuple[Any, ...]]] | None,
                 containers: Mapping[int, frozenset[Any]] | None = None,
                 ints: Mapping[int, frozenset[str]] | None = None) -> None:
        self.keep, self.watched, self.lists = keep, watched, lists
        self.ints = ints or {}
        """Id of a plain object -> its fields whose ``int`` values are symbolic
        (`thunder_ir.runtime.symbolic_attrs`): fingerprinted by type (`SYMBOLIC_INT`)."""
        self.containers = containers or {}
        """Id of a dict, list or plain object -> the keys (`Field` s of an object) of its
        entries that ``forward`` rebinds to tensors (`thunder_ir.runtime.rebound`):
        fingerprinted by type (`rebound_key`)."""
        self.seen: set[int] = set()
        self.budget = MAX_FIELDS
        self.stopped: list[str] = []


def fields_key(d: dict[Any, Any], keep: list[Any], watched: list[dict[Any, Any]] | None,
               skip: frozenset[str] = frozenset(),
               lists: list[tuple[list[Any], tuple[Any, ...]]] | None = None,
               ints: frozenset[str] = frozenset(), path: str = "",
               stopped: list[str] | None = None, seen: set[int] | None = None,
               tensors: frozenset[str] = frozenset(),
               containers: Mapping[int, frozenset[Any]] | None = None,
               object_ints: Mapping[int, frozenset[str]] | None = None) -> Hashable:
    """The fingerprint of a dict of fields. With ``watched``, a config-like value's own
    fields, a plain dict's items and (with ``lists``) a list's items are fingerprinted too,
    down to `MAX_DEPTH` levels (``self.cfg.inner.gain[1]``): dicts and objects' field
    dicts are watched by version, lists (which have none) compared item by item on every
    call (`StateGuard`). ``ints``: fields that, while they hold an ``int``, are
    fingerprinted by that type alone (`SYMBOLIC_INT`); ``tensors``: fields that, while they
    hold a tensor, are fingerprinted by its type alone (`rebound_key`). ``path`` names ``d`` and
    ``stopped`` collects where the walk gave up (too deep, too much state). ``seen``: the
    objects already followed by the caller's other calls (a config every layer holds is
    walked and watched once per fingerprint). ``object_ints``: ``ints`` of the plain
    objects inside, by their ids."""
    walk = _Walk(keep, watched, lists, containers, object_ints)
    if seen is not None:
        walk.seen = seen
    out = _fields(walk, d, skip, ints, path, 0, tensors)
    if stopped is not None:
        stopped += walk.stopped
    return out


def _fields(walk: _Walk, d: dict[Any, Any], skip: frozenset[str], ints: frozenset[str],
            path: str, depth: int, tensors: frozenset[str] = frozenset()) -> Hashable:
    out: list[Any] = []
    for k, v in d.items():
        if k in skip:
            continue
        if k in ints and type(v) is int:
            out.append((k, SYMBOLIC_INT))
        elif k in tensors and (r := rebound_key(v)) is not None:
            out.append((k, r))
        else:
            out.append((k, _value(walk, v, f"{path}.{k}", depth)))
    return tuple(out)


def _value(walk: _Walk, v: Any, path: str, depth: int) -> Hashable:
    t = type(v)
    if t in _PRIMITIVE or t is float or t is complex:
        return value_key(v, walk.keep)
    deep = _config_like(v) or (t is dict and len(v) <= MAX_ITEMS) or (
        t is list and len(v) <= MAX_ITEMS and walk.lists is not None)
    if not deep or walk.watched is None:
        return value_key(v, walk.keep)
    if depth >= MAX_DEPTH or walk.budget <= 0:
        walk.stopped.append(path)
        return value_key(v, walk.keep)
    if id(v) in walk.seen:  # a cycle, or the same object twice: its identity
        return value_key(v, walk.keep)
    walk.seen.add(id(v))
    walk.keep.append(v)
    walk.budget -= len(v) if t is dict or t is list else len(v.__dict__)
    rebound = walk.containers.get(id(v), ()) if walk.containers else ()
    if t is list:
        if walk.lists is not None:
            walk.lists.append((v, tuple(
                _AnyTensorOf(type(x)) if i in rebound and rebound_key(x) is not None
                else value_key(x, []) for i, x in enumerate(v))))
        return ("list", id(v), tuple(
            r if i in rebound and (r := rebound_key(x)) is not None
            else _value(walk, x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)))
    if walk.watched is not None:
        walk.watched.append(v if t is dict else v.__dict__)
    if t is dict:
        return ("dict", id(v), tuple((value_key(k, walk.keep),
                                      r if k in rebound and (r := rebound_key(x)) is not None
                                      else _value(walk, x, f"{path}[{k!r}]", depth + 1))
                                     for k, x in v.items()))
    # (a plain object's fields that ``forward`` rebinds to tensors: `Field` entries)
    fields = frozenset(k.name for k in rebound if type(k) is Field) if rebound else frozenset()
    return (t, id(v), _fields(walk, v.__dict__, frozenset(), walk.ints.get(id(v), frozenset()),
                              path, depth + 1, fields))


class StateGuard:
    """One group of state: the dicts that hold it and how to fingerprint it.

    ``describe(dicts, keep, hooks)`` fills the lists of dicts to watch and returns the
    fingerprint; it runs again whenever a watched dict changes (the lists themselves may
    change, e.g. when a submodule is added). ``dicts`` are watched by version. ``hooks``
    (hook dicts, four per module) are watched more cheaply, by their total length and
    torch's count of hook handles ever made (``RemovableHandle.next_id``): a hook is added
    through a new handle and removed by deleting its entry; only when either moved are
    their versions compared. With ``always`` (closure cells) it runs on every check.
    Once `CALM_CALLS` checks in a row found nothing written, one C call checks every
    watched dict's version, hook dicts included (`StateGuard.cheap`,
    `thunder_ir.runtime.c_guards.dicts_manager`: ResNet's 433 dicts, 22 -> ~3 µs), and
    the first write it sees puts the check above back."""

    __slots__ = ("always", "calm", "cheap", "describe", "dicts", "epoch", "hook_count",
                 "hook_versions", "hooks", "keep", "lists", "name", "others", "plain_lists",
                 "render", "tok", "tokens", "unguarded", "versions")

    def __init__(self, name: str,
                 describe: Callable[[list[Any], list[Any], list[Any]], Hashable],
                 render: Callable[[], list[str]], always: bool = False) -> None:
        self.name = name
        self.describe = describe
        self.render = render
        self.always = always
        self.dicts: list[Any] = []
        self.hooks: list[Any] = []
        self.lists: list[tuple[list[Any], tuple[Any, ...]]] = []
        self.plain_lists: tuple[tuple[list[Any], list[Any], list[type]], ...] = ()
        self.others: tuple[tuple[list[Any], tuple[Any, ...]], ...] = ()
        self.versions: Any = None
        self.hook_versions: Any = None
        self.hook_count = 0
        self.epoch = -1
        self.tokens: dict[Hashable, tuple[int, list[Any]]] = {}
        self.keep: list[Any] = []
        self.tok = -1
        self.unguarded: list[str] = []
        """Where the last fingerprint stopped following the state (deeper than
        `MAX_DEPTH`, or past `MAX_FIELDS` values): a change there is not seen."""
        self.cheap: tuple[Any, tuple[Any, ...]] | None = None
        """A C check that no watched dict (hook dicts included) was written since the
        Python check below last passed (`thunder_ir.runtime.c_guards.dicts_manager`,
        and the dicts it checks), or None: made after `CALM_CALLS` calls in a row found
        nothing changed, dropped at the first that finds a write (a module that writes
        its attributes on every call keeps the Python check)."""
        self.calm = 0

    def check(self) -> int:
        """The token of the state as it is now."""
        cheap = self.cheap
        if cheap is not None:
            if cheap[0].check(cheap[1]):  # no dict written since the last Python check
                if self.lists and self._lists_moved():
                    return self.refresh()  # a list changed in place (self.coefs[0] = 10.0)
                return self.tok
            self.cheap = None
            self.calm = 0
        if self.always or _summary(map(dict_version, self.dicts)) != self.versions:
            return self.refresh()
        if self.lists and self._lists_moved():
            return self.refresh()  # a list changed in place (self.coefs[0] = 10.0)
        hooks = self.hooks
        if hooks and (_Handles.next_id != self.epoch
                      or sum(map(len, hooks)) != self.hook_count):
            if _summary(map(dict_version, hooks)) != self.hook_versions:
                return self.refresh()
            self.epoch = _Handles.next_id  # handles made elsewhere: our hooks are as they were
            self.hook_count = sum(map(len, hooks))
        self.calm += 1
        if self.calm >= CALM_CALLS and len(self.dicts) + len(hooks) >= MIN_DICTS and ready():
            dicts = (*self.dicts, *hooks)
            manager = dicts_manager(dicts)
            self.cheap = None if manager is None else (manager, dicts)
            self.calm = -1 << 30 if manager is None else 0  # (refused: not asked again)
        return self.tok

    def _lists_moved(self) -> bool:
        """Whether a watched list's items changed in place (lists have no version): a
        list of ints, strings, bools and Nones by its items' types, then its items
        (two C compares: ``config.hidden_sizes``), any other item by `value_key`."""
        for lst, copy, kinds in self.plain_lists:
            if list(map(type, lst)) != kinds or lst != copy:  # (types first: no __eq__)
                return True
        return any(len(lst) != len(items) or any(
            value_key(x, []) != y for x, y in zip(lst, items)) for lst, items in self.others)

    def _split_lists(self) -> None:
        """Sorts the watched lists as they were fingerprinted (`_lists_moved`)."""
        plain, others = [], []
        for lst, items in self.lists:
            if all(type(y) is tuple and len(y) == 2 and y[0] in _PLAIN_ITEMS for y in items):
                plain.append((lst, [y[1] for y in items], [y[0] for y in items]))
            else:
                others.append((lst, items))
        self.plain_lists, self.others = tuple(plain), tuple(others)

    def source(self) -> str:
        """The guard as readable Python: what the program's validity rests on."""
        how = ("checked on every call" if self.always else
               f"re-read when one of its {len(self.dicts) + len(self.hooks)} dicts changes")
        lines = [f"# {self.name} ({how}; now token {self.tok})"]
        lines += [c if c.startswith("#") else f"check({c})" for c in self.render()]
        return "\n".join(lines)

    def unchanged(self) -> bool:
        """Whether no watched dict was written since the last `check` (one sum)."""
        return bool(_summary(map(dict_version, self.dicts)) == self.versions)

    def resync(self) -> None:
        """Takes the watched dicts' versions as they are now: the caller wrote to them,
        after `unchanged`, only what leaves the fingerprint as it was (a symbolic
        ``int`` attribute's new value, `thunder_ir.runtime.symbolic_attrs`)."""
        self.versions = _summary(map(dict_version, self.dicts))
        self.cheap, self.calm = None, 0

    def invalidate(self) -> None:
        """Makes the next `check` re-read the state (what ``describe`` fingerprints
        changed)."""
        self.versions = None
        self.cheap, self.calm = None, 0

    def refresh(self) -> int:
        self.cheap, self.calm = None, 0
        dicts: list[Any] = []
        hooks: list[Any] = []
        keep: list[Any] = []
        self.lists = []
        stopped, self.unguarded = self.unguarded, []
        fp = self.describe(dicts, keep, hooks)
        self._split_lists()
        if self.unguarded and self.unguarded != stopped:
            shown_paths = ", ".join(self.unguarded[:4]) + (
                f" and {len(self.unguarded) - 4} more" if len(self.unguarded) > 4 else "")
            warnings.warn(
                f"thunder_ir.jit: guarding the {self.name}, it does not follow the state "
                f"past {shown_paths} (deeper than {MAX_DEPTH} levels of attributes, items "
                f"and indices, or past {MAX_FIELDS} values): a program that reads there does "
                "not see a change made there. Pass such a value as an argument, or keep it "
                "nearer the module.", stacklevel=5)
        self.dicts, self.hooks = dicts, hooks
        self.versions = _summary(map(dict_version, dicts))
        self.hook_versions = _summary(map(dict_version, hooks))
        self.hook_count = sum(map(len, hooks))
        self.epoch = _Handles.next_id
        hit = self.tokens.get(fp)
        if hit is None:
            hit = (len(self.tokens), keep)
            self.tokens[fp] = hit
        self.tok = hit[0]
        return self.tok


_Handles = torch.utils.hooks.RemovableHandle

_PLAIN_ITEMS = frozenset({int, str, bool, type(None)})
"""The item types a watched list is compared by (`StateGuard._lists_moved`): their
``==`` is their value's, without a user's ``__eq__``."""

CALM_CALLS = 8
"""Calls in a row whose Python check found no watched dict written before a guard makes
its C check (`StateGuard.cheap`)."""
MIN_DICTS = 16
"""A guard of fewer dicts (a module's globals) keeps the Python check: its sum costs
less than the C call."""


# ---- the state groups


def shown(v: Any) -> str:
    """A guarded value as a check shows it: ``== value`` for primitives, ``is <...>``
    for objects compared by identity."""
    if type(v) in _PRIMITIVE or type(v) in (float, complex) or isinstance(v, enum.Enum):
        return f"== {v!r}"
    if isinstance(v, torch.Tensor):
        return f"is <{type(v).__name__} {tuple(v.shape)} {v.dtype} at {id(v):#x}>"
    if type(v) in (tuple, torch.Size) and len(v) <= 8:
        return f"== {v!r}"
    return f"is <{type(v).__name__} at {id(v):#x}>"


def _field_checks(prefix: str, d: dict[Any, Any], skip: frozenset[str] = frozenset(),
                  ints: frozenset[str] = frozenset(),
                  tensors: frozenset[str] = frozenset()) -> list[str]:
    """The checks a guard makes of a dict of fields, as readable Python (the state
    `fields_key` follows, to the same depth)."""
    out: list[str] = []
    seen: set[int] = set()

    def value(path: str, v: Any, depth: int) -> None:
        out.append(f"{path} {shown(v)}")
        t = type(v)
        if depth >= MAX_DEPTH or id(v) in seen or len(out) > MAX_FIELDS:
            return
        if _config_like(v):
            seen.add(id(v))
            for k, x in v.__dict__.items():
                value(f"{path}.{k}", x, depth + 1)
        elif (t is dict or t is list) and len(v) <= MAX_ITEMS:
            seen.add(id(v))
            for k, x in (v.items() if t is dict else enumerate(v)):
                value(f"{path}[{k!r}]", x, depth + 1)

    for k, v in d.items():
        if k in skip:
            continue
        if k in ints and type(v) is int:
            out.append(f"type({prefix}.{k}) is int")  # its value: in the key (symbolic)
        elif k in tensors and rebound_key(v) is not None:  # its metadata: in the key
            out.append(f"type({prefix}.{k}) is {type(v).__qualname__}")
        else:
            value(f"{prefix}.{k}", v, 0)
    return out


_MODULE_DICTS = ("_parameters", "_buffers", "_modules", "_forward_hooks",
                 "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_HOOK_DICTS = frozenset(_MODULE_DICTS[3:])
_SKIP_FIELDS = frozenset({
    *_MODULE_DICTS, "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_non_persistent_buffers_set",
    "_is_full_backward_hook"})
MODULE_FIELDS = _SKIP_FIELDS
"""A module's own bookkeeping fields (parameter, buffer, submodule and hook dicts): not the
plain attributes model code reads and writes."""
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


def module_guard(root: torch.nn.Module,
                 ints: dict[int, frozenset[str]] | None = None,
                 tensors: dict[int, frozenset[str]] | None = None,
                 containers: dict[int, frozenset[Any]] | None = None,
                 free: Mapping[int, frozenset[str]] | None = None) -> StateGuard:
    """The state of a module tree: each module's class and plain attributes (config objects,
    dicts and lists followed down to `MAX_DEPTH` levels), its parameters', buffers' and
    submodules' identities, and every module hook (its own and torch's global ones).

    ``ints``: per module (by id), the attributes whose ``int`` values the programs read as
    symbolic numbers (`thunder_ir.runtime.symbolic_attrs`, which fills the dict and
    `StateGuard.invalidate`s the guard): guarded on being ``int``s; their values are in the
    cache key instead. ``tensors``: per module (by id), the buffers and plain attributes
    that ``forward`` rebinds on every call (`thunder_ir.runtime.rebound`, which fills the
    dict): guarded on holding a tensor of their type; their metadata is in the cache key.
    ``containers``: the same for entries of the dicts and lists modules hold (by the
    container's id: ``self.cache["k"]``, ``self.states[0]``). ``free``: per module (by id),
    the plain attributes ``forward`` writes before reading them
    (`thunder_ir.runtime.free_attrs`): left out of the fingerprint altogether."""
    g = torch.nn.modules.module
    free = {} if free is None else free
    ints = {} if ints is None else ints
    tensors = {} if tensors is None else tensors
    none: frozenset[str] = frozenset()

    def describe(dicts: list[Any], keep: list[Any], hooks: list[Any]) -> Hashable:
        out: list[Any] = []
        seen: set[int] = set()
        for name in _GLOBAL_HOOKS:
            d = getattr(g, name)
            hooks.append(d)
            out.append(tuple(map(id, d.values())))
            keep.extend(d.values())
        for path, m in root.named_modules(prefix="self"):
            md = m.__dict__
            dicts.append(md)
            rebound = tensors.get(id(m), none)
            mine = free.get(id(m), none) - rebound  # (rebound state: keyed by metadata)
            parts: list[Any] = [id(m), type(m),
                                fields_key(md, keep, dicts,
                                           _SKIP_FIELDS | mine if mine else _SKIP_FIELDS,
                                           guard.lists,
                                           ints.get(id(m), none), path, guard.unguarded,
                                           seen, rebound, containers, ints)]
            for name in _MODULE_DICTS:
                d = md.get(name)
                if d is None:
                    continue
                (hooks if name in _HOOK_DICTS else dicts).append(d)
                if rebound and name == "_buffers":
                    parts.append((name, tuple(
                        (k, (k in rebound and rebound_key(v)) or id(v)) for k, v in d.items())))
                    keep.extend(v for k, v in d.items() if k not in rebound)
                    continue
                parts.append((name, tuple((k, id(v)) for k, v in d.items())))
                keep.extend(d.values())
            keep.append(m)
            out.append(tuple(parts))
        return tuple(out)

    def render() -> list[str]:
        out = []
        for name in _GLOBAL_HOOKS:
            hooks = list(getattr(g, name).values())
            out.append(f"torch.nn.modules.module.{name} == {_names(hooks)}")
        for path, m in root.named_modules(prefix="self"):
            out.append(f"type({path}) is {type(m).__qualname__}")
            rebound = tensors.get(id(m), none)
            mine = free.get(id(m), none) - rebound
            out += [f"# {path}.{k}: not checked (forward writes it before reading it)"
                    for k in sorted(mine)]
            out += _field_checks(path, m.__dict__, _SKIP_FIELDS | mine,
                                 ints=ints.get(id(m), none), tensors=rebound)
            for name in _MODULE_DICTS:
                d = m.__dict__.get(name)
                if d is None:
                    continue
                if name in ("_parameters", "_buffers") or name == "_modules":
                    out += [f"type({path}.{k}) is {type(v).__qualname__}"
                            if name == "_buffers" and k in rebound and rebound_key(v)
                            else f"{path}.{k} {shown(v)}" for k, v in d.items()]
                else:
                    out.append(f"{path}.{name} == {_names(list(d.values()))}")
        return out

    guard = StateGuard("module attributes, submodules, parameters and hooks", describe, render)
    return guard


def _names(fns: list[Any]) -> str:
    return "[" + ", ".join(getattr(f, "__qualname__", type(f).__name__) for f in fns) + "]"


_NAMES: dict[tuple[types.CodeType, tuple[str, ...]], frozenset[str]] = {}

_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_LOAD_GLOBAL = dis.opmap["LOAD_GLOBAL"]


def _names_of(code: types.CodeType, opnames: tuple[str, ...]) -> frozenset[str]:
    """The names ``code``'s instructions ``opnames`` take (cached per code object).

    The code units are read directly (an opcode and its argument byte, ``EXTENDED_ARG``
    prefixes widening the next argument): ``dis.get_instructions`` builds an object per
    instruction, eight times slower, and this runs for every function a trace calls.
    ``opnames`` are instructions whose argument indexes ``co_names``; ``LOAD_GLOBAL``'s
    is the index shifted left by one (the low bit says whether a ``NULL`` is pushed too,
    as in every Python the package supports, 3.11 and later)."""
    names = _NAMES.get((code, opnames))
    if names is None:
        wanted = {dis.opmap[n] for n in opnames}
        table = code.co_names
        raw = code.co_code  # the unspecialized bytecode (CACHE entries are opcode 0)
        found: set[str] = set()
        ext = 0
        for i in range(0, len(raw), 2):
            op = raw[i]
            arg = raw[i + 1] | ext
            if op == _EXTENDED_ARG:
                ext = arg << 8
                continue
            ext = 0
            if op in wanted:
                found.add(table[arg >> 1 if op == _LOAD_GLOBAL else arg])
        names = _NAMES[(code, opnames)] = frozenset(found)
    return names


def global_loads(code: types.CodeType) -> frozenset[str]:
    """The names ``code`` reads as globals (its ``LOAD_GLOBAL`` instructions)."""
    return _names_of(code, ("LOAD_GLOBAL", "LOAD_NAME"))


def global_stores(code: types.CodeType) -> frozenset[str]:
    """The globals ``code`` writes or deletes (``global g; g = ...``)."""
    return _names_of(code, ("STORE_GLOBAL", "DELETE_GLOBAL"))


def globals_guard(namespace: dict[str, Any], names: Iterable[str]) -> StateGuard:
    """The values of ``names`` in one module's globals (config objects, dicts and lists among
    them followed down to `MAX_DEPTH` levels). A name not defined there (a builtin) is
    guarded on staying undefined."""
    names = tuple(sorted(set(names)))

    def describe(dicts: list[Any], keep: list[Any], hooks: list[Any]) -> Hashable:
        dicts.append(namespace)
        missing = object()
        present = {n: namespace.get(n, missing) for n in names}
        return tuple((n, "undefined") if v is missing else
                     (n, fields_key({n: v}, keep, dicts, lists=guard.lists, path="",
                                    stopped=guard.unguarded))
                     for n, v in present.items())

    def render() -> list[str]:
        out = []
        for n in names:
            if n not in namespace:
                out.append(f"{n!r} not in globals()")
            else:
                out += _field_checks("globals()", {n: namespace[n]})
        return [c.replace("globals().", "", 1) if c.startswith("globals().") else c
                for c in out]

    module = namespace.get("__name__", "?")
    guard = StateGuard(f"globals of {module}", describe, render)
    return guard


def closure_guard(fn: Any) -> StateGuard | None:
    """The contents of ``fn``'s closure cells, checked on every call (cells have no
    version), or None when it has none."""
    cells = getattr(fn, "__closure__", None)
    code = getattr(fn, "__code__", None)
    if not cells or code is None:
        return None
    names = code.co_freevars

    def describe(dicts: list[Any], keep: list[Any], hooks: list[Any]) -> Hashable:
        out = []
        for n, c in zip(names, cells):
            try:
                out.append((n, value_key(c.cell_contents, keep)))
            except ValueError:  # an empty cell
                out.append((n, "empty"))
        return tuple(out)

    def render() -> list[str]:
        out = []
        for n, c in zip(names, cells):
            try:
                out.append(f"{n} {shown(c.cell_contents)}")
            except ValueError:
                out.append(f"{n} is <empty cell>")
        return out

    return StateGuard(f"closure of {getattr(fn, '__qualname__', fn)}", describe, render,
                      always=True)


__all__ = ["MODULE_FIELDS", "REBOUND_TENSOR", "SYMBOLIC_INT", "StateGuard", "closure_guard",
           "dict_version", "fields_key", "global_loads", "globals_guard", "module_guard",
           "rebound_key", "value_key"]
