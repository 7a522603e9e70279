"""Property tests of the core ltorch ops and their decompositions into prims.

Each test builds a one-op program, decomposes it and runs it with the reference
interpreter; `thunder_ir.testing.check_decomposition` compares the result with eager torch
under the float64-reference rule (integer and bool results exactly). Shapes, dtypes,
values and static arguments are drawn by hypothesis.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.traits import Pure

from thunder_ir.dialects import ltorch
from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.ltorch_base import LTORCH
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.types import TensorType, is_float, number_type, tensor_type
from thunder_ir.passes.decomp_core import result_dtype
from thunder_ir.passes.decompositions import load_rules
from thunder_ir.runtime.interpreter import run
from thunder_ir.testing import (
    broadcast_shapes,
    check_decomposition,
    decompose,
    shapes,
    tensors,
)

SETTINGS = settings(max_examples=15, deadline=None)
CORE_OPS = [op for op in LTORCH if op.__module__ == L.__name__]

FLOATS = [torch.float32, torch.float64, torch.bfloat16]
INTS = [torch.int64, torch.int32]
NUMERIC = FLOATS + INTS
ALL = [*NUMERIC, torch.bool]


def check(op: type[ThunderOp], operands: list[Any], params: dict[str, Any] | None = None,
          **kw: Any) -> Any:
    """`check_decomposition`, and the decomposed program holds prims only."""
    module = check_decomposition(op, operands, params, **kw)
    names = {o.name for o in main_function(module).body.block.ops
             if not isinstance(o, func.ReturnOp)}
    assert all(n.startswith("prims.") for n in names), f"{op.name} left {names}"
    return module


def nonzero(t: torch.Tensor) -> torch.Tensor:
    """``t`` with zeros replaced by ones (int division by zero raises in torch)."""
    return torch.where(t == 0, torch.ones_like(t), t)


@st.composite
def special_tensors(draw: st.DrawFn, shape: Any = None, dtype: Any = None) -> torch.Tensor:
    """`tensors`, with some elements of float tensors set to inf, -inf or nan."""
    t = draw(tensors(shape, dtype))
    if is_float(t.dtype) and t.numel() and draw(st.booleans()):
        flat = t.flatten()
        k = draw(st.integers(0, t.numel() - 1))
        flat[k] = draw(st.sampled_from([math.inf, -math.inf, math.nan, 0.0]))
        t = flat.reshape(t.shape)
    return t


@st.composite
def dims_of(draw: st.DrawFn, rank: int) -> Any:
    """A ``dim`` argument of a multi-dim reduction: None, an int or a tuple (may be ())."""
    if rank == 0:
        return draw(st.sampled_from([None, (), 0, -1]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-rank, rank - 1))
    picked = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
    return tuple(d - rank if draw(st.booleans()) else d for d in picked)


# --------------------------------------------------------------------------- tables


EXPECTED = {
    "add", "sub", "mul", "div", "floor_divide", "remainder", "fmod", "pow", "maximum",
    "minimum", "atan2", "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
    "bitwise_xor", "logical_and", "logical_or", "logical_not", "bitwise_not", "neg", "abs",
    "exp", "exp2", "expm1", "log", "log1p", "log2", "sin", "cos", "tan", "tanh", "asin",
    "acos", "atan", "sinh", "cosh", "sqrt", "rsqrt", "reciprocal", "sign", "floor", "ceil",
    "round", "trunc", "erf", "erfc", "isnan", "isinf", "isfinite", "where", "masked_fill",
    "clamp", "to_dtype", "sum", "mean", "var", "amax", "amin", "prod", "max", "max_dim",
    "min", "min_dim", "argmax", "argmin", "reshape", "view", "permute", "transpose",
    "contiguous", "flatten", "unsqueeze", "squeeze", "expand", "split", "chunk", "cat",
    "stack", "getitem", "clone", "arange", "zeros", "ones", "full", "zeros_like",
    "ones_like", "full_like", "empty", "triu", "tril",
}


def test_every_core_op_is_declared_and_decomposed() -> None:
    rules = load_rules()
    assert {op.name.removeprefix("ltorch.") for op in CORE_OPS} == EXPECTED
    for op in CORE_OPS:
        assert op in rules, f"{op.name} has no decomposition"
        assert ltorch.OPS[op.name.removeprefix("ltorch.")] is op


@pytest.mark.parametrize("op", CORE_OPS, ids=lambda op: op.name)
def test_signature_names_operands_and_params(op: type[L.CoreOp]) -> None:
    # getitem's index tensors sit inside ``index`` in torch's call, not beside it.
    operands = {n for n, _ in op.operand_layout()} - {"indices"}
    params = set(op.param_names())
    assert set(op.SIGNATURE) == operands | params
    assert len(op.SIGNATURE) == len(set(op.SIGNATURE))
    assert set(op.DEFAULTS) <= params
    assert op.has_trait(Pure)
    assert op.__doc__ and op.__doc__.startswith("`%")


@st.composite
def operand_types(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["dim", "zero", "number"]))
        if kind == "number":
            out.append(number_type(draw(st.sampled_from([bool, int, float]))))
        else:
            out.append(tensor_type((2,) if kind == "dim" else (),
                                   draw(st.sampled_from([*ALL, torch.int8, torch.float16]))))
    return out


@settings(max_examples=60, deadline=None)
@given(types=operand_types())
def test_result_dtype_matches_torch_for_many_operands(types: list[Any]) -> None:
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    samples = [torch.ones(t.sizes, dtype=t.dtype) if isinstance(t, TensorType)
               else t.python_type(1) for t in types]
    if all(not isinstance(s, torch.Tensor) for s in samples):
        samples.append(torch.ones((), dtype=torch.bool))  # torch needs a tensor
        types = [*types, tensor_type((), torch.bool)]
    _, expected = elementwise_dtypes(
        *samples, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    assert result_dtype(*types) == expected


def test_shape_rule_cache_tells_int_float_and_bool_apart() -> None:
    assert L.FullOp.infer(size=(2,), fill_value=1).dtype == torch.int64
    assert L.FullOp.infer(size=(2,), fill_value=True).dtype == torch.bool
    assert L.FullOp.infer(size=(2,), fill_value=1.0).dtype == torch.float32
    assert L.ArangeOp.infer(start=0).dtype == torch.int64
    assert L.ArangeOp.infer(start=0.0).dtype == torch.float32


# --------------------------------------------------------------------------- binary


ARITH = [L.AddOp, L.SubOp, L.MulOp, L.DivOp, L.RemainderOp, L.FmodOp, L.PowOp,
         L.FloorDivideOp, L.EqOp, L.NeOp, L.LtOp, L.LeOp, L.GtOp, L.GeOp, L.MaximumOp,
         L.MinimumOp, L.Atan2Op, L.BitwiseAndOp, L.BitwiseOrOp, L.BitwiseXorOp,
         L.LogicalAndOp, L.LogicalOrOp]
DIVIDES = (L.DivOp, L.RemainderOp, L.FmodOp, L.FloorDivideOp)
BITWISE = (L.BitwiseAndOp, L.BitwiseOrOp, L.BitwiseXorOp)


def _dtypes_for(op: type) -> list[torch.dtype]:
    if op in BITWISE:
        return [*INTS, torch.bool]
    if op in (L.LogicalAndOp, L.LogicalOrOp, L.EqOp, L.NeOp, L.MaximumOp, L.MinimumOp,
              L.AddOp, L.MulOp):
        return ALL
    return NUMERIC


@st.composite
def binary_inputs(draw: st.DrawFn, op: type) -> tuple[Any, Any]:
    dtypes = st.sampled_from(_dtypes_for(op))
    shape = draw(shapes())
    a = draw(special_tensors(shape, dtypes))
    b_is_number = issubclass(op, L.BinaryOp | L.PowOp) and draw(st.booleans())
    if b_is_number:
        if op in BITWISE:
            b: Any = draw(st.integers(-3, 3) | st.booleans())
        else:
            b = draw(st.integers(-3, 3) | st.floats(-3, 3).map(lambda v: float(round(v, 2))))
    else:
        b = draw(special_tensors(draw(broadcast_shapes(shape)), dtypes))
    if draw(st.booleans()):
        a, b = b, a
    rt = torch.result_type(a, b)
    if not is_float(rt) and op in DIVIDES:  # int division by zero raises
        b = nonzero(b) if isinstance(b, torch.Tensor) else (b or 1)
        if isinstance(b, torch.Tensor) and b.dtype == torch.bool:
            b = torch.ones_like(b)
    if op is L.PowOp and not is_float(rt):  # ints to negative powers raise
        if not isinstance(b, torch.Tensor):
            b = abs(b)
        elif b.dtype != torch.bool:
            b = b.abs()
    return a, b


@pytest.mark.parametrize("op", ARITH, ids=lambda op: op.name)
@SETTINGS
@given(data=st.data())
def test_binary(op: type, data: st.DataObject) -> None:
    a, b = data.draw(binary_inputs(op))
    rt = torch.result_type(a, b)
    if rt == torch.bool and op in (L.SubOp, L.DivOp, L.RemainderOp, L.FmodOp, L.PowOp,
                                   L.FloorDivideOp, L.Atan2Op):
        return  # torch rejects these on bools
    if op in BITWISE and is_float(rt):
        return
    params: dict[str, Any] = {}
    if op in (L.AddOp, L.SubOp) and rt != torch.bool:
        params["alpha"] = data.draw(st.sampled_from([1, 2, -3] + ([0.5] if is_float(rt)
                                                                   else [])))
    check(op, [a, b], params)


@SETTINGS
@given(a=special_tensors(shapes(), st.sampled_from(NUMERIC)),
       b=special_tensors(shapes(max_rank=0), st.sampled_from(NUMERIC)),
       mode=st.sampled_from([None, "trunc", "floor"]), swap=st.booleans())
def test_div_rounding_modes(a: torch.Tensor, b: torch.Tensor, mode: str | None,
                            swap: bool) -> None:
    if swap:
        a, b = b, a
    if not is_float(torch.result_type(a, b)):
        b = nonzero(b)
    check(L.DivOp, [a, b], {"rounding_mode": mode})


def test_floor_division_near_integer_ratios() -> None:
    # 1 / 0.1f rounds to 10 in float32, but the exact ratio is just below 10.
    a = torch.tensor([1.0, -1.0, 7.0, -7.0, 0.3, 5.0, -0.0], dtype=torch.float32)
    b = torch.tensor([0.1, 0.1, -2.0, 2.0, 0.1, 0.0, 3.0], dtype=torch.float32)
    check(L.DivOp, [a, b], {"rounding_mode": "floor"})
    check(L.FloorDivideOp, [a, b])
    i = torch.tensor([7, -7, 7, -7, 0])
    j = torch.tensor([2, 2, -2, -2, 3])
    check(L.FloorDivideOp, [i, j])
    check(L.DivOp, [i, 2], {"rounding_mode": "floor"})


def test_number_on_the_left_and_bool_arithmetic() -> None:
    x = torch.randn(3, 2)
    check(L.SubOp, [2, x])  # 2 - x
    check(L.DivOp, [1, x])  # 1 / x
    check(L.PowOp, [2.0, x])
    check(L.RemainderOp, [5, torch.tensor([2, -3, 4])])
    bools = torch.tensor([True, False, True])
    check(L.AddOp, [bools, torch.tensor([False, False, True])])
    check(L.MulOp, [bools, True])


def test_dynamic_numbers() -> None:
    """Numbers that are program arguments (not constants) go through tensors."""
    p = Program("computation", [tensor_type((2, 3), torch.float32), number_type(int),
                                number_type(float)], ["x", "n", "f"])
    Lt = p.emitter.ns(ltorch.OPS)
    x, n, f = p.args
    outs = [Lt.add(x, n, alpha=3), Lt.sub(n, x, alpha=2), Lt.where(Lt.gt(x, f), n, f),
            Lt.div(x, n, rounding_mode="floor"), Lt.mul(x, f)]
    m = p.finish(outs)
    m.verify()
    args = (torch.randn(2, 3), 3, 0.25)
    eager = run(m, *args)
    decompose(m)
    got = run(m, *args)
    for g, e in zip(got, eager):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


# --------------------------------------------------------------------------- unary


FLOAT_UNARY = [L.ExpOp, L.Exp2Op, L.Expm1Op, L.LogOp, L.Log1pOp, L.Log2Op, L.SinOp, L.CosOp,
               L.TanOp, L.TanhOp, L.AsinOp, L.AcosOp, L.AtanOp, L.SinhOp, L.CoshOp, L.SqrtOp,
               L.RsqrtOp, L.ReciprocalOp, L.ErfOp, L.ErfcOp]


@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda op: op.name)
@SETTINGS
@given(x=special_tensors(shapes(), st.sampled_from(ALL)))
def test_float_unary(op: type, x: torch.Tensor) -> None:
    module = check(op, [x])
    out = main_function(module).function_type.outputs.data[0]
    assert out.dtype == (x.dtype if is_float(x.dtype) else torch.get_default_dtype())


OTHER_UNARY = {
    L.NegOp: NUMERIC, L.AbsOp: NUMERIC, L.SignOp: ALL, L.FloorOp: NUMERIC,
    L.CeilOp: NUMERIC, L.TruncOp: NUMERIC, L.RoundOp: FLOATS, L.IsnanOp: ALL,
    L.IsinfOp: ALL, L.IsfiniteOp: ALL, L.LogicalNotOp: ALL,
    L.BitwiseNotOp: [*INTS, torch.bool],
}


@pytest.mark.parametrize("op", list(OTHER_UNARY), ids=lambda op: op.name)
@SETTINGS
@given(data=st.data())
def test_other_unary(op: type, data: st.DataObject) -> None:
    x = data.draw(special_tensors(shapes(), st.sampled_from(OTHER_UNARY[op])))
    check(op, [x])


@SETTINGS
@given(x=tensors(shapes(), st.sampled_from(FLOATS), low=-50, high=50),
       decimals=st.integers(-2, 3))
def test_round_decimals(x: torch.Tensor, decimals: int) -> None:
    check(L.RoundOp, [x], {"decimals": decimals})


# --------------------------------------------------------------------------- selection


@st.composite
def value_or_number(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    if draw(st.booleans()):
        return draw(st.integers(-3, 3) | st.sampled_from([0.5, -2.25]) | st.booleans())
    return draw(tensors(draw(broadcast_shapes(shape)), st.sampled_from(ALL)))


@SETTINGS
@given(data=st.data())
def test_where(data: st.DataObject) -> None:
    shape = data.draw(shapes())
    cond = data.draw(tensors(data.draw(broadcast_shapes(shape)), torch.bool))
    a = data.draw(value_or_number(shape))
    b = data.draw(value_or_number(shape))
    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
        cond = data.draw(tensors(shape, torch.bool))
    check(L.WhereOp, [cond, a, b])


@SETTINGS
@given(data=st.data())
def test_masked_fill(data: st.DataObject) -> None:
    shape = data.draw(shapes())
    x = data.draw(tensors(shape, st.sampled_from(ALL)))
    mask = data.draw(tensors(data.draw(broadcast_shapes(shape)), torch.bool))
    if data.draw(st.booleans()):
        x, mask = data.draw(tensors(data.draw(broadcast_shapes(shape)),
                                    st.sampled_from(ALL))), data.draw(tensors(shape, torch.bool))
    if is_float(x.dtype):
        value: Any = data.draw(st.sampled_from([-math.inf, 0.5, -2.0, 3]))
    elif x.dtype == torch.bool:
        value = data.draw(st.booleans())
    else:
        value = data.draw(st.integers(-5, 5))
    check(L.MaskedFillOp, [x, mask], {"value": value})


@SETTINGS
@given(x=special_tensors(shapes(), st.sampled_from(NUMERIC)),
       lo=st.none() | st.integers(-2, 0) | st.sampled_from([-1.5, 0.25]),
       hi=st.none() | st.integers(0, 2) | st.sampled_from([1.5, -0.5]))
def test_clamp(x: torch.Tensor, lo: Any, hi: Any) -> None:
    if lo is None and hi is None:
        hi = 1
    check(L.ClampOp, [x], {"min": lo, "max": hi})


@SETTINGS
@given(x=special_tensors(shapes(), st.sampled_from(ALL)), dtype=st.sampled_from(ALL))
def test_to_dtype(x: torch.Tensor, dtype: torch.dtype) -> None:
    if is_float(x.dtype) and not is_float(dtype):
        x = torch.nan_to_num(x, nan=0.0, posinf=7.0, neginf=-7.0)
    check(L.ToDtypeOp, [x], {"dtype": dtype})


# --------------------------------------------------------------------------- reductions


@SETTINGS
@given(data=st.data(), op=st.sampled_from([L.SumOp, L.MeanOp]))
def test_sum_mean(data: st.DataObject, op: type) -> None:
    x = data.draw(tensors(shapes(), st.sampled_from(ALL if op is L.SumOp else FLOATS)))
    dtype = data.draw(st.none() | st.sampled_from(FLOATS if op is L.MeanOp else ALL[:-1]))
    params = {"dim": data.draw(dims_of(x.ndim)), "keepdim": data.draw(st.booleans()),
              "dtype": dtype}
    check(op, [x], params)


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")  # correction >= n
@SETTINGS
@given(data=st.data())
def test_var(data: st.DataObject) -> None:
    x = data.draw(tensors(shapes(), st.sampled_from(FLOATS)))
    params = {"dim": data.draw(dims_of(x.ndim)), "keepdim": data.draw(st.booleans()),
              "correction": data.draw(st.sampled_from([0, 1, 2, 0.5, True, False]))}
    check(L.VarOp, [x], params)


@SETTINGS
@given(data=st.data(), op=st.sampled_from([L.AmaxOp, L.AminOp]))
def test_amax_amin(data: st.DataObject, op: type) -> None:
    x = data.draw(special_tensors(shapes(), st.sampled_from(ALL)))
    dim = data.draw(dims_of(x.ndim))
    check(op, [x], {"dim": () if dim is None else dim, "keepdim": data.draw(st.booleans())})


@SETTINGS
@given(data=st.data())
def test_prod(data: st.DataObject) -> None:
    x = data.draw(tensors(shapes(max_rank=3, max_side=4), st.sampled_from(ALL), low=-1.5,
                          high=1.5))
    dim = data.draw(st.none() | st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    dtype = data.draw(st.none() | st.sampled_from([torch.float64, torch.int64]))
    keepdim = dim is not None and data.draw(st.booleans())  # torch: no keepdim without dim
    check(L.ProdOp, [x], {"dim": dim, "keepdim": keepdim, "dtype": dtype})


@SETTINGS
@given(x=special_tensors(shapes(), st.sampled_from(ALL)), op=st.sampled_from([L.MaxOp, L.MinOp]))
def test_max_min(x: torch.Tensor, op: type) -> None:
    check(op, [x])


@SETTINGS
@given(data=st.data(), op=st.sampled_from([L.MaxDimOp, L.MinDimOp, L.ArgmaxOp, L.ArgminOp]))
def test_arg_reductions(data: st.DataObject, op: type) -> None:
    dtypes = st.sampled_from(NUMERIC if op in (L.ArgmaxOp, L.ArgminOp) else ALL)
    x = data.draw(tensors(shapes(), dtypes))
    r = max(x.ndim, 1)
    dim = data.draw(st.integers(-r, r - 1))
    if op in (L.ArgmaxOp, L.ArgminOp) and data.draw(st.booleans()):
        dim = None
    check(op, [x], {"dim": dim, "keepdim": data.draw(st.booleans())})


# --------------------------------------------------------------------------- shape ops


@SETTINGS
@given(data=st.data(), op=st.sampled_from([L.ReshapeOp, L.ViewOp]))
def test_reshape_view(data: st.DataObject, op: type) -> None:
    x = data.draw(tensors(shapes(), st.sampled_from(ALL)))
    factors = [p for p in range(1, x.numel() + 1) if x.numel() % p == 0]
    shape: list[int] = []
    rest = x.numel()
    for _ in range(data.draw(st.integers(0, 3))):
        f = data.draw(st.sampled_from([p for p in factors if rest % p == 0]))
        shape.append(f)
        rest //= f
    shape.append(rest)
    if data.draw(st.booleans()):
        shape[data.draw(st.integers(0, len(shape) - 1))] = -1
    if rest == 1 and data.draw(st.booleans()) and -1 not in shape:
        shape.pop()
    check(op, [x], {"shape" if op is L.ReshapeOp else "size": tuple(shape)})


@SETTINGS
@given(data=st.data())
def test_permute_transpose(data: st.DataObject) -> None:
    x = data.draw(tensors(shapes(), st.sampled_from(ALL)))
    r = x.ndim
    perm = data.draw(st.permutations(range(r)))
    perm = [p - r if data.draw(st.booleans()) else p for p in perm]
    check(L.PermuteOp, [x], {"dims": tuple(perm)})
    rr = max(r, 1)
    d0, d1 = data.draw(st.integers(-rr, rr - 1)), data.draw(st.integers(-rr, rr - 1))
    check(L.TransposeOp, [x], {"dim0": d0, "dim1": d1})


@SETTINGS
@given(x=tensors(shapes(), st.sampled_from(ALL)), op=st.sampled_from([L.ContiguousOp,
                                                                       L.CloneOp]))
def test_identities(x: torch.Tensor, op: type) -> None:
    check(op, [x])


@SETTINGS
@given(data=st.data())
def test_flatten_unsqueeze_squeeze(data: st.DataObject) -> None:
    x = data.draw(tensors(shapes(max_side=3), st.sampled_from(ALL)))
    r = max(x.ndim, 1)
    s = data.draw(st.integers(-r, r - 1))
    e = data.draw(st.integers(-r, r - 1))
    if s % r <= e % r:
        check(L.FlattenOp, [x], {"start_dim": s, "end_dim": e})
    check(L.UnsqueezeOp, [x], {"dim": data.draw(st.integers(-x.ndim - 1, x.ndim))})
    check(L.SqueezeOp, [x], {"dim": data.draw(st.none() | st.integers(-r, r - 1) |
                                               dims_of(x.ndim).filter(lambda d: d is not None))})


@SETTINGS
@given(data=st.data())
def test_expand(data: st.DataObject) -> None:
    target = data.draw(shapes())
    x = data.draw(tensors(data.draw(broadcast_shapes(target)), st.sampled_from(ALL)))
    lead = len(target) - x.ndim
    size = [-1 if i >= lead and x.shape[i - lead] == s and data.draw(st.booleans()) else s
            for i, s in enumerate(target)]
    check(L.ExpandOp, [x], {"size": tuple(size)})


@SETTINGS
@given(data=st.data())
def test_split_chunk(data: st.DataObject) -> None:
    x = data.draw(tensors(shapes(min_rank=1, max_side=6), st.sampled_from(ALL)))
    dim = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[dim]
    if data.draw(st.booleans()):
        arg: Any = data.draw(st.integers(1, n + 1))
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
        arg = tuple(b - a for a, b in zip([0, *cuts], [*cuts, n]))
    check(L.SplitOp, [x], {"split_size_or_sections": arg, "dim": dim})
    check(L.ChunkOp, [x], {"chunks": data.draw(st.integers(1, n + 1)), "dim": dim})


@SETTINGS
@given(data=st.data(), op=st.sampled_from([L.CatOp, L.StackOp]))
def test_cat_stack(data: st.DataObject, op: type) -> None:
    shape = data.draw(shapes(min_rank=1 if op is L.CatOp else 0))
    r = len(shape) + (op is L.StackOp)
    dim = data.draw(st.integers(-r, r - 1))
    xs = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        if op is L.CatOp:
            s[dim % len(shape)] = data.draw(st.integers(0, 3))
        xs.append(data.draw(tensors(tuple(s), st.sampled_from(ALL))))
    if op is L.CatOp and data.draw(st.booleans()):
        xs.append(torch.zeros(0))  # legacy empty 1-D tensors are skipped
    check(op, [xs], {"dim": dim})


@st.composite
def getitem_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, list[torch.Tensor], Any]:
    x = draw(tensors(shapes(min_rank=1), st.sampled_from(ALL)))
    items: list[Any] = []
    idx: list[torch.Tensor] = []
    # (a 0-d index tensor is read as an int by torch: data-dependent, so not drawn)
    index_shape = draw(shapes(min_rank=1, max_rank=2, max_side=3))
    n_dims = draw(st.integers(1, x.ndim))
    ellipsis_at = draw(st.none() | st.integers(0, n_dims))
    for d in range(n_dims):
        if ellipsis_at == d:
            items.append(...)
        if draw(st.integers(0, 5)) == 0:
            items.append(None)
        n = x.shape[d] if ellipsis_at is None or d < ellipsis_at else \
            x.shape[x.ndim - n_dims + d]
        kind = draw(st.sampled_from(["int", "slice", "tensor"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            lo = draw(st.none() | st.integers(-n - 1, n + 1))
            hi = draw(st.none() | st.integers(-n - 1, n + 1))
            items.append(slice(lo, hi, draw(st.none() | st.integers(1, 3))))
        else:
            g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
            t = torch.randint(-n, n, index_shape, generator=g)
            idx.append(t.to(draw(st.sampled_from([torch.int64, torch.int32]))))
            items.append(OperandRef(len(idx) - 1))
    if ellipsis_at == n_dims:
        items.append(...)
    index: Any = tuple(items)
    if len(items) == 1 and draw(st.booleans()):
        index = items[0]
    return x, idx, index


@SETTINGS
@given(args=getitem_inputs())
def test_getitem(args: tuple[torch.Tensor, list[torch.Tensor], Any]) -> None:
    x, idx, index = args
    check(L.GetitemOp, [x, idx], {"index": index})


def test_getitem_torch_index_order() -> None:
    x = torch.randn(5, 6, 7)
    i = torch.tensor([1, -2])
    for index in [(0, slice(None), OperandRef(0)), (OperandRef(0), slice(None), 0),
                  (slice(None), OperandRef(0), 0), (OperandRef(0), None, OperandRef(1)),
                  (Ellipsis, OperandRef(0)), (OperandRef(0), slice(1, 4, 2), OperandRef(1))]:
        check(L.GetitemOp, [x, [i, i.flip(0)]], {"index": index})


@SETTINGS
@given(x=tensors(shapes(min_rank=2), st.sampled_from(ALL)), diagonal=st.integers(-3, 3),
       op=st.sampled_from([L.TriuOp, L.TrilOp]))
def test_triu_tril(x: torch.Tensor, diagonal: int, op: type) -> None:
    check(op, [x], {"diagonal": diagonal})


# --------------------------------------------------------------------------- creation


@SETTINGS
@given(start=st.integers(-5, 5) | st.sampled_from([0.5, -1.25]),
       length=st.integers(0, 8), step=st.sampled_from([1, 2, -1, 0.5, -0.75, 3]),
       dtype=st.none() | st.sampled_from([torch.float32, torch.float64, torch.int64,
                                          torch.bfloat16]),
       only_end=st.booleans())
def test_arange(start: Any, length: int, step: Any, dtype: torch.dtype | None,
                only_end: bool) -> None:
    if dtype is not None and not is_float(dtype) and (isinstance(start, float) or
                                                      isinstance(step, float)):
        dtype = None
    end = start + length * step
    if only_end:
        check(L.ArangeOp, [], {"start": abs(end), "dtype": dtype})
    else:
        check(L.ArangeOp, [], {"start": start, "end": end, "step": step, "dtype": dtype})


@SETTINGS
@given(size=shapes(min_side=0), dtype=st.none() | st.sampled_from(ALL),
       fill=st.integers(-3, 3) | st.sampled_from([0.5, True, -math.inf]),
       op=st.sampled_from([L.ZerosOp, L.OnesOp, L.FullOp]))
def test_zeros_ones_full(size: tuple[int, ...], dtype: torch.dtype | None, fill: Any,
                         op: type) -> None:
    params: dict[str, Any] = {"size": size, "dtype": dtype}
    if op is L.FullOp:
        if dtype is not None and not is_float(dtype):
            fill = int(fill) if math.isfinite(fill) else 1
            if dtype == torch.bool:
                fill = bool(fill)
        params["fill_value"] = fill
    check(op, [], params)


@SETTINGS
@given(size=shapes(min_side=0), dtype=st.none() | st.sampled_from(ALL))
def test_empty(size: tuple[int, ...], dtype: torch.dtype | None) -> None:
    def zeros(**kw: Any) -> torch.Tensor:
        out = L.EmptyOp.ref(**kw)
        assert out.shape == size
        return torch.zeros_like(out)

    check(L.EmptyOp, [], {"size": size, "dtype": dtype}, reference=zeros)


@SETTINGS
@given(x=tensors(shapes(), st.sampled_from(ALL)), dtype=st.none() | st.sampled_from(ALL),
       op=st.sampled_from([L.ZerosLikeOp, L.OnesLikeOp, L.FullLikeOp]),
       fill=st.integers(-3, 3) | st.sampled_from([0.5, False]))
def test_like(x: torch.Tensor, dtype: torch.dtype | None, op: type, fill: Any) -> None:
    params: dict[str, Any] = {"dtype": dtype}
    if op is L.FullLikeOp:
        target = dtype or x.dtype
        params["fill_value"] = (bool(fill) if target == torch.bool else
                                fill if is_float(target) else int(fill))
    check(op, [x], params)
