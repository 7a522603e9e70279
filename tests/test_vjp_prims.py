"""Tests of the prims' VJP rules (`thunder_ir.passes.vjp_prims`).

Every rule is checked by `thunder_ir.testing.check_vjp`: the op and its rule are built
into one program, run with the reference interpreter, and the operand cotangents are
compared with ``torch.autograd.grad`` of the op's reference in float64. Hypothesis draws
shapes, values (in each op's safe domain, with ties and zeros where torch's convention at
them is what the rule must match), number operands and static arguments. A coverage test
keeps every prim either with a rule or declared not differentiable, and checks that the
latter really carry no gradient.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import thunder_ir.passes.vjp_prims as vjp_prims
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.types import is_float
from thunder_ir.passes.vjp import NOT_DIFFERENTIABLE, VJP_RULES, load_vjp_rules, missing_rules
from thunder_ir.testing import check_vjp, shapes, tensors

SETTINGS = settings(max_examples=10, deadline=None)
F64 = torch.float64


def f64(draw: st.DrawFn, shape: tuple[int, ...], low: float = -3.0, high: float = 3.0
        ) -> torch.Tensor:
    """A float64 tensor with values in ``[low, high]``."""
    return draw(tensors(shape, F64, low=low, high=high))


def away_from_zero(draw: st.DrawFn, shape: tuple[int, ...], low: float = 0.5,
                   high: float = 3.0) -> torch.Tensor:
    """Values with ``low <= |x| <= high`` and random signs."""
    mag = f64(draw, shape, low, high)
    sign = draw(tensors(shape, torch.bool))
    return torch.where(sign, mag, -mag)


def subset(draw: st.DrawFn, n: int) -> list[int]:
    """A sorted subset of ``range(n)``."""
    return sorted(draw(st.sets(st.integers(0, n - 1), max_size=n))) if n else []


# --------------------------------------------------------------------------- coverage


def test_every_prim_has_a_rule_or_is_not_differentiable() -> None:
    load_vjp_rules()
    assert missing_rules(P.PRIMS) == []
    assert not {op for op in P.PRIMS if op in VJP_RULES and op in NOT_DIFFERENTIABLE}


def _nd_samples() -> dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]]:
    """Inputs for every not-differentiable prim, floats wherever the prim accepts them."""
    x = torch.randn(3, 4, dtype=F64) * 3
    y = torch.randn(3, 4, dtype=F64) * 3
    i = torch.randint(-5, 5, (3, 4))
    bl = torch.rand(3, 4) < 0.5
    samples: dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]] = {}
    for op in (P.SignOp, P.FloorOp, P.CeilOp, P.RoundOp, P.TruncOp, P.IsnanOp, P.IsinfOp,
               P.IsfiniteOp, P.LogicalNotOp):
        samples[op] = ([x], {})
    samples[P.BitwiseNotOp] = ([i], {})
    for op in (P.EqOp, P.NeOp, P.LtOp, P.LeOp, P.GtOp, P.GeOp, P.LogicalAndOp, P.LogicalOrOp):
        samples[op] = ([x, y], {})
    for op in (P.BitwiseAndOp, P.BitwiseOrOp, P.BitwiseXorOp):
        samples[op] = ([i, bl.long()], {})
    samples[P.ArgmaxOp] = ([x], {"dim": 1})
    samples[P.ArgminOp] = ([x], {"dim": 0})
    samples[P.IotaOp] = ([], {"length": 4, "start": 1.0, "step": 0.5, "device": "cpu",
                              "dtype": F64})
    samples[P.FullOp] = ([], {"shape": (2, 3), "fill_value": 1.5, "device": "cpu",
                              "dtype": F64})
    samples[P.UniformOp] = ([3, 7], {"shape": (2, 3), "minval": 0.0, "maxval": 1.0,
                                     "device": "cpu", "dtype": F64})
    samples[P.ConstantOp] = ([], {"value": 2.5})
    return samples


def test_not_differentiable_prims_carry_no_gradient() -> None:
    """Each declared prim has a bool/int result or a zero gradient in torch.autograd."""
    load_vjp_rules()
    samples = _nd_samples()
    nd_prims = [op for op in P.PRIMS if op in NOT_DIFFERENTIABLE]
    assert {op.name for op in nd_prims} == {op.name for op in samples}
    for op in nd_prims:
        operands, params = samples[op]
        req = [v.clone().requires_grad_(True) if isinstance(v, torch.Tensor) and is_float(v.dtype)
               else v for v in operands]
        leaves = [v for v in req if isinstance(v, torch.Tensor) and v.requires_grad]
        out = op.ref(*req, **params)
        if not isinstance(out, torch.Tensor) or not is_float(out.dtype) or not out.requires_grad:
            continue
        grads = torch.autograd.grad(out, leaves, torch.randn_like(out), allow_unused=True)
        for gr in grads:
            assert gr is None or not bool(gr.any()), f"{op.name} has a non-zero gradient"


# --------------------------------------------------------------------------- unary

UNARY: list[tuple[type[ThunderOp], float, float]] = [
    (P.AbsOp, -3, 3), (P.NegOp, -3, 3), (P.ExpOp, -3, 3), (P.Exp2Op, -3, 3),
    (P.Expm1Op, -3, 3), (P.LogOp, 0.1, 3), (P.Log1pOp, -0.9, 3), (P.Log2Op, 0.1, 3),
    (P.SinOp, -3, 3), (P.CosOp, -3, 3), (P.TanOp, -1.3, 1.3), (P.TanhOp, -3, 3),
    (P.AsinOp, -0.95, 0.95), (P.AcosOp, -0.95, 0.95), (P.AtanOp, -3, 3), (P.SinhOp, -3, 3),
    (P.CoshOp, -3, 3), (P.SqrtOp, 0.1, 3), (P.RsqrtOp, 0.1, 3), (P.ReciprocalOp, 0.2, 3),
    (P.ErfOp, -3, 3), (P.ErfcOp, -3, 3),
]


@pytest.mark.parametrize("op,low,high", UNARY, ids=[u[0].name for u in UNARY])
@SETTINGS
@given(data=st.data())
def test_unary(op: type[ThunderOp], low: float, high: float, data: st.DataObject) -> None:
    x = f64(data.draw, data.draw(shapes(max_side=4)), low, high)
    check_vjp(op, [x])


def test_abs_at_zero_and_negative_reciprocal() -> None:
    """torch's conventions at kinks: ``abs'(0) == 0``; reciprocal on negatives."""
    check_vjp(P.AbsOp, [torch.tensor([-2.0, 0.0, 0.0, 3.0], dtype=F64)])
    check_vjp(P.ReciprocalOp, [torch.tensor([-2.0, -0.5, 0.25], dtype=F64)])


@pytest.mark.parametrize("op,operands", [
    (P.AbsOp, [torch.tensor([-2, 0, 3])]),
    (P.MulOp, [torch.tensor([1, 2]), torch.tensor([3, 4])]),
    (P.MaximumOp, [torch.tensor([True, False]), torch.tensor([False, False])]),
    (P.CatOp, [[torch.tensor([1, 2]), torch.tensor([3])]]),
    (P.MatmulOp, [torch.tensor([[1, 2]]), torch.tensor([3, 4])]),
], ids=["abs", "mul", "maximum", "cat", "matmul"])
def test_int_operands_get_no_cotangent(op: type[ThunderOp], operands: list[Any]) -> None:
    """Int and bool tensors carry no gradient: the rules give ``None`` for them."""
    seen: list[Any] = []

    def rule(*args: Any, **kw: Any) -> list[Any]:
        seen.extend(load_vjp_rules()[op](*args, **kw))
        return seen

    check_vjp(op, operands, {"dim": 0} if op is P.CatOp else {}, rule=rule)
    assert len(seen) == len(operands)
    assert all(v is None or v == [None] * len(v) for v in seen)


# --------------------------------------------------------------------------- binary


def _binary_values(draw: st.DrawFn, op: type[ThunderOp], shape: tuple[int, ...]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two tensors in ``op``'s safe domain (ties drawn in for maximum/minimum)."""
    if op in (P.DivOp, P.RemainderOp, P.FmodOp):
        return f64(draw, shape), away_from_zero(draw, shape)
    if op is P.PowOp:
        return f64(draw, shape, 0.5, 3), f64(draw, shape, -2, 2)
    if op is P.Atan2Op:
        return away_from_zero(draw, shape), f64(draw, shape)
    a, b = f64(draw, shape), f64(draw, shape)
    if op in (P.MaximumOp, P.MinimumOp):
        b = torch.where(draw(tensors(shape, torch.bool)), a, b)
    return a, b


