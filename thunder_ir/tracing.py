"""Tracing: run the user's Python natively with proxies and record every torch call.

`trace_program` flattens the inputs (pytree), makes a proxy per tensor (and per parameter
and buffer of a module, swapped in with ``torch.func.functional_call``), runs the code
under `TraceMode`, and returns a `TracedProgram`: the ``ltorch`` program plus what the
runtime needs to call it (input and output layout, write-backs, RNG).

Under `TraceMode` each torch function, tensor method and operator goes to a handler:

* a known op (see `thunder_ir.torch_map`) becomes its ``ltorch`` op;
* an unknown one becomes an opaque ``torch.call`` whose result types come from torch's meta
  kernels, so models with ops we lack still run;
* metadata reads (``.shape``, ``.dtype``, ``.size()``…) answer directly;
* reads of data (``.item()``, ``bool(t)``…) raise `DataDependentError` naming the user's
  file:line and what to do instead.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, SSAValue

from thunder_ir.dialects.base import OperandRef, ShapeError, ThunderOp, to_attr
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import make_call
from thunder_ir.dialects.types import NumberType, TensorType, number_type, type_of_tensor
from thunder_ir.proxy import TensorProxy, is_proxy

# --------------------------------------------------------------------------- errors


class ThunderTraceError(RuntimeError):
    """A program could not be traced. The message names the user's file:line."""


class DataDependentError(ThunderTraceError):
    """User code needs a tensor's value, which is unknown while tracing."""


_OUR_DIRS = tuple(os.path.dirname(os.path.dirname(os.path.abspath(m))) + os.sep
                  for m in (__file__,))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_SKIP_DIRS = (*_OUR_DIRS, _TORCH_DIR)
_SKIP_CACHE: dict[str, bool] = {}


def _skip(filename: str) -> bool:
    s = _SKIP_CACHE.get(filename)
    if s is None:
        path = os.path.abspath(filename)
        s = path.startswith(_SKIP_DIRS) and "/tests/" not in path[len(_OUR_DIRS[0]) - 1:] \
            and "/examples/" not in path[len(_OUR_DIRS[0]) - 1:] \
            and "/benchmarks/" not in path[len(_OUR_DIRS[0]) - 1:]
        if path.startswith(_TORCH_DIR):
            s = True
        if "<frozen" in filename or filename.startswith("<thunder"):
            s = True
        _SKIP_CACHE[filename] = s
    return s


def user_location() -> str:
    """``file.py:line`` of the innermost frame in user code (outside torch and thunder_ir)."""
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not _skip(code.co_filename):
            return f"{code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>:0"


def _short(loc: str) -> str:
    path, _, line = loc.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


# --------------------------------------------------------------------------- program state


@dataclass
class TracedProgram:
    """A traced ``ltorch`` program and how to call it.

    Attributes:
        module: the IR (one ``func.func`` named ``computation``).
        input_kinds: per program argument, where its value comes from at call time:
            ``("arg", i)`` flat user-argument leaf i, ``("param", name)`` a module parameter
            or buffer, ``("const", tensor)`` a tensor captured from user code, ``("seed",)``
            the RNG seed.
        output_spec: pytree spec of the user's output.
        output_leaves: per output leaf, ``("out", k)`` program output k or ``("value", v)``.
        writebacks: ``(program output index, input kind)`` for inputs written in place.
    """

    module: ModuleOp
    input_kinds: list[tuple[Any, ...]]
    output_spec: Any
    output_leaves: list[tuple[str, Any]]
    writebacks: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list)
    uses_rng: bool = False
    input_requires_grad: list[bool] = field(default_factory=list)


