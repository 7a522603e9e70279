"""Which torch callables become which ``ltorch`` ops while tracing.

Most entries are declarative: an ltorch op declares ``SIGNATURE`` (torch's positional
order across operands and params) and ``DEFAULTS``, and `bind` maps any torch call onto it.
Operators' reflected forms (``__radd__``) swap their operands; in-place forms (``add_``,
``__iadd__``) compute the functional op and rebind the proxy (`Builder.writes.assign`).
Calls with irregular conventions (``Tensor.view(*shape)``, ``Tensor.to``, ``torch.max``,
``__getitem__``, dropout's RNG) have small handlers of their own (``__setitem__``:
`thunder_ir.frontend.setitem`).

Handlers write through the `thunder_ir.frontend.builder.Builder` interface only, so an
importer of another graph format can reuse them. Importing this module fills
`thunder_ir.frontend.table.HANDLERS` (`thunder_ir.frontend.tracer` imports it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree
from xdsl.ir import Operation

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef, ThunderOp
from thunder_ir.dialects.ltorch import OPS
from thunder_ir.dialects.types import canonical_device, tensor_type
from thunder_ir.frontend import unbacked
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import (
    DataDependentError,
    NeedsSymbols,
    ThunderTraceError,
    UseFallback,
    speculating_sizes,
    where,
)
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.number_tensors import as_sizes
from thunder_ir.frontend.program_build import unbacked_float
from thunder_ir.frontend.proxy import TensorProxy, is_proxy, root_proxy
from thunder_ir.frontend.table import (
    HANDLERS,
    LIBRARY_HANDLERS,
    getter,
    inline,
    register_handlers,
    traces_python,
)
from thunder_ir.runtime.writes import resized

T = torch.Tensor

# Extra torch arguments that an op may ignore when they carry these values.
_IGNORABLE: dict[str, tuple[Any, ...]] = {
    "out": (None,), "inplace": (False,), "memory_format": (torch.preserve_format, None),
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
        if isinstance(v, torch.Tensor) or any(unbacked_float(x) for x in pytree.tree_leaves(v)):
            raise UseFallback  # a tensor where the op takes a number (clamp(x, min=t)), or
            # a float .item(): the opaque call takes it as an operand
        if isinstance(v, torch.Size):
            v = tuple(v)
        v = as_sizes(v)  # (a size computed as a tensor from numbers: Longformer's chunks)
        if isinstance(v, torch.device):
            v = canonical_device(v)
        params[n] = v
    emit = ctx.emit if base is None else ctx.emit_view
    out = ctx.wrap(emit(op, *groups, **params), base)
    return tuple(out) if isinstance(out, list) else out  # torch returns tuples (split)


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
        return emit_bound(ctx, op, bound, root_proxy(args[0]) if view else None)

    return handler


def register_torch_op(torch_fns: Sequence[Any], op: type[ThunderOp]) -> None:
    """Routes torch callables to ``op`` while tracing (public: for ops users add).

    The call's arguments are bound by the op's ``SIGNATURE`` and ``DEFAULTS``: tensors go
    to its operands, the rest to its params (see `bind`).
    """

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        return emit_bound(ctx, op, bind(op, args, kwargs, ctx.loc))

    register_handlers(torch_fns, handler, builtin=False, replace=True)


def inplace(functional: Callable[..., Any], name: str) -> Callable[..., Any]:
    """The in-place form of a functional handler."""

    def handler(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
        out = functional(ctx, self, *args, **kwargs)
        return ctx.writes.assign(self, out._value, name)

    return handler


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
    register_handlers(_fns, _h)
    register_handlers(_rfns, op_handler(_name, swap=True))
    if _h is not None:
        register_handlers(_ifns, inplace(_h, _name + "_"))

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
    "relu": [torch.relu, T.relu], "gelu": [F.gelu],  # (F.relu, F.silu: `_relu_like`)
    "softplus": [F.softplus],
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
    register_handlers(_fns, _h)
    if _h is not None and _name in _UNARY_INPLACE:
        register_handlers(_UNARY_INPLACE[_name], inplace(_h, _name + "_"))


def _relu_like(short: str) -> Callable[..., Any] | None:
    """F.relu(x, inplace=True) and friends: functional op, then in-place rebinding."""
    h = op_handler(short)
    if h is None:
        return None

    def handler(ctx: Builder, x: Any, *args: Any, inplace: bool = False, **kw: Any) -> Any:
        out = h(ctx, x, *args, **kw)
        return ctx.writes.assign(x, out._value, f"{short}(inplace=True)") if inplace else out

    return handler


register_handlers([F.relu], _relu_like("relu"))
register_handlers([F.silu], _relu_like("silu"))


def _hard_activation(short: str) -> Callable[..., Any] | None:
    """``F.hardswish(input, inplace=False)`` and ``F.hardsigmoid``: as `_relu_like`, with
    ``inplace`` also positional (``nn.Hardswish`` passes it so)."""
    h = op_handler(short)
    if h is None:
        return None

    def handler(ctx: Builder, input: Any, inplace: bool = False) -> Any:
        out = h(ctx, input)
        return ctx.writes.assign(input, out._value, f"{short}(inplace=True)") if inplace else out

    return handler


register_handlers([F.hardswish], _hard_activation("hardswish"))
register_handlers([F.hardsigmoid], _hard_activation("hardsigmoid"))

_where = op_handler("where")
if _where is not None:
    _where_h: Callable[..., Any] = _where

    def _torch_where(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        if len(args) + len(kwargs) == 1:  # torch.where(cond): nonzero(cond, as_tuple=True)
            cond: Any = kwargs.get("condition", args[0] if args else None)
            if symbols.current() is not None:  # an unbacked count: u0 indices per dim
                if is_proxy(cond) and cond.ndim > 0:
                    return unbacked.nonzero_tuple(ctx, cond)  # type: ignore[arg-type]
                raise UseFallback
            if not speculating_sizes():
                raise NeedsSymbols(f"{where(ctx.loc)}: torch.where(condition) has a "
                                   "data-dependent size")
            raise DataDependentError(
                f"{where(ctx.loc)}: torch.where(condition) with one argument returns the "
                "indices where condition holds: how many depends on the values, so the result "
                "has no shape while tracing. Use the three-argument torch.where(condition, x, "
                "y) or a mask (x * condition), or run this part (for example, the routing of "
                "a mixture of experts) outside the jitted function.")
        return _where_h(ctx, *args, **kwargs)

    register_handlers([torch.where], _torch_where)

    def _tensor_where(ctx: Builder, self: Any, condition: Any, y: Any) -> Any:
        return _where_h(ctx, condition, self, y)

    register_handlers([T.where], _tensor_where)

_h = op_handler("masked_fill")
register_handlers([torch.masked_fill, T.masked_fill], _h)
if _h is not None:
    register_handlers([T.masked_fill_], inplace(_h, "masked_fill_"))
_h = op_handler("clamp")
register_handlers([torch.clamp, torch.clip, T.clamp, T.clip], _h)
if _h is not None:
    register_handlers([T.clamp_, T.clip_], inplace(_h, "clamp_"))

# --------------------------------------------------------------------------- dtype / device


def _to_dtype(ctx: Builder, x: Any, dtype: torch.dtype) -> Any:
    if x.dtype == dtype:
        return x
    return emit_bound(ctx, OPS["to_dtype"], {"input": x, "dtype": dtype})


def _tensor_to(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    memory_format = kwargs.pop("memory_format", None)
    kwargs.pop("non_blocking", None)
    copy = kwargs.pop("copy", False)
    if kwargs:
        raise ThunderTraceError(f"{where(ctx.loc)}: Tensor.to got unsupported {kwargs}")
    flags = [a for a in args if isinstance(a, bool)]  # (non_blocking, copy) positionally
    if len(flags) > 1:
        copy = flags[1]
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
    if memory_format not in (None, torch.preserve_format):
        out = _contiguous(ctx, out, memory_format)  # eager's copy in that layout
    if copy and out is self:  # copy=True: a new tensor even where nothing changes
        out = emit_bound(ctx, OPS["clone"], {"input": self})
    return out


def _dtype_method(dtype: torch.dtype) -> Callable[..., Any]:
    def handler(ctx: Builder, self: Any, memory_format: Any = None) -> Any:
        if memory_format not in (None, torch.preserve_format):
            raise UseFallback  # eager's layout rules for the copy it makes
        return _to_dtype(ctx, self, dtype)

    return handler


if "to_dtype" in OPS:
    register_handlers([T.to], _tensor_to)
    for _m, _dt in ((T.float, torch.float32), (T.half, torch.float16), (T.double, torch.float64),
                    (T.bfloat16, torch.bfloat16), (T.long, torch.int64), (T.int, torch.int32),
                    (T.bool, torch.bool), (T.short, torch.int16), (T.char, torch.int8),
                    (T.byte, torch.uint8)):
        register_handlers([_m], _dtype_method(_dt))
    register_handlers([T.type_as], lambda ctx, self, other: _to_dtype(ctx, self, other.dtype))

    def _type(ctx: Builder, self: Any, dtype: Any = None, **kw: Any) -> Any:
        if dtype is None:
            raise ThunderTraceError(f"{where(ctx.loc)}: Tensor.type() without a dtype returns "
                                    "a string; use .dtype")
        return _to_dtype(ctx, self, dtype)

    register_handlers([T.type], _type)


def _identity(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
    return self


def _same_layout(self: Any) -> dict[str, Any]:
    with torch._C.DisableTorchFunction():
        return {"strides": tuple(self.stride()), "offset": self.storage_offset()}


def _detach(ctx: Builder, self: Any) -> Any:
    """``x.detach()``, ``torch.detach(x)``: an alias of ``x`` that carries no gradient, cut
    from it by an ``autograd.stop_gradient`` (stripped before code generation), whether or
    not ``x`` requires grad: under ``no_grad`` a view of a tensor that requires grad
    requires grad in eager, its detached alias does not, and the cut tells the two apart
    where the program returns them; a write through the alias changes ``x``'s values, not
    its autograd identity (`thunder_ir.frontend.aliasing.write_through`)."""
    root = root_proxy(self)
    v = ctx.grad.stop_gradient(self._value)
    ctx.note_layout(v, ctx.layout_of(self._value))
    assert isinstance(v.owner, Operation)
    ctx.note_view(v, self._value, v.owner, 0)
    return ctx.remember(TensorProxy(v, base=root, **_same_layout(self)))


def _data(ctx: Builder, self: Any) -> Any:
    """``x.data``: `_detach`'s alias, through which a write does not bump ``x``'s version
    counter (eager's ``.data`` has a version counter of its own)."""
    out = _detach(ctx, self)
    ctx.writes.note_data_alias(out._value)
    return out


def _requires_grad_(ctx: Builder, self: Any, requires_grad: bool = True) -> Any:
    """``t.requires_grad_(flag)`` (and ``t.requires_grad = flag``): eager's rules."""
    if not is_proxy(self):
        with torch._C.DisableTorchFunction():
            return self.requires_grad_(requires_grad)
    ctx.grad.set_requires_grad(self, bool(requires_grad))
    return self


def _set_requires_grad(ctx: Builder, self: Any, flag: bool) -> None:
    _requires_grad_(ctx, self, flag)


def _set_data(ctx: Builder, self: Any, new: Any) -> None:
    """``t.data = new`` (``Module.to`` and ``.half()`` do it to every parameter)."""
    if not is_proxy(self):
        raise ThunderTraceError(f"{where(ctx.loc)}: `.data = ` on a tensor that is not "
                                "traced; pass it as an argument instead")
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"Variable data has to be a tensor, but got {type(new).__name__}")
    ctx.writes.set_data(self, new)


