"""Input strategies of the activation ltorch ops (`thunder_ir.dialects.ltorch_activation`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.testing.inputs import (
    FLOAT_KIND,
    NUMERIC_KIND,
    InputSpec,
    OpSample,
    draw_data,
    register_inputs,
)


@register_inputs(A.ReluOp, A.SigmoidOp, A.GeluOp, A.SiluOp, A.SoftplusOp, A.HardswishOp,
                 A.HardsigmoidOp)
def _nn_activation(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    on_ints = spec.op in (A.ReluOp, A.SigmoidOp)
    bound = 4.0 if spec.for_vjp else 8.0
    x = draw_data(draw, spec, spec.shape(draw), NUMERIC_KIND if on_ints else FLOAT_KIND,
              -bound, bound)
    params: dict[str, Any] = {}
    if issubclass(spec.op, A.GeluOp):
        approximate = draw(st.sampled_from([None, "none", "tanh"]))
        if approximate is not None:
            params["approximate"] = approximate
    if issubclass(spec.op, A.SoftplusOp):
        params = _softplus_params(draw, spec)
    return OpSample([x], params)


def _softplus_params(draw: st.DrawFn, spec: InputSpec) -> dict[str, Any]:
    """``beta`` and ``threshold`` around the inputs' range, so both branches are taken
    (``beta x`` at the threshold, and past it; not for a VJP check, whose finite
    differences would straddle the kink)."""
    if spec.for_vjp:
        return draw(st.sampled_from([{}, {"beta": 2.0}, {"beta": 0.5, "threshold": 10}]))
    return draw(st.sampled_from([{}, {"beta": 2, "threshold": 3.0},
                                 {"beta": 0.5, "threshold": 1}, {"threshold": 2.0}]))


@register_inputs(A.ThresholdBackwardOp)
def _nn_threshold_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Inputs at, above and below the threshold (relu's results: zeros among positives)."""
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -2.0, 2.0)
    if draw(st.booleans()):
        x = x.clamp(min=0)
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    return OpSample([dy, x], {"threshold": draw(st.sampled_from([0, 0.5, -1.0]))})


@register_inputs(A.SiluBackwardOp)
def _nn_silu_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    bound = 4.0 if spec.for_vjp else 8.0
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -bound, bound)
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -bound, bound)
    return OpSample([dy.to(x.dtype), x], {})


# --------------------------------------------------------------------------- backward kernels


@register_inputs(A.GeluBackwardOp)
def _nn_gelu_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -4.0, 4.0)
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -4.0, 4.0).to(x.dtype)
    approximate = draw(st.sampled_from([None, "none", "tanh"]))
    return OpSample([dy, x], {} if approximate is None else {"approximate": approximate})


@register_inputs(A.SoftplusBackwardOp)
def _nn_softplus_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -4.0, 4.0)
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -4.0, 4.0).to(x.dtype)
    params = draw(st.sampled_from([{"beta": 1.0, "threshold": 20.0},
                                   {"beta": 2, "threshold": 3.0}, {"beta": 0.5, "threshold": 1}]))
    return OpSample([dy, x], params)


@register_inputs(A.HardswishBackwardOp, A.HardsigmoidBackwardOp)
def _hard_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Inputs on both sides of the kinks at -3 and 3, and sometimes exactly on them."""
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -5.0, 5.0)
    if x.numel() and draw(st.booleans()):
        x.view(-1)[0] = draw(st.sampled_from([-3.0, 3.0]))
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    return OpSample([dy, x], {})

