"""`Symbol`: a registered operator, which records its op when traced code calls it."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils import _pytree as pytree
from xdsl.ir import Attribute, SSAValue

from thunder_ir.dialects.base import OperandRef, ThunderOp, flatten_groups, group, to_attr
from thunder_ir.dialects.modes import mode_key
from thunder_ir.dialects.types import TensorType, tensor_type
from thunder_ir.extend.ops import (
    OBJECT_TAG,
    OP_CLASSES,
    OperatorOp,
    class_layout,
    exact_static,
    has_tensor,
    make_op_class,
)
from thunder_ir.extend.vjp import autograd_rule, decode_refs
from thunder_ir.frontend.context import TraceContext, current, tracing_now
from thunder_ir.frontend.errors import ThunderTraceError, user_location
from thunder_ir.frontend.proxy import type_of_any
from thunder_ir.frontend.tracer import Placeholder, subtrace
from thunder_ir.passes.vjp import vjp
from thunder_ir.runtime.namespace import register as register_callee


class Namespaced(Protocol):
    """What a `Symbol` asks of its executor (`thunder_ir.extend.executor.OperatorExecutor`,
    which imports this module): the namespace its ops are named in."""

    namespace: str



_STATE = threading.local()


def diversion_suspended() -> int:
    return getattr(_STATE, "suspended", 0)


@contextlib.contextmanager
def suspend_diversion() -> Iterator[None]:
    """Calls to replaced functions run the original code (meta functions, checkers)."""
    _STATE.suspended = diversion_suspended() + 1
    try:
        yield
    finally:
        _STATE.suspended -= 1


def _freeze(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return (type(v), tuple(_freeze(x) for x in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, bool | int | float):
        return (type(v), v)
    if isinstance(v, torch.Tensor):
        return ("tensor", type_of_any(v))
    hash(v)
    return v


@dataclass
class _MetaResult:
    """What an operator's meta function said for one signature of arguments."""

    spec: Any  # pytree spec of its output
    leaves: list[Any]  # non-tensor leaves as returned; tensor leaves as None
    types: list[TensorType]  # result types, one per tensor leaf