def _set_grad_enabled(ctx: Builder, mode: bool) -> None:
    """Grad mode switches for real while user code runs (``torch.no_grad()``,
    ``torch.enable_grad()``, ``torch.set_grad_enabled``); each op reads it."""
    ctx.grad.set_grad_enabled(mode)


def _is_inference(ctx: Builder, self: Any) -> bool:
    return ctx.grad.is_inference(self._value)


def _inplace_view(name: str, functional: Any = None) -> Any:
    """``x.t_()``, ``x.transpose_(0, 1)``, ``x.unsqueeze_(0)``, ``x.as_strided_(...)``,
    ``x.resize_(...)``: eager changes ``x``'s sizes and strides in place (its shape too),
    writing no data. ``x`` then stands for the new view's value, with its sizes and strides
    (`TensorProxy.set_layout`). On an argument the op is replayed on the caller's tensor
    after the call (data written to it afterwards lands through the new layout, as in
    eager)."""
    functional = functional or getattr(T, name[:-1])

    def handler(ctx: Builder, self: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_proxy(self):
            with torch._C.DisableTorchFunction():
                return getattr(T, name)(self, *args, **kwargs)
        h = HANDLERS.get(functional)
        new = (h(ctx, self, *args, **kwargs) if h is not None
               else fallback(ctx, functional, (self, *args), kwargs))
        return ctx.writes.view_in_place(self, new._value, name, args, kwargs)

    return handler


for _name in ("t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_",
              "as_strided_"):
    register_handlers([getattr(T, _name)], _inplace_view(_name))


def _resize_(ctx: Builder, self: Any, *size: Any, memory_format: Any = None) -> Any:
    """``x.resize_(size)`` of a contiguous tensor that does not require grad (eager's
    refusal otherwise); the caller's tensor is resized the same way after the call."""
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], Sequence) else size
    if not is_proxy(self) or memory_format is not None \
            or not all(isinstance(d, int) for d in shape):
        raise UseFallback
    if self.requires_grad:
        raise RuntimeError(f"cannot resize variables that require grad\n  at {where(ctx.loc)}")
    ctx.read_layout(self)
    with torch._C.DisableTorchFunction():
        contiguous = self.is_contiguous()
    if not contiguous:
        raise ThunderTraceError(
            f"{where(ctx.loc)}: resize_ of a tensor that is not contiguous keeps its storage "
            "and lays the new shape over it, which thunder_ir does not follow. Call "
            "`.contiguous()` first, or build a new tensor.")
    new = fallback(ctx, resized, (self, shape), {})
    return ctx.writes.view_in_place(self, new._value, "resize_", (shape,), {})


