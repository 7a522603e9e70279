"""Property tests of the core ltorch ops and their decompositions into prims.

Every core op goes through `thunder_ir.testing.check_decomposition_property`: hypothesis
draws inputs from the op's strategy (`thunder_ir.testing.op_inputs`), the one-op program is
decomposed and run with the reference interpreter, and the result is compared with eager
torch under the float64-reference rule (integer and bool results exactly). Tables and edge
cases the strategies do not reach follow.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.traits import Pure

from thunder_ir.dialects import ltorch
from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects import ltorch_index as I
from thunder_ir.dialects import ltorch_scan as S
from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.ltorch_base import LTORCH
from thunder_ir.dialects.program import Program, main_function
from thunder_ir.dialects.types import TensorType, number_type, tensor_type
from thunder_ir.passes.decompositions import load_rules
from thunder_ir.passes.promotion import result_dtype
from thunder_ir.runtime.interpreter import run
from thunder_ir.testing import (
    OpSample,
    check_decomposition,
    check_decomposition_property,
    decompose,
)

MAX_EXAMPLES = 12
NN_MODULES = ("thunder_ir.dialects.ltorch_nn", "thunder_ir.dialects.ltorch_activation")
"""The ltorch modules whose ops `tests/test_decomp_nn.py` tests; every other ltorch op (a
new module's included) is tested here, so that no op falls between the two."""
CORE_OPS = [op for op in LTORCH if op.__module__ not in NN_MODULES]

ALL = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def check(op: type[ThunderOp], operands: list[Any], params: dict[str, Any] | None = None,
          **kw: Any) -> Any:
    """`check_decomposition`, and the decomposed program holds prims only."""
    module = check_decomposition(op, operands, params, **kw)
    only_prims(module, OpSample(operands, dict(params or {})))
    return module


# --------------------------------------------------------------------------- tables


def test_every_core_op_is_declared_and_decomposed() -> None:
    rules = load_rules()
    assert {op.__module__ for op in CORE_OPS} >= {L.__name__, S.__name__}
    assert {op.__module__ for op in LTORCH} >= set(NN_MODULES)  # (the names are still right)
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


# --------------------------------------------------------------------------- properties


def only_prims(module: ModuleOp, sample: OpSample) -> None:
    """The decomposed program holds prims only."""
    names = {o.name for o in main_function(module).body.block.ops
             if not isinstance(o, func.ReturnOp)}
    assert all(n.startswith("prims.") for n in names), f"left {names}"


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom:UserWarning")  # correction >= n
@pytest.mark.parametrize("op", CORE_OPS, ids=lambda op: op.name)
def test_decomposition_matches_eager(op: type[ThunderOp]) -> None:
    """Inputs from `thunder_ir.testing.op_inputs`: shapes with broadcasting, every dtype the
    op takes, numbers on either side, special values, and the op's static arguments."""
    check_decomposition_property(op, max_examples=MAX_EXAMPLES, inspect=only_prims)


# --------------------------------------------------------------------------- edge cases


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


def test_getitem_torch_index_order() -> None:
    x = torch.randn(5, 6, 7)
    i = torch.tensor([1, -2])
    for index in [(0, slice(None), OperandRef(0)), (OperandRef(0), slice(None), 0),
                  (slice(None), OperandRef(0), 0), (OperandRef(0), None, OperandRef(1)),
                  (Ellipsis, OperandRef(0)), (OperandRef(0), slice(1, 4, 2), OperandRef(1))]:
        check(L.GetitemOp, [x, [i, i.flip(0)]], {"index": index})


def test_pow_half_exponents_follow_torchs_sqrt_fast_path() -> None:
    """torch.pow(x, ±0.5) with a number exponent is sqrt/rsqrt (nan at -inf, not inf)."""
    x = torch.tensor([-float("inf"), float("inf"), -0.0, -4.0, 2.5])
    for e in (0.5, -0.5, 2.0):
        check_decomposition(L.PowOp, [x, e], {})


# --------------------------------------------------------------------------- float rule


_FLOAT_PARAMS: dict[str, list[dict[str, Any]]] = {
    "ltorch.add": [{"alpha": 1}, {"alpha": 0.5}, {"alpha": True}, {"alpha": None}],
    "ltorch.sub": [{"alpha": 2}, {"alpha": True}],
    "ltorch.div": [{"rounding_mode": None}, {"rounding_mode": "trunc"},
                   {"rounding_mode": "floor"}, {"rounding_mode": "up"}],
    "ltorch.round": [{"decimals": 0}, {"decimals": 2}],
    "ltorch.gelu": [{"approximate": "none"}, {"approximate": "tanh"},
                    {"approximate": "cubic"}],
}
"""Params the float rule is checked with, those eager refuses included."""


def test_the_float_rule_agrees_with_the_meta_kernels() -> None:
    """Every op listed as float-preserving (`float_result`): for each floating dtype, for
    shapes equal, broadcasting and not, 0-d included, with numbers in either place, and
    params eager takes or refuses, the rule either leaves the answer to the meta kernel
    (None) or gives exactly the type the meta kernel gives; never a type where the meta
    kernel raises eager's error."""
    from thunder_ir.dialects.ltorch_base import float_result
    from thunder_ir.dialects.ltorch_rules import float_preserving
    from thunder_ir.dialects.torch import meta_value, type_of_meta

    ops = list(float_preserving())
    shapes = [((2, 3), (2, 3)), ((), ()), ((2, 3), (3,)), ((2, 1), (1, 4)), ((2, 3), ()),
              ((2, 3), (4,)), ((0, 3), (1, 3))]
    numbers = [number_type(int), number_type(float), number_type(bool)]
    answered = 0
    for cls in ops:
        binary = len(cls.SIGNATURE) >= 2 and cls.SIGNATURE[1] in ("other", "exponent")
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            cases: list[list[Any]] = []
            for a, b in shapes:
                ta, tb = tensor_type(a, dtype), tensor_type(b, dtype)
                cases += [[ta, tb], [ta, *numbers[:1]], [numbers[1], tb],
                          [ta, tensor_type(b, torch.float64 if dtype != torch.float64
                                           else torch.float32)]] if binary else [[ta]]
            for types in cases:
                for params in _FLOAT_PARAMS.get(cls.name, [{}]):
                    fast = float_result(cls, types, params)
                    try:
                        meta = type_of_meta(
                            cls.ref(*[meta_value(t) for t in types], **{
                                k: v for k, v in params.items() if v is not None}), "cpu")
                    except Exception:  # eager's error: the rule must not answer
                        assert fast is None, (cls.name, types, params)
                        continue
                    if fast is not None:
                        answered += 1
                        assert fast == meta, (cls.name, types, params, fast, meta)
    assert answered > 500  # the rule answers most of the cases it was written for


# --------------------------------------------------------------------------- type rules


def _type_rule_cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """``(op class, operand types, params)`` for every op declaring a type rule:
    the plain cases each rule was written for, and the ones around it that eager types
    otherwise or refuses (other dtypes, dims out of range or repeated, sizes that do not
    match, empty and 0-d tensors, half types, params it leaves to the meta kernel)."""
    from thunder_ir.dialects import ltorch_nn as N

    f32, f64, bf16, i64, i32 = (torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                torch.int32)
    cases: list[tuple[Any, list[Any], dict[str, Any]]] = []
    shapes = [(2, 3, 4), (5,), (), (0, 3), (2, 1, 4)]
    dims: list[Any] = [None, (), 0, -1, (0, 2), (2, 0), (0, 0), 3, -4, (1,), [1]]
    for cls in (L.SumOp, L.MeanOp, L.AmaxOp, L.AminOp):
        for dtype in (f32, f64, bf16, i64, torch.bool):
            for shape in shapes:
                for dim in dims:
                    for keepdim in (None, True, False):
                        params: dict[str, Any] = {"dim": dim}
                        if keepdim is not None:
                            params["keepdim"] = keepdim
                        if cls in (L.SumOp, L.MeanOp):
                            params["dtype"] = None
                        cases.append((cls, [tensor_type(shape, dtype)], params))
        if cls in (L.SumOp, L.MeanOp):
            cases.append((cls, [tensor_type((2, 3), f32)], {"dim": 1, "dtype": f64}))
    cat_lists = [[(2, 3), (4, 3)], [(2, 3), (2, 5)], [(2, 3), (2, 3), (2, 3)], [(2, 3)],
                 [(2, 3), (3, 3)], [(2, 3), (3,)], [(0,), (2, 3)], [(), ()], [(2, 0), (2, 3)],
                 [(1, 4, 2), (1, 4, 5)]]
    for shapes_ in cat_lists:
        for dim in (0, 1, -1, -2, 2, -3):
            for dtypes in ((f32, f32), (bf16, bf16), (i64, i64), (f32, f64)):
                types = [tensor_type(s, dtypes[i % 2]) for i, s in enumerate(shapes_)]
                cases.append((L.CatOp, [types], {"dim": dim}))
    xs = [(2, 3), (3,), (4, 2, 3), (), (2, 4)]
    ws = [(5, 3), (5, 4), (3,), (5, 3, 1)]
    for x in xs:
        for w in ws:
            for b in (None, (5,), (4,), (1,)):
                for dtype in (f32, bf16, i64):
                    cases.append((N.LinearOp, [tensor_type(x, dtype), tensor_type(w, dtype),
                                               None if b is None else tensor_type(b, dtype)],
                                  {}))
        cases.append((N.LinearOp, [tensor_type(x, f32), tensor_type((5, 3), f64), None], {}))
    pairs = [((2, 3), (3, 4)), ((2, 3), (4, 5)), ((5, 2, 3), (3, 4)), ((5, 2, 3), (3,)),
             ((3,), (5, 3, 4)), ((2, 3), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)),
             ((5, 1, 2, 3), (4, 3, 6)), ((5, 2, 3), (4, 3, 6)), ((3,), (3,)), ((3,), (3, 4)),
             ((2, 3), (3,)), ((0, 2, 3), (3, 4)), ((5, 2, 3), (1, 3, 4)),
             ((5, 2, 0), (5, 0, 4)), ((2, 2, 3), (2, 4, 5))]
    for a, b in pairs:
        for dtypes in ((f32, f32), (f64, f64), (bf16, bf16), (i64, i64), (f32, f64)):
            cases.append((N.MatmulOp, [tensor_type(a, dtypes[0]), tensor_type(b, dtypes[1])],
                          {}))
    for idx in ((2, 5), (), (3,)):
        for idx_dtype in (i64, i32, f32):
            for w, w_dtype in (((10, 4), f32), ((10, 4), bf16), ((10,), f32), ((10, 4), i64)):
                for padding_idx in (None, 1):
                    cases.append((N.EmbeddingOp, [tensor_type(idx, idx_dtype),
                                                  tensor_type(w, w_dtype)],
                                  {"padding_idx": padding_idx, "max_norm": None,
                                   "norm_type": 2.0, "scale_grad_by_freq": False,
                                   "sparse": False}))
    cases += _more_type_rule_cases()
    return cases


