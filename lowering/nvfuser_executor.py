"""The nvFuser executor: each ``fusion.region`` it owns becomes one nvFuser FusionDefinition.

Why a translator over a *definition builder*: nvFuser's Python frontend builds a fusion by
calls on a ``FusionDefinition`` (``fd.define_tensor``, ``fd.ops.exp``, ``fd.add_output``).
`translate_region` walks a region's body and makes exactly those calls on whatever builder
it is given:

* with nvFuser installed (and a CUDA device), the builder *is* a ``FusionDefinition``;
* without it, a `RecordingDefinition` records the calls and renders them as the Python
  source of the definition that would be built, in the form nvFuser prints its own
  definitions (``T2 = fd.ops.add(T0, T1)``). That text is also the structural cache key, so
  a region is described the same way whether or not nvFuser is present.

The translation table `TRANSLATIONS` has one entry per fusible prim; `NOT_FUSIBLE` names
every other prim with the reason. A coverage test keeps ``PRIMS`` split between the two.
Per-op checks (`can_fuse`) reject what nvFuser's frontend does not express: strided
slices, interior or negative padding, reductions of half-precision or bool tensors, a
non-integer ``var`` correction, dtypes nvFuser has no ``DataType`` for, and any tensor not
on a CUDA device.

The executor is available only where ``import nvfuser`` works *and*
``torch.cuda.is_available()``; it joins the default executors only then. See
``docs/nvfuser.md`` for which nvFuser wheel matches which torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.symbols import check_static_region
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.lowering.executors import Executor, register_executor
from thunder_ir.passes.fuse import fuses_decomposed, prims_body

# --------------------------------------------------------------------------- dtypes

NV_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "Double",
    torch.float32: "Float",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.int64: "Int",
    torch.int32: "Int32",
    torch.bool: "Bool",
}
"""Tensor dtypes nvFuser fuses, by the name of their ``nvfuser.DataType`` member. Other
integer widths (int8, int16, uint8) have no member in every nvFuser release: not fused."""

NV_NUMBER_DTYPES: dict[type, str] = {float: "Double", int: "Int", bool: "Bool"}
"""Python numbers (``!prims.number<…>``) become nvFuser scalars of these types."""

_LOW_PRECISION = frozenset({torch.float16, torch.bfloat16})
_REDUCIBLE = frozenset({torch.float32, torch.float64, torch.int32, torch.int64})


class DataTypeName(str):
    """A recorded ``nvfuser.DataType`` member: prints as ``DataType.Float``."""

    def __repr__(self) -> str:
        return f"DataType.{self}"


class RecordedDataType:
    """Stands for ``nvfuser.DataType`` when recording: ``RecordedDataType.Float`` is the
    `DataTypeName` ``"Float"``."""

    def __getattr__(self, name: str) -> DataTypeName:
        return DataTypeName(name)


# --------------------------------------------------------------------------- recording


class RecordedValue:
    """A value of a recorded definition: a tensor (``T3``) or a scalar (``S4``)."""

    __slots__ = ("is_tensor", "name")

    def __init__(self, name: str, is_tensor: bool) -> None:
        self.name = name
        self.is_tensor = is_tensor

    def __repr__(self) -> str:
        return self.name


def _render(v: Any) -> str:
    """An argument as nvFuser's printed definitions write it."""
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    if isinstance(v, list | tuple):
        return f"[{', '.join(_render(x) for x in v)}]"
    return repr(v)


def _holds_tensor(v: Any) -> bool:
    if isinstance(v, RecordedValue):
        return v.is_tensor
    if isinstance(v, list | tuple):
        return any(_holds_tensor(x) for x in v)
    return False


_CREATES_TENSOR = frozenset({"full", "iota", "uniform", "normal"})


class _RecordingOps:
    """``fd.ops`` of a `RecordingDefinition`: every attribute is an op that records."""

    def __init__(self, definition: RecordingDefinition) -> None:
        self._definition = definition

    def __getattr__(self, name: str) -> Callable[..., RecordedValue]:
        if name.startswith("__"):
            raise AttributeError(name)
        definition = self._definition

        def op(*args: Any, **kwargs: Any) -> RecordedValue:
            is_tensor = name in _CREATES_TENSOR or _holds_tensor(args) or \
                _holds_tensor(list(kwargs.values()))
            return definition.record(f"fd.ops.{name}", args, kwargs, is_tensor)

        return op


