"""The public testing helpers (`thunder_ir.testing`): input strategies for every op, and the
decomposition and VJP checks in their hypothesis-driven forms.

Every prim and ltorch op has an input strategy; the strategies draw inputs that the op's
shape rule accepts and its reference runs on; a wrong decomposition or VJP rule is caught
and reported with hypothesis's shrunk counterexample; a user's op with its own strategy,
decomposition and VJP rule goes through the same checks.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import FloatAttr
from xdsl.ir import SSAValue
from xdsl.irdl import irdl_op_definition, opt_prop_def

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_core as L
from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.dialects import prims as P
from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.ltorch import LTORCH
from thunder_ir.dialects.prims import PRIMS
from thunder_ir.dialects.types import is_float
from thunder_ir.passes.decompositions import Decomposer
from thunder_ir.passes.vjp import Grad
from thunder_ir.testing import (
    FLOAT_KIND,
    InputSpec,
    OpSample,
    build_one_op,
    check_decomposition,
    check_decomposition_property,
    check_vjp,
    check_vjp_property,
    example_inputs,
    missing_inputs,
    op_inputs,
    register_inputs,
    type_of,
)

ALL_OPS = [*PRIMS, *LTORCH]
NO_DATABASE = settings(database=None)  # expected failures: nothing to replay later
DRAW = settings(max_examples=4, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# --------------------------------------------------------------------------- coverage


def test_every_prim_and_ltorch_op_has_an_input_strategy() -> None:
    assert missing_inputs(PRIMS) == []
    assert missing_inputs(LTORCH) == []


@pytest.mark.filterwarnings(r"ignore:var\(\). degrees of freedom:UserWarning")
@pytest.mark.filterwarnings("ignore:Using a target size")
@pytest.mark.parametrize("for_vjp", [False, True], ids=["eager", "vjp"])
@pytest.mark.parametrize("op", ALL_OPS, ids=lambda op: op.name)
def test_strategies_draw_valid_inputs(op: type[ThunderOp], for_vjp: bool) -> None:
    """The op builds and verifies on the sample, its reference runs, and the reference's
    result types are the ones the shape rule gives; VJP samples hold float64 data."""

    @DRAW
    @given(sample=op_inputs(op, for_vjp=for_vjp))
    def drawn(sample: OpSample) -> None:
        module, _ = build_one_op(op, sample.operands, sample.params)
        module.verify()
        expected = op.infer(*[type_of(g) for g in sample.operands], **sample.params)
        got = type_of(op.ref(*sample.operands, **sample.params))
        assert got == expected, f"{op.name} on {sample}: ref gives {got}, rule {expected}"
        if for_vjp:
            flat = [v for g in sample.operands for v in (g if isinstance(g, list) else [g])]
            floats = [v.dtype for v in flat if isinstance(v, torch.Tensor) and
                      is_float(v.dtype)]
            assert set(floats) <= {torch.float64}, f"{op.name}: {floats}"

    drawn()


# --------------------------------------------------------------------------- dtypes and API


def test_dtypes_narrow_the_data_dtype() -> None:
    @DRAW
    @given(sample=op_inputs(P.ExpOp, dtypes=[torch.float16]),
           vjp=op_inputs(N.SoftmaxOp, for_vjp=True))
    def drawn(sample: OpSample, vjp: OpSample) -> None:
        assert sample.operands[0].dtype == torch.float16
        assert vjp.operands[0].dtype == torch.float64

    drawn()


def test_an_op_that_takes_none_of_the_dtypes_says_so() -> None:
    with pytest.raises(ValueError, match=r"prims\.bitwise_and takes none of the dtypes"):
        example_inputs(P.BitwiseAndOp, dtypes=[torch.float32])


def test_example_inputs_is_deterministic_and_unpacks() -> None:
    a, b = example_inputs(N.LinearOp), example_inputs(N.LinearOp)
    assert repr(a) == repr(b) and repr(a).startswith("OpSample(operands=[torch.tensor(")
    operands, params = a
    assert operands is a.operands and params is a.params


def test_unregistered_ops_and_double_registration() -> None:
    class Unknown(ThunderOp):
        name = "test.unknown"

    with pytest.raises(KeyError, match=r"test\.unknown has no input strategy"):
        op_inputs(Unknown)
    with pytest.raises(ValueError, match="already has a built-in input strategy"):
        register_inputs(P.ExpOp)(lambda draw, spec: ([], {}))


# --------------------------------------------------------------------------- failures


def silu_without_sigmoid(d: Decomposer, x: SSAValue) -> SSAValue:
    """A wrong silu: ``x`` instead of ``x * sigmoid(x)``."""
    return x


def silu(d: Decomposer, x: SSAValue) -> SSAValue:
    """A right silu, written by a user: ``x * sigmoid(x)``."""
    return d.prims.mul(x, d.ltorch.sigmoid(x))


def test_check_decomposition_reports_the_shrunk_counterexample() -> None:
    with pytest.raises(AssertionError) as info:
        check_decomposition_property(A.SiluOp, rule=silu_without_sigmoid, max_examples=20,
                                     settings=NO_DATABASE)
    msg = str(info.value)
    assert msg.startswith("ltorch.silu: the decomposition disagrees with eager on"), msg
    assert "exceeds eager's" in msg, msg
    # Shrunk: one 0-d float32 tensor (the simplest input that shows the bug).
    assert re.search(r"OpSample\(operands=\[torch\.tensor\([^\[\]]*dtype=torch\.float32\)\]",
                     msg), msg
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "check_decomposition_of_ltorch_silu(" in notes and "OpSample(" in notes, notes


def test_check_decomposition_passes_a_right_user_rule() -> None:
    check_decomposition_property(A.SiluOp, rule=silu, max_examples=10)


def exp_vjp_without_out(g: Grad, out: list[SSAValue], ct: list[SSAValue | None],
                        x: SSAValue) -> list[Any]:
    """A wrong exp VJP: the cotangent passed through, not multiplied by ``exp(x)``."""
    return [ct[0]]


def test_check_vjp_reports_the_shrunk_counterexample() -> None:
    with pytest.raises(AssertionError) as info:
        check_vjp_property(P.ExpOp, rule=exp_vjp_without_out, max_examples=20,
                           settings=NO_DATABASE)
    msg = str(info.value)
    assert msg.startswith("prims.exp: the VJP rule disagrees with torch.autograd on"), msg
    assert "cotangent of operand 0" in msg, msg
    assert re.search(r"OpSample\(operands=\[torch\.tensor\([^\[\]]*dtype=torch\.float64\)\]",
                     msg), msg
    with pytest.raises(AssertionError, match="cotangent of operand 0"):
        check_vjp(P.ExpOp, [torch.tensor([0.5, 1.0])], rule=exp_vjp_without_out)


def test_check_vjp_property_needs_a_rule() -> None:
    # ltorch.maximum has no direct rule: autodiff differentiates its decomposition.
    with pytest.raises(KeyError, match=r"ltorch\.maximum has no VJP rule"):
        check_vjp_property(L.MaximumOp)


# --------------------------------------------------------------------------- a user's op


def _swish(input: torch.Tensor, beta: float | None = None) -> torch.Tensor:
    return input * torch.sigmoid((1.0 if beta is None else beta) * input)


@irdl_op_definition
class SwishOp(A.ActivationOp):
    """`%y = test.swish %x {beta}`: ``x * sigmoid(beta * x)`` (a user's op)."""

    name = "test.swish"

    beta = opt_prop_def(FloatAttr)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "beta")


