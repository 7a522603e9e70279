"""Tests of the prims' VJP rules (`thunder_ir.passes.vjp_prims`).

Every rule goes through `thunder_ir.testing.check_vjp_property`: hypothesis draws inputs
from the prim's VJP strategy (``op_inputs(op, for_vjp=True)``: float64, each op's safe
domain, with ties and zeros where torch's convention at them is what the rule must match,
number operands, static arguments); the op and its rule are built into one program, run
with the reference interpreter, and the operand cotangents are compared with
``torch.autograd.grad`` of the op's reference. A coverage test keeps every prim either with
a rule or declared not differentiable, and checks that the latter really carry no
gradient. Conventions at kinks, int operands and low precision have their own tests.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import thunder_ir.passes.vjp_prims as vjp_prims
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.traits import has_no_derivative
from thunder_ir.dialects.types import is_float
from thunder_ir.passes.vjp import VJP_RULES, load_vjp_rules, missing_rules
from thunder_ir.passes.vjp_prims import zero_gradient
from thunder_ir.testing import check_vjp, check_vjp_property, op_inputs, values

MAX_EXAMPLES = 10
F64 = torch.float64
DIFFERENTIABLE = [op for op in P.PRIMS if op in load_vjp_rules()]
NOT_DIFF = [op for op in P.PRIMS if has_no_derivative(op)]


# --------------------------------------------------------------------------- coverage


def test_every_prim_has_a_rule_or_is_not_differentiable() -> None:
    load_vjp_rules()
    assert missing_rules(P.PRIMS) == []
    assert not {op for op in P.PRIMS if op in VJP_RULES and has_no_derivative(op)}


@pytest.mark.parametrize("op", NOT_DIFF, ids=lambda op: op.name)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_not_differentiable_prims_carry_no_gradient(op: type[ThunderOp],
                                                    data: st.DataObject) -> None:
    """Each declared prim has a bool/int result or a zero gradient in torch.autograd (on
    float64 inputs wherever the prim takes floats)."""
    operands, params = data.draw(op_inputs(op, for_vjp=True))
    req = [v.clone().requires_grad_(True) if isinstance(v, torch.Tensor) and is_float(v.dtype)
           else v for v in operands]
    leaves = [v for v in req if isinstance(v, torch.Tensor) and v.requires_grad]
    out = op.ref(*req, **params)
    if not isinstance(out, torch.Tensor) or not is_float(out.dtype) or not out.requires_grad:
        return
    grads = torch.autograd.grad(out, leaves, torch.randn_like(out), allow_unused=True)
    for gr in grads:
        assert gr is None or not bool(gr.any()), f"{op.name} has a non-zero gradient"


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("op", DIFFERENTIABLE, ids=lambda op: op.name)
def test_vjp_matches_autograd(op: type[ThunderOp]) -> None:
    """Tensor and number operands, broadcasts, slices, pads, reductions, matmuls, indexing:
    whatever the op's VJP strategy draws."""
    check_vjp_property(op, max_examples=MAX_EXAMPLES)


# --------------------------------------------------------------------------- edge cases


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


def _sliced_scatter_add(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor, *,
                        dim: int) -> torch.Tensor:
    """``scatter_add`` with ``src`` cut to the index's shape first: the same function,
    differentiable in torch for a ``src`` larger than the index (torch's rule is not)."""
    src = src[tuple(slice(0, n) for n in index.shape)]
    return torch.scatter_add(x, dim, index.to(torch.int64), src)


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(data=st.data())
def test_scatter_add_with_a_larger_src(data: st.DataObject) -> None:
    """A ``src`` larger than the index: its extra elements get zero cotangents."""
    (x, index, src), params = data.draw(op_inputs(P.ScatterAddOp, for_vjp=True))
    extra = tuple(n + data.draw(st.integers(0, 2)) for n in src.shape)
    src = values(data.draw, extra, src.dtype)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(P.ScatterAddOp, "ref", classmethod(
            lambda cls, x, index, src, *, dim: _sliced_scatter_add(x, index, src, dim=dim)))
        check_vjp(P.ScatterAddOp, [x, index, src], params)


# --------------------------------------------------------------------------- low precision


def _rule_samples(dt: torch.dtype) -> dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]]:
    """One input per differentiable prim, in dtype ``dt``."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 3, generator=g, dtype=F64) + 0.5).to(dt)
    y = (torch.rand(2, 3, generator=g, dtype=F64) + 0.5).to(dt)
    idx = torch.tensor([1, 0, 1])
    s: dict[type[ThunderOp], tuple[list[Any], dict[str, Any]]] = {
        op: ([x * 0.5], {}) for op in DIFFERENTIABLE if issubclass(op, P.UnaryOp)}
    for op in DIFFERENTIABLE:
        if issubclass(op, P.BinaryOp):
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
    s[P.IndexCopyOp] = ([x, torch.tensor([2, 0, 1]), y], {"dim": 1})
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
        if rules[op] is zero_gradient:  # floor, sign, ...: zero everywhere, no cotangent
            assert not cts, op.name
            continue
        assert cts, f"{op.name}: no cotangent at all"
        module = prog.finish(cts)
        module.verify()
        for t in run(module, *leaves):
            assert t.dtype == dt and bool(torch.isfinite(t.float()).all()), op.name