register_handlers([T.resize_], _resize_)

def _contiguous(ctx: Builder, self: Any, memory_format: Any = torch.contiguous_format) -> Any:
    """``x.contiguous(memory_format=...)``: ``x`` itself where eager's ``x`` is laid out so
    already (eager returns it), else ``ltorch.contiguous``, a copy in that layout."""
    if not is_proxy(self) or not isinstance(memory_format, torch.memory_format) \
            or memory_format is torch.preserve_format:
        raise UseFallback  # torch's own error
    ctx.read_layout(self)
    with torch._C.DisableTorchFunction():
        if self.is_contiguous(memory_format=memory_format):
            return self
    bound: dict[str, Any] = {"input": self}
    if memory_format is not torch.contiguous_format:
        bound["memory_format"] = memory_format
    return emit_bound(ctx, OPS["contiguous"], bound)


register_handlers([T.contiguous], _contiguous)
register_handlers([T.requires_grad_], _requires_grad_)
register_handlers([T.requires_grad.__set__], _set_requires_grad)  # type: ignore[attr-defined]
register_handlers([T.data.__set__], _set_data)  # type: ignore[attr-defined]
register_handlers([T.detach, torch.detach], _detach)
register_handlers([getter("data")], _data)
register_handlers([torch._C._set_grad_enabled], _set_grad_enabled)
register_handlers([T.is_inference, torch.is_inference], _is_inference)