class RecordingDefinition:
    """A definition builder that records nvFuser ``FusionDefinition`` calls as source.

    It offers the calls `translate_region` makes on a real ``FusionDefinition``
    (``define_tensor``, ``define_scalar``, ``ops.<op>``, ``add_output``). Values are named as
    nvFuser names them, one counter for all: ``T`` for tensors, ``S`` for scalars.
    `source` renders the definition as a Python function of ``fd``.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ops = _RecordingOps(self)
        self._count = 0

    def record(self, callee: str, args: Sequence[Any], kwargs: dict[str, Any],
               is_tensor: bool) -> RecordedValue:
        """Records ``<value> = <callee>(args, kwargs)`` and returns the new value."""
        value = RecordedValue(f"{'T' if is_tensor else 'S'}{self._count}", is_tensor)
        self._count += 1
        parts = [_render(a) for a in args] + [f"{k}={_render(v)}" for k, v in kwargs.items()]
        self.lines.append(f"{value.name} = {callee}({', '.join(parts)})")
        return value

    def define_tensor(self, shape: Sequence[int], contiguity: Sequence[bool | None],
                      dtype: Any, is_cpu: bool = False,
                      stride_order: Sequence[int] | None = None) -> RecordedValue:
        """An input tensor of the fusion."""
        return self.record("fd.define_tensor", (), {
            "shape": list(shape), "contiguity": list(contiguity), "dtype": dtype,
            "is_cpu": is_cpu, "stride_order": list(stride_order or [])}, True)

    def define_scalar(self, value: Any = None, dtype: Any = None) -> RecordedValue:
        """A scalar: an input of the fusion when ``value`` is None, else a constant."""
        return self.record("fd.define_scalar", (value,), {"dtype": dtype}, False)

    def add_output(self, value: RecordedValue) -> None:
        """Marks ``value`` as an output of the fusion."""
        self.lines.append(f"fd.add_output({value.name})")

    def source(self, name: str = "nvfuser_fusion") -> str:
        """The recorded definition as the source of ``def <name>(fd: FusionDefinition)``."""
        body = "".join(f"    {line}\n" for line in self.lines) or "    pass\n"
        return f"def {name}(fd: FusionDefinition) -> None:\n{body}"


# --------------------------------------------------------------------------- translation


class NotFusibleError(ValueError):
    """A region holds an op that nvFuser cannot run (see `NOT_FUSIBLE` and `can_fuse`)."""


class Translation:
    """What a translator works with: the builder ``fd`` and its ``DataType`` namespace."""

    def __init__(self, fd: Any, datatype: Any) -> None:
        self.fd = fd
        self.datatype = datatype

    def dtype(self, dtype: torch.dtype) -> Any:
        """The nvFuser ``DataType`` of a torch dtype."""
        try:
            return getattr(self.datatype, NV_DTYPES[dtype])
        except KeyError:
            raise NotFusibleError(f"nvFuser has no DataType for {dtype}") from None

    def scalar(self, value: Any, py: type | None = None) -> Any:
        """A constant scalar (``fd.define_scalar(value, dtype=...)``)."""
        py = type(value) if py is None else py
        return self.fd.define_scalar(py(value), dtype=getattr(self.datatype,
                                                             NV_NUMBER_DTYPES[py]))

    def scalar_like(self, value: Any, dtype: torch.dtype) -> Any:
        """A constant scalar of the kind of ``dtype`` (a float for a float tensor…)."""
        if dtype == torch.bool:
            return self.scalar(bool(value), bool)
        if dtype.is_floating_point:
            return self.scalar(float(value), float)
        return self.scalar(int(value), int)


Translator = Callable[..., Any]
TRANSLATIONS: dict[type[ThunderOp], Translator] = {}
"""Prim class -> ``translator(tr, op, *operand_groups, **params)`` returning the nvFuser
value of the op's result."""

