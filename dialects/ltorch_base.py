"""What every ``ltorch`` op shares: torch semantics by construction.

An ltorch op is one PyTorch operation with PyTorch's semantics. Its operands are the
tensor (and traced-number) arguments in torch's positional order; its params are the
remaining arguments, *named as torch names them*, with defaults resolved while tracing.
So the reference implementation is simply ``TORCH_FN(*operands, **params)``, and the
torch executor can emit the same call.

The shape/dtype rule runs the reference on meta tensors: torch's own broadcasting, type
promotion and shape errors, for free. Results are cached by (op, operand types, params),
so tracing a model of repeated blocks pays for each distinct signature once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp
from thunder_ir.dialects.torch import meta_value, type_of_meta
from thunder_ir.dialects.types import NumberType, TensorType, pretty_type

_T = TypeVar("_T", bound=type[ThunderOp])

LTORCH: list[type[ThunderOp]] = []
"""Every ltorch op class, in declaration order (the dialect module assembles them)."""


def ltorch_op(torch_fn: Callable[..., Any]) -> Callable[[_T], _T]:
    """Declares a leaf ltorch op: IRDL definition, registration, and its torch function."""

    def wrap(cls: _T) -> _T:
        op = irdl_op_definition(cls)
        op.TORCH_FN = staticmethod(torch_fn)  # type: ignore[attr-defined]
        LTORCH.append(op)
        return op  # type: ignore[return-value]

    return wrap


def _freeze(v: Any) -> Any:
    t = type(v)
    if t is TensorType or t is NumberType or v is None:  # (most operands and params)
        return v
    if t is tuple or t is list:
        return tuple([_freeze(x) for x in v])
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, slice):
        return ("slice", v.start, v.stop, v.step)
    if isinstance(v, OperandRef):
        return ("operand", int(v))
    if isinstance(v, bool | int | float):  # 1, 1.0 and True are equal keys but not types
        return (type(v), v)
    return v


_INFER_CACHE: dict[Any, Any] = {}


class LtorchOp(ThunderOp):
    """Base of ltorch ops: reference = ``TORCH_FN``; shape rule = reference on meta."""

    TORCH_FN: ClassVar[Callable[..., Any]]

    @classmethod
    def result_device(cls, operand_types: list[Any], params: dict[str, Any]) -> str:
        """Where results live: the ``device`` param, else the first tensor operand's."""
        dev = params.get("device")
        if dev is not None:
            return str(dev)
        for t in operand_types:
            if isinstance(t, TensorType):
                return t.dev
        return "cpu"

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        # the default dtype too: Python floats and factories without a dtype follow it
        key: tuple[Any, ...] | None = None
        hit = None
        if symbols.current() is None:  # (a symbolic run records guards: never cached)
            key = (cls, _freeze(operand_types),
                   _freeze(sorted(params.items())) if params else (),
                   torch.get_default_dtype())
            try:
                hit = _INFER_CACHE.get(key)
            except TypeError:  # unhashable param: skip the cache
                key = None
        if hit is not None:
            return hit
        flat = [t for g in operand_types for t in (g if isinstance(g, list) else [g])
                if t is not None]
        for t in flat:
            if not isinstance(t, TensorType | NumberType):
                raise ShapeError(f"{cls.name}: unsupported operand type {t}")
        metas = [[meta_value(t) for t in g] if isinstance(g, list) else
                 (None if g is None else meta_value(g)) for g in operand_types]
        meta_params = {k: ("meta" if k == "device" else v) for k, v in params.items()}
        try:
            with symbols.stand_in_mode():
                out = cls.ref(*metas, **meta_params)
        except (RuntimeError, ValueError, TypeError, IndexError, AssertionError) as e:
            # (torch's meta functions check their inputs with asserts too)
            shapes = ", ".join(pretty_type(t) for t in flat)
            raise ShapeError(f"{cls.name}: invalid inputs ({shapes}): {e}") from None
        dev = cls.result_device(flat, params)
        if isinstance(out, tuple | list):
            result: Any = [type_of_meta(o, dev) for o in out]
        else:
            result = type_of_meta(out, dev)
        if key is not None:
            _INFER_CACHE[key] = result
        return result
