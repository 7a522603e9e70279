"""What every ``ltorch`` op shares: torch semantics by construction.

An ltorch op is one PyTorch operation with PyTorch's semantics. Its operands are the
tensor (and traced-number) arguments in torch's positional order; its params are the
remaining arguments, *named as torch names them*, with defaults resolved while tracing.
So the reference implementation is simply ``TORCH_FN(*operands, **params)``, and the
torch executor can emit the same call.

The shape/dtype rule runs the reference on meta tensors: torch's own broadcasting, type
promotion and shape errors, for free. Results are cached by (op, operand types, params),
so tracing a model of repeated blocks pays for each distinct signature once.

Two cases skip the meta run. An elementwise op listed as float-preserving
(`LtorchOp.FLOAT_PRESERVING`, with params it accepts; declared by `ltorch_op`'s
``floats``) on tensors of one floating dtype and device, and
numbers, gives a tensor of that dtype and device, of their broadcast shape
(`float_result`). torch's meta kernels for elementwise ops are Python (its refs, 90 to
250 µs a call); anything else, a shape that does not broadcast included, goes the meta
way, which raises eager's error. And the plain case of the other ops a Llama- or GPT-2-
style model runs (reductions, comparisons, ``cat``, ``linear``, ``matmul``, layer norm,
softmax, the losses, their backward ops, and convolution, pooling, batch norm) is typed
by its rule (`LtorchOp.TYPE_RULE`, declared by `ltorch_op`'s ``type_rule``, one of
`thunder_ir.dialects.ltorch_rules`),
where the meta kernels would import torch's symbolic shapes and ``torch._dynamo`` the
first time. `tests/test_decomp_core.py` checks both tables against the meta kernels.
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
from thunder_ir.dialects.types import (
    NumberType,
    TensorType,
    broadcast,
    is_float,
    pretty_type,
    tensor_type,
)

_T = TypeVar("_T", bound=type[ThunderOp])

LTORCH: list[type[ThunderOp]] = []
"""Every ltorch op class, in declaration order (the dialect module assembles them)."""


def ltorch_op(torch_fn: Callable[..., Any], *, type_rule: Callable[..., Any] | None = None,
              symbolic: bool = False,
              floats: bool | Callable[[dict[str, Any]], bool] = False
              ) -> Callable[[_T], _T]:
    """Declares a leaf ltorch op: IRDL definition, registration, its torch function, and
    the facts that type it without a meta run, declared where the op is:

    Args:
        type_rule: its `LtorchOp.TYPE_RULE` (`thunder_ir.dialects.ltorch_rules`).
        symbolic: the rule also runs in a symbolic compile (`TYPE_RULE_SYMBOLIC`).
        floats: it keeps its tensors' floating dtype (`LtorchOp.FLOAT_PRESERVING`); a
            callable: the check of the params it does so with (`FLOAT_PARAMS`). Numbers
            may be among its operands where its family says so (``NUMBER_OPERANDS``).
    """

    def wrap(cls: _T) -> _T:
        op = irdl_op_definition(cls)
        op.TORCH_FN = staticmethod(torch_fn)  # type: ignore[attr-defined]
        if type_rule is not None:
            op.TYPE_RULE = staticmethod(type_rule)  # type: ignore[attr-defined]
            op.TYPE_RULE_SYMBOLIC = symbolic  # type: ignore[attr-defined]
        if floats is not False:
            op.FLOAT_PRESERVING = True  # type: ignore[attr-defined]
            op.FLOAT_NUMBERS = op.NUMBER_OPERANDS  # type: ignore[attr-defined]
            if callable(floats):
                op.FLOAT_PARAMS = staticmethod(floats)  # type: ignore[attr-defined]
        LTORCH.append(op)
        return op  # type: ignore[return-value]

    return wrap


def aten_kernel(name: str, overload: str = "default") -> Any:
    """The C++ callable of ``torch.ops.aten.<name>.<overload>``: what the overload's
    ``__call__`` calls, without its Python frame (a cached call makes one per op; the
    backward kernels VJP rules emit call ATen overloads directly, since ``torch.ops``
    packets resolve their overload on every call, a few microseconds a 2-ms step notices)."""
    op = getattr(getattr(torch.ops.aten, name), overload)
    return getattr(op, "_op", op)


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
    if isinstance(v, torch.SymInt | torch.SymFloat | torch.SymBool):  # (symbolic compiles)
        return (type(v), v.node.expr)
    return v


def _over_unbacked(types: Any) -> bool:
    """Whether a tensor type among ``types`` (lists of them too) has a size over unbacked
    symbols (``u0``)."""
    for t in types:
        if type(t) is list:
            if _over_unbacked(t):
                return True
        elif type(t) is TensorType and t.symbolic and symbols.unbacked(*t.sizes):
            return True
    return False


_INFER_CACHE: dict[Any, Any] = {}

_SYMBOLIC_PARAM = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _symbol_free(frozen: Any) -> bool:
    """Whether a frozen key (`_freeze`'s) holds no symbolic size: no tensor type with one
    and no ``SymInt`` param. Such an op types alike in a symbolic compile and a static
    one (the attention mask a Swin block builds from its static window sizes)."""
    t = type(frozen)
    if t is TensorType:
        return not frozen.symbolic
    if t is tuple:
        if len(frozen) == 2 and frozen[0] in _SYMBOLIC_PARAM:
            return False
        return all(_symbol_free(x) for x in frozen)
    return True


def alike_tensors(operand_types: Any, numbers: bool
                  ) -> tuple[TensorType, list[tuple[int, ...]]] | None:
    """The first tensor operand and every tensor operand's sizes, where the tensors share
    its dtype and device and the other operands are numbers (``numbers``: allowed at
    all); None otherwise, or with no tensor."""
    first: TensorType | None = None
    shapes = []
    for t in operand_types:
        if type(t) is TensorType:
            if first is None:
                first = t
            elif t.element_type != first.element_type or t.dev != first.dev:
                return None
            shapes.append(t.sizes)
        elif type(t) is not NumberType or not numbers:
            return None
    return None if first is None else (first, shapes)


def float_result(cls: type[LtorchOp], operand_types: Any, params: dict[str, Any]
                 ) -> TensorType | None:
    """The result type of a `LtorchOp.FLOAT_PRESERVING` op whose tensor operands share one
    floating dtype (float16, bfloat16, float32, float64) and device, the others being
    numbers: that dtype and device, and the operands' broadcast shape. None where the
    rule does not say (other operands, params `LtorchOp.FLOAT_PARAMS` refuses, shapes
    that do not broadcast)."""
    if not cls.FLOAT_PARAMS(params):
        return None
    alike = alike_tensors(operand_types, cls.FLOAT_NUMBERS)
    if alike is None or not is_float(alike[0].dtype):
        return None
    first, shapes = alike
    if symbols.current() is not None:  # (sizes may be symbols: proved, never decided)
        if all(symbols.proved_same(s, shapes[0]) for s in shapes):
            return first
        shape = symbols.proved_broadcast(shapes)
        if shape is None:
            return None
        return tensor_type(shape, first.dtype, first.dev)
    if all(s == shapes[0] for s in shapes):
        return first
    shape = broadcast(shapes)
    if shape is None:  # the meta kernel raises eager's error
        return None
    return first if shape == first.sizes else tensor_type(shape, first.dtype, first.dev)


class LtorchOp(ThunderOp):
    """Base of ltorch ops: reference = ``TORCH_FN``; shape rule = reference on meta."""

    TORCH_FN: ClassVar[Callable[..., Any]]
    FLOAT_PRESERVING: ClassVar[bool] = False
    """Elementwise, and on tensors of one floating dtype (with numbers) it gives that dtype
    (`float_result`): ``add``, ``exp``, ``silu``; not ``eq`` or ``isnan``. Set from the
    op's declaration (`ltorch_op`'s ``floats``), with the two below."""
    NUMBER_OPERANDS: ClassVar[bool] = False
    """Its family takes numbers where torch takes tensors (``x * 2``, ``pow(2, x)``)."""
    FLOAT_NUMBERS: ClassVar[bool] = False
    """`float_result` also holds with numbers among the operands (``x * 2``)."""
    FLOAT_PARAMS: ClassVar[Callable[[dict[str, Any]], bool]] = staticmethod(
        lambda params: all(v is None for v in params.values()))
    """Whether `float_result` holds with these params (eager takes them with float
    tensors); by default, when none is given."""
    TYPE_RULE: ClassVar[Callable[..., Attribute | None] | None] = None
    """``(operand types, params) -> result type``, or None where it does not say: a rule
    for the plain case, declared with the op (`ltorch_op`'s ``type_rule``)."""
    TYPE_RULE_SYMBOLIC: ClassVar[bool] = False
    """Whether `TYPE_RULE` also runs in a symbolic compile."""

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
        table = symbols.current()
        static = table is None
        # Static types are kept for the process; a symbolic compile's for that compile
        # (its types' symbols are its own; a model types alike layer after layer, and the
        # guards a first answer recorded hold for the next), except over unbacked sizes
        # (each data-dependent result is a new symbol; a decision on one emits a check).
        cache = _INFER_CACHE if static else table.__dict__.setdefault("_infer", {})
        key = (cls, _freeze(operand_types),
               _freeze(sorted(params.items())) if params else (),
               torch.get_default_dtype())
        if not static and _symbol_free(key[1:3]):
            # (no symbol among its types and params: typed as in a static compile, by
            # the process's cache; the fake kernel would answer the same)
            static, cache = True, _INFER_CACHE
        try:
            hit = cache.get(key)
        except TypeError:  # unhashable param: skip the cache
            key = None
        if hit is not None:
            return hit
        if not static and key is not None and _over_unbacked(operand_types):
            key = None
        if cls.FLOAT_PRESERVING and (key is not None or not static):
            fast = float_result(cls, operand_types, params)
            if fast is not None:
                if key is not None:
                    cache[key] = fast
                return fast
        if cls.TYPE_RULE is not None and (static or cls.TYPE_RULE_SYMBOLIC):
            typed = cls.TYPE_RULE(operand_types, params)
            if typed is not None:
                if key is not None and (static or not _over_unbacked([typed])):
                    cache[key] = typed
                return typed
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
        if key is not None and (static or not _over_unbacked(
                result if isinstance(result, list) else [result])):
            cache[key] = result
        return result