CHECKS: dict[type[ThunderOp], Callable[[ThunderOp], bool]] = {}
"""Prim class -> extra fusibility check on one op (beyond dtypes and devices)."""

NOT_FUSIBLE: dict[type[ThunderOp], str] = {}
"""Prim class -> why nvFuser does not run it (it stays with another executor)."""


def translation(*ops: type[ThunderOp], check: Callable[[ThunderOp], bool] | None = None
                ) -> Callable[[Translator], Translator]:
    """Registers a translator (and an optional per-op check) for ``ops``."""

    def wrap(fn: Translator) -> Translator:
        for op in ops:
            if op in TRANSLATIONS:
                raise ValueError(f"{op.name} already has an nvFuser translation")
            TRANSLATIONS[op] = fn
            if check is not None:
                CHECKS[op] = check
        return fn

    return wrap


def not_fusible(reason: str, *ops: type[ThunderOp]) -> None:
    """Declares prims nvFuser does not run, with the reason."""
    for op in ops:
        NOT_FUSIBLE[op] = reason


def _leaves(base: type) -> list[type[ThunderOp]]:
    return [c for c in P.PRIMS if issubclass(c, base)]


# ---- elementwise: the prim's short name is nvFuser's op name


def _short(op: ThunderOp) -> str:
    return op.name.split(".", 1)[1]


@translation(*_leaves(P.UnaryOp))
def _unary(tr: Translation, op: ThunderOp, x: Any) -> Any:
    return getattr(tr.fd.ops, _short(op))(x)


def _binary_check(op: ThunderOp) -> bool:
    return any(isinstance(v.type, TensorType) for v in op.operands)


@translation(*_leaves(P.BinaryOp), check=_binary_check)
def _binary(tr: Translation, op: ThunderOp, a: Any, b: Any) -> Any:
    return getattr(tr.fd.ops, _short(op))(a, b)


def _where_check(op: ThunderOp) -> bool:
    # Two number branches: the prim picks the dtype from the kinds (float32 for floats),
    # nvFuser from the scalars (Double). Only tensor branches are fused.
    return any(isinstance(v.type, TensorType) for v in op.operands[1:])


@translation(P.WhereOp, check=_where_check)
def _where(tr: Translation, op: ThunderOp, pred: Any, a: Any, b: Any) -> Any:
    return tr.fd.ops.where(pred, a, b)


@translation(P.ConvertElementTypeOp)
def _convert(tr: Translation, op: ThunderOp, x: Any, *, dtype: torch.dtype) -> Any:
    return tr.fd.ops.cast(x, dtype=tr.dtype(dtype))


# ---- shape ops


@translation(P.BroadcastInDimOp)
def _broadcast_in_dim(tr: Translation, op: ThunderOp, x: Any, *, shape: Sequence[int],
                      broadcast_dims: Sequence[int]) -> Any:
    return tr.fd.ops.broadcast_in_dim(x, shape=list(shape), broadcast_dims=list(broadcast_dims))


@translation(P.ReshapeOp)
def _reshape(tr: Translation, op: ThunderOp, x: Any, *, shape: Sequence[int]) -> Any:
    return tr.fd.ops.reshape(x, new_shape=list(shape))


@translation(P.TransposeOp)
def _transpose(tr: Translation, op: ThunderOp, x: Any, *, permutation: Sequence[int]) -> Any:
    return tr.fd.ops.permute(x, dims=list(permutation))


@translation(P.SqueezeOp)
def _squeeze(tr: Translation, op: ThunderOp, x: Any, *, dims: Sequence[int]) -> Any:
    return tr.fd.ops.squeeze(x, dims=list(dims))


def _slice_check(op: ThunderOp) -> bool:
    strides = op.params()["strides"]
    return strides is None or all(s == 1 for s in strides)


@translation(P.SliceOp, check=_slice_check)
def _slice(tr: Translation, op: ThunderOp, x: Any, *, start_indices: Sequence[int],
           end_indices: Sequence[int], strides: Sequence[int] | None = None) -> Any:
    return tr.fd.ops.slice(x, start_indices=list(start_indices), end_indices=list(end_indices),
                           strides=list(strides or [1] * len(start_indices)))


