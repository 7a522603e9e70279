"""The fallback: a torch call without an ``ltorch`` op becomes an opaque ``torch.call``.

`fallback` is the handler of every torch callable the table does not name (and of calls a
handler gives up on with `UseFallback`). The result types, the result structure and which
results require grad come from running the function on meta tensors; the callee is named by
`thunder_ir.dialects.torch.torch_name`. It writes through the `Builder` interface, like
every handler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Attribute, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef, to_attr
from thunder_ir.dialects.modes import neutral
from thunder_ir.dialects.torch import (
    PURE_CALLEES,
    UnnamedCallableError,
    make_call,
    meta_call,
    meta_value,
    runtime_callee,
    torch_name,
)
from thunder_ir.dialects.types import TensorType, tensor_type
from thunder_ir.frontend.builder import Builder, differentiable
from thunder_ir.frontend.errors import (
    DATA_HINT,
    DataDependentError,
    NeedsSymbols,
    ThunderTraceError,
    dtype_name,
    speculating_sizes,
    where,
)
from thunder_ir.frontend.layout import call_layouts, meta_stand_in
from thunder_ir.frontend.meta_rules import RULES as META_RULES
from thunder_ir.frontend.number_tensors import as_sizes
from thunder_ir.frontend.numpy_values import NDARRAY, array_argument
from thunder_ir.frontend.program_build import unbacked_float
from thunder_ir.frontend.proxy import is_proxy, root_proxy
from thunder_ir.frontend.python_calls import NOT_PLAIN, plain_call

_NOT_FUNCTIONAL = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "bernoulli_"})
"""In-place methods whose same-named out-of-place function means something else."""


def _ctc_loss_shape(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
                    blank: int = 0, reduction: Any = "mean", zero_infinity: bool = False
                    ) -> tuple[tuple[int, ...], torch.dtype]:
    """``F.ctc_loss`` / ``torch.ctc_loss``: one loss per batch entry, or their reduction
    (``reduction`` a name, or torch's enum: 0 none, 1 mean, 2 sum)."""
    batched = log_probs.dim() == 3
    none = reduction in ("none", 0)
    return ((log_probs.shape[1],) if batched else ()) if none else (), log_probs.dtype


SHAPE_RULES: dict[str, Callable[..., tuple[tuple[int, ...], torch.dtype]]] = {
    "torch.nn.functional.ctc_loss": _ctc_loss_shape,
    "torch.ctc_loss": _ctc_loss_shape,
}
"""Result shape and dtype of torch functions without a meta kernel whose result's shape is
known from their arguments (the result is on the first argument's device). Called with
the call's arguments; the function itself runs, and is differentiated, by torch. A
function whose meta run fails on a check of values (``torch.cov``) or a count
(``torch.combinations``) has a meta rule instead (`thunder_ir.frontend.meta_rules`)."""


def fallback(ctx: Builder, func: Any, args: Sequence[Any], kwargs: dict[str, Any],
             result_type: Attribute | None = None,
             result_view: tuple[Any, tuple[tuple[int, ...], int]] | None = None) -> Any:
    """Records an unknown torch function as an opaque ``torch.call``.

    Result types, the result structure (a named tuple, ``None`` entries), their layouts and
    which results require grad come from running the function on meta tensors; a caller
    that knows the one result's type (a meta kernel that would read a tensor's value)
    passes it, and where that result is a view, ``result_view``: the proxy it views and
    its layout."""
    try:
        name = torch_name(func)
    except UnnamedCallableError as e:
        raise ThunderTraceError(str(e)) from None
    if (name.endswith("_") and not name.endswith("__") and args and is_proxy(args[0])
            and name.startswith(("torch.Tensor.", "torch."))):
        owner, _, short = name.rpartition(".")
        functional = None if short in _NOT_FUNCTIONAL else \
            getattr(torch.Tensor if owner == "torch.Tensor" else torch, short[:-1], None)
        if functional is not None:
            out = fallback(ctx, functional, args, kwargs)
        else:  # uniform_, normal_, zero_...: applied to a copy, drawn as eagerly
            out = fallback(ctx, _inplace_on_copy(), (name, *args), kwargs)
        return ctx.writes.assign(args[0], out._value, name)
    if result_type is None:  # Python values in, no tensor out: run as eager runs it
        plain = plain_call(func, args, kwargs)
        if plain is not NOT_PLAIN:
            return plain
    operands: list[SSAValue] = []
    passed: list[Any] = []  # the tensor (proxy) passed for each operand
    index: dict[int, int] = {}

    def encode(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            v = ctx.value_of(x)
            k = index.get(id(v))
            if k is None:
                k = index[id(v)] = len(operands)
                operands.append(v)
                passed.append(x)
            return OperandRef(k)
        if isinstance(x, list | tuple | torch.Size):
            return tuple(encode(e) for e in as_sizes(x, mixed=True))
        if unbacked_float(x):  # a float .item(): the program's value (never text)
            operands.append(ctx.value_of(x))
            passed.append(x)
            return OperandRef(len(operands) - 1)
        if NDARRAY is not None and isinstance(x, NDARRAY):
            raise array_argument(where(ctx.loc), name, x)
        try:
            to_attr(x)
        except TypeError:
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name} got an argument thunder_ir cannot record: "
                f"{type(x).__name__} {x!r}") from None
        return x

    enc_args = [encode(a) for a in args]
    enc_kwargs = {k: encode(v) for k, v in kwargs.items()}
    grad_mask = None  # eager's requires_grad per result needs stand-ins that require grad
    if ctx.active:
        grad_mask = [v in ctx.active and differentiable(v) for v in operands]
        if not any(grad_mask):
            grad_mask = None
    rule = SHAPE_RULES.get(name) if result_type is None else None
    if rule is not None:
        shape, dtype = rule(*args, **kwargs)
        first = operands[0].type
        assert isinstance(first, TensorType)
        result_type = tensor_type(shape, dtype, first.dev)
    if result_type is not None:
        op = make_call(name, operands, enc_args, enc_kwargs, result_types=[result_type])
        if result_view is not None:
            ctx.note_layout(op.results[0], result_view[1])
        r = ctx.record(op, view=result_view is not None)[0]
        if result_view is not None:
            ctx.note_view(r, operands[0], op, 0)
            ctx.read_layout(operands[0])
        return ctx.wrap(r, None if result_view is None else root_proxy(result_view[0]))
    layouts = [ctx.layout_of(v) if isinstance(v.type, TensorType) else None
               for v in operands]
    try:
        with neutral():  # stand-ins made under inference_mode would be inference tensors
            meta = meta_call(META_RULES.get(name, name), operands, enc_args, enc_kwargs,
                             grad_mask, lambda: [
                                 meta_stand_in(v.type, lay) if lay is not None
                                 else meta_value(v.type)
                                 for v, lay in zip(operands, layouts, strict=True)], layouts)
    except ThunderTraceError:
        raise
    except Exception as e:
        if "out" in kwargs and "cast" in str(e):
            _raise_out_cast(ctx, name, operands, enc_args, enc_kwargs, kwargs["out"])
        if _is_data_dependent(e):
            if symbols.current() is None and not speculating_sizes():
                raise NeedsSymbols(
                    f"{where(ctx.loc)}: {name} has a data-dependent size") from None
            raise DataDependentError(
                f"{where(ctx.loc)}: {name} needs a traced tensor's values (to size its result "
                f"or to check its inputs), but {DATA_HINT}") from None
        if "no fake impl or Meta kernel" in str(e):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name} cannot be traced: torch has no meta kernel for it "
                "(its result's shape is unknown without running it, often because it depends "
                "on the values). Run it outside the jitted function and pass its result in."
            ) from None
        raise ThunderTraceError(f"{where(ctx.loc)}: {name} failed on traced inputs "
                                f"(meta run): {e}") from None
    if meta.mutated:
        if "out" in kwargs:
            _check_out_shapes(ctx, name, kwargs["out"], meta.result_types)
        result = _call_on_copies(ctx, name, operands, passed, enc_args, enc_kwargs, meta,
                                 grad_mask is not None)
        out = kwargs.get("out")
        if is_proxy(out):  # eager returns the out= tensor itself
            return out
        if isinstance(out, tuple | list) and out and all(is_proxy(o) for o in out):
            return meta.rebuild(list(out))
        return result
    op = make_call(name, operands, enc_args, enc_kwargs, result_types=meta.result_types,
                   layout=meta.layout, nograd=meta.nograd,
                   pure=name in PURE_CALLEES and all(i is None for i in meta.views))
    tensors = [r for r in op.results if isinstance(r.type, TensorType)]
    views = [i for r, i in zip(op.results, meta.views, strict=True)
             if isinstance(r.type, TensorType)]
    metas = [lay for r, lay in zip(op.results, meta.strides, strict=True)
             if isinstance(r.type, TensorType)]
    for r, lay in zip(tensors, call_layouts(op, layouts, metas, views), strict=True):
        ctx.note_layout(r, lay)
    results = ctx.record(op, meta.requires_grad if grad_mask is not None else None,
                         view=any(i is not None for i in meta.views))
    for k, (r, i) in enumerate(zip(results, meta.views, strict=True)):
        if i is not None:  # (an opaque view: whether eager can make it may be by layout)
            ctx.note_view(r, operands[i], op, k)
            ctx.read_layout(operands[i])
    return meta.rebuild([ctx.wrap(r, None if i is None else root_proxy(passed[i]))
                         for r, i in zip(results, meta.views, strict=True)])


