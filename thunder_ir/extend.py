"""``thunder_ir.extend``: executors of your own, with operators and implementations.

An `OperatorExecutor` brings two things to a jitted program:

* **operators** (`OperatorExecutor.register_operator`): a Python function that thunder_ir
  records as *one op* instead of tracing through it. The op is named
  ``<executor>.<operator>`` and prints that way in every trace
  (``t2 = my_ex.apply_rope(x, cos, sin)``); generated code calls the operator's ``fn``.
  Result shapes come from ``meta`` (or ``like``), run on proxies while tracing. With
  ``replaces=f``, calls to the Python function ``f`` made while a program is traced are
  diverted to the operator, however user code reaches ``f``.
* **implementations** (`OperatorExecutor.register_implementation`) of an operator or of an
  ``ltorch`` op: a ``checker`` decides per call whether this executor takes the op; an
  ``execution_transform`` (Python written with torch functions and operators) replaces it
  when it does; a ``grad_transform`` defines its backward with `get_grad`/`put_grads`.

How it maps onto the compiler (see ARCHITECTURE.md, "Extending"):

* each operator is an op class created at registration: an ``ltorch``-level op
  (`OperatorOp`) with one optional operand per parameter of ``fn`` (tensors, and numbers
  as ``prims.constant`` values, so traces print them inline) and one property per
  parameter for other static values. It is ``Pure`` and ``EXECUTABLE``: lowering keeps
  it, and generated code calls it through its namespace (``my_ex.apply_rope``).
* claiming: ``can_claim`` runs the checker; ``expand`` traces the execution transform
  into ops that replace the claimed op (the claim pass then claims those in turn).
* autodiff: ``vjp_rule`` turns a grad transform into a VJP rule. The transform is traced
  with proxies bound to the op's operands; the values it passes to `put_grads` (and
  everything they need) are copied into the backward, where they show up in
  ``last_backward_traces``. An operator without a grad transform is differentiated by
  ``torch.autograd`` through its ``fn`` at run time (`operator_vjp`).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
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

from thunder_ir import proxy as _proxy
from thunder_ir import tracing
from thunder_ir.dialects.base import (
    OperandRef,
    ShapeError,
    ThunderOp,
    flatten_groups,
    group,
    to_attr,
)
from thunder_ir.dialects.ltorch_base import LtorchOp
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.torch import make_call, substitute
from thunder_ir.dialects.types import NumberType, TensorType, pretty_type, tensor_type
from thunder_ir.lowering.executors import Executor, get_all_executors, get_default_executors
from thunder_ir.lowering.executors import register_executor as _register_executor
from thunder_ir.passes.vjp import VJP_RULES, Grad, is_differentiable_value

__all__ = [
    "OperatorExecutor",
    "OperatorOp",
    "Symbol",
    "TensorProxy",
    "add_default_executor",
    "deregister_executor",
    "get_all_executors",
    "get_default_executors",
    "get_grad",
    "operator_vjp",
    "put_grads",
    "register_executor",
]


# --------------------------------------------------------------------------- TensorProxy


class _TensorProxyMeta(type):
    """``isinstance(x, TensorProxy)`` answers for the tracer's proxies."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _proxy.TensorProxy)

    def __subclasscheck__(cls, sub: type) -> bool:
        return isinstance(sub, type) and issubclass(sub, _proxy.TensorProxy)


class TensorProxy(metaclass=_TensorProxyMeta):
    """Makes tensor proxies, as meta functions return them: ``TensorProxy(like=x)``.

    ``TensorProxy(like=x, shape=..., dtype=..., device=...)`` is a proxy with ``x``'s
    metadata (``x`` a proxy or any tensor, meta tensors included), overridden by whichever
    of ``shape``, ``dtype`` and ``device`` are given; it is not attached to any program.
    ``TensorProxy(value)`` wraps an SSA value like the tracer's own proxies.
    ``isinstance(t, TensorProxy)`` holds for every proxy the tracer hands out.
    """

    def __new__(cls, value: SSAValue | None = None, requires_grad: bool = False,  # type: ignore[misc]
                base: Any = None, *, like: torch.Tensor | None = None,
                shape: Sequence[int] | None = None, dtype: torch.dtype | None = None,
                device: str | torch.device | None = None) -> _proxy.TensorProxy:
        if value is not None:
            return _proxy.TensorProxy(value, requires_grad=requires_grad, base=base)
        if like is None and (shape is None or dtype is None):
            raise TypeError("TensorProxy() needs like=<tensor>, or shape= and dtype=")
        if like is not None:
            t = _type_of_any(like)
            shape = tuple(t.sizes) if shape is None else tuple(shape)
            dtype = t.dtype if dtype is None else dtype
            dev = t.dev if device is None else _canonical(device)
            requires_grad = requires_grad or bool(like.requires_grad)
        else:
            dev = _canonical(device or "cpu")
        assert shape is not None and dtype is not None
        arg = Block(arg_types=[tensor_type(tuple(shape), dtype, dev)]).args[0]
        return _proxy.TensorProxy(arg, requires_grad=requires_grad)