def _number(draw: st.DrawFn, op: type[ThunderOp], side: int) -> float | int:
    """A number operand in ``op``'s safe domain (``side`` 0 is the left operand)."""
    if op is P.PowOp:
        if side == 1:
            return draw(st.sampled_from([0, 1, 2, 3, -1, 0.5, 2.5, -1.5]))
        return draw(st.sampled_from([2.0, 0.5, 3]))
    if op in (P.DivOp, P.RemainderOp, P.FmodOp) and side == 1:
        return draw(st.sampled_from([2.0, -1.5, 3, 0.75]))
    if op is P.Atan2Op and side == 0:
        return draw(st.sampled_from([1.0, -2.5, 2]))
    return draw(st.sampled_from([0.0, 1.5, -2.0, 3, 1]))


BINARY = [P.AddOp, P.SubOp, P.MulOp, P.DivOp, P.RemainderOp, P.FmodOp, P.PowOp,
          P.MaximumOp, P.MinimumOp, P.Atan2Op]


@pytest.mark.parametrize("op", BINARY, ids=[o.name for o in BINARY])
@SETTINGS
@given(data=st.data())
def test_binary(op: type[ThunderOp], data: st.DataObject) -> None:
    """Tensor-tensor, tensor-number and number-tensor operands."""
    shape = data.draw(shapes(max_side=4))
    a, b = _binary_values(data.draw, op, shape)
    kind = data.draw(st.sampled_from(["tt", "tn", "nt"]))
    operands: list[Any] = [a, b]
    if kind == "tn":
        operands[1] = _number(data.draw, op, 1)
    elif kind == "nt":
        operands[0] = _number(data.draw, op, 0)
    check_vjp(op, operands)


