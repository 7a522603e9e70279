"""Eager's memory layout of traced tensors: strides and storage offsets.

Values in the IR are logical tensors (the program is functional: no op of it reads a
layout), so tensor types carry no strides. Layout is a fact of the *eager* program, one
that user code observes (``x.stride()``, ``x.is_contiguous()``, a ``view`` that eager
refuses, a kernel picked by stride) and that the caller sees on every result. Tracing
therefore gives each proxy eager's strides and storage offset:

* an argument's are the real tensor's (the cache key holds them:
  `thunder_ir.runtime.cache.layout_token`);
* a view's come from torch itself: the view function runs on a *meta* stand-in with the
  operand's layout (`view_layouts`; torch's C++ view kernels, a microsecond or two); in a
  symbolic compilation, where the stand-ins are fake tensors over symbols and a kernel
  decides dozens of expressions, the common views' layouts are ATen's own rules written
  over the symbols (`_reshape_of_contiguous`, `thunder_ir.frontend.view_rules`), and an op
  with no symbol in its types, layouts or arguments shares the static memo;
* a fresh result of an elementwise op, ``clone``, a ``*_like`` factory or ``.to(dtype)`` whose
  operand has a size-1 dim with a stride other than ``torch.empty``'s (``k.t()`` of a
  ``(4, 1)`` tensor) gets eager's TensorIterator or ``empty_like`` strides from ATen's
  algorithm (`unit_dim_layout`, `thunder_ir.frontend.iterator_layout`): torch's meta
  kernels treat those strides as insignificant and differ from eager there;
* any other result (`fresh_layouts`) is contiguous when every tensor operand is: that is
  TensorIterator's fast setup, and the layout every fresh result of an ltorch op gets on
  contiguous inputs (``tests/test_eager_semantics.py`` and the OpInfo sweep hold it),
  except for ops given a ``memory_format`` and ops that always ask on some devices
  (`DeviceLayout`'s ``always``: attention, whose CUDA kernels return the heads
  transposed). An elementwise op's or ``cat``'s result is contiguous too when each
  tensor operand's nonzero strides fall strictly from the first dim to the last (a
  slice, as rotary embeddings take: `_in_order`), and ``bmm``'s always, as ``matmul``'s
  when the first operand's rank is at least the second's (`_contiguous_kernel`).
  Otherwise torch decides: the op's reference runs on meta stand-ins of the operands'
  layouts, or, for ops whose layout depends on the device (the `DeviceLayout` trait:
  convolution, attention), under torch's ``FakeTensorMode`` on fake tensors of the
  operands' device, which is what torch.compile does to learn eager's strides (fake
  tensors know that a convolution of a channels-last input is channels-last on the CPU;
  meta tensors take every tensor for a CUDA one). Results are cached per signature.
  Probes run under `thunder_ir.dialects.modes.neutral` (no inference mode, no autocast):
  a layout or an alias is the same under every mode, and a first call under
  ``inference_mode`` (where a view of a new tensor has no ``_base``) must not decide what
  later calls get.

The rules of our own are the contiguous cases above (`CONTIGUOUS_RESULTS` among them)
and, in symbolic compilations, ATen's view algorithms over symbols (`view_rules`); tests
hold them against eager's kernels and torch's fake kernels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.modes import neutral
from thunder_ir.dialects.traits import (
    RESHAPE,
    RESTRIDE,
    VIEW,
    DeviceLayout,
    Elementwise,
    ViewLike,
)
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.frontend.iterator_layout import iterator_strides, like_strides
from thunder_ir.frontend.view_rules import expand_layout, split_layouts, view_strides

Strides = tuple[int, ...]
Layout = tuple[Strides, int]
"""A tensor's strides and storage offset (in elements)."""

_CONTIGUOUS: dict[tuple[int, ...], Strides] = {}


def contiguous_strides(sizes: Sequence[int]) -> Strides:
    """The strides ``torch.empty(sizes)`` gets (a size-0 or size-1 dim counts as 1)."""
    key = tuple(sizes)
    try:
        s = _CONTIGUOUS.get(key)
    except TypeError:  # a symbolic size (SymInt): computed each time, over the symbols
        out = [1] * len(key)
        for i in range(len(key) - 2, -1, -1):
            out[i] = out[i + 1] * torch.sym_max(key[i + 1], 1)
        return tuple(out)
    if s is None:
        out = [1] * len(key)
        for i in range(len(key) - 2, -1, -1):
            out[i] = out[i + 1] * max(key[i + 1], 1)
        s = _CONTIGUOUS[key] = tuple(out)
    return s


