"""Triton source for ``fusion.region`` ops: a schedule of kernels and a Python launcher.

Why generate source: a region of prims is small and its shapes and dtypes are known, so
one readable ``@triton.jit`` function per kernel, with every size baked in, is both the
fastest thing to compile and the easiest to review (``tests/snapshots/triton``).

**Symbolic sizes.** In a program compiled for every length (``!prims.tensor<[s0]x64xf32>``)
a size may be an expression over symbols. The generator computes with such sizes as sympy
expressions (no guards are recorded), each kernel takes the symbols it uses as ``int``
arguments, and the launcher binds them from its inputs' shapes (``s0 = a0.shape[1]``) and
picks, per call, the block (a power of two, so each size class compiles once, as Triton
caches kernels by their ``constexpr`` values) and whether indices need 64 bits (``WIDE``).
A reduction's row length is checked against `MAX_REDUCTION` by ``fusible`` with the
compilation's ``SymInt`` sizes: a guard of the program (``s1 <= 8192``).

**Scheduling.** A region becomes one or more kernels, run in order by a launcher:

* a **reduction kernel** has a domain ``D`` (a reduction's input shape) and the reduced
  dims of ``D``. One program handles one "row" (one point of the kept dims); the reduced
  dims are flattened into one block of ``RBLOCK >= numel`` lanes, loaded once. Every
  reduction of the region over the same ``(D, dims)`` joins the kernel when its inputs
  allow it, so softmax (``amax``, ``sub``, ``exp``, ``sum``, ``div``) and the norms are one
  kernel. Trailing dims (rows of a matrix) load contiguously; leading dims (the column
  sums of a norm's weight gradient) load strided.
* a **pointwise kernel** covers one output shape with a flat index in blocks of ``BLOCK``.

Elementwise ops are never stored between kernels: each kernel computes them again at the
index it needs (as Inductor does), through the index maps that ``broadcast_in_dim``,
``transpose``, ``squeeze`` and size-1 ``reshape`` define. Only region outputs and
reductions that a later kernel reads are written to memory.

**Numbers.** float16/bfloat16 values are held in float32 registers (loaded, then ``.to``);
``convert_element_type`` to them rounds, stores convert. Bools are ``int1``. Region inputs
that are Python numbers become scalar kernel arguments; ``prims.constant`` and
``prims.full`` become literals, and ops on literals only are folded with the prims'
reference implementations.

`generate` returns the source (`TritonSource`); `thunder_ir.lowering.triton_executor`
compiles and caches it. Nothing here imports triton.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.symbols import SYMBOL_NAME, SymbolicError, current
from thunder_ir.dialects.traits import Reduction
from thunder_ir.dialects.types import NumberType, TensorType

if TYPE_CHECKING:
    import sympy

MAX_REDUCTION = 8192
"""The most elements one reduction may reduce (one block per row; no loop)."""
POINTWISE_BLOCK = 1024
"""The largest block of a pointwise kernel."""
WIDE_INDEX = 2**31
"""Kernels over this many elements or more compute indices in 64 bits."""

LOW_PRECISION = (torch.float16, torch.bfloat16)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TENSOR_DTYPES = (*FLOAT_DTYPES, torch.bool, torch.int32, torch.int64)
"""Tensor dtypes a region may hold (int and bool only through the ops that allow them)."""

_TL_DTYPE = {torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
             torch.float32: "tl.float32", torch.bool: "tl.int1", torch.int32: "tl.int32",
             torch.int64: "tl.int64"}

BYTE_CODES = (torch.int8, torch.uint8)
"""Dtypes a region reads only to convert them to floats: quantized weights' codes (the
dequantization of `thunder_ir.dialects.quant` on devices without its kernels, int8 on
CUDA: load, convert, scale in one kernel)."""


class UnsupportedRegion(Exception):
    """The region holds something the Triton generator cannot schedule."""


# --------------------------------------------------------------------------- op tables

# Unary ops: op class -> (template on one atom, dtypes it accepts: "float", "num" or "any").
_UNARY: dict[type[Operation], tuple[str, str]] = {
    P.AbsOp: ("tl.abs({x})", "num"),
    P.NegOp: ("-{x}", "num"),
    P.SignOp: ("tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))", "float"),
    P.FloorOp: ("tl.floor({x})", "float"),
    P.CeilOp: ("tl.ceil({x})", "float"),
    P.TruncOp: ("tl.where({x} < 0, tl.ceil({x}), tl.floor({x}))", "float"),
    P.ExpOp: ("tl.exp({x})", "float"),
    P.Exp2Op: ("tl.exp2({x})", "float"),
    P.Expm1Op: ("expm1({x})", "float"),
    P.LogOp: ("tl.log({x})", "float"),
    P.Log1pOp: ("log1p({x})", "float"),
    P.Log2Op: ("tl.log2({x})", "float"),
    P.SinOp: ("tl.sin({x})", "float"),
    P.CosOp: ("tl.cos({x})", "float"),
    P.TanhOp: ("tanh({x})", "float"),
    P.SqrtOp: ("tl.sqrt({x})", "float"),
    P.RsqrtOp: ("tl.rsqrt({x})", "float"),
    P.ReciprocalOp: ("1.0 / {x}", "float"),
    P.ErfOp: ("tl.erf({x})", "float"),
    P.IsnanOp: ("{x} != {x}", "float"),
    P.IsinfOp: ("tl.abs({x}) == float(\"inf\")", "float"),
    P.IsfiniteOp: ("tl.abs({x}) < float(\"inf\")", "float"),
    P.LogicalNotOp: ("{x} == 0", "any"),
}
_HELPERS = ("expm1", "log1p", "tanh", "max_nan", "min_nan")

# Binary ops: op class -> (Python operator or template, dtypes: "float", "num", "any", "bits").
_BINARY: dict[type[Operation], tuple[str, str]] = {
    P.AddOp: ("{a} + {b}", "num"),
    P.SubOp: ("{a} - {b}", "num"),
    P.MulOp: ("{a} * {b}", "num"),
    P.DivOp: ("{a} / {b}", "float"),
    P.MaximumOp: ("tl.maximum({a}, {b}{nan})", "num"),
    P.MinimumOp: ("tl.minimum({a}, {b}{nan})", "num"),
    P.EqOp: ("{a} == {b}", "any"),
    P.NeOp: ("{a} != {b}", "any"),
    P.LtOp: ("{a} < {b}", "num"),
    P.LeOp: ("{a} <= {b}", "num"),
    P.GtOp: ("{a} > {b}", "num"),
    P.GeOp: ("{a} >= {b}", "num"),
    P.LogicalAndOp: ("{a} & {b}", "any"),
    P.LogicalOrOp: ("{a} | {b}", "any"),
    P.BitwiseAndOp: ("{a} & {b}", "bits"),
    P.BitwiseOrOp: ("{a} | {b}", "bits"),
    P.BitwiseXorOp: ("{a} ^ {b}", "bits"),
}

# prims.pow with a constant exponent: exponent -> template.
_POW: dict[float, str] = {
    1.0: "{x}", 2.0: "{x} * {x}", 3.0: "{x} * {x} * {x}",
    0.5: "tl.sqrt({x})", -0.5: "tl.rsqrt({x})", -1.0: "1.0 / {x}", -2.0: "1.0 / ({x} * {x})",
}



def _is_reduction(op: Operation) -> bool:
    """A reduction the generator schedules (``Reduction`` trait, with a handler)."""
    return op.has_trait(Reduction) and type(op) in _HANDLERS


def _dtype_ok(kind: str, dtype: torch.dtype) -> bool:
    if kind == "float":
        return dtype in FLOAT_DTYPES
    if kind == "num":
        return dtype in FLOAT_DTYPES or dtype in (torch.int32, torch.int64)
    if kind == "bits":
        return dtype in (torch.bool, torch.int32, torch.int64)
    return dtype in TENSOR_DTYPES


def _size1_reshape(src: Sequence[Size], dst: Sequence[Size]) -> bool:
    """A reshape that only adds or removes size-1 dims."""
    return [d for d in src if d != 1] == [d for d in dst if d != 1]


def _constant_exponent(v: SSAValue) -> float | None:
    owner = v.owner
    if isinstance(owner, P.ConstantOp):
        value = owner.params()["value"]
        if type(value) in (int, float) and (float(value) in _POW or value == 0):
            return float(value)
    return None


def fusible(op: Operation) -> bool:
    """True if the generator can compute ``op`` inside a kernel (dtypes, shapes, params).

    Only per-op facts are checked here; the executor adds the device.
    """
    cls = type(op)
    types = [v.type for v in (*op.operands, *op.results)]
    if cls is P.ConvertElementTypeOp and _tensor(op.operands[0]).dtype in BYTE_CODES:
        return _tensor(op.results[0]).dtype in FLOAT_DTYPES and 0 not in _dims(types[0])
    for t in types:
        if isinstance(t, TensorType) and (t.dtype not in TENSOR_DTYPES or 0 in _dims(t)):
            return False
    if cls in _UNARY:
        return _dtype_ok(_UNARY[cls][1], _tensor(op.operands[0]).dtype)
    if cls in _BINARY:
        operand_dtype = next(t.dtype for t in types if isinstance(t, TensorType))
        return _dtype_ok(_BINARY[cls][1], operand_dtype)
    if cls is P.PowOp:
        return (isinstance(op.operands[0].type, TensorType)
                and _tensor(op.operands[0]).dtype in FLOAT_DTYPES
                and _constant_exponent(op.operands[1]) is not None)
    if _is_reduction(op):
        x = _tensor(op.operands[0])
        dims = _params(op)["dims"]
        if not dims or x.dtype not in FLOAT_DTYPES:
            return False
        if x.symbolic and current() is None:  # generating for a region fused already
            return True
        # With symbolic sizes the comparison is a guard of the program (``s0 <= 8192``):
        # longer rows make another program, without this fusion.
        return bool(math.prod(x.sizes[d] for d in dims) <= MAX_REDUCTION)
    if cls is P.ReshapeOp:
        return _size1_reshape(_dims(_tensor(op.operands[0])), _dims(_tensor(op.results[0])))
    return cls in _HANDLERS or cls is P.ConstantOp


def _tensor(v: SSAValue) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor, got {t}"
    return t


# --------------------------------------------------------------------------- sizes

Size: TypeAlias = "int | sympy.Expr"
"""A size as the generator computes with it: an int, or a sympy expression over the
program's symbols (``s0``, ``64*s0``), which kernels take as arguments."""

