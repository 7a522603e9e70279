"""Numbers inside argument objects (``cache.layers[1].cumulative_length``) as symbolic
numbers: one program for every value.

The cache key holds an argument object field by field (`thunder_ir.runtime.pystate
.object_key`), its plain ``int`` fields by value, so a counter an object keeps (a Hugging
Face sliding-window cache layer's ``cumulative_length``, which grows by the tokens of each
call) would compile a program per value. Automatic dynamic treats such a field as it treats
an ``int`` argument and a module's ``int`` attribute (`thunder_ir.runtime.symbolic_attrs`):
a field whose value changed between two calls that missed the cache (`changed_ints`) is
symbolic from then on for that call structure. Its path (the steps from the leaf,
``(("attr", "layers"), ("item", 1), ("attr", "cumulative_length"))``) joins the leaf's
dynamic dims (`thunder_ir.runtime.dynamic.Dynamic`, beside `EVERY` for its tensors' sizes),
and then:

* the dynamic key blanks the field's value (`blank_ints`; 0, 1 and negative values stay
  in it, programs of their own, as for ``int`` arguments);
* tracing gives the object's shadow a ``SymInt`` there, a program input read from the
  object on each call (`thunder_ir.runtime.origins.ArgPath`), whose value the shape guard
  checks (``a2.layers[1].cumulative_length >= 2``, and every decision the trace made on it);
* what the traced code writes back (``self.cumulative_length += n``: ``s3 + 1``) is computed
  by the epilogue from this call's values (`thunder_ir.runtime.pystate` ``("sym", ...)``
  templates), as eager computes it.

Fields are followed through plain objects, lists, dicts and tuples (the containers tracing
shadows: a tuple's shadow is a new tuple of its items' shadows,
`thunder_ir.frontend.pystate.Recorder`), never through ``bool``s or named tuples (keyed by
identity).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from thunder_ir.runtime.pystate import Step

Path = tuple[Step, ...]


def paths(dims: Iterable[Any]) -> frozenset[Path]:
    """The paths among a leaf's dynamic dims."""
    return frozenset(d for d in dims if type(d) is tuple)


def order(d: Any) -> tuple[int, int, str]:
    """A sort key over dynamic dims: tensor dimensions (ints) first, then paths."""
    return (0, d, "") if type(d) is int else (1, 0, repr(d))


def _fields(key: Any) -> list[tuple[Step, Any]] | None:
    """The fields of an object's key (`object_key`: ``(type, items)``) with the step that
    reaches each; None for a key that is not a list's, dict's or plain object's."""
    if not (type(key) is tuple and len(key) == 2 and isinstance(key[0], type)
            and type(key[1]) is tuple):
        return None
    t, items = key
    if t is list or t is tuple:
        return [(("item", i), v) for i, v in enumerate(items)]
    if t in (int, float, bool, str, bytes, complex):
        return None
    if not all(type(p) is tuple and len(p) == 2 for p in items):
        return None
    if t is dict:  # (keys the generated code can spell: ``L[2]['count']``)
        return [(("item", k), v) for k, v in items if type(k) is str or type(k) is int]
    return [(("attr", k), v) for k, v in items]


def changed_ints(old: Any, new: Any, at: Path = ()) -> list[Path]:
    """The paths of the ``int`` fields whose values differ between two keys of one
    argument object (`thunder_ir.runtime.pystate.object_key`), where both keys have the
    field (a field added or removed is no number that changed)."""
    if type(old) is tuple and type(new) is tuple and len(old) == 2 == len(new) \
            and old[0] is int and new[0] is int:
        return [at] if old[1] != new[1] else []
    a, b = _fields(old), _fields(new)
    if a is None or b is None or old[0] is not new[0]:
        return []
    theirs = dict(b) if old[0] is not list and old[0] is not tuple else dict(b[:len(a)])
    out: list[Path] = []
    for step, v in a:
        w = theirs.get(step)
        if w is not None and v != w:
            out += changed_ints(v, w, (*at, step))
    return out


def blank_ints(key: Any, where: Iterable[Path], every: bool = False) -> Any:
    """An argument object's key with the ``int`` value at each path blanked where it is
    >= 2 (``(int, None)``: the dynamic key of a symbolic field; with ``every``, whatever
    its value)."""
    for p in where:
        key = _blank_at(key, p, every)
    return key


def _blank_at(key: Any, path: Path, every: bool) -> Any:
    if not path:
        if type(key) is tuple and len(key) == 2 and key[0] is int and type(key[1]) is int \
                and (every or key[1] >= 2):
            return (int, None)
        return key
    fields = _fields(key)
    if fields is None:
        return key
    step, rest = path[0], path[1:]
    if key[0] is list or key[0] is tuple:
        i = step[1]
        if step[0] != "item" or type(i) is not int or not 0 <= i < len(key[1]):
            return key
        items = list(key[1])
        items[i] = _blank_at(items[i], rest, every)
        return (key[0], tuple(items))
    kind = "item" if key[0] is dict else "attr"
    return (key[0], tuple((k, _blank_at(v, rest, every))
                          if (type(k) is str or type(k) is int) and (kind, k) == step
                          else (k, v) for k, v in key[1]))


def value_at(key: Any, path: Path) -> Any:
    """The value the key holds at ``path`` (an ``int``'s), or None."""
    for step in path:
        fields = _fields(key)
        if fields is None:
            return None
        key = dict(fields).get(step)
    if type(key) is tuple and len(key) == 2 and key[0] is int:
        return key[1]
    return None


__all__ = ["Path", "blank_ints", "changed_ints", "order", "paths", "value_at"]