def _more_type_rule_cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """Comparisons, ``where``, ``masked_fill``, softmax, ``index_add``, ``arange``, the
    losses, layer norm and the backward ops autodiff emits for them."""
    from thunder_ir.dialects import ltorch_nn as N

    f32, f64, bf16, i64, i32, b8 = (torch.float32, torch.float64, torch.bfloat16,
                                    torch.int64, torch.int32, torch.bool)
    t, n = tensor_type, number_type
    cases: list[tuple[Any, list[Any], dict[str, Any]]] = []
    pairs = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 3), (4,)), ((), (2,))]
    for cls in (L.EqOp, L.NeOp, L.LtOp, L.LeOp, L.GtOp, L.GeOp):
        for da, db in ((f32, f32), (i64, i64), (b8, b8), (f32, f64)):
            for a, b in pairs:
                cases.append((cls, [t(a, da), t(b, db)], {}))
            cases += [(cls, [t((2, 3), da), n(int)], {}), (cls, [n(float), t((2,), da)], {})]
    for cond in (t((2, 3), b8), t((3,), b8), t((4,), b8), t((2, 3), f32)):
        for x, y in ((t((2, 3), f32), t((2, 3), f32)), (t((3,), f32), n(float)),
                     (n(int), t((2, 1), f32)), (t((2, 3), i64), n(int)),
                     (t((2, 3), f32), t((2, 3), f64)), (t((1, 3), i64), t((2, 1), i64))):
            cases.append((L.WhereOp, [cond, x, y], {}))
    for x in (t((2, 3), f32), t((2, 3), i64)):
        for mask in (t((2, 3), b8), t((3,), b8), t((2, 1, 3), b8), t((4,), b8),
                     t((2, 3), f32)):
            for value in (0.5, -float("inf"), 1, True):
                cases.append((L.MaskedFillOp, [x, mask], {"value": value}))
    for cls in (N.SoftmaxOp, N.LogSoftmaxOp, S.CumsumOp):
        for x in (t((2, 3), f32), t((2, 3), bf16), t((2, 3), i64), t((), f32), t((5,), f32)):
            for dim in (0, -1, 2, -3):
                for dtype in (None, f64):
                    cases.append((cls, [x], {"dim": dim, "dtype": dtype}))
    for x, index, source, dim in (((4, 3), (2,), (2, 3), 0), ((4, 3), (5,), (4, 5), 1),
                                  ((4, 3), (5,), (4, 5), -1), ((4, 3), (2,), (3, 3), 0),
                                  ((4, 3), (2,), (2, 4), 0), ((4, 3), (2, 1), (2, 3), 0),
                                  ((4, 3), (2,), (2, 3), 2), ((4,), (3,), (3,), 0),
                                  ((2, 4, 3), (1,), (2, 1, 3), -2), ((4, 3), (2,), (2,), 0)):
        for dx, di, ds in ((f32, i64, f32), (i64, i32, i64), (f32, f32, f32),
                           (f32, i64, f64), (bf16, i64, bf16)):
            for alpha in (1, 2, -0.5, True):
                cases.append((I.IndexAddOp, [t(x, dx), t(index, di), t(source, ds)],
                              {"dim": dim, "alpha": alpha}))
            cases.append((I.IndexCopyOp, [t(x, dx), t(index, di), t(source, ds)],
                          {"dim": dim}))
    for start, end, step in ((0, 5, 1), (2, 10, 3), (10, 0, -2), (5, 0, 1), (0, 5, 0),
                             (0.5, 3, 1), (0, 0, 1), (3, None, 1), (-7, 7, 4)):
        for dtype in (None, i64, f32):
            cases.append((L.ArangeOp, [], {"start": start, "end": end, "step": step,
                                           "dtype": dtype, "device": "cpu"}))
    for x in (t((4, 5), f32), t((4, 5), bf16), t((4, 5), i64), t((5,), f32),
              t((2, 5, 3), f32)):
        for target in (t((4,), i64), t((4,), i32), t((3,), i64), t((4, 5), f32)):
            for weight in (None, t((5,), f32)):
                for reduction in ("mean", "sum", "none", "bad"):
                    for smoothing in (0.0, 0.1):
                        cases.append((N.CrossEntropyOp, [x, target, weight], {
                            "size_average": None, "ignore_index": -1, "reduce": None,
                            "reduction": reduction, "label_smoothing": smoothing}))
                    if weight is None:
                        cases.append((N.NllLossForwardOp, [x, target, weight],
                                      {"reduction": reduction, "ignore_index": -100}))
    logp, target, total = t((4, 5), f32), t((4,), i64), t((), f32)
    for grad, reduction in ((t((), f32), "mean"), (t((), f32), "sum"), (t((4,), f32), "none"),
                            (t((4,), f32), "mean"), (t((), f64), "mean")):
        for tw in (total, t((1,), f32)):
            cases.append((N.NllLossBackwardOp, [grad, logp, target, tw, None],
                          {"reduction": reduction, "ignore_index": -100}))
    for grad, x in ((t((2, 3), f32), t((2, 3), f32)), (t((2, 3), bf16), t((2, 3), bf16)),
                    (t((2, 3), f32), t((3,), f32)), (t((2, 3), i64), t((2, 3), i64))):
        for approximate in ("none", "tanh", "cubic"):
            cases.append((A.GeluBackwardOp, [grad, x], {"approximate": approximate}))
        cases.append((A.SoftplusBackwardOp, [grad, x], {"beta": 2.0, "threshold": 3}))
        cases.append((A.HardswishBackwardOp, [grad, x], {}))
        cases.append((A.HardsigmoidBackwardOp, [grad, x], {}))
        for cls in (N.SoftmaxBackwardOp, N.LogSoftmaxBackwardOp):
            for dim, input_dtype in ((-1, grad.dtype), (1, grad.dtype), (2, grad.dtype),
                                     (-1, f64)):
                cases.append((cls, [grad, x], {"dim": dim, "input_dtype": input_dtype}))
    for dtype in (f32, f64, bf16, i64):
        x = t((2, 3, 4), dtype)
        for shape in ((4,), (3, 4), (5,), (2, 3, 4, 1)):
            for affine in (None, t(shape, dtype), t((4,), f64)):
                for bias in (None, affine):
                    params = {"normalized_shape": shape, "eps": 1e-5}
                    cases += [(N.LayerNormOp, [x, affine, bias], params),
                              (N.NativeLayerNormOp, [x, affine, bias], params)]
                    stats = t((*x.sizes[:3 - len(shape)], *(1,) * len(shape)), dtype)
                    for mask in ((1, 1, 1), (1, 0, 0), (0, 1, 1)):
                        for saved in ((stats, stats), (None, None)):
                            cases.append((N.LayerNormBackwardOp, [x, x, affine, bias, *saved],
                                          {**params, "output_mask": mask}))
    every = slice(None)
    for x in (t((2, 16, 8), f32), t((2, 16, 8), i64), t((2, 0, 8), f32)):
        for idx in (t((1,), i64), t((3, 2), i64), t((2,), b8), t((16,), b8), t((1,), f32)):
            for index in ((every, OperandRef(0), every), (OperandRef(0),), (every, OperandRef(0)),
                          (every, every, OperandRef(0)), (every, OperandRef(0), slice(1, 3)),
                          (every, OperandRef(0), 0), (Ellipsis, OperandRef(0)),
                          (every, every, every, OperandRef(0)), (None, OperandRef(0))):
                cases.append((L.GetitemOp, [x, [idx]], {"index": index}))
        cases.append((L.GetitemOp, [x, [t((1,), i64), t((1,), i64)]],
                      {"index": (OperandRef(0), OperandRef(1))}))
    for x in (t((4, 6, 8), f32), t((2, 0, 8), i64), t((5,), f32)):
        for index in (slice(None), (slice(None), slice(0, None, 2)), (slice(1, 3), -1),
                      (Ellipsis, slice(None, None, 3)), (None, 1, slice(-3, None)),
                      (slice(2, 100), None), (3,), (-5,), (slice(None, -2),), (4, 0),
                      (slice(None), slice(None), slice(None), 0), (slice(0, 4, -1),),
                      (Ellipsis, Ellipsis), (1, Ellipsis, slice(1, 2)), (True,)):
            cases.append((L.GetitemOp, [x, []], {"index": index}))
    cases += _vision_type_rule_cases()
    cases += _shape_type_rule_cases()
    return cases


