"""Whose layouts a trace's decisions read: per program input, exactly, by class, or not.

A decision that depends on a value's layout (a ``view`` that works or raises by strides,
``x.is_contiguous()``, a reshape that copies; `thunder_ir.frontend.builder.Builder
.read_layout`) reads the layouts of the program inputs that value's layout comes from.
`LayoutDeps` follows that back through the program's dataflow:

* a program input's layout is its own where the key may relax it (an argument, a tensor
  inside an argument object, rebound module state); a parameter's or a captured tensor's
  is keyed as it is, so it counts as no input's;
* an op's results take their layouts from their tensor operands' (a view's from its
  base, an opaque call's as its kernel lays them out): the union of theirs;
* but ``bmm``, ``matmul`` and ``cat`` (but of 4-d and 5-d tensors, which may be channels
  last) lay their results out contiguously whatever their operands,
  and an op that computes a fresh result (not a view; not an opaque call, whose kernel
  may read exact strides) lays it out from `ordered` operands as from contiguous ones
  (`thunder_ir.runtime.layout_key.ordered`): where each operand is a program input so
  laid out, or an `ordered` value whose layout depends on no input's exact layout, the
  result depends on those inputs' layouts by class only (any `ordered` layout of theirs
  gives it the same layout).

The trace's result is `thunder_ir.runtime.layout_key.LayoutReads`: the inputs read exactly
and by class (a decision that named no value reads every input's layout, `every`). The
program cache keys a program by those alone (`thunder_ir.runtime.layout_key.relax`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.autograd import StopGradientOp
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.ltorch_core import ChunkOp, GetitemOp, SplitOp
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.traits import DeviceLayout, ViewLike
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend.layout import contiguous_strides
from thunder_ir.runtime.layout_key import LayoutReads, ordered
from thunder_ir.runtime.origins import ArgLeaf, ArgPath, ModuleTensor

_Deps = tuple[frozenset[int], frozenset[int]] | None
"""(inputs read exactly, inputs read by class); None: unknown (every input)."""

_NONE: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())


class LayoutDeps:
    """The inputs whose layouts a trace's decisions read (see the module doc)."""

    __slots__ = ("_memo", "classes", "every", "exact")

    def __init__(self) -> None:
        self.exact: set[int] = set()
        self.classes: set[int] = set()
        self.every = False
        self._memo: dict[SSAValue, _Deps] = {}

    def read(self, block: Block, kinds: Sequence[Any], layouts: dict[SSAValue, Any],
             is_view: Callable[[SSAValue], bool], values: Iterable[SSAValue],
             exact: bool = False) -> None:
        """A decision read the layouts of ``values`` (the program's inputs are ``block``'s
        arguments, ``kinds`` their origins; ``layouts``: eager's layout of each value, as
        tracing knows it; ``is_view``: whether a value is a view of its op's operand).
        ``exact``: it read exact strides (``stride()``, ``as_strided``), a size-1 dim's
        too, which an input's class does not fix: the inputs behind them count exactly."""
        if self.every:
            return
        for v in values:
            d = self._deps(v, _Graph(block, kinds, layouts, is_view))
            if d is None:
                self.every = True
                return
            self.exact |= d[0]
            if exact:
                self.exact |= d[1]
            else:
                self.classes |= d[1]

    def read_all(self) -> None:
        """A decision that cannot say whose layout it read: every input's counts."""
        self.every = True

    def result(self) -> LayoutReads:
        """What the trace read."""
        if self.every:
            return LayoutReads(every=True)
        return LayoutReads(frozenset(self.exact), frozenset(self.classes - self.exact))

    def _deps(self, root: SSAValue, g: _Graph) -> _Deps:
        memo = self._memo
        stack = [root]
        while stack:  # (iteratively: a program's dataflow may be thousands of ops deep)
            v = stack[-1]
            if v in memo:
                stack.pop()
                continue
            owner = v.owner
            if isinstance(owner, Block):
                i = owner.args.index(v) if owner is g.block else -1
                memo[v] = None if i < 0 else (
                    (frozenset({i}), frozenset()) if g.relaxed(i) else _NONE)
                stack.pop()
                continue
            assert isinstance(owner, Operation)
            if owner.regions:  # (its results' layouts come from inside its regions)
                memo[v] = None
                stack.pop()
                continue
            tensors = [o for o in owner.operands if isinstance(o.type, TensorType)]
            missing = [o for o in tensors if o not in memo]
            if missing:
                stack.extend(missing)
                continue
            memo[v] = _combine(owner, v, tensors, [memo[o] for o in tensors], g)
            stack.pop()
        return memo[root]