def is_contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """torch's ``is_contiguous()``: row-major up to dims of size 1 (and any empty tensor)."""
    if tuple(strides) == contiguous_strides(sizes):
        return True
    expected = 1
    for n, s in zip(reversed(tuple(sizes)), reversed(tuple(strides))):
        if symbols.must_equal(n, 0):  # (an unbacked size, ``u0``, counts as neither 0
            return True               # nor 1: torch's size-oblivious reading)
        if symbols.may_differ(n, 1):
            if symbols.may_differ(s, expected):
                return False
            expected *= n
    return True


def contiguous_layout(t: TensorType) -> Layout:
    """The layout of a fresh contiguous tensor of type ``t``."""
    return contiguous_strides(t.sizes), 0


def storage_elements(sizes: Sequence[int], strides: Sequence[int], offset: int) -> int:
    """How many elements a storage needs to hold a tensor of this layout."""
    if any(symbols.must_equal(n, 0) for n in sizes):  # (an unbacked size: maybe not)
        return offset
    return offset + 1 + sum((n - 1) * abs(s) for n, s in zip(sizes, strides))


def meta_stand_in(t: TensorType, layout: Layout) -> torch.Tensor:
    """A meta tensor of type ``t`` with ``layout`` (strides and storage offset), viewing no
    other tensor (``_base`` is None, so a meta run can tell which results view it)."""
    strides, offset = layout
    table = symbols.current()
    if table is not None:  # a symbolic compilation: a fake tensor over its symbols
        with torch._C.DisableTorchFunction(), table.fake_mode:
            if symbols.must_equal(offset, 0):  # (``u0``: the second of ``where``'s indices)
                return torch.empty_strided(t.sizes, strides, dtype=t.dtype, device="meta")
            n = storage_elements(t.sizes, strides, offset)
            return torch.empty(n, dtype=t.dtype, device="meta").as_strided(
                t.sizes, strides, offset)
    with torch._C.DisableTorchFunction():
        if offset == 0:
            return torch.empty_strided(t.sizes, strides, dtype=t.dtype, device="meta")
        n = storage_elements(t.sizes, strides, offset)
        storage = torch.empty(n, dtype=t.dtype, device="meta").untyped_storage()
        return torch.empty(0, dtype=t.dtype, device="meta").set_(storage, offset, t.sizes,
                                                                 strides)


def layout_of_tensor(x: torch.Tensor) -> Layout:
    """A real (or meta) tensor's layout. A fake tensor's symbolic storage offset (a
    view of a symbolic tensor past its first row, ``proj[1]``: ``16*s0*s1``) stays a
    ``SymInt``: ``int()`` of it would record a guard fixing the sizes it computes with."""
    with torch._C.DisableTorchFunction():
        offset: Any = x.storage_offset()  # (an int, or a SymInt of a fake tensor: kept)
        if not isinstance(offset, torch.SymInt):
            offset = int(offset)
        return tuple(x.stride()), offset


class LayoutError(RuntimeError):
    """Eager refuses the view (``view`` on a layout it cannot view): its own message."""


def _operand_values(op: Operation, layouts: Sequence[Layout | None],
                    make: Callable[[TensorType, Layout], Any]) -> list[Any]:
    """Stand-ins of ``op``'s operands: tensors made by ``make``, numbers as sample values
    (the op's constant where the number is one)."""
    out: list[Any] = []
    for v, lay in zip(op.operands, layouts, strict=True):
        t = v.type
        if isinstance(t, TensorType):
            out.append(make(t, lay if lay is not None else contiguous_layout(t)))
        elif isinstance(t, NumberType):
            out.append(_number_of(v, t))
        else:
            out.append(None)
    return out


def _number_of(v: SSAValue, t: NumberType) -> Any:
    owner = v.owner
    value = getattr(owner, "params", None)
    if isinstance(owner, ThunderOp) and owner.name == "prims.constant" and value is not None:
        return owner.params()["value"]
    return t.python_type(1)


def _run(op: Operation, stand_ins: list[Any], fn: Callable[..., Any] | None = None) -> list[Any]:
    """Runs ``op``'s torch reference (or ``fn``) on stand-ins; its tensor results."""
    from thunder_ir.dialects.torch import CallOp

    with torch._C.DisableTorchFunction(), torch.no_grad():
        if isinstance(op, CallOp):
            out = op.run(stand_ins)
        else:
            assert isinstance(op, ThunderOp)
            grouped = group(op.operand_layout(), stand_ins, op._segment_sizes())
            params = op.params()
            out = (type(op).eager_ref(*grouped, **params) if fn is None else
                   fn(*grouped, **{k: v for k, v in params.items() if v is not None}))
    items = list(out) if isinstance(out, list | tuple) else [out]
    return [o for o in items if isinstance(o, torch.Tensor)]


