"""Property tests of the neural-network ltorch ops and their decompositions into prims.

Each test builds a one-op program, decomposes it and runs it with the reference
interpreter; `thunder_ir.testing.check_decomposition` compares the result with eager torch
under the float64-reference rule. Dropout is checked bit for bit against its reference and
statistically.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from xdsl.dialects import func

from thunder_ir.dialects import ltorch
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.ltorch_base import LTORCH
from thunder_ir.dialects.program import main_function, parse
from thunder_ir.dialects.types import number_type, tensor_type
from thunder_ir.passes.decompositions import load_rules
from thunder_ir.runtime.interpreter import run
from thunder_ir.testing import (
    build_one_op,
    check_decomposition,
    decompose,
    float_dtypes,
    shapes,
    tensors,
)

SETTINGS = settings(max_examples=15, deadline=None)
NN_OPS = [op for op in LTORCH if op.__module__ == N.__name__]


def check(op: type[ThunderOp], operands: list[Any], params: dict[str, Any] | None = None,
          **kw: Any) -> Any:
    """The ltorch program verifies; `check_decomposition`; the result holds prims only."""
    build_one_op(op, operands, dict(params or {}))[0].verify()
    module = check_decomposition(op, operands, params, **kw)
    names = {o.name for o in main_function(module).body.block.ops
             if not isinstance(o, func.ReturnOp)}
    assert all(n.startswith("prims.") for n in names), f"{op.name} left {names}"
    return module


# --------------------------------------------------------------------------- tables


def test_every_nn_op_is_declared_and_decomposed() -> None:
    rules = load_rules()
    expected = {"matmul", "bmm", "linear", "relu", "gelu", "silu", "sigmoid", "softmax",
                "log_softmax", "dropout", "layer_norm", "rms_norm", "embedding",
                "scaled_dot_product_attention", "cross_entropy", "mse_loss"}
    assert expected <= {op.name.removeprefix("ltorch.") for op in NN_OPS}
    for op in NN_OPS:
        assert op in rules, f"{op.name} has no decomposition"
        assert ltorch.OPS[op.name.removeprefix("ltorch.")] is op


@pytest.mark.parametrize("op", NN_OPS, ids=lambda op: op.name)
def test_signature_names_operands_and_params(op: type[N.NNOp]) -> None:
    operands = {n for n, _ in op.operand_layout()} - {"seed", "offset"}
    params = set(op.param_names())
    assert set(op.SIGNATURE) == operands | params
    assert set(op.DEFAULTS) <= params
    # The default reference passes operands positionally: they must lead torch's signature.
    if not issubclass(op, N.BoundCallOp) and op is not N.DropoutOp:
        names = [n for n, _ in op.operand_layout()]
        assert list(op.SIGNATURE[:len(names)]) == names
    # Pure everywhere but dropout (it draws random numbers).
    from xdsl.traits import Pure

    assert op.has_trait(Pure) == (op is not N.DropoutOp)


def test_layer_norm_operand_segments_round_trip() -> None:
    x = torch.randn(2, 3, 4)
    b = torch.randn(4)
    module, _ = build_one_op(N.LayerNormOp, [x, None, b], {"normalized_shape": (4,),
                                                          "eps": 1e-3})
    module.verify()
    text = str(module)
    assert "operandSegmentSizes = array<i32: 1, 0, 1>" in text
    again = parse(text)
    again.verify()
    assert str(again) == text
    op = next(o for o in main_function(again).body.block.ops if isinstance(o, N.LayerNormOp))
    assert op.weight is None and op.bias is not None
    assert op.params() == {"normalized_shape": (4,), "eps": 1e-3}
    torch.testing.assert_close(run(again, x, b)[0],
                               torch.nn.functional.layer_norm(x, (4,), None, b, 1e-3))


_X = torch.randn(2, 3, 4)
_Q = torch.randn(1, 4, 3, 2)
_KV = torch.randn(1, 2, 5, 2)
EXAMPLES: list[tuple[type[ThunderOp], list[Any], dict[str, Any]]] = [
    (N.MatmulOp, [_X, torch.randn(4, 2)], {}),
    (N.BmmOp, [_X, torch.randn(2, 4, 2)], {}),
    (N.LinearOp, [_X, torch.randn(5, 4), None], {}),
    (N.ReluOp, [_X], {}),
    (N.GeluOp, [_X], {"approximate": "tanh"}),
    (N.SiluOp, [_X], {}),
    (N.SigmoidOp, [_X], {}),
    (N.SoftmaxOp, [_X], {"dim": -1, "dtype": torch.float64}),
    (N.LogSoftmaxOp, [_X], {"dim": 0}),
    (N.DropoutOp, [_X, 7, 3], {"p": 0.25, "training": True}),
    (N.LayerNormOp, [_X, torch.randn(4), torch.randn(4)], {"normalized_shape": (4,)}),
    (N.RmsNormOp, [_X, torch.randn(3, 4)], {"normalized_shape": (3, 4), "eps": 1e-6}),
    (N.EmbeddingOp, [torch.tensor([[1, 0], [2, 2]]), torch.randn(3, 4)], {"padding_idx": 0}),
    (N.ScaledDotProductAttentionOp, [_Q, _KV, _KV, torch.ones(3, 5, dtype=torch.bool)],
     {"scale": 0.5, "enable_gqa": True}),
    (N.CrossEntropyOp, [torch.randn(3, 4), torch.tensor([0, -100, 3]), torch.rand(4)],
     {"reduction": "sum", "label_smoothing": 0.1}),
    (N.MseLossOp, [_X, _X.flip(0), None], {"reduction": "none"}),
]


def test_examples_cover_every_op() -> None:
    assert {op for op, _, _ in EXAMPLES} == set(NN_OPS)


@pytest.mark.parametrize("case", EXAMPLES, ids=lambda c: c[0].name)
def test_print_parse_round_trip(case: tuple[type[ThunderOp], list[Any], dict[str, Any]]
                                ) -> None:
    op, operands, params = case
    module, args = build_one_op(op, operands, params)
    module.verify()
    text = str(module)
    again = parse(text)
    again.verify()
    assert str(again) == text
    torch.testing.assert_close(run(again, *args)[0], run(module, *args)[0])
    decompose(again)
    assert str(parse(str(again))) == str(again)


# --------------------------------------------------------------------------- linear algebra


@SETTINGS
@given(st.data(), float_dtypes, st.sampled_from(["1x1", "1x2", "2x1", "2x2", "batched"]))
def test_matmul(data: st.DataObject, dtype: torch.dtype, kind: str) -> None:
    n, k, m = (data.draw(st.integers(1, 5)) for _ in range(3))
    batch = data.draw(shapes(0, 2)) if kind == "batched" else ()
    a_shape = {"1x1": (k,), "1x2": (k,), "2x1": (n, k), "2x2": (n, k)}.get(kind, (*batch, n, k))
    b_shape = {"1x1": (k,), "1x2": (k, m), "2x1": (k,), "2x2": (k, m)}.get(kind, (k, m))
    a = data.draw(tensors(a_shape, dtype))
    b = data.draw(tensors(b_shape, dtype))
    check(N.MatmulOp, [a, b])


@SETTINGS
@given(st.data(), float_dtypes)
def test_bmm(data: st.DataObject, dtype: torch.dtype) -> None:
    bsz, n, k, m = (data.draw(st.integers(1, 4)) for _ in range(4))
    check(N.BmmOp, [data.draw(tensors((bsz, n, k), dtype)), data.draw(tensors((bsz, k, m),
                                                                                dtype))])


@SETTINGS
@given(st.data(), float_dtypes, st.booleans())
def test_linear(data: st.DataObject, dtype: torch.dtype, with_bias: bool) -> None:
    lead = data.draw(shapes(0, 2))
    k, m = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    bias = data.draw(tensors((m,), dtype)) if with_bias else None
    check(N.LinearOp, [data.draw(tensors((*lead, k), dtype)), data.draw(tensors((m, k), dtype)),
                       bias])


# --------------------------------------------------------------------------- activations


@SETTINGS
@given(st.sampled_from([(N.ReluOp, {}), (N.GeluOp, {}), (N.GeluOp, {"approximate": "tanh"}),
                        (N.GeluOp, {"approximate": "none"}), (N.SiluOp, {}),
                        (N.SigmoidOp, {})]),
       tensors(low=-8.0, high=8.0))
def test_activations(case: tuple[type[ThunderOp], dict[str, Any]], x: torch.Tensor) -> None:
    op, params = case
    check(op, [x], params)


@SETTINGS
@given(st.sampled_from([N.ReluOp, N.SigmoidOp]),
       tensors(dtype=st.sampled_from([torch.int64, torch.int32])))
def test_activations_on_ints(op: type[ThunderOp], x: torch.Tensor) -> None:
    check(op, [x])


def test_relu_propagates_nan() -> None:
    x = torch.tensor([math.nan, -1.0, 2.0, -math.inf, math.inf])
    module = check(N.ReluOp, [x])
    torch.testing.assert_close(run(module, x)[0], torch.relu(x), equal_nan=True)


# --------------------------------------------------------------------------- softmax


@SETTINGS
@given(st.data(), st.sampled_from([N.SoftmaxOp, N.LogSoftmaxOp]), float_dtypes,
       st.sampled_from([None, torch.float32, torch.float64]))
def test_softmax(data: st.DataObject, op: type[ThunderOp], dtype: torch.dtype,
                 out_dtype: torch.dtype | None) -> None:
    shape = data.draw(shapes(0, 4))
    rank = max(len(shape), 1)
    dim = data.draw(st.integers(-rank, rank - 1))
    x = data.draw(tensors(shape, dtype, low=-20.0, high=20.0))
    check(op, [x], {"dim": dim, "dtype": out_dtype})


def test_softmax_is_stable_for_large_inputs() -> None:
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1e4, -999.0]])
    check(N.SoftmaxOp, [x], {"dim": 1})
    check(N.LogSoftmaxOp, [x], {"dim": -1})


# --------------------------------------------------------------------------- dropout


@SETTINGS
@given(tensors(shapes(0, 3), dtype=float_dtypes), st.floats(0.0, 1.0),
       st.integers(0, 2**31), st.integers(0, 1000), st.sampled_from([None, True, False]))
def test_dropout_matches_reference_exactly(x: torch.Tensor, p: float, seed: int, offset: int,
                                           training: bool | None) -> None:
    params = {"p": p, "training": training}
    module = check(N.DropoutOp, [x, seed, offset], params)
    expected = N.DropoutOp.ref(x, seed, offset, **params)
    assert torch.equal(run(module, x)[0], expected)
    if training is False or p == 0.0:
        assert torch.equal(expected, x)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p: float) -> None:
    x = torch.full((200, 250), 2.0)
    module, args = build_one_op(N.DropoutOp, [x, 1234, 5], {"p": p, "training": True})
    decompose(module)
    y = run(module, *args)[0]
    zeros = float((y == 0).float().mean())
    assert abs(zeros - p) < 0.01
    assert abs(float(y.mean()) - 2.0) < 0.05 / (1 - p)
    kept = y[y != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 2.0 / (1 - p)))
    # Another offset draws another mask; the same seed and offset draw the same one.
    other = N.DropoutOp.ref(x, 1234, 6, p=p)
    assert not torch.equal(other, y)
    assert torch.equal(N.DropoutOp.ref(x, 1234, 5, p=p), y)


def test_dropout_p_one_zeroes_everything() -> None:
    x = torch.randn(4, 5)
    module = check(N.DropoutOp, [x, 1, 2], {"p": 1.0})
    assert torch.equal(run(module, x)[0], torch.zeros(4, 5))


def test_dropout_rejects_bad_inputs() -> None:
    t = tensor_type((3,), torch.float32)
    i = number_type(int)
    with pytest.raises(ShapeError, match="probability"):
        N.DropoutOp.infer(t, i, i, p=1.5)
    with pytest.raises(ShapeError, match="int numbers"):
        N.DropoutOp.infer(t, number_type(float), i, p=0.5)
    with pytest.raises(ShapeError, match="floating-point"):
        N.DropoutOp.infer(tensor_type((3,), torch.int64), i, i, p=0.5)


# --------------------------------------------------------------------------- normalization


@st.composite
def norm_case(draw: st.DrawFn, dtype: torch.dtype
              ) -> tuple[torch.Tensor, tuple[int, ...]]:
    shape = draw(shapes(1, 4))
    k = draw(st.integers(1, len(shape)))
    return draw(tensors(shape, dtype, low=-5.0, high=5.0)), shape[len(shape) - k:]


@SETTINGS
@given(st.data(), float_dtypes, st.booleans(), st.booleans(),
       st.sampled_from([None, 1e-5, 1e-2]))
def test_layer_norm(data: st.DataObject, dtype: torch.dtype, with_w: bool, with_b: bool,
                    eps: float | None) -> None:
    x, ns = data.draw(norm_case(dtype))
    w = data.draw(tensors(ns, dtype)) if with_w else None
    b = data.draw(tensors(ns, dtype)) if with_b else None
    check(N.LayerNormOp, [x, w, b], {"normalized_shape": ns, "eps": eps})


@SETTINGS
@given(st.data(), float_dtypes, st.booleans(), st.sampled_from([None, 1e-6, 1e-2]))
def test_rms_norm(data: st.DataObject, dtype: torch.dtype, with_w: bool,
                  eps: float | None) -> None:
    x, ns = data.draw(norm_case(dtype))
    w = data.draw(tensors(ns, dtype)) if with_w else None
    check(N.RmsNormOp, [x, w], {"normalized_shape": ns, "eps": eps})


def test_layer_norm_rejects_a_shape_that_does_not_fit() -> None:
    t = tensor_type((2, 3), torch.float32)
    with pytest.raises(ShapeError):
        N.LayerNormOp.infer(t, None, None, normalized_shape=(2,))


# --------------------------------------------------------------------------- embedding


@SETTINGS
@given(st.data(), float_dtypes, st.sampled_from([torch.int64, torch.int32]),
       st.sampled_from([None, 0, 2]))
def test_embedding(data: st.DataObject, dtype: torch.dtype, idx_dtype: torch.dtype,
                   padding_idx: int | None) -> None:
    vocab, dim = data.draw(st.integers(3, 8)), data.draw(st.integers(1, 5))
    shape = data.draw(shapes(0, 3))
    seed = data.draw(st.integers(0, 2**31))
    idx = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed),
                        dtype=idx_dtype)
    weight = data.draw(tensors((vocab, dim), dtype))
    check(N.EmbeddingOp, [idx, weight], {"padding_idx": padding_idx})


def test_embedding_rejects_max_norm() -> None:
    with pytest.raises(ShapeError, match="max_norm"):
        N.EmbeddingOp.infer(tensor_type((3,), torch.int64), tensor_type((5, 2), torch.float32),
                            max_norm=1.0)


# --------------------------------------------------------------------------- attention


@SETTINGS
@given(st.data(), float_dtypes,
       st.sampled_from(["plain", "causal", "bool_mask", "float_mask", "gqa", "gqa_causal",
                        "3d"]),
       st.sampled_from([None, 0.25]))
def test_scaled_dot_product_attention(data: st.DataObject, dtype: torch.dtype, kind: str,
                                      scale: float | None) -> None:
    b, hk = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    rep = data.draw(st.integers(2, 3)) if kind.startswith("gqa") else 1
    length, source = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    e, ev = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    lead_q, lead_kv = ((b, hk * rep), (b, hk)) if kind != "3d" else ((hk,), (hk,))
    q = data.draw(tensors((*lead_q, length, e), dtype))
    k = data.draw(tensors((*lead_kv, source, e), dtype))
    v = data.draw(tensors((*lead_kv, source, ev), dtype))
    mask = None
    if kind == "bool_mask":
        mshape = data.draw(st.sampled_from([(length, source), (b, 1, length, source)]))
        mask = data.draw(tensors(mshape, torch.bool))
        mask[..., 0] = True  # no fully masked row: softmax of all -inf is NaN
    elif kind == "float_mask":
        mask = data.draw(tensors((1, hk, length, source), dtype))
    params = {"is_causal": kind.endswith("causal"), "scale": scale,
              "enable_gqa": kind.startswith("gqa")}
    check(N.ScaledDotProductAttentionOp, [q, k, v, mask], params)


def test_sdpa_with_kv_heads_expanded_by_the_caller() -> None:
    q = torch.randn(2, 4, 3, 8)
    k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    check(N.ScaledDotProductAttentionOp, [q, k, v, None], {"is_causal": True})


def test_sdpa_rejects_dropout() -> None:
    t = tensor_type((1, 2, 3, 4), torch.float32)
    with pytest.raises(ShapeError, match="dropout_p"):
        N.ScaledDotProductAttentionOp.infer(t, t, t, None, dropout_p=0.1)


# --------------------------------------------------------------------------- losses


@SETTINGS
@given(st.data(), float_dtypes, st.sampled_from(["mean", "sum", "none"]),
       st.sampled_from([0.0, 0.1, 0.5]), st.booleans(), st.sampled_from([-100, 1]))
def test_cross_entropy_class_indices(data: st.DataObject, dtype: torch.dtype, reduction: str,
                                     label_smoothing: float, with_weight: bool,
                                     ignore_index: int) -> None:
    classes = data.draw(st.integers(2, 5))
    batch = data.draw(st.sampled_from([None, (), (3,), (2, 3)]))
    if batch is None:  # input (C,), 0-d target
        x_shape, t_shape = (classes,), ()
    else:
        n = data.draw(st.integers(1, 4))
        x_shape, t_shape = (n, classes, *batch), (n, *batch)
    x = data.draw(tensors(x_shape, dtype, low=-4.0, high=4.0))
    seed = data.draw(st.integers(0, 2**31))
    target = torch.randint(0, classes, t_shape, generator=torch.Generator().manual_seed(seed))
    ignored = data.draw(tensors(t_shape, torch.bool))
    target = torch.where(ignored, torch.full_like(target, ignore_index), target)
    weight = data.draw(tensors((classes,), dtype, low=0.1, high=2.0)) if with_weight else None
    params = {"ignore_index": ignore_index, "reduction": reduction,
              "label_smoothing": label_smoothing}
    check(N.CrossEntropyOp, [x, target, weight], params)


@SETTINGS
@given(st.data(), float_dtypes, st.sampled_from(["mean", "sum", "none"]),
       st.sampled_from([0.0, 0.2]), st.booleans())
def test_cross_entropy_probabilities(data: st.DataObject, dtype: torch.dtype, reduction: str,
                                     label_smoothing: float, with_weight: bool) -> None:
    classes, n = data.draw(st.integers(2, 5)), data.draw(st.integers(1, 4))
    shape = data.draw(st.sampled_from([(n, classes), (n, classes, 2)]))
    x = data.draw(tensors(shape, dtype))
    target = torch.softmax(data.draw(tensors(shape, torch.float32)), dim=1).to(dtype)
    weight = data.draw(tensors((classes,), dtype, low=0.1, high=2.0)) if with_weight else None
    check(N.CrossEntropyOp, [x, target, weight],
          {"reduction": reduction, "label_smoothing": label_smoothing})


def test_cross_entropy_all_ignored_mean_is_nan() -> None:
    x, t = torch.randn(3, 4), torch.full((3,), -100)
    module, args = build_one_op(N.CrossEntropyOp, [x, t, None], {"label_smoothing": 0.1})
    decompose(module)
    got = run(module, *args)[0]
    assert got.isnan() and torch.nn.functional.cross_entropy(x, t, label_smoothing=0.1).isnan()


@pytest.mark.filterwarnings("ignore:size_average and reduce")
def test_cross_entropy_legacy_reduction_flags() -> None:
    x, t = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
    check(N.CrossEntropyOp, [x, t, None], {"reduce": False})
    check(N.CrossEntropyOp, [x, t, None], {"size_average": False})


@pytest.mark.filterwarnings("ignore:Using a target size")
@SETTINGS
@given(st.data(), float_dtypes, st.sampled_from(["mean", "sum", "none"]), st.booleans())
def test_mse_loss(data: st.DataObject, dtype: torch.dtype, reduction: str,
                  with_weight: bool) -> None:
    shape = data.draw(shapes(0, 3))
    x = data.draw(tensors(shape, dtype))
    t_shape = data.draw(st.sampled_from([shape, shape[1:]]))
    target = data.draw(tensors(t_shape, dtype))
    weight = data.draw(tensors(shape, dtype, low=0.0, high=2.0)) if with_weight else None
    assume(not (with_weight and reduction == "mean" and float(weight.sum()) == 0.0))
    check(N.MseLossOp, [x, target, weight], {"reduction": reduction})