class Symbol:
    """A registered operator: call it in traced code to record its op.

    Outside tracing it simply runs ``fn``. While tracing it runs the meta function on
    proxies, records one ``<executor>.<name>`` op and returns the meta function's output
    structure with the op's results in place of its tensors (non-tensor outputs, such as
    launch parameters, come back as the meta function returned them).
    """

    def __init__(self, executor: Namespaced, name: str, meta: Callable[..., Any],
                 fn: Callable[..., Any], replaces: Callable[..., Any] | None) -> None:
        self.executor = executor
        self.name = name
        self.meta = meta
        self.fn = fn
        self.replaces = replaces
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = getattr(fn, "__doc__", None)
        self._classes: dict[bool, type[OperatorOp]] = {}
        self._meta_cache: dict[Any, _MetaResult] = {}
        self.signature: inspect.Signature | None
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self.signature = None
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                 inspect.Parameter.KEYWORD_ONLY)
        if self.signature is not None and all(
                p.kind in kinds for p in self.signature.parameters.values()):
            self.params: tuple[tuple[str, Any], ...] | None = tuple(
                (p.name, p.kind) for p in self.signature.parameters.values())
        else:
            self.params = None

    def __repr__(self) -> str:
        return f"<operator {self.executor.namespace}.{self.name}>"

    @property
    def id(self) -> str:
        """``<executor>.<name>``, the name its ops carry."""
        return f"{self.executor.namespace}.{self.name}"

    # ---- running

    def _run_fn(self, *args: Any, **kwargs: Any) -> Any:
        with suspend_diversion():
            return self.fn(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not tracing_now():
            return self._run_fn(*args, **kwargs)
        ctx = current()
        ctx.loc = user_location()
        return self._record(ctx, args, kwargs)

    # ---- tracing

    def _run_meta(self, args: Sequence[Any], kwargs: dict[str, Any]) -> _MetaResult:
        try:
            key: Any = (_freeze(tuple(args)), _freeze(kwargs), mode_key())
            hit = self._meta_cache.get(key)
        except TypeError:
            key, hit = None, None
        if hit is not None:
            return hit
        def placeholder(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return Placeholder(type_of_any(x), "a", bool(x.requires_grad))
            return x

        # traced into a scratch program of its own: its torch calls never reach the trace
        inputs = pytree.tree_map(placeholder, (tuple(args), dict(kwargs)))
        with suspend_diversion():
            out = subtrace(lambda a, k: self.meta(*a, **k), inputs, user_code=False).result
        dev = next((type_of_any(x).dev for x in pytree.tree_leaves((args, kwargs))
                    if isinstance(x, torch.Tensor)), "cpu")
        leaves, spec = pytree.tree_flatten(out)
        types_: list[TensorType] = []
        kept: list[Any] = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                t = type_of_any(leaf)
                if t.dev == "meta" and dev != "meta":
                    t = tensor_type(t.sizes, t.dtype, dev)
                types_.append(t)
                kept.append(None)
            else:
                kept.append(leaf)
        res = _MetaResult(spec, kept, types_)
        if key is not None:
            self._meta_cache[key] = res
        return res

    def _static(self, cls: type[OperatorOp], v: Any, what: str) -> Any:
        """A static argument as a printable value, or an opaque-object tag."""
        if has_tensor(v):
            raise ThunderTraceError(
                f"{self.id}: argument {what} holds tensors inside a {type(v).__name__}; "
                "operators take tensors as top-level arguments (or through *args)")
        if exact_static(v):
            return v
        objs = cls.OBJECTS
        for i, o in enumerate(objs):
            if o is v:
                return (OBJECT_TAG, i)
        objs.append(v)
        return (OBJECT_TAG, len(objs) - 1)

    def _record(self, ctx: TraceContext, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        meta = self._run_meta(args, kwargs)
        cls = _op_class_for(self, len(meta.types) == 1)
        groups: list[Any] = []
        props: dict[str, Any] = {}
        if self.params is not None:
            assert self.signature is not None
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError as e:
                raise ThunderTraceError(f"{self.id}: {e}") from None
            bound.apply_defaults()
            for name, _ in self.params:
                v = bound.arguments[name]
                if isinstance(v, torch.Tensor):
                    groups.append(ctx.value_of(v))
                elif type(v) in (bool, int, float):
                    groups.append(ctx.build.number(v))
                else:
                    groups.append(None)
                    if v is not None:
                        props[name] = self._static(cls, v, repr(name))
        else:
            inputs: list[SSAValue] = []

            def enc(x: Any, what: str) -> Any:
                if isinstance(x, torch.Tensor):
                    inputs.append(ctx.value_of(x))
                    return OperandRef(len(inputs) - 1)
                if isinstance(x, list | tuple) and has_tensor(x):
                    return tuple(enc(e, what) for e in x)
                return self._static(cls, x, what)

            props["args"] = tuple(enc(a, f"#{i}") for i, a in enumerate(args))
            if kwargs:
                props["kwargs"] = tuple((k, enc(v, repr(k))) for k, v in kwargs.items())
            groups.append(inputs)
        op = _create(cls, groups, props, meta.types)
        results = iter(ctx.wrap(r) for r in ctx.record(op))
        leaves = [next(results) if x is None else x for x in meta.leaves]
        return pytree.tree_unflatten(leaves, meta.spec)


def _create(cls: type[ThunderOp], groups: Sequence[Any], props: dict[str, Any],
            result_types: Sequence[Attribute]) -> ThunderOp:
    """Builds an op from grouped operands, Python-valued properties and result types."""
    flat, sizes = flatten_groups(cls.operand_layout(), groups)
    properties = {k: to_attr(v) for k, v in props.items() if v is not None}
    if any(kind == "optional" for _, kind in cls.operand_layout()):
        from xdsl.dialects.builtin import DenseArrayBase, i32

        properties["operandSegmentSizes"] = DenseArrayBase.from_list(i32, sizes)
    return cls.create(operands=flat, result_types=list(result_types), properties=properties)



def _op_class_for(symbol: Symbol, single: bool) -> type[OperatorOp]:
    """The op class of ``symbol`` with one result (``single``) or a list of them."""
    known = symbol._classes.get(single)
    if known is not None:
        return known
    base = f"{symbol.executor.namespace}.{symbol.name}"
    layout = class_layout(symbol.params)
    for k in itertools.count():
        op_name = base if k == 0 else f"{base}_{k}"
        found = OP_CLASSES.get(op_name)
        if found is None:
            cls = make_op_class(op_name, symbol.params, single)
            OP_CLASSES[op_name] = cls
            vjp(cls)(autograd_rule)  # its rule, as any op registers one
            break
        if single == found.SINGLE and class_layout(found.PARAMS) == layout:
            cls = found  # the same operator registered again (a re-run cell): reuse it
            break
    cls.SYMBOL = symbol
    symbol._classes[single] = cls
    return cls

# --------------------------------------------------------------------------- by name


OPERATORS: dict[str, Symbol] = {}
"""Op name (``my_ex.apply_rope``) -> the symbol of the operator registered under it."""


def op_class_named(op_name: str, single: bool = True) -> type[OperatorOp]:
    """The op class of the operator ``op_name``: the one traced, else (printed source run
    in a fresh process, after importing the operator's module) made as a trace would
    make it, with one result where ``single``."""
    cls = OP_CLASSES.get(op_name)
    if cls is not None:
        return cls
    symbol = OPERATORS.get(op_name)
    if symbol is None:
        raise KeyError(f"no operator {op_name!r} is registered: import the module that "
                       "registers it (thunder_ir.extend's register_operator)")
    return _op_class_for(symbol, single)


def operator_call(op_name: str) -> Callable[..., Any]:
    """What generated code calls for the operator ``op_name`` (``my_ex.apply_rope(...)``)
    where no trace made its op class in this process: ``fn`` on the call's arguments, its
    tensor outputs returned as the op returns them (one, or a list of several)."""
    def call(*operands: Any, **params: Any) -> Any:
        cls = op_class_named(op_name)
        args, kwargs = cls.call_args(operands, params)
        out = cls.SYMBOL._run_fn(*args, **kwargs)
        leaves = [out] if isinstance(out, torch.Tensor) else \
            [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
        return leaves[0] if len(leaves) == 1 else leaves

    return call


def operator_vjp(op_name: str, *values: Any, n_inputs: int, params: Any,
                 segments: Sequence[int], ct_outputs: Sequence[int],
                 grad_inputs: Sequence[int]) -> Any:
    """Run-time backward of an operator that has no grad transform: its ``fn`` re-run on
    the forward inputs and recorded as an opaque call's is (`record_graph`), then
    differentiated through that graph (`handle_vjp`).

    Args:
        op_name: the operator op's name (``my_ex.apply_rope``).
        values: the op's ``n_inputs`` operands, then one cotangent per ``ct_outputs`` entry.
        params: the op's params as ``(name, value)`` pairs.
        segments: the op's operand segment sizes (``()`` when it has none).
        ct_outputs: which results the cotangents belong to.
        grad_inputs: which operands get a gradient.
    """
    from thunder_ir.runtime.autograd_fallback import handle_vjp, record_graph

    cls = op_class_named(op_name, single=not any(ct_outputs))
    decoded = {k: decode_refs(v) for k, v in params}
    segs = tuple(segments) or None

    def run(inputs: list[Any]) -> Any:
        args, kwargs = cls.call_args(group(cls.operand_layout(), inputs, segs), decoded)
        return cls.pick(cls.SYMBOL._run_fn(*args, **kwargs))

    # the same recording as an opaque call's, made here in the backward: fn is pure
    outs, handle = record_graph(run, values[:n_inputs], grad_inputs,
                                None if cls.SINGLE else True)
    if any(not outs[i].requires_grad for i in ct_outputs):
        raise RuntimeError(
            f"{op_name}: torch.autograd cannot differentiate the operator's fn (its outputs "
            "do not require grad, e.g. a Triton kernel); register a grad_transform for it "
            "with register_implementation")
    return handle_vjp(handle, *values[n_inputs:], ct_outputs=ct_outputs)


register_callee("operator_vjp", operator_vjp,  # it needs its operator's executor namespace
                names_in_arg=0)
