"""Operator ops: one IRDL op class per registered operator (`OperatorOp`), and how
static arguments are kept in its properties."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ArrayAttr
from xdsl.ir import Attribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure

from thunder_ir.dialects.base import OperandRef, ShapeError
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.torch import substitute
from thunder_ir.dialects.traits import Opaque
from thunder_ir.dialects.types import NumberType, TensorType


class OperatorSymbol(Protocol):
    """What an operator op asks of its operator (`thunder_ir.extend.symbols.Symbol`, which
    imports this module: the protocol keeps the two out of a circle, types included)."""

    name: str
    executor: Any

    def _run_fn(self, *args: Any, **kwargs: Any) -> Any: ...


OBJECT_TAG = "$object"
"""Tag of an opaque Python object in a static argument: ``("$object", k)``."""


def exact_static(v: Any) -> bool:
    """True if ``v`` survives `to_attr`/`from_attr` unchanged (so traces can print it)."""
    if v is None or isinstance(v, bool | int | float | str | torch.dtype | slice):
        return not isinstance(v, OperandRef)
    if v is Ellipsis:
        return True
    if type(v) is tuple:
        return all(exact_static(x) for x in v)
    return False


def has_tensor(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, list | tuple):
        return any(has_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(has_tensor(x) for x in v.values())
    return False


# --------------------------------------------------------------------------- operator ops


class OperatorOp(LtorchOp):
    """Base of the op classes `OperatorExecutor.register_operator` creates.

    A subclass has either one optional operand and one property per parameter of the
    operator's ``fn`` (``PARAMS``; its call prints as ``my_ex.f(x, 2, None, mode='a')``),
    or, for functions with ``*args``/``**kwargs``, one variadic ``inputs`` operand and
    ``args``/``kwargs`` properties in which ``#prims.operand<i>`` stands for ``inputs[i]``.
    """

    SYMBOL: ClassVar[OperatorSymbol]
    PARAMS: ClassVar[tuple[tuple[str, Any], ...] | None] = None
    OBJECTS: ClassVar[list[Any]]
    SINGLE: ClassVar[bool] = True
    EXECUTABLE: ClassVar[bool] = True
    """Lowering leaves the op as it is: generated code calls it through its namespace."""

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        raise ShapeError(f"{cls.name}: result types come from the operator's meta function "
                         "while tracing; build it through its symbol")

    def verify_(self) -> None:
        """Result types were computed by the meta function while tracing; nothing to redo."""

    @classmethod
    def call_args(cls, groups: Sequence[Any], params: dict[str, Any]
                  ) -> tuple[list[Any], dict[str, Any]]:
        """``fn``'s positional and keyword arguments, given the op's grouped operand values
        (tensors, proxies or numbers) and its params."""
        objs = cls.OBJECTS
        if cls.PARAMS is None:
            inputs = list(groups[0])
            args = _decode(substitute(params.get("args") or (), inputs), objs)
            kw = {k: _decode(substitute(v, inputs), objs) for k, v in params.get("kwargs") or ()}
            return list(args), kw
        pos: list[Any] = []
        kwargs: dict[str, Any] = {}
        for (name, kind), g in zip(cls.PARAMS, groups):
            st = params.get(name)
            v = _decode(st, objs) if st is not None else g
            if kind is inspect.Parameter.KEYWORD_ONLY:
                kwargs[name] = v
            else:
                pos.append(v)
        return pos, kwargs

    @classmethod
    def pick(cls, out: Any) -> Any:
        """The tensors among ``fn``'s outputs: the result, or a list for several."""
        if isinstance(out, torch.Tensor):
            leaves = [out]
        else:
            leaves = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
        if cls.SINGLE:
            if len(leaves) != 1:
                raise RuntimeError(f"{cls.name}: fn returned {len(leaves)} tensors where its "
                                   "meta function promised 1")
            return leaves[0]
        return leaves

    @classmethod
    def ref(cls, /, *operands: Any, **params: Any) -> Any:
        """Runs the operator's ``fn`` on concrete values; returns its tensor outputs."""
        args, kwargs = cls.call_args(operands, params)
        return cls.pick(cls.SYMBOL._run_fn(*args, **kwargs))


def _decode(v: Any, objs: Sequence[Any]) -> Any:
    """Undoes `Symbol._static`: opaque-object tags become their objects again."""
    if type(v) is tuple:
        if len(v) == 2 and v[0] == OBJECT_TAG and type(v[1]) is int:
            return objs[v[1]]
        return tuple(_decode(x, objs) for x in v)
    return v


OP_CLASSES: dict[str, type[OperatorOp]] = {}
"""Op name -> class, for every operator ever registered (re-registration reuses them)."""


def class_layout(params: tuple[tuple[str, Any], ...] | None) -> Any:
    return None if params is None else tuple((n, str(k)) for n, k in params)


def make_op_class(op_name: str, params: tuple[tuple[str, Any], ...] | None,
                   single: bool) -> type[OperatorOp]:
    """An IRDL op class for an operator (see `OperatorOp`)."""
    fields: dict[str, Any] = {
        "name": op_name,
        "__module__": "thunder_ir.extend",
        "__doc__": f"The operator ``{op_name}`` (registered with thunder_ir.extend).",
        "traits": traits_def(Pure(), Opaque()),
    }
    if params is None:
        fields["inputs"] = var_operand_def(TensorType | NumberType)
        fields["args"] = prop_def(ArrayAttr)
        fields["kwargs"] = opt_prop_def(ArrayAttr)
    else:
        for i, (pname, _) in enumerate(params):
            fields[f"in{i}_{pname}"] = opt_operand_def(TensorType | NumberType)
        for i, (pname, _) in enumerate(params):
            fields[f"p{i}_{pname}"] = opt_prop_def(Attribute, prop_name=pname)
        fields["irdl_options"] = (AttrSizedOperandSegments(as_property=True),)
    fields["outs"] = result_def(TensorType) if single else var_result_def(TensorType)
    cls_name = "".join(p.capitalize() for p in op_name.replace(".", "_").split("_")) + "Op"
    cls: type[OperatorOp] = irdl_op_definition(type(cls_name, (OperatorOp,), fields))
    cls.PARAMS = params
    cls.OBJECTS = []
    cls.SINGLE = single
    return cls
