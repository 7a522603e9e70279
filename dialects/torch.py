"""The ``torch`` dialect: executable calls into PyTorch.

``torch.call`` names its callee by its import path (``torch.nn.functional.linear``) and
carries the call's static arguments. Tensor arguments are the op's operands; inside
``args``/``kwargs`` the attribute ``#prims.operand<i>`` stands for operand ``i``, so one op
expresses any mix of tensors and constants::

    %y = "torch.call"(%x, %w) <{callee = "torch.nn.functional.linear",
                               args = [#prims.operand<0>, #prims.operand<1>, none]}>

It is the torch executor's target, and the frontend's fallback for functions with no
``ltorch`` op (result types then come from torch's meta kernels). It is not ``Pure``:
an arbitrary torch function may draw random numbers or mutate, so CSE/DCE leave it alone
and fusion regions never move across it. A call whose builder knows the callee is a pure
function of its operands says so with the ``pure`` property (``make_call(..., pure=True)``,
as the SDPA executor's attention calls do); then it has no effects (`PureIfMarked`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, StringAttr, UnitAttr
from xdsl.ir import Attribute, Dialect, Operation
from xdsl.irdl import (
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import EffectInstance, MemoryEffect

from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp, from_attr, to_attr
from thunder_ir.dialects.types import NumberType, TensorType, pretty_type, type_of_tensor


def resolve_callee(path: str) -> Callable[..., Any]:
    """Imports ``a.b.c`` and returns ``c``; also walks attributes (``torch.Tensor.add_``)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(f"cannot resolve torch.call callee {path!r}")


def substitute(value: Any, operands: Sequence[Any]) -> Any:
    """Replaces every `OperandRef` inside a static argument by the operand it names."""
    if isinstance(value, OperandRef):
        return operands[value]
    if isinstance(value, tuple):
        return tuple(substitute(v, operands) for v in value)
    return value


class PureIfMarked(MemoryEffect):
    """No effects when the op carries the ``pure`` property; unknown effects otherwise."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        return set() if "pure" in op.properties else None


@irdl_op_definition
class CallOp(ThunderOp):
    """`%r = "torch.call"(%a, ...) <{callee = "torch.nn.functional.linear", args, kwargs}>`"""

    name = "torch.call"

    inputs = var_operand_def(TensorType | NumberType)
    callee = prop_def(StringAttr)
    args = prop_def(ArrayAttr)
    kwargs = opt_prop_def(DictionaryAttr)
    multi = opt_prop_def(Attribute)  # the callee returns a sequence (even of one)
    pure = opt_prop_def(UnitAttr)  # the callee is a pure function of its operands
    outs = var_result_def(TensorType | NumberType)

    traits = traits_def(PureIfMarked())

    def call_args(self, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the call, given the operand values."""
        args = substitute(from_attr(self.args), values)
        kw = {} if self.kwargs is None else {
            k: substitute(from_attr(v), values) for k, v in self.kwargs.data.items()}
        return args, kw

    @classmethod
    def infer(cls, inputs: Sequence[Any], **params: Any) -> list[Attribute]:
        raise ShapeError("torch.call: result types come from the callee's meta kernel; "
                         "build it with make_call")

    def verify_(self) -> None:
        """Result types of an opaque call cannot be re-derived cheaply; check the refs."""
        n = len(self.inputs)

        def walk(v: Any) -> None:
            if isinstance(v, OperandRef) and not 0 <= v < n:
                from xdsl.utils.exceptions import VerifyException
                raise VerifyException(f"torch.call {self.callee.data}: #prims.operand<{int(v)}> "
                                      f"but only {n} operands")
            if isinstance(v, tuple):
                for x in v:
                    walk(x)
        walk(from_attr(self.args))

    def run(self, values: Sequence[Any]) -> Any:
        """Calls the callee on concrete operand values."""
        args, kw = self.call_args(values)
        return resolve_callee(self.callee.data)(*args, **kw)


def make_call(callee: str, operands: Sequence[Any], args: Sequence[Any],
              kwargs: dict[str, Any] | None = None,
              result_types: Sequence[Attribute] | None = None,
              pure: bool = False) -> CallOp:
    """Builds a ``torch.call``. Without ``result_types`` they come from a meta run.
    ``pure``: the callee draws no random numbers, mutates nothing and returns fresh
    values, so the call may be deduplicated, dropped when unused, and fused around."""
    props: dict[str, Attribute] = {"callee": StringAttr(callee),
                                   "args": ArrayAttr([to_attr(a) for a in args])}
    if pure:
        props["pure"] = UnitAttr()
    if kwargs:
        props["kwargs"] = DictionaryAttr({k: to_attr(v) for k, v in kwargs.items()})
    if result_types is None:
        metas = [meta_value(v.type) for v in operands]
        op = CallOp.create(operands=list(operands), result_types=(), properties=props)
        out = op.run(metas)
        multi = isinstance(out, tuple | list)
        outs = out if multi else (out,)
        dev = next((v.type.dev for v in operands if isinstance(v.type, TensorType)), "cpu")
        result_types = [type_of_meta(o, dev) for o in outs]
        if multi:
            props["multi"] = to_attr(True)
    return CallOp.create(operands=list(operands), result_types=list(result_types),
                         properties=props)


def meta_value(t: Attribute) -> Any:
    """A stand-in value of a type for a meta run: a meta tensor or a sample number."""
    if isinstance(t, TensorType):
        return torch.empty(t.sizes, dtype=t.dtype, device="meta")
    if isinstance(t, NumberType):
        return t.python_type(1)
    raise TypeError(f"no meta value for {pretty_type(t)}")


def type_of_meta(v: Any, device: str) -> Attribute:
    """The type of a meta-run result, placed on ``device``."""
    from thunder_ir.dialects.types import number_type, tensor_type

    if isinstance(v, torch.Tensor):
        return tensor_type(tuple(v.shape), v.dtype, device) if v.device.type == "meta" \
            else type_of_tensor(v)
    if type(v) in (bool, int, float):
        return number_type(type(v))
    raise TypeError(f"unsupported result {type(v).__name__} from a meta run")


Torch = Dialect("torch", [CallOp], [])