def _canonical(device: str | torch.device) -> str:
    from thunder_ir.dialects.types import canonical_device

    return canonical_device(device)


def _type_of_any(t: torch.Tensor) -> TensorType:
    """The tensor type of a proxy, or of a real or meta tensor."""
    if _proxy.is_proxy(t):
        ty = t._value.type  # type: ignore[attr-defined]
        assert isinstance(ty, TensorType)
        return ty
    return tensor_type(tuple(t.shape), t.dtype, _canonical(t.device))


# --------------------------------------------------------------------------- static values

_OBJECT = "$object"
"""Tag of an opaque Python object in a static argument: ``("$object", k)``."""


def _exact_static(v: Any) -> bool:
    """True if ``v`` survives `to_attr`/`from_attr` unchanged (so traces can print it)."""
    if v is None or isinstance(v, bool | int | float | str | torch.dtype | slice):
        return not isinstance(v, OperandRef)
    if v is Ellipsis:
        return True
    if type(v) is tuple:
        return all(_exact_static(x) for x in v)
    return False


def _has_tensor(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return True
    if isinstance(v, list | tuple):
        return any(_has_tensor(x) for x in v)
    if isinstance(v, dict):
        return any(_has_tensor(x) for x in v.values())
    return False


# --------------------------------------------------------------------------- operator ops


class OperatorOp(LtorchOp):
    """Base of the op classes `OperatorExecutor.register_operator` creates.

    A subclass has either one optional operand and one property per parameter of the
    operator's ``fn`` (``PARAMS``; its call prints as ``my_ex.f(x, 2, None, mode='a')``),
    or, for functions with ``*args``/``**kwargs``, one variadic ``inputs`` operand and
    ``args``/``kwargs`` properties in which ``#prims.operand<i>`` stands for ``inputs[i]``.
    """

    SYMBOL: ClassVar[Symbol]
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
        if len(v) == 2 and v[0] == _OBJECT and type(v[1]) is int:
            return objs[v[1]]
        return tuple(_decode(x, objs) for x in v)
    return v


_OP_CLASSES: dict[str, type[OperatorOp]] = {}
"""Op name -> class, for every operator ever registered (re-registration reuses them)."""


def _class_layout(params: tuple[tuple[str, Any], ...] | None) -> Any:
    return None if params is None else tuple((n, str(k)) for n, k in params)


def _make_op_class(op_name: str, params: tuple[tuple[str, Any], ...] | None,
                   single: bool) -> type[OperatorOp]:
    """An IRDL op class for an operator (see `OperatorOp`)."""
    fields: dict[str, Any] = {
        "name": op_name,
        "__module__": __name__,
        "__doc__": f"The operator ``{op_name}`` (registered with thunder_ir.extend).",
        "traits": traits_def(Pure()),
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


def _op_class_for(symbol: Symbol, single: bool) -> type[OperatorOp]:
    """The op class of ``symbol`` with one result (``single``) or a list of them."""
    known = symbol._classes.get(single)
    if known is not None:
        return known
    base = f"{symbol.executor.namespace}.{symbol.name}"
    layout = _class_layout(symbol.params)
    for k in itertools.count():
        op_name = base if k == 0 else f"{base}_{k}"
        found = _OP_CLASSES.get(op_name)
        if found is None:
            cls = _make_op_class(op_name, symbol.params, single)
            _OP_CLASSES[op_name] = cls
            VJP_RULES[cls] = _autograd_rule
            break
        if single == found.SINGLE and _class_layout(found.PARAMS) == layout:
            cls = found  # the same operator registered again (a re-run cell): reuse it
            break
    cls.SYMBOL = symbol
    symbol._classes[single] = cls
    return cls


# --------------------------------------------------------------------------- symbols


_STATE = threading.local()


def _suspended() -> int:
    return getattr(_STATE, "suspended", 0)


@contextlib.contextmanager
def _suspend_diversion() -> Iterator[None]:
    """Calls to replaced functions run the original code (meta functions, checkers)."""
    _STATE.suspended = _suspended() + 1
    try:
        yield
    finally:
        _STATE.suspended -= 1


@contextlib.contextmanager
def _trace_into(ctx: tracing.TraceContext) -> Iterator[None]:
    """Records torch calls into ``ctx`` alone: the modes of a trace in progress are set
    aside, so the shape rules of ``ctx``'s ops (meta runs) do not reach them."""
    stash = []
    while torch._C._len_torch_function_stack() > 0:
        stash.append(torch._C._pop_torch_function_stack())
    try:
        with tracing.recording(ctx), tracing.TraceMode(ctx):
            yield
    finally:
        for m in reversed(stash):
            torch._C._push_on_torch_function_stack(m)


def _freeze(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return (type(v), tuple(_freeze(x) for x in v))
    if isinstance(v, dict):
        return (dict, tuple((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, bool | int | float):
        return (type(v), v)
    if isinstance(v, torch.Tensor):
        return ("tensor", _type_of_any(v))
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

    def __init__(self, executor: OperatorExecutor, name: str, meta: Callable[..., Any],
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
        with _suspend_diversion():
            return self.fn(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not tracing.tracing_now():
            return self._run_fn(*args, **kwargs)
        ctx = tracing.current()
        ctx.loc = tracing.user_location()
        return self._record(ctx, args, kwargs)

    # ---- tracing

    def _run_meta(self, args: Sequence[Any], kwargs: dict[str, Any]) -> _MetaResult:
        try:
            key: Any = (_freeze(tuple(args)), _freeze(kwargs))
            hit = self._meta_cache.get(key)
        except TypeError:
            key, hit = None, None
        if hit is not None:
            return hit
        scratch = tracing.TraceContext()

        def to_proxy(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                v = scratch.add_input(_type_of_any(x), "a", ("arg", 0))
                return _proxy.TensorProxy(v, requires_grad=bool(x.requires_grad))
            return x

        m_args, m_kwargs = pytree.tree_map(to_proxy, (tuple(args), dict(kwargs)))
        with _suspend_diversion(), _trace_into(scratch):
            out = self.meta(*m_args, **m_kwargs)
        dev = next((_type_of_any(x).dev for x in pytree.tree_leaves((args, kwargs))
                    if isinstance(x, torch.Tensor)), "cpu")
        leaves, spec = pytree.tree_flatten(out)
        types_: list[TensorType] = []
        kept: list[Any] = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                t = _type_of_any(leaf)
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
        if _has_tensor(v):
            raise tracing.ThunderTraceError(
                f"{self.id}: argument {what} holds tensors inside a {type(v).__name__}; "
                "operators take tensors as top-level arguments (or through *args)")
        if _exact_static(v):
            return v
        objs = cls.OBJECTS
        for i, o in enumerate(objs):
            if o is v:
                return (_OBJECT, i)
        objs.append(v)
        return (_OBJECT, len(objs) - 1)

    def _record(self, ctx: tracing.TraceContext, args: tuple[Any, ...],
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
                raise tracing.ThunderTraceError(f"{self.id}: {e}") from None
            bound.apply_defaults()
            for name, _ in self.params:
                v = bound.arguments[name]
                if isinstance(v, torch.Tensor):
                    groups.append(ctx.value_of(v))
                elif type(v) in (bool, int, float):
                    groups.append(ctx.number(v))
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
                if isinstance(x, list | tuple) and _has_tensor(x):
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


# --------------------------------------------------------------------------- replaces=


@dataclass
class _Replacement:
    """A Python function whose calls are diverted to an operator while tracing."""

    target: Callable[..., Any]
    symbol: Symbol
    original: Callable[..., Any]  # runs the function's own code (never diverted)
    code: types.CodeType | None = None  # the function's own code (Python functions)
    trampoline: types.CodeType | None = None
    saved_handler: Any = None


_REPLACEMENTS: dict[int, _Replacement] = {}
_KEYS = itertools.count()
_DIVERTED = [0]  # nesting depth of traces with the diversions in place


def _divert(key: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where a replaced function's trampoline goes: the operator while tracing."""
    r = _REPLACEMENTS[key]
    if _suspended() or not tracing.tracing_now():
        return r.original(*args, **kwargs)
    return r.symbol(*args, **kwargs)


def _trampoline(fn: types.FunctionType, key: int, symbol_id: str) -> types.CodeType:
    """Code forwarding every call to `_divert`, assignable to ``fn.__code__`` (it declares
    the same free variables, never reading them)."""
    free = fn.__code__.co_freevars
    name = fn.__name__ if fn.__name__.isidentifier() else "replaced"
    lines = ["def _outer():"]
    lines += [f"    {v} = None" for v in free]
    lines.append(f"    def {name}(*args, **kwargs):")
    if free:
        lines.append(f"        if 0:\n            ({', '.join(free)},)")
    lines.append("        import thunder_ir.extend as _thunder_ir_extend")
    lines.append(f"        return _thunder_ir_extend._divert({key}, args, kwargs)")
    lines.append(f"    return {name}")
    scope: dict[str, Any] = {}
    filename = f"<thunder_ir: {fn.__qualname__} diverted to {symbol_id}>"
    exec(compile("\n".join(lines), filename, "exec"), scope)
    code: types.CodeType = scope["_outer"]().__code__
    if len(code.co_freevars) != len(free):
        raise TypeError(f"cannot divert {fn.__qualname__}: unsupported closure")
    return code.replace(co_freevars=free, co_name=fn.__code__.co_name,
                        co_qualname=fn.__code__.co_qualname)


def _replace(target: Any, symbol: Symbol) -> None:
    """Registers the diversion of ``target`` (a function, method or torch callable)."""
    fn = getattr(target, "__func__", target)  # bound and class methods: their function
    for key, r in list(_REPLACEMENTS.items()):
        if r.target is fn:
            del _REPLACEMENTS[key]
    key = next(_KEYS)
    if isinstance(fn, types.FunctionType):
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                      fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__dict__.update(fn.__dict__)
        _REPLACEMENTS[key] = _Replacement(fn, symbol, original, fn.__code__,
                                          _trampoline(fn, key, symbol.id))
    elif callable(fn):  # a builtin torch function: divert it in the tracer's handler table
        _REPLACEMENTS[key] = _Replacement(fn, symbol, fn)
    else:
        raise TypeError(f"replaces= expects a function, got {target!r}")


def _handler_for(r: _Replacement, previous: Any) -> Callable[..., Any]:
    def handler(ctx: tracing.TraceContext, *args: Any, **kwargs: Any) -> Any:
        if _suspended():
            if previous is not None:
                return previous(ctx, *args, **kwargs)
            return tracing.fallback(ctx, r.target, args, kwargs)
        return r.symbol(*args, **kwargs)

    return handler


@contextlib.contextmanager
def _diversions() -> Iterator[None]:
    """Entered around user code while it is traced (`tracing.TRACING_CONTEXTS`): swaps each
    replaced function's code for its trampoline, and restores it on the way out."""
    _DIVERTED[0] += 1
    swapped: list[_Replacement] = []
    try:
        if _DIVERTED[0] == 1:
            for r in list(_REPLACEMENTS.values()):
                if r.trampoline is not None:
                    r.target.__code__ = r.trampoline
                else:
                    r.saved_handler = tracing.HANDLERS.get(r.target)
                    tracing.HANDLERS[r.target] = _handler_for(r, r.saved_handler)
                swapped.append(r)
        yield
    finally:
        _DIVERTED[0] -= 1
        for r in swapped:
            if r.trampoline is not None:
                r.target.__code__ = r.code  # type: ignore[assignment]
            elif r.saved_handler is None:
                tracing.HANDLERS.pop(r.target, None)
            else:
                tracing.HANDLERS[r.target] = r.saved_handler


tracing.TRACING_CONTEXTS.append(_diversions)


# --------------------------------------------------------------------------- sub-traces


class _Unresolved(Exception):
    """An op argument whose Python value is not known (a number computed at run time)."""


def _number_value(v: SSAValue) -> Any:
    owner = v.owner
    if isinstance(owner, ConstantOp):
        return owner.params()["value"]
    raise _Unresolved(f"number of type {pretty_type(v.type)} is not a constant")


def _op_call_args(op: ThunderOp, flat: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The Python call an op stands for, with ``flat`` in place of its operands.

    Operators: their ``fn``'s arguments. ltorch ops: torch's positional order
    (operands and params together, see `thunder_ir.torch_map.signature`).
    """
    groups = group(op.operand_layout(), list(flat), op._segment_sizes())
    params = op.params()
    if isinstance(op, OperatorOp):
        return type(op).call_args(groups, params)
    from thunder_ir.torch_map import signature

    by_name: dict[str, Any] = dict(zip((n for n, _ in op.operand_layout()), groups))
    by_name.update(params)
    return [by_name.get(n) for n in signature(type(op))], {}


def _checker_args(op: ThunderOp) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for a checker: proxies of the op's own operands (metadata only)."""
    flat = [_proxy.TensorProxy(v) if isinstance(v.type, TensorType) else _number_value(v)
            for v in op.operands]
    return _op_call_args(op, flat)


@dataclass
class _GradState:
    """What `get_grad` and `put_grads` record while a grad transform is traced."""

    ctx: tracing.TraceContext
    positions: dict[int, int]  # id(argument proxy) -> flat operand index
    cts: list[tuple[Any, SSAValue, SSAValue]] = field(default_factory=list)
    grads: dict[int, Any] = field(default_factory=dict)  # operand index -> grad proxy


_GRAD_STATES: list[_GradState] = []


@dataclass
class _SubTrace:
    """A Python function traced against an op's operands (see `_subtrace`)."""

    ops: list[Operation]
    outputs: list[SSAValue]  # the tensors it returned, flattened
    mapping: dict[SSAValue, SSAValue]  # its arguments -> the op's operands
    grad: _GradState | None


def _subtrace(fn: Callable[..., Any], op: ThunderOp, what: str, grad: bool = False
              ) -> _SubTrace:
    """Traces ``fn`` called like ``op`` (proxies bound to its operands) into fresh ops."""
    import thunder_ir.torch_map  # noqa: F401  (fills the tracer's handlers)

    ctx = tracing.TraceContext()
    mapping: dict[SSAValue, SSAValue] = {}
    flat: list[Any] = []
    positions: dict[int, int] = {}
    for i, v in enumerate(op.operands):
        if isinstance(v.type, TensorType):
            a = ctx.add_input(v.type, v.name_hint or "t", ("arg", i))
            mapping[a] = v
            p = _proxy.TensorProxy(a)
            positions[id(p)] = i
            flat.append(p)
        else:
            flat.append(_number_value(v))
    args, kwargs = _op_call_args(op, flat)
    state = _GradState(ctx, positions) if grad else None
    if state is not None:
        _GRAD_STATES.append(state)
    try:
        with _trace_into(ctx):
            out = fn(*args, **kwargs)
    finally:
        if state is not None:
            _GRAD_STATES.pop()
    for kind in ctx.input_kinds:
        if kind[0] not in ("arg", "ct"):
            raise tracing.ThunderTraceError(
                f"the {what} of {op.name} uses a tensor that is not one of its arguments "
                "(or random numbers); pass such tensors in as arguments")
    outputs = []
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            if not _proxy.is_proxy(leaf):
                raise tracing.ThunderTraceError(
                    f"the {what} of {op.name} returned a tensor that does not depend on its "
                    "arguments")
            outputs.append(leaf._value)  # type: ignore[attr-defined]
    return _SubTrace(list(ctx.program.block.ops), outputs, mapping, state)


def _clone_into(ops: Sequence[Operation], vm: dict[SSAValue, SSAValue],
                loc: Attribute | None) -> list[Operation]:
    out = []
    for o in ops:
        c = o.clone(value_mapper=vm)
        if loc is not None:
            c.attributes["loc"] = loc
        else:
            c.attributes.pop("loc", None)
        out.append(c)
    return out


# --------------------------------------------------------------------------- grads


def get_grad(x: Any) -> Any:
    """Inside a grad transform: the cotangent of ``x``, one of the transform's outputs.

    The value is the cotangent the backward receives for that output (zeros where the
    output does not reach the loss).
    """
    if not _GRAD_STATES:
        raise RuntimeError("get_grad() is only meaningful inside a grad transform "
                           "(register_implementation(..., grad_transform=...))")
    if not _proxy.is_proxy(x):
        raise TypeError(f"get_grad() expects a traced tensor, got {type(x).__name__}")
    state = _GRAD_STATES[-1]
    ph = state.ctx.add_input(x._value.type, "ct", ("ct",))
    p = _proxy.TensorProxy(ph)
    state.cts.append((x, x._value, ph))
    return p


def put_grads(inputs: Sequence[Any], grads: Sequence[Any]) -> None:
    """Inside a grad transform: ``grads[i]`` is the gradient of the argument ``inputs[i]``.

    ``None`` grads (and arguments never given one) get no gradient.
    """
    if not _GRAD_STATES:
        raise RuntimeError("put_grads() is only meaningful inside a grad transform "
                           "(register_implementation(..., grad_transform=...))")
    state = _GRAD_STATES[-1]
    if len(inputs) != len(grads):
        raise ValueError(f"put_grads() got {len(inputs)} inputs but {len(grads)} grads")
    for x, g in zip(inputs, grads):
        if g is None:
            continue
        pos = state.positions.get(id(x))
        if pos is None:
            raise ValueError("put_grads(): each input must be one of the grad transform's "
                             f"own tensor arguments, got {x!r}")
        if not _proxy.is_proxy(g):
            raise TypeError(f"put_grads(): a gradient must be a traced tensor, got {g!r}")
        prev = state.grads.get(pos)
        state.grads[pos] = g if prev is None else prev + g


def _grad_transform_rule(impl: _Implementation) -> Callable[..., list[Any]]:
    """A VJP rule (see `thunder_ir.passes.vjp`) running ``impl``'s grad transform."""

    def rule(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], *grouped: Any,
             **params: Any) -> list[Any]:
        op = out[0].owner
        assert isinstance(op, ThunderOp)
        assert impl.grad_transform is not None
        sub = _subtrace(impl.grad_transform, op, "grad transform", grad=True)
        state = sub.grad
        assert state is not None
        vm: dict[SSAValue, SSAValue] = dict(sub.mapping)
        if len(sub.outputs) != len(out):
            raise tracing.ThunderTraceError(
                f"the grad transform of {op.name} returned {len(sub.outputs)} tensors, but "
                f"the op has {len(out)} results")
        premapped: set[SSAValue] = set()
        for v, r in zip(sub.outputs, out):
            if v not in vm:
                vm[v] = r  # the forward already computed it: reuse, do not recompute
                premapped.add(v)
        for _, value, ph in state.cts:
            try:
                k = sub.outputs.index(value)
            except ValueError:
                raise tracing.ThunderTraceError(
                    f"grad transform of {op.name}: get_grad() of a value the transform "
                    "does not return") from None
            c = ct[k]
            if c is None:
                t = out[k].type
                assert isinstance(t, TensorType)
                c = g.prims.full(shape=t.sizes, fill_value=0.0, device=t.dev, dtype=t.dtype)
            vm[ph] = c
        # Only what the gradients need goes into the backward.
        needed = {p._value for p in state.grads.values()}
        keep: list[Operation] = []
        for o in reversed(sub.ops):
            if any(r in needed and r not in premapped for r in o.results):
                keep.append(o)
                needed.update(o.operands)
        for c_op in _clone_into(list(reversed(keep)), vm, None):
            g.emitter.insert(c_op)  # with the forward op's source location
        flat: list[SSAValue | None] = [None] * len(op.operands)
        for pos, gp in state.grads.items():
            flat[pos] = vm.get(gp._value, gp._value)
        grads = group(op.operand_layout(), flat, op._segment_sizes())
        return [gr if not isinstance(gr, list) or any(x is not None for x in gr) else None
                for gr in grads]

    return rule


# --------------------------------------------------------------------------- autograd vjp


def operator_vjp(op_name: str, *values: Any, n_inputs: int, params: Any,
                 segments: Sequence[int], ct_outputs: Sequence[int],
                 grad_inputs: Sequence[int]) -> Any:
    """Run-time backward of an operator that has no grad transform: ``torch.autograd``
    through its ``fn``, re-run on the forward inputs.

    Args:
        op_name: the operator op's name (``my_ex.apply_rope``).
        values: the op's ``n_inputs`` operands, then one cotangent per ``ct_outputs`` entry.
        params: the op's params as ``(name, value)`` pairs.
        segments: the op's operand segment sizes (``()`` when it has none).
        ct_outputs: which results the cotangents belong to.
        grad_inputs: which operands get a gradient.
    """
    from thunder_ir.runtime.autograd_fallback import leaf_cotangents, leaves_for_grad

    cls = _OP_CLASSES[op_name]
    inputs, cts, leaves = leaves_for_grad(values, n_inputs, grad_inputs)
    groups = group(cls.operand_layout(), inputs, tuple(segments) or None)
    with torch.enable_grad():
        args, kwargs = cls.call_args(groups, {k: _decode_refs(v) for k, v in params})
        out = cls.pick(cls.SYMBOL._run_fn(*args, **kwargs))
    outs = out if isinstance(out, list) else [out]
    pairs = [(outs[i], c) for i, c in zip(ct_outputs, cts)]
    if any(not o.requires_grad for o, _ in pairs):
        raise RuntimeError(
            f"{op_name}: torch.autograd cannot differentiate the operator's fn (its outputs "
            "do not require grad, e.g. a Triton kernel); register a grad_transform for it "
            "with register_implementation")
    return leaf_cotangents(pairs, leaves)


_OPERATOR_VJP = f"{__name__}.operator_vjp"
_REF = "$operand"


def _encode_refs(v: Any) -> Any:
    """Hides operand references from ``torch.call``'s own substitution: ``("$operand", i)``."""
    if isinstance(v, OperandRef):
        return (_REF, int(v))
    if type(v) is tuple:
        return tuple(_encode_refs(x) for x in v)
    return v


def _decode_refs(v: Any) -> Any:
    if type(v) is tuple:
        if len(v) == 2 and v[0] == _REF and type(v[1]) is int:
            return OperandRef(v[1])
        return tuple(_decode_refs(x) for x in v)
    return v


def _autograd_rule(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], *grouped: Any,
                   **params: Any) -> list[Any]:
    """The VJP table's rule for operators: a backward call of `operator_vjp`."""
    op = out[0].owner
    assert isinstance(op, OperatorOp)
    operands = list(op.operands)
    diff = [i for i, v in enumerate(operands) if is_differentiable_value(v)]
    flat: list[SSAValue | None] = [None] * len(operands)
    if diff:
        ct_at = [i for i, c in enumerate(ct) if c is not None]
        call_operands = [*operands, *(c for c in ct if c is not None)]
        seg = op._segment_sizes()
        call = make_call(
            _OPERATOR_VJP, call_operands,
            [op.name, *(OperandRef(i) for i in range(len(call_operands)))],
            {"n_inputs": len(operands), "params": tuple(
                (k, _encode_refs(v)) for k, v in op.params().items() if v is not None),
             "segments": tuple(seg) if seg is not None else (),
             "ct_outputs": tuple(ct_at), "grad_inputs": tuple(diff)},
            result_types=[operands[i].type for i in diff])
        g.emitter.insert(call)
        for i, r in zip(diff, call.results):
            flat[i] = r
    return list(group(op.operand_layout(), flat, op._segment_sizes()))


# --------------------------------------------------------------------------- executors


@dataclass
class _Implementation:
    """How an executor runs (and differentiates) one op."""

    checker: Callable[..., bool] | None
    execution_transform: Callable[..., Any] | None
    grad_transform: Callable[..., Any] | None


class OperatorExecutor(Executor):
    """An executor of operators and implementations of your own (see the module doc).

    Args:
        name: unique; its operators' ops are named ``<name>.<operator>``.
        version: free-form, shown by ``repr``.
    """

    def __init__(self, name: str, *, version: str | None = None) -> None:
        if not name:
            raise ValueError("an executor needs a name")
        self.name = name
        self.version = str(version) if version is not None else "0"
        ns = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        if not ns or ns[0].isdigit() or ns in ("torch", "prims", "ltorch", "fusion"):
            ns = f"ex_{ns}"
        self.namespace = ns
        self.opmap: dict[str, Symbol] = {}
        self.implmap: dict[Any, _Implementation] = {}

    # ---- registration

    def register_operator(self, name: str, *, like: Callable[..., Any] | None = None,
                          meta: Callable[..., Any] | None = None,
                          fn: Callable[..., Any],
                          replaces: Callable[..., Any] | None = None) -> Symbol:
        """Registers an operator that this executor runs with ``fn``.

        Args:
            name: the operator's name (a Python identifier); its ops are
                ``<executor>.<name>``.
            like: a function with ``fn``'s signature that computes outputs of the right
                shapes: a meta function, or simply a torch implementation. It runs on
                proxies while tracing (its torch calls are recorded into a scratch trace,
                never into the program).
            meta: the same as ``like`` (give one of them). Return ``TensorProxy(like=x)``
                for an output shaped like ``x``; non-tensor outputs (launch parameters)
                are passed through to the caller.
            fn: the implementation, called by generated code with real tensors.
            replaces: a Python function (or method, or torch function) whose calls are
                recorded as this operator while a program is traced.

        Returns:
            The operator's symbol: call it in traced code (or outside, where it runs
            ``fn``), pass it to `register_implementation`.
        """
        if (like is None) == (meta is None):
            raise TypeError("register_operator() needs exactly one of like= and meta=")
        if not name.isidentifier():
            raise ValueError(f"operator name {name!r} is not a Python identifier")
        m = like if like is not None else meta
        assert m is not None
        sym = Symbol(self, name, m, fn, replaces)
        self.opmap[name] = sym
        if replaces is not None:
            _replace(replaces, sym)
        return sym

    def register_implementation(self, op: Symbol | type[ThunderOp], *,
                                checker: Callable[..., bool] | None = None,
                                execution_transform: Callable[..., Any] | None = None,
                                grad_transform: Callable[..., Any] | None = None) -> None:
        """Lets this executor run ``op`` (an operator's symbol or an ltorch op class).

        Args:
            checker: called with the op's arguments (proxies for tensors); True if this
                executor takes this call. Default: always.
            execution_transform: called like the op, written with torch functions and
                operators; its trace replaces the op. Default: the op stays as it is
                (claimed by this executor).
            grad_transform: called like the op while autodiff builds the backward: it
                computes the outputs, asks `get_grad` for their cotangents and hands the
                arguments' gradients to `put_grads`. Its backward ops appear in
                ``last_backward_traces``.
        """
        if not isinstance(op, Symbol) and not (isinstance(op, type)
                                              and issubclass(op, ThunderOp)):
            raise TypeError("register_implementation() takes an operator (the symbol "
                            f"register_operator returned) or an ltorch op class, got {op!r}")
        self.implmap[op] = _Implementation(checker, execution_transform, grad_transform)

    # ---- the executor interface

    def _impl(self, op: Operation) -> _Implementation | None:
        key: Any = type(op)
        if isinstance(op, OperatorOp):
            key = type(op).SYMBOL
        return self.implmap.get(key)

    def _accepts(self, op: Operation, impl: _Implementation) -> bool:
        if impl.checker is None:
            return True
        assert isinstance(op, ThunderOp)
        try:
            args, kwargs = _checker_args(op)
        except _Unresolved:
            return False
        with _suspend_diversion():
            return bool(impl.checker(*args, **kwargs))

    def can_claim(self, op: ThunderOp) -> bool:
        """Ops with an implementation here whose checker accepts them, and this
        executor's own operators."""
        impl = self._impl(op)
        if impl is not None and self._accepts(op, impl):
            return True
        return isinstance(op, OperatorOp) and type(op).SYMBOL.executor is self

    def expand(self, op: ThunderOp) -> tuple[list[Operation], list[SSAValue]] | None:
        """The execution transform of a claimed op, traced into ops (None: keep the op).

        The claim pass replaces ``op`` with these ops and claims them in turn.
        """
        impl = self._impl(op)
        if impl is None or impl.execution_transform is None or not self._accepts(op, impl):
            return None
        sub = _subtrace(impl.execution_transform, op, "execution transform")
        results = list(op.results)
        if len(sub.outputs) != len(results):
            raise tracing.ThunderTraceError(
                f"the execution transform of {op.name} returned {len(sub.outputs)} tensors, "
                f"but the op has {len(results)} results")
        vm = dict(sub.mapping)
        new_ops = _clone_into(sub.ops, vm, op.attributes.get("loc"))
        values = [vm.get(v, v) for v in sub.outputs]
        for v, r in zip(values, results):
            if v.type != r.type:
                raise tracing.ThunderTraceError(
                    f"the execution transform of {op.name} returned {pretty_type(v.type)} "
                    f"where the op has {pretty_type(r.type)}")
        for o in new_ops:  # the transform may fall back to the op itself: do not recurse
            if type(o) is type(op):
                o.attributes["claimed"] = StringAttr(self.name)
        return new_ops, values

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """The grad transform registered for ``op``, as a VJP rule, when its checker
        accepts ``op``."""
        impl = self._impl(op)
        if impl is None or impl.grad_transform is None or not self._accepts(op, impl):
            return None
        return _grad_transform_rule(impl)

    def __repr__(self) -> str:
        return f"OperatorExecutor(name={self.name!r}, version={self.version!r})"


def register_executor(ex: Executor) -> Executor:
    """Registers ``ex`` under its name, so ``jit(..., executors=["name"])`` finds it."""
    return _register_executor(ex)


def add_default_executor(ex: Executor) -> Executor:
    """Registers ``ex`` and puts it first in `get_default_executors`."""
    return _register_executor(ex, default=True, priority=0)


def deregister_executor(ex: Executor) -> None:
    """Forgets ``ex``: its name no longer resolves, and the functions its operators
    replaced are no longer diverted."""
    from thunder_ir.lowering import executors as registry

    if registry._REGISTRY.get(ex.name) is ex:
        del registry._REGISTRY[ex.name]
        if ex.name in registry._DEFAULT_ORDER:
            registry._DEFAULT_ORDER.remove(ex.name)
    for key, r in list(_REPLACEMENTS.items()):
        if r.symbol.executor is ex:
            del _REPLACEMENTS[key]

