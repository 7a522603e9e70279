"""Dynamic sizes at call time: which sizes a program leaves symbolic, how a call finds a
symbolic program, and the checks that decide whether it may run it.

A jitted callable compiles a *symbolic* program (`thunder_ir.dialects.symbols`) for the
sizes that are dynamic in a call structure: the dimensions the user marked
(`mark_dynamic`, or torch's own ``torch._dynamo.mark_dynamic``), every dimension and
``int`` argument under ``cache="symbolic values"``, and, by default, the ones that
changed between two calls that missed the cache (*automatic dynamic*, as torch.compile
does). ``cache="static"`` compiles for every new size (but for marked dimensions). The
``int`` attributes of a jitted module tree that changed between misses are symbolic numbers
too, standing for leaves after the call's own (`thunder_ir.runtime.symbolic_attrs`).

The cache still keys programs by a call's exact metadata (one dict lookup per call).
A call that misses looks for a symbolic program under its *dynamic key*: the exact key
with the dynamic sizes (each >= 2; 0 and 1 stay in the key) blanked out (`DynamicKey`).
A program found there runs if its shape guard holds for the call (`ShapeGuard`: each
symbol's range and every decision the trace made on sizes, ``s0 % 8 == 0``), and is then
stored under the call's exact key too, so the next call of that size is a plain hit. A
program whose guard fails is not the only one: the next one under that key is tried, and
if none holds a new one is compiled for the call.

A shape guard answers True or False. One that cannot (it raises, or answers anything but a
bool: ``math.exp`` of a size that overflows) never breaks the callable: `shape_guard`
checks a new guard on the very call it was compiled for (it must answer True, else the
symbolic compile fails, `ShapeGuardError`, and the call structure compiles per size as
for any symbolic failure), and at call time a guard that cannot answer drops its program
(`holding`, `next_variant`) with a RuntimeWarning naming the function and the error;
the call then misses as if no symbolic program held (its retrace's own guard is checked
on that call, so it compiles per size from then on where the guard still cannot answer).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Region

from thunder_ir.dialects import guard as G
from thunder_ir.dialects.symbols import SYMBOL_NAME, SymbolSource, SymbolTable
from thunder_ir.runtime.object_ints import blank_ints, changed_ints, order, paths
from thunder_ir.runtime.pins import guard_sites
from thunder_ir.runtime.pystate import object_key, path_expr, plain_object
from thunder_ir.runtime.python_printer import load_python, print_python

CACHE_MODES = ("auto", "static", "symbolic values")
"""``jit(cache=...)``: automatic dynamic (the default), a program per size, or every size
symbolic from the first compile."""

Dynamic = dict[int, tuple[Any, ...]]
"""Flat argument leaf -> its dynamic dimensions (``()`` for an ``int`` leaf; for an argument
object, ``EVERY``: every dimension of every tensor inside it, and the path of each ``int``
field that is a symbolic number, `thunder_ir.runtime.object_ints`)."""

EVERY = -1
"""The dims of an argument object (a ``DynamicCache``) whose tensors' shapes changed: all
of them are symbolic (its guards fix those that cannot vary, a cache's head count)."""


def mark_dynamic(t: torch.Tensor, dim: int | Sequence[int]) -> None:
    """Marks dimension ``dim`` (or several) of ``t`` dynamic: a jitted function called
    with ``t`` compiles one program for every size of that dimension (that the trace's
    guards allow), as ``torch._dynamo.mark_dynamic`` does for torch.compile (whose marks
    thunder_ir reads too)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    for d in dims:
        if not -t.ndim <= d < t.ndim:
            raise IndexError(f"mark_dynamic: dimension {d} out of range for a "
                             f"{t.ndim}-d tensor")
    marked = set(getattr(t, "_dynamo_dynamic_indices", ()))
    marked.update(d % t.ndim for d in dims)
    t._dynamo_dynamic_indices = marked  # type: ignore[attr-defined]


def marked(leaves: Sequence[Any]) -> Dynamic:
    """The dimensions the call's tensors were marked dynamic in."""
    out: Dynamic = {}
    for i, x in enumerate(leaves):
        dims = getattr(x, "_dynamo_dynamic_indices", None) if isinstance(x, torch.Tensor) \
            else None
        if dims:
            out[i] = tuple(sorted(dims))
    return out


def every_size(leaves: Sequence[Any]) -> Dynamic:
    """``cache="symbolic values"``: every dimension of every tensor, every ``int``."""
    out: Dynamic = {}
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor) and x.ndim:
            out[i] = tuple(range(x.ndim))
        elif type(x) is int:
            out[i] = ()
    return out