def _shape_type_rule_cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """reshape and view (with and without -1, sizes that do not divide or match, empty
    tensors, 0-d), permute, transpose and unsqueeze (dims out of range, repeated)."""
    f32, i64 = torch.float32, torch.int64
    t = tensor_type
    cases: list[tuple[Any, list[Any], dict[str, Any]]] = []
    shapes = [(2, 3, 4), (6,), (), (0, 3), (2, 1, 4)]
    targets = [(4, 6), (-1,), (2, -1), (-1, 4), (3, 8), (5, -1), (-1, -1), (1, 24), (),
               (1,), (0, -1), (3, 0), (2, 3, 4, 1), (-2, 12), (24,)]
    for shape in shapes:
        for target in targets:
            for dtype in (f32, i64):
                cases.append((L.ReshapeOp, [t(shape, dtype)], {"shape": target}))
                cases.append((L.ViewOp, [t(shape, dtype)], {"size": target}))
    for shape in ((2, 3, 4), (5,), (), (2, 0)):
        rank = len(shape)
        for dims in ((2, 0, 1), (0, 1, 2), (-1, 0, 1), (0, 0, 1), (0, 1), (0,), (), (1, 0),
                     (0, 3, 1)):
            cases.append((L.PermuteOp, [t(shape, f32)], {"dims": dims}))
        for d0, d1 in ((0, 1), (0, -1), (1, 1), (0, rank), (-rank - 1, 0), (0, 0)):
            cases.append((L.TransposeOp, [t(shape, f32)], {"dim0": d0, "dim1": d1}))
        for d in range(-rank - 2, rank + 2):
            cases.append((L.UnsqueezeOp, [t(shape, i64)], {"dim": d}))
        for fmt in (None, torch.contiguous_format, torch.preserve_format, torch.channels_last):
            cases.append((L.CloneOp, [t(shape, f32)], {"memory_format": fmt}))
            cases.append((L.ContiguousOp, [t(shape, i64)], {"memory_format": fmt}))
        for start, end in ((0, -1), (1, 2), (0, 0), (2, 1), (-2, -1), (0, 3)):
            cases.append((L.FlattenOp, [t(shape, f32)], {"start_dim": start, "end_dim": end}))
        for split in (1, 2, 3, 0, (1, 2), (2, 1, 1), (4,), (0, 3), (-1, 4)):
            for d in (0, 1, -1, 3):
                cases.append((L.SplitOp, [t(shape, f32)],
                              {"split_size_or_sections": split, "dim": d}))
    for shape in ((1, 3), (2, 1, 4), (3,), (), (0, 3)):
        for size in ((2, 3), (4, -1), (2, 2, 4), (2, -1, 4), (-1, 2, 3), (5, 2, 1, 4), (3, 3),
                     (2, 0, 3), (1, 3), (4,), ()):
            cases.append((L.ExpandOp, [t(shape, f32)], {"size": size}))
    return cases


