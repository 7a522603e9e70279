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
integers per group and only re-reads the state when a version moved. Re-reading builds a
*fingerprint* (primitive values by value, with ``-0.0`` and NaN told apart; other objects
by identity, kept alive so that identities are not reused) and interns it as the token.
Closure cells cannot be watched; their contents are fingerprinted on every call.
"""

from __future__ import annotations

import dis
import enum
import types
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import torch

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


def _config_like(v: Any) -> bool:
    """An object whose fields model code reads (``self.config.use_cache``): a plain
    instance with a ``__dict__``, not a module, tensor, function or class."""
    return (hasattr(v, "__dict__") and not isinstance(
        v, torch.nn.Module | torch.Tensor | type | types.FunctionType | types.MethodType
        | types.ModuleType | types.BuiltinFunctionType | Callable))


SYMBOLIC_INT = "symbolic int"
"""What a fingerprint holds for an ``int`` field whose value the programs read as a symbolic
number (`thunder_ir.runtime.symbolic_attrs`): its type, not its value, which the cache key
holds instead."""


def fields_key(d: dict[Any, Any], keep: list[Any], watched: list[dict[Any, Any]] | None,
               skip: frozenset[str] = frozenset(),
               lists: list[tuple[list[Any], tuple[Any, ...]]] | None = None,
               ints: frozenset[str] = frozenset()) -> Hashable:
    """The fingerprint of a dict of fields. With ``watched``, a config-like value's own
    fields (and a plain dict's items) are watched and fingerprinted too, one level down;
    with ``lists``, a list's items too (a list has no version: `StateGuard` compares its
    items on every call). ``ints``: fields that, while they hold an ``int``, are
    fingerprinted by that type alone (`SYMBOLIC_INT`)."""
    out: list[Any] = []
    for k, v in d.items():
        if k in skip:
            continue
        if k in ints and type(v) is int:
            out.append((k, SYMBOLIC_INT))
        elif lists is not None and type(v) is list and len(v) <= 64:
            items = tuple(value_key(x, keep) for x in v)
            lists.append((v, items))
            out.append((k, "list", id(v), items))
            keep.append(v)
        elif watched is not None and _config_like(v):
            watched.append(v.__dict__)
            out.append((k, type(v), id(v), fields_key(v.__dict__, keep, None)))
            keep.append(v)
        elif watched is not None and type(v) is dict and len(v) <= 64:
            watched.append(v)
            out.append((k, "dict", id(v), fields_key(v, keep, None)))
            keep.append(v)
        else:
            out.append((k, value_key(v, keep)))
    return tuple(out)


class StateGuard:
    """One group of state: the dicts that hold it and how to fingerprint it.

    ``describe(dicts, keep, hooks)`` fills the lists of dicts to watch and returns the
    fingerprint; it runs again whenever a watched dict changes (the lists themselves may
    change, e.g. when a submodule is added). ``dicts`` are watched by version. ``hooks``
    (hook dicts, four per module) are watched more cheaply, by their total length and
    torch's count of hook handles ever made (``RemovableHandle.next_id``): a hook is added
    through a new handle and removed by deleting its entry; only when either moved are
    their versions compared. With ``always`` (closure cells) it runs on every check."""

    __slots__ = ("always", "describe", "dicts", "epoch", "hook_count", "hook_versions",
                 "hooks", "keep", "lists", "name", "render", "tok", "tokens", "versions")

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
        self.versions: Any = None
        self.hook_versions: Any = None
        self.hook_count = 0
        self.epoch = -1
        self.tokens: dict[Hashable, tuple[int, list[Any]]] = {}
        self.keep: list[Any] = []
        self.tok = -1

    def check(self) -> int:
        """The token of the state as it is now."""
        if self.always or _summary(map(dict_version, self.dicts)) != self.versions:
            return self.refresh()
        if self.lists and any(len(lst) != len(items) or any(
                value_key(x, []) != y for x, y in zip(lst, items)) for lst, items in self.lists):
            return self.refresh()  # a list changed in place (self.coefs[0] = 10.0)
        hooks = self.hooks
        if not hooks or (_Handles.next_id == self.epoch
                         and sum(map(len, hooks)) == self.hook_count):
            return self.tok
        if _summary(map(dict_version, hooks)) != self.hook_versions:
            return self.refresh()
        self.epoch = _Handles.next_id  # handles made elsewhere: our hooks are as they were
        self.hook_count = sum(map(len, hooks))
        return self.tok

    def source(self) -> str:
        """The guard as readable Python: what the program's validity rests on."""
        how = ("checked on every call" if self.always else
               f"re-read when one of its {len(self.dicts) + len(self.hooks)} dicts changes")
        lines = [f"# {self.name} ({how}; now token {self.tok})"]
        lines += [f"check({c})" for c in self.render()]
        return "\n".join(lines)

    def unchanged(self) -> bool:
        """Whether no watched dict was written since the last `check` (one sum)."""
        return bool(_summary(map(dict_version, self.dicts)) == self.versions)

    def resync(self) -> None:
        """Takes the watched dicts' versions as they are now: the caller wrote to them,
        after `unchanged`, only what leaves the fingerprint as it was (a symbolic
        ``int`` attribute's new value, `thunder_ir.runtime.symbolic_attrs`)."""
        self.versions = _summary(map(dict_version, self.dicts))

    def invalidate(self) -> None:
        """Makes the next `check` re-read the state (what ``describe`` fingerprints
        changed)."""
        self.versions = None

    def refresh(self) -> int:
        dicts: list[Any] = []
        hooks: list[Any] = []
        keep: list[Any] = []
        self.lists = []
        fp = self.describe(dicts, keep, hooks)
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
                  deep: bool = True, ints: frozenset[str] = frozenset()) -> list[str]:
    out: list[Any] = []
    for k, v in d.items():
        if k in skip:
            continue
        if k in ints and type(v) is int:
            out.append(f"type({prefix}.{k}) is int")  # its value: in the key (symbolic)
        elif deep and _config_like(v):
            out.append(f"{prefix}.{k} {shown(v)}")
            out += _field_checks(f"{prefix}.{k}", v.__dict__, deep=False)
        elif deep and type(v) is dict and len(v) <= 64:
            out.append(f"{prefix}.{k} {shown(v)}")
            out += [f"{prefix}.{k}[{kk!r}] {shown(vv)}" for kk, vv in v.items()]
        else:
            out.append(f"{prefix}.{k} {shown(v)}")
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
                 ints: dict[int, frozenset[str]] | None = None) -> StateGuard:
    """The state of a module tree: each module's class and plain attributes (config objects
    one level down), its parameters', buffers' and submodules' identities, and every module
    hook (its own and torch's global ones).

    ``ints``: per module (by id), the attributes whose ``int`` values the programs read as
    symbolic numbers (`thunder_ir.runtime.symbolic_attrs`, which fills the dict and
    `StateGuard.invalidate`s the guard): guarded on being ``int``s; their values are in the
    cache key instead."""
    g = torch.nn.modules.module
    ints = {} if ints is None else ints
    none: frozenset[str] = frozenset()

    def describe(dicts: list[Any], keep: list[Any], hooks: list[Any]) -> Hashable:
        out: list[Any] = []
        for name in _GLOBAL_HOOKS:
            d = getattr(g, name)
            hooks.append(d)
            out.append(tuple(map(id, d.values())))
            keep.extend(d.values())
        for m in root.modules():
            md = m.__dict__
            dicts.append(md)
            parts: list[Any] = [id(m), type(m),
                                fields_key(md, keep, dicts, _SKIP_FIELDS, guard.lists,
                                           ints.get(id(m), none))]
            for name in _MODULE_DICTS:
                d = md.get(name)
                if d is None:
                    continue
                (hooks if name in _HOOK_DICTS else dicts).append(d)
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
            out += _field_checks(path, m.__dict__, _SKIP_FIELDS, ints=ints.get(id(m), none))
            for name in _MODULE_DICTS:
                d = m.__dict__.get(name)
                if d is None:
                    continue
                if name in ("_parameters", "_buffers") or name == "_modules":
                    out += [f"{path}.{k} {shown(v)}" for k, v in d.items()]
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
    """The values of ``names`` in one module's globals (dicts and config objects among them
    one level down). A name not defined there (a builtin) is guarded on staying undefined."""
    names = tuple(sorted(set(names)))

    def describe(dicts: list[Any], keep: list[Any], hooks: list[Any]) -> Hashable:
        dicts.append(namespace)
        missing = object()
        present = {n: namespace.get(n, missing) for n in names}
        return tuple((n, "undefined") if v is missing else (n, fields_key({n: v}, keep, dicts))
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
    return StateGuard(f"globals of {module}", describe, render)


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


__all__ = ["MODULE_FIELDS", "SYMBOLIC_INT", "StateGuard", "closure_guard", "dict_version",
           "fields_key", "global_loads", "globals_guard", "module_guard", "value_key"]