# --------------------------------------------------------------------------- reductions

for _name, _fns in {
    "sum": [torch.sum, T.sum], "mean": [torch.mean, T.mean], "prod": [torch.prod, T.prod],
    "amax": [torch.amax, T.amax], "amin": [torch.amin, T.amin],
    "argmax": [torch.argmax, T.argmax], "argmin": [torch.argmin, T.argmin],
}.items():
    register_handlers(_fns, op_handler(_name))

_cumsum_h = op_handler("cumsum")
if _cumsum_h is not None:
    _cumsum: Callable[..., Any] = _cumsum_h

    def _cumsum_handler(ctx: Builder, *args: Any, **kw: Any) -> Any:
        if kw.get("dtype", args[2] if len(args) > 2 else None) is torch.bool:
            raise UseFallback  # eager's kernel refuses to sum in bool
        return _cumsum(ctx, *args, **kw)

    register_handlers([torch.cumsum, T.cumsum], _cumsum_handler)

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

    register_handlers([torch.var, T.var], _var_handler)


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
    register_handlers([torch.max, T.max], _max_like("max", "max_dim", "maximum"))
if "min" in OPS:
    register_handlers([torch.min, T.min], _max_like("min", "min_dim", "minimum"))

_topk_h = op_handler("topk")
if _topk_h is not None:
    _topk: Callable[..., Any] = _topk_h

    def _topk_handler(ctx: Builder, x: Any, *args: Any, **kw: Any) -> Any:
        """``torch.topk``: ``(values, indices)`` as torch's named tuple."""
        return torch.return_types.topk(tuple(_topk(ctx, x, *args, **kw)))

    register_handlers([torch.topk, T.topk], _topk_handler)