def view_layouts(op: Operation, layouts: Sequence[Layout | None]
                 ) -> list[tuple[Layout, bool]]:
    """The layouts of a view op's results (from torch's view kernels on meta stand-ins),
    each with whether eager's result is a view indeed (``reshape`` copies a layout it
    cannot view).

    Raises:
        LayoutError: eager's own error, where the view cannot be made (``Tensor.view`` of
            a layout that does not allow it).
    """
    table = symbols.current()
    try:  # (a symbolic compilation's layouts hold its own SymInts: never shared)
        key = _signature(op, layouts) if table is None or symbol_free(op, layouts) else None
        hash(key)
    except TypeError:
        key = None
    hit = _VIEWS.get(key) if key is not None else _reshape_of_contiguous(op, layouts)
    if hit is None:
        memo, skey = _compilation_memo("_views", op, layouts)
        hit = memo.get(skey) if skey is not None else None
        if hit is None:
            with neutral():  # (under inference_mode a view of a new tensor has no _base)
                hit = _view_layouts(op, layouts)
            if skey is not None:
                memo[skey] = hit
        if key is not None:
            _VIEWS[key] = hit
    if isinstance(hit, str):
        raise LayoutError(hit)
    return list(hit)


_VIEWS: dict[Any, tuple[tuple[Layout, bool], ...] | str] = {}
"""`view_layouts` per signature (views repeat layer after layer), or eager's error."""


def _reshape_of_contiguous(op: Operation, layouts: Sequence[Layout | None]
                           ) -> tuple[tuple[Layout, bool], ...] | None:
    """In a symbolic compilation, the layout of a view op in closed form, without running
    torch's view kernel over the symbols (which decides dozens of symbolic expressions for
    each): a reshape, view or flatten of a contiguous tensor of backed sizes (heads split
    and merged, windows partitioned) is a view with contiguous strides at the same offset;
    of another layout, ATen's ``computeStride`` decides (`view_rules.view_strides`, from
    the expressions and ranges alone): a view with its strides, or ``reshape``'s copy into
    a contiguous tensor (a window partition of a permuted tensor); ``expand``, ``split``,
    a basic index, ``permute``, ``transpose`` and ``unsqueeze`` move the strides and
    offset as their kernels do. None: run the kernel."""
    if not isinstance(op, ThunderOp) or len(op.operands) != 1:
        return None
    if op.name == "ltorch.split" and symbols.current() is not None:
        src = op.operands[0].type
        if not isinstance(src, TensorType):
            return None
        return split_layouts(op, layouts[0] if layouts and layouts[0] is not None
                             else contiguous_layout(src))
    if len(op.results) != 1:
        return None
    if op.name == "ltorch.getitem":  # (a basic index: no index tensor among the operands)
        src = op.operands[0].type
        if not isinstance(src, TensorType):
            return None
        strides, offset = layouts[0] if layouts and layouts[0] is not None \
            else contiguous_layout(src)
        moved = basic_index_layout(src.sizes, strides, offset, op.params().get("index"))
        return None if moved is None else ((moved, True),)
    kind = op.get_trait(ViewLike)
    src, out = op.operands[0].type, op.results[0].type
    if kind is None or not isinstance(src, TensorType) or not isinstance(out, TensorType):
        return None
    if kind.kind in (RESTRIDE, VIEW):
        return _restrided(op, src, layouts[0] if layouts else None)
    if kind.kind != RESHAPE:
        return None
    sizes, new = src.sizes, out.sizes
    if any((type(n) is int and n == 0) or (isinstance(n, torch.SymInt) and n.node.hint is None)
           for n in (*sizes, *new)):  # (an empty tensor, an unbacked size: the kernel's way)
        return None
    layout = layouts[0] if layouts else None
    strides, offset = layout if layout is not None else contiguous_layout(src)
    if all(symbols.proved_equal(a, b) for a, b in zip(strides, contiguous_strides(sizes),
                                                      strict=True)):
        return (((contiguous_strides(new), offset), True),)
    if op.name == "ltorch.flatten" and out.rank == src.rank:
        return None  # (flatten of one dim returns its operand itself, strides as they are)
    viewed = view_strides(sizes, strides, new)
    if viewed is None or (viewed is False and op.name == "ltorch.view"):
        return None  # (not proved; or eager's view raises: the kernel's run says how)
    if not isinstance(viewed, tuple):  # reshape copies, into a contiguous tensor
        return (((contiguous_strides(new), 0), False),)
    return (((viewed, offset), True),)


