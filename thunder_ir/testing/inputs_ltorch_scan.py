"""Input strategies of the scan ltorch ops (`thunder_ir.dialects.ltorch_scan`)."""

from __future__ import annotations

from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_scan as S
from thunder_ir.testing.inputs import (
    ANY_KIND,
    FLOAT_KIND,
    NUMERIC_KIND,
    InputSpec,
    OpSample,
    draw_data,
    register_inputs,
)


@register_inputs(S.CumsumOp)
def _lt_cumsum(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Any dtype (ints and bools sum to int64), every dim in either sign (a rank-0 tensor
    takes 0 and -1), and sometimes a ``dtype`` to sum in."""
    x = draw_data(draw, spec, spec.shape(draw), FLOAT_KIND if spec.for_vjp else ANY_KIND)
    r = max(x.ndim, 1)
    dtype = None
    if not spec.for_vjp and draw(st.booleans()):
        dtype = spec.any_dtype(draw, FLOAT_KIND if x.dtype.is_floating_point else NUMERIC_KIND)
    return OpSample([x], {"dim": draw(st.integers(-r, r - 1)), "dtype": dtype})