def _out_tensors(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple | list) else [out]


def _check_out_shapes(ctx: Builder, name: str, out: Any,
                      result_types: Sequence[Attribute]) -> None:
    """Eager resizes an ``out=`` tensor of another shape (the caller's tensor changes
    shape); thunder_ir keeps its arguments' shapes, so it says so instead."""
    for o, t in zip(_out_tensors(out), result_types):
        if is_proxy(o) and isinstance(t, TensorType) and tuple(o.shape) != tuple(t.sizes):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name}(..., out=) would resize the out= tensor from "
                f"{list(o.shape)} to {list(t.sizes)}, which thunder_ir does not do to a "
                "traced tensor. Pass an out= tensor of the result's shape, or use the result "
                "instead of out=.")


def _raise_out_cast(ctx: Builder, name: str, operands: list[SSAValue], args: list[Any],
                    kwargs: dict[str, Any], out: Any) -> None:
    """Eager's error for a result that cannot be cast to the ``out=`` tensor's dtype."""
    try:
        meta = meta_call(name, operands, args, {k: v for k, v in kwargs.items() if k != "out"})
    except Exception:
        return
    for o, t in zip(_out_tensors(out), meta.result_types):
        if (isinstance(o, torch.Tensor) and isinstance(t, TensorType)
                and not torch.can_cast(t.dtype, o.dtype)):
            raise RuntimeError(f"result type {dtype_name(t.dtype)} can't be cast to the "
                               f"desired output type {dtype_name(o.dtype)}\n"
                               f"  at {where(ctx.loc)}")