def basic_index_layout(sizes: Sequence[Any], strides: Sequence[Any], offset: Any,
                       index: Any) -> Layout | None:
    """The layout of ``x[index]`` for a basic index of ints and slices with positive int
    steps (and ``...``), as torch's ``select`` and ``slice`` make it: an int moves the
    offset by the (normalized) index times its dim's stride and drops the dim; a slice moves
    it by its (clamped) start times the stride and multiplies the stride by its step. The
    sizes may be symbolic: the result is in closed form, where the view kernels on fake
    tensors decide a dozen expressions per slice. None for anything else (``None`` in the
    index, tensors, other steps): the kernel's way."""
    items = list(index) if type(index) is tuple else [index]
    if items.count(Ellipsis) > 1 or any(i is None for i in items):
        return None
    consuming = [i for i in items if i is not Ellipsis]
    rank = len(sizes)
    if len(consuming) > rank:
        return None
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k:k + 1] = [slice(None)] * (rank - len(consuming))
    items += [slice(None)] * (rank - len(items))
    out: list[Any] = []
    for n, st, it in zip(sizes, strides, items, strict=True):
        if type(it) is int:
            if type(n) is int and not -n <= it < n:
                return None
            at = it if it >= 0 else it + n
            if not (type(at) is int and at == 0):
                offset = offset + at * st
            continue
        if type(it) is not slice or not all(b is None or type(b) is int
                                            for b in (it.start, it.stop, it.step)) \
                or (it.step is not None and it.step <= 0):
            return None
        lo, _, step = symbols.slice_indices(it, n)
        if not (type(lo) is int and lo == 0):
            offset = offset + lo * st
        out.append(st if step == 1 else st * step)
    return tuple(out), offset


def _restrided(op: ThunderOp, src: TensorType, layout: Layout | None
               ) -> tuple[tuple[Layout, bool], ...] | None:
    """``permute``, ``transpose`` and ``unsqueeze`` in a symbolic compilation: the
    operand's strides moved as its sizes are (``unsqueeze``'s new stride as torch gives it:
    the next dim's size times stride, or 1 at the end), the same offset, a view."""
    strides, offset = layout if layout is not None else contiguous_layout(src)
    rank, params = src.rank, op.params()
    if op.name == "ltorch.expand":
        size = params.get("size")
        if type(size) not in (tuple, list):
            return None
        expanded = expand_layout(src.sizes, strides, offset, size)
        return None if expanded is None else ((expanded, True),)
    if op.name == "ltorch.permute":
        dims = params.get("dims")
        if type(dims) not in (tuple, list) or len(dims) != rank:
            return None
        new = tuple(strides[d] for d in dims)
    elif op.name == "ltorch.transpose":
        d0, d1 = params.get("dim0"), params.get("dim1")
        if type(d0) is not int or type(d1) is not int or rank == 0:
            return None
        moved = list(strides)
        moved[d0], moved[d1] = moved[d1], moved[d0]
        new = tuple(moved)
    elif op.name == "ltorch.unsqueeze":
        d = params.get("dim")
        if type(d) is not int:
            return None
        d = d + rank + 1 if d < 0 else d
        inserted = 1 if d >= rank else src.sizes[d] * strides[d]
        new = (*strides[:d], inserted, *strides[d:])
    else:
        return None
    return (((new, offset), True),)


def _view_layouts(op: Operation, layouts: Sequence[Layout | None]
                  ) -> tuple[tuple[Layout, bool], ...] | str:
    fn = getattr(type(op), "LAYOUT_FN", None)
    stand_ins = _operand_values(op, layouts, meta_stand_in)
    try:
        outs = _run(op, stand_ins, fn)
    except RuntimeError as e:
        if fn is not None:
            return str(e)
        raise
    first = stand_ins[0] if stand_ins else None
    return tuple((layout_of_tensor(o), o is first or o._base is first) for o in outs)


# --------------------------------------------------------------------------- fresh results

_FRESH: dict[Any, tuple[Layout, ...] | None] = {}
_LOCAL = threading.local()


def fake_mode() -> Any:
    """This thread's `FakeTensorMode` (the fake tensors of layout and autocast probes)."""
    mode = getattr(_LOCAL, "mode", None)
    if mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        mode = _LOCAL.mode = FakeTensorMode()
    return mode


def fake_stand_in(t: TensorType, layout: Layout) -> torch.Tensor:
    """A fake tensor (on ``t``'s device) of type ``t`` with ``layout``."""
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor(fake_mode(), meta_stand_in(t, layout), torch.device(t.dev))