def _pad_check(op: ThunderOp) -> bool:
    return all(lo >= 0 and hi >= 0 and mid == 0
               for lo, hi, mid in op.params()["padding_config"])


@translation(P.PadOp, check=_pad_check)
def _pad(tr: Translation, op: ThunderOp, x: Any, *, padding_value: Any,
         padding_config: Sequence[Sequence[int]]) -> Any:
    # nvFuser takes (low, high) pairs from the last dim to the first.
    widths = [w for lo, hi, _ in reversed(padding_config) for w in (lo, hi)]
    dtype = op.operands[0].type.dtype  # type: ignore[attr-defined]
    return tr.fd.ops.pad(x, widths, tr.scalar_like(padding_value, dtype))


@translation(P.CatOp)
def _cat(tr: Translation, op: ThunderOp, tensors: list[Any], *, dim: int) -> Any:
    return tr.fd.ops.cat(list(tensors), dim=dim)


# ---- reductions


def _reduction_check(op: ThunderOp) -> bool:
    # Half-precision sums accumulate in float32 once decomposed (an explicit cast first);
    # a bare half or bool reduction is left to torch, as the reference system does.
    return op.operands[0].type.dtype in _REDUCIBLE  # type: ignore[attr-defined]


_NV_REDUCTIONS: dict[type[ThunderOp], str] = {P.SumOp: "sum", P.ProdOp: "prod",
                                              P.AmaxOp: "max", P.AminOp: "min"}


@translation(*_NV_REDUCTIONS, check=_reduction_check)
def _reduce(tr: Translation, op: ThunderOp, x: Any, *, dims: Sequence[int]) -> Any:
    """``sum``, ``prod``, ``amax``, ``amin`` as nvFuser's ``sum``, ``prod``, ``max``, ``min``."""
    if not dims:  # a reduction over no dims is a copy; nvFuser's take a non-empty list
        return tr.fd.ops.set(x)
    dtype = op.operands[0].type.dtype  # type: ignore[attr-defined]
    # Integer sums keep the operand's dtype (prims accumulate in it); floats need none.
    nv_dtype = tr.dtype(dtype) if not dtype.is_floating_point else tr.datatype.Null
    return getattr(tr.fd.ops, _NV_REDUCTIONS[type(op)])(x, dims=list(dims), keepdim=False,
                                                        dtype=nv_dtype)


def _var_check(op: ThunderOp) -> bool:
    params = op.params()
    correction = params["correction"]
    correction = 1.0 if correction is None else correction
    x = op.operands[0].type
    return (_reduction_check(op) and bool(params["dims"]) and x.rank > 0  # type: ignore[attr-defined]
            and float(correction).is_integer())


@translation(P.VarOp, check=_var_check)
def _var(tr: Translation, op: ThunderOp, x: Any, *, dims: Sequence[int],
         correction: float | None = None) -> Any:
    c = 1 if correction is None else int(correction)
    return tr.fd.ops.var(x, dims=list(dims), correction=c, keepdim=False)


# ---- creation and constants


@translation(P.FullOp)
def _full(tr: Translation, op: ThunderOp, *, shape: Sequence[int], fill_value: Any,
          device: str, dtype: torch.dtype) -> Any:
    return tr.fd.ops.full(shape=list(shape), fill_value=tr.scalar_like(fill_value, dtype),
                          dtype=tr.dtype(dtype))


@translation(P.IotaOp)
def _iota(tr: Translation, op: ThunderOp, *, length: int, start: Any, step: Any, device: str,
          dtype: torch.dtype) -> Any:
    # As the reference: computed in float64 (int64 for all-int arguments), then converted.
    wide = float if dtype.is_floating_point or float in (type(start), type(step)) else int
    wide_dtype = torch.float64 if wide is float else torch.int64
    out = tr.fd.ops.iota(tr.scalar(length, int), tr.scalar(start, wide), tr.scalar(step, wide),
                         dtype=tr.dtype(wide_dtype))
    return out if dtype == wide_dtype else tr.fd.ops.cast(out, dtype=tr.dtype(dtype))