class TraceContext:
    """The program under construction while user code runs."""

    def __init__(self) -> None:
        self.program = Program("computation", [])
        self.emitter = self.program.emitter
        self.input_kinds: list[tuple[Any, ...]] = []
        self.input_requires_grad: list[bool] = []
        self.input_proxies: list[tuple[TensorProxy, SSAValue, tuple[Any, ...]]] = []
        self._consts: dict[int, TensorProxy] = {}
        self._numbers: dict[tuple[type, Any], SSAValue] = {}
        self._seed: SSAValue | None = None
        self.rng_offset = 0
        self._names: set[str] = set()
        self.loc: str = ""

    # ---- inputs

    def _unique(self, name: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "t"
        if base[0].isdigit():
            base = "t_" + base
        n, i = base, 1
        while n in self._names:
            n, i = f"{base}_{i}", i + 1
        self._names.add(n)
        return n

    def add_input(self, t: Attribute, name: str, kind: tuple[Any, ...]) -> SSAValue:
        """Appends a program argument."""
        block = self.program.block
        v = block.insert_arg(t, len(block.args))
        v.name_hint = self._unique(name)
        self.input_kinds.append(kind)
        self.input_requires_grad.append(False)
        return v

    def tensor_input(self, tensor: torch.Tensor, name: str, kind: tuple[Any, ...]
                     ) -> TensorProxy:
        """A proxy for a tensor the program takes as an argument."""
        v = self.add_input(type_of_tensor(tensor), name, kind)
        self.input_requires_grad[-1] = tensor.requires_grad and torch.is_grad_enabled()
        p = TensorProxy(v, requires_grad=tensor.requires_grad)
        self.input_proxies.append((p, v, kind))
        return p

    def lift_constant(self, tensor: torch.Tensor) -> TensorProxy:
        """A real tensor met during tracing becomes a program argument fed at call time."""
        p = self._consts.get(id(tensor))
        if p is None:
            p = self.tensor_input(tensor, "c", ("const", tensor))
            self._consts[id(tensor)] = p
        return p

    def seed(self) -> SSAValue:
        """The RNG seed argument (added on first use)."""
        if self._seed is None:
            self._seed = self.add_input(number_type(int), "seed", ("seed",))
        return self._seed

    def next_rng_offset(self) -> SSAValue:
        off = self.rng_offset
        self.rng_offset += 1
        return self.number(off)

    # ---- values

    def number(self, value: Any) -> SSAValue:
        """A Python number as an SSA value (one ``prims.constant`` per distinct value)."""
        key = (type(value), value)
        v = self._numbers.get(key)
        if v is None:
            v = self.emitter.emit(ConstantOp, value=value)
            self._numbers[key] = v
        return v

    def value_of(self, x: Any) -> SSAValue:
        """The SSA value of a proxy, a real tensor (lifted) or a Python number."""
        if is_proxy(x):
            return x._value
        if isinstance(x, torch.Tensor):
            return self.lift_constant(x)._value
        if type(x) in (bool, int, float):
            return self.number(x)
        raise ThunderTraceError(f"{_short(self.loc)}: cannot use {type(x).__name__} "
                                f"{x!r} as a tensor operand")

    def emit(self, op: type[ThunderOp], *operands: Any, **params: Any) -> Any:
        """Builds ``op`` at the current user location; shape errors name the location."""
        self.emitter.loc = StringAttr(self.loc) if self.loc else None
        try:
            return self.emitter.emit(op, *operands, **params)
        except ShapeError as e:
            raise ThunderTraceError(f"{_short(self.loc)}: {e}") from None

    def wrap(self, value: Any, base: TensorProxy | None = None) -> Any:
        """Proxies for op results (a list for several)."""
        if isinstance(value, list):
            return [self.wrap(v, base) for v in value]
        if isinstance(value.type, NumberType):
            raise ThunderTraceError(f"{_short(self.loc)}: traced numbers are not supported")
        p = TensorProxy(value, base=base)
        if base is not None:
            base._has_views = True
        return p

    def assign(self, target: Any, new: SSAValue, opname: str) -> TensorProxy:
        """Functionalizes an in-place op: ``target`` now stands for ``new``."""
        if not is_proxy(target):
            raise ThunderTraceError(f"{_short(self.loc)}: in-place {opname} on a tensor that is "
                                    "not traced; pass it as an argument instead")
        if target._base_proxy is not None or target._has_views:
            raise ThunderTraceError(
                f"{_short(self.loc)}: in-place {opname} on a tensor that shares memory with a "
                "view is not supported by thunder_ir (the write would have to reach the "
                "other aliases). Use the out-of-place form, e.g. `y = x.add(1)`, or .clone() "
                "the view first.")
        tt, nt = target._value.type, new.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if nt.sizes != tt.sizes:
            raise ThunderTraceError(f"{_short(self.loc)}: in-place {opname} would change the "
                                    f"shape {list(tt.sizes)} to {list(nt.sizes)}")
        if nt.dtype != tt.dtype:
            from thunder_ir.dialects.ltorch import OPS

            new = self.emit(OPS["to_dtype"], new, dtype=tt.dtype)
        target._value = new
        return target


_CURRENT: list[TraceContext] = []


def current() -> TraceContext:
    """The trace being recorded."""
    return _CURRENT[-1]


# --------------------------------------------------------------------------- the mode

Handler = Callable[..., Any]
HANDLERS: dict[Any, Handler] = {}
TRACING_CONTEXTS: list[Callable[[], Any]] = []
"""Factories of context managers entered around user code while it is traced (and only
then): e.g. the extension API's diversion of ``replaces=`` functions."""
"""torch callable -> handler(ctx, *args, **kwargs). Filled by `thunder_ir.torch_map`."""

_T = torch.Tensor


def getter(name: str) -> Any:
    """The ``__get__`` of a Tensor property, as torch function handlers receive it."""
    return getattr(_T, name).__get__


_COMPUTED_GETTERS = {getter(n) for n in ("T", "mT", "H", "mH", "real", "imag", "data")}
METADATA: set[Any] = {
    _T.size, _T.dim, _T.numel, _T.nelement, _T.ndimension, _T.__len__, _T.is_floating_point,
    _T.is_complex, _T.element_size, _T.get_device, _T.is_contiguous, _T.stride,
    _T.is_signed, _T.storage_offset, _T.is_inference,
}
DATA_DEPENDENT: dict[Any, str] = {
    _T.__bool__: "bool(tensor)", _T.item: ".item()", _T.tolist: ".tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)",
    _T.__index__: "using a tensor as an index",
    _T.numpy: ".numpy()", _T.nonzero: ".nonzero()", torch.nonzero: "torch.nonzero",
    torch.masked_select: "torch.masked_select", _T.masked_select: ".masked_select()",
    torch.unique: "torch.unique", _T.unique: ".unique()", _T.data_ptr: ".data_ptr()",
    torch.argwhere: "torch.argwhere", _T.__array__: "numpy conversion",
    _T.__complex__: "complex(tensor)", torch.is_nonzero: "torch.is_nonzero",
    _T.equal: ".equal()",
    torch.equal: "torch.equal", _T.allclose: ".allclose()", torch.allclose: "torch.allclose",
}

_DATA_HINT = ("its value is not known while tracing. Keep the computation in tensors (for "
              "example torch.where instead of `if`), or compute it outside the jitted function "
              "and pass the result in as an argument.")


def _repr(self: Any, *a: Any, **k: Any) -> str:
    return self.describe() if is_proxy(self) else object.__repr__(self)


class TraceMode(TorchFunctionMode):
    """Routes every torch call made while tracing to its handler."""

    def __init__(self, ctx: TraceContext) -> None:
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        h = HANDLERS.get(func)
        ctx = self.ctx
        if h is not None:
            ctx.loc = user_location()
            return h(ctx, *args, **kwargs)
        if func in METADATA or (getattr(func, "__name__", "") == "__get__"
                                and func not in _COMPUTED_GETTERS):
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if func in (_T.__repr__, _T.__str__, _T.__format__):
            return _repr(*args)
        ctx.loc = user_location()
        what = DATA_DEPENDENT.get(func)
        if what is not None:
            raise DataDependentError(
                f"{_short(ctx.loc)}: {what} needs a traced tensor's value, but {_DATA_HINT}\n"
                f"  at {ctx.loc}")
        return fallback(ctx, func, args, kwargs)


# --------------------------------------------------------------------------- fallback

_TORCH_NAMES: dict[int, str] = {}


def torch_name(func: Any) -> str:
    """The import path of a torch callable (``torch.nn.functional.linear``)."""
    if not _TORCH_NAMES:
        for mod_name, namespace in (("torch.nn.functional", torch.nn.functional),
                                    ("torch.special", torch.special), ("torch.fft", torch.fft),
                                    ("torch.linalg", torch.linalg), ("torch", torch)):
            for k in dir(namespace):
                if k.startswith("__"):
                    continue
                try:
                    obj = getattr(namespace, k)
                except Exception:
                    continue
                if callable(obj):
                    _TORCH_NAMES.setdefault(id(obj), f"{mod_name}.{k}")
        for k in dir(torch.Tensor):
            obj = getattr(torch.Tensor, k, None)
            if callable(obj):
                _TORCH_NAMES.setdefault(id(obj), f"torch.Tensor.{k}")
        import operator

        _TORCH_NAMES[id(operator.getitem)] = "operator.getitem"  # not `_operator.getitem`
    name = _TORCH_NAMES.get(id(func))
    if name is None:
        mod = getattr(func, "__module__", None)
        qual: Any = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
        if not mod or not qual or "<" in qual:
            raise ThunderTraceError(f"cannot name torch function {func!r}")
        name = f"{mod}.{qual}"
        _TORCH_NAMES[id(func)] = name
    return name


def fallback(ctx: TraceContext, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
             ) -> Any:
    """Records an unknown torch function as an opaque ``torch.call``."""
    name = torch_name(func)
    if name.startswith("torch.Tensor.") and name.endswith("_") and not name.endswith("__"):
        functional = getattr(torch.Tensor, name[len("torch.Tensor."):-1], None)
        if functional is None:
            raise ThunderTraceError(f"{_short(ctx.loc)}: in-place {name} has no out-of-place "
                                    "form that thunder_ir can functionalize")
        out = fallback(ctx, functional, args, kwargs)
        return ctx.assign(args[0], out._value, name)
    operands: list[SSAValue] = []
    index: dict[int, int] = {}

    def encode(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            v = ctx.value_of(x)
            k = index.get(id(v))
            if k is None:
                k = index[id(v)] = len(operands)
                operands.append(v)
            return OperandRef(k)
        if isinstance(x, list | tuple | torch.Size):
            return tuple(encode(e) for e in x)
        try:
            to_attr(x)
        except TypeError:
            raise ThunderTraceError(
                f"{_short(ctx.loc)}: {name} got an argument thunder_ir cannot record: "
                f"{type(x).__name__} {x!r}") from None
        return x

    enc_args = [encode(a) for a in args]
    enc_kwargs = {k: encode(v) for k, v in kwargs.items()}
    try:
        op = make_call(name, operands, enc_args, enc_kwargs)
    except ThunderTraceError:
        raise
    except Exception as e:
        raise ThunderTraceError(f"{_short(ctx.loc)}: {name} failed on traced inputs "
                                f"(meta run): {e}") from None
    if ctx.loc:
        op.attributes["loc"] = StringAttr(ctx.loc)
    ctx.program.block.add_op(op)
    results = [ctx.wrap(r) for r in op.results]
    if len(results) == 1 and "multi" not in op.properties:
        return results[0]
    return tuple(results)


# --------------------------------------------------------------------------- entry point


def _arg_names(fn: Callable[..., Any], n_args: int, kwargs: dict[str, Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_POSITIONAL),
                   "args")
    except (TypeError, ValueError):
        names, var = [], "args"
    out = [names[i] if i < len(names) else f"{var}{i - len(names)}" for i in range(n_args)]
    return out + list(kwargs)


def trace_program(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                  module: torch.nn.Module | None = None,
                  state: dict[str, torch.Tensor] | None = None) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (or ``module``'s forward with ``state``) into IR."""
    import thunder_ir.torch_map  # noqa: F401  (fills HANDLERS)

    if torch._C._is_any_autocast_enabled():
        raise ThunderTraceError(
            "thunder_ir does not trace under torch.autocast yet: its casting rules are not "
            "applied to traced ops, so results would differ from eager. Call the jitted "
            "function outside autocast, or cast the model and inputs (e.g. model.bfloat16()).")
    ctx = TraceContext()
    names = _arg_names(module.forward if module is not None else fn, len(args), kwargs)
    top = [*args, *kwargs.values()]
    proxied_top = []
    leaf_index = 0
    for name, value in zip(names, top):
        leaves, spec = pytree.tree_flatten(value)
        new_leaves = []
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                nm = name if len(leaves) == 1 else f"{name}_{j}"
                new_leaves.append(ctx.tensor_input(leaf, nm, ("arg", leaf_index)))
            else:
                new_leaves.append(leaf)
            leaf_index += 1
        proxied_top.append(pytree.tree_unflatten(new_leaves, spec))
    p_args = proxied_top[:len(args)]
    p_kwargs = dict(zip(kwargs, proxied_top[len(args):]))
    p_state: dict[str, torch.Tensor] = {
        k: ctx.tensor_input(v, "t_" + k.replace(".", "_"), ("param", k))
        for k, v in (state or {}).items()}
    _CURRENT.append(ctx)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # IR is a web of reference cycles: full collections grow with the program
    try:
        with contextlib.ExitStack() as stack:
            for factory in TRACING_CONTEXTS:
                stack.enter_context(factory())
            stack.enter_context(TraceMode(ctx))
            if module is not None:
                out = torch.func.functional_call(module, p_state, tuple(p_args), p_kwargs,
                                                 tie_weights=True, strict=False)
            else:
                out = fn(*p_args, **p_kwargs)
    finally:
        _CURRENT.pop()
        if gc_was_enabled:
            gc.enable()
    leaves, out_spec = pytree.tree_flatten(out)
    outputs: list[SSAValue] = []
    out_leaves: list[tuple[str, Any]] = []
    for leaf in leaves:
        if is_proxy(leaf):
            out_leaves.append(("out", len(outputs)))
            outputs.append(leaf._value)
        elif isinstance(leaf, torch.Tensor):
            raise ThunderTraceError("the function returned a tensor that does not depend on "
                                    "its inputs; thunder_ir cannot return captured tensors yet")
        else:
            out_leaves.append(("value", leaf))
    writebacks = []
    for p, original, kind in ctx.input_proxies:
        if p._value is not original and kind[0] in ("arg", "param"):
            writebacks.append((len(outputs), kind))
            outputs.append(p._value)
    return TracedProgram(ctx.program.finish(outputs), ctx.input_kinds, out_spec, out_leaves,
                         writebacks, ctx._seed is not None, ctx.input_requires_grad)


__all__ = ["DataDependentError", "HANDLERS", "TraceContext", "TraceMode", "TracedProgram",
           "ThunderTraceError", "current", "fallback", "trace_program", "user_location",
           "TensorType"]