def _vision_type_rule_cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """Convolution, 2-d max pooling and batch norm."""
    from thunder_ir.dialects import ltorch_nn as N

    f32, f64, bf16 = torch.float32, torch.float64, torch.bfloat16
    t = tensor_type
    cases: list[tuple[Any, list[Any], dict[str, Any]]] = []
    for x, w in (((2, 4, 9), (6, 4, 3)), ((2, 4, 9, 8), (6, 2, 3, 3)),
                 ((1, 4, 5, 6, 7), (2, 4, 1, 2, 3)), ((2, 4, 9, 8), (6, 4, 3, 3)),
                 ((2, 4, 2, 2), (6, 4, 3, 3)), ((2, 3, 9, 8), (6, 4, 3, 3)),
                 ((0, 4, 9, 8), (6, 4, 3, 3))):
        n = len(x) - 2
        for dtype in (f32, bf16, torch.int64):
            for bias in (None, t((w[0],), dtype), t((5,), dtype)):
                for stride, padding, dilation, groups in (
                        ((1,) * n, (0,) * n, (1,) * n, 1), ((2,) * n, (1,) * n, (1,) * n, 1),
                        ((1,) * n, (2,) * n, (2,) * n, 2), ((1,) * n, (0,) * n, (1,) * n, 3),
                        ((0,) * n, (0,) * n, (1,) * n, 1), ((1,), (0,), (1,), 1)):
                    cases.append((N.ConvolutionOp, [t(x, dtype), t(w, dtype), bias], {
                        "stride": stride, "padding": padding, "dilation": dilation,
                        "groups": groups}))
    for x in (t((2, 3, 9, 8), f32), t((3, 9, 8), f32), t((2, 3, 9, 8), bf16),
              t((2, 3, 1, 1), f32), t((9, 8), f32)):
        for kernel, stride, padding, dilation in (((2, 2), (2, 2), (0, 0), (1, 1)),
                                                  ((3, 3), (1, 2), (1, 1), (1, 1)),
                                                  ((3, 2), (2, 1), (1, 0), (2, 1)),
                                                  ((2, 2), (2, 2), (2, 0), (1, 1)),
                                                  ((5, 5), (1, 1), (0, 0), (1, 1))):
            for ceil_mode in (False, True):
                cases.append((N.MaxPool2dWithIndicesOp, [x], {
                    "kernel_size": kernel, "stride": stride, "padding": padding,
                    "dilation": dilation, "ceil_mode": ceil_mode}))
    for dtype in (f32, f64, bf16):
        for x in ((4, 3, 5, 5), (4, 3), (4, 3, 7)):
            c = t((3,), dtype)
            for affine in ((None, None), (c, c), (t((4,), dtype), c)):
                for running in ((None, None), (c, c), (c, None)):
                    for training in (True, False):
                        cases.append((N.NativeBatchNormOp, [t(x, dtype), *affine, *running],
                                      {"training": training, "momentum": 0.1, "eps": 1e-5}))
    return cases