def sizes_of(leaves: Sequence[Any]) -> tuple[Any, ...]:
    """What automatic dynamic compares between two calls: each leaf's shape (tensors) or
    value (``int``s), None for anything else."""
    return tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else x if type(x) is int
                 else ("object", object_key(x)) if plain_object(x) else None for x in leaves)


def changed(old: tuple[Any, ...], new: tuple[Any, ...]) -> Dynamic:
    """The sizes that differ between two calls of one structure (`sizes_of`): an ``int``'s
    value; the dimensions of a tensor (of the same rank) that changed, and its first
    dimension too where a later one changed (a batch that shrinks after the length varied,
    an epoch's last batch, is then no third compile); every size of the tensors in an
    argument object that changed and holds tensors (a ``DynamicCache``, from the empty one
    of a prefill on).

    A dimension that did not change stays static. Where only the batch changed, an image's
    height and width stay numbers: made symbolic, every window partition and patch grid
    over them is a floor division the ``ShapeEnv`` decides on, and the second-size compile
    of a MaxViT took 9 s against 1.2 s with them static (`benchmarks/dynamic.py
    --compile-cost`). A dimension that changes later is made symbolic then (one compile
    more)."""
    out: Dynamic = {}
    for i, (a, b) in enumerate(zip(old, new, strict=True)):
        if a == b or a is None or b is None:
            continue
        if type(a) is int and type(b) is int:
            out[i] = ()
        elif type(a) is tuple and a and a[0] == "object" and type(b) is tuple and b \
                and b[0] == "object":
            numbers = changed_ints(a[1], b[1])  # its int fields that changed: symbolic
            dims: list[Any] = []
            if _holds_tensors(b[1]) and (blank_ints(a[1], numbers, every=True)
                                         != blank_ints(b[1], numbers, every=True)):
                dims.append(EVERY)  # its tensors' sizes, or which tensors it holds
                # (an empty cache filled: the sizes will grow from here)
            if dims or numbers:
                out[i] = (*dims, *sorted(numbers, key=order))
        elif isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
            dims = [d for d, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            if dims and dims[0] > 0:
                dims.insert(0, 0)
            out[i] = tuple(dims)
    return out


def merge(a: Mapping[int, tuple[int, ...]], b: Mapping[int, tuple[int, ...]]) -> Dynamic:
    """The union of two sets of dynamic sizes."""
    out = dict(a)
    for i, dims in b.items():
        out[i] = tuple(sorted(set(out.get(i, ())) | set(dims), key=order))
    return out


# --------------------------------------------------------------------------- the key


@dataclass(frozen=True)
class DynamicKey:
    """Blanks a call's dynamic sizes out of its exact key (`thunder_ir.runtime.prologue`):
    ``positions`` says where each leaf's metadata sits in the key, ``dynamic`` which of
    its sizes are dynamic."""

    positions: Mapping[int, tuple[int, bool]]
    """leaf -> (index in the key, True: the element is the tensor's shape; False: the
    leaf's whole metadata tuple, ``_meta``, or a module attribute's value: the leaves
    after the call's own stand for the attributes the key reads, in order)."""
    dynamic: Mapping[int, tuple[int, ...]]

    def __call__(self, key: tuple[Any, ...]) -> tuple[Any, ...]:
        k = list(key)
        for leaf, dims in self.dynamic.items():
            at = self.positions.get(leaf)
            if at is None:
                continue
            pos, is_shape = at
            if is_shape:
                k[pos] = _blank(k[pos], dims)
                if pos + 4 < len(k):  # (the layout: `G.TensorMetaOp`'s fifth result)
                    k[pos + 4] = _dense_layout(key[pos], k[pos + 4])
            elif dims and (dims[0] == EVERY or type(dims[-1]) is tuple):  # an object
                k[pos] = blank_ints(_blank_tensors(k[pos]) if dims[0] == EVERY else k[pos],
                                    paths(dims))
            else:
                meta = k[pos]
                if type(meta) is int:  # a module attribute's value (`G.AttrValueOp`)
                    if meta >= 2:
                        k[pos] = None
                elif isinstance(meta, tuple) and len(meta) == 2 and meta[0] is int:
                    if meta[1] >= 2:
                        k[pos] = (int, None)
                elif isinstance(meta, tuple) and meta and isinstance(meta[0], torch.Size):
                    k[pos] = (_blank(meta[0], dims), *meta[1:4],
                              *(_dense_layout(meta[0], m) for m in meta[4:]))
        return (*k, tuple(sorted(self.dynamic.items())))


def dynamic_key(pro: Any, dynamic: Dynamic, key: tuple[Any, ...]) -> tuple[Any, ...]:
    """The dynamic key of ``key``, which prologue ``pro`` made (`DynamicKey`; where each
    leaf sits in the key is read from the prologue's IR once, `key_positions`)."""
    if pro.positions is None:
        pro.positions = key_positions(pro.ir)
    return DynamicKey(pro.positions, dynamic)(key)


def _holds_tensors(key: Any) -> bool:
    """Whether an argument object's key holds a tensor's metadata."""
    if type(key) is tuple:
        if len(key) == 5 and isinstance(key[0], torch.Size):
            return True
        return any(_holds_tensors(k) for k in key)
    return False


def _blank_tensors(key: Any) -> Any:
    """An argument object's key (`thunder_ir.runtime.pystate.object_key`) with every size
    >= 2 of its tensors blanked."""
    if type(key) is tuple:
        if len(key) == 5 and isinstance(key[0], torch.Size):  # a tensor's metadata
            return (_blank(key[0], range(len(key[0]))), *key[1:])
        return tuple(_blank_tensors(k) for k in key)
    return key


def _dense_layout(shape: Any, layout: Any) -> Any:
    """An exact layout in a key (``(strides, storage_offset)``: the trace read a layout)
    of a contiguous tensor of ``shape`` as ``("contiguous", offset)``: its strides change
    with the sizes, and a symbolic program takes a dynamic input's strides as contiguous
    over its sizes (Longformer's ``as_strided`` chunks read them: one program for every
    length); any other layout as it is."""
    if (type(layout) is tuple and len(layout) == 2 and type(layout[0]) is tuple
            and isinstance(shape, tuple) and layout[0] == _contiguous(tuple(shape))):
        return ("contiguous", layout[1])
    return layout


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides torch gives a contiguous tensor of ``shape``."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= max(d, 1)
    return tuple(reversed(out))


def _blank(shape: Any, dims: Iterable[int]) -> Any:
    dims = set(dims)
    return tuple(None if i in dims and d >= 2 else d for i, d in enumerate(shape))


def key_positions(prologue_ir: ModuleOp) -> dict[int, tuple[int, bool]]:
    """Where each leaf's metadata sits in the key the prologue returns (the module
    attributes it reads, `G.AttrValueOp`, and the rebound state tensors, `G.AttrMetaOp`,
    numbered after the call's leaves)."""
    fn = next(op for op in prologue_ir.ops if hasattr(op, "body"))
    block = fn.body.block  # type: ignore[attr-defined]
    key_op = next(op for op in block.ops if isinstance(op, G.KeyOp))
    at: dict[Any, int] = {}
    pos = 0
    for v in key_op.operands:
        at[v] = pos
        owner = v.owner
        pos += owner.widths()[v.index] if isinstance(owner, G.GuardOp) else 1  # type: ignore[attr-defined]
    args = list(block.args)
    out: dict[int, tuple[int, bool]] = {}
    for op in block.ops:
        if isinstance(op, G.TensorMetaOp):
            out[args.index(op.arg)] = (at[op.results[0]], True)
        elif isinstance(op, G.LeafMetaOp):
            out[args.index(op.operands[0])] = (at[op.results[0]], False)
        elif isinstance(op, G.AttrValueOp):
            out[len(args) + op.index.value.data] = (at[op.results[0]], False)
        elif isinstance(op, G.AttrMetaOp):  # a rebound state tensor (its shape first)
            out[len(args) + op.index.value.data] = (at[op.results[0]], True)
    return out


# --------------------------------------------------------------------------- guards


@dataclass
class ShapeGuard:
    """The checks under which a symbolic program holds, over the call's leaves: the
    function ``@shape_guard`` of ``guard`` ops (``ir``), its Python (``source``, printed by
    the one printer) and that Python compiled (``fn``)."""

    checks: list[str]
    sources: dict[str, SymbolSource]
    fn: Callable[[Sequence[Any]], bool]
    source: str
    ir: ModuleOp
    specialized: dict[str, int] = field(default_factory=dict)
    sites: list[tuple[Any, str]] = field(default_factory=list)
    """Each guard the compile recorded, with where (`thunder_ir.runtime.pins`)."""

    def __call__(self, leaves: Sequence[Any]) -> bool:
        """Whether the program holds for a call's leaves; `ShapeGuardError` where the
        guard cannot tell (it raised, or answered other than a bool)."""
        try:
            ok = self.fn(leaves)
        except Exception as e:
            raise ShapeGuardError(f"{type(e).__name__}: {e}", self.source) from e
        if type(ok) is not bool:
            raise ShapeGuardError(f"it answered {ok!r}, not a bool", self.source)
        return ok

    def answer(self, leaves: Sequence[Any], who: str, failures: list[str]) -> bool | None:
        """`__call__`, but None (after `broken_guard`) where the guard cannot tell."""
        try:
            return self(leaves)
        except ShapeGuardError as e:
            broken_guard(who, e, failures)
            return None


class ShapeGuardError(RuntimeError):
    """A shape guard that cannot tell whether its program holds for a call: ``reason``
    (what it raised or answered), ``source`` (the guard's Python)."""

    def __init__(self, reason: str, source: str) -> None:
        super().__init__(f"the shape guard of a symbolic program cannot be evaluated "
                         f"({reason}); its Python:\n{source}")
        self.reason, self.source = reason, source


def broken_guard(who: str, error: ShapeGuardError, failures: list[str]) -> None:
    """Records (in ``failures``, the callable's ``symbolic_failures``) and warns that a
    symbolic program of ``who`` was dropped because its guard cannot be evaluated."""
    failures.append(f"ShapeGuardError: {error.reason} (the program was dropped)")
    warnings.warn(
        f"thunder_ir.jit: {who}: the shape guard of a program compiled for varying sizes "
        f"could not be evaluated for this call ({error.reason}); that program is dropped "
        f"and {who} is traced again for this call's sizes. The guard:\n{error.source}",
        RuntimeWarning, stacklevel=_user_level())


def _user_level() -> int:
    """The ``stacklevel`` of the frame that called into thunder_ir (or torch's module call
    on the way): the user's line."""
    inside = [os.path.dirname(m.__file__) for name in ("thunder_ir", "thunder_ir.runtime",
                                                       "thunder_ir.dialects", "torch")
              if (m := sys.modules.get(name)) is not None and m.__file__]
    frame, level = sys._getframe(2), 2  # (the frame that warns is level 1)
    while frame is not None and any(frame.f_code.co_filename.startswith(d + os.sep)
                                    for d in inside):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


def holding(entries: list[Any], leaves: Sequence[Any], who: str, failures: list[str]
            ) -> Any:
    """The first of symbolic programs ``entries`` (`thunder_ir.runtime.cache.Entry`)
    whose shape guard holds for ``leaves``, or None; one whose guard cannot tell is
    removed from ``entries`` (`broken_guard`)."""
    for entry in list(entries):
        ok = entry.shape_guard.answer(leaves, who, failures)
        if ok:
            return entry
        if ok is None:
            entries.remove(entry)
    return None


def next_variant(entry: Any, leaves: Callable[[], Sequence[Any]], who: str,
                 failures: list[str]) -> tuple[Any, Any]:
    """The speculation variant to try after ``entry``'s failed (`thunder_ir.runtime.cache.
    Entry.variant`): a symbolic program's variants are symbolic, and each runs only where
    its guard holds (over ``leaves()``); one whose guard cannot tell is unlinked from the
    chain (`broken_guard`). Returns the variant (None: none left) and the one before it."""
    nxt = entry.variant
    while nxt is not None and nxt.shape_guard is not None:
        ok = nxt.shape_guard.answer(leaves(), who, failures)
        if ok:
            break
        if ok is None:
            entry.variant = nxt.variant
        else:
            entry = nxt
        nxt = entry.variant
    return entry, nxt


SHAPE_GUARD = "shape_guard"


def _path(src: SymbolSource) -> str:
    """How a symbol's value is read from its leaf (``.layers[0].keys.shape[2]``)."""
    path = path_expr("", src.steps)
    return path if src.dim is None else f"{path}.shape[{src.dim}]"


def shape_guard_ir(table: SymbolTable, names: Sequence[str]) -> ModuleOp:
    """``func.func @shape_guard(leaves...) -> ok``: a ``guard.symbol`` per symbol, read
    from its leaf, and one ``guard.shape_checks`` of the compilation's guards."""
    block = Block(arg_types=[G.VALUE] * len(names))
    for i, a in enumerate(block.args):
        a.name_hint = f"a{i}"
    order = sorted(table.sources.items(), key=lambda kv: int(kv[0][1:]))
    values = []
    for name, src in order:
        op = G.SymbolOp.create(operands=[block.args[src.leaf]], result_types=[G.VALUE],
                               properties={"symbol": StringAttr(name),
                                           "path": StringAttr(_path(src))})
        block.add_op(op)
        values.append(op.results[0])
    checks = G.ShapeChecksOp.create(
        operands=values, result_types=[G.VALUE],
        properties={"symbols": G.names_attr([n for n, _ in order]),
                    "checks": G.names_attr(table.guards())})
    block.add_op(checks)
    block.add_op(func.ReturnOp(checks.results[0]))
    fn = func.FuncOp(SHAPE_GUARD, ([G.VALUE] * len(names), [G.VALUE]), Region(block))
    return ModuleOp([fn])


def shape_guard(table: SymbolTable, names: Sequence[str],
                leaves: Sequence[Any] | None = None) -> ShapeGuard:
    """The shape guard of a symbolic compilation (``names``: the call's leaves'), built as
    IR and compiled from its printed Python::

        def shape_guard(args):
          (a0, a1,) = args
          return ((a0.shape[1] >= 2) and (a0.shape[1] <= 64))

    ``leaves``: the call it was compiled for, on which it must answer True.

    Raises:
        ShapeGuardError: it cannot be evaluated on ``leaves``, or answers False there.
    """
    ir = shape_guard_ir(table, names)
    fn_op = next(iter(ir.ops))
    source = print_python(fn_op)  # type: ignore[arg-type]
    guard = ShapeGuard(table.guards(), dict(table.sources),
                       load_python(source, SHAPE_GUARD, {}), source, ir, table.specialized(),
                       guard_sites(table))
    if leaves is not None and not guard(leaves):
        raise ShapeGuardError("it does not hold for the call it was compiled for", source)
    return guard


# --------------------------------------------------------------------------- symbol values


def symbol_reader(sources: Mapping[str, tuple[Any, Sequence[Any], int | None]]
                  ) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """``symbols(leaves) -> {name: value}``: this call's values of the symbols ``sources``
    names, each ``(at, steps, dim)``: flat leaf ``at`` (an ``int``) or the object ``at``
    (a module whose attribute ``steps`` reads), then ``steps`` into it, then dimension
    ``dim`` of that tensor (None: the value itself). Printed and executed::

        def symbols(L):
          return {'s0': o0.step, 's1': L[0].shape[1]}
    """
    parts: list[str] = []
    bound: dict[str, Any] = {}
    for name, (at, steps, dim) in sources.items():
        if type(at) is int:
            base = f"L[{at}]"
        else:
            base = f"o{len(bound)}"
            bound[base] = at
        expr = path_expr(base, steps) + ("" if dim is None else f".shape[{dim}]")
        parts.append(f"{name!r}: {expr}")
    src = f"def symbols(L):\n  return {{{', '.join(parts)}}}\n"
    return load_python(src, "symbols", bound)


def symbolic_value(text: str) -> Callable[[dict[str, Any]], Any]:
    """``value(env)``: the symbolic number ``text`` (Python over the symbols, ``1 + s0``)
    computed from one call's values of its symbols (`symbol_reader`'s), printed and
    executed::

        def value(env):
          s0 = env['s0']
          return 1 + s0
    """
    names = sorted(set(SYMBOL_NAME.findall(text)), key=lambda n: int(n[1:]))
    lines = [f"  {n} = env[{n!r}]" for n in names]
    src = "def value(env):\n" + "".join(f"{line}\n" for line in lines) + f"  return {text}\n"
    return load_python(src, "value", {})


__all__ = ["CACHE_MODES", "EVERY", "Dynamic", "DynamicKey", "ShapeGuard", "ShapeGuardError",
           "broken_guard", "changed", "dynamic_key", "every_size", "holding",
           "key_positions", "mark_dynamic", "marked", "merge", "next_variant", "shape_guard",
           "shape_guard_ir", "sizes_of", "symbol_reader", "symbolic_value"]
