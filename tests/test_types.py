"""Tensor and number types, and static arguments: printing, parsing, pretty names, caching,
verification, and the Python value <-> attribute conversion."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import ArrayAttr, Float32Type, IntAttr, IntegerType, StringAttr
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from thunder_ir.dialects.base import OperandRef, from_attr, to_attr
from thunder_ir.dialects.program import context
from thunder_ir.dialects.types import (
    SUPPORTED_DTYPES,
    NumberType,
    TensorType,
    canonical_device,
    dtype_info,
    number_type,
    pretty_type,
    tensor_type,
    type_of_tensor,
)

DEVICES = ["cpu", "cuda:0", "cuda:3", "meta"]
SHAPES = [(), (0,), (8, 784), (2, 0, 3), (1, 1, 1, 1)]
SHORT = {
    torch.bool: ("b8", "i1"),
    torch.uint8: ("ui8", "ui8"),
    torch.int8: ("i8", "i8"),
    torch.int16: ("i16", "i16"),
    torch.int32: ("i32", "i32"),
    torch.int64: ("i64", "i64"),
    torch.float16: ("f16", "f16"),
    torch.bfloat16: ("bf16", "bf16"),
    torch.float32: ("f32", "f32"),
    torch.float64: ("f64", "f64"),
}


def _parse_type(text: str) -> Any:
    return Parser(context(), text).parse_type()


def _parse_attr(text: str) -> Any:
    return Parser(context(), text).parse_attribute()


def test_every_supported_dtype_is_listed() -> None:
    assert set(SUPPORTED_DTYPES) == set(SHORT)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_tensor_type_print_parse_print(dtype: torch.dtype, device: str,
                                       shape: tuple[int, ...]) -> None:
    t = tensor_type(shape, dtype, device)
    text = str(t)
    dims = "".join(f"{d}x" for d in shape)
    assert text == f"!prims.tensor<{dims}{SHORT[dtype][1]}, {device}>"
    parsed = _parse_type(text)
    assert parsed == t
    assert str(parsed) == text
    assert (parsed.sizes, parsed.dtype, parsed.dev) == (shape, dtype, device)
    assert parsed.rank == len(shape)
    assert parsed.numel() == math.prod(shape)
    assert parsed.nbytes() == math.prod(shape) * dtype.itemsize
    parsed.verify()


@pytest.mark.parametrize("py", [bool, int, float])
def test_number_type_print_parse_print(py: type) -> None:
    n = number_type(py)
    text = str(n)
    assert text == {bool: "!prims.number<i1>", int: "!prims.number<i64>",
                    float: "!prims.number<f64>"}[py]
    parsed = _parse_type(text)
    assert parsed == n and str(parsed) == text
    assert parsed.python_type is py
    assert parsed.pretty() == py.__name__ == pretty_type(parsed)


@pytest.mark.parametrize(("shape", "dtype", "device", "want"), [
    ((8, 784), torch.float32, "cpu", "cpu f32[8, 784]"),
    ((2, 3), torch.bfloat16, "cuda:0", "cuda:0 bf16[2, 3]"),
    ((), torch.bool, "cpu", "cpu b8[]"),
    ((0,), torch.int64, "meta", "meta i64[0]"),
    ((4,), torch.uint8, "cuda:3", "cuda:3 ui8[4]"),
    ((1, 2, 3), torch.float16, "cpu", "cpu f16[1, 2, 3]"),
])
def test_pretty(shape: tuple[int, ...], dtype: torch.dtype, device: str, want: str) -> None:
    t = tensor_type(shape, dtype, device)
    assert t.pretty() == want
    assert pretty_type(t) == want


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_pretty_short_names(dtype: torch.dtype) -> None:
    assert tensor_type((1,), dtype).pretty() == f"cpu {SHORT[dtype][0]}[1]"
    assert dtype_info(dtype).short == SHORT[dtype][0]


def test_tensor_type_is_cached() -> None:
    a = tensor_type((2, 3), torch.float32, "cpu")
    assert tensor_type((2, 3), torch.float32, "cpu") is a
    assert tensor_type([2, 3], torch.float32, "cpu") is a
    assert tensor_type(torch.Size([2, 3]), torch.float32) is a
    assert type_of_tensor(torch.zeros(2, 3)) is a
    assert tensor_type((2, 3), torch.float64, "cpu") is not a
    assert tensor_type((2, 3), torch.float32, "meta") is not a
    assert tensor_type((3, 2), torch.float32, "cpu") is not a
    assert number_type(float) is number_type(float)
    # A structurally equal type built another way is equal (and reads the same facts).
    built = TensorType(ArrayAttr([IntAttr(2), IntAttr(3)]), Float32Type(), StringAttr("cpu"))
    assert built == a and hash(built) == hash(a)
    assert (built.sizes, built.dtype, built.dev) == ((2, 3), torch.float32, "cpu")


def test_type_of_tensor() -> None:
    t = type_of_tensor(torch.zeros(0, 5, dtype=torch.int16, device="meta"))
    assert (t.sizes, t.dtype, t.dev) == ((0, 5), torch.int16, "meta")
    assert type_of_tensor(torch.tensor(True)).pretty() == "cpu b8[]"


def test_canonical_device() -> None:
    assert canonical_device("cpu") == "cpu"
    assert canonical_device(torch.device("meta")) == "meta"
    assert canonical_device("cuda:2") == "cuda:2"
    with pytest.raises(TypeError, match="does not support device"):
        canonical_device("mps")


@pytest.mark.parametrize(("text", "message"), [
    ("!prims.tensor<2xi7, cpu>", "unsupported tensor element type i7"),
    ("!prims.tensor<2xcomplex<i32>, cpu>", "unsupported tensor element type"),
    ("!prims.tensor<2xsi32, cpu>", "unsupported tensor element type si32"),
    ("!prims.tensor<2xf32, gpu>", "unsupported device 'gpu'"),
    ("!prims.tensor<2xf32, cuda>", "unsupported device 'cuda'"),
    ("!prims.tensor<?x2xf32, cpu>", "negative dimension"),
    ("!prims.number<f32>", "a number is i1 (bool), i64 (int) or f64 (float)"),
    ("!prims.number<i32>", "a number is i1 (bool), i64 (int) or f64 (float)"),
])
def test_bad_types_are_rejected(text: str, message: str) -> None:
    with pytest.raises((VerifyException, ParseError), match=message.replace("(", r"\(")
                       .replace(")", r"\)")):
        _parse_type(text)


def test_bad_types_built_directly_are_rejected() -> None:
    with pytest.raises(VerifyException, match="unsupported tensor element type i7"):
        TensorType(ArrayAttr([IntAttr(2)]), IntegerType(7), StringAttr("cpu"))
    with pytest.raises(VerifyException, match="unsupported device 'tpu:0'"):
        TensorType(ArrayAttr([IntAttr(2)]), Float32Type(), StringAttr("tpu:0"))
    with pytest.raises(VerifyException, match="unsupported device 'cuda:x'"):
        TensorType(ArrayAttr([IntAttr(2)]), Float32Type(), StringAttr("cuda:x"))
    with pytest.raises(VerifyException, match="negative dimension"):
        TensorType(ArrayAttr([IntAttr(-1)]), Float32Type(), StringAttr("cpu"))
    with pytest.raises(VerifyException, match="a number is"):
        NumberType(Float32Type())
    with pytest.raises(ValueError, match="non-negative ints"):
        tensor_type((2, -1), torch.float32)
    with pytest.raises(TypeError, match=r"does not support dtype torch\.qint8"):
        tensor_type((2,), torch.qint8)


# --------------------------------------------------------------------------- static arguments


def _same(a: Any, b: Any) -> bool:
    """Equality that also tells -0.0 from 0.0, treats nan as equal and compares types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                      math.copysign(1, b))
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


