"""The ltorch ops whose result keeps the floating dtype of their tensors: the table that
lets `thunder_ir.dialects.ltorch_base.float_result` type them without a meta run.

An op belongs here when, on tensors of one floating dtype (float16, bfloat16, float32,
float64) and device, with numbers where its operands allow them, its result is a tensor
of that dtype and device and of their broadcast shape, for every param its check
accepts; params eager refuses with float tensors must fail the check, so that the meta
kernel raises eager's error. `tests/test_decomp_core.py` checks every entry against the
meta kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thunder_ir.dialects import ltorch_activation as A
from thunder_ir.dialects import ltorch_core as C
from thunder_ir.dialects.ltorch_base import LtorchOp


def _alpha(params: dict[str, Any]) -> bool:
    alpha = params.get("alpha")  # (a bool alpha needs bool tensors)
    return alpha is None or type(alpha) in (int, float)


def _rounding_mode(params: dict[str, Any]) -> bool:
    return params.get("rounding_mode") in (None, "trunc", "floor")


def _decimals(params: dict[str, Any]) -> bool:
    decimals = params.get("decimals")
    return decimals is None or type(decimals) is int


def _approximate(params: dict[str, Any]) -> bool:
    return params.get("approximate") in (None, "none", "tanh")


def _softplus(params: dict[str, Any]) -> bool:
    return all(type(params.get(k, 1)) in (int, float) for k in ("beta", "threshold"))


FLOAT_PRESERVING: dict[type[LtorchOp], Callable[[dict[str, Any]], bool] | None] = {
    C.AddOp: _alpha, C.SubOp: _alpha, C.MulOp: None, C.DivOp: _rounding_mode,
    C.FloorDivideOp: None, C.RemainderOp: None, C.FmodOp: None, C.PowOp: None,
    C.MaximumOp: None, C.MinimumOp: None, C.Atan2Op: None,
    C.NegOp: None, C.AbsOp: None, C.ExpOp: None, C.Exp2Op: None, C.Expm1Op: None,
    C.LogOp: None, C.Log1pOp: None, C.Log2Op: None, C.SinOp: None, C.CosOp: None,
    C.TanOp: None, C.TanhOp: None, C.AsinOp: None, C.AcosOp: None, C.AtanOp: None,
    C.SinhOp: None, C.CoshOp: None, C.SqrtOp: None, C.RsqrtOp: None, C.ReciprocalOp: None,
    C.SignOp: None, C.FloorOp: None, C.CeilOp: None, C.RoundOp: _decimals, C.TruncOp: None,
    C.ErfOp: None, C.ErfcOp: None,
    A.ReluOp: None, A.GeluOp: _approximate, A.SiluOp: None, A.SigmoidOp: None,
    A.SoftplusOp: _softplus, A.HardswishOp: None, A.HardsigmoidOp: None,
}
"""Op class -> its params check (None: it takes no params)."""

for _op, _check in FLOAT_PRESERVING.items():
    _op.FLOAT_PRESERVING = True
    _op.FLOAT_NUMBERS = issubclass(_op, C.BinaryOp | C.PowOp)  # (numbers as operands)
    if _check is not None:
        _op.FLOAT_PARAMS = staticmethod(_check)  # type: ignore[assignment]

__all__ = ["FLOAT_PRESERVING"]
