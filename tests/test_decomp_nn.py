"""Property tests of the neural-network ltorch ops and their decompositions into prims.

Every nn op goes through `thunder_ir.testing.check_decomposition_property`: hypothesis
draws inputs from the op's strategy (`thunder_ir.testing.op_inputs`), the one-op program is
decomposed and run with the reference interpreter, and the result is compared with eager
torch under the float64-reference rule. Dropout is also checked bit for bit against its
reference and statistically; tables, round trips and edge cases follow.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from thunder_ir.dialects import ltorch
from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.ltorch_base import LTORCH
from thunder_ir.dialects.program import main_function, parse
from thunder_ir.dialects.types import tensor_type
from thunder_ir.passes.decompositions import load_rules
from thunder_ir.runtime.interpreter import run
from thunder_ir.testing import (
    OpSample,
    build_one_op,
    check_decomposition,
    check_decomposition_property,
    decompose,
)

MAX_EXAMPLES = 12
NN_OPS = [op for op in LTORCH if op.__module__ in (N.__name__, A.__name__)]


def only_prims(module: ModuleOp, sample: OpSample) -> None:
    """The decomposed program holds prims only."""
    names = {o.name for o in main_function(module).body.block.ops
             if not isinstance(o, func.ReturnOp)}
    assert all(n.startswith("prims.") for n in names), f"left {names}"


def check(op: type[ThunderOp], operands: list[Any], params: dict[str, Any] | None = None,
          **kw: Any) -> Any:
    """The ltorch program verifies; `check_decomposition`; the result holds prims only."""
    build_one_op(op, operands, dict(params or {}))[0].verify()
    module = check_decomposition(op, operands, params, **kw)
    only_prims(module, OpSample(operands, dict(params or {})))
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
    operands = {n for n, _ in op.operand_layout()}
    params = set(op.param_names())
    assert set(op.SIGNATURE) == operands | params
    assert set(op.DEFAULTS) <= params
    # The default reference passes operands positionally: they must lead torch's signature.
    if not issubclass(op, N.BoundCallOp):
        names = [n for n, _ in op.operand_layout()]
        assert list(op.SIGNATURE[:len(names)]) == names
    # Pure everywhere but the dropout family and attention, which draw random numbers
    # (attention only with dropout_p > 0).
    from xdsl.traits import Pure

    random = issubclass(op, N.DropoutFamilyOp) or op is N.ScaledDotProductAttentionOp
    assert op.has_trait(Pure) == (not random)


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
_KINKS = torch.tensor([[-4.0, -3.0, -1.5, 0.0, 2.0], [3.0, 3.5, -2.9, 2.9, 6.0]])
EXAMPLES: list[tuple[type[ThunderOp], list[Any], dict[str, Any]]] = [
    (N.MatmulOp, [_X, torch.randn(4, 2)], {}),
    (N.BmmOp, [_X, torch.randn(2, 4, 2)], {}),
    (N.GroupedMmOp, [torch.randn(5, 4), torch.randn(2, 4, 3), torch.tensor([1, 4])], {}),
    (N.LinearOp, [_X, torch.randn(5, 4), None], {}),
    (N.ConvolutionOp, [torch.randn(2, 4, 7, 6), torch.randn(6, 2, 3, 2), torch.randn(6)],
     {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
    (N.MaxPool2dWithIndicesOp, [torch.randn(2, 3, 7, 6)],
     {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 0), "dilation": (1, 2),
      "ceil_mode": True}),
    (N.MaxPool2dWithIndicesBackwardOp, [torch.randn(2, 3, 4, 3), torch.randn(2, 3, 7, 6),
                                        torch.randint(0, 42, (2, 3, 4, 3))],
     {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 0), "dilation": (1, 2),
      "ceil_mode": True}),
    (N.ConvolutionBackwardOp, [torch.randn(2, 6, 4, 4), torch.randn(2, 4, 7, 6),
                               torch.randn(6, 2, 3, 2)],
     {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2,
      "output_mask": (1, 1, 1)}),
    (A.ReluOp, [_X], {}),
    (A.GeluOp, [_X], {"approximate": "tanh"}),
    (A.SiluOp, [_X], {}),
    (A.SiluBackwardOp, [torch.randn(2, 3, 4), _X], {}),
    (A.ThresholdBackwardOp, [torch.randn(2, 3, 4), _X.relu()], {"threshold": 0}),
    (A.SigmoidOp, [_X], {}),
    (N.SoftmaxOp, [_X], {"dim": -1, "dtype": torch.float64}),
    (N.LogSoftmaxOp, [_X], {"dim": 0}),
    (N.SafeSoftmaxOp, [_X.index_fill(1, torch.tensor([1]), -math.inf)], {"dim": -1}),
    (N.DropoutOp, [_X], {"p": 0.25, "train": True}),
    (N.FeatureDropoutOp, [_X], {"p": 0.5, "train": True}),
    (N.AlphaDropoutOp, [_X], {"p": 0.25, "train": True}),
    (N.FeatureAlphaDropoutOp, [_X], {"p": 0.5, "train": True}),
    (N.LayerNormOp, [_X, torch.randn(4), torch.randn(4)], {"normalized_shape": (4,)}),
    (N.NativeLayerNormOp, [_X, torch.randn(4), None], {"normalized_shape": (4,), "eps": 1e-3}),
    (N.NativeBatchNormOp, [_X, torch.randn(3), None, torch.randn(3), torch.rand(3) + 0.5],
     {"training": True, "momentum": 0.1, "eps": 1e-5}),
    (N.NativeBatchNormOp, [_X, None, torch.randn(3), torch.randn(3), torch.rand(3) + 0.5],
     {"training": False, "momentum": 0.1, "eps": 1e-5}),
    (N.NativeBatchNormBackwardOp, [torch.randn(2, 3, 4), _X, torch.randn(3), None, None,
                                   _X.mean((0, 2)), _X.var((0, 2)).add(1e-5).rsqrt()],
     {"training": True, "eps": 1e-5, "output_mask": (1, 1, 1)}),
    (N.RmsNormOp, [_X, torch.randn(3, 4)], {"normalized_shape": (3, 4), "eps": 1e-6}),
    (N.NativeGroupNormOp, [torch.randn(2, 6, 5), torch.randn(6), None],
     {"N": 2, "C": 6, "HxW": 5, "group": 3, "eps": 1e-5}),
    (N.NativeGroupNormBackwardOp, [torch.randn(2, 6, 5), torch.randn(2, 6, 5),
                                   torch.randn(2, 3), torch.rand(2, 3) + 0.5, torch.randn(6)],
     {"N": 2, "C": 6, "HxW": 5, "group": 3, "output_mask": (1, 1, 1)}),
    (N.EmbeddingOp, [torch.tensor([[1, 0], [2, 2]]), torch.randn(3, 4)], {"padding_idx": 0}),
    (N.ScaledDotProductAttentionOp, [_Q, _KV, _KV, torch.ones(3, 5, dtype=torch.bool)],
     {"scale": 0.5, "enable_gqa": True}),
    (N.CrossEntropyOp, [torch.randn(3, 4), torch.tensor([0, -100, 3]), torch.rand(4)],
     {"reduction": "sum", "label_smoothing": 0.1}),
    (N.MseLossOp, [_X, _X.flip(0), None], {"reduction": "none"}),
    (A.GeluBackwardOp, [torch.randn(2, 3, 4), _X], {"approximate": "tanh"}),
    (A.SoftplusOp, [_X * 10], {"beta": 0.5, "threshold": 2.0}),
    (A.SoftplusBackwardOp, [torch.randn(2, 3, 4), _X * 10], {"beta": 2, "threshold": 1.0}),
    (A.HardswishOp, [_KINKS], {}),
    (A.HardsigmoidOp, [_KINKS], {}),
    (A.HardswishBackwardOp, [torch.randn(2, 5), _KINKS], {}),
    (A.HardsigmoidBackwardOp, [torch.randn(2, 5), _KINKS], {}),
    (N.SoftmaxBackwardOp, [torch.randn(2, 3, 4), _X.softmax(-1)],
     {"dim": -1, "input_dtype": torch.float32}),
    (N.LogSoftmaxBackwardOp, [torch.randn(2, 3, 4), _X.log_softmax(0)],
     {"dim": 0, "input_dtype": torch.float32}),
    (N.LayerNormBackwardOp, [torch.randn(2, 3, 4), _X, torch.randn(4), None, None, None],
     {"normalized_shape": (4,), "eps": 1e-3, "output_mask": (1, 1, 0)}),
    (N.LayerNormBackwardOp, [torch.randn(2, 3, 4), _X, torch.randn(3, 4), torch.randn(3, 4),
                             *torch.native_layer_norm(_X, [3, 4], None, None, 1e-5)[1:]],
     {"normalized_shape": (3, 4), "output_mask": (1, 0, 1)}),
    (N.EmbeddingBackwardOp, [torch.randn(2, 2, 4), torch.tensor([[1, 0], [2, 2]])],
     {"num_weights": 3, "padding_idx": 0}),
    (N.NllLossForwardOp, [torch.randn(3, 4).log_softmax(1), torch.tensor([0, -100, 3]),
                          torch.rand(4)], {"reduction": "mean"}),
    (N.NllLossBackwardOp, [torch.tensor(0.5), torch.randn(3, 4).log_softmax(1),
                           torch.tensor([0, -100, 3]), torch.tensor(1.5), torch.rand(4)],
     {"reduction": "mean"}),
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
    torch.manual_seed(0)  # the dropout family draws: the same draw for both runs
    expected = run(module, *args)[0]
    torch.manual_seed(0)
    torch.testing.assert_close(run(again, *args)[0], expected)
    decompose(again)
    assert str(parse(str(again))) == str(again)


# --------------------------------------------------------------------------- properties


@pytest.mark.filterwarnings("ignore:Using a target size")  # mse_loss broadcasts its target
@pytest.mark.parametrize("op", NN_OPS, ids=lambda op: op.name)
def test_decomposition_matches_eager(op: type[ThunderOp]) -> None:
    """Inputs from `thunder_ir.testing.op_inputs`: 1-D, 2-D and broadcast batched matmuls,
    linear with 1-D or 2-D weights, gelu's approximations, softmax dims and dtypes, dropout
    probabilities, norms with or without affine params, embedding padding, attention with
    masks, causal and GQA, class-index and probability targets, every loss reduction."""
    check_decomposition_property(op, max_examples=MAX_EXAMPLES, inspect=only_prims)


# --------------------------------------------------------------------------- edge cases


def test_relu_propagates_nan() -> None:
    x = torch.tensor([math.nan, -1.0, 2.0, -math.inf, math.inf])
    module = check(A.ReluOp, [x])
    torch.testing.assert_close(run(module, x)[0], torch.relu(x), equal_nan=True)


def test_softmax_is_stable_for_large_inputs() -> None:
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1e4, -999.0]])
    check(N.SoftmaxOp, [x], {"dim": 1})
    check(N.LogSoftmaxOp, [x], {"dim": -1})


DROPOUTS = [N.DropoutOp, N.FeatureDropoutOp, N.AlphaDropoutOp, N.FeatureAlphaDropoutOp]


@pytest.mark.parametrize("op", DROPOUTS, ids=lambda o: o.name)
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_dropout_family_equals_eager_bit_for_bit(op: type[N.DropoutFamilyOp], p: float
                                                 ) -> None:
    """The decomposition draws what eager draws and computes what eager computes, for
    the same generator state: equal bits, the identity for p=0 and train=False."""
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(1))
    module, args = build_one_op(op, [x], {"p": p, "train": True})
    decompose(module)
    torch.manual_seed(7)
    got = run(module, *args)[0]
    torch.manual_seed(7)
    expected = op.TORCH_FN(x, p, True)
    assert torch.equal(got, expected)
    module, args = build_one_op(op, [x], {"p": p, "train": False})
    decompose(module)
    assert torch.equal(run(module, *args)[0], x)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_statistics(p: float) -> None:
    x = torch.full((200, 250), 2.0)
    module, args = build_one_op(N.DropoutOp, [x], {"p": p, "train": True})
    decompose(module)
    y = run(module, *args)[0]
    zeros = float((y == 0).float().mean())
    assert abs(zeros - p) < 0.01
    assert abs(float(y.mean()) - 2.0) < 0.05 / (1 - p)
    kept = y[y != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 2.0 / (1 - p)))
    assert not torch.equal(run(module, *args)[0], y)  # the next draw differs


def test_feature_dropout_needs_two_dims() -> None:
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        N.FeatureDropoutOp.infer(tensor_type((3,), torch.float32), p=0.5, train=True)


def test_layer_norm_rejects_a_shape_that_does_not_fit() -> None:
    t = tensor_type((2, 3), torch.float32)
    with pytest.raises(ShapeError):
        N.LayerNormOp.infer(t, None, None, normalized_shape=(2,))


def test_embedding_rejects_max_norm() -> None:
    with pytest.raises(ShapeError, match="max_norm"):
        N.EmbeddingOp.infer(tensor_type((3,), torch.int64), tensor_type((5, 2), torch.float32),
                            max_norm=1.0)


def test_sdpa_with_kv_heads_expanded_by_the_caller() -> None:
    q = torch.randn(2, 4, 3, 8)
    k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    check(N.ScaledDotProductAttentionOp, [q, k, v, None], {"is_causal": True})


def test_sdpa_with_dropout_draws_and_has_no_decomposition() -> None:
    """With dropout, attention is a random op (kept, never merged) that the torch executor
    runs; its decomposition refuses it (eager's draw happens inside ATen's kernel)."""
    from xdsl.traits import is_side_effect_free

    q = torch.randn(1, 2, 3, 4)
    for p, pure in ((0.0, True), (0.1, False)):
        module, _ = build_one_op(N.ScaledDotProductAttentionOp, [q, q, q, None],
                                 {"dropout_p": p})
        op = next(o for o in main_function(module).body.block.ops
                  if isinstance(o, N.ScaledDotProductAttentionOp))
        assert is_side_effect_free(op) == pure
    with pytest.raises(ShapeError, match=r"dropout_p=0\.1 has no decomposition"):
        decompose(module)


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