def test_the_type_rules_agree_with_the_meta_kernels() -> None:
    """Every rule an op declares (`ltorch_rules.type_rules`), on cases around its plain one:
    either it leaves the answer to the meta kernel (None) or it gives exactly the type
    the meta kernel gives; never a type where the meta kernel raises eager's error."""
    from thunder_ir.dialects.ltorch_rules import type_rules
    from thunder_ir.dialects.torch import meta_value, type_of_meta

    rules = type_rules()
    answered: dict[str, int] = {}
    for cls, types, params in _type_rule_cases():
        rule = rules[cls]
        fast = rule(types, params)
        metas = [[meta_value(t) for t in g] if isinstance(g, list) else
                 (None if g is None else meta_value(g)) for g in types]
        meta_params = {k: ("meta" if k == "device" else v) for k, v in params.items()}
        try:
            out = cls.ref(*metas, **meta_params)
            meta: Any = ([type_of_meta(o, "cpu") for o in out] if isinstance(out, list | tuple)
                         else type_of_meta(out, "cpu"))
        except Exception:  # eager's error: the rule must not answer
            assert fast is None, (cls.name, types, params, fast)
            continue
        if fast is not None:
            answered[cls.name] = answered.get(cls.name, 0) + 1
            assert fast == meta, (cls.name, types, params, fast, meta)
    assert set(answered) == {c.name for c in rules}  # every rule answers some case
    assert sum(answered.values()) > 600, answered


