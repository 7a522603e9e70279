"""Types shared by every thunder_ir dialect: tensors and scalar numbers.

A tensor type carries its shape, dtype and device::

    !prims.tensor<8x784xf32, cpu>      # MLIR text
    "cpu f32[8, 784]"                  # in Python traces, as the reference system prints it

The dtype is an MLIR builtin element type (``f32``, ``bf16``, ``i64``, ``ui8``, ``i1`` for
bool), so the text reads like MLIR's own ``tensor<8x784xf32>``. A scalar number (a Python
``int``/``float``/``bool`` that flows through a program) is ``!prims.number<f64>``. An
opaque runtime object that a program hands from its forward to its backward (the autograd
graph of an opaque torch call) is ``!prims.handle``.

Building a ``TensorType`` costs about 20 µs and equal types are not interned by xDSL, so
``tensor_type`` caches them by ``(shape, dtype, device)``. Per-type facts that passes read
on hot paths (the shape as a tuple, the torch dtype) are cached the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    ComplexType,
    Float8E4M3FNType,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float8E5M2Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntAttr,
    IntegerType,
    Signedness,
    StringAttr,
)
from xdsl.ir import Attribute, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from thunder_ir.dialects.symbols import SymExprAttr, hint, sym_text, sym_value

# --------------------------------------------------------------------------- dtypes


class DTypeInfo(NamedTuple):
    """One supported dtype: its element type, its torch dtype and its short name."""

    element_type: Attribute
    torch_dtype: torch.dtype
    short: str  # as traces print it: "f32", "bf16", "i64", "b8"


_DTYPES: tuple[DTypeInfo, ...] = (
    DTypeInfo(IntegerType(1), torch.bool, "b8"),
    DTypeInfo(IntegerType(8, Signedness.UNSIGNED), torch.uint8, "ui8"),
    DTypeInfo(IntegerType(8), torch.int8, "i8"),
    DTypeInfo(IntegerType(16), torch.int16, "i16"),
    DTypeInfo(IntegerType(32), torch.int32, "i32"),
    DTypeInfo(IntegerType(64), torch.int64, "i64"),
    DTypeInfo(Float16Type(), torch.float16, "f16"),
    DTypeInfo(BFloat16Type(), torch.bfloat16, "bf16"),
    DTypeInfo(Float32Type(), torch.float32, "f32"),
    DTypeInfo(Float64Type(), torch.float64, "f64"),
    DTypeInfo(ComplexType(Float16Type()), torch.complex32, "c32"),
    DTypeInfo(ComplexType(Float32Type()), torch.complex64, "c64"),
    DTypeInfo(ComplexType(Float64Type()), torch.complex128, "c128"),
    DTypeInfo(IntegerType(16, Signedness.UNSIGNED), torch.uint16, "ui16"),
    DTypeInfo(IntegerType(32, Signedness.UNSIGNED), torch.uint32, "ui32"),
    DTypeInfo(IntegerType(64, Signedness.UNSIGNED), torch.uint64, "ui64"),
    DTypeInfo(Float8E4M3FNType(), torch.float8_e4m3fn, "f8e4m3fn"),
    DTypeInfo(Float8E5M2Type(), torch.float8_e5m2, "f8e5m2"),
    DTypeInfo(Float8E4M3FNUZType(), torch.float8_e4m3fnuz, "f8e4m3fnuz"),
    DTypeInfo(Float8E5M2FNUZType(), torch.float8_e5m2fnuz, "f8e5m2fnuz"),
)
_COMPUTED = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                       torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64})
DTYPE_BY_TORCH: dict[torch.dtype, DTypeInfo] = {d.torch_dtype: d for d in _DTYPES}
DTYPE_BY_ELEMENT: dict[Attribute, DTypeInfo] = {d.element_type: d for d in _DTYPES}
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = tuple(
    d.torch_dtype for d in _DTYPES if d.torch_dtype in _COMPUTED)
"""The dtypes prims compute in. Complex, float8 and wide unsigned tensors flow through
programs too (opaque torch calls produce and take them), but no prim computes on them."""
FLOAT_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
INT_DTYPES = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
COMPLEX_DTYPES = frozenset({torch.complex32, torch.complex64, torch.complex128})


def is_float(dtype: torch.dtype) -> bool:
    """True for the floating-point dtypes."""
    return dtype in FLOAT_DTYPES


def is_complex(dtype: torch.dtype) -> bool:
    """True for the complex dtypes."""
    return dtype in COMPLEX_DTYPES


def is_int(dtype: torch.dtype) -> bool:
    """True for the integer dtypes (not bool)."""
    return dtype in INT_DTYPES


def dtype_info(dtype: torch.dtype) -> DTypeInfo:
    """The `DTypeInfo` of a torch dtype; a clear error for an unsupported one."""
    try:
        return DTYPE_BY_TORCH[dtype]
    except KeyError:
        names = ", ".join(str(d.torch_dtype).removeprefix("torch.") for d in _DTYPES)
        raise TypeError(f"thunder_ir does not support dtype {dtype}; supported: {names}") from None


# --------------------------------------------------------------------------- devices


def canonical_device(device: str | torch.device) -> str:
    """Normalizes a device to ``cpu``, ``meta`` or ``cuda:N``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}"
    if dev.type in ("cpu", "meta"):
        return dev.type
    raise TypeError(f"thunder_ir does not support device {device!r}; use cpu, cuda:N or meta")