def _compilation_memo(name: str, op: Operation, layouts: Sequence[Layout | None]
                      ) -> tuple[dict[Any, Any], Any]:
    """In a symbolic compilation, its own memo ``name`` of layouts asked of torch's kernels
    (views and fresh results repeat layer after layer, and a fake kernel decides dozens of
    expressions a run; the guards a first run recorded hold for the next), and ``op``'s
    key in it: its signature with the layouts' ``SymInt``s by expression. Key None (no
    memo): a static compilation (`_signature` keys those for the process), or sizes over
    unbacked symbols (a decision on those emits a check where it is made)."""
    table = symbols.current()
    if table is None:
        return {}, None
    for v in op.operands:
        t = v.type
        if isinstance(t, TensorType) and t.symbolic and symbols.unbacked(*t.sizes):
            return {}, None

    def frozen(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(frozen(i) for i in x)
        if isinstance(x, torch.SymInt):
            return ("sym", x.node.expr)
        return x

    memo = table.__dict__.setdefault(name, {})
    key = (op.name, tuple(op.properties.items()), tuple(o.type for o in op.operands),
           frozen(tuple(layouts)), op._segment_sizes() if isinstance(op, ThunderOp) else None)
    try:
        hash(key)
    except TypeError:
        return memo, None
    return memo, key


def symbol_free(op: Operation, layouts: Sequence[Layout | None]) -> bool:
    """Whether ``op`` has no symbolic size in its operands' types and layouts nor in its
    static arguments: in a symbolic compilation it is laid out as in a static one (the
    attention mask a Swin block builds from its static window sizes), so the process's
    memo of layouts per signature serves it."""
    for v in op.operands:
        t = v.type
        if isinstance(t, TensorType) and t.symbolic:
            return False
    for lay in layouts:
        if lay is not None and (type(lay[1]) is not int
                                or any(type(st) is not int for st in lay[0])):
            return False
    return next(symbols.sym_exprs(op.properties.values()), None) is None


def _signature(op: Operation, layouts: Sequence[Layout | None]) -> Any:
    return (op.name, tuple(op.properties.items()), tuple(o.type for o in op.operands),
            tuple(layouts), op._segment_sizes() if isinstance(op, ThunderOp) else None)


def _all_contiguous(op: Operation, layouts: Sequence[Layout | None]) -> bool:
    for v, lay in zip(op.operands, layouts):
        if lay is not None:
            sizes = v.type.sizes  # type: ignore[attr-defined]
            if lay[0] != contiguous_strides(sizes) and not is_contiguous(sizes, lay[0]):
                return False
    return True


WRAPPED_NUMBERS = frozenset({"ltorch.where"})
"""Elementwise ops besides the `BinaryOp`s whose number operands torch wraps as 0-d
tensors (TensorIterator operands: they take it off its fast setup)."""


LIKE_RESULTS = frozenset({"ltorch.clone", "ltorch.zeros_like", "ltorch.ones_like",
                          "ltorch.full_like", "ltorch.to_dtype"})
"""Ops whose result eager allocates by ``empty_like`` with ``preserve_format`` (``clone``,
the ``*_like`` factories, ``.to(dtype)``'s ``_to_copy``)."""


def unit_dim_layout(op: Operation, layouts: Sequence[Layout | None]) -> Layout | None:
    """The layout of ``op``'s one fresh result where a tensor operand of static layout
    has a dim of size 1 whose stride is not the one ``torch.empty`` gives it (``k.t()``
    of a ``(4, 1)`` tensor: ``(1, 4)`` with strides ``(1, 1)``): there torch's meta
    kernels, and the contiguous rule, differ from eager's TensorIterator and
    ``empty_like`` (`thunder_ir.frontend.iterator_layout`), which compute it here for
    elementwise ops and `LIKE_RESULTS`. None: the other rules."""
    from thunder_ir.dialects.ltorch_core import BinaryOp

    if not isinstance(op, ThunderOp) or len(op.results) != 1 \
            or "memory_format" in op.properties or op.get_trait(DeviceLayout) is not None:
        return None
    out = op.results[0].type
    if not isinstance(out, TensorType) or any(type(n) is not int for n in out.sizes):
        return None
    operands: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    odd = False
    for v, lay in zip(op.operands, layouts):
        t = v.type
        if isinstance(t, TensorType):
            strides = (lay if lay is not None else contiguous_layout(t))[0]
            sizes = t.sizes
            if any(type(n) is not int for n in (*sizes, *strides)):
                return None
            odd = odd or any(n == 1 and st != c for n, st, c in
                             zip(sizes, strides, contiguous_strides(sizes)))
            operands.append((tuple(sizes), tuple(strides)))
        elif isinstance(t, NumberType) and (isinstance(op, BinaryOp)
                                            or op.name in WRAPPED_NUMBERS):
            operands.append(((), ()))
        else:
            return None
    if not odd:
        return None
    if op.name in LIKE_RESULTS and len(operands) == 1:
        found = like_strides(*operands[0])
    elif op.has_trait(Elementwise) and operands:
        found = iterator_strides(out.sizes, operands)
    else:
        return None
    return None if found is None else (found, 0)


def _tensor_results(op: Operation) -> list[TensorType]:
    return [r.type for r in op.results if isinstance(r.type, TensorType)]


def _device(op: Operation) -> str:
    return next((o.type.dev for o in op.operands if isinstance(o.type, TensorType)), "cpu")


CONTIGUOUS_RESULTS = frozenset({"ltorch.softmax", "ltorch.log_softmax", "ltorch.layer_norm",
                                "ltorch.contiguous"})
"""Ops whose kernels allocate their result contiguous whatever the operand's layout, on
every device: ``_softmax``/``_log_softmax`` (structured meta functions asking the
legacy contiguous format), ``native_layer_norm`` (its CPU and CUDA kernels make the input
contiguous and allocate the output like it, as its meta kernel does) and ``contiguous``
without a memory format (recorded only where eager copies)."""


def _contiguous_kernel(op: Operation) -> bool:
    """Whether ``op``'s kernel lays its result out contiguously whatever its operands'
    layouts: `CONTIGUOUS_RESULTS`, ``bmm`` (ATen's structured kernel allocates it so, as
    its meta kernel does),
    and ``matmul`` with the first operand of rank at least the second's (a product by
    ``mm``, ``mv`` or ``bmm``, viewed back to the result's shape; it is the other way
    round that ``matmul`` transposes, to fold the larger operand into ``mm``)."""
    if op.name == "ltorch.bmm" or op.name in CONTIGUOUS_RESULTS:
        return True
    if op.name != "ltorch.matmul":
        return False
    a, b = (v.type for v in op.operands)
    return isinstance(a, TensorType) and isinstance(b, TensorType) and a.rank >= b.rank


def _in_order(op: Operation, layouts: Sequence[Layout | None]) -> bool:
    """Whether ``op`` is elementwise or ``cat`` with one result, of static sizes, and every
    tensor operand's nonzero strides, over the result's dims (a broadcast dim's stride is
    0), fall strictly from the first dim to the last: a slice of a contiguous tensor, a
    row of one, a broadcast operand. TensorIterator then keeps the dims in their order
    (only a stride ordered the other way, or equal strides, moves one) and lays the
    result out contiguously, as torch's meta kernels do; ``cat`` on such tensors suggests
    the contiguous memory format (a channels-last one has a smaller stride before a
    larger)."""
    if len(op.results) != 1 or not isinstance(op, ThunderOp) or not (
            op.has_trait(Elementwise) or op.name == "ltorch.cat"):
        return False
    out = op.results[0].type
    if not isinstance(out, TensorType) or out.symbolic:
        return False
    rank, out_sizes = out.rank, out.sizes
    for v, lay in zip(op.operands, layouts):
        if lay is None:
            continue
        sizes, strides = v.type.sizes, lay[0]  # type: ignore[attr-defined]
        if len(sizes) > rank:
            return False
        last = None
        for i, (n, st) in enumerate(zip(sizes, strides), rank - len(sizes)):
            if st == 0 or (n == 1 and out_sizes[i] != 1):
                continue  # (broadcast: TensorIterator skips a zero stride)
            if last is not None and st >= last:
                return False
            last = st
    return True


def fresh_layouts(op: Operation, layouts: Sequence[Layout | None]) -> list[Layout]:
    """The layouts of the results of ``op``, an op whose results are fresh tensors, given
    its operands' (``None`` for numbers)."""
    unit = unit_dim_layout(op, layouts)
    if unit is not None:
        return [unit]
    by_device = op.get_trait(DeviceLayout)
    always = by_device is not None and _device(op).split(":")[0] in by_device.always
    if not always and "memory_format" not in op.properties and (
            _all_contiguous(op, layouts) or _contiguous_kernel(op) or _in_order(op, layouts)):
        return [(contiguous_strides(r.type.sizes), 0) for r in op.results  # type: ignore[attr-defined]
                if isinstance(r.type, TensorType)]
    if op.name == "ltorch.native_batch_norm":
        return batch_norm_layouts(op, layouts)
    if by_device is None and symbols.current() is not None:
        dense = permuted_dense(op, layouts)
        if dense is not None:
            return [dense]
    found = asked_layouts(op, layouts, fake=by_device is not None)
    return list(found) if found is not None else [contiguous_layout(t)
                                                  for t in _tensor_results(op)]


_FORMAT_ORDER = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
"""The dims of a channels-last layout of rank 4 and 5 (``channels_last``,
``channels_last_3d``), outermost first."""


def batch_norm_layouts(op: Operation, layouts: Sequence[Layout | None]) -> list[Layout]:
    """Eager's layouts of ``ltorch.native_batch_norm``'s results: the CPU and CUDA kernels
    allocate the output contiguous in the input's suggested memory format (channels-last
    for a 4-d or 5-d input laid out so, contiguous for a contiguous one or any other
    layout), the statistics contiguous. Torch's meta kernel keeps any input layout
    (``empty_like``), and the probe of ``torch.batch_norm`` returns one tensor of the
    op's five, so neither is asked."""
    from torch._prims_common import suggest_memory_format

    x = op.operands[0].type
    assert isinstance(x, TensorType)
    sizes, lay = x.sizes, layouts[0]
    order = None
    if lay is not None and x.rank in _FORMAT_ORDER:
        hinted = [n if type(n) is int else symbols.hint(n) for n in sizes]
        strides = [st if type(st) is int else symbols.hint(st) for st in lay[0]]
        probe = torch.empty_strided(hinted, strides, device="meta")
        if not probe.is_contiguous() and suggest_memory_format(probe) in (
                torch.channels_last, torch.channels_last_3d):
            order = _FORMAT_ORDER[x.rank]
    if order is None:
        out: Layout = (contiguous_strides(sizes), 0)
    else:
        dense: list[Any] = [0] * x.rank
        step: Any = 1
        for d in reversed(order):
            dense[d] = step
            n = sizes[d]
            step = step * (max(n, 1) if type(n) is int else torch.sym_max(n, 1))
        out = (tuple(dense), 0)
    return [out] + [(contiguous_strides(r.type.sizes), 0) for r in op.results[1:]  # type: ignore[attr-defined]
                    if isinstance(r.type, TensorType)]


def permuted_dense(op: Operation, layouts: Sequence[Layout | None]) -> Layout | None:
    """In a symbolic compilation, the layout of an elementwise op's one result whose tensor
    operands have static strides (a symbolic batch is the outermost dim: the heads of a
    transposed attention tensor, a slice of them), without a fake kernel run over the
    symbols: TensorIterator orders the result's dims by the operands' strides (ignoring
    broadcast dims; sizes only break ties between equal strides, which this refuses) and
    lays it out densely in that order. So the order does not depend on the symbols'
    values (a symbolic size here is known to be at least 2, so never broadcast): it is
    read from the kernel's run on meta stand-ins at the symbols' values (the hints), and
    the result's strides are the dense strides of that order over the symbolic sizes,
    which must give the kernel's strides at the hints. None: the fake kernel's way."""
    if len(op.results) != 1 or not isinstance(op, ThunderOp) \
            or not op.has_trait(Elementwise) or "memory_format" in op.properties:
        return None
    out = op.results[0].type
    if not isinstance(out, TensorType) or not out.symbolic:
        return None
    rank, out_sizes = out.rank, out.sizes
    if any(type(n) is not int and symbols.least_value(n) < 2 for n in out_sizes):
        return None
    for v, lay in zip(op.operands, layouts):
        if lay is None:
            continue
        sizes, strides = v.type.sizes, lay[0]  # type: ignore[attr-defined]
        if len(sizes) > rank or any(type(st) is not int for st in strides) \
                or any(type(n) is not int and symbols.least_value(n) < 2 for n in sizes):
            return None
        seen = set()
        for n, st in zip(sizes, strides):
            if st == 0 or (type(n) is int and n == 1):
                continue  # (broadcast or size 1: TensorIterator skips it)
            if st in seen:
                return None  # (a tie: sizes would decide)
            seen.add(st)
    hints = [n if type(n) is int else symbols.hint(n) for n in out_sizes]
    try:
        with neutral(), torch._C.DisableTorchFunction():
            stand_ins = _operand_values(op, [None if lay is None else (
                lay[0], lay[1] if type(lay[1]) is int else symbols.hint(lay[1]))
                for lay in layouts], _hinted_stand_in)
            outs = _run(op, stand_ins)
    except Exception:
        return None
    if len(outs) != 1 or list(outs[0].shape) != hints:
        return None
    got = tuple(outs[0].stride())
    order = sorted(range(rank), key=lambda d: (-got[d], d))
    dense: list[Any] = [0] * rank
    step: Any = 1
    for d in reversed(order):
        dense[d] = step
        step = step * torch.sym_max(out_sizes[d], 1) if type(out_sizes[d]) is not int \
            else step * max(out_sizes[d], 1)
    if tuple(d if type(d) is int else symbols.hint(d) for d in dense) != got:
        return None
    return tuple(dense), 0


def _hinted_stand_in(t: TensorType, layout: Layout) -> torch.Tensor:
    """A meta stand-in of ``t`` at its sizes' values in this call (no symbols)."""
    sizes = [n if type(n) is int else symbols.hint(n) for n in t.sizes]
    strides, offset = layout
    n = offset + 1 + sum((k - 1) * st for k, st in zip(sizes, strides)) if all(sizes) else 0
    return torch.empty(n, dtype=t.dtype, device="meta").as_strided(sizes, strides, offset)


def asked_layouts(op: Operation, layouts: Sequence[Layout | None], fake: bool = False
                  ) -> tuple[Layout, ...] | None:
    """Eager's layouts of ``op``'s tensor results, asked of torch: its reference runs on
    meta stand-ins of the operands' layouts, or (``fake``) on fake tensors of their device
    too, for kernels whose layout depends on the device (cached per signature); None where
    it cannot run there.

    Fake tensors cost a one-time import of torch._dynamo (about a second): they are asked
    only for the ops that need them. Meta kernels take every tensor for a CUDA one
    (``device_hint``), which is right for TensorIterator, reductions, matmul and views on
    every device, not for a convolution's memory format, attention's kernel choice or
    LAPACK's and pocketfft's CPU layouts.
    """
    try:  # (a symbolic compilation's layouts hold its own SymInts: never shared)
        key = (fake, _signature(op, layouts)) \
            if symbols.current() is None or symbol_free(op, layouts) else None
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _FRESH:
        return _FRESH[key]
    memo, skey = _compilation_memo("_fresh", op, layouts)
    if skey is not None and (fake, skey) in memo:
        return memo[fake, skey]  # type: ignore[no-any-return]
    found: tuple[Layout, ...] | None = None
    try:
        with neutral():
            found = _asked_layouts(op, layouts, fake)
    except Exception:  # no fake or meta kernel, or it cannot run there
        found = None
    if key is not None:
        _FRESH[key] = found
    if skey is not None:
        memo[fake, skey] = found
    return found


def _asked_layouts(op: Operation, layouts: Sequence[Layout | None], fake: bool
                   ) -> tuple[Layout, ...] | None:
    if fake:
        with fake_mode():
            outs = _run(op, _operand_values(op, layouts, fake_stand_in))
    else:
        with symbols.stand_in_mode():
            outs = _run(op, _operand_values(op, layouts, meta_stand_in))
    if len(outs) == len(_tensor_results(op)):
        return tuple(layout_of_tensor(o) for o in outs)
    return None


DEVICE_SENSITIVE_CALLS = ("torch.fft.", "torch.linalg.", "torch.stft", "torch.istft",
                          "svd", "eig", "qr", "cholesky", "lu", "lstsq", "conv", "pool",
                          "pinverse", "inverse", "det", "solve", "triangular", "orgqr",
                          "ormqr", "geqrf", "matrix_exp")
"""Opaque callees whose result layout on the CPU is not what torch's meta kernels say
(they lay results out as CUDA's kernels do): fresh results of theirs are asked of fake
tensors of the operands' device (`call_layouts`)."""


def call_layouts(op: Operation, layouts: Sequence[Layout | None],
                 meta: Sequence[Layout], views: Sequence[int | None]) -> list[Layout]:
    """The layouts of an opaque call's tensor results, given its meta run's (``meta``, on
    stand-ins with the operands' layouts) and which results view an operand: the meta
    run's, except a fresh result of a device-sensitive callee (`DEVICE_SENSITIVE_CALLS`)
    off CUDA, which is asked of fake tensors of the operands' device (LAPACK's and
    pocketfft's column-major results, a channels-last convolution). Eager's own kernel
    makes the result at run time, so a layout meta kernels get wrong misleads only a query
    of it inside the trace."""
    callee = op.properties.get("callee")
    name = getattr(callee, "data", "")
    if all(v is not None for v in views) or _device(op).startswith("cuda") \
            or not any(s in name for s in DEVICE_SENSITIVE_CALLS):
        return list(meta)
    asked = asked_layouts(op, layouts, fake=True)
    if asked is None or len(asked) != len(meta):
        return list(meta)
    return [m if v is not None else a for m, a, v in zip(meta, asked, views, strict=True)]


__all__ = ["Layout", "LayoutError", "asked_layouts", "call_layouts", "contiguous_layout",
           "contiguous_strides", "fake_mode", "fake_stand_in", "fresh_layouts", "is_contiguous",
           "layout_of_tensor", "meta_stand_in", "storage_elements", "view_layouts"]