_SIZE_TEXT = re.compile(r"[\w\s+*()-]*")
_NAMES = re.compile(r"[A-Za-z_]\w*")


@functools.lru_cache(maxsize=4096)
def _sym(text: str) -> sympy.Expr:
    """The sympy expression of a symbolic size's text (sums and products of symbols and
    ints; anything else, ``s0//2``, raises `SymbolicError`)."""
    names = _NAMES.findall(text)
    if not _SIZE_TEXT.fullmatch(text) or "**" in text \
            or not all(SYMBOL_NAME.fullmatch(n) for n in names):
        raise SymbolicError(f"triton: kernels take sums and products of sizes, not {text!r}")
    import sympy  # (0.2 s to import: with the first symbolic size)

    expr = sympy.sympify(text, locals={n: sympy.Symbol(n, integer=True, positive=True)
                                       for n in names})
    if "**" in str(expr):
        raise SymbolicError(f"triton: kernels take sums and products of sizes, not {text!r}")
    return expr


def _dims(t: TensorType) -> tuple[Size, ...]:
    """The sizes of ``t`` as the generator uses them (no guards are recorded)."""
    if not t.symbolic:
        return t.sizes
    return tuple(d if isinstance(d, int) else _sym(d) for d in t.dims_text)


def _num(n: Size) -> int | sympy.Expr:
    """An expression that is a number, as an int."""
    if not isinstance(n, int) and n.is_Integer:
        return int(n)
    return n