# --------------------------------------------------------------------------- attributes


@irdl_attr_definition
class TensorType(ParametrizedAttribute, TypeAttribute):
    """A tensor with static shape, a dtype and a device: ``!prims.tensor<8x784xf32, cpu>``."""

    name = "prims.tensor"

    shape: ArrayAttr[IntAttr | SymExprAttr]
    element_type: Attribute
    device: StringAttr

    def print_parameters(self, printer: Printer) -> None:
        dims = "".join(f"{d.data}x" if isinstance(d, IntAttr) else f"[{d.text}]x"
                       for d in self.shape.data)
        printer.print_string(f"<{dims}")
        printer.print_attribute(self.element_type)
        printer.print_string(f", {self.device.data}>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            dims, element_type = parser.parse_ranked_shape()
            parser.parse_punctuation(",")
            device = parser.parse_identifier("device (cpu, meta or cuda:N)")
            if parser.parse_optional_punctuation(":") is not None:
                device = f"{device}:{parser.parse_integer(allow_negative=False)}"
        return (ArrayAttr([IntAttr(d) for d in dims]), element_type, StringAttr(device))

    def verify(self) -> None:
        if self.element_type not in DTYPE_BY_ELEMENT:
            raise VerifyException(f"unsupported tensor element type {self.element_type}")
        if any(isinstance(d, IntAttr) and d.data < 0 for d in self.shape.data):
            raise VerifyException(f"negative dimension in tensor shape {self.sizes}")
        dev = self.device.data
        if not (dev in ("cpu", "meta") or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise VerifyException(f"unsupported device {dev!r}; use cpu, meta or cuda:N")

    def __hash__(self) -> int:
        # Kept on the (immutable) instance: types key the shape-rule, eager-saves and
        # lowering caches, and hashing the parameters anew took 0.5 us each time.
        try:
            return self.__dict__["_hash"]  # type: ignore[no-any-return]
        except KeyError:
            h = self.__dict__["_hash"] = hash((self.shape, self.element_type, self.device))
            return h

    @property
    def sizes(self) -> tuple[int, ...]:
        """The shape as a tuple of ints; a symbolic size is a ``SymInt`` of the current
        compilation (`thunder_ir.dialects.symbols`), or its text outside one."""
        try:
            return self.__dict__["_sizes"]  # type: ignore[no-any-return]
        except KeyError:
            if self.symbolic:
                return tuple(d.data if isinstance(d, IntAttr) else sym_value(d.text)
                             for d in self.shape.data)
            return self._cache_info()[0]

    @property
    def symbolic(self) -> bool:
        """True if a size is symbolic."""
        try:
            return self.__dict__["_symbolic"]  # type: ignore[no-any-return]
        except KeyError:
            sym = self.__dict__["_symbolic"] = any(
                isinstance(d, SymExprAttr) for d in self.shape.data)
            return sym

    @property
    def dims_text(self) -> tuple[int | str, ...]:
        """The sizes as ints and symbolic expression text (no compilation needed)."""
        return tuple(d.data if isinstance(d, IntAttr) else d.text for d in self.shape.data)

    @property
    def dtype(self) -> torch.dtype:
        """The torch dtype."""
        try:
            return self.__dict__["_dtype"]  # type: ignore[no-any-return]
        except KeyError:
            return self._cache_info()[1]

    def _cache_info(self) -> tuple[tuple[int, ...], torch.dtype]:
        # Stored on the (immutable) instance: a side-table lookup hashes the whole type.
        if self.symbolic:  # sizes depend on the compilation: only the dtype is stored
            dtype = self.__dict__["_dtype"] = DTYPE_BY_ELEMENT[self.element_type].torch_dtype
            return self.sizes, dtype
        info = _INFO[self]
        self.__dict__["_sizes"], self.__dict__["_dtype"] = info
        return info

    @property
    def dev(self) -> str:
        """The device as a string: ``cpu``, ``meta`` or ``cuda:N``."""
        return self.device.data

    @property
    def rank(self) -> int:
        return len(self.shape.data)

    def numel(self) -> int:
        n = 1
        for d in self.sizes:
            n *= d
        return n

    def nbytes(self) -> int:
        """Bytes of a contiguous tensor of this type (shape x itemsize); a symbolic size
        counts as its value in the traced call (`thunder_ir.dialects.symbols.hint`), so
        that cost models record no guards."""
        if self.symbolic:
            n = 1
            for d in self.sizes:
                n *= hint(d)
            return n * self.dtype.itemsize
        return self.numel() * self.dtype.itemsize

    def pretty(self) -> str:
        """As Python traces print it: ``cpu f32[8, 784]`` (``cpu f32[s0, 784]``)."""
        try:
            return self.__dict__["_pretty"]  # type: ignore[no-any-return]
        except KeyError:
            text = self.__dict__["_pretty"] = (
                f"{self.dev} {DTYPE_BY_TORCH[self.dtype].short}"
                f"[{', '.join(map(str, self.dims_text))}]")
            return text


@irdl_attr_definition
class NumberType(ParametrizedAttribute, TypeAttribute):
    """A Python number flowing through a program: ``!prims.number<f64>`` (a float),
    ``!prims.number<i64>`` (an int) or ``!prims.number<i1>`` (a bool)."""

    name = "prims.number"

    element_type: Attribute

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_attribute(self.element_type)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (parser.parse_type(),)

    def verify(self) -> None:
        if self.element_type not in (IntegerType(1), IntegerType(64), Float64Type()):
            raise VerifyException("a number is i1 (bool), i64 (int) or f64 (float)")

    @property
    def python_type(self) -> type:
        """``bool``, ``int`` or ``float``."""
        return _NUMBER_PY[self.element_type]

    def pretty(self) -> str:
        return self.python_type.__name__


@irdl_attr_definition
class HandleType(ParametrizedAttribute, TypeAttribute):
    """An opaque runtime object passed from a forward program to its backward:
    ``!prims.handle`` (the autograd graph that an opaque torch call recorded)."""

    name = "prims.handle"

    def pretty(self) -> str:
        return "handle"


HANDLE = HandleType()


# Side tables keyed by the (hashable, immutable) attribute: computed once per distinct type.
class _InfoTable(dict[TensorType, tuple[tuple[int, ...], torch.dtype]]):
    def __missing__(self, t: TensorType) -> tuple[tuple[int, ...], torch.dtype]:
        info = (tuple(d.data for d in t.shape.data), DTYPE_BY_ELEMENT[t.element_type].torch_dtype)
        self[t] = info
        return info


_INFO = _InfoTable()
_TENSOR_TYPES: dict[tuple[tuple[int, ...], torch.dtype, str], TensorType] = {}
_NUMBER_PY: dict[Attribute, type] = {
    IntegerType(1): bool,
    IntegerType(64): int,
    Float64Type(): float,
}
NUMBER_TYPES: dict[type, NumberType] = {
    bool: NumberType(IntegerType(1)),
    int: NumberType(IntegerType(64)),
    float: NumberType(Float64Type()),
}


def broadcast(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """NumPy-style broadcast of static shapes (as ``torch.broadcast_shapes``, whose Python
    check imports torch's symbolic shapes); None where they do not broadcast."""
    out = [1] * max((len(s) for s in shapes), default=0)
    for s in shapes:
        for i, d in enumerate(s, len(out) - len(s)):
            if type(d) is not int and ((type(out[i]) is int and out[i] == 1)
                                       or _same_unbacked(out[i], d)):
                out[i] = d  # (d, whether or not it is 1; a data-dependent size, ``u0``,
                continue    # is compared with no number: it has no value while tracing)
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    return None
                out[i] = d
    return tuple(out)


def _same_unbacked(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one size over unbacked symbols (``u0``, which a
    comparison with 1 cannot be made on while tracing: it has no value)."""
    from thunder_ir.dialects.symbols import unbacked

    if not unbacked(b):
        return False
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def tensor_type(shape: Sequence[int], dtype: torch.dtype, device: str = "cpu") -> TensorType:
    """The (cached) tensor type of this shape, torch dtype and device (a size may be a
    ``SymInt`` of the current compilation: `thunder_ir.dialects.symbols`)."""
    key = (tuple(shape), dtype, device)
    try:
        t = _TENSOR_TYPES.get(key)
    except TypeError:  # a SymInt (unhashable): by its text
        return _symbolic_tensor_type(key[0], dtype, device)
    if t is None:
        shape_t = key[0]
        if any(not isinstance(d, int) or d < 0 for d in shape_t):
            raise ValueError(f"tensor shape must be non-negative ints, got {shape_t}")
        t = TensorType(
            ArrayAttr([IntAttr(d) for d in shape_t]),
            dtype_info(dtype).element_type,
            StringAttr(device),
        )
        _TENSOR_TYPES[key] = t
        _INFO[t] = (shape_t, dtype)
    return t


def _symbolic_tensor_type(shape: tuple[Any, ...], dtype: torch.dtype, device: str
                          ) -> TensorType:
    dims = tuple(d if type(d) is int else sym_text(d) for d in shape)
    if all(type(d) is int for d in dims):
        return tensor_type(dims, dtype, device)  # type: ignore[arg-type]
    key = (dims, dtype, device)
    t = _TENSOR_TYPES.get(key)
    if t is None:
        if any(type(d) is int and d < 0 for d in dims):
            raise ValueError(f"tensor shape must be non-negative, got {dims}")
        t = TensorType(
            ArrayAttr([IntAttr(d) if type(d) is int else SymExprAttr(StringAttr(str(d)))
                       for d in dims]),
            dtype_info(dtype).element_type,
            StringAttr(device),
        )
        _TENSOR_TYPES[key] = t  # type: ignore[index]
    return t


def number_type(py_type: type) -> NumberType:
    """The number type of a Python scalar type (bool, int or float)."""
    return NUMBER_TYPES[py_type]


def type_of_tensor(t: torch.Tensor) -> TensorType:
    """The tensor type describing a concrete torch tensor."""
    return tensor_type(t.shape, t.dtype, canonical_device(t.device))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype that statistics and backward math of ``dtype`` values run in: float32
    for float16 and bfloat16 (as eager's kernels accumulate), else ``dtype`` itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def ttype(v: SSAValue) -> TensorType:
    """The type of ``v``, a value known to be a tensor."""
    t = v.type
    assert isinstance(t, TensorType), f"expected a tensor value, got {t}"
    return t


def number_type_of(v: SSAValue) -> NumberType:
    """The type of ``v``, a value known to be a number."""
    t = v.type
    assert isinstance(t, NumberType), f"expected a number value, got {t}"
    return t


def pretty_type(t: Attribute) -> str:
    """How a type prints in a Python trace comment."""
    if isinstance(t, TensorType | NumberType | HandleType):
        return t.pretty()
    pretty = getattr(t, "pretty", None)  # another dialect's type (``dist.pending``)
    return pretty() if callable(pretty) else str(t)
