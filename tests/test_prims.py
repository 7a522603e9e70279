"""The prims dialect: shape rules agree with torch, reference implementations are right, and
every prim is registered with a rule, a reference and the right effect traits.

The central property: for every prim, hypothesis draws valid inputs from the prim's strategy
(`thunder_ir.testing.op_inputs`, in every supported dtype the prim takes); the shape rule's
result type (shape, dtype, device) must equal the type of what the reference implementation
computes on real tensors, and the op built from those inputs must verify.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.ir import Block
from xdsl.traits import Pure

from thunder_ir.dialects import prims
from thunder_ir.dialects.base import ShapeError, ThunderOp, build, flatten_groups, group
from thunder_ir.dialects.prims import OPS, PRIMS, Prims
from thunder_ir.dialects.types import (
    FLOAT_DTYPES,
    SUPPORTED_DTYPES,
    TensorType,
    is_float,
    number_type,
    tensor_type,
)
from thunder_ir.testing import example_inputs, missing_inputs, op_inputs, type_of

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

Draw = Callable[[st.SearchStrategy[Any]], Any]
Sample = tuple[list[Any], dict[str, Any]]


# --------------------------------------------------------------------------- value helpers


def _t(shape: Any, dtype: torch.dtype = torch.float32, device: str = "cpu") -> TensorType:
    return tensor_type(tuple(shape), dtype, device)


def _on_meta(t: Any) -> Any:
    """The same type moved to the meta device (to check that rules carry devices)."""
    if isinstance(t, list):
        return [_on_meta(x) for x in t]
    if isinstance(t, TensorType):
        return _t(t.sizes, t.dtype, "meta")
    return t


def _fits(py: type, dtype: torch.dtype) -> bool:
    """The number-kind rule, written out independently of prims.number_fits."""
    return {bool: True, int: dtype != torch.bool, float: is_float(dtype)}[py]


def _shape(draw: Draw, min_rank: int = 0, max_rank: int = 3, min_size: int = 0,
           max_size: int = 4) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(min_size, max_size), min_size=min_rank,
                               max_size=max_rank)))


def _tensor(draw: Draw, shape: Any, dtype: torch.dtype, low: int = 1, high: int = 6
            ) -> torch.Tensor:
    """A tensor with drawn values: floats in [-2, 2), ints in [low, high), random bools."""
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    if is_float(dtype):
        return (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64).to(dtype)


_ACCEPTED: dict[Any, list[torch.dtype]] = {}


def _accepted(key: Any, probe: Callable[[torch.dtype], Any]) -> list[torch.dtype]:
    """The dtypes for which ``probe`` (a shape-rule call) raises no ShapeError."""
    if key not in _ACCEPTED:
        ok = []
        for d in SUPPORTED_DTYPES:
            try:
                probe(d)
            except ShapeError:
                continue
            ok.append(d)
        assert ok, f"{key}: the shape rule accepts no dtype at all"
        _ACCEPTED[key] = ok
    return _ACCEPTED[key]


def _build(cls: type[ThunderOp], types: list[Any], params: dict[str, Any]) -> ThunderOp:
    """Builds ``cls`` on block arguments of the given (grouped) operand types."""
    layout = cls.operand_layout()
    flat, sizes = flatten_groups(layout, types)
    block = Block(arg_types=flat)
    op = build(cls, *group(layout, list(block.args), sizes), **params)
    block.add_op(op)
    return op


# --------------------------------------------------------------------------- properties


def test_every_prim_has_an_input_strategy() -> None:
    assert missing_inputs(PRIMS) == []


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.filterwarnings(r"ignore:var\(\). degrees of freedom:UserWarning")
@SETTINGS
@given(data=st.data())
def test_shape_rule_matches_reference(name: str, data: st.DataObject) -> None:
    """On inputs from `thunder_ir.testing.op_inputs`, in every dtype the prim takes."""
    cls = OPS[name]
    operands, params = data.draw(op_inputs(cls, dtypes=SUPPORTED_DTYPES))
    types = [type_of(g) for g in operands]
    expected = cls.infer(*types, **params)
    got = type_of(cls.ref(*operands, **params))
    assert got == expected, f"{cls.name}{types} {params}: ref gives {got}, rule {expected}"
    # The rule carries the device: on meta tensors (or a meta device param) it says meta.
    meta_params = {k: ("meta" if k == "device" else v) for k, v in params.items()}
    on_meta = cls.infer(*[_on_meta(t) for t in types], **meta_params)
    assert on_meta == _on_meta(expected)
    _build(cls, types, params).verify()


@pytest.mark.parametrize("name", sorted(n for n, c in OPS.items()
                                        if issubclass(c, prims.BinaryOp)))
def test_binary_number_operands_follow_the_kind_rule(name: str) -> None:
    cls = OPS[name]
    for dtype in _accepted(cls, lambda d: cls.infer(_t((), d), _t((), d))):
        t = _t((2, 3), dtype)
        for py in (bool, int, float):
            n = number_type(py)
            for a, b in ((t, n), (n, t)):
                if _fits(py, dtype):
                    assert cls.infer(a, b) == cls.infer(t, t)
                    assert prims.number_fits(py, dtype)
                else:
                    with pytest.raises(ShapeError, match=rf"{cls.name}: a {py.__name__} number"):
                        cls.infer(a, b)
    with pytest.raises(ShapeError, match=rf"{cls.name}: needs at least one tensor"):
        cls.infer(number_type(int), number_type(int))


# --------------------------------------------------------------------------- coverage


def test_every_prim_has_a_rule_a_reference_and_is_registered() -> None:
    declared = {v for v in vars(prims).values()
                if isinstance(v, type) and issubclass(v, ThunderOp)
                and str(getattr(v, "name", "")).startswith("prims.")}
    assert declared == set(PRIMS)
    assert len(set(PRIMS)) == len(PRIMS)
    dialect_ops = set(Prims.operations)
    for cls in PRIMS:
        assert cls in dialect_ops, cls.name
        assert OPS[cls.name.removeprefix("prims.")] is cls
        assert cls.infer.__func__ is not ThunderOp.infer.__func__, f"{cls.name}: no shape rule"
        has_ref = (cls.ref.__func__ is not ThunderOp.ref.__func__
                   or getattr(cls, "TORCH_FN", None) is not None)
        assert has_ref, f"{cls.name}: no reference implementation"
        assert cls.__doc__ and cls.name in cls.__doc__, f"{cls.name}: docstring shows no IR"


def test_only_random_draws_are_impure() -> None:
    impure = sorted(c.name for c in PRIMS if not c.has_trait(Pure))
    assert impure == ["prims.bernoulli", "prims.bernoulli_like"]


def test_dtype_families() -> None:
    floats = sorted(FLOAT_DTYPES, key=str)
    ints = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]

    def unary(cls: Any) -> list[torch.dtype]:
        return sorted(_accepted(cls, lambda d: cls.infer(_t((), d))), key=str)

    def binary(cls: Any) -> list[torch.dtype]:
        return sorted(_accepted(cls, lambda d: cls.infer(_t((), d), _t((), d))), key=str)

    assert unary(prims.ExpOp) == floats
    assert unary(prims.AbsOp) == sorted(floats + ints, key=str)
    assert unary(prims.BitwiseNotOp) == sorted([*ints, torch.bool], key=str)
    assert unary(prims.IsnanOp) == sorted(SUPPORTED_DTYPES, key=str)
    assert prims.IsnanOp.infer(_t((2,))).dtype == torch.bool
    assert binary(prims.AddOp) == sorted(floats + ints, key=str)
    assert binary(prims.Atan2Op) == floats
    assert binary(prims.BitwiseAndOp) == sorted([*ints, torch.bool], key=str)
    assert binary(prims.EqOp) == sorted(SUPPORTED_DTYPES, key=str)
    assert prims.LtOp.infer(_t((2,), torch.int8), _t((2,), torch.int8)).dtype == torch.bool


# --------------------------------------------------------------------------- invalid inputs

F23 = _t((2, 3))
F32 = _t((3, 2))

INVALID: list[tuple[str, list[Any], dict[str, Any], list[str]]] = [
    ("add", [F23, F32], {}, ["(2, 3)", "(3, 2)", "broadcast_in_dim"]),
    ("mul", [F23, _t((2, 3), torch.float16)], {}, ["torch.float32", "torch.float16"]),
    ("sub", [F23, _t((2, 3), device="meta")], {}, ["cpu", "meta"]),
    ("add", [_t((2,), torch.bool), _t((2,), torch.bool)], {}, ["bool"]),
    ("exp", [_t((2,), torch.int64)], {}, ["floating-point", "torch.int64"]),
    ("neg", [number_type(float)], {}, ["must be a tensor"]),
    ("where", [F23, F23, F23], {}, ["condition must be bool", "torch.float32"]),
    ("where", [_t((2, 3), torch.bool), F32, F32], {}, ["(2, 3)", "(3, 2)"]),
    ("where", [_t((2,), torch.bool), number_type(int), number_type(float)], {}, ["differ"]),
    ("where", [_t((2,), torch.bool), _t((2,), torch.int32), number_type(float)], {},
     ["float number", "torch.int32"]),
    ("where", [_t((2,), torch.bool), _t((2,), device="meta"), _t((2,))], {},
     ["different devices"]),
    ("broadcast_in_dim", [F23], {"shape": (2, 4), "broadcast_dims": (0, 1)},
     ["(2, 3)", "(2, 4)"]),
    ("broadcast_in_dim", [F23], {"shape": (3, 2, 3), "broadcast_dims": (0,)},
     ["one broadcast dim per operand dim", "(2, 3)"]),
    ("broadcast_in_dim", [F23], {"shape": (3, 3, 2), "broadcast_dims": (2, 1)},
     ["increasing"]),
    ("reshape", [F23], {"shape": (4, 2)}, ["(2, 3)", "(4, 2)", "6 elements"]),
    ("reshape", [F23], {"shape": (-1, 6)}, ["(-1, 6)"]),
    ("transpose", [F23], {"permutation": (0, 0)}, ["(0, 0)", "rank-2"]),
    ("transpose", [F23], {"permutation": (0,)}, ["(2, 3)"]),
    ("slice", [F23], {"start_indices": (0, 2), "end_indices": (2, 4)},
     ["[2:4:1]", "size 3", "(2, 3)"]),
    ("slice", [F23], {"start_indices": (0,), "end_indices": (2,)}, ["(2, 3)"]),
    ("slice", [F23], {"start_indices": (0, 0), "end_indices": (2, 3), "strides": (1, 0)},
     ["[0:3:0]"]),
    ("squeeze", [F23], {"dims": (0,)}, ["(0,)", "(2, 3)", "size 1"]),
    ("pad", [F23], {"padding_value": 0.0, "padding_config": ((0, 0, 0),)}, ["(2, 3)"]),
    ("pad", [F23], {"padding_value": 0.0, "padding_config": ((0, 0, -1), (0, 0, 0))},
     ["interior"]),
    ("pad", [F23], {"padding_value": 0.0, "padding_config": ((-2, -1, 0), (0, 0, 0))},
     ["negative size"]),
    ("cat", [[F23, F32]], {"dim": 0}, ["(2, 3)", "(3, 2)", "dim 0"]),
    ("cat", [[F23]], {"dim": 2}, ["dim 2", "(2, 3)"]),
    ("cat", [[]], {"dim": 0}, ["at least one tensor"]),
    ("cat", [[F23, _t((2, 3), torch.int32)]], {"dim": 0}, ["torch.int32"]),
    ("cat", [[F23, _t((2, 3), device="cuda:1")]], {"dim": 0}, ["different devices", "cuda:1"]),
    ("flip", [F23], {"dims": (-1,)}, ["(-1,)", "rank-2"]),
    ("sum", [F23], {"dims": (2,)}, ["(2,)", "rank-2"]),
    ("amax", [F23], {"dims": (0, 0)}, ["(0, 0)"]),
    ("var", [_t((2, 3), torch.int64)], {"dims": (0,), "correction": 1}, ["floating-point"]),
    ("argmax", [F23], {"dim": 2}, ["rank-2"]),
    ("argmin", [_t((0, 3))], {"dim": 0}, ["empty dim 0", "(0, 3)"]),
    ("argmax", [_t((2, 3), torch.bool)], {"dim": 0}, ["bool"]),
    ("amax", [_t((2, 0))], {"dims": (1,)}, ["empty dim", "(2, 0)"]),
    ("amin", [_t((0,))], {"dims": (0,)}, ["empty dim", "(0,)"]),
    ("matmul", [F23, F23], {}, ["(2, 3)", "3 != 2"]),
    ("matmul", [_t((2,)), _t(())], {}, ["at least 1-D"]),
    ("matmul", [_t((4, 2, 3)), _t((5, 3, 2))], {}, ["(4,)", "(5,)", "do not broadcast"]),
    ("matmul", [F23, _t((3, 2), torch.float64)], {}, ["torch.float64"]),
    ("linear", [F23, _t((4, 2)), None], {}, ["(2, 3)", "(4, 2)"]),
    ("linear", [F23, _t((4, 3)), _t((3,))], {}, ["bias (3,)", "(4, 3)"]),
    ("linear", [F23, _t((3,)), _t(())], {}, ["1-D weight (3,)", "(2, 3)"]),
    ("linear", [F23, _t((4, 3), device="meta"), None], {}, ["different devices", "meta"]),
    ("linear", [_t((2, 3), torch.bool), _t((4, 3), torch.bool), None], {}, ["bool"]),
    ("iota", [], {"length": -1, "start": 0, "step": 1, "device": "cpu", "dtype": torch.int64},
     ["length", "-1"]),
    ("full", [], {"shape": (2, -1), "fill_value": 0.0, "device": "cpu",
                  "dtype": torch.float32}, ["(2, -1)"]),
    ("full", [], {"shape": (2,), "fill_value": 0.0, "device": "tpu", "dtype": torch.float32},
     ["'tpu'", "cpu, meta or cuda:N"]),
    ("iota", [], {"length": 2, "start": 0, "step": 1, "device": "cuda", "dtype": torch.int64},
     ["'cuda'"]),
    ("bernoulli", [], {"shape": (2,), "p": 1.5, "device": "cpu", "dtype": torch.float32},
     ["p must be in [0, 1]", "1.5"]),
    ("bernoulli", [], {"shape": (2,), "p": 0.5, "device": "cpu", "dtype": torch.int32},
     ["floating point", "torch.int32"]),
    ("take", [F23, _t((2,), torch.float32)], {"dim": 0}, ["int32 or int64", "torch.float32"]),
    ("take", [F23, _t((2, 2), torch.int64)], {"dim": 0}, ["1-D", "(2, 2)"]),
    ("take", [F23, _t((2,), torch.int64, "meta")], {"dim": 0}, ["different devices"]),
    ("gather", [F23, _t((3, 3), torch.int64)], {"dim": 1}, ["(3, 3)", "(2, 3)"]),
    ("index_add", [F23, _t((2,), torch.int64), F23], {"dim": 1},
     ["cpu f32[2, 3]", "(2,)", "dim 1"]),
    ("scatter_add", [F23, _t((2, 4), torch.int64), F23], {"dim": 1},
     ["(2, 4)", "cpu f32[2, 3]"]),
    ("constant", [], {"value": "x"}, ["'x'"]),
    ("constant", [], {"value": 2**63}, ["does not fit in int64"]),
    ("broadcast_in_dim", [_t(())], {"shape": (-1,), "broadcast_dims": ()}, ["(-1,)"]),
    ("bernoulli", [], {"shape": (2, -2), "p": 0.5, "device": "cpu", "dtype": torch.float32},
     ["negative size", "(2, -2)"]),
]


@pytest.mark.parametrize(("name", "types", "params", "needles"), INVALID,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(INVALID)])
def test_invalid_inputs_raise_shape_error(name: str, types: list[Any], params: dict[str, Any],
                                          needles: list[str]) -> None:
    cls = OPS[name]
    with pytest.raises(ShapeError) as info:
        cls.infer(*types, **params)
    msg = str(info.value)
    assert msg.startswith(f"prims.{name}: "), msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_every_prim_with_tensor_operands_rejects_numbers() -> None:
    """Passing a number where the op declares a tensor gives a ShapeError naming the op."""
    checked = 0
    for cls in PRIMS:
        operands, params = _example(cls)
        types = [type_of(g) for g in operands]
        for i, (_, kind) in enumerate(cls.operand_layout()):
            constr = str(cls.get_irdl_definition().operands[i][1].constr)
            if kind != "single" or "NumberType" in constr:
                continue
            bad = list(types)
            bad[i] = number_type(float)
            with pytest.raises(ShapeError, match=rf"^{cls.name}: "):
                cls.infer(*bad, **params)
            checked += 1
    assert checked > 40


def _example(cls: type[ThunderOp]) -> Sample:
    """One fixed valid sample of a prim (deterministic)."""
    operands, params = example_inputs(cls, dtypes=SUPPORTED_DTYPES)
    return operands, params


# --------------------------------------------------------------------------- reference numerics


def _ref(name: str, *operands: Any, **params: Any) -> Any:
    return OPS[name].ref(*operands, **params)


@SETTINGS
@given(data=st.data())
def test_pad_matches_functional_pad(data: st.DataObject) -> None:
    shape = _shape(data.draw, min_rank=1)
    x = _tensor(data.draw, shape, torch.float32)
    config = []
    for size in shape:
        lo, hi = data.draw(st.integers(-size, 3)), data.draw(st.integers(-size, 3))
        config.append((lo, max(hi, -size - lo), 0))
    got = _ref("pad", x, padding_value=1.5, padding_config=tuple(config))
    flat = [p for lo, hi, _ in reversed(config) for p in (lo, hi)]
    torch.testing.assert_close(got, torch.nn.functional.pad(x, flat, value=1.5))


def test_pad_interior() -> None:
    x = torch.tensor([1, 2, 3])
    assert _ref("pad", x, padding_value=0, padding_config=((1, 2, 1),)).tolist() == \
        [0, 1, 0, 2, 0, 3, 0, 0]
    assert _ref("pad", x, padding_value=9, padding_config=((-1, -1, 2),)).tolist() == \
        [9, 9, 2, 9, 9]
    x2 = torch.arange(4).reshape(2, 2)
    assert _ref("pad", x2, padding_value=0, padding_config=((0, 0, 1), (1, 0, 0))).tolist() == \
        [[0, 0, 1], [0, 0, 0], [0, 2, 3]]


@pytest.mark.parametrize("correction", [0, 1, 2, 0.5])
def test_var_correction(correction: float) -> None:
    x = torch.randn(4, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = _ref("var", x, dims=(0, 2), correction=correction)
    mean = x.mean(dim=(0, 2), keepdim=True)
    want = ((x - mean) ** 2).sum(dim=(0, 2)) / (4 * 6 - correction)
    torch.testing.assert_close(got, want)
    assert _ref("var", x, dims=(), correction=0).eq(0).all()


def test_div_truncates_on_ints_and_divides_on_floats() -> None:
    a = torch.tensor([7, -7, 7, -7, 6])
    b = torch.tensor([2, 2, -2, -2, 3])
    assert _ref("div", a, b).tolist() == [3, -3, -3, 3, 2]
    assert _ref("div", a, 2).tolist() == [3, -3, 3, -3, 3]
    assert _ref("div", -7, b).tolist() == [-3, -3, 3, 3, -2]
    assert _ref("div", a.float(), b.float()).tolist() == [3.5, -3.5, -3.5, 3.5, 2.0]
    assert _ref("div", a.to(torch.int8), b.to(torch.int8)).dtype == torch.int8


def test_remainder_and_fmod_signs() -> None:
    a, b = torch.tensor([7, -7, 7, -7]), torch.tensor([3, 3, -3, -3])
    assert _ref("remainder", a, b).tolist() == [1, 2, -2, -1]
    assert _ref("fmod", a, b).tolist() == [1, -1, 1, -1]
    assert _ref("fmod", 7, b).tolist() == [1, 1, 1, 1]
    assert _ref("remainder", -7.5, torch.tensor([2.0])).tolist() == [0.5]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                  "eq", "ne", "lt", "le", "gt", "ge", "atan2", "remainder",
                                  "fmod"])
def test_binary_number_on_either_side(name: str) -> None:
    x = torch.tensor([0.5, 1.0, 2.0, 3.0], dtype=torch.float64)
    torch_name = {"div": "true_divide"}.get(name, name)
    fn = getattr(torch, torch_name)
    two = torch.tensor(2.0, dtype=torch.float64)
    torch.testing.assert_close(_ref(name, x, 2.0), fn(x, two).to(_ref(name, x, x).dtype))
    torch.testing.assert_close(_ref(name, 2.0, x), fn(two, x).to(_ref(name, x, x).dtype))


def test_reductions_keep_the_operand_dtype() -> None:
    x = torch.full((4, 100), 3, dtype=torch.int8)
    assert _ref("sum", x, dims=(0,)).dtype == torch.int8
    assert _ref("sum", x, dims=(0,)).tolist() == [12] * 100
    assert _ref("prod", torch.tensor([[2, 3], [4, 5]]), dims=(0, 1)).item() == 120
    y = torch.arange(24.0).reshape(2, 3, 4)
    torch.testing.assert_close(_ref("amax", y, dims=(2, 0)), y.amax(dim=(0, 2)))
    torch.testing.assert_close(_ref("sum", y, dims=()), y)


def test_round_is_half_to_even() -> None:
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5])
    assert _ref("round", x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


def test_broadcast_in_dim_values() -> None:
    x = torch.tensor([1, 2, 3])
    got = _ref("broadcast_in_dim", x, shape=(2, 3, 2), broadcast_dims=(1,))
    assert got.tolist() == [[[1, 1], [2, 2], [3, 3]]] * 2
    y = torch.tensor([[1], [2]])
    assert _ref("broadcast_in_dim", y, shape=(2, 3), broadcast_dims=(0, 1)).tolist() == \
        [[1, 1, 1], [2, 2, 2]]


def test_slice_and_transpose_values() -> None:
    x = torch.arange(24).reshape(4, 6)
    got = _ref("slice", x, start_indices=(1, 0), end_indices=(4, 6), strides=(2, 4))
    assert got.tolist() == x[1:4:2, 0:6:4].tolist()
    assert _ref("transpose", torch.zeros(2, 3, 4), permutation=(2, 0, 1)).shape == (4, 2, 3)


def test_where_values() -> None:
    c = torch.tensor([True, False, True])
    assert _ref("where", c, torch.tensor([1, 2, 3]), 0).tolist() == [1, 0, 3]
    assert _ref("where", c, 1.5, torch.tensor([1.0, 2.0, 3.0])).tolist() == [1.5, 2.0, 1.5]
    out = _ref("where", c, 1, 0)
    assert out.dtype == torch.int64 and out.tolist() == [1, 0, 1]


def test_iota_values() -> None:
    got = _ref("iota", length=4, start=2, step=3, device="cpu", dtype=torch.int64)
    assert got.dtype == torch.int64 and got.tolist() == [2, 5, 8, 11]
    got = _ref("iota", length=3, start=0.5, step=0.25, device="cpu", dtype=torch.float64)
    assert got.tolist() == [0.5, 0.75, 1.0]


def test_indexing_values() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    i = torch.tensor([2, 0], dtype=torch.int32)
    assert _ref("take", x, i, dim=0).tolist() == [x[2].tolist(), x[0].tolist()]
    gi = torch.tensor([[3, 0], [1, 1]])
    assert _ref("gather", x, gi, dim=1).tolist() == [[3.0, 0.0], [5.0, 5.0]]
    src = torch.ones(2, 4)
    assert _ref("index_add", x, i, src, dim=0)[2].tolist() == (x[2] + 1).tolist()
    out = _ref("scatter_add", torch.zeros(2, 3), torch.tensor([[0, 0, 2]]),
               torch.ones(1, 3), dim=1)
    assert out.tolist() == [[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_bernoulli_draws_as_eager_dropout_draws(dtype: torch.dtype) -> None:
    """The draw is torch's default generator's, as ``empty(...).bernoulli_(p)`` makes it
    (eager dropout's noise): the same seed gives the same ones and zeros."""
    kw = {"shape": (64, 64), "p": 0.7, "device": "cpu", "dtype": dtype}
    torch.manual_seed(5)
    a = _ref("bernoulli", **kw)
    torch.manual_seed(5)
    expected = torch.empty(64, 64, dtype=dtype).bernoulli_(0.7)
    assert a.dtype == dtype and torch.equal(a, expected)
    assert set(a.unique().tolist()) == {0.0, 1.0}
    assert a.float().mean().item() == pytest.approx(0.7, abs=0.05)
    assert not torch.equal(a, _ref("bernoulli", **kw))  # the stream moved on


def test_constant_and_full() -> None:
    assert _ref("constant", value=2.5) == 2.5
    assert prims.ConstantOp.infer(value=True) == number_type(bool)
    got = _ref("full", shape=(2, 1), fill_value=-0.0, device="cpu", dtype=torch.float32)
    assert got.shape == (2, 1) and torch.signbit(got).all()


def test_matmul_and_linear_values() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 1, 3, 4, generator=g), torch.randn(5, 4, 2, generator=g)
    torch.testing.assert_close(_ref("matmul", a, b), a @ b)
    w, bias = torch.randn(6, 4, generator=g), torch.randn(6, generator=g)
    torch.testing.assert_close(_ref("linear", a, w, bias), a @ w.T + bias)