@translation(P.ConstantOp)
def _constant(tr: Translation, op: ThunderOp, *, value: Any) -> Any:
    return tr.scalar(value)


not_fusible("linear algebra stays with torch (cuBLAS); nvFuser's matmul support differs "
            "between releases", P.MatmulOp, P.LinearOp)
not_fusible("it draws from torch's default generator as eager's dropout does; nvFuser's "
            "Philox would draw other numbers", P.BernoulliOp, P.BernoulliLikeOp)
not_fusible("indexing ops are not translated (index_select/gather semantics differ in "
            "bounds and index dtypes); they run in torch",
            P.TakeOp, P.GatherOp, P.IndexAddOp, P.IndexCopyOp, P.ScatterAddOp)
not_fusible("nvFuser's Python frontend has no argmax/argmin reduction", P.ArgmaxOp,
            P.ArgminOp)
not_fusible("nvFuser's Python frontend has no flip", P.FlipOp)


# --------------------------------------------------------------------------- region walk


def contiguous_descriptor(shape: Sequence[int]) -> tuple[list[bool | None], list[int]]:
    """nvFuser's contiguity and stride order of a contiguous tensor of ``shape``.

    Size-1 dims have no contiguity (``None``); the stride order lists each dim's rank from
    the innermost (0), so a contiguous tensor has ``[rank-1, ..., 0]``.
    """
    n = len(shape)
    return [None if s == 1 else True for s in shape], list(range(n - 1, -1, -1))


def translate_region(region: RegionOp, fd: Any, datatype: Any,
                     descriptors: Sequence[Any] | None = None) -> list[int]:
    """Emits the definition of ``region`` on the builder ``fd``.

    Args:
        region: a ``fusion.region`` whose body holds translatable prims and ltorch ops
            that decompose into them (`thunder_ir.passes.fuse.prims_body`).
        fd: a ``FusionDefinition`` (inside its ``with``) or a `RecordingDefinition`.
        datatype: ``nvfuser.DataType``, or a `RecordedDataType` when recording.
        descriptors: per region input, ``(contiguity, stride_order)`` of a tensor (None:
            contiguous); ignored for numbers.

    Returns:
        For each yielded value, the index of the fusion output that carries it (a value
        yielded twice is one output).

    Raises:
        NotFusibleError: an op has no translation, fails its check, or a yielded value is a
            number (nvFuser fusions return tensors).
    """
    return translate_body(prims_body(region), region.kernel.data, fd, datatype, descriptors)


def translate_body(block: Block, name: str, fd: Any, datatype: Any,
                   descriptors: Sequence[Any] | None = None) -> list[int]:
    """`translate_region` on a region's body block (``name`` is used in errors)."""
    tr = Translation(fd, datatype)
    env: dict[SSAValue, Any] = {}
    for i, arg in enumerate(block.args):
        t = arg.type
        if isinstance(t, TensorType):
            desc = descriptors[i] if descriptors is not None and descriptors[i] is not None \
                else contiguous_descriptor(t.sizes)
            env[arg] = fd.define_tensor(shape=list(t.sizes), contiguity=list(desc[0]),
                                        dtype=tr.dtype(t.dtype), is_cpu=t.dev == "cpu",
                                        stride_order=list(desc[1]))
        elif isinstance(t, NumberType):
            env[arg] = fd.define_scalar(None, dtype=getattr(datatype,
                                                            NV_NUMBER_DTYPES[t.python_type]))
        else:
            raise NotFusibleError(f"{name}: input of type {t} cannot enter an nvFuser fusion")
    out_index: list[int] = []
    for op in block.ops:
        if isinstance(op, YieldOp):
            seen: dict[SSAValue, int] = {}
            for v in op.values:
                if v not in seen:
                    if not isinstance(v.type, TensorType):
                        raise NotFusibleError(f"{name}: yields a number; nvFuser fusions "
                                              "return tensors")
                    handle = env[v]
                    if v in block.args:  # an input passed through: nvFuser outputs a copy
                        handle = fd.ops.set(handle)
                    fd.add_output(handle)
                    seen[v] = len(seen)
                out_index.append(seen[v])
            break
        if not isinstance(op, ThunderOp) or type(op) not in TRANSLATIONS:
            raise NotFusibleError(f"{name}: {op.name} has no nvFuser translation{_why_not(op)}")
        check = CHECKS.get(type(op))
        if check is not None and not check(op):
            raise NotFusibleError(f"{name}: nvFuser cannot run this {op.name} (see "
                                  "thunder_ir.lowering.nvfuser_executor)")
        groups = [[env[v] for v in g] if isinstance(g, list) else
                  (None if g is None else env[g]) for g in op.grouped_operands()]
        params = {k: v for k, v in op.params().items() if v is not None}
        env[op.results[0]] = TRANSLATIONS[type(op)](tr, op, *groups, **params)
    return out_index


