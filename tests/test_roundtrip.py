"""Textual IR round trips: print -> parse -> print gives identical text, the parsed module
verifies, and it computes what the original computes.

Every prim, every ltorch op, ``torch.call`` and ``fusion.region`` is covered. Every prim and
ltorch op round-trips on inputs drawn from its input strategy (`thunder_ir.testing
.op_inputs`), so coverage comes from the strategy table and a new op needs no entry here;
the hand-written cases below are params whose text is easy to get wrong (infinities, NaN,
-0.0, ``None`` inside an index, dtypes and devices, absent optional operands).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Region

from thunder_ir.dialects.base import (
    Emitter,
    OperandRef,
    ThunderOp,
    flatten_groups,
    group,
)
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.ltorch import LTORCH
from thunder_ir.dialects.ltorch import OPS as LOPS
from thunder_ir.dialects.prims import OPS as POPS
from thunder_ir.dialects.prims import PRIMS
from thunder_ir.dialects.program import Program, parse
from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import NumberType, TensorType, is_float, number_type, tensor_type
from thunder_ir.runtime.interpreter import run

f32, f64, bf16, i64, i32, b8 = (torch.float32, torch.float64, torch.bfloat16, torch.int64,
                                torch.int32, torch.bool)
Sample = tuple[list[Any], dict[str, Any]]


def T(*shape: int, dtype: torch.dtype = f32, device: str = "cpu") -> TensorType:
    return tensor_type(shape, dtype, device)


NF, NI, NB = number_type(float), number_type(int), number_type(bool)


# --------------------------------------------------------------------------- helpers


def program(cls: type[ThunderOp], types: list[Any], params: dict[str, Any]) -> ModuleOp:
    """A program whose arguments are the operands of one ``cls`` op, returning its results."""
    layout = cls.operand_layout()
    flat, sizes = flatten_groups(layout, types)
    p = Program("computation", flat, [f"a{i}" for i in range(len(flat))])
    out = p.emitter.emit(cls, *group(layout, list(p.args), sizes), **params)
    return p.finish(out if isinstance(out, list) else [out])


def sample_value(t: Attribute, gen: torch.Generator) -> Any:
    """A concrete argument of type ``t`` (ints in [1, 3): no division by zero, and in range
    for the index samples, whose indexed dims are all at least 3)."""
    if isinstance(t, NumberType):
        return {bool: True, int: 1, float: 1.5}[t.python_type]
    assert isinstance(t, TensorType)
    if t.dtype == torch.bool:
        return torch.rand(t.sizes, generator=gen) < 0.5
    if is_float(t.dtype):
        return torch.randn(t.sizes, generator=gen, dtype=torch.float64).to(t.dtype)
    return torch.randint(1, 3, t.sizes, generator=gen).to(t.dtype)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape \
            and torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def check_round_trip(module: ModuleOp, *, execute: bool = True,
                     args: list[Any] | None = None) -> str:
    """print -> parse -> print is the identity, the parsed module verifies and computes the
    same values as the original on ``args`` (default: random arguments of its types)."""
    module.verify()
    text = str(module)
    parsed = parse(text)
    parsed.verify()
    assert str(parsed) == text
    assert str(parse(str(parsed))) == text
    if execute:
        fn = next(iter(module.ops))
        gen = torch.Generator().manual_seed(0)
        if args is None:
            args = [sample_value(a.type, gen)
                    for a in fn.body.block.args]  # type: ignore[attr-defined]
        torch.manual_seed(0)  # random ops (bernoulli, dropout) draw alike in both runs
        want = run(module, *args)
        torch.manual_seed(0)
        got = run(parsed, *args)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            assert _equal(w, g), (w, g)
    return text


# --------------------------------------------------------------------------- prims

PRIM_SAMPLES: dict[str, list[Sample]] = {
    "bitwise_not": [([T(2, 3, dtype=i32)], {}), ([T(4, dtype=b8)], {})],
    "logical_not": [([T(2, dtype=b8)], {})],
    "isnan": [([T(0, 3)], {})],
    "abs": [([T(dtype=i64)], {})],
    "add": [([T(2, 3), T(2, 3)], {}), ([T(2, 3), NF], {}), ([NI, T(2, 3, dtype=i64)], {})],
    "eq": [([T(2, dtype=b8), NB], {})],
    "bitwise_and": [([T(3, dtype=i64), NI], {})],
    "logical_and": [([T(3, dtype=b8), T(3, dtype=b8)], {})],
    "div": [([T(2, 3, dtype=i64), T(2, 3, dtype=i64)], {})],
    "where": [([T(2, 3, dtype=b8), T(2, 3), T(2, 3)], {}), ([T(2, dtype=b8), NF, T(2)], {}),
              ([T(2, dtype=b8), NI, NI], {})],
    "convert_element_type": [([T(2, 3)], {"dtype": bf16}), ([T(2, dtype=b8)], {"dtype": f64})],
    "broadcast_in_dim": [([T(3, 1)], {"shape": (2, 3, 4), "broadcast_dims": (1, 2)}),
                         ([T()], {"shape": (2,), "broadcast_dims": ()})],
    "reshape": [([T(2, 3)], {"shape": (3, 1, 2)}), ([T(0, 4)], {"shape": (2, 0)})],
    "transpose": [([T(2, 3, 4)], {"permutation": (2, 0, 1)})],
    "slice": [([T(5, 6)], {"start_indices": (1, 0), "end_indices": (5, 6), "strides": (2, 3)}),
              ([T(5)], {"start_indices": (1,), "end_indices": (3,)})],
    "squeeze": [([T(1, 3, 1)], {"dims": (2, 0)})],
    "pad": [([T(3, 4)], {"padding_value": -0.0, "padding_config": ((1, -1, 2), (-2, 0, 0))}),
            ([T(dtype=i64)], {"padding_value": 7, "padding_config": ()}),
            ([T(2, dtype=b8)], {"padding_value": True, "padding_config": ((1, 1, 1),)})],
    "cat": [([[T(2, 3), T(4, 3), T(0, 3)]], {"dim": 0}), ([[T(2)]], {"dim": 0})],
    "flip": [([T(2, 3)], {"dims": (1, 0)})],
    "sum": [([T(2, 3, 4)], {"dims": (2, 0)}), ([T(2)], {"dims": ()})],
    "var": [([T(4, 5)], {"dims": (1,), "correction": 0.5}),
            ([T(4, 5, dtype=f64)], {"dims": (0, 1), "correction": 1})],
    "argmax": [([T(4, 5)], {"dim": 1})],
    "argmin": [([T(4, 5, dtype=i32)], {"dim": 0})],
    "matmul": [([T(2, 1, 3, 4), T(5, 4, 2)], {}), ([T(4), T(4)], {})],
    "linear": [([T(2, 3), T(5, 3), T(5)], {}), ([T(2, 3), T(5, 3), None], {})],
    "iota": [([], {"length": 5, "start": 2, "step": 3, "device": "cpu", "dtype": i64}),
             ([], {"length": 3, "start": 0.5, "step": -0.25, "device": "meta", "dtype": f32})],
    "full": [([], {"shape": (2, 3), "fill_value": math.inf, "device": "cpu", "dtype": f32}),
             ([], {"shape": (), "fill_value": math.nan, "device": "cpu", "dtype": f64}),
             ([], {"shape": (0,), "fill_value": False, "device": "cuda:3", "dtype": b8}),
             ([], {"shape": (1,), "fill_value": -(2**62), "device": "cpu", "dtype": i64})],
    "bernoulli": [([], {"shape": (4, 4), "p": 0.25, "device": "cpu", "dtype": bf16})],
    "bernoulli_like": [([T(3, 4)], {"p": 0.75})],
    "take": [([T(4, 3), T(2, dtype=i32)], {"dim": 1})],
    "gather": [([T(4, 3), T(2, 3, dtype=i64)], {"dim": 0})],
    "index_add": [([T(4, 3), T(5, dtype=i64), T(4, 5)], {"dim": 1})],
    "scatter_add": [([T(4, 3), T(2, 2, dtype=i64), T(3, 3)], {"dim": 0})],
    "constant": [([], {"value": v}) for v in (True, -3, 2.5, -0.0, math.inf, math.nan, 1e-300)],
}


PRIM_CASES = [(name, i) for name in sorted(PRIM_SAMPLES) for i in range(len(PRIM_SAMPLES[name]))]


def test_hand_written_cases_fit_their_ops() -> None:
    """A hand-written case names an op that exists, with operand groups and param names
    it has (a case that no longer fits would test nothing)."""
    gone = sorted({*(set(PRIM_SAMPLES) - set(POPS)), *(set(LTORCH_SAMPLES) - set(LOPS))})
    assert not gone, f"cases for ops that do not exist: {gone}"
    stale = sorted([*(n for n, ss in LTORCH_SAMPLES.items() for c in ss
                      if not _fits_op(LOPS[n], c)),
                    *(n for n, ss in PRIM_SAMPLES.items() for c in ss
                      if not _fits_op(POPS[n], c))])
    assert not stale, f"cases whose operands or param names the op no longer has: {stale}"


@pytest.mark.parametrize(("name", "index"), PRIM_CASES)
def test_prim_round_trip(name: str, index: int) -> None:
    types, params = PRIM_SAMPLES[name][index]
    cls = POPS[name]
    module = program(cls, types, params)
    on_meta = any(v == "meta" for v in params.values())
    text = check_round_trip(module, execute=not on_meta and "cuda:3" not in params.values())
    assert f'"{cls.name}"' in text


def test_prim_text_is_stable() -> None:
    """A golden line for a prim with every kind of param text (negative ints, -0.0)."""
    text = check_round_trip(program(POPS["pad"], *PRIM_SAMPLES["pad"][0]))
    assert ('"prims.pad"(%a0) <{padding_value = -0.000000e+00 : f64, padding_config = '
            '[array<i64: 1, -1, 2>, array<i64: -2, 0, 0>]}> : (!prims.tensor<3x4xf32, cpu>) -> '
            '!prims.tensor<7x2xf32, cpu>') in text


# --------------------------------------------------------------------------- ltorch

NONE_ARG: tuple[Any, ...] = ()  # `none` inside an array param (fixed in base.from_attr)

LTORCH_SAMPLES: dict[str, list[Any]] = {
    "add": [([T(2, 3), T(3)], {"alpha": 2}), ([T(2, 3, dtype=i64), NF], {})],
    "sub": [([NI, T(2, dtype=i32)], {"alpha": 3})],
    "div": [([T(2, 3, dtype=i64), T(2, 3, dtype=i64)], {"rounding_mode": "floor"})],
    "bitwise_and": [([T(2, dtype=i64), T(2, dtype=i64)], {})],
    "bitwise_or": [([T(2, dtype=b8), NB], {})],
    "bitwise_xor": [([T(2, dtype=i32), T(2, dtype=i32)], {})],
    "bitwise_not": [([T(2, dtype=i32)], {})],
    "round": [([T(2, 3)], {"decimals": 2})],
    "where": [([T(2, 3, dtype=b8), T(2, 3), NF], {})],
    "masked_fill": [([T(2, 3), T(3, dtype=b8)], {"value": -math.inf})],
    "clamp": [([T(2, 3)], {"min": -0.5, "max": 0.5}), ([T(2, dtype=i64)], {"min": 0})],
    "to_dtype": [([T(2, 3)], {"dtype": bf16})],
    "sum": [([T(2, 3, 4)], {"dim": (0, 2), "keepdim": True, "dtype": f64}),
            ([T(2, 3, dtype=b8)], {})],
    "mean": [([T(2, 3)], {"dim": (1,)}), ([T(2, 3)], {})],
    "var": [([T(2, 3)], {"dim": (1,), "correction": 0, "keepdim": True})],
    "amax": [([T(2, 3)], {"dim": (0,)})],
    "prod": [([T(2, 3)], {"dim": 1, "keepdim": True}),
             ([T(2, 3, dtype=i64)], {})],
    "argmax": [([T(2, 3)], {"dim": 1})],
    "max_dim": [([T(2, 3)], {"dim": 1, "keepdim": True})],
    "topk": [([T(2, 5)], {"k": 2, "dim": 1, "largest": False})],
    "min_dim": [([T(2, 3)], {"dim": 0})],
    "reshape": [([T(2, 3)], {"shape": (3, -1)})],
    "view": [([T(2, 3)], {"size": (6,)})],
    "permute": [([T(2, 3, 4)], {"dims": (2, 0, 1)})],
    "transpose": [([T(2, 3, 4)], {"dim0": 0, "dim1": -1})],
    "flatten": [([T(2, 3, 4)], {"start_dim": 1})],
    "unsqueeze": [([T(2, 3)], {"dim": -1})],
    "squeeze": [([T(2, 1, 3)], {"dim": (1,)}), ([T(1, 2, 1)], {})],
    "expand": [([T(3, 1)], {"size": (2, -1, 4)})],
    "triu": [([T(3, 3)], {"diagonal": 1})],
    "split": [([T(5, 3)], {"split_size_or_sections": 2}),
              ([T(5, 3)], {"split_size_or_sections": (1, 2), "dim": 1})],
    "chunk": [([T(5, 3)], {"chunks": 2})],
    "cat": [([[T(2, 3), T(1, 3)]], {"dim": 0})],
    "stack": [([[T(2, 3), T(2, 3)]], {"dim": -1})],
    "getitem": [([T(4, 5, 6), []], {"index": (slice(1, None, 2), ..., 0)}),
                pytest.param([T(4, 5, 6), []], {"index": (slice(1, None, 2), ..., None, 0)},
                             marks=NONE_ARG),
                ([T(4, 5), [T(3, dtype=i64)]], {"index": (OperandRef(0), slice(None, 3, None))})],
    "arange": [([], {"start": 1, "end": 7, "step": 2}),
               ([], {"start": 0.0, "end": 1.0, "step": 0.25, "dtype": f64, "device": "cpu"})],
    "zeros": [([], {"size": (2, 3), "dtype": i64})],
    "ones": [([], {"size": (0,)})],
    "empty": [([], {"size": (2,), "dtype": bf16})],
    "full": [([], {"size": (2, 3), "fill_value": math.nan}),
             ([], {"size": (2,), "fill_value": 3})],
    "full_like": [([T(2, 3)], {"fill_value": -1, "dtype": i32})],
    "zeros_like": [([T(2, 3)], {"dtype": b8})],
    "bmm": [([T(2, 3, 4), T(2, 4, 5)], {})],
    "matmul": [([T(2, 3, 4), T(4)], {})],
    "linear": [([T(2, 3), T(4, 3), T(4)], {}), ([T(2, 3), T(4, 3), None], {})],
    "gelu": [([T(2, 3)], {"approximate": "tanh"})],
    "softmax": [([T(2, 3)], {"dim": -1}), ([T(2, 3, dtype=bf16)], {"dim": 0, "dtype": f32})],
    "log_softmax": [([T(2, 3)], {"dim": 1})],
    "dropout": [([T(4, 4)], {"p": 0.25, "train": True})],
    "feature_dropout": [([T(2, 4, 3)], {"p": 0.5, "train": True})],
    "alpha_dropout": [([T(4, 4)], {"p": 0.25, "train": True})],
    "feature_alpha_dropout": [([T(2, 4, 3)], {"p": 0.5, "train": False})],
    "layer_norm": [([T(2, 3, 4), T(3, 4), T(3, 4)], {"normalized_shape": (3, 4), "eps": 1e-6}),
                   ([T(2, 4), None, T(4)], {"normalized_shape": (4,)})],
    "rms_norm": [([T(2, 4), T(4)], {"normalized_shape": (4,), "eps": 1e-6}),
                 ([T(2, 4), None], {"normalized_shape": (4,)})],
    "embedding": [([T(2, 3, dtype=i64), T(5, 4)], {"padding_idx": 0})],
    "scaled_dot_product_attention": [
        ([T(1, 2, 3, 4), T(1, 2, 5, 4), T(1, 2, 5, 4), None], {"is_causal": True}),
        ([T(1, 2, 3, 4), T(1, 2, 5, 4), T(1, 2, 5, 4), T(3, 5, dtype=b8)], {"scale": 0.5})],
    "cross_entropy": [([T(4, 3), T(4, dtype=i64), None], {"reduction": "sum",
                                                          "label_smoothing": 0.1}),
                      ([T(4, 3), T(4, dtype=i64), T(3)], {"ignore_index": 1})],
    "mse_loss": [([T(2, 3), T(2, 3), None], {"reduction": "none"})],
    "grouped_mm": [([T(6, 4), T(3, 4, 5), T(3, dtype=i32)], {}),
                   ([T(4, 6), T(6, 5), T(3, dtype=i64)], {})],
    "gelu_backward": [([T(2, 3), T(2, 3)], {"approximate": "tanh"})],
    "softplus": [([T(2, 3)], {"beta": 2.0, "threshold": 5})],
    "hardswish": [([T(2, 3)], {})], "hardsigmoid": [([T(2, 3)], {})],
    "hardswish_backward": [([T(2, 3), T(2, 3)], {})],
    "hardsigmoid_backward": [([T(2, 3), T(2, 3)], {})],
    "native_group_norm": [([T(2, 6, 5), T(6), None], {"N": 2, "C": 6, "HxW": 5, "group": 3,
                                                      "eps": 1e-5})],
    "native_group_norm_backward": [([T(2, 6, 5), T(2, 6, 5), T(2, 3), T(2, 3), T(6)],
                                    {"N": 2, "C": 6, "HxW": 5, "group": 3,
                                     "output_mask": (1, 0, 1)})],
    "cumsum": [([T(2, 3)], {"dim": 1}), ([T(2, 3)], {"dim": -2, "dtype": torch.float64})],
    "softplus_backward": [([T(2, 3), T(2, 3)], {"beta": 1.0, "threshold": 20.0})],
    "safe_softmax": [([T(2, 3)], {"dim": -1})],
    "threshold_backward": [([T(2, 3), T(2, 3)], {"threshold": 0}),
                           ([T(4), T(4)], {"threshold": -0.5})],
    "softmax_backward": [([T(2, 3), T(2, 3)], {"dim": 1, "input_dtype": f32})],
    "log_softmax_backward": [([T(2, 3), T(2, 3)], {"dim": 0, "input_dtype": f32})],
    "layer_norm_backward": [([T(2, 4), T(2, 4), T(4), None, None, None],
                             {"normalized_shape": (4,), "output_mask": (1, 1, 0)}),
                            ([T(2, 4), T(2, 4), None, T(4), T(2, 1), T(2, 1)],
                             {"normalized_shape": (4,), "output_mask": (1, 0, 1)})],
    "native_layer_norm": [([T(2, 4), T(4), None], {"normalized_shape": (4,), "eps": 1e-5})],
    "convolution": [([T(2, 4, 7, 6), T(6, 2, 3, 2), T(6)],
                     {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}),
                    ([T(1, 2, 5), T(3, 2, 3), None],
                     {"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1})],
    "max_pool2d_with_indices": [([T(2, 3, 7, 6)],
                                 {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 0),
                                  "dilation": (1, 2), "ceil_mode": True})],
    "max_pool2d_with_indices_backward": [([T(2, 3, 4, 3), T(2, 3, 7, 6), T(2, 3, 4, 3,
                                                                          dtype=i64)],
                                          {"kernel_size": (3, 2), "stride": (2, 2),
                                           "padding": (1, 0), "dilation": (1, 2),
                                           "ceil_mode": True})],
    "convolution_backward": [([T(2, 6, 4, 4), T(2, 4, 7, 6), T(6, 2, 3, 2)],
                              {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2),
                               "groups": 2, "output_mask": (0, 1, 1)})],
    "native_batch_norm": [([T(2, 3, 4), T(3), None, T(3), T(3)],
                           {"training": True, "momentum": 0.1, "eps": 1e-5}),
                          ([T(2, 3), None, None, T(3), T(3)],
                           {"training": False, "momentum": 0.1, "eps": 1e-5}),
                          ([T(2, 3), None, T(3), None, None],
                           {"training": True, "momentum": 0.1, "eps": 1e-3})],
    "native_batch_norm_backward": [([T(2, 3, 4), T(2, 3, 4), T(3), None, None, T(3), T(3)],
                                    {"training": True, "eps": 1e-5,
                                     "output_mask": (1, 1, 0)}),
                                   ([T(2, 3), T(2, 3), None, T(3), T(3), None, None],
                                    {"training": False, "eps": 1e-5,
                                     "output_mask": (1, 0, 1)})],
    "embedding_backward": [([T(2, 3, 4), T(2, 3, dtype=i64)], {"num_weights": 5,
                                                               "padding_idx": 0})],
    "nll_loss_forward": [([T(4, 3), T(4, dtype=i64), T(3)], {"ignore_index": 1}),
                         ([T(3), T(dtype=i64), None], {"reduction": "none"})],
    "nll_loss_backward": [([T(), T(4, 3), T(4, dtype=i64), T(), T(3)],
                           {"reduction": "mean", "ignore_index": 1})],
}

def _values(sample: Any) -> Sample:
    return sample.values if hasattr(sample, "marks") else sample


def _fits_op(cls: type[ThunderOp], sample: Any) -> bool:
    """False for a stale table entry: operand groups or param names the op no longer has."""
    types, params = _values(sample)
    return len(types) == len(cls.operand_layout()) and set(params) <= set(cls.param_names())


def _case(name: str, sample: Any) -> Any:
    if hasattr(sample, "marks"):  # a pytest.param (a NamedTuple, so test it first)
        return pytest.param(name, *sample.values, marks=sample.marks, id=name)
    return pytest.param(name, *sample, id=name)


LTORCH_CASES = [_case(name, s) for name in sorted(LTORCH_SAMPLES) for s in LTORCH_SAMPLES[name]]


UNSPECIFIED_VALUES = {"empty"}  # ops whose results may differ from run to run


@pytest.mark.parametrize(("name", "types", "params"), LTORCH_CASES)
def test_ltorch_round_trip(name: str, types: list[Any], params: dict[str, Any]) -> None:
    module = program(LOPS[name], types, params)
    text = check_round_trip(module, execute=name not in UNSPECIFIED_VALUES)
    assert f'"ltorch.{name}"' in text


# --------------------------------------------------------------------------- torch.call


def call_program(callee: str, types: list[Attribute], args: list[Any],
                 kwargs: dict[str, Any] | None = None) -> ModuleOp:
    p = Program("computation", types, [f"a{i}" for i in range(len(types))])
    op = make_call(callee, list(p.args), args, kwargs)
    p.block.add_op(op)
    return p.finish(list(op.results))


CALLS: list[Any] = [
    ("torch.nn.functional.gelu", [T(2, 3)], [OperandRef(0)], {"approximate": "tanh"}),
    ("torch.add", [T(2, 3), NF], [OperandRef(0), OperandRef(1)], {"alpha": 2}),
    ("torch.split", [T(5, 3)], [OperandRef(0), (2, 3)], {"dim": 0}),
    ("torch.max", [T(4, 3)], [OperandRef(0), 1], {"keepdim": True}),
    ("torch.Tensor.__getitem__", [T(4, 5, 6)], [OperandRef(0), (slice(1, None, 2), ..., 0)],
     None),
    ("torch.nn.functional.pad", [T(2, 3)], [OperandRef(0), (1, -1, 0, 2)],
     {"mode": "constant", "value": -math.inf}),
    ("torch.Tensor.to", [T(2, 3)], [OperandRef(0), torch.bfloat16], None),
    ("torch.Tensor.sum", [T(2, 3)], [OperandRef(0)], {"dim": (0, 1), "dtype": torch.float64}),
    ("torch.einsum", [T(2, 3), T(3, 4)], ["ij,jk->ik", OperandRef(0), OperandRef(1)], None),
    pytest.param("torch.nn.functional.linear", [T(2, 3), T(4, 3)],
                 [OperandRef(0), OperandRef(1), None], None, marks=NONE_ARG),
    pytest.param("torch.Tensor.__getitem__", [T(4, 5)], [OperandRef(0), (None, slice(0, 2, None))],
                 None, marks=NONE_ARG),
]


@pytest.mark.parametrize(("callee", "types", "args", "kwargs"), CALLS,
                         ids=[(c.values if hasattr(c, "marks") else c)[0] for c in CALLS])
def test_torch_call_round_trip(callee: str, types: list[Attribute], args: list[Any],
                               kwargs: dict[str, Any] | None) -> None:
    text = check_round_trip(call_program(callee, types, args, kwargs))
    assert f'callee = "{callee}"' in text


# --------------------------------------------------------------------------- fusion.region


def fusion_program() -> ModuleOp:
    """``y = relu-ish(a * b + 1)`` fused, plus a second region holding an RNG prim."""
    t = T(2, 3)
    p = Program("computation", [t, t, NI], ["a", "b", "seed"])
    body = Block(arg_types=[t, t])
    e = Emitter(body.add_op).ns(POPS)
    x, w = body.args
    prod = e.mul(x, w)
    one = e.constant(value=1.0)
    s = e.add(prod, one)
    m = e.maximum(s, e.constant(value=0.0))
    body.add_op(YieldOp.create(operands=[m, s]))
    region = RegionOp.create(
        operands=list(p.args[:2]), result_types=[t, t],
        properties={"executor": StringAttr("torch_compile"), "kernel": StringAttr("fusion0")},
        regions=[Region(body)])
    p.block.add_op(region)

    body2 = Block(arg_types=[NI, t])
    e2 = Emitter(body2.add_op).ns(POPS)
    u = e2.bernoulli(shape=(2, 3), p=0.5, device="cpu", dtype=f32)
    body2.add_op(YieldOp.create(operands=[e2.mul(u, body2.args[1])]))
    region2 = RegionOp.create(
        operands=[p.args[2], region.results[0]], result_types=[t],
        properties={"executor": StringAttr("nvfuser"), "kernel": StringAttr("nvFusion1")},
        regions=[Region(body2)])
    p.block.add_op(region2)
    return p.finish([region.results[1], region2.results[0]])


def test_fusion_region_round_trip() -> None:
    text = check_round_trip(fusion_program())
    assert '"fusion.region"(%a, %b) <{executor = "torch_compile", kernel = "fusion0"}>' in text
    assert '"fusion.yield"' in text
    assert 'kernel = "nvFusion1"' in text


def test_whole_program_round_trip() -> None:
    """Several ops, number arguments and name hints together in one function."""
    t = T(4, 3)
    p = Program("my_fn", [t, T(3), NF], ["x", "t_fc_bias", "scale"])
    e = p.emitter.ns(POPS)
    x, bias, scale = p.args
    b = e.broadcast_in_dim(bias, shape=(4, 3), broadcast_dims=(1,))
    y = e.mul(e.add(x, b), scale)
    s = e.sum(y, dims=(1,))
    text = check_round_trip(p.finish([y, s]))
    assert "func.func @my_fn(%x: !prims.tensor<4x3xf32, cpu>, %t_fc_bias:" in text


# --------------------------------------------------------------------------- drawn samples
# Every prim and ltorch op round-trips on inputs drawn from its input strategy
# (`thunder_ir.testing.op_inputs`): coverage comes from the strategy table, so a new op
# needs no entry here (`test_every_op_has_an_input_strategy` names an op without one).


def _operand_type(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return [_operand_type(v) for v in value]
    if isinstance(value, torch.Tensor):
        return tensor_type(tuple(value.shape), value.dtype, str(value.device))
    return number_type(type(value))


DRAWN_OPS = sorted([*(f"prims.{n}" for n in POPS), *(f"ltorch.{n}" for n in LOPS)])


def _op_class(qualified: str) -> type[ThunderOp]:
    dialect, name = qualified.split(".", 1)
    return (POPS if dialect == "prims" else LOPS)[name]


def test_every_op_has_an_input_strategy() -> None:
    from thunder_ir.testing.inputs import missing_inputs

    missing = missing_inputs(_op_class(q) for q in DRAWN_OPS)
    assert not missing, f"ops without an input strategy: {missing} (register one with " \
                        "thunder_ir.testing.register_inputs)"
    dialects = {op.name for op in (*PRIMS, *LTORCH)}
    assert dialects == set(DRAWN_OPS), "the dialects' op lists and op tables disagree"


@pytest.mark.parametrize("qualified", DRAWN_OPS)
def test_round_trip_on_drawn_inputs(qualified: str) -> None:
    """print -> parse -> print is the identity on an op built from drawn inputs, and the
    parsed program computes on those inputs what the original does."""
    from hypothesis import HealthCheck, given, settings

    from thunder_ir.testing import op_inputs

    cls = _op_class(qualified)

    @settings(max_examples=3, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(op_inputs(cls))
    def check(sample: Any) -> None:
        operands, params = sample
        types = [_operand_type(o) for o in operands]
        module = program(cls, types, {k: v for k, v in params.items() if v is not None})
        layout = cls.operand_layout()
        args = [a for a in flatten_groups(layout, list(operands))[0] if a is not None]
        check_round_trip(module, execute=cls.name.split(".")[1] not in UNSPECIFIED_VALUES,
                         args=args)

    check()