CALL_ON_COPIES = runtime_callee("call_on_copies")


def _call_on_copies(ctx: Builder, name: str, operands: list[SSAValue], passed: list[Any],
                    args: list[Any], kwargs: dict[str, Any], meta: Any, tracked: bool) -> Any:
    """A call that writes into operands (``out=``, running statistics), functionalized: it
    runs on copies of them (`call_on_copies`), and each written tensor then stands for its
    copy, as after an in-place op (written back to inputs and buffers after the call)."""
    from thunder_ir.runtime.autograd_fallback import COPIED, encode_refs

    n = len(meta.result_types)
    op = make_call(
        CALL_ON_COPIES, operands, [name, *(OperandRef(i) for i in range(len(operands)))],
        {"args": encode_refs(tuple(args), COPIED),
         "kwargs": tuple((k, encode_refs(v, COPIED)) for k, v in kwargs.items()),
         "mutated": meta.mutated, "layout": meta.layout if meta.layout is not None else None},
        result_types=[*meta.result_types, *(operands[i].type for i in meta.mutated)],
        layout=True, nograd=meta.nograd)
    rg = [*meta.requires_grad, *(False for _ in meta.mutated)] if tracked else None
    for r, lay in zip(op.results[:n], meta.strides, strict=True):
        if isinstance(r.type, TensorType):
            ctx.note_layout(r, lay)
    for r, i in zip(op.results[n:], meta.mutated, strict=True):  # the copies: as written
        ctx.note_layout(r, ctx.layout_of(operands[i]))
    results = ctx.record(op, rg)
    for i, copy in zip(meta.mutated, results[n:], strict=True):
        ctx.writes.assign(passed[i], copy, name)
    return meta.rebuild([ctx.wrap(r) for r in results[:n]])


def _inplace_on_copy() -> Any:
    from thunder_ir.runtime.autograd_fallback import inplace_on_copy

    return inplace_on_copy


def _is_data_dependent(e: Exception) -> bool:
    """A meta run failed because the result's shape needs a tensor's values."""
    msg = str(e)
    return any(m in msg for m in ("data-dependent", "data dependent", "without output_size",
                                  "cannot be called on meta tensors"))


# --------------------------------------------------------------------------- entry point


__all__ = ["CALL_ON_COPIES", "fallback"]
