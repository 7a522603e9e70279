"""Which torch callables become which ``ltorch`` ops while tracing.

Most entries are declarative: an ltorch op declares ``SIGNATURE`` (torch's positional
order across operands and params) and ``DEFAULTS``, and `bind` maps any torch call onto it.
Operators' reflected forms (``__radd__``) swap their operands; in-place forms (``add_``,
``__iadd__``) compute the functional op and rebind the proxy (`Builder.assign`).
Calls with irregular conventions (``Tensor.view(*shape)``, ``Tensor.to``, ``torch.max``,
``__getitem__``/``__setitem__``, dropout's RNG) have small handlers of their own.

Handlers write through the `thunder_ir.frontend.builder.Builder` interface only, so an
importer of another graph format can reuse them. Importing this module fills
`thunder_ir.frontend.table.HANDLERS` (`thunder_ir.frontend.tracer` imports it).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.ltorch import OPS
from thunder_ir.dialects.ltorch_nn import legacy_reduction
from thunder_ir.dialects.types import canonical_device, tensor_type
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import DataDependentError, ThunderTraceError, UseFallback, where
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.table import HANDLERS, LIBRARY_HANDLERS, getter
from thunder_ir.runtime.namespace import export

T = torch.Tensor

# Extra torch arguments that an op may ignore when they carry these values.
_IGNORABLE: dict[str, tuple[Any, ...]] = {
    "out": (None,), "inplace": (False,), "memory_format": (torch.preserve_format,
                                                           torch.contiguous_format, None),
    "layout": (torch.strided, None), "pin_memory": (False, None), "requires_grad": (False,),
    "non_blocking": (False,), "copy": (False,), "generator": (None,),
    "padding_idx": (None,), "max_norm": (None,), "norm_type": (2.0,),
    "scale_grad_by_freq": (False,), "sparse": (False,), "size_average": (None,),
    "reduce": (None,), "names": (None,),
}

MISSING = object()

MAPPED: set[str] = set()
"""Short names of the ltorch ops some torch callable maps to (for the coverage test)."""


def signature(op: type[ThunderOp]) -> tuple[str, ...]:
    """Torch's positional order of ``op``'s arguments."""
    sig = getattr(op, "SIGNATURE", None)
    if sig is None:
        sig = tuple(n for n, _ in op.operand_layout()) + op.param_names()
    return tuple(sig)


def bind(op: type[ThunderOp], args: Sequence[Any], kwargs: dict[str, Any], loc: str
         ) -> dict[str, Any]:
    """Binds a torch call's arguments to ``op``'s argument names.

    Raises:
        UseFallback: the call does not fit the op (an argument it does not model); the
            tracer records it as an opaque torch call, which torch checks and computes.
    """
    sig = signature(op)
    if len(args) > len(sig):
        raise UseFallback  # another overload: torch knows it
    bound = dict(zip(sig, args))
    for k, v in kwargs.items():
        if k in bound:
            raise UseFallback  # torch raises its own error
        if k not in sig:
            if k == "_stacklevel":
                continue
            if k in _IGNORABLE and any(v is d or v == d for d in _IGNORABLE[k]):
                continue
            raise UseFallback  # an argument the op does not model (out=, generator=...)
        bound[k] = v
    return bound


def emit_bound(ctx: Builder, op: type[ThunderOp], bound: dict[str, Any],
               base: TensorProxy | None = None) -> Any:
    """Builds ``op`` from bound arguments; returns proxies for its results."""
    groups: list[Any] = []
    for name, kind in op.operand_layout():
        v = bound.get(name, MISSING)
        if kind == "variadic":
            groups.append([ctx.value_of(x) for x in (v if v is not MISSING else ())])
        elif v is MISSING or v is None:
            if kind == "single":
                raise ThunderTraceError(f"{where(ctx.loc)}: {op.name} is missing its "
                                        f"argument {name!r}")
            groups.append(None)
        else:
            groups.append(ctx.value_of(v))
    defaults = getattr(op, "DEFAULTS", {})
    params: dict[str, Any] = {}
    for n in op.param_names():
        v = bound.get(n, MISSING)
        if v is MISSING:
            v = defaults.get(n)
        if isinstance(v, torch.Tensor):
            raise UseFallback  # a tensor where the op takes a number (clamp(x, min=t))
        if isinstance(v, torch.Size):
            v = tuple(v)
        if isinstance(v, torch.device):
            v = canonical_device(v)
        params[n] = v
    emit = ctx.emit if base is None else ctx.emit_view
    out = ctx.wrap(emit(op, *groups, **params), base)
    return tuple(out) if isinstance(out, list) else out  # torch returns tuples (split)


def _root(p: Any) -> TensorProxy | None:
    if not is_proxy(p):
        return None
    return p._base_proxy if p._base_proxy is not None else p


def op_handler(short: str, *, swap: bool = False, view: bool = False,
               varargs: str | None = None) -> Callable[..., Any] | None:
    """A handler binding a torch call to ltorch op ``short`` (None if the op is absent)."""
    op = OPS.get(short)
    if op is None:
        return None
    MAPPED.add(short)

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        if swap:
            args = (args[1], args[0], *args[2:])
        if varargs is not None and len(args) > 1 and varargs not in kwargs and (
                not isinstance(args[1], Sequence) or isinstance(args[1], str)):
            args = (args[0], tuple(args[1:]))
        bound = bind(op, args, kwargs, ctx.loc)
        return emit_bound(ctx, op, bound, _root(args[0]) if view else None)

    return handler


def register_torch_op(torch_fns: Sequence[Any], op: type[ThunderOp]) -> None:
    """Routes torch callables to ``op`` while tracing (public: for ops users add).

    The call's arguments are bound by the op's ``SIGNATURE`` and ``DEFAULTS``: tensors go
    to its operands, the rest to its params (see `bind`).
    """

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        return emit_bound(ctx, op, bind(op, args, kwargs, ctx.loc))

    for f in torch_fns:
        HANDLERS[f] = handler


def inplace(functional: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The in-place form of a functional handler."""

    def handler(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
        out = functional(ctx, self, *args, **kwargs)
        return ctx.assign(self, out._value, name)

    return handler


def _register(fns: Sequence[Any], handler: Callable[..., Any] | None) -> None:
    if handler is None:
        return
    for f in fns:
        HANDLERS[f] = handler


# --------------------------------------------------------------------------- elementwise

_BINARY: dict[str, tuple[list[Any], list[Any], list[Any]]] = {
    # op: (functional forms, reflected operators, in-place forms)
    "add": ([torch.add, T.add, T.__add__], [T.__radd__], [T.add_, T.__iadd__]),
    "sub": ([torch.sub, torch.subtract, T.sub, T.__sub__], [T.__rsub__],
            [T.sub_, T.__isub__]),
    "mul": ([torch.mul, torch.multiply, T.mul, T.__mul__], [T.__rmul__], [T.mul_, T.__imul__]),
    "div": ([torch.div, torch.divide, torch.true_divide, T.div, T.true_divide, T.__truediv__],
            [T.__rtruediv__], [T.div_, T.__itruediv__]),
    "floor_divide": ([torch.floor_divide, T.floor_divide, T.__floordiv__], [T.__rfloordiv__],
                     [T.__ifloordiv__]),
    "remainder": ([torch.remainder, T.remainder, T.__mod__], [T.__rmod__], [T.__imod__]),
    "fmod": ([torch.fmod, T.fmod], [], []),
    "pow": ([torch.pow, T.pow, T.__pow__], [T.__rpow__], [T.pow_, T.__ipow__]),
    "maximum": ([torch.maximum, T.maximum], [], []),
    "minimum": ([torch.minimum, T.minimum], [], []),
    "atan2": ([torch.atan2, T.atan2, torch.arctan2], [], []),
    "eq": ([torch.eq, T.eq, T.__eq__], [], []),
    "ne": ([torch.ne, torch.not_equal, T.ne, T.__ne__], [], []),
    "lt": ([torch.lt, torch.less, T.lt, T.__lt__], [], []),
    "le": ([torch.le, torch.less_equal, T.le, T.__le__], [], []),
    "gt": ([torch.gt, torch.greater, T.gt, T.__gt__], [], []),
    "ge": ([torch.ge, torch.greater_equal, T.ge, T.__ge__], [], []),
    "bitwise_and": ([torch.bitwise_and, T.bitwise_and, T.__and__], [T.__rand__], [T.__iand__]),
    "bitwise_or": ([torch.bitwise_or, T.bitwise_or, T.__or__], [T.__ror__], [T.__ior__]),
    "bitwise_xor": ([torch.bitwise_xor, T.bitwise_xor, T.__xor__], [T.__rxor__], [T.__ixor__]),
    "logical_and": ([torch.logical_and, T.logical_and], [], []),
    "logical_or": ([torch.logical_or, T.logical_or], [], []),
}
for _name, (_fns, _rfns, _ifns) in _BINARY.items():
    _h = op_handler(_name)
    _register(_fns, _h)
    _register(_rfns, op_handler(_name, swap=True))
    if _h is not None:
        _register(_ifns, inplace(_h, _name + "_"))

_UNARY: dict[str, list[Any]] = {
    "neg": [torch.neg, torch.negative, T.neg, T.__neg__],
    "abs": [torch.abs, T.abs, T.__abs__],
    "exp": [torch.exp, T.exp], "exp2": [torch.exp2, T.exp2, torch.special.exp2],
    "expm1": [torch.expm1, T.expm1, torch.special.expm1],
    "log": [torch.log, T.log], "log1p": [torch.log1p, T.log1p, torch.special.log1p],
    "log2": [torch.log2, T.log2],
    "sin": [torch.sin, T.sin], "cos": [torch.cos, T.cos], "tan": [torch.tan, T.tan],
    "tanh": [torch.tanh, T.tanh, F.tanh], "asin": [torch.asin, T.asin, torch.arcsin],
    "acos": [torch.acos, T.acos, torch.arccos], "atan": [torch.atan, T.atan, torch.arctan],
    "sinh": [torch.sinh, T.sinh], "cosh": [torch.cosh, T.cosh],
    "sqrt": [torch.sqrt, T.sqrt], "rsqrt": [torch.rsqrt, T.rsqrt],
    "reciprocal": [torch.reciprocal, T.reciprocal], "sign": [torch.sign, T.sign],
    "floor": [torch.floor, T.floor], "ceil": [torch.ceil, T.ceil],
    "round": [torch.round, T.round], "trunc": [torch.trunc, T.trunc, torch.fix],
    "erf": [torch.erf, T.erf, torch.special.erf], "erfc": [torch.erfc, T.erfc],
    "isnan": [torch.isnan, T.isnan], "isinf": [torch.isinf, T.isinf],
    "isfinite": [torch.isfinite, T.isfinite],
    "logical_not": [torch.logical_not, T.logical_not],
    "bitwise_not": [torch.bitwise_not, T.bitwise_not, T.__invert__],
    "relu": [torch.relu, T.relu, F.relu], "gelu": [F.gelu], "silu": [F.silu],
    "sigmoid": [torch.sigmoid, T.sigmoid, F.sigmoid, torch.special.expit],
}
_UNARY_INPLACE: dict[str, list[Any]] = {
    "neg": [T.neg_], "abs": [T.abs_], "exp": [T.exp_], "log": [T.log_], "sqrt": [T.sqrt_],
    "rsqrt": [T.rsqrt_], "tanh": [T.tanh_], "sigmoid": [T.sigmoid_], "relu": [T.relu_, F.relu_],
    "floor": [T.floor_], "ceil": [T.ceil_], "round": [T.round_], "trunc": [T.trunc_],
    "reciprocal": [T.reciprocal_],
}
for _name, _fns in _UNARY.items():
    _h = op_handler(_name)
    _register(_fns, _h)
    if _h is not None and _name in _UNARY_INPLACE:
        _register(_UNARY_INPLACE[_name], inplace(_h, _name + "_"))


def _relu_like(short: str) -> Callable[..., Any] | None:
    """F.relu(x, inplace=True) and friends: functional op, then in-place rebinding."""
    h = op_handler(short)
    if h is None:
        return None

    def handler(ctx: Builder, x: Any, *args: Any, inplace: bool = False, **kw: Any) -> Any:
        out = h(ctx, x, *args, **kw)
        return ctx.assign(x, out._value, f"{short}(inplace=True)") if inplace else out

    return handler


_register([F.relu], _relu_like("relu"))
_register([F.silu], _relu_like("silu"))

_where = op_handler("where")
if _where is not None:
    _where_h: Callable[..., Any] = _where

    def _torch_where(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        if len(args) + len(kwargs) == 1:  # torch.where(cond): nonzero(cond, as_tuple=True)
            raise DataDependentError(
                f"{where(ctx.loc)}: torch.where(condition) with one argument returns the "
                "indices where condition holds: how many depends on the values, so the result "
                "has no shape while tracing. Use the three-argument torch.where(condition, x, "
                "y) or a mask (x * condition), or run this part (for example, the routing of "
                "a mixture of experts) outside the jitted function.")
        return _where_h(ctx, *args, **kwargs)

    _register([torch.where], _torch_where)

    def _tensor_where(ctx: Builder, self: Any, condition: Any, y: Any) -> Any:
        return _where_h(ctx, condition, self, y)

    _register([T.where], _tensor_where)

_h = op_handler("masked_fill")
_register([torch.masked_fill, T.masked_fill], _h)
if _h is not None:
    _register([T.masked_fill_], inplace(_h, "masked_fill_"))
_h = op_handler("clamp")
_register([torch.clamp, torch.clip, T.clamp, T.clip], _h)
if _h is not None:
    _register([T.clamp_, T.clip_], inplace(_h, "clamp_"))

# --------------------------------------------------------------------------- dtype / device


def _to_dtype(ctx: Builder, x: Any, dtype: torch.dtype) -> Any:
    if x.dtype == dtype:
        return x
    return emit_bound(ctx, OPS["to_dtype"], {"input": x, "dtype": dtype})


def _tensor_to(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    for k in ("non_blocking", "copy", "memory_format"):
        kwargs.pop(k, None)
    if kwargs:
        raise ThunderTraceError(f"{where(ctx.loc)}: Tensor.to got unsupported {kwargs}")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, str | torch.device):
            device = a
        elif isinstance(a, torch.Tensor):
            dtype, device = a.dtype, a.device
    out = self
    if device is not None and canonical_device(device) != canonical_device(self.device):
        out = fallback(ctx, T.to, (out, torch.device(device)), {})
    if dtype is not None:
        out = _to_dtype(ctx, out, dtype)
    return out


def _dtype_method(dtype: torch.dtype) -> Callable[..., Any]:
    def handler(ctx: Builder, self: Any, memory_format: Any = None) -> Any:
        return _to_dtype(ctx, self, dtype)

    return handler


if "to_dtype" in OPS:
    HANDLERS[T.to] = _tensor_to
    for _m, _dt in ((T.float, torch.float32), (T.half, torch.float16), (T.double, torch.float64),
                    (T.bfloat16, torch.bfloat16), (T.long, torch.int64), (T.int, torch.int32),
                    (T.bool, torch.bool), (T.short, torch.int16), (T.char, torch.int8),
                    (T.byte, torch.uint8)):
        HANDLERS[_m] = _dtype_method(_dt)
    HANDLERS[T.type_as] = lambda ctx, self, other: _to_dtype(ctx, self, other.dtype)

    def _type(ctx: Builder, self: Any, dtype: Any = None, **kw: Any) -> Any:
        if dtype is None:
            raise ThunderTraceError(f"{where(ctx.loc)}: Tensor.type() without a dtype returns "
                                    "a string; use .dtype")
        return _to_dtype(ctx, self, dtype)

    HANDLERS[T.type] = _type


def _identity(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
    return self


def _alias(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
    root = _root(self)
    return ctx.remember(TensorProxy(self._value, base=root))


def _detach(ctx: Builder, self: Any) -> Any:
    """``x.detach()``, ``torch.detach(x)``, ``x.data``: an alias of ``x`` that carries no
    gradient (``autograd.stop_gradient`` when ``x`` requires grad)."""
    if self._value not in ctx.active:
        return _alias(ctx, self)
    root = _root(self)
    return ctx.remember(TensorProxy(ctx.stop_gradient(self._value), base=root))


def _requires_grad_(ctx: Builder, self: Any, requires_grad: bool = True) -> Any:
    if bool(requires_grad) != (self._value in ctx.active):
        raise ThunderTraceError(
            f"{where(ctx.loc)}: requires_grad_({requires_grad}) inside a jitted function "
            "would change which tensors autograd tracks; set requires_grad on the tensors "
            "before passing them in (parameters already require grad).")
    return self


def _set_grad_enabled(ctx: Builder, mode: bool) -> None:
    """Grad mode switches for real while user code runs (``torch.no_grad()``,
    ``torch.enable_grad()``, ``torch.set_grad_enabled``); each op reads it."""
    ctx.set_grad_enabled(mode)


def _is_inference(ctx: Builder, self: Any) -> bool:
    return ctx.is_inference(self._value)


def _inplace_view(name: str) -> Any:
    """``x.t_()``, ``x.transpose_(0, 1)``, ``x.squeeze_()``...: eager changes ``x``'s sizes
    and strides in place, writing no data. ``x`` then stands for the view's value; a
    proxy's shape is fixed, so an op that would change it raises, naming the line. On an
    argument the op is replayed on the caller's tensor after the call (data written to it
    afterwards lands through the new layout, as in eager)."""
    functional = getattr(T, name[:-1])

    def handler(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_proxy(self):
            with torch._C.DisableTorchFunction():
                return getattr(T, name)(self, *args, **kwargs)
        h = HANDLERS.get(functional)
        new = (h(ctx, self, *args, **kwargs) if h is not None
               else fallback(ctx, functional, (self, *args), kwargs))
        if tuple(new.shape) != tuple(self.shape):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: in-place {name} would change a traced tensor's shape from "
                f"{list(self.shape)} to {list(new.shape)}, which thunder_ir cannot do to the "
                f"tensor you hold. Write `x = x.{name[:-1]}(...)` instead.")
        return ctx.view_in_place(self, new._value, name, args, kwargs)

    return handler


for _name in ("t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_"):
    HANDLERS[getattr(T, _name)] = _inplace_view(_name)

HANDLERS[T.contiguous] = _identity
HANDLERS[T.requires_grad_] = _requires_grad_
HANDLERS[T.detach] = _detach
HANDLERS[torch.detach] = _detach
HANDLERS[getter("data")] = _detach
HANDLERS[torch._C._set_grad_enabled] = _set_grad_enabled
HANDLERS[T.is_inference] = _is_inference
HANDLERS[torch.is_inference] = _is_inference

# --------------------------------------------------------------------------- reductions

for _name, _fns in {
    "sum": [torch.sum, T.sum], "mean": [torch.mean, T.mean], "prod": [torch.prod, T.prod],
    "amax": [torch.amax, T.amax], "amin": [torch.amin, T.amin],
    "argmax": [torch.argmax, T.argmax], "argmin": [torch.argmin, T.argmin],
}.items():
    _register(_fns, op_handler(_name))

_var_h = op_handler("var")
if _var_h is not None:
    _var: Callable[..., Any] = _var_h

    def _var_handler(ctx: Builder, x: Any, *args: Any, **kw: Any) -> Any:
        if "unbiased" in kw:
            kw["correction"] = 1 if kw.pop("unbiased") else 0
        if args and isinstance(args[0], bool):  # var(x, unbiased)
            kw["correction"] = 1 if args[0] else 0
            args = args[1:]
        return _var(ctx, x, *args, **kw)

    _register([torch.var, T.var], _var_handler)


def _max_like(full: str, with_dim: str, binary: str) -> Callable[..., Any]:
    def handler(ctx: Builder, x: Any, *args: Any, **kw: Any) -> Any:
        other = args[0] if args else kw.get("other")
        if isinstance(other, torch.Tensor):
            return op_handler(binary)(ctx, x, other)  # type: ignore[misc]
        if not args and "dim" not in kw:
            return op_handler(full)(ctx, x)  # type: ignore[misc]
        h = op_handler(with_dim)
        if h is None:
            return fallback(ctx, getattr(torch, full), (x, *args), kw)
        values, indices = h(ctx, x, *args, **kw)
        return torch.return_types.max((values, indices)) if full == "max" else \
            torch.return_types.min((values, indices))

    return handler


if "max" in OPS:
    _register([torch.max, T.max], _max_like("max", "max_dim", "maximum"))
if "min" in OPS:
    _register([torch.min, T.min], _max_like("min", "min_dim", "minimum"))

_topk_h = op_handler("topk")
if _topk_h is not None:
    _topk: Callable[..., Any] = _topk_h

    def _topk_handler(ctx: Builder, x: Any, *args: Any, **kw: Any) -> Any:
        """``torch.topk``: ``(values, indices)`` as torch's named tuple."""
        return torch.return_types.topk(tuple(_topk(ctx, x, *args, **kw)))

    _register([torch.topk, T.topk], _topk_handler)

# --------------------------------------------------------------------------- shape ops

_register([torch.reshape, T.reshape], op_handler("reshape", view=True, varargs="shape"))
_register([T.view], op_handler("view" if "view" in OPS else "reshape", view=True,
                               varargs="shape" if "view" not in OPS else "size"))
_register([torch.permute, T.permute], op_handler("permute", view=True, varargs="dims"))
_register([torch.transpose, torch.swapaxes, T.transpose, T.swapaxes],
          op_handler("transpose", view=True))
_register([torch.flatten, T.flatten], op_handler("flatten", view=True))
_view = HANDLERS[T.view]


def _unflatten(ctx: Builder, input: Any, dim: Any, sizes: Any) -> Any:
    """``unflatten(dim, sizes)``: the view of ``input`` with ``dim`` split into ``sizes``
    (one ``-1`` allowed), as eager's; other arguments take the fallback."""
    if not is_proxy(input) or not isinstance(dim, int) or isinstance(dim, bool) \
            or not isinstance(sizes, Sequence) or input.dim() == 0 \
            or not -input.dim() <= dim < input.dim():
        raise UseFallback
    split = _int_tuple(sizes, len(sizes))
    if not split:
        raise UseFallback
    d = dim % input.dim()
    return _view(ctx, input, (*input.shape[:d], *split, *input.shape[d + 1:]))


_register([torch.unflatten, T.unflatten], _unflatten)
_register([torch.unsqueeze, T.unsqueeze], op_handler("unsqueeze", view=True))
_register([torch.squeeze, T.squeeze], op_handler("squeeze", view=True))
_register([T.expand], op_handler("expand", view=True, varargs="size"))
_register([torch.split, T.split], op_handler("split", view=True))
_register([torch.chunk, T.chunk], op_handler("chunk", view=True))
_register([torch.cat, torch.concat, torch.concatenate], op_handler("cat"))
_register([torch.stack], op_handler("stack"))
_register([torch.clone, T.clone], op_handler("clone"))
_register([torch.triu, T.triu], op_handler("triu"))
_register([torch.tril, T.tril], op_handler("tril"))
if "transpose" in OPS:
    def _t(ctx: Builder, x: Any) -> Any:
        if x.ndim < 2:
            return x
        return op_handler("transpose", view=True)(ctx, x, 0, 1)  # type: ignore[misc]

    def _mT(ctx: Builder, x: Any) -> Any:
        return op_handler("transpose", view=True)(ctx, x, -2, -1)  # type: ignore[misc]

    _register([torch.t, T.t], _t)
    HANDLERS[getter("T")] = lambda ctx, x: _t(ctx, x) if x.ndim <= 2 else \
        op_handler("permute", view=True)(ctx, x, tuple(reversed(range(x.ndim))))  # type: ignore[misc]
    HANDLERS[getter("mT")] = _mT
if "expand" in OPS:
    HANDLERS[T.expand_as] = lambda ctx, x, other: op_handler("expand", view=True)(  # type: ignore[misc]
        ctx, x, tuple(other.shape))
if "reshape" in OPS:
    HANDLERS[T.view_as] = lambda ctx, x, other: op_handler("reshape", view=True)(  # type: ignore[misc]
        ctx, x, tuple(other.shape))


def _getitem(ctx: Builder, x: Any, index: Any) -> Any:
    op = OPS.get("getitem")
    items = index if isinstance(index, tuple) else (index,)
    tensors: list[Any] = []
    enc: list[Any] = []
    for it in items:
        if isinstance(it, torch.Tensor):
            if it.dtype == torch.bool:
                raise DataDependentError(
                    f"{where(ctx.loc)}: indexing with a boolean mask gives a shape that depends "
                    "on the mask's values, which are not known while tracing. Use "
                    "torch.where(mask, x, other) or x.masked_fill(~mask, value) instead.")
            enc.append(OperandRef(len(tensors)))
            tensors.append(it)
        elif isinstance(it, list):
            if not all(type(i) is int for i in it):
                raise ThunderTraceError(f"{where(ctx.loc)}: index lists must hold ints; use a "
                                        "tensor index instead")
            enc.append(OperandRef(len(tensors)))
            tensors.append(torch.tensor(it, dtype=torch.int64, device=x.device))
        else:
            enc.append(it)
    if op is None:
        return fallback(ctx, T.__getitem__, (x, index), {})
    emit = ctx.emit if tensors else ctx.emit_view  # basic indexing makes a view
    out = emit(op, ctx.value_of(x), [ctx.value_of(t) for t in tensors],
               index=tuple(enc) if isinstance(index, tuple) else enc[0])
    return ctx.wrap(out, _root(x) if not tensors else None)


HANDLERS[T.__getitem__] = _getitem


@export
def setitem(x: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
    """Functional ``x[index] = value``: a copy of ``x`` with the write applied (generated
    code calls it as ``tir.setitem``)."""
    out = x.clone()
    out[index] = value
    return out


def _setitem(ctx: Builder, x: Any, index: Any, value: Any) -> None:
    if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
        pass  # a boolean mask write keeps the shape: fine as a functional call
    out = fallback(ctx, setitem, (x, index, value), {})
    ctx.assign(x, out._value, "__setitem__")


HANDLERS[T.__setitem__] = _setitem


def _copy_(ctx: Builder, x: Any, src: Any, non_blocking: bool = False) -> Any:
    v = src
    if not isinstance(v, torch.Tensor):
        v = op_handler("full_like")(ctx, x, v)  # type: ignore[misc]
    if v.dtype != x.dtype:
        v = _to_dtype(ctx, v, x.dtype)
    if tuple(v.shape) != tuple(x.shape):
        v = op_handler("expand")(ctx, v, tuple(x.shape))  # type: ignore[misc]
    return ctx.assign(x, ctx.value_of(v), "copy_")


HANDLERS[T.copy_] = _copy_


def _fill_(ctx: Builder, x: Any, value: Any) -> Any:
    out = op_handler("full_like")(ctx, x, value)  # type: ignore[misc]
    return ctx.assign(x, out._value, "fill_")


HANDLERS[T.fill_] = _fill_
HANDLERS[T.zero_] = lambda ctx, x: _fill_(ctx, x, 0)

# --------------------------------------------------------------------------- creation


def _creation(short: str, size_param: str | None) -> Callable[..., Any] | None:
    op = OPS.get(short)
    if op is None:
        return None

    def handler(ctx: Builder, *args: Any, **kw: Any) -> Any:
        if size_param is not None and args and (
                isinstance(args[0], int) or (len(args) > 1 and isinstance(args[1], int))):
            args = (tuple(args),) if all(isinstance(a, int) for a in args) else args
        if size_param is not None and args and isinstance(args[0], torch.Size):
            args = (tuple(args[0]), *args[1:])
        bound = bind(op, args, kw, ctx.loc)
        if bound.get("dtype") is None and short not in ("arange", "full"):
            bound["dtype"] = torch.get_default_dtype()
        bound["device"] = canonical_device(bound.get("device") or torch.get_default_device())
        return emit_bound(ctx, op, bound)

    return handler


_register([torch.zeros], _creation("zeros", "size"))
_register([torch.ones], _creation("ones", "size"))
_register([torch.empty], _creation("empty", "size"))
_register([torch.full], _creation("full", "size"))
_register([torch.arange], _creation("arange", None))


def _like(short: str) -> Callable[..., Any] | None:
    op = OPS.get(short)
    if op is None:
        return None

    def handler(ctx: Builder, *args: Any, **kw: Any) -> Any:
        bound = bind(op, args, kw, ctx.loc)
        if bound.get("device") is not None:
            bound["device"] = canonical_device(bound["device"])
        return emit_bound(ctx, op, bound)

    return handler


_register([torch.zeros_like], _like("zeros_like"))
_register([torch.ones_like], _like("ones_like"))
_register([torch.full_like], _like("full_like"))
_register([torch.empty_like], _like("zeros_like"))


def _new(short: str) -> Callable[..., Any] | None:
    h = _creation(short, "size")
    if h is None:
        return None

    def handler(ctx: Builder, self: Any, *args: Any, **kw: Any) -> Any:
        kw.setdefault("dtype", self.dtype)
        kw.setdefault("device", self.device)
        return h(ctx, *args, **kw)

    return handler


HANDLERS.update({k: v for k, v in {
    T.new_zeros: _new("zeros"), T.new_ones: _new("ones"), T.new_empty: _new("empty"),
    T.new_full: _new("full")}.items() if v is not None})

# --------------------------------------------------------------------------- nn

_register([F.linear], op_handler("linear"))
_register([torch.matmul, T.matmul, T.__matmul__], op_handler("matmul"))
_register([T.__rmatmul__], op_handler("matmul", swap=True))
_register([torch.bmm, T.bmm], op_handler("bmm"))
_register([torch.softmax, F.softmax, T.softmax, torch.special.softmax],
          op_handler("softmax"))
_register([torch.log_softmax, F.log_softmax, T.log_softmax, torch.special.log_softmax],
          op_handler("log_softmax"))
_register([torch._safe_softmax], op_handler("safe_softmax"))
_register([F.layer_norm, torch.layer_norm], op_handler("layer_norm"))


def _int_tuple(v: Any, n: int) -> tuple[int, ...] | None:
    """``v`` (an int or ``n`` ints) as ``n`` ints, or None for anything else."""
    vs = (v,) * n if isinstance(v, int) else tuple(v) if isinstance(v, Sequence) else ()
    ok = len(vs) == n and all(isinstance(x, int) and not isinstance(x, bool) for x in vs)
    return vs if ok else None


_convolution_op = op_handler("convolution")


def _conv(n: int) -> Callable[..., Any]:
    """``F.conv{n}d``: ``ltorch.convolution`` for a batched input. An unbatched input, a
    ``"same"`` padding that torch would pad unevenly, or arguments that are not plain
    ints take the fallback (eager's kernel, checks and errors)."""

    def handler(ctx: Builder, input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                padding: Any = 0, dilation: Any = 1, groups: Any = 1) -> Any:
        if not (is_proxy(input) and is_proxy(weight) and (bias is None or is_proxy(bias))) \
                or input.dim() != n + 2 or weight.dim() != n + 2 \
                or not isinstance(groups, int) or isinstance(groups, bool):
            raise UseFallback
        st, dil = _int_tuple(stride, n), _int_tuple(dilation, n)
        if st is None or dil is None:
            raise UseFallback
        pad: tuple[int, ...] | None
        if padding == "valid":
            pad = (0,) * n
        elif padding == "same":
            total = [d * (k - 1) for d, k in zip(dil, weight.shape[2:])]
            if any(s != 1 for s in st) or any(t % 2 for t in total):
                raise UseFallback  # eager's error, or its uneven padding
            pad = tuple(t // 2 for t in total)
        else:
            pad = _int_tuple(padding, n)
        if pad is None:
            raise UseFallback
        return _convolution_op(ctx, input, weight, bias, stride=st,  # type: ignore[misc]
                               padding=pad, dilation=dil, groups=groups)

    return handler


_register([F.conv1d], _conv(1))
_register([F.conv2d], _conv(2))
_register([F.conv3d], _conv(3))

_max_pool2d_op = op_handler("max_pool2d_with_indices")


def _max_pool2d(ctx: Builder, input: Any, kernel_size: Any, stride: Any = None,
                padding: Any = 0, dilation: Any = 1, ceil_mode: Any = False,
                return_indices: Any = False) -> Any:
    """``F.max_pool2d`` (with or without indices) and ``torch.max_pool2d`` on a batched
    input: ``ltorch.max_pool2d_with_indices``, whose indices eager's autograd also keeps
    for the backward. An unbatched input or arguments that are not plain ints take the
    fallback."""
    k = _int_tuple(kernel_size, 2)
    st = k if stride is None or (isinstance(stride, Sequence) and not stride) \
        else _int_tuple(stride, 2)
    pad, dil = _int_tuple(padding, 2), _int_tuple(dilation, 2)
    if not is_proxy(input) or input.dim() != 4 or k is None or st is None or pad is None \
            or dil is None or not isinstance(ceil_mode, bool):
        raise UseFallback
    values, indices = _max_pool2d_op(ctx, input, kernel_size=k,  # type: ignore[misc]
                                     stride=st, padding=pad, dilation=dil,
                                     ceil_mode=ceil_mode)
    return (values, indices) if return_indices else values


def _max_pool2d_with_indices(ctx: Builder, input: Any, kernel_size: Any, stride: Any = None,
                             padding: Any = 0, dilation: Any = 1, ceil_mode: Any = False,
                             return_indices: Any = True) -> Any:
    return _max_pool2d(ctx, input, kernel_size, stride, padding, dilation, ceil_mode, True)


_register([F.max_pool2d, torch.max_pool2d], _max_pool2d)
_register([F.max_pool2d_with_indices], _max_pool2d_with_indices)


def _plane_mean_2d(x: torch.Tensor) -> torch.Tensor:
    return x.mean((-1, -2), keepdim=True)


def _plane_mean_1d(x: torch.Tensor) -> torch.Tensor:
    return x.unsqueeze(-2).mean((-1, -2), keepdim=True).squeeze(-2)


def _adaptive_avg_pool(n: int) -> Callable[..., Any]:
    """``F.adaptive_avg_pool{n}d`` to output size 1: the mean over the pooled dims, the ops
    ATen itself runs for that case (``unsqueeze`` first in 1-d). Other output sizes take
    the fallback."""
    mean = _plane_mean_2d if n == 2 else _plane_mean_1d

    def handler(ctx: Builder, input: Any, output_size: Any) -> Any:
        if not is_proxy(input) or input.dim() not in (n + 1, n + 2):
            raise UseFallback
        sizes = (output_size,) * n if isinstance(output_size, int) else tuple(output_size)
        sizes = tuple(input.shape[-n + i] if v is None else v for i, v in enumerate(sizes))
        if len(sizes) != n or any(v != 1 for v in sizes):
            raise UseFallback
        return ctx.run_python(mean, (input,), {})

    return handler


_register([F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d], _adaptive_avg_pool(2))
_register([torch.adaptive_avg_pool1d], _adaptive_avg_pool(1))

_batch_norm_op = op_handler("native_batch_norm")


def _batch_norm(ctx: Builder, input: Any, weight: Any, bias: Any, running_mean: Any,
                running_var: Any, training: Any, momentum: Any, eps: Any,
                cudnn_enabled: Any = True) -> Any:
    """``torch.batch_norm`` (what ``F.batch_norm`` calls after its checks, which run as
    they are): ``ltorch.native_batch_norm`` on float32/float64 tensors, the running
    statistics' updates written back as eager writes them in place. Other dtypes and
    arguments take the fallback."""
    stats = [t for t in (running_mean, running_var) if t is not None]
    params = [t for t in (weight, bias) if t is not None]
    if not is_proxy(input) or input.dtype not in (torch.float32, torch.float64) \
            or input.dim() < 2 or len(stats) == 1 or (not training and not stats) \
            or any(not is_proxy(t) or t.dtype != input.dtype for t in (*params, *stats)) \
            or not all(isinstance(v, int | float) for v in (momentum, eps)):
        raise UseFallback
    results = _batch_norm_op(ctx, input, weight, bias, running_mean,  # type: ignore[misc]
                             running_var, training=bool(training), momentum=float(momentum),
                             eps=float(eps))
    if training and stats:  # eager's backward saves the running statistics themselves
        ctx.assign(running_mean, results[3]._value, "batch_norm", keep_saved=True)
        ctx.assign(running_var, results[4]._value, "batch_norm", keep_saved=True)
    return results[0]


_register([torch.batch_norm], _batch_norm)
_register([F.rms_norm, torch.rms_norm], op_handler("rms_norm"))
_register([F.embedding], op_handler("embedding"))


def _warn_legacy(size_average: Any, reduce: Any) -> None:
    """Eager's deprecation warning for a loss's ``size_average`` / ``reduce``."""
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction

        _reduction.legacy_get_string(size_average, reduce)


def _check_class_weights(ctx: Builder, target: Any, weight: Any) -> None:
    """Eager's ``nll_loss`` refuses class weights that require grad with class-index
    targets (while grad mode is on): so does the trace, naming the line."""
    if (is_proxy(weight) and weight._value in ctx.active and torch.is_grad_enabled()
            and isinstance(target, torch.Tensor) and not target.is_floating_point()):
        raise ThunderTraceError(
            f"{where(ctx.loc)}: the function 'nll_loss_forward' is not differentiable with "
            "respect to argument 'weight' (eager raises this too): pass class weights that "
            "do not require grad, e.g. weight.detach()")


_cross_entropy_op = op_handler("cross_entropy")


def _cross_entropy(ctx: Builder, input: Any, target: Any, weight: Any = None, *args: Any,
                   **kwargs: Any) -> Any:
    """``F.cross_entropy``: ``ltorch.cross_entropy``, after eager's check of the weights
    and its deprecation warning for ``size_average`` / ``reduce``."""
    _check_class_weights(ctx, target, weight)
    _warn_legacy(kwargs.get("size_average", args[0] if args else None),
                 kwargs.get("reduce", args[2] if len(args) > 2 else None))
    return _cross_entropy_op(ctx, input, target, weight, *args, **kwargs)  # type: ignore[misc]


_nll_loss_op = op_handler("nll_loss_forward")


def _nll_loss(ctx: Builder, input: Any, target: Any, weight: Any = None,
              size_average: bool | None = None, ignore_index: int = -100,
              reduce: bool | None = None, reduction: str = "mean") -> Any:
    """``F.nll_loss`` on ``[N, C]`` or ``[C]`` log-probabilities with class-index targets:
    ``ltorch.nll_loss_forward``, eager's kernel (its loss; the total weight stays
    internal). Other shapes (``[N, C, d1, ...]``) and probability targets take the
    fallback."""
    if not (is_proxy(input) and isinstance(target, torch.Tensor)) or input.dim() not in (1, 2) \
            or target.is_floating_point():
        raise UseFallback
    _check_class_weights(ctx, target, weight)
    _warn_legacy(size_average, reduce)
    red = legacy_reduction(reduction, size_average, reduce)
    loss, _ = _nll_loss_op(ctx, input, target, weight, reduction=red,  # type: ignore[misc]
                           ignore_index=ignore_index)
    return loss


_register([F.cross_entropy], _cross_entropy)
_register([F.nll_loss], _nll_loss)
_register([F.mse_loss], op_handler("mse_loss"))


def _gelu(ctx: Builder, x: Any, approximate: str = "none") -> Any:
    return op_handler("gelu")(ctx, x, approximate=approximate)  # type: ignore[misc]


if "gelu" in OPS:
    HANDLERS[F.gelu] = _gelu


def _dropout_family(op: type[ThunderOp], inplace: bool) -> Callable[..., Any]:
    """``torch.dropout(input, p, train)`` and its family (what ``F.dropout``'s Python
    wrapper calls after its checks): the identity where eager returns the input itself."""

    def handler(ctx: Builder, input: Any, p: float, train: bool) -> Any:
        if isinstance(p, torch.Tensor) or not 0.0 <= p <= 1.0:
            raise UseFallback  # torch raises its own error
        if not train or p == 0.0 or input.numel() == 0:
            return input
        if (op is OPS["dropout"] and input.device.type == "cuda" and p < 1.0
                and input._value in ctx.active):
            # Eager's fused CUDA kernel draws its own way: record the call itself, whose
            # backward reuses its mask.
            raise UseFallback
        out = ctx.wrap(ctx.emit(op, ctx.value_of(input), p=float(p), train=True))
        return ctx.assign(input, out._value, f"{op.name}_") if inplace else out

    return handler


_DROPOUTS: dict[str, tuple[Any, Any]] = {
    "dropout": (torch.dropout, torch.dropout_),
    "feature_dropout": (torch.feature_dropout, torch.feature_dropout_),
    "alpha_dropout": (torch.alpha_dropout, torch.alpha_dropout_),
    "feature_alpha_dropout": (torch.feature_alpha_dropout, torch.feature_alpha_dropout_),
}
for _name, (_fn, _fn_) in _DROPOUTS.items():
    if _name in OPS:
        MAPPED.add(_name)
        HANDLERS[_fn] = _dropout_family(OPS[_name], False)
        HANDLERS[_fn_] = _dropout_family(OPS[_name], True)


_sdpa_op = op_handler("scaled_dot_product_attention")
if _sdpa_op is not None:
    _sdpa_h: Callable[..., Any] = _sdpa_op

    def _sdpa(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
        if isinstance(p, torch.Tensor) or (p and args[0].device.type != "cpu" and any(
                a._value in ctx.active for a in args[:3] if is_proxy(a))):
            # Attention dropout in training off the CPU: eager's fused kernels draw their
            # own way; the call itself is recorded, its autograd graph saved.
            raise UseFallback
        return _sdpa_h(ctx, *args, **kwargs)

    HANDLERS[F.scaled_dot_product_attention] = _sdpa


def _narrow(ctx: Builder, x: Any, dim: int, start: Any, length: int) -> Any:
    """``narrow`` with a tensor ``start``: its value picks the slice, not the shape, which
    the meta kernel cannot know (it would read the value)."""
    if not isinstance(start, torch.Tensor) or not isinstance(length, int):
        raise UseFallback
    shape = list(x.shape)
    shape[dim % x.ndim] = length
    t = x._value.type
    return fallback(ctx, T.narrow, (x, dim, start, length), {},
                    result_type=tensor_type(tuple(shape), t.dtype, t.dev))


_register([torch.narrow, T.narrow], _narrow)


def _grouped_mm(ctx: Builder, mat_a: Any, mat_b: Any, offs: Any = None,
                bias: Any = None, out_dtype: Any = None) -> Any:
    """``torch._grouped_mm`` (mixture-of-experts layers): ``ltorch.grouped_mm`` for the
    grouped forms (``offs``, no bias, no other output dtype); otherwise the fallback, with
    the result's shape from the operands' shapes (torch's meta kernel accepts only
    bfloat16)."""
    a, b = tuple(mat_a.shape), tuple(mat_b.shape)
    if (offs is not None and bias is None and out_dtype is None and len(a) == 2
            and len(b) in (2, 3)):
        return _grouped_mm_op(ctx, mat_a, mat_b, offs)
    shape: tuple[int, ...]
    if len(a) == 2 and len(b) == 3:
        shape = (a[0], b[2])
    elif len(a) == 3 and len(b) == 3:
        shape = (a[0], a[1], b[2])
    elif len(a) == 2 and len(b) == 2 and offs is not None:
        shape = (offs.shape[0], a[0], b[1])
    else:
        raise UseFallback
    t = mat_a._value.type
    dtype = out_dtype if out_dtype is not None else t.dtype
    kwargs = {k: v for k, v in (("offs", offs), ("bias", bias), ("out_dtype", out_dtype))
              if v is not None}
    return fallback(ctx, torch._grouped_mm, (mat_a, mat_b), kwargs,
                    result_type=tensor_type(shape, dtype, t.dev))


_grouped_mm_op_h = op_handler("grouped_mm")
if hasattr(torch, "_grouped_mm") and _grouped_mm_op_h is not None:
    _grouped_mm_op: Callable[..., Any] = _grouped_mm_op_h
    _register([torch._grouped_mm], _grouped_mm)
    # transformers' mixture-of-experts layers call its ``grouped_mm_fallback`` custom op
    # instead of ``torch._grouped_mm`` while a compiler traces them (in float32: Inductor's
    # limit): the same product, one expert's weight per group of rows ending at ``offs``.
    LIBRARY_HANDLERS["transformers::grouped_mm_fallback"] = _grouped_mm_op_h


def _symbolic_number(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.sym_float(3)`` and its siblings reach the tracer's mode with plain numbers
    (a mode sees every call): on numbers they are the Python functions they wrap."""

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
            raise UseFallback
        with torch._C.DisableTorchFunction():
            return fn(*args, **kwargs)

    return handler


for _n in dir(torch):
    if _n.startswith("sym_") and callable(getattr(torch, _n)):
        HANDLERS[getattr(torch, _n)] = _symbolic_number(getattr(torch, _n))


# --------------------------------------------------------------------------- inlined Python

_INLINED = (F.batch_norm, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d,
            F.alpha_dropout, F.feature_alpha_dropout, F.multi_head_attention_forward,
            F.triplet_margin_with_distance_loss, F.linear_cross_entropy)
"""torch functions written in Python that the tracer runs as they are, recording the torch
calls they make (their argument checks and warnings are eager's own), instead of recording
one opaque call of the whole function."""


def _no_torch_function(*args: Any) -> bool:
    return False


def inline(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A handler that traces through the Python torch function ``fn``.

    ``fn`` runs as a copy whose ``has_torch_function*`` checks say no (so it does not hand
    itself back to the tracer), through `Builder.run_python`, so every torch call it makes
    is traced."""
    scope = dict(fn.__globals__)
    for n in ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic"):
        scope[n] = _no_torch_function
    body = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    body.__kwdefaults__ = fn.__kwdefaults__

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        return ctx.run_python(body, args, kwargs)

    return handler


for _fn in _INLINED:
    HANDLERS[_fn] = inline(_fn)


def _add_product(input: Any, prod: Any, beta: Any, alpha: Any) -> Any:
    """``beta * input + alpha * prod`` as PyTorch's own decomposition of ``addmm`` writes
    it; ``beta=0`` ignores ``input`` (NaNs included), as eager does."""
    prod = prod if alpha == 1 else prod * alpha
    return prod if beta == 0 else (input if beta == 1 else input * beta) + prod


def _addmm(input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1,
           out: Any = None) -> Any:
    """``torch.addmm`` (GPT-2's ``Conv1D``) as `_add_product` of ``matmul``."""
    if out is not None:
        raise UseFallback
    return _add_product(input, torch.matmul(mat1, mat2), beta, alpha)


def _baddbmm(input: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1,
             out: Any = None) -> Any:
    """``torch.baddbmm`` (``nn.MultiheadAttention`` adds its float mask with it) as
    `_add_product` of ``bmm`` (eager's shape checks). Mixed dtypes, which eager refuses,
    take the fallback and get eager's error."""
    if out is not None or not isinstance(input, torch.Tensor) \
            or not input.dtype == batch1.dtype == batch2.dtype:
        raise UseFallback
    return _add_product(input, torch.bmm(batch1, batch2), beta, alpha)


HANDLERS[torch.addmm] = HANDLERS[T.addmm] = inline(_addmm)
HANDLERS[torch.baddbmm] = HANDLERS[T.baddbmm] = inline(_baddbmm)


def _constant_pad(input: Any, pad: Sequence[int], mode: str = "constant",
                  value: Any = None) -> Any:
    """``F.pad`` in ``"constant"`` mode (causal-LM losses shift their labels with it) as
    ``full`` blocks joined by ``cat``; negative padding narrows. Other modes run on torch."""
    if mode != "constant" or len(pad) % 2 or len(pad) // 2 > input.dim():
        raise UseFallback
    out, fresh = input, False
    fill = 0 if value is None else value
    for i in range(len(pad) // 2):
        dim = input.dim() - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        if left < 0 or right < 0:
            keep = slice(max(-left, 0), out.shape[dim] + min(right, 0))
            out = out[tuple(keep if k == dim else slice(None) for k in range(out.dim()))]
            left, right = max(left, 0), max(right, 0)
        parts = []
        for n in (left, right):
            shape = list(out.shape)
            shape[dim] = n
            parts.append(torch.full(shape, fill, dtype=out.dtype, device=out.device)
                         if n else None)
        if left or right:
            out = torch.cat([t for t in (parts[0], out, parts[1]) if t is not None], dim)
            fresh = True
    return out if fresh else out.clone()  # a new tensor, as eager's


HANDLERS[F.pad] = HANDLERS[torch._C._nn.pad] = inline(_constant_pad)


def _gather(ctx: Builder, input: Any, dim: int, index: Any, *, sparse_grad: bool = False,
            out: Any = None) -> Any:
    """``torch.gather`` as ``prims.gather`` (BERT's token-type ids); an index that is not
    int64, ``sparse_grad`` or ``out=`` run on torch."""
    if (sparse_grad or out is not None or not is_proxy(input)
            or not isinstance(index, torch.Tensor) or index.dtype != torch.int64
            or not isinstance(dim, int) or input.dim() == 0 or index.dim() != input.dim()):
        raise UseFallback  # (zero-dimensional operands too: torch's own rules)
    from thunder_ir.dialects.prims import GatherOp

    rank = input.dim()
    return ctx.wrap(ctx.emit(GatherOp, ctx.value_of(input), ctx.value_of(index),
                             dim=dim + rank if dim < 0 else dim))


HANDLERS[torch.gather] = HANDLERS[T.gather] = _gather


def _index_select(ctx: Builder, input: Any, dim: int, index: Any, *, out: Any = None) -> Any:
    """``torch.index_select`` as ``prims.take`` (a 1-D integer index); ``out=``, scalar
    operands and other indices run on torch."""
    if (out is not None or not is_proxy(input) or not isinstance(index, torch.Tensor)
            or index.dtype not in (torch.int64, torch.int32) or index.dim() != 1
            or not isinstance(dim, int) or input.dim() == 0):
        raise UseFallback
    from thunder_ir.dialects.prims import TakeOp

    rank = input.dim()
    return ctx.wrap(ctx.emit(TakeOp, ctx.value_of(input), ctx.value_of(index),
                             dim=dim + rank if dim < 0 else dim))


HANDLERS[torch.index_select] = HANDLERS[T.index_select] = _index_select

_pow_h = op_handler("pow")
if _pow_h is not None:
    _pow: Callable[..., Any] = _pow_h

    def _square(ctx: Builder, input: Any, *, out: Any = None) -> Any:
        """``torch.square``: ``pow(input, 2)``, as torch defines it."""
        if out is not None:
            raise UseFallback
        return _pow(ctx, input, 2)

    HANDLERS[torch.square] = HANDLERS[T.square] = _square


def _tensor(ctx: Builder, data: Any, *, dtype: torch.dtype | None = None,
            device: Any = None, requires_grad: bool = False, pin_memory: bool = False) -> Any:
    """``torch.tensor(data)`` of Python numbers: a number becomes a zero-dimensional
    ``full``; (nested) lists of numbers, such as the empty ``torch.tensor([])`` of mask
    code, a constant of the program made by torch itself. Anything holding tensors runs on
    torch."""
    if requires_grad or pin_memory:
        raise UseFallback
    if type(data) in (bool, int, float):
        if dtype is None:
            dtype = (torch.bool if type(data) is bool else torch.int64 if type(data) is int
                     else torch.get_default_dtype())
        return HANDLERS[torch.full](ctx, (), data, dtype=dtype, device=device)
    if not isinstance(data, list | tuple) or not all(
            type(x) in (bool, int, float) for x in pytree.tree_leaves(data)):
        raise UseFallback
    with torch._C.DisableTorchFunction():
        value = torch.tensor(data, dtype=dtype, device=device)
    # a fresh tensor on every call, as eager's (the constant itself is never handed out)
    return HANDLERS[torch.clone](ctx, ctx.lift_constant(value))


HANDLERS[torch.tensor] = _tensor


# Ops reached through the custom handlers above (torch.max dispatches on its arguments).
MAPPED.update({"to_dtype", "getitem", "max", "min", "max_dim", "min_dim", "topk",
               "full_like", "zeros", "ones", "empty", "full", "arange", "zeros_like",
               "ones_like"} & set(OPS))


def unmapped_ops() -> list[str]:
    """ltorch ops that no torch callable maps to (for a coverage test)."""
    return sorted(f"ltorch.{n}" for n in OPS if n not in MAPPED)