def test_the_symbolic_type_rules_agree_with_the_meta_kernels_over_symbols() -> None:
    """Every rule that also runs in a symbolic compile (``symbolic=True``), on operands
    whose sizes >= 2 are symbols (one symbol per size; one per distinct value, as a
    model's sizes share them; only the first operand's first dim, or every operand's
    first dim, as automatic dynamic makes a changed batch): where it answers, its sizes
    at the symbols' values are the type of the concrete case, and it records no more
    guards than the meta kernel does on the same symbolic operands (it exists to decide
    less, never more)."""
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, hints
    from thunder_ir.dialects.torch import meta_value

    def symbolic(types: list[Any], table: SymbolTable, shared: str) -> list[Any]:
        by_value: dict[int, Any] = {}

        def size(n: int, k: int, i: int) -> Any:
            if n < 2 or (shared == "batch" and (i > 0 or k > 0)) \
                    or (shared == "batches" and i > 0):
                return n
            if shared in ("each", "batch"):
                return table.size(n, SymbolSource(k, i))
            if n not in by_value:
                by_value[n] = table.size(n, SymbolSource(k, i))
            return by_value[n]

        def one(ty: Any, k: int) -> Any:
            if isinstance(ty, TensorType):
                return tensor_type([size(n, k, i) for i, n in enumerate(ty.sizes)],
                                   ty.dtype, ty.dev)
            if isinstance(ty, list):
                return [one(t, k) for t in ty]
            return ty

        return [one(ty, k) for k, ty in enumerate(types)]

    def at_hints(t: Any) -> Any:
        if isinstance(t, list):
            return [at_hints(x) for x in t]
        return tensor_type(hints(t.sizes), t.dtype, t.dev)

    def metas(types: list[Any]) -> list[Any]:
        return [[meta_value(t) for t in g] if isinstance(g, list) else
                (None if g is None else meta_value(g)) for g in types]

    answered: dict[str, int] = {}
    for cls, types, params in _type_rule_cases():
        if not cls.TYPE_RULE_SYMBOLIC:
            continue
        try:
            expected = cls.infer(*types, **params)
        except Exception:  # eager's error: the rule must not answer
            expected = None
        for shared in ("each", "value", "batch", "batches"):
            table = SymbolTable()
            with table.active():
                fast = cls.TYPE_RULE(symbolic(types, table, shared), params)
                at = None if fast is None else at_hints(fast)
            if fast is None:
                continue
            answered[cls.name] = answered.get(cls.name, 0) + 1
            assert at == expected, (cls.name, types, params, shared, at, expected)
            meta_table = SymbolTable()
            meta_params = {k: ("meta" if k == "device" else v) for k, v in params.items()}
            with meta_table.active(), meta_table.fake_mode:
                cls.ref(*metas(symbolic(types, meta_table, shared)), **meta_params)
            assert len(table.env.guards) <= len(meta_table.env.guards), (
                cls.name, types, params, shared)
    symbolic_rules = {c.name for c in LTORCH if c.TYPE_RULE_SYMBOLIC}
    assert symbolic_rules - set(answered) <= {"ltorch.index_add", "ltorch.arange"}, (
        symbolic_rules - set(answered))
    assert sum(answered.values()) > 600, answered


def test_the_symbolic_attention_rule_agrees_with_the_meta_kernel() -> None:
    """``scaled_dot_product_attention`` in a symbolic compile (grouped heads too): where
    its closed form answers, the type at the symbols' values is the meta kernel's on the
    concrete shapes, with no more guards than the meta kernel records over the symbols."""
    from thunder_ir.dialects import ltorch_nn as N
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, hints
    from thunder_ir.dialects.torch import meta_value

    f32, bf16 = torch.float32, torch.bfloat16
    answered = 0
    for q, k, v in (((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 3)),
                    ((2, 4, 5, 8), (2, 2, 6, 8), (2, 2, 6, 8)),
                    ((2, 4, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8)),
                    ((2, 4, 5, 8), (2, 2, 6, 8), (2, 4, 6, 8)),
                    ((2, 4, 5, 8), (3, 2, 6, 8), (3, 2, 6, 8)),
                    ((4, 5, 8), (4, 6, 8), (4, 6, 8)), ((5, 8), (6, 8), (6, 2)),
                    ((1, 4, 5, 8), (2, 1, 6, 8), (2, 1, 6, 8))):
        for dtype in (f32, bf16):
            for gqa in (False, True):
                types = [tensor_type(s, dtype) for s in (q, k, v)]
                params = {"dropout_p": 0.0, "is_causal": False, "scale": None,
                          "enable_gqa": gqa}
                try:
                    expected = N.ScaledDotProductAttentionOp.ref(
                        *[meta_value(t) for t in types], None, **params)
                    want: Any = tensor_type(tuple(expected.shape), expected.dtype)
                except Exception:
                    want = None
                for batch_only in (False, True):
                    def symbolic(table: SymbolTable, batch_only: bool = batch_only,
                                 types: list[Any] = types) -> list[Any]:
                        by_value: dict[int, Any] = {}
                        out = []
                        for j, t in enumerate(types):
                            sizes = [n if n < 2 or (batch_only and i > 0) else
                                     by_value.setdefault(n, table.size(n, SymbolSource(j, i)))
                                     for i, n in enumerate(t.sizes)]
                            out.append(tensor_type(sizes, t.dtype, t.dev))
                        return out

                    table, meta_table = SymbolTable(), SymbolTable()
                    with table.active():
                        fast = N._attention_type(*symbolic(table), gqa)
                        at = None if fast is None else tensor_type(hints(fast.sizes),
                                                                   fast.dtype, fast.dev)
                    if fast is None:
                        continue
                    answered += 1
                    assert at == want, (q, k, v, gqa, at, want)
                    with meta_table.active(), meta_table.fake_mode:
                        N.ScaledDotProductAttentionOp.ref(
                            *[meta_value(t) for t in symbolic(meta_table)], None, **params)
                    assert len(table.env.guards) <= len(meta_table.env.guards)
    assert answered >= 12