class _Graph:
    """What `LayoutDeps` reads of the trace (see `LayoutDeps.read`)."""

    __slots__ = ("block", "is_view", "kinds", "layouts")

    def __init__(self, block: Block, kinds: Sequence[Any], layouts: dict[SSAValue, Any],
                 is_view: Callable[[SSAValue], bool]) -> None:
        self.block, self.kinds, self.layouts, self.is_view = block, kinds, layouts, is_view

    def relaxed(self, index: int) -> bool:
        """Whether the key may relax input ``index``'s layout (else it is keyed as is)."""
        kinds = self.kinds
        return index >= len(kinds) or type(kinds[index]) in (ArgLeaf, ArgPath, ModuleTensor)


def _combine(op: Operation, v: SSAValue, operands: list[SSAValue], deps: list[_Deps],
             g: _Graph) -> _Deps:
    """An op's results' dependencies, from its tensor operands' (see the module doc)."""
    if any(d is None for d in deps):
        return None
    exact = frozenset().union(*(d[0] for d in deps if d is not None))
    classes = frozenset().union(*(d[1] for d in deps if d is not None))
    if op.name == "ltorch.bmm" or (op.name == "ltorch.matmul" and len(operands) == 2
                                   and _rank(operands[0]) >= _rank(operands[1])) or (
            op.name == "ltorch.cat" and _rank(v) not in (4, 5)):
        return _NONE  # (laid out contiguously whatever its operands: ``cat`` suggests a
        # memory format only for 4-d and 5-d tensors, channels last)
    if exact and _fresh(op, v, g) and all(
            _ordered(o, g.layouts) and (not d[0] or _view_of_input(o, g))
            for o, d in zip(operands, deps) if d is not None):
        return frozenset(), exact | classes
    return exact, classes


def _view_of_input(v: SSAValue, g: _Graph) -> bool:
    """Whether ``v`` is a program input, or a view of one made by views that keep an
    `ordered` tensor's dims in their order up to their sizes (slices, ``select``,
    ``unsqueeze``, ``expand``, ``transpose``...: whether the view is `ordered` then
    follows from its sizes alone; a ``view`` or ``reshape`` reads its input's layout
    itself)."""
    while not isinstance(v.owner, Block):
        op = v.owner
        if not isinstance(op, Operation) or not op.operands or isinstance(op, CallOp):
            return False
        kind = op.get_trait(ViewLike)
        if not ((kind is not None and kind.free) or isinstance(op, SplitOp | ChunkOp)
                or (isinstance(op, GetitemOp) and len(op.operands) == 1)
                or isinstance(op, StopGradientOp)):
            return False
        v = op.operands[0]
    return v.owner is g.block


def _rank(v: SSAValue) -> int:
    t = v.type
    return t.rank if isinstance(t, TensorType) else 0


def _fresh(op: Operation, v: SSAValue, g: _Graph) -> bool:
    """Whether ``v`` is a fresh tensor a modelled op computes (not a view, not an opaque
    call's result) without a memory format of its own or a per-device layout."""
    if not isinstance(op, ThunderOp) or isinstance(op, CallOp) or g.is_view(v):
        return False
    kind = op.get_trait(ViewLike)
    if (kind is not None and kind.free) or isinstance(op, SplitOp | ChunkOp | GetitemOp):
        return False
    return "memory_format" not in op.properties and op.get_trait(DeviceLayout) is None


def _ordered(v: SSAValue, layouts: dict[SSAValue, Any]) -> bool:
    """Whether eager's layout of ``v``, as the trace knows it, is `ordered` (symbolic
    strides: only contiguous ones, proved so from their expressions)."""
    lay = layouts.get(v)
    t = v.type
    if lay is None or not isinstance(t, TensorType):
        return False
    sizes, strides = t.sizes, lay[0]
    if all(type(n) is int for n in (*sizes, *strides)):
        return ordered(sizes, strides)
    if any(type(n) is int and n in (0, 1) for n in sizes[1:]) or (
            sizes and type(sizes[0]) is int and sizes[0] == 0):
        return False
    return symbols.proved_same(strides, contiguous_strides(sizes))


__all__ = ["LayoutDeps"]