SwishOp.TORCH_FN = staticmethod(_swish)


@register_inputs(SwishOp)
def swish_inputs(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.dtype(draw, FLOAT_KIND)
    x = spec.tensor(draw, spec.shape(draw), dtype, low=-4.0, high=4.0)
    beta = draw(st.sampled_from([None, 0.5, 2.0]))
    return OpSample([x], {} if beta is None else {"beta": beta})


def swish(d: Decomposer, x: SSAValue, beta: float | None = None) -> SSAValue:
    scaled = x if beta is None else d.prims.mul(x, d.prims.constant(value=beta))
    return d.prims.mul(x, d.ltorch.sigmoid(scaled))


def swish_vjp(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], x: SSAValue,
              beta: float | None = None) -> list[Any]:
    """d/dx x s(bx) = s(bx) + b x s(bx) (1 - s(bx))."""
    bx = g.ltorch.mul(x, g.const(1.0 if beta is None else beta))
    s = g.ltorch.sigmoid(bx)
    ds = g.ltorch.mul(g.ltorch.mul(bx, s), g.ltorch.sub(g.const(1.0), s))
    return [g.ltorch.mul(ct[0], g.ltorch.add(s, ds))]


def test_a_users_op_with_its_own_strategy() -> None:
    sample = example_inputs(SwishOp)
    assert sample.operands[0].dtype == torch.float32
    check_decomposition(SwishOp, sample.operands, sample.params, rule=swish)
    check_decomposition_property(SwishOp, rule=swish, max_examples=10)
    check_vjp_property(SwishOp, rule=swish_vjp, max_examples=10)
    with pytest.raises(AssertionError, match=r"test\.swish: the decomposition disagrees"):
        check_decomposition_property(SwishOp, rule=lambda d, x, beta=None: x,
                                     max_examples=10, settings=NO_DATABASE)


def test_a_subclass_uses_its_bases_strategy() -> None:
    class MySilu(A.SiluOp):
        name = "test.my_silu"

    @DRAW
    @given(sample=op_inputs(MySilu))
    def drawn(sample: OpSample) -> None:
        assert is_float(sample.operands[0].dtype)

    drawn()