# --------------------------------------------------------------------------- shape ops

register_handlers([torch.reshape, T.reshape], op_handler("reshape", view=True, varargs="shape"))
register_handlers([T.view], op_handler("view" if "view" in OPS else "reshape", view=True,
                               varargs="shape" if "view" not in OPS else "size"))
register_handlers([torch.permute, T.permute], op_handler("permute", view=True, varargs="dims"))
register_handlers([torch.transpose, torch.swapaxes, T.transpose, T.swapaxes],
          op_handler("transpose", view=True))
register_handlers([torch.flatten, T.flatten], op_handler("flatten", view=True))
_view = HANDLERS[T.view]


def _unflatten(ctx: Builder, input: Any, dim: Any, sizes: Any) -> Any:
    """``unflatten(dim, sizes)``: the view of ``input`` with ``dim`` split into ``sizes``
    (one ``-1`` allowed), as eager's; other arguments take the fallback."""
    if not is_proxy(input) or not isinstance(dim, int) or isinstance(dim, bool) \
            or not isinstance(sizes, Sequence) or input.dim() == 0 \
            or not -input.dim() <= dim < input.dim():
        raise UseFallback
    split = int_tuple(sizes, len(sizes))
    if not split:
        raise UseFallback
    d = dim % input.dim()
    return _view(ctx, input, (*input.shape[:d], *split, *input.shape[d + 1:]))


register_handlers([torch.unflatten, T.unflatten], _unflatten)
register_handlers([torch.unsqueeze, T.unsqueeze], op_handler("unsqueeze", view=True))
register_handlers([torch.squeeze, T.squeeze], op_handler("squeeze", view=True))
register_handlers([T.expand], op_handler("expand", view=True, varargs="size"))
register_handlers([torch.split, T.split], op_handler("split", view=True))
register_handlers([torch.chunk, T.chunk], op_handler("chunk", view=True))
register_handlers([torch.cat, torch.concat, torch.concatenate], op_handler("cat"))
register_handlers([torch.stack], op_handler("stack"))
register_handlers([torch.clone, T.clone], op_handler("clone"))
register_handlers([torch.triu, T.triu], op_handler("triu"))
register_handlers([torch.tril, T.tril], op_handler("tril"))
if "transpose" in OPS:
    def _t(ctx: Builder, x: Any) -> Any:
        if x.ndim < 2:
            return x
        return op_handler("transpose", view=True)(ctx, x, 0, 1)  # type: ignore[misc]

    def _mT(ctx: Builder, x: Any) -> Any:
        return op_handler("transpose", view=True)(ctx, x, -2, -1)  # type: ignore[misc]

    register_handlers([torch.t, T.t], _t)
    register_handlers([getter("T")], lambda ctx, x: _t(ctx, x) if x.ndim <= 2 else
                      op_handler("permute", view=True)(  # type: ignore[misc]
                          ctx, x, tuple(reversed(range(x.ndim)))))
    register_handlers([getter("mT")], _mT)
if "expand" in OPS:
    register_handlers([T.expand_as], lambda ctx, x, other: op_handler("expand", view=True)(  # type: ignore[misc]
        ctx, x, tuple(other.shape)))
register_handlers([T.view_as], lambda ctx, x, other: _view(ctx, x, tuple(other.shape)))
register_handlers([T.reshape_as], lambda ctx, x, other: op_handler(  # type: ignore[misc]
    "reshape", view=True)(ctx, x, tuple(other.shape)))


def getitem(ctx: Builder, x: Any, index: Any) -> Any:
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
    return ctx.wrap(out, root_proxy(x) if not tensors else None)


# (``x[index]`` is routed by `thunder_ir.frontend.speculation`, whose handler takes a
# boolean mask's count and leaves every other index to `getitem`)


def _int(v: Any) -> bool:
    return type(v) is int