def test_pow_conventions_at_zero() -> None:
    """torch's zeros: ``d/da = 0`` where ``b == 0``; ``d/db = 0`` where ``a == 0, b >= 0``."""
    a = torch.tensor([0.0, 0.0, 2.0, 0.0, 1.5], dtype=F64)
    b = torch.tensor([0.0, 2.0, 0.0, -1.0, 1.5], dtype=F64)
    check_vjp(P.PowOp, [a, b])
    check_vjp(P.PowOp, [a, 0])
    check_vjp(P.PowOp, [0.0, b])


@pytest.mark.parametrize("op", [P.PowOp, P.Atan2Op, P.DivOp])
def test_non_constant_numbers(op: type[ThunderOp], monkeypatch: pytest.MonkeyPatch) -> None:
    """Number operands that are not `prims.constant` (a program argument) take the general
    path: broadcast to a tensor."""
    monkeypatch.setattr(vjp_prims, "_constant_value", lambda v: None)
    x = torch.tensor([[0.5, 1.0], [2.0, 0.0]], dtype=F64)
    check_vjp(op, [x, 2.0])
    check_vjp(op, [1.5, x + 0.5])
    check_vjp(P.PowOp, [x, 0])


def test_extrema_ties_and_nan() -> None:
    """maximum/minimum split a tie in half and give NaN's cotangent to both sides."""
    a = torch.tensor([1.0, 2.0, math.nan, 3.0], dtype=F64)
    b = torch.tensor([1.0, 3.0, 1.0, -1.0], dtype=F64)
    for op in (P.MaximumOp, P.MinimumOp):
        check_vjp(op, [a, b])


@SETTINGS
@given(data=st.data())
def test_where(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    c = data.draw(tensors(shape, torch.bool))
    a = f64(data.draw, shape) if data.draw(st.booleans()) else 1.5
    b = f64(data.draw, shape) if data.draw(st.booleans()) or not isinstance(a, torch.Tensor) \
        else -2.0
    check_vjp(P.WhereOp, [c, a, b])


# --------------------------------------------------------------------------- shape ops


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from([torch.float32, torch.bfloat16, F64,
                                              torch.int64, torch.bool]))
def test_convert_element_type(data: st.DataObject, dtype: torch.dtype) -> None:
    x = f64(data.draw, data.draw(shapes(max_side=4)))
    check_vjp(P.ConvertElementTypeOp, [x], {"dtype": dtype})
    check_vjp(P.ConvertElementTypeOp, [x.round().long()], {"dtype": F64})