def test_the_basic_index_layout_agrees_with_torch_views_over_symbols() -> None:
    """`layout.basic_index_layout` (a symbolic compile's layout of ``x[ints, slices]``,
    without the view kernels) gives the strides and storage offset torch's own view of a
    fake tensor over the same symbols gives, on contiguous, transposed and offset
    layouts; it leaves ``None`` in the index and negative steps to the kernels."""
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, proved_equal
    from thunder_ir.frontend.layout import basic_index_layout, contiguous_strides

    answered = 0
    for shape in ((4, 6, 8), (5, 3), (7,)):
        for order in ("contiguous", "transposed", "offset"):
            for index in (slice(None), (slice(None), slice(0, None, 2)), (slice(1, 3), -1),
                          (Ellipsis, slice(None, None, 3)), (1, slice(-3, None)),
                          (slice(2, 100),), (3,), (-2,), (slice(None, -2),), (2, 0),
                          (Ellipsis, 1), (slice(1, None, 2), Ellipsis, slice(1, 2)),
                          (None, 1), (slice(None, None, -1),), ()):
                for batch_only in (False, True):
                    table = SymbolTable()
                    with table.active():
                        sizes = [n if batch_only and i > 0 else
                                 table.size(n, SymbolSource(0, i))
                                 for i, n in enumerate(shape)]
                        strides: Any = contiguous_strides(sizes)
                        offset: Any = 0
                        if order == "transposed" and len(sizes) > 1:
                            strides = (*strides[:-2], strides[-1], strides[-2])
                            strides = tuple(strides)
                        if order == "offset":
                            offset = 2 * sizes[-1]
                        try:
                            with table.fake_mode:
                                n = offset + sum((s - 1) * st for s, st in
                                                 zip(sizes, strides)) + 1
                                base = torch.empty(n, device="meta").as_strided(
                                    sizes, strides, offset)
                                view = base[index]
                        except (IndexError, ValueError):  # (torch's errors: no step < 0)
                            continue
                        got = basic_index_layout(sizes, strides, offset, index)
                        if got is None:
                            assert index == (None, 1), index
                            continue
                        answered += 1
                        want = (tuple(view.stride()), view.storage_offset())
                        assert len(got[0]) == len(want[0]), (shape, order, index)
                        if not all(proved_equal(a, b) for a, b in zip(
                                (*got[0], got[1]), (*want[0], want[1]))):
                            # (the kernel decided with a guard, x[-3:] at s1 >= 3; the
                            # closed form may hold for every size, max(s1 - 3, 0): it must
                            # be eager's layout at each size, those the guard excludes too)
                            _index_layout_at_sizes(sizes, strides, offset, index, got)
    assert answered > 100, answered


def _index_layout_at_sizes(sizes: Any, strides: Any, offset: Any, index: Any,
                           got: Any) -> None:
    """``got`` (a basic index's layout over symbols) evaluated at sizes 2..9 of each
    symbol is the layout of eager's ``x[index]`` of a tensor of those sizes."""
    symbolic = [n.node.expr for n in sizes if isinstance(n, torch.SymInt)]

    def at(x: Any, values: dict[Any, int]) -> int:
        return x if type(x) is int else int(x.node.expr.xreplace(values))

    for k in range(2, 10):
        values = dict.fromkeys(symbolic, k)
        dims = [at(n, values) for n in sizes]
        steps = [at(st, values) for st in strides]
        start = at(offset, values)
        n = start + sum((d - 1) * st for d, st in zip(dims, steps)) + 1
        try:
            view = torch.empty(n, device="meta").as_strided(dims, steps, start)[index]
        except IndexError:  # (an int index out of range at this size: eager's error)
            continue
        layout = (tuple(at(st, values) for st in got[0]), at(got[1], values))
        assert layout == (view.stride(), view.storage_offset()), (dims, index, got)