def _select(ctx: Builder, x: Any, dim: int, index: Any) -> Any:
    """``x.select(dim, i)`` as the view ``x[:, ..., i]`` (a native op and its VJP, not an
    opaque call: a scan written with ``select`` per step has hundreds)."""
    if not (_int(dim) and _int(index)) or x.ndim == 0:
        raise UseFallback  # (eager's error, or a tensor index)
    return getitem(ctx, x, (slice(None),) * (dim % x.ndim) + (index,))


def _slice(ctx: Builder, x: Any, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Any:
    """``aten.slice`` (what torch's own Python kernels call) as the view ``x[:, s:e:k]``:
    both clamp the bounds."""
    if not (_int(dim) and _int(step) and step > 0 and x.ndim > 0
            and all(b is None or _int(b) for b in (start, end))):
        raise UseFallback
    return getitem(ctx, x, (slice(None),) * (dim % x.ndim) + (slice(start, end, step),))


def _narrow_ints(ctx: Builder, x: Any, dim: int, start: Any, length: Any) -> Any:
    """``narrow`` with int bounds as the view ``x[:, s:s+n]`` (eager's range checks kept:
    out of range, torch runs it and raises its own error)."""
    if not (_int(dim) and _int(start) and _int(length)) or x.ndim == 0:
        return _narrow(ctx, x, dim, start, length)
    size = x.shape[dim % x.ndim]
    begin = start + size if start < 0 else start
    if not (0 <= begin <= size and 0 <= length <= size - begin):
        raise UseFallback
    return getitem(ctx, x, (slice(None),) * (dim % x.ndim) + (slice(begin, begin + length),))


def _movedim(ctx: Builder, x: Any, source: Any, destination: Any) -> Any:
    """``movedim``/``moveaxis`` as the ``permute`` it is (eager's errors: torch runs it)."""
    src = [source] if _int(source) else list(source)
    dst = [destination] if _int(destination) else list(destination)
    n = max(x.ndim, 1)
    if not all(map(_int, src + dst)) or len(src) != len(dst):
        raise UseFallback
    src, dst = [d % n for d in src], [d % n for d in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst) or x.ndim == 0:
        raise UseFallback
    rest = iter(d for d in range(x.ndim) if d not in src)
    at = dict(zip(dst, src))
    perm = tuple(at[i] if i in at else next(rest) for i in range(x.ndim))
    return op_handler("permute", view=True)(ctx, x, perm)  # type: ignore[misc]


register_handlers([torch.movedim, T.movedim, torch.moveaxis, T.moveaxis], _movedim)
register_handlers([torch.select, T.select], _select)
register_handlers([torch.ops.aten.slice, torch.ops.aten.slice.Tensor], _slice)


def _copy_(ctx: Builder, x: Any, src: Any, non_blocking: bool = False) -> Any:
    v = src
    if not isinstance(v, torch.Tensor):
        v = op_handler("full_like")(ctx, x, v)  # type: ignore[misc]
    if v.dtype != x.dtype:
        v = _to_dtype(ctx, v, x.dtype)
    if tuple(v.shape) != tuple(x.shape):
        v = op_handler("expand")(ctx, v, tuple(x.shape))  # type: ignore[misc]
    return ctx.writes.assign(x, ctx.value_of(v), "copy_")


register_handlers([T.copy_], _copy_)


def _fill_(ctx: Builder, x: Any, value: Any) -> Any:
    out = op_handler("full_like")(ctx, x, value)  # type: ignore[misc]
    return ctx.writes.assign(x, out._value, "fill_")


register_handlers([T.fill_], _fill_)
register_handlers([T.zero_], lambda ctx, x: _fill_(ctx, x, 0))

# --------------------------------------------------------------------------- creation


_SIZE = (int, torch.SymInt)
"""What a size among a factory's varargs is (``torch.zeros(n, 2)``)."""


def _creation(short: str, size_param: str | None) -> Callable[..., Any] | None:
    op = OPS.get(short)
    if op is None:
        return None

    def handler(ctx: Builder, *args: Any, **kw: Any) -> Any:
        if size_param is not None and args and (  # (sizes: ints, or symbolic: SymInts)
                isinstance(args[0], _SIZE) or (len(args) > 1 and isinstance(args[1], _SIZE))):
            args = (tuple(args),) if all(isinstance(a, _SIZE) for a in args) else args
        if size_param is not None and args and isinstance(args[0], torch.Size):
            args = (tuple(args[0]), *args[1:])
        bound = bind(op, args, kw, ctx.loc)
        if bound.get("dtype") is None and short not in ("arange", "full"):
            bound["dtype"] = torch.get_default_dtype()
        bound["device"] = canonical_device(bound.get("device") or torch.get_default_device())
        return emit_bound(ctx, op, bound)

    return handler


register_handlers([torch.zeros], _creation("zeros", "size"))
register_handlers([torch.ones], _creation("ones", "size"))
register_handlers([torch.empty], _creation("empty", "size"))
register_handlers([torch.full], _creation("full", "size"))
register_handlers([torch.arange], _creation("arange", None))


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


register_handlers([torch.zeros_like], _like("zeros_like"))
register_handlers([torch.ones_like], _like("ones_like"))
register_handlers([torch.full_like], _like("full_like"))
register_handlers([torch.empty_like], _like("zeros_like"))


def _new(short: str) -> Callable[..., Any] | None:
    h = _creation(short, "size")
    if h is None:
        return None

    def handler(ctx: Builder, self: Any, *args: Any, **kw: Any) -> Any:
        kw.setdefault("dtype", self.dtype)
        kw.setdefault("device", self.device)
        return h(ctx, *args, **kw)

    return handler


for _fn, _kind in ((T.new_zeros, "zeros"), (T.new_ones, "ones"), (T.new_empty, "empty"),
                   (T.new_full, "full")):
    register_handlers([_fn], _new(_kind))

# --------------------------------------------------------------------------- nn

register_handlers([F.linear], op_handler("linear"))
register_handlers([torch.matmul, T.matmul, T.__matmul__], op_handler("matmul"))
register_handlers([T.__rmatmul__], op_handler("matmul", swap=True))
register_handlers([torch.bmm, T.bmm], op_handler("bmm"))
register_handlers([torch.softmax, F.softmax, T.softmax, torch.special.softmax],
          op_handler("softmax"))
register_handlers([torch.log_softmax, F.log_softmax, T.log_softmax, torch.special.log_softmax],
          op_handler("log_softmax"))
register_handlers([torch._safe_softmax], op_handler("safe_softmax"))
register_handlers([F.layer_norm, torch.layer_norm], op_handler("layer_norm"))


def int_tuple(v: Any, n: int) -> tuple[int, ...] | None:
    """``v`` (an int or ``n`` ints) as ``n`` ints, or None for anything else."""
    vs = (v,) * n if isinstance(v, int) else tuple(v) if isinstance(v, Sequence) else ()
    ok = len(vs) == n and all(isinstance(x, int) and not isinstance(x, bool) for x in vs)
    return vs if ok else None


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
        return ctx.writes.assign(input, out._value, f"{op.name}_") if inplace else out

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
        register_handlers([_fn], _dropout_family(OPS[_name], False))
        register_handlers([_fn_], _dropout_family(OPS[_name], True))


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

    register_handlers([F.scaled_dot_product_attention], _sdpa)


def _narrow(ctx: Builder, x: Any, dim: int, start: Any, length: int) -> Any:
    """``narrow`` with a tensor ``start``: its value picks the slice, not the shape, which
    the meta kernel cannot know (it would read the value)."""
    if not isinstance(start, torch.Tensor) or not isinstance(length, int):
        raise UseFallback
    shape = list(x.shape)
    shape[dim % x.ndim] = length
    t = x._value.type
    # A view of x with x's strides; where it starts depends on start's value, which the
    # storage offset the trace answers cannot know (x's own is answered).
    lay = _same_layout(x)
    return fallback(ctx, T.narrow, (x, dim, start, length), {},
                    result_type=tensor_type(tuple(shape), t.dtype, t.dev),
                    result_view=(x, (lay["strides"], lay["offset"])))


register_handlers([torch.narrow, T.narrow], _narrow_ints)


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
    register_handlers([torch._grouped_mm], _grouped_mm)
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
        register_handlers([getattr(torch, _n)], _symbolic_number(getattr(torch, _n)))


# --------------------------------------------------------------------------- inlined Python

_INLINED = (F.batch_norm, F.group_norm, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d,
            F.alpha_dropout, F.feature_alpha_dropout, F.multi_head_attention_forward,
            F.triplet_margin_with_distance_loss, F.gaussian_nll_loss,
            *[f for f in (getattr(F, "linear_cross_entropy", None),) if f is not None])
"""torch functions written in Python that the tracer runs as they are, recording the torch
calls they make (their argument checks and warnings are eager's own), instead of recording
one opaque call of the whole function. A check on values among them (``gaussian_nll_loss``'s
``if torch.any(var < 0): raise``) is speculated: eager's branch, checked on every call
(`thunder_ir.frontend.speculation`)."""


for _fn in _INLINED:  # torch's own Python: eager autocasts each call it makes, and so do we
    register_handlers([_fn], traces_python(inline(_fn)))


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


register_handlers([torch.addmm, T.addmm], inline(_addmm))
register_handlers([torch.baddbmm, T.baddbmm], inline(_baddbmm))


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


register_handlers([F.pad, torch._C._nn.pad], inline(_constant_pad))


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


register_handlers([torch.gather, T.gather], _gather)


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


register_handlers([torch.index_select, T.index_select], _index_select)

_pow_h = op_handler("pow")
if _pow_h is not None:
    _pow: Callable[..., Any] = _pow_h

    def _square(ctx: Builder, input: Any, *, out: Any = None) -> Any:
        """``torch.square``: ``pow(input, 2)``, as torch defines it."""
        if out is not None:
            raise UseFallback
        return _pow(ctx, input, 2)

    register_handlers([torch.square, T.square], _square)


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
    if isinstance(data, list | tuple) and any(
            type(x) in (torch.SymInt, torch.SymFloat) for x in pytree.tree_leaves(data)):
        return _tensor_of_numbers(ctx, data, dtype, device)
    if not isinstance(data, list | tuple) or not all(
            type(x) in (bool, int, float) for x in pytree.tree_leaves(data)):
        raise UseFallback
    with torch._C.DisableTorchFunction():
        value = torch.tensor(data, dtype=dtype, device=device)
    # a fresh tensor on every call, as eager's (the constant itself is never handed out)
    return HANDLERS[torch.clone](ctx, ctx.lift_constant(value))


def _tensor_of_numbers(ctx: Builder, data: Any, dtype: torch.dtype | None,
                       device: Any) -> Any:
    """``torch.tensor(data)`` of (nested) lists holding symbolic numbers (a ``.tolist()``'s
    items, arithmetic on them): eager's dtype and shape (its rules and errors, asked of
    ``torch.tensor`` on numbers of the same Python types), each element a 0-d tensor of
    that number computed in the program, stacked."""
    from thunder_ir.dialects.torch import make_call, torch_name

    leaves, spec = pytree.tree_flatten(data)
    plain = [0 if type(x) is torch.SymInt else 0.0 if type(x) is torch.SymFloat else x
             for x in leaves]
    with torch._C.DisableTorchFunction():
        like = torch.tensor(pytree.tree_unflatten(plain, spec), dtype=dtype, device=device)
    dev = canonical_device(like.device)
    parts = []
    for x in leaves:
        if type(x) in (torch.SymInt, torch.SymFloat):
            op = make_call(torch_name(torch.scalar_tensor), [ctx.value_of(x)],
                           [OperandRef(0)], {"dtype": like.dtype, "device": like.device},
                           result_types=[tensor_type((), like.dtype, dev)], pure=True)
            parts.append(ctx.wrap(ctx.record(op)[0]))
        else:
            parts.append(HANDLERS[torch.full](ctx, (), x, dtype=like.dtype,
                                              device=like.device))
    shape = tuple(like.shape)
    return ctx.run_python(lambda *ts: torch.stack(ts).reshape(shape), tuple(parts), {})


register_handlers([torch.tensor], _tensor)


# Ops reached through the custom handlers above (torch.max dispatches on its arguments).
MAPPED.update({"to_dtype", "getitem", "max", "min", "max_dim", "min_dim", "topk",
               "full_like", "zeros", "ones", "empty", "full", "arange", "zeros_like",
               "ones_like"} & set(OPS))


def unmapped_ops() -> list[str]:
    """ltorch ops that no torch callable maps to (for a coverage test)."""
    return sorted(f"ltorch.{n}" for n in OPS if n not in MAPPED)