def _why_not(op: Operation) -> str:
    reason = NOT_FUSIBLE.get(type(op))  # type: ignore[arg-type]
    return f" ({reason})" if reason else ""


def record_region(region: RegionOp) -> tuple[str, list[int]]:
    """The definition `translate_region` would build for contiguous inputs, as Python
    source (a function named after the region's kernel), and the output index map."""
    rec = RecordingDefinition()
    out_index = translate_region(region, rec, RecordedDataType())
    return rec.source(region.kernel.data), out_index


def definition_source(region: RegionOp) -> str:
    """The nvFuser definition of ``region`` as Python source (no nvFuser needed)."""
    return record_region(region)[0]


# --------------------------------------------------------------------------- the executor


@functools.cache
def _nvfuser_importable() -> bool:
    """Whether ``import nvfuser`` works (asked once: `is_available` runs on every jit)."""
    try:
        import nvfuser  # noqa: F401
    except Exception:  # an nvFuser built for another torch fails with more than ImportError
        return False
    return True


def _nvfuser_version() -> str:
    try:
        import nvfuser

        return str(nvfuser.version())
    except Exception:  # not installed, or built for another torch
        return "unavailable"


class NvFuserKernel:
    """The callable that runs one region: ``kernel(*inputs)`` returns the region's one
    output itself, or a tuple of several (the code generator's kernel convention).

    It holds one FusionDefinition per input layout: the contiguous one is built up front;
    non-contiguous inputs get their own, keyed by nvFuser's (contiguity, stride order)
    descriptors, or are made contiguous where this nvFuser cannot describe them.
    """

    def __init__(self, region: RegionOp, source: str, out_index: list[int]) -> None:
        self.name = region.kernel.data
        self.source = source
        # A copy of the body only: the region op itself uses values of the program.
        self._body = region.body.clone()
        self._out_index = out_index
        self._single = len(out_index) == 1
        self._identity = out_index == list(range(len(out_index)))
        self._tensor_positions = [i for i, v in enumerate(region.inputs)
                                  if isinstance(v.type, TensorType)]
        devices = [r.type.dev for r in region.outs if isinstance(r.type, TensorType)]
        self._device = (int(devices[0].split(":")[1])
                        if not self._tensor_positions and devices and ":" in devices[0]
                        else None)
        self._by_layout: dict[Any, Any] = {}
        self._contiguous = self.build(None)

    def build(self, descriptors: Sequence[Any] | None) -> Any:
        """Builds the FusionDefinition for the given input descriptors (None: contiguous)."""
        from nvfuser import DataType, FusionDefinition

        fd = FusionDefinition()
        with fd:
            translate_body(self._body.block, self.name, fd, DataType, descriptors)
        return fd

    def _definition_for(self, inputs: Sequence[Any]) -> tuple[Any, list[Any]]:
        try:
            from nvfuser import compute_tensor_descriptor
        except ImportError:
            args = [a.contiguous() if i in self._tensor_positions else a
                    for i, a in enumerate(inputs)]
            return self._contiguous, args
        descs: list[Any] = [None] * len(inputs)
        for i in self._tensor_positions:
            t = inputs[i]
            descs[i] = tuple(tuple(x) for x in compute_tensor_descriptor(t.shape, t.stride()))
        key = tuple(descs)
        fd = self._by_layout.get(key)
        if fd is None:
            fd = self._by_layout[key] = self.build(descs)
        return fd, list(inputs)

    def __call__(self, *inputs: Any) -> Any:
        if all(inputs[i].is_contiguous() for i in self._tensor_positions):
            fd, args = self._contiguous, list(inputs)
        else:
            fd, args = self._definition_for(inputs)
        if self._device is None:
            outs = fd.execute(args)
        else:  # no tensor inputs (full, iota): nvFuser needs to be told the device
            outs = fd.execute(args, device=self._device)
        if self._single:
            return outs[0]
        return tuple(outs) if self._identity else tuple(outs[i] for i in self._out_index)

    def __repr__(self) -> str:
        return f"NvFuserKernel({self.name})"