@SETTINGS
@given(data=st.data())
def test_broadcast_in_dim(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    bdims = subset(data.draw, len(shape))
    xs = tuple(shape[d] if data.draw(st.booleans()) else 1 for d in bdims)
    x = f64(data.draw, xs)
    check_vjp(P.BroadcastInDimOp, [x], {"shape": shape, "broadcast_dims": bdims})


@SETTINGS
@given(data=st.data())
def test_reshape(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    n = math.prod(shape)
    target = data.draw(st.sampled_from([(n,), tuple(reversed(shape)), (1, *shape, 1), ()
                                        if n == 1 else (n, 1)]))
    check_vjp(P.ReshapeOp, [f64(data.draw, shape)], {"shape": target})


@SETTINGS
@given(data=st.data())
def test_transpose(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    perm = data.draw(st.permutations(range(len(shape))))
    check_vjp(P.TransposeOp, [f64(data.draw, shape)], {"permutation": perm})


@SETTINGS
@given(data=st.data())
def test_slice(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    starts, ends, steps = [], [], []
    for s in shape:
        lo = data.draw(st.integers(0, s))
        starts.append(lo)
        ends.append(data.draw(st.integers(lo, s)))
        steps.append(data.draw(st.integers(1, 3)))
    params: dict[str, Any] = {"start_indices": starts, "end_indices": ends}
    if data.draw(st.booleans()):
        params["strides"] = steps
    check_vjp(P.SliceOp, [f64(data.draw, shape)], params)


@SETTINGS
@given(data=st.data())
def test_squeeze(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=3, min_side=1))
    ones = [i for i, s in enumerate(shape) if s == 1]
    dims = sorted(data.draw(st.sets(st.sampled_from(ones)))) if ones else []
    check_vjp(P.SqueezeOp, [f64(data.draw, shape)], {"dims": dims})


@SETTINGS
@given(data=st.data())
def test_pad(data: st.DataObject) -> None:
    """Positive, negative (cropping) and interior padding."""
    shape = data.draw(shapes(max_rank=3, max_side=4))
    config = []
    for s in shape:
        lo, hi, mid = (data.draw(st.integers(-3, 2)), data.draw(st.integers(-3, 2)),
                       data.draw(st.integers(0, 2)))
        assume(s + lo + hi + (s - 1) * mid >= 0)
        config.append((lo, hi, mid))
    check_vjp(P.PadOp, [f64(data.draw, shape)],
              {"padding_value": 0.5, "padding_config": tuple(config)})


@SETTINGS
@given(data=st.data())
def test_cat(data: st.DataObject) -> None:
    shape = data.draw(shapes(min_rank=1, max_side=4))
    dim = data.draw(st.integers(0, len(shape) - 1))
    parts = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[dim] = data.draw(st.integers(0, 3))
        parts.append(f64(data.draw, tuple(s)))
    check_vjp(P.CatOp, [parts], {"dim": dim})


@SETTINGS
@given(data=st.data())
def test_flip(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    check_vjp(P.FlipOp, [f64(data.draw, shape)], {"dims": subset(data.draw, len(shape))})


# --------------------------------------------------------------------------- reductions


@SETTINGS
@given(data=st.data())
def test_sum(data: st.DataObject) -> None:
    shape = data.draw(shapes(max_side=4))
    check_vjp(P.SumOp, [f64(data.draw, shape)], {"dims": subset(data.draw, len(shape))})


@SETTINGS
@given(data=st.data())
def test_prod_with_zeros(data: st.DataObject) -> None:
    """Groups with no, one and several zeros (torch's zero-safe rule)."""
    shape = data.draw(shapes(max_side=4))
    x = f64(data.draw, shape, 0.5, 1.5)
    zeros = data.draw(tensors(shape, F64, low=0, high=1)) < data.draw(st.sampled_from([0, .2, .5]))
    x = torch.where(zeros, 0.0, x)
    check_vjp(P.ProdOp, [x], {"dims": subset(data.draw, len(shape))})


@pytest.mark.parametrize("op", [P.AmaxOp, P.AminOp])
@SETTINGS
@given(data=st.data())
def test_amax_amin_with_ties(op: type[ThunderOp], data: st.DataObject) -> None:
    """Small integer values make ties; the cotangent is shared among them."""
    shape = data.draw(shapes(max_side=4))
    x = f64(data.draw, shape, -2, 2)
    if data.draw(st.booleans()):
        x = x.round()
    check_vjp(op, [x], {"dims": subset(data.draw, len(shape))})


@SETTINGS
@given(data=st.data(), correction=st.sampled_from([0, 1, 0.5, 2.0]))
def test_var(data: st.DataObject, correction: float) -> None:
    shape = data.draw(shapes(max_side=4))
    dims = subset(data.draw, len(shape))
    assume(math.prod(shape[d] for d in dims) != correction)
    check_vjp(P.VarOp, [f64(data.draw, shape)], {"dims": dims, "correction": correction})


# --------------------------------------------------------------------------- linear algebra


@SETTINGS
@given(data=st.data())
def test_matmul(data: st.DataObject) -> None:
    """1-D and N-D operands, batch dims broadcast from size 1 or missing."""
    ra, rb = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    batch = data.draw(shapes(min_rank=2, max_rank=2, max_side=3))

    def batch_of(rank: int) -> tuple[int, ...]:
        dims = batch[2 - max(rank - 2, 0):]
        return tuple(d if data.draw(st.booleans()) else 1 for d in dims)

    sa = (k,) if ra == 1 else (*batch_of(ra), m, k)
    sb = (k,) if rb == 1 else (*batch_of(rb), k, n)
    check_vjp(P.MatmulOp, [f64(data.draw, sa), f64(data.draw, sb)])


@SETTINGS
@given(data=st.data())
def test_linear(data: st.DataObject) -> None:
    """2-D and 1-D weights, with and without bias."""
    xs = data.draw(shapes(min_rank=1, max_rank=3, max_side=4))
    k = xs[-1]
    one_d = data.draw(st.booleans())
    ws = (k,) if one_d else (data.draw(st.integers(1, 4)), k)
    with_bias = data.draw(st.booleans()) and (not one_d or len(xs) == 1)
    bias = f64(data.draw, ws[:-1]) if with_bias else None
    check_vjp(P.LinearOp, [f64(data.draw, xs), f64(data.draw, ws), bias])


# --------------------------------------------------------------------------- indexing


def _index(draw: st.DrawFn, shape: tuple[int, ...], high: int) -> torch.Tensor:
    """An int64 index tensor with values in ``[0, high)`` (repeats included)."""
    return draw(tensors(shape, torch.int64, low=-0.49, high=high - 0.51))


@SETTINGS
@given(data=st.data())
def test_take(data: st.DataObject) -> None:
    shape = data.draw(shapes(min_rank=1, max_side=4))
    dim = data.draw(st.integers(0, len(shape) - 1))
    idx = _index(data.draw, (data.draw(st.integers(1, 5)),), shape[dim])
    check_vjp(P.TakeOp, [f64(data.draw, shape), idx], {"dim": dim})


@SETTINGS
@given(data=st.data())
def test_gather(data: st.DataObject) -> None:
    shape = data.draw(shapes(min_rank=1, max_side=4))
    dim = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(data.draw(st.integers(1, 5)) if i == dim else data.draw(st.integers(1, s))
                   for i, s in enumerate(shape))
    idx = _index(data.draw, ishape, shape[dim])
    check_vjp(P.GatherOp, [f64(data.draw, shape), idx], {"dim": dim})


@SETTINGS
@given(data=st.data())
def test_index_add(data: st.DataObject) -> None:
    shape = data.draw(shapes(min_rank=1, max_side=4))
    dim = data.draw(st.integers(0, len(shape) - 1))
    idx = _index(data.draw, (data.draw(st.integers(1, 5)),), shape[dim])
    sshape = tuple(len(idx) if i == dim else s for i, s in enumerate(shape))
    check_vjp(P.IndexAddOp, [f64(data.draw, shape), idx, f64(data.draw, sshape)], {"dim": dim})


def _sliced_scatter_add(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, *,
                        dim: int) -> torch.Tensor:
    """``scatter_add`` with ``src`` cut to the index's shape first: the same function,
    differentiable in torch for a ``src`` larger than the index (torch's rule is not)."""
    src = src[tuple(slice(0, n) for n in index.shape)]
    return torch.scatter_add(x, dim, index.to(torch.int64), src)


@SETTINGS
@given(data=st.data(), larger_src=st.booleans())
def test_scatter_add(data: st.DataObject, larger_src: bool) -> None:
    shape = data.draw(shapes(min_rank=1, max_side=4))
    dim = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(data.draw(st.integers(1, 5 if i == dim else s)) for i, s in enumerate(shape))
    idx = _index(data.draw, ishape, shape[dim])
    sshape = tuple(n + data.draw(st.integers(0, 2)) if larger_src else n for n in ishape)
    operands = [f64(data.draw, shape), idx, f64(data.draw, sshape)]
    if larger_src:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(P.ScatterAddOp, "ref", classmethod(
                lambda cls, x, index, src, *, dim: _sliced_scatter_add(x, index, src, dim=dim)))
            check_vjp(P.ScatterAddOp, operands, {"dim": dim})
    else:
        check_vjp(P.ScatterAddOp, operands, {"dim": dim})


# --------------------------------------------------------------------------- low precision


def _rule_samples(dt: torch.dtype) -> dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]]:
    """One input per differentiable prim, in dtype ``dt``."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 3, generator=g, dtype=F64) + 0.5).to(dt)
    y = (torch.rand(2, 3, generator=g, dtype=F64) + 0.5).to(dt)
    idx = torch.tensor([1, 0, 1])
    s: dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]] = {
        op: ([x * 0.5], {}) for op, _, _ in UNARY}
    for op in BINARY:
        s[op] = ([x, y], {})
    s[P.PowOp] = ([x, 2.5], {})
    s[P.WhereOp] = ([x > 1, x, y], {})
    s[P.ConvertElementTypeOp] = ([x], {"dtype": F64})
    s[P.BroadcastInDimOp] = ([x[:, :1]], {"shape": (4, 2, 3), "broadcast_dims": (1, 2)})
    s[P.ReshapeOp] = ([x], {"shape": (3, 2)})
    s[P.TransposeOp] = ([x], {"permutation": (1, 0)})
    s[P.SliceOp] = ([x], {"start_indices": (0, 1), "end_indices": (2, 3), "strides": (1, 2)})
    s[P.SqueezeOp] = ([x[:1]], {"dims": (0,)})
    s[P.PadOp] = ([x], {"padding_value": 0.0, "padding_config": ((-1, 1, 1), (1, 0, 0))})
    s[P.CatOp] = ([[x, y]], {"dim": 1})
    s[P.FlipOp] = ([x], {"dims": (0,)})
    for op in (P.SumOp, P.ProdOp, P.AmaxOp, P.AminOp):
        s[op] = ([x], {"dims": (1,)})
    s[P.VarOp] = ([x], {"dims": (0, 1), "correction": 1})
    s[P.MatmulOp] = ([x, y.T], {})
    s[P.LinearOp] = ([x, y, x[0, :2]], {})
    s[P.TakeOp] = ([x, idx], {"dim": 1})
    s[P.GatherOp] = ([x, idx[None, :].expand(2, 3).contiguous()], {"dim": 0})
    s[P.IndexAddOp] = ([x, idx, y], {"dim": 1})
    s[P.ScatterAddOp] = ([x, idx[None, :].expand(2, 3).contiguous(), y], {"dim": 0})
    return s


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_cotangents_keep_the_operand_type(dt: torch.dtype) -> None:
    """In float32 and bfloat16, every cotangent has its operand's exact type (shape and
    dtype), the backward verifies and runs."""
    from thunder_ir.dialects.program import Program
    from thunder_ir.dialects.types import type_of_tensor
    from thunder_ir.passes.vjp import Grad
    from thunder_ir.runtime.interpreter import run

    samples = _rule_samples(dt)
    rules = load_vjp_rules()
    assert {op for op in P.PRIMS if op in rules} == set(samples)
    for op, (operands, params) in samples.items():
        flat = [v for g in operands for v in (g if isinstance(g, list) else [g])]
        leaves = [v for v in flat if isinstance(v, torch.Tensor)]
        prog = Program("vjp", [type_of_tensor(t) for t in leaves])
        e = prog.emitter
        args = iter(prog.args)

        def value(v: Any, e: Any = e, args: Any = args) -> Any:
            return next(args) if isinstance(v, torch.Tensor) else e.emit(P.ConstantOp, value=v)

        grouped = [[value(v) for v in g] if isinstance(g, list) else value(g) for g in operands]
        out = e.emit(op, *grouped, **params)
        grads = rules[op](Grad(e), [out], [out], *grouped, **params)
        pairs = [(v, gr) for g, gs in zip(grouped, grads)
                 for v, gr in (zip(g, gs) if isinstance(g, list) else [(g, gs)])]
        cts = [gr for v, gr in pairs if gr is not None]
        for v, gr in pairs:
            if gr is not None:
                assert gr.type == v.type, f"{op.name}: cotangent {gr.type} for {v.type}"
        assert cts, f"{op.name}: no cotangent at all"
        module = prog.finish(cts)
        module.verify()
        for t in run(module, *leaves):
            assert t.dtype == dt and bool(torch.isfinite(t.float()).all()), op.name