def _text(n: Size) -> str:
    """A size as source: ``8``, ``s0``, ``(64*s0)``."""
    n = _num(n)
    if isinstance(n, int):
        return str(n)
    text = str(n)
    return text if n.is_Symbol else f"({text})"


def _bare(n: Size) -> str:
    """A size as a call's argument or a tuple's item: ``s0*s1``, without parentheses."""
    text = _text(n)
    return text[1:-1] if text.startswith("(") else text


def _prod(sizes: Sequence[Size]) -> Size:
    return _num(math.prod(sizes))


def _symbolic(sizes: Sequence[Size]) -> bool:
    return any(not isinstance(d, int) for d in sizes)


def _params(op: Operation) -> dict[str, Any]:
    assert isinstance(op, ThunderOp)
    return op.params()


# --------------------------------------------------------------------------- literals


def literal(value: Any) -> str:
    """A Python number as Triton source (``float("inf")`` for infinities and NaN)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    f = float(value)
    if math.isnan(f):
        return 'float("nan")'
    if math.isinf(f):
        return 'float("inf")' if f > 0 else 'float("-inf")'
    return repr(f)


def _to_dtype(value: Any, dtype: torch.dtype) -> Any:
    """A Python number converted (and rounded) as a tensor of ``dtype`` would hold it."""
    return torch.tensor(value).to(dtype).item()


# --------------------------------------------------------------------------- planning


@dataclass
class Kernel:
    """One kernel of a region's schedule.

    Attributes:
        name: the ``@triton.jit`` function's name.
        shape: the domain ``D``.
        reduced: the reduced dims of ``D`` (empty for a pointwise kernel).
        stores: values the kernel writes (region outputs and intermediates), in order.
        reductions: the reduction ops the kernel computes.
    """

    name: str
    shape: tuple[Size, ...]
    reduced: tuple[int, ...] = ()
    stores: list[SSAValue] = field(default_factory=list)
    reductions: list[Operation] = field(default_factory=list)

    @property
    def is_reduction(self) -> bool:
        return bool(self.reduced)

    @property
    def kept(self) -> tuple[int, ...]:
        return tuple(d for d in range(len(self.shape)) if d not in self.reduced)

    @property
    def kept_shape(self) -> tuple[Size, ...]:
        return tuple(self.shape[d] for d in self.kept)

    def store_map(self, v: SSAValue) -> tuple[int | None, ...]:
        """How a stored value's dims map to the domain's (full shape or kept shape)."""
        sizes = _dims(_tensor(v))
        dims = self.kept if (self.is_reduction and sizes == self.kept_shape
                             and sizes != self.shape) else tuple(range(len(self.shape)))
        return _normalize(dims, sizes)


def _normalize(m: Sequence[int | None], sizes: Sequence[Size]) -> tuple[int | None, ...]:
    """An index map with size-1 dims mapped to nothing (their index is always 0)."""
    return tuple(None if s == 1 else d for d, s in zip(m, sizes))


@dataclass
class Schedule:
    """The kernels of a region, in launch order, and which values go through memory."""

    block: Block
    kernels: list[Kernel]
    owner: dict[Operation, int]  # reduction op -> index of the kernel that computes it
    stored_by: dict[SSAValue, int]  # stored value -> kernel index


def _reduction_deps(ops: Sequence[Operation]) -> dict[SSAValue, frozenset[Operation]]:
    """For each value, the reductions it reads through elementwise and view ops."""
    deps: dict[SSAValue, frozenset[Operation]] = {}
    empty: frozenset[Operation] = frozenset()
    for op in ops:
        if _is_reduction(op):
            d: frozenset[Operation] = frozenset((op,))
        else:
            d = empty
            for o in op.operands:
                d = d | deps.get(o, empty)
        for r in op.results:
            deps[r] = d
    return deps


def plan(block: Block, base: str) -> Schedule:
    """Schedules the ops of a region's body into kernels named ``<base>_k<i>`` (see the
    module doc)."""
    term = block.last_op
    assert isinstance(term, YieldOp)
    ops = [op for op in block.ops if op is not term]
    for op in ops:
        if not fusible(op):
            raise UnsupportedRegion(f"{op.name} is not supported by the Triton generator")
    deps = _reduction_deps(ops)
    kernels: list[Kernel] = []
    owner: dict[Operation, int] = {}

    def new_kernel(shape: tuple[Size, ...], reduced: tuple[int, ...]) -> int:
        kernels.append(Kernel("", shape, reduced))
        return len(kernels) - 1

    last_of_key: dict[tuple[tuple[Size, ...], tuple[int, ...]], int] = {}
    for op in ops:
        if not _is_reduction(op):
            continue
        key = (_dims(_tensor(op.operands[0])), tuple(sorted(_params(op)["dims"])))
        level = max((owner[r] for r in deps.get(op.operands[0], ())), default=-1)
        cand = last_of_key.get(key)
        if cand is None or cand < level:
            cand = new_kernel(*key)
            last_of_key[key] = cand
        owner[op] = cand
        kernels[cand].reductions.append(op)

    n_reduction_kernels = len(kernels)
    pointwise: dict[tuple[Size, ...], int] = {}
    stored_by: dict[SSAValue, int] = {}

    def store(v: SSAValue, k: int) -> None:
        if v not in stored_by:
            stored_by[v] = k
            kernels[k].stores.append(v)

    for y in term.values:
        if not isinstance(y.type, TensorType) or isinstance(y, BlockArgument):
            continue
        if _is_reduction(y.owner):  # type: ignore[arg-type]
            store(y, owner[y.owner])  # type: ignore[index]
            continue
        sizes = _dims(_tensor(y))
        ds = deps.get(y, frozenset())
        if ds:
            k = max(owner[r] for r in ds)
            if sizes in (kernels[k].shape, kernels[k].kept_shape):
                store(y, k)
                continue
        else:
            match = next((i for i in range(n_reduction_kernels) if kernels[i].shape == sizes),
                         None)
            if match is not None:
                store(y, match)
                continue
        k = pointwise.get(sizes, -1)
        if k < 0:
            k = pointwise[sizes] = new_kernel(sizes, ())
        store(y, k)

    # Reductions read by a later kernel go through memory: their kernel stores them too.
    # Last kernel first, so that a kernel's stores are final when it is walked.
    for i in range(len(kernels) - 1, -1, -1):
        for r in _foreign_reductions(kernels[i], i, owner, stored_by):
            if owner[r] >= i:
                raise UnsupportedRegion(f"{r.name} is needed before it is computed")
            store(r.results[0], owner[r])
    # Kernels left with nothing to store (dead reductions) are dropped.
    live = [i for i, kern in enumerate(kernels) if kern.stores]
    new_index = {old: new for new, old in enumerate(live)}
    kernels = [kernels[i] for i in live]
    for i, kern in enumerate(kernels):
        kern.name = f"{base}_k{i}"
    owner = {r: new_index[k] for r, k in owner.items() if k in new_index}
    stored_by = {v: new_index[k] for v, k in stored_by.items()}
    return Schedule(block, kernels, owner, stored_by)


def _foreign_reductions(kern: Kernel, index: int, owner: dict[Operation, int],
                        stored_by: dict[SSAValue, int]) -> list[Operation]:
    """Reductions of other kernels that ``kern``'s stores read, in first-seen order (not
    through values an earlier kernel stores: ``kern`` loads those)."""
    seen: set[SSAValue] = set()
    out: list[Operation] = []
    stack = list(reversed(kern.stores))
    while stack:
        v = stack.pop()
        if v in seen or stored_by.get(v, index) < index:
            continue
        seen.add(v)
        op = v.owner
        if not isinstance(op, Operation):
            continue
        if _is_reduction(op) and owner[op] != index:
            if op not in out:
                out.append(op)
            continue
        stack.extend(reversed(op.operands))
    return out


# --------------------------------------------------------------------------- kernel bodies


@dataclass(frozen=True)
class _Val:
    """An evaluated value: a Triton expression (a name or a literal)."""

    expr: str
    dtype: torch.dtype | type  # torch dtype of the IR value, or a Python number type
    literal: Any = None  # the Python value when the expression is a literal
    is_literal: bool = False


def _contiguous_strides(sizes: Sequence[Size]) -> tuple[Size, ...]:
    strides: list[Size] = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = _num(strides[i + 1] * sizes[i + 1])
    return tuple(strides)


class _KernelWriter:
    """Writes one ``@triton.jit`` function for one `Kernel` of a `Schedule`."""

    def __init__(self, sched: Schedule, index: int, buffers: dict[SSAValue, str],
                 numbers: dict[SSAValue, str]) -> None:
        self.sched = sched
        self.index = index
        self.kern = sched.kernels[index]
        self.buffers = buffers  # values in memory (region inputs, stored values) -> name
        self.numbers = numbers  # region inputs that are numbers -> argument name
        self.pre: dict[int, str] = {}  # domain dim -> the line defining its index
        self.body: list[str] = []
        self.memo: dict[tuple[SSAValue, tuple[int | None, ...]], _Val] = {}
        self.loads: dict[tuple[str, str], str] = {}
        self.params: dict[str, None] = {}
        self.helpers: set[str] = set()
        self.idx_vars: dict[int, str] = {}
        self.n = 0
        shape = self.kern.shape
        if self.kern.is_reduction:
            self.classes = {"row": [d for d in self.kern.kept if shape[d] != 1],
                            "cols": [d for d in self.kern.reduced if shape[d] != 1]}
            self.lane, self.mask = "cols", "cmask"
        else:
            self.classes = {"offs": [d for d in range(len(shape)) if shape[d] != 1]}
            self.lane, self.mask = "offs", "mask"

    # ---- names

    def _tmp(self, expr: str, dtype: torch.dtype | type) -> _Val:
        name = f"t{self.n}"
        self.n += 1
        self.body.append(f"{name} = {expr}")
        return _Val(name, dtype)

    def _idx(self, d: int) -> str:
        """The index variable of domain dim ``d`` (emitted on first use)."""
        name = self.idx_vars.get(d)
        if name is not None:
            return name
        shape = self.kern.shape
        cls = next(c for c, dims in self.classes.items() if d in dims)
        dims = self.classes[cls]
        pos = dims.index(d)
        inner = _prod([shape[k] for k in dims[pos + 1:]])
        e = cls if inner == 1 else f"{cls} // {_text(inner)}"
        if pos > 0:
            e = f"{cls} % {_text(shape[d])}" if inner == 1 else f"({e}) % {_text(shape[d])}"
        name = f"i{d}"
        self.pre[d] = f"{name} = {e}"
        self.idx_vars[d] = name
        return name

    def _offset(self, sizes: Sequence[Size], strides: Sequence[Size],
                m: Sequence[int | None]) -> tuple[str, bool]:
        """The offset of domain point -> element of a buffer, and whether it varies by lane."""
        terms: list[str] = []
        lane = False
        for cls, cdims in self.classes.items():
            tdims = [i for i in range(len(sizes)) if m[i] is not None and m[i] in cdims]
            if not tdims:
                continue
            lane = lane or cls == self.lane
            whole = [m[i] for i in tdims] == cdims and all(
                strides[a] == strides[b] * sizes[b] for a, b in itertools.pairwise(tdims))
            if whole:
                terms.append(_scaled(cls, strides[tdims[-1]]))
            else:
                terms.extend(_scaled(self._idx(m[i]), strides[i])  # type: ignore[arg-type]
                             for i in tdims)
        return " + ".join(terms) if terms else "0", lane

    def _ptr(self, name: str, off: str) -> str:
        if off == "0":
            return name
        return f"{name} + {off}" if " " not in off else f"{name} + ({off})"

    # ---- loads and stores

    def _load(self, name: str, t: TensorType, m: Sequence[int | None],
              sizes: Sequence[Size] | None = None) -> _Val:
        sizes = _dims(t) if sizes is None else tuple(sizes)
        self.params[name] = None
        off, lane = self._offset(sizes, _contiguous_strides(sizes), m)
        key = (name, off)
        hit = self.loads.get(key)
        if hit is None:
            mask = f", mask={self.mask}" if lane else ""
            cast = ".to(tl.float32)" if t.dtype in LOW_PRECISION else ""
            hit = self._tmp(f"tl.load({self._ptr(name, off)}{mask}){cast}", t.dtype).expr
            self.loads[key] = hit
        return _Val(hit, t.dtype)

    def store(self, v: SSAValue, name: str) -> None:
        t = _tensor(v)
        m = self.kern.store_map(v)
        val = self.eval(v, m)
        self.params[name] = None
        sizes = _dims(t)
        off, lane = self._offset(sizes, _contiguous_strides(sizes), m)
        expr = val.expr
        if not val.is_literal and t.dtype in LOW_PRECISION:
            expr = f"{expr}.to({_TL_DTYPE[t.dtype]})"
        mask = f", mask={self.mask}" if lane else ""
        self.body.append(f"tl.store({self._ptr(name, off)}, {expr}{mask})")

    # ---- evaluation

    def eval(self, v: SSAValue, m: Sequence[int | None]) -> _Val:
        """The value of ``v`` at the domain point, with ``v``'s dims mapped by ``m``."""
        t = v.type
        key_m = _normalize(m, _dims(t)) if isinstance(t, TensorType) else ()
        key = (v, key_m)
        hit = self.memo.get(key)
        if hit is None:
            hit = self._eval(v, key_m)
            self.memo[key] = hit
        return hit

    def _eval(self, v: SSAValue, m: tuple[int | None, ...]) -> _Val:
        t = v.type
        if isinstance(t, NumberType):
            if v in self.numbers:
                self.params[self.numbers[v]] = None
                return _Val(self.numbers[v], t.python_type)
            owner = v.owner
            assert isinstance(owner, P.ConstantOp)
            value = owner.params()["value"]
            return _Val(literal(value), type(value), value, True)
        assert isinstance(t, TensorType)
        op = v.owner
        name = self.buffers.get(v)
        if name is not None and (isinstance(v, BlockArgument)
                                 or self.sched.stored_by[v] < self.index):
            return self._load(name, t, m)
        if not isinstance(op, Operation) or op.parent_block() is not self.sched.block:
            raise UnsupportedRegion("the region reads a tensor from outside its body")
        handler = _HANDLERS.get(type(op))
        if handler is not None:
            return handler(self, op, m)
        if type(op) in _UNARY:
            return self._unary(op, m)
        if type(op) in _BINARY:
            return self._binary(op, m)
        raise UnsupportedRegion(f"{op.name} is not supported by the Triton generator")

    def _fold(self, op: Operation, values: list[_Val]) -> _Val | None:
        """Folds an op whose operands are all literals with its reference implementation."""
        if not all(v.is_literal for v in values):
            return None
        cls = type(op)
        assert isinstance(op, ThunderOp)
        args = [torch.tensor(v.literal, dtype=_tensor(o).dtype) if isinstance(o.type, TensorType)
                else v.literal for v, o in zip(values, op.operands)]
        out = cls.ref(*args, **op.params())  # type: ignore[attr-defined]
        value = out.item() if isinstance(out, torch.Tensor) else out
        return _Val(literal(value), _tensor(op.results[0]).dtype, value, True)

    def _unary(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        x = self.eval(op.operands[0], m)
        folded = self._fold(op, [x])
        if folded is not None:
            return folded
        template = _UNARY[type(op)][0]
        for h in _HELPERS:
            if template.startswith(h + "("):
                self.helpers.add(h)
        return self._tmp(template.format(x=x.expr), _tensor(op.results[0]).dtype)

    def _binary(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        a, b = (self.eval(o, m) for o in op.operands)
        folded = self._fold(op, [a, b])
        if folded is not None:
            return folded
        template = _BINARY[type(op)][0]
        dtype = next(_tensor(o).dtype for o in op.operands if isinstance(o.type, TensorType))
        nan = ", propagate_nan=tl.PropagateNan.ALL" if dtype in FLOAT_DTYPES else ""
        if isinstance(op, P.LogicalAndOp | P.LogicalOrOp) and dtype != torch.bool:
            a = _Val(f"({a.expr} != 0)", torch.bool)
            b = _Val(f"({b.expr} != 0)", torch.bool)
        return self._tmp(template.format(a=a.expr, b=b.expr, nan=nan),
                         _tensor(op.results[0]).dtype)

    def reduce(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        natural = _normalize(self.kern.kept, _dims(_tensor(op.results[0])))
        if self.sched.owner.get(op) != self.index or m != natural:
            raise UnsupportedRegion(f"{op.name} is read at an index its kernel does not own")
        x_map = _normalize(range(len(self.kern.shape)), self.kern.shape)
        x = self.eval(op.operands[0], x_map)
        xe = x.expr
        dtype = _tensor(op.results[0]).dtype
        mk = self.mask
        if isinstance(op, P.SumOp):
            return self._tmp(f"tl.sum(tl.where({mk}, {xe}, 0.0), axis=0)", dtype)
        if isinstance(op, P.AmaxOp | P.AminOp):
            fn, fill = ("max_nan", '"-inf"') if isinstance(op, P.AmaxOp) else ("min_nan", '"inf"')
            self.helpers.add(fn)
            return self._tmp(f"tl.reduce(tl.where({mk}, {xe}, float({fill})), 0, {fn})", dtype)
        # prims.var: a two-pass variance within the row.
        n = _prod([self.kern.shape[d] for d in self.kern.reduced])
        corr = float(_params(op).get("correction", 1.0))
        if isinstance(n, int):
            count, dof = literal(float(n)), literal(max(0.0, n - corr))
        else:  # a symbolic row: at least as long as any correction torch allows
            count, dof = _text(n), f"({_text(n)} - {literal(corr)})"
        mean = self._tmp(f"tl.sum(tl.where({mk}, {xe}, 0.0), axis=0) / {count}", dtype)
        dev = self._tmp(f"tl.where({mk}, {xe} - {mean.expr}, 0.0)", dtype)
        return self._tmp(f"tl.sum({dev.expr} * {dev.expr}, axis=0) / {dof}", dtype)

    def where(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        c, a, b = (self.eval(o, m) for o in op.operands)
        if c.is_literal:
            return a if c.literal else b
        folded = self._fold(op, [c, a, b])
        if folded is not None:
            return folded
        return self._tmp(f"tl.where({c.expr}, {a.expr}, {b.expr})",
                         _tensor(op.results[0]).dtype)

    def convert(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        x = self.eval(op.operands[0], m)
        src, dst = _tensor(op.operands[0]).dtype, _tensor(op.results[0]).dtype
        if x.is_literal:
            value = _to_dtype(x.literal, dst)
            return _Val(literal(value), dst, value, True)
        if src == dst or (src in LOW_PRECISION and dst == torch.float32):
            return _Val(x.expr, dst)
        if dst == torch.bool:
            return self._tmp(f"{x.expr} != 0", dst)
        if dst in LOW_PRECISION:
            # Round to the narrow type, compute on in float32.
            wide = x.expr if src in FLOAT_DTYPES else f"{x.expr}.to(tl.float32)"
            return self._tmp(f"{wide}.to({_TL_DTYPE[dst]}).to(tl.float32)", dst)
        return self._tmp(f"{x.expr}.to({_TL_DTYPE[dst]})", dst)

    def full(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        p = _params(op)
        value = _to_dtype(p["fill_value"], p["dtype"])
        return _Val(literal(value), p["dtype"], value, True)

    def pow(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        x = self.eval(op.operands[0], m)
        e = _constant_exponent(op.operands[1])
        if e is None:
            raise UnsupportedRegion("prims.pow needs a constant exponent")
        if e == 0.0:  # torch.pow(x, 0) is 1, NaN included
            return _Val("1.0", _tensor(op.results[0]).dtype, 1.0, True)
        folded = self._fold(op, [x, self.eval(op.operands[1], ())])
        if folded is not None:
            return folded
        return self._tmp(_POW[e].format(x=x.expr), _tensor(op.results[0]).dtype)

    # ---- views: evaluate the operand at a remapped index

    def broadcast(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        x = op.operands[0]
        bdims = _params(op)["broadcast_dims"]
        return self.eval(x, tuple(m[bd] for bd in bdims))

    def transpose(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        perm = _params(op)["permutation"]
        xm: list[int | None] = [None] * len(perm)
        for i, p in enumerate(perm):
            xm[p] = m[i]
        return self.eval(op.operands[0], xm)

    def squeeze(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        dims = set(_params(op)["dims"])
        it = iter(m)
        rank = _tensor(op.operands[0]).rank
        return self.eval(op.operands[0], [None if i in dims else next(it) for i in range(rank)])

    def reshape(self, op: Operation, m: tuple[int | None, ...]) -> _Val:
        x = op.operands[0]
        src, dst = _dims(_tensor(x)), _dims(_tensor(op.results[0]))
        if _size1_reshape(src, dst):
            real = iter(d for d, s in zip(m, dst) if s != 1)
            return self.eval(x, [next(real) if s != 1 else None for s in src])
        name = self.buffers.get(x)
        if name is not None and (isinstance(x, BlockArgument)
                                 or self.sched.stored_by[x] < self.index):
            return self._load(name, _tensor(x), m, sizes=dst)
        raise UnsupportedRegion("prims.reshape of a computed value that is not in memory")


def _scaled(name: str, stride: Size) -> str:
    return name if stride == 1 else f"{name} * {_text(stride)}"


_Handler = Callable[[_KernelWriter, Operation, tuple[int | None, ...]], _Val]

# Ops with a writer method of their own: op class -> method. A rule table, keyed by class:
# what each op becomes in Triton source is this generator's fact, not the op's
# (``tests/test_traits.py`` checks that every prim is in one table or declared unsupported).
_HANDLERS: dict[type[Operation], _Handler] = {
    P.SumOp: _KernelWriter.reduce,
    P.AmaxOp: _KernelWriter.reduce,
    P.AminOp: _KernelWriter.reduce,
    P.VarOp: _KernelWriter.reduce,
    P.WhereOp: _KernelWriter.where,
    P.ConvertElementTypeOp: _KernelWriter.convert,
    P.FullOp: _KernelWriter.full,
    P.PowOp: _KernelWriter.pow,
    P.BroadcastInDimOp: _KernelWriter.broadcast,
    P.TransposeOp: _KernelWriter.transpose,
    P.SqueezeOp: _KernelWriter.squeeze,
    P.ReshapeOp: _KernelWriter.reshape,
}


# --------------------------------------------------------------------------- source


@dataclass
class TritonSource:
    """Generated source for one region.

    Attributes:
        source: the module text (``@triton.jit`` kernels, then the launcher).
        launcher: the launcher function's name: ``launcher(*inputs)`` returns the one output
            itself, or a tuple of several.
        schedule: the plan the source implements.
    """

    source: str
    launcher: str
    schedule: Schedule


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _wrap_call(head: str, args: Sequence[str], indent: str, tail: str = "") -> list[str]:
    """``head(arg, ...)tail`` on one line, or wrapped under 100 columns."""
    one = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one) <= 100:
        return [one]
    lines: list[str] = []
    cur = f"{indent}{head}("
    pad = " " * len(cur)
    for i, a in enumerate(args):
        piece = a + (", " if i < len(args) - 1 else f"){tail}")
        if len(cur) + len(piece.rstrip()) > 100 and cur.strip() not in ("", f"{head}("):
            lines.append(cur.rstrip())
            cur = pad
        cur += piece
    lines.append(cur)
    return lines


def generate(region: RegionOp) -> TritonSource:
    """The Triton source computing ``region`` (raises `UnsupportedRegion`)."""
    return generate_block(region.body.block, region.kernel.data)


def generate_block(block: Block, base: str, wide_at: int | None = None) -> TritonSource:
    """The Triton source computing a region body of prims; the launcher is named ``base``
    and its kernels ``<base>_k<i>`` (raises `UnsupportedRegion`).

    With symbolic sizes, kernels take the symbols they use as arguments, the launcher
    binds them from its inputs' shapes and picks each launch's block and index width
    (``wide_at``: the element count from which indices are 64-bit; `WIDE_INDEX` by
    default).

    Raises:
        SymbolicError: a symbol no input's shape gives, or a size expression kernels
            cannot compute.
    """
    sched = plan(block, base)
    wide_at = WIDE_INDEX if wide_at is None else wide_at
    term = block.last_op
    assert isinstance(term, YieldOp)
    args = [f"a{i}" for i in range(len(block.args))]
    buffers: dict[SSAValue, str] = {}
    numbers: dict[SSAValue, str] = {}
    for a, name in zip(block.args, args):
        (buffers if isinstance(a.type, TensorType) else numbers)[a] = name
    outputs: dict[SSAValue, str] = {}
    for y in term.values:
        if y in sched.stored_by and y not in outputs:
            outputs[y] = f"out{len(outputs)}"
    n_buf = 0
    for kern in sched.kernels:
        for v in kern.stores:
            if v not in outputs:
                buffers[v] = f"buf{n_buf}"
                n_buf += 1
    buffers.update(outputs)

    kernel_src: list[str] = []
    launches: list[str] = []
    helpers: set[str] = set()
    used: set[str] = set()
    symbols: set[str] = set()
    for i, kern in enumerate(sched.kernels):
        w = _KernelWriter(sched, i, buffers, numbers)
        for v in kern.stores:
            w.store(v, buffers[v])
        helpers |= w.helpers
        names = [*args, *(n for v, n in buffers.items() if not isinstance(v, BlockArgument))]
        params = [p for p in names if p in w.params]
        used.update(params)
        syms = _symbols_of(kern, w)
        symbols.update(syms)
        kernel_src.append(_kernel_text(kern, w, params, syms))
        launches += _launch_lines(i, kern, params, syms, wide_at)

    lines = ["import torch", "import triton", "import triton.language as tl"]
    if helpers:
        lines += ["", f"from thunder_ir.lowering.triton_kernels import "
                      f"{', '.join(sorted(helpers))}"]
    out: list[str] = [f'"""{base}: Triton kernels generated by thunder_ir."""', "", *lines]
    for text in kernel_src:
        out += ["", "", text]
    out += ["", ""]
    out += _wrap_call(f"def {base}", args, "", ":") if args else [f"def {base}():"]
    for a, name in zip(block.args, args):
        if isinstance(a.type, TensorType) and name in used:
            out.append(f"    {name} = {name}.contiguous()")
    allocs = []
    for v, name in buffers.items():
        if isinstance(v, BlockArgument):
            continue
        t = _tensor(v)
        dims = _dims(t)
        symbols.update(SYMBOL_NAME.findall(" ".join(map(str, dims))))
        shape = f"({', '.join(map(_text, dims))}{',' if t.rank == 1 else ''})"
        allocs.append(f"    {name} = torch.empty({shape}, dtype={t.dtype}, device=\"{t.dev}\")")
    out += _bind_symbols(symbols, block, args)
    out += allocs
    out += launches
    rets = []
    for y in term.values:
        if y in outputs:
            rets.append(outputs[y])
        elif isinstance(y, BlockArgument):
            rets.append(args[y.index])
        else:
            owner = y.owner
            assert isinstance(owner, P.ConstantOp)
            rets.append(literal(owner.params()["value"]))
    # A kernel returns its one output itself, a tuple of several (as codegen calls it).
    out.append(f"    return {rets[0]}" if len(rets) == 1 else f"    return ({', '.join(rets)})")
    return TritonSource("\n".join(out) + "\n", base, sched)


def _symbol_order(name: str) -> int:
    return int(name[1:])


def _symbols_of(kern: Kernel, w: _KernelWriter) -> list[str]:
    """The symbols a kernel's body computes with (its size arguments), in order."""
    text = " ".join([*map(str, kern.shape), *w.pre.values(), *w.body])
    return sorted(set(SYMBOL_NAME.findall(text)), key=_symbol_order)


def _bind_symbols(symbols: set[str], block: Block, args: Sequence[str]) -> list[str]:
    """``s0 = a0.shape[1]``: each symbol from the first input with a dim of exactly it."""
    lines = []
    for name in sorted(symbols, key=_symbol_order):
        for a, arg in zip(block.args, args):
            t = a.type
            if isinstance(t, TensorType) and t.symbolic and name in t.dims_text:
                lines.append(f"    {name} = {arg}.shape[{t.dims_text.index(name)}]")
                break
        else:
            raise SymbolicError(f"triton: no input of the region has a dimension {name}")
    return lines


def _kernel_text(kern: Kernel, w: _KernelWriter, params: list[str], syms: list[str]) -> str:
    shape = kern.shape
    block = "RBLOCK" if kern.is_reduction else "BLOCK"
    meta = [f"{block}: tl.constexpr", *(["WIDE: tl.constexpr"] if syms else [])]
    sig = _wrap_call(f"def {kern.name}", [*params, *syms, *meta], "", ":")
    total = _prod(shape)
    if syms:  # the launch says whether indices need 64 bits
        pid = "pid"
        wide = ["pid = tl.program_id(0)", "if WIDE:", "    pid = pid.to(tl.int64)",
                *(f"    {s} = {s}.to(tl.int64)" for s in syms)]
    else:
        wide = []
        pid = "tl.program_id(0).to(tl.int64)" if total >= 2**31 else "tl.program_id(0)"
    shown = "[" + ", ".join(map(str, shape)) + "]"
    if kern.is_reduction:
        n = _prod([shape[d] for d in kern.reduced])
        doc = (f"Reduces dims {list(kern.reduced)} of {shown}: one program per point "
               f"of dims {list(kern.kept)}, {n} lanes.")
        head = [*wide, f"row = {pid}", "cols = tl.arange(0, RBLOCK)",
                f"cmask = cols < {_text(n)}"]
    else:
        doc = f"Elementwise over {shown}."
        head = [*wide, f"offs = {pid} * BLOCK + tl.arange(0, BLOCK)",
                f"mask = offs < {_text(total)}"]
    pre = [w.pre[d] for d in sorted(w.pre)]  # index variables, in dim order
    body = [f'"""{doc}"""', *head, *pre, *w.body]
    return "\n".join(["@triton.jit", *sig, *("    " + ln for ln in body)])


def _launch_lines(index: int, kern: Kernel, params: list[str], syms: list[str],
                  wide_at: int) -> list[str]:
    shape = kern.shape
    if syms:
        return _symbolic_launch(index, kern, [*params, *syms], wide_at)
    if kern.is_reduction:
        rows = math.prod(shape[d] for d in kern.kept)
        n = math.prod(shape[d] for d in kern.reduced)
        block = _next_pow2(n)  # type: ignore[arg-type]
        warps = max(1, min(16, block // 256))
        grid, meta = rows, [f"RBLOCK={block}", f"num_warps={warps}"]
    else:
        n = math.prod(shape)
        block = min(POINTWISE_BLOCK, max(32, _next_pow2(n)))  # type: ignore[arg-type]
        grid = -(-n // block)
        meta = [f"BLOCK={block}", f"num_warps={max(1, min(4, block // 256))}"]
    if grid == 0:
        return []
    return _wrap_call(f"{kern.name}[({grid},)]", [*params, *meta], "    ")


def _symbolic_launch(index: int, kern: Kernel, args: list[str], wide_at: int) -> list[str]:
    """A launch whose sizes are known at call time: the block (a power of two, so each
    size class compiles once) and the index width are picked per call."""
    shape = kern.shape
    total = _prod(shape)
    b = f"B{index}"
    if kern.is_reduction:
        rows = _bare(_prod([shape[d] for d in kern.kept]))
        n = _prod([shape[d] for d in kern.reduced])
        if isinstance(n, int):  # the rows' length is fixed: so is the block
            lines = []
            block = _next_pow2(n)
            meta = [f"RBLOCK={block}", f"num_warps={max(1, min(16, block // 256))}"]
        else:
            lines = [f"{b} = triton.next_power_of_2({_bare(n)})"]
            meta = [f"RBLOCK={b}", f"num_warps=max(1, min(16, {b} // 256))"]
        grid = rows
    else:
        n = _bare(total)
        lines = [f"{b} = min({POINTWISE_BLOCK}, max(32, triton.next_power_of_2({n})))"]
        grid, meta = f"triton.cdiv({n}, {b})", [f"BLOCK={b}",
                                                f"num_warps=max(1, min(4, {b} // 256))"]
    meta.insert(1, f"WIDE={_text(total)} >= {wide_at}")
    lines += _wrap_call(f"{kern.name}[({grid},)]", [*args, *meta], "")
    if not isinstance(total, int) and not total.is_positive:  # may be empty
        return [f"    if {_text(total)} > 0:", *("        " + ln for ln in lines)]
    return ["    " + ln for ln in lines]


def structural_key(region: RegionOp) -> str:
    """A text that equal regions share: input types, ops, params and result types (value
    names and the kernel name left out). Kernels are cached by it."""
    block = region.body.block
    ids: dict[SSAValue, str] = {}
    parts = []
    for i, a in enumerate(block.args):
        ids[a] = f"a{i}"
        parts.append(str(a.type))
    for op in block.ops:
        props = ",".join(f"{k}={v}" for k, v in sorted(op.properties.items()))
        operands = ",".join(ids[o] if o in ids else _outer(o) for o in op.operands)
        for r in op.results:
            ids[r] = f"v{len(ids)}"
        res = ",".join(f"{ids[r]}:{r.type}" for r in op.results)
        parts.append(f"{res}={op.name}({operands}){{{props}}}")
    return "\n".join(parts)


def _outer(v: SSAValue) -> str:
    """A value a region reads from outside without passing it in: CSE may leave a region
    reading an equal ``prims.constant`` outside."""
    if isinstance(v.owner, P.ConstantOp):
        return f"const({v.owner.properties['value']})"
    return f"outer({id(v)})"


__all__ = ["BYTE_CODES", "FLOAT_DTYPES", "MAX_REDUCTION", "Kernel", "Schedule", "TritonSource",
           "UnsupportedRegion", "fusible", "generate", "generate_block", "literal", "plan",
           "structural_key"]