class NvFuserExecutor(Executor):
    """Fuses prims into nvFuser FusionDefinitions (CUDA only).

    ``compile_region`` caches kernels by the region's recorded definition, so two regions
    of the same structure (a repeated transformer block) share one FusionDefinition.
    """

    name = "nvfuser"
    kernel_prefix = "nvFusion"

    def __init__(self) -> None:
        self._kernels: dict[str, NvFuserKernel] = {}
        self._ltorch_ok: dict[tuple[Any, ...], bool] = {}
        self.version = _nvfuser_version()

    def is_available(self) -> bool:
        """True when nvFuser imports and a CUDA device is present."""
        return _nvfuser_importable() and torch.cuda.is_available()

    @property
    def is_fusion(self) -> bool:
        return True

    def can_fuse(self, op: Operation) -> bool:
        """True for a translatable prim on CUDA tensors of dtypes nvFuser has, passing its
        op's check (see the module doc), and for a side-effect-free ltorch op (one the torch
        executor claimed) whose decomposition holds only such prims: the region translates
        its decomposition."""
        if isinstance(op, LtorchOp):
            return fuses_decomposed(op, self._prim_ok, self._ltorch_ok)
        return self._prim_ok(op)

    def _prim_ok(self, op: Operation) -> bool:
        cls = type(op)
        if cls not in TRANSLATIONS:
            return False
        for v in (*op.operands, *op.results):
            t = v.type
            if isinstance(t, TensorType):
                if t.dtype not in NV_DTYPES or not t.dev.startswith("cuda"):
                    return False
            elif not isinstance(t, NumberType):
                return False
        creation = getattr(op, "device", None)
        if creation is not None and not str(creation.data).startswith("cuda"):  # type: ignore[attr-defined]
            return False
        check = CHECKS.get(cls)  # type: ignore[arg-type]
        return check is None or check(op)  # type: ignore[arg-type]

    def compile_region(self, region: Operation) -> Callable[..., Any]:
        """A kernel running ``region`` with nvFuser: ``fd.execute(list(inputs))``, returning
        the one output itself or a tuple of several.

        Raises:
            RuntimeError: nvFuser or CUDA is missing (the message shows the definition
                that would have been built).
        """
        assert isinstance(region, RegionOp)
        check_static_region(region, self.name)
        source, out_index = record_region(region)
        if not self.is_available():
            raise RuntimeError(
                f"nvFuser executor: cannot compile {region.kernel.data}: nvFuser is not "
                "importable or no CUDA device is present (see docs/nvfuser.md). The "
                f"definition it would build:\n{source}")
        key = source.split("\n", 1)[1]  # the body: regions differing only in name share
        kernel = self._kernels.get(key)
        if kernel is None or kernel._out_index != out_index:
            kernel = NvFuserKernel(region, source, out_index)
            self._kernels[key] = kernel
        return kernel


_EXECUTOR = NvFuserExecutor()
register_executor(_EXECUTOR, default=_EXECUTOR.is_available())

__all__ = [
    "CHECKS",
    "NOT_FUSIBLE",
    "NV_DTYPES",
    "TRANSLATIONS",
    "DataTypeName",
    "NotFusibleError",
    "NvFuserExecutor",
    "NvFuserKernel",
    "RecordedDataType",
    "RecordingDefinition",
    "contiguous_descriptor",
    "definition_source",
    "record_region",
    "translate_body",
    "translate_region",
]
