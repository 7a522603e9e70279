"""Decompositions of the neural-network ltorch families (linear algebra, activations,
normalization, attention, dropout, embedding, losses)."""

from __future__ import annotations

from xdsl.ir import SSAValue

from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.passes.decompositions import Decomposer, decomposes


@decomposes(N.LinearOp)
def linear(d: Decomposer, x: SSAValue, w: SSAValue, bias: SSAValue | None) -> SSAValue:
    return d.prims.linear(x, w, bias)
