"""Python state in and out: the objects a traced program reads and writes.

A program bakes in what its trace read, and what user code writes into Python objects
while traced happens once, at trace time. So tracing runs user code on *shadows*: copies
of the argument objects (instances with a ``__dict__``: dataclasses, ``SimpleNamespace``,
caches), of the lists and dicts among the arguments, and of the containers a module holds
(``self.cache = {}``), in which every tensor is a proxy. After the trace:

* each shadow is compared with what it was given; what changed becomes the program's
  **epilogue**: actions applied to the caller's objects after every call, in the order the
  shadows were made, with real tensors (`Action`, `apply`): attribute sets and deletions,
  dict items set and deleted, lists given their new contents. A written tensor is a
  program output, an argument or a parameter stored as such is that very tensor, a
  shadow stands for the caller's object it copies, and an object made while traced that
  holds tensors (a new cache layer) is made again on each call;
* a tensor attribute of an argument object is an input of the program, read from the
  object at call time (``("path", leaf, steps)``), so a new tensor is simply used;
* what the key must hold of an argument object (its type, the values of its plain fields,
  its tensors' metadata) comes from `object_key`.

Writes that cannot be replayed (a traced tensor stored in a set, or into an object that
was not shadowed: a global, a closure's object) raise a clear error naming where the
traced tensor was found (`escaped`): no proxy is ever left in user-visible state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from thunder_ir.frontend.errors import ThunderTraceError
from thunder_ir.frontend.layout_reads import LayoutDeps
from thunder_ir.frontend.proxy import TensorProxy, is_proxy

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from thunder_ir.frontend.context import TraceContext

from thunder_ir.dialects.symbols import SYMBOL_NAME, SYMBOLIC_NUMBERS, sym_text
from thunder_ir.dialects.symbols import current as symbols_current
from thunder_ir.runtime.dynamic import symbolic_value
from thunder_ir.runtime.guards import MODULE_FIELDS
from thunder_ir.runtime.origins import ArgPath, Field
from thunder_ir.runtime.pystate import (
    MAX_DEPTH,
    MAX_ITEMS,
    MISSING,
    PRIMITIVE,
    Action,
    Ref,
    Step,
    blank,
    path_text,
    plain_object,
)

# --------------------------------------------------------------------------- state reads


class StateReads:
    """State reads, one of `TraceContext`'s parts: what the trace read and wrote outside
    the program's dataflow, which the cache guards and the call replays.

    Attributes:
        global_reads: module namespaces whose globals user code read: id -> (namespace,
            names); the cache guards their values.
        global_writes: globals user code writes (``global g; g = ...``), with their values
            before the trace: (namespace id, name) -> (namespace, name, value or
            `MISSING`).
        settrace_hook: the ``sys.settrace`` hook recording global reads while user code
            runs (`thunder_ir.frontend.tracer`); `TraceMode` sets it aside while
            thunder_ir's own code runs.
        originals: what tracing ran instead of the user's modules: a copy's id -> the
            original (hooks called at run time get the original).
        copies: the other way: an original's id -> its copy (a jitted callable called by
            traced code runs its module's copy, `thunder_ir.frontend.tracer.traced_copy`).
        replays: in-place metadata ops on arguments (``x.t_()``), to replay on the caller's
            tensors: (argument leaf index, method name, args, kwargs).
        data_replaced: parameters and buffers whose ``.data`` user code replaced by a
            tensor of another dtype or shape (`InPlace.set_data`): their new value
            is set as ``.data`` after each call.
        exact_layout: user code read exact strides or storage offsets (the cache key then
            holds them).
        layout_read: some decision of the trace depended on layout
            (`thunder_ir.frontend.builder.Builder.read_layout`).
        layout_deps: whose layouts (which program inputs') those decisions read
            (`thunder_ir.frontend.layout_reads.LayoutDeps`).
    """

    __slots__ = ("copies", "data_replaced", "exact_layout", "global_reads", "global_writes",
                 "layout_deps", "layout_read", "originals", "replays", "settrace_hook")

    def __init__(self) -> None:
        self.global_reads: dict[int, tuple[dict[str, Any], set[str]]] = {}
        self.global_writes: dict[tuple[int, str], tuple[dict[str, Any], str, Any]] = {}
        self.settrace_hook: Callable[..., Any] | None = None
        self.originals: dict[int, torch.nn.Module] = {}
        self.copies: dict[int, torch.nn.Module] = {}
        self.replays: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = []
        self.data_replaced: list[TensorProxy] = []
        self.exact_layout = False
        self.layout_read = False
        self.layout_deps = LayoutDeps()


# --------------------------------------------------------------------------- recording


@dataclass
class _Shadow:
    """A shadow and what it was made from: the caller's object (`Ref`), its initial
    contents (to compare with), and a name for messages."""

    shadow: Any
    ref: Ref
    initial: Any
    where: str
    skip: frozenset[str] = frozenset()


@dataclass
class Recorder:
    """The shadows of one trace, and after it the epilogue.

    Attributes:
        shadows: every shadow made, in order.
        by_id: a shadow's id -> its record.
        sources: an input proxy's id -> the `Ref` of the caller's tensor it stands for.
    """

    ctx: TraceContext
    shadows: list[_Shadow] = field(default_factory=list)
    by_id: dict[int, _Shadow] = field(default_factory=dict)
    sources: dict[int, Ref] = field(default_factory=dict)
    symbols: set[str] = field(default_factory=set)
    """The symbols the ``("sym", ...)`` templates made so far compute with."""
    inputs: dict[tuple[int, Any], Any] = field(default_factory=dict)
    """(id of a dict or list a module holds, key) -> the program input that its shadow
    holds there: an entry ``forward`` rebinds to a tensor on every call
    (`thunder_ir.runtime.rebound`), read from the module, not lifted."""
    _made: dict[int, Any] = field(default_factory=dict)
    _concrete: bool = False

    # ---- making shadows

    def argument(self, value: Any, leaf: int, name: str,
                 make_input: Callable[[torch.Tensor, str, tuple[Any, ...]], TensorProxy],
                 make_number: Callable[[int, str, ArgPath], Any] | None = None) -> Any:
        """The shadow of argument leaf ``leaf`` (a plain object), its tensors inputs
        of the program (``make_input(tensor, name, kind)``), and each ``int`` in it what
        ``make_number(value, name, kind)`` gives (a symbolic number, an input of the
        program, where it is one: `thunder_ir.runtime.object_ints`)."""
        return self._shadow(value, ("path", leaf, ()), name, 0, make_input, make_number)

    def container(self, shadow: Any, original: Any, ref: Ref, where: str) -> None:
        """Records a list or dict given to user code in place of ``original`` (a pytree
        container among the arguments, rebuilt with proxies)."""
        self._record(shadow, ref, where)
        self._made[id(original)] = shadow

    def attribute(self, value: Any, where: str) -> Any:
        """The shadow of a module's attribute value: a list, dict or plain object the
        module holds (a cache), copied so that writes to it are found, not made (its
        tensors stay real: a trace that reads one lifts it as it lifts any tensor)."""
        return self._shadow(value, ("obj", value), where, 0, None)

    def module(self, copy: torch.nn.Module, original: torch.nn.Module, where: str,
               skip: frozenset[str]) -> None:
        """Records a module's shadow copy, whose plain attributes (all but ``skip``) are
        compared with the original's after the trace, and its ``_buffers`` (a buffer
        rebound to a new tensor)."""
        initial = {k: v for k, v in vars(copy).items() if k not in skip}
        rec = _Shadow(copy, ("obj", original), initial, where, skip)
        self.shadows.append(rec)
        buffers = copy.__dict__.get("_buffers")
        if buffers is not None:
            rec = _Shadow(buffers, ("obj", original._buffers), dict(buffers), where)
            self.shadows.append(rec)

    def _shadow(self, value: Any, ref: Ref, where: str, depth: int,
                make_input: Callable[..., TensorProxy] | None,
                make_number: Callable[[int, str, ArgPath], Any] | None = None) -> Any:
        t = type(value)
        if t is int:
            if make_number is not None and ref[0] == "path":
                return make_number(value, where.replace(".", "_").replace("[", "_")
                                   .strip("]'"), ArgPath(ref[1], ref[2]))
            return value
        made = self._made.get(id(value))
        if made is not None:
            return made
        if isinstance(value, torch.Tensor):
            if make_input is not None and ref[0] == "path":
                p = make_input(value, where.replace(".", "_").replace("[", "_").strip("]'"),
                               ArgPath(ref[1], ref[2]))
                self.sources[id(p)] = ref
                return p
            return value  # a module's cached tensor: lifted where the trace reads it
        if depth >= MAX_DEPTH:
            return value

        def inner(k: Any, v: Any, kind: str) -> Any:
            step: Step = (kind, k)
            sub: Ref = ("path", ref[1], (*ref[2], step)) if ref[0] == "path" else ("obj", v)
            return self._shadow(v, sub, path_text(where, [step]), depth + 1, make_input,
                                make_number)

        def entry(k: Any, v: Any) -> Any:
            made = self.inputs.get((id(value), k)) if self.inputs else None
            return inner(k, v, "item") if made is None else made

        if t is list and len(value) <= MAX_ITEMS:
            copy: Any = []
            self._made[id(value)] = copy
            copy.extend(entry(i, v) for i, v in enumerate(value))
        elif t is dict and len(value) <= MAX_ITEMS:
            copy = {}
            self._made[id(value)] = copy
            copy.update((k, entry(k, v)) for k, v in value.items())
        elif plain_object(value) and len(vars(value)) <= MAX_ITEMS:
            copy = blank(t)
            self._made[id(value)] = copy
            inputs = self.inputs  # (a field ``forward`` rebinds: the input read from it)
            copy.__dict__.update((k, inner(k, v, "attr") if not inputs or (
                made := inputs.get((id(value), Field(k)))) is None else made)
                for k, v in vars(value).items())
        elif t is tuple and len(value) <= MAX_ITEMS and ref[0] == "path":
            # an argument object's tuple: a new tuple of its items' shadows (its tensors
            # and symbolic ints inputs read through it); nothing to record, it cannot change
            items = tuple(inner(i, v, "item") for i, v in enumerate(value))
            if all(a is b for a, b in zip(items, value)):
                return value
            self._made[id(value)] = items
            return items
        else:
            return value
        self._record(copy, ref, where)
        return copy

    def _record(self, shadow: Any, ref: Ref, where: str) -> None:
        if isinstance(shadow, list):
            initial: Any = list(shadow)
        elif isinstance(shadow, dict):
            initial = dict(shadow)
        else:
            initial = dict(vars(shadow))
        rec = _Shadow(shadow, ref, initial, where)
        self.shadows.append(rec)
        self.by_id[id(shadow)] = rec

    # ---- after the trace: the epilogue

    def begin(self, outputs: list[SSAValue],
              known: Callable[[TensorProxy], tuple[Any, ...] | None]) -> None:
        """Starts making value templates (`template`): tensors they hold become program
        outputs (appended to ``outputs``); ``known(proxy)`` gives the template of a proxy
        that stands for a tensor the program does not make (a parameter, a captured
        tensor), else None."""
        self._outputs = outputs
        self._known = known
        self._out_index: dict[Any, int] = {}

    def written_before_failing(self) -> list[Action]:
        """After a trace that raised the user's error: the writes user code made before
        it (eager's call made them too), those holding no traced tensor, symbolic numbers
        at their values in this call."""
        self.begin([], lambda p: None)
        self._concrete = True
        try:
            actions = self.epilogue()
        except ThunderTraceError:
            return []
        finally:
            self._concrete = False
        return [a for a in actions if not _makes_output(a.value)]

    def epilogue(self) -> list[Action]:
        """The writes user code made to the shadows, as actions (after `begin`)."""
        actions: list[Action] = []
        for rec in self.shadows:
            s, init = rec.shadow, rec.initial
            if isinstance(s, list):
                if len(s) != len(init) or any(a is not b for a, b in zip(s, init)):
                    actions.append(Action(rec.ref, "assign", None,
                                          ("list", [self.template(v, rec.where) for v in s]),
                                          rec.where))
                continue
            now = s if isinstance(s, dict) else vars(s)
            attr = not isinstance(s, dict)
            if rec.skip:
                now = {k: v for k, v in now.items() if k not in rec.skip}
            for k, v in now.items():
                if k not in init or init[k] is not v:
                    where = path_text(rec.where, [("attr" if attr else "item", k)])
                    actions.append(Action(rec.ref, "setattr" if attr else "setitem", k,
                                          self.template(v, where), where))
            for k in init:
                if k not in now:
                    actions.append(Action(rec.ref, "delattr" if attr else "delitem", k, None,
                                          path_text(rec.where, [("attr" if attr else "item",
                                                                 k)])))
        return actions

    def globals_written(self, writes: dict[Any, tuple[dict[str, Any], str, Any]],
                        failed: bool = False) -> list[Action]:
        """The global writes user code made (``global g; g = x * 2``): each global gets
        its value from before the trace back, and an action that makes the new one on
        every call (after `begin`). Where the trace ``failed``, nothing is recorded and
        only globals left holding traced tensors get their old values back."""
        actions: list[Action] = []
        for ns, name, before in writes.values():
            now = ns.get(name, MISSING)
            if now is before:
                continue
            if failed and not contains_proxy(now):
                continue  # eager would have written it too before failing
            if before is MISSING:
                ns.pop(name, None)
            else:
                ns[name] = before
            if failed:
                continue
            where = f"the global {ns.get('__name__', '?')}.{name}"
            if now is MISSING:
                actions.append(Action(("obj", ns), "delitem", name, None, where))
            else:
                actions.append(Action(("obj", ns), "setitem", name,
                                      self.template(now, where), where))
        return actions

    def release(self) -> None:
        """After the epilogue is made: the modules' copies point at the user's containers
        again (a hook registered while traced, run by the program on every backward, reads
        ``self.log`` and must append to the user's list, not to its trace-time copy)."""
        for rec in self.shadows:
            if not isinstance(rec.shadow, torch.nn.Module):
                continue
            d = rec.shadow.__dict__
            for k, v in list(d.items()):
                inner = self.by_id.get(id(v))
                if inner is not None and inner.ref[0] == "obj":
                    d[k] = inner.ref[1]

    def template(self, v: Any, where: str, depth: int = 0) -> Any:
        """How to make the value ``v`` (written at ``where``) on each call."""
        t = type(v)
        if t in PRIMITIVE:
            return ("const", v)
        if t in SYMBOLIC_NUMBERS or t is torch.SymBool:
            return self._symbolic(v)
        if is_proxy(v):
            self.ctx.grad.check_leaf(v, f"stored in {where}")
            src = self.sources.get(id(v))
            if src is not None:
                return ("ref", src)
            known = self._known(v)
            if known is not None:
                return known
            k = self._out_index.get(v._value)
            if k is None:
                k = self._out_index[v._value] = len(self._outputs)
                self._outputs.append(v._value)
            return ("out", k)
        rec = self.by_id.get(id(v))
        if rec is not None:
            return ("ref", rec.ref)
        if isinstance(v, torch.Tensor) or not contains_proxy(v, symbolic=True):
            return ("const", v)
        if depth < MAX_DEPTH:
            if t is list:
                return ("list", [self.template(x, where, depth + 1) for x in v])
            if isinstance(v, tuple):
                return ("tuple", t, [self.template(x, where, depth + 1) for x in v])
            if t is dict:
                return ("dict", t, [(k, self.template(x, where, depth + 1))
                                    for k, x in v.items()])
            if plain_object(v):
                return ("new", t, [(k, self.template(x, where, depth + 1))
                                   for k, x in vars(v).items()])
        raise ThunderTraceError(
            f"{where} holds a traced tensor inside a {t.__name__}, which thunder_ir cannot "
            "write back to your object after each call (it writes tensors, lists, tuples, "
            "dicts and plain objects). Store a tensor, a list or a dict there, or return "
            "the value instead.")

    def _symbolic(self, v: Any) -> Any:
        """The template of a symbolic number written or returned (``self.step + 1``):
        computed on each call from that call's values of its symbols, where its text
        computes the traced value; else (and for a ``SymBool``: a decision) its value,
        which fixes the program to it (the ``ShapeEnv`` records that guard)."""
        if type(v) is torch.SymBool:
            return ("const", bool(v))
        if self._concrete:
            return ("const", v.node.hint)
        text = sym_text(v)
        if not isinstance(text, str):
            return ("const", text)
        table = symbols_current()
        traced = v.node.hint
        if traced is None:  # an unbacked symbol's (``self.loss = loss.item()``): the
            from thunder_ir.frontend.unbacked import returned_number  # program's number

            made = returned_number(self.ctx, v, self._outputs, self.symbols)
            if made is not None:
                return made
        try:
            fn = symbolic_value(text)
            ok = table is not None and traced is not None and fn(table.hints()) == traced
        except Exception:
            ok = False
        if not ok:
            return ("const", int(v) if type(v) is torch.SymInt else float(v))
        self.symbols.update(SYMBOL_NAME.findall(text))
        return ("sym", text, fn)


_SYMBOLIC = (*SYMBOLIC_NUMBERS, torch.SymBool)


def _makes_output(t: Any) -> bool:
    """Whether a value template reads a program output (a traced tensor)."""
    if type(t) is not tuple or not t:
        return False
    if t[0] == "out":
        return True
    if t[0] in ("list", "tuple", "dict", "new"):
        items = t[1] if t[0] == "list" else t[2]
        return any(_makes_output(x[1] if type(x) is tuple and len(x) == 2
                                 and t[0] in ("dict", "new") else x) for x in items)
    return False


def contains_proxy(v: Any, depth: int = 0, seen: set[int] | None = None,
                   symbolic: bool = False) -> bool:
    """Whether a traced tensor (with ``symbolic``, or a symbolic number) is in ``v`` (in
    containers and plain objects, a few levels down)."""
    if is_proxy(v) or (symbolic and isinstance(v, _SYMBOLIC)):
        return True
    if depth > MAX_DEPTH or type(v) in PRIMITIVE or isinstance(v, torch.Tensor):
        return False
    seen = seen if seen is not None else set()
    if id(v) in seen:
        return False
    seen.add(id(v))
    if isinstance(v, list | tuple | set | frozenset):
        items: Any = list(v)[:MAX_ITEMS]
    elif isinstance(v, dict):
        items = list(v.values())[:MAX_ITEMS]
    elif plain_object(v):
        items = list(vars(v).values())[:MAX_ITEMS]
    else:
        return False
    return any(contains_proxy(x, depth + 1, seen, symbolic) for x in items)


_MODULE_SKIP = MODULE_FIELDS - {"_buffers"}
"""A module's fields the escape check does not walk: its parameters, submodules (walked as
places of their own) and hook registries (functions, not data)."""


def escaped(where: str, v: Any, seen: set[int] | None = None) -> str | None:
    """A path below ``where`` where ``v`` holds a traced tensor, or None. Every traced
    tensor found is taken out of the user's object (a dict's key or an attribute removed,
    a list's or set's element dropped): the trace fails, and a proxy left behind would
    break the user's later code in ways that name nothing. ``seen``: the ids of objects
    already walked (shared between the places one check walks: a config object many
    modules hold is walked once)."""
    found: list[str] = []

    def walk(x: Any, path: str, depth: int, seen: set[int]) -> bool:
        """Whether ``x`` is a proxy (its holder removes it)."""
        if is_proxy(x):
            found.append(path)
            return True
        if depth > MAX_DEPTH or type(x) in PRIMITIVE or isinstance(x, torch.Tensor) \
                or id(x) in seen:
            return False
        seen.add(id(x))
        if isinstance(x, list):
            hits = [i for i, y in enumerate(list(x)[:MAX_ITEMS])
                    if walk(y, f"{path}[{i}]", depth + 1, seen)]
            for i in reversed(hits):
                del x[i]
        elif isinstance(x, tuple):
            for i, y in enumerate(x[:MAX_ITEMS]):
                walk(y, f"{path}[{i}]", depth + 1, seen)  # immutable: found, not removed
        elif isinstance(x, set):
            for y in [y for y in list(x)[:MAX_ITEMS] if walk(y, f"{path} (an element)",
                                                              depth + 1, seen)]:
                x.discard(y)
        elif isinstance(x, dict):
            for k in [k for k, y in list(x.items())[:MAX_ITEMS]
                      if walk(y, f"{path}[{k!r}]", depth + 1, seen)]:
                del x[k]
        elif plain_object(x) or isinstance(x, torch.nn.Module):
            for k, y in list(vars(x).items())[:MAX_ITEMS]:
                if isinstance(x, torch.nn.Module) and k in _MODULE_SKIP:
                    continue
                if walk(y, f"{path}.{k}", depth + 1, seen):
                    with contextlib.suppress(AttributeError, TypeError):
                        delattr(x, k)
        return False

    walk(v, where, 0, set() if seen is None else seen)
    return found[0] if found else None


__all__ = ["Recorder", "StateReads", "contains_proxy", "escaped"]
