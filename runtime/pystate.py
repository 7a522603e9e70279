"""The Python state a program reads from and writes to at run time.

What tracing found (`thunder_ir.frontend.pystate`) becomes, for each compiled program:

* inputs read from inside argument objects (``("path", leaf, steps)``: `resolve`, and the
  gather's generated `path_expr`);
* what the cache key holds of an argument object (`object_key`: its type, its plain fields
  by value, its tensors' metadata);
* the **epilogue**: the writes user code made to Python objects, replayed on the caller's
  objects after every call (`Action`, `apply`).

A step is ``("attr", name)`` or ``("item", key)``. A `Ref` names an object the epilogue
writes to or a value stands for: ``("path", leaf, steps)`` inside the call's argument
leaves, ``("top", index, steps)`` inside its top-level arguments (a list or dict passed
in), or ``("obj", object)``, one the program holds (a module, a container on a module).
A value template is ``("const", v)``, ``("out", k)`` (program output ``k``),
``("ref", ref)``, ``("list", [...])``, ``("tuple", type, [...])``, ``("dict", type,
[(key, ...)])``, ``("new", type, [(field, ...)])`` (an object made again on each call) or
``("sym", text, fn)``: a symbolic number of the program (``s0 + 1``, where ``s0`` is an
``int`` argument or a number the module keeps), ``fn(env)`` computing it from this call's
values of the symbols (``env``, read by the program's
`thunder_ir.runtime.dynamic.symbol_reader` before the epilogue writes;
`thunder_ir.runtime.dynamic.symbolic_value`), or ``("sym_out", text, fn, ((name, k),
...))``: one whose unbacked symbols (an ``.item()`` returned) are the ``.item()`` of 0-d
program outputs ``k``.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

Step = tuple[str, Any]
Ref = tuple[Any, ...]

PRIMITIVE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device,
             torch.layout, torch.memory_format, type(...))

MAX_DEPTH = 6
"""How deep shadows and keys follow objects inside objects."""
MAX_ITEMS = 256
"""The most items of one container that shadows and keys follow (beyond: by identity)."""


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
"""Stands for a name not (yet) defined."""


def plain_object(v: Any) -> bool:
    """An instance whose fields code reads and writes (a dataclass, a ``SimpleNamespace``,
    a cache object): it has a ``__dict__`` and is not a module, tensor, class, function,
    enum member or other callable machinery."""
    return (hasattr(v, "__dict__")
            and not isinstance(v, torch.nn.Module | torch.Tensor | type | types.FunctionType
                               | types.MethodType | types.ModuleType | enum.Enum
                               | types.BuiltinFunctionType | types.GeneratorType)
            and not callable(v))


def object_key(x: Any, depth: int = 0) -> Any:
    """What the cache key holds of an argument object: primitives by value, tensors by
    their metadata and layout, containers and plain objects field by field (types and keys
    too), anything else by identity."""
    t = type(x)
    if t in PRIMITIVE:
        return (t, repr(x)) if t is float else (t, x)
    if isinstance(x, torch.Tensor):
        lay = (x.is_contiguous() or x.stride()) if x.layout == torch.strided else x.layout
        return (x.shape, x.dtype, x.device, x.requires_grad, lay)
    if depth < MAX_DEPTH:
        if (t is list or t is tuple) and len(x) <= MAX_ITEMS:
            return (t, tuple(object_key(v, depth + 1) for v in x))
        if t is dict and len(x) <= MAX_ITEMS:
            return (t, tuple((k, object_key(v, depth + 1)) for k, v in x.items()))
        if plain_object(x) and len(vars(x)) <= MAX_ITEMS:
            return (t, tuple((k, object_key(v, depth + 1)) for k, v in vars(x).items()))
    return ("id", t, id(x), x)


def blank(t: type) -> Any:
    """An instance of ``t`` with an empty ``__dict__`` (a shadow's, or an object the
    epilogue makes again), made without running its ``__init__``."""
    try:
        return object.__new__(t)
    except TypeError:  # a class with its own __new__ (types.SimpleNamespace)
        return t.__new__(t)  # type: ignore[call-overload]


def path_text(root: str, steps: Sequence[Step]) -> str:
    """``st.h``, ``cache.layers[0].keys``: a path for messages."""
    out = root
    for kind, key in steps:
        out += f".{key}" if kind == "attr" else f"[{key!r}]"
    return out


def path_expr(base: str, steps: Sequence[Step]) -> str:
    """``steps`` as a Python expression on ``base`` (generated gather code)."""
    out = base
    for kind, key in steps:
        if kind == "attr":
            out += f".{key}" if key.isidentifier() else f".__dict__[{key!r}]"
        else:
            out += f"[{key!r}]"
    return out


def resolve(root: Any, steps: Sequence[Step]) -> Any:
    """The value at ``steps`` inside ``root``."""
    for kind, key in steps:
        root = getattr(root, key) if kind == "attr" else root[key]
    return root


@dataclass
class Action:
    """One write the epilogue replays on the caller's objects after each call.

    Attributes:
        target: the object written (a `Ref`).
        op: ``"setattr"``, ``"delattr"``, ``"setitem"``, ``"delitem"`` or ``"assign"``
            (a list's whole contents).
        key: the attribute name or item key (None for ``assign``).
        value: what is written (a value template).
        where: the path written, for messages.
    """

    target: Ref
    op: str
    key: Any
    value: Any
    where: str


def find(ref: Ref, leaves: Sequence[Any], tops: Sequence[Any]) -> Any:
    """The object a `Ref` names in one call."""
    kind = ref[0]
    if kind == "path":
        return resolve(leaves[ref[1]], ref[2])
    if kind == "top":
        return resolve(tops[ref[1]], ref[2])
    return ref[1]


def build(t: Any, leaves: Sequence[Any], tops: Sequence[Any], outs: Sequence[Any],
          env: dict[str, Any] | None = None) -> Any:
    """A value template made into the value for one call (``env``: the symbols' values
    in this call, for ``("sym", ...)`` templates)."""
    kind = t[0]
    if kind == "const":
        return t[1]
    if kind == "out":
        return outs[t[1]]
    if kind == "ref":
        return find(t[1], leaves, tops)
    if kind == "sym":
        return t[2](env)
    if kind == "sym_out":  # symbols computed by the program: their outputs' values
        values = dict(env or {})
        values.update((name, outs[k].item()) for name, k in t[3])
        return t[2](values)
    if kind == "list":
        return [build(v, leaves, tops, outs, env) for v in t[1]]
    if kind == "tuple":
        items = (build(v, leaves, tops, outs, env) for v in t[2])
        return tuple(items) if t[1] is tuple else t[1](*items)
    if kind == "dict":
        return t[1]((k, build(v, leaves, tops, outs, env)) for k, v in t[2])
    obj = blank(t[1])  # "new"
    obj.__dict__.update((k, build(v, leaves, tops, outs, env)) for k, v in t[2])
    return obj


def apply(actions: Sequence[Action], leaves: Sequence[Any], tops: Sequence[Any],
          outs: Sequence[Any], env: dict[str, Any] | None = None) -> None:
    """Replays the epilogue on the caller's objects (``leaves``: the call's argument
    leaves; ``tops``: its top-level arguments; ``outs``: the program's outputs; ``env``:
    the symbols' values, read before the program ran or the epilogue wrote)."""
    for a in actions:
        target = find(a.target, leaves, tops)
        op = a.op
        if op == "setattr":
            setattr(target, a.key, build(a.value, leaves, tops, outs, env))
        elif op == "setitem":
            target[a.key] = build(a.value, leaves, tops, outs, env)
        elif op == "assign":
            target[:] = build(a.value, leaves, tops, outs, env)
        elif op == "delattr":
            delattr(target, a.key)
        else:
            del target[a.key]


def written_before(e: BaseException, leaves: Sequence[Any], tops: Sequence[Any]) -> None:
    """Where a trace raised the user's own error (eager's), makes the writes the user's
    code made before raising, as eager's call made them: the actions tracing attached to
    the error (`thunder_ir.frontend.pystate.Recorder.written_before_failing`), once."""
    writes = getattr(e, "__dict__", {}).pop("_thunder_ir_writes", None)
    if writes:
        apply(writes, leaves, tops, ())


__all__ = ["Action", "MAX_DEPTH", "MAX_ITEMS", "MISSING", "PRIMITIVE", "Ref", "Step", "apply",
           "blank", "build", "find", "object_key", "path_expr", "path_text", "plain_object",
           "resolve", "written_before"]