# `none` inside an array prints as `none`, which xDSL parses back as the builtin NoneType
# *type*; base.from_attr reads that back as None.
NONE_IN_TEXT: tuple[Any, ...] = ()

STATIC_ARGS: list[Any] = [
    True, False, 0, 5, -7, 2**62, -(2**63), 0.5, -2.25, 0.0, -0.0, math.inf, -math.inf, math.nan,
    1e-300, 1.0000000000000002, "mean", "", 'quo"te', "back\\slash", "new\nline",
    *SUPPORTED_DTYPES,
    (), (1,), (0, 1, -1), (2**40, -3),
    ((1, 2), (3,)), ((0, 0, 1), (-1, 2, 0)), (((1,),),),
    *(pytest.param(v, marks=NONE_IN_TEXT) for v in
      [(1, None, 3), (None,), (None, (None, 1)), (slice(1, None, None), ..., None)]),
    (1, True), (1.5, 2), ("a", torch.float16),
    slice(0, 4, 2), slice(None, None, None), slice(-3, None, None), slice(None, 5, -1),
    ..., (slice(1, None, None), ...), (..., 0),
    OperandRef(0), OperandRef(3), (OperandRef(0), OperandRef(1)), (OperandRef(2), 1.5, "x"),
]


@pytest.mark.parametrize("value", STATIC_ARGS, ids=repr)
def test_static_argument_round_trip(value: Any) -> None:
    """Python value -> attribute -> Python value, and attribute -> text -> attribute."""
    attr = to_attr(value)
    back = from_attr(attr)
    assert _same(back, value), (value, attr, back)
    # ... and through MLIR text.
    text = str(attr)
    parsed = _parse_attr(text)
    assert str(parsed) == text
    assert _same(from_attr(parsed), value), (value, text)


def test_static_argument_normalisation() -> None:
    assert from_attr(to_attr([1, 2])) == (1, 2)
    assert from_attr(to_attr(torch.Size([3, 4]))) == (3, 4)
    assert from_attr(to_attr(torch.device("cpu"))) == "cpu"
    assert isinstance(from_attr(to_attr(OperandRef(2))), OperandRef)
    assert repr(OperandRef(2)) == "OperandRef(2)"
    assert str(to_attr(OperandRef(2))) == "#prims.operand<2>"
    assert str(to_attr(slice(0, None, 2))) == "#prims.slice<0, none, 2>"
    assert str(to_attr(...)) == "#prims.ellipsis"
    assert str(to_attr((1, 2))) == "array<i64: 1, 2>"
    assert str(to_attr(torch.bfloat16)) == "bf16"
    assert str(to_attr(True)) == "true"


def test_unstorable_static_arguments_are_rejected() -> None:
    with pytest.raises(TypeError, match="cannot store"):
        to_attr(object())
    with pytest.raises(TypeError, match="cannot store"):
        to_attr({"a": object()})
    with pytest.raises(TypeError, match="does not fit"):
        to_attr(2**63)


def test_dict_arguments_round_trip() -> None:
    """torch.call keyword arguments are stored as a dictionary attribute."""
    value = {"dim": 1, "names": (None, 2), "mode": "x"}
    assert from_attr(to_attr(value)) == value
    assert from_attr(_parse_attr(str(to_attr(value)))) == value
    with pytest.raises(TypeError, match="slice bounds must be ints"):
        to_attr(slice(0.5, 1))
    with pytest.raises(TypeError, match="does not support dtype"):
        to_attr(torch.qint8)


def test_non_ascii_string_argument_round_trips_through_text() -> None:
    attr = to_attr("ünïcode")
    assert from_attr(_parse_attr(str(attr))) == "ünïcode"