def test_the_closed_form_unbind_agrees_with_its_meta_run_over_symbols() -> None:
    """`dialects.torch.unbind_call` (a symbolic compile's ``unbind`` without the meta run)
    says what torch's run of ``unbind`` on fake stand-ins over the same symbols says: result
    types, views, strides, storage offsets and ``requires_grad``, on contiguous, permuted
    and offset layouts, with and without grad; it leaves a symbolic count to the run."""
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, proved_equal
    from thunder_ir.dialects.torch import meta_call, unbind_call
    from thunder_ir.frontend.layout import contiguous_strides

    answered = 0
    for shape in ((3, 4, 5), (2, 6), (4,)):
        for dim in range(-len(shape), len(shape)):
            for order in ("contiguous", "permuted", "offset"):
                for grad in (False, True):
                    table = SymbolTable()
                    with table.active():
                        sizes = [n if i == dim % len(shape) else
                                 table.size(n, SymbolSource(0, i))
                                 for i, n in enumerate(shape)]
                        strides: Any = contiguous_strides(sizes)
                        offset: Any = 2 * sizes[-1] if order == "offset" else 0
                        if order == "permuted":
                            strides = tuple(reversed(contiguous_strides(sizes[::-1])))
                        with table.fake_mode:
                            n = offset + sum((s - 1) * st for s, st in
                                             zip(sizes, strides)) + 1
                            stand_in = torch.empty(n, device="meta").as_strided(
                                sizes, strides, offset)
                        block = func.FuncOp("f", ((tensor_type(sizes, torch.float32),), ()))
                        operands = list(block.body.block.args)
                        args = [OperandRef(0), dim]
                        with torch.set_grad_enabled(grad):
                            closed = unbind_call("torch.Tensor.unbind", operands, args, {},
                                                 [stand_in], [True])
                            # (the same function by another path: the meta run itself)
                            run = meta_call("torch._C.TensorBase.unbind", operands, args,
                                            {}, [True], [stand_in.detach()])
                        assert closed is not None
                        answered += 1
                        assert closed.result_types == run.result_types
                        assert (closed.layout, closed.requires_grad, closed.kind,
                                closed.nograd, closed.mutated, closed.views) == (
                            run.layout, run.requires_grad, run.kind, run.nograd,
                            run.mutated, run.views), (shape, dim, order, grad)
                        for (s1, o1), (s2, o2) in zip(closed.strides, run.strides,
                                                      strict=True):
                            assert all(proved_equal(a, b) for a, b in zip(s1, s2,
                                                                          strict=True))
                            assert proved_equal(o1, o2), (shape, dim, order, o1, o2)
                        symbolic = [table.size(5, SymbolSource(1, 0))]
                        count = func.FuncOp("g", ((tensor_type(symbolic, torch.float32),),
                                                  ()))
                        assert unbind_call("torch.unbind", list(count.body.block.args),
                                           [OperandRef(0), 0], {}, [stand_in], None) is None
    assert answered >= 30


def test_the_permuted_dense_layout_agrees_with_the_fake_kernels_over_symbols() -> None:
    """`layout.permuted_dense` (a symbolic compile's layout of an elementwise result over
    operands of static strides, without a fake kernel run) gives the strides the fake
    kernel gives over the same symbols: transposed heads, slices of them, broadcast
    operands, numbers; where it answers, they agree at the symbols' values and are proved
    equal as expressions."""
    from thunder_ir.dialects.base import build
    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable, hint, proved_equal
    from thunder_ir.frontend.layout import _asked_layouts, permuted_dense

    f32 = torch.float32
    # (sizes at batch 3, strides, offset): batch-outermost layouts of static strides
    heads = ((3, 4, 16, 16), (1024, 16, 64, 1), 0)
    half = ((3, 4, 16, 8), (1024, 16, 64, 1), 8)
    dense_half = ((3, 4, 16, 8), (512, 8, 32, 1), 0)
    cos = ((1, 1, 16, 16), (256, 256, 16, 1), 0)
    row = ((16,), (1,), 0)
    contiguous = ((3, 4, 16, 16), (1024, 256, 16, 1), 0)
    channels = ((3, 4, 5, 6), (120, 1, 24, 4), 0)
    cases = [(L.NegOp, [half]), (L.ExpOp, [heads]), (L.MulOp, [heads, cos]),
             (L.AddOp, [heads, contiguous]), (L.MulOp, [half, dense_half]),
             (L.AddOp, [heads, row]), (L.MulOp, [channels, channels]),
             (L.SubOp, [contiguous, heads]), (L.ExpOp, [channels])]
    answered = 0
    for cls, specs in cases:
        table = SymbolTable()
        with table.active():
            batch = table.size(3, SymbolSource(0, 0))
            block = func.FuncOp("f", ([tensor_type([batch if i == 0 and n == 3 else n
                                                    for i, n in enumerate(s)], f32)
                                       for s, _, _ in specs], []))
            args = list(block.body.block.args)
            op = build(cls, *args) if len(args) == 2 else build(cls, args[0])
            layouts = [(st, off) for _, st, off in specs]
            got = permuted_dense(op, layouts)
            want = _asked_layouts(op, layouts, False)
            if got is None:
                continue
            answered += 1
            assert want is not None and len(want) == 1
            strides, offset = want[0]
            assert len(got[0]) == len(strides) and got[1] == 0 == offset
            for a, b in zip(got[0], strides, strict=True):
                assert hint(a) == hint(b), (cls.name, specs, got, want)
                assert proved_equal(a, b), (cls.name, specs, got, want)
    assert answered >= 7, answered
