"""Which torch callables of the nn family become which ``ltorch`` ops while tracing:
convolution, pooling, batch norm and the losses, with the checks eager makes before its
kernels (`thunder_ir.frontend.torch_map` has the rest of the table, and its conventions);
and the ``inplace=True`` forms of the activations that have no op
(``nn.ReLU6(inplace=True)``...), as their functional call assigned in place.

Importing this module fills `thunder_ir.frontend.table.HANDLERS`
(`thunder_ir.frontend.tracer` imports it).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from thunder_ir.dialects.ltorch_nn import legacy_reduction
from thunder_ir.dialects.symbols import proved_equal
from thunder_ir.frontend.builder import Builder
from thunder_ir.frontend.errors import ThunderTraceError, UseFallback, where
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.proxy import is_proxy
from thunder_ir.frontend.table import register_handlers
from thunder_ir.frontend.torch_map import int_tuple as _int_tuple
from thunder_ir.frontend.torch_map import op_handler

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


register_handlers([F.conv1d], _conv(1))
register_handlers([F.conv2d], _conv(2))
register_handlers([F.conv3d], _conv(3))

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


register_handlers([F.max_pool2d, torch.max_pool2d], _max_pool2d)
register_handlers([F.max_pool2d_with_indices], _max_pool2d_with_indices)


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


register_handlers([F.adaptive_avg_pool2d, torch._C._nn.adaptive_avg_pool2d], _adaptive_avg_pool(2))
register_handlers([torch.adaptive_avg_pool1d], _adaptive_avg_pool(1))

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
    if input.numel() == 0:  # eager's own path for an empty batch: no statistics to take
        return ctx.run_python(_empty_batch_norm, (input, weight, bias), {})
    results = _batch_norm_op(ctx, input, weight, bias, running_mean,  # type: ignore[misc]
                             running_var, training=bool(training), momentum=float(momentum),
                             eps=float(eps))
    if training and stats:  # eager's backward saves the running statistics themselves
        ctx.writes.assign(running_mean, results[3]._value, "batch_norm", keep_saved=True)
        ctx.writes.assign(running_var, results[4]._value, "batch_norm", keep_saved=True)
    return results[0]


def _empty_batch_norm(input: Any, weight: Any, bias: Any) -> Any:
    """What ``torch.batch_norm`` computes for an input without elements (ATen's
    ``_batch_norm_impl_index``): a copy of it scaled by ``weight[0]``, shifted by
    ``bias[0]`` (so that the weight and bias get zero gradients), running statistics left
    as they are."""
    out = input.clone()
    if weight is not None:
        out = out * weight[0]
    if bias is not None:
        out = out + bias[0]
    return out


register_handlers([torch.batch_norm], _batch_norm)

_group_norm_op = op_handler("native_group_norm")


def _group_norm(ctx: Builder, input: Any, num_groups: Any, weight: Any = None, bias: Any = None,
                eps: Any = 1e-5, cudnn_enabled: Any = True) -> Any:
    """``torch.group_norm`` (what ``F.group_norm`` calls after its checks, which run as they
    are): ``ltorch.native_group_norm`` on non-empty float32/float64 tensors of static
    sizes whose channels split into the groups; anything else (eager's errors included)
    takes the fallback."""
    params = [t for t in (weight, bias) if t is not None]
    if not is_proxy(input) or input.dtype not in (torch.float32, torch.float64) \
            or input.dim() < 2 or type(num_groups) is not int or num_groups <= 0 \
            or not all(type(n) is int for n in input.shape) or input.numel() == 0 \
            or input.shape[1] % num_groups or not isinstance(eps, int | float) \
            or any(not isinstance(t, torch.Tensor) or t.dtype != input.dtype
                   or t.shape != input.shape[1:2] for t in params):
        raise UseFallback
    n, c = input.shape[0], input.shape[1]
    results = _group_norm_op(ctx, input, weight, bias, N=n, C=c,  # type: ignore[misc]
                             HxW=math.prod(input.shape[2:]), group=num_groups,
                             eps=float(eps))
    return results[0]


register_handlers([torch.group_norm], _group_norm)
register_handlers([F.rms_norm, torch.rms_norm], op_handler("rms_norm"))
register_handlers([F.embedding], op_handler("embedding"))


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


register_handlers([F.cross_entropy], _cross_entropy)
register_handlers([F.nll_loss], _nll_loss)
register_handlers([F.mse_loss], op_handler("mse_loss"))


def _inplace_activation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(x, ..., inplace=True)`` for an activation without an ltorch op: its functional
    call (opaque) and ``x`` standing for the result, as `Builder.writes.assign` makes any in-place
    write (eager's errors for a leaf, a view of one, a value saved for a backward). The
    meta run of the in-place call itself would refuse any tensor that requires grad, its
    stand-ins being leaves. Eager's in-place ``leaky_relu_``, ``rrelu_``, ``elu_``, ``selu_``
    and ``celu_`` save their result for the backward, so a later write to ``x`` makes that
    backward raise: so does the call's (``keep_saved``)."""
    sig = inspect.signature(fn)
    keep_saved = fn in (F.leaky_relu, F.rrelu, F.elu, F.selu, F.celu)

    def handler(ctx: Builder, *args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        x = bound.arguments.get("input")
        if not bound.arguments.get("inplace") or not is_proxy(x):
            raise UseFallback
        bound.arguments["inplace"] = False
        out = fallback(ctx, fn, bound.args, bound.kwargs)
        return ctx.writes.assign(x, out._value, f"{fn.__name__}(inplace=True)", keep_saved)

    return handler


for _fn in (F.hardtanh, F.relu6, F.leaky_relu, F.rrelu, F.elu, F.selu, F.celu, F.mish,
            F.threshold):
    register_handlers([_fn], _inplace_activation(_fn))


# --------------------------------------------------------------------------- index_add, scatter_add

_index_add_op = op_handler("index_add")
_index_copy_op = op_handler("index_copy")


def _slices_by_index(ctx: Builder, input: Any, dim: Any, index: Any, source: Any,
                     indices: tuple[torch.dtype, ...]) -> Any:
    """The index of a traced ``index_add``/``index_copy`` (a 0-d one as the 1-D index of
    one position it is to eager), where the call is the op's plain form: a traced input
    of rank >= 1, an index of rank <= 1 of a dtype of ``indices``, a source of the
    input's dtype and rank, neither bool nor complex; None otherwise (the fallback then
    runs eager's kernel, its checks and errors)."""
    if (not is_proxy(input) or not is_proxy(index) or not is_proxy(source)
            or type(dim) is not int or input.dim() == 0 or index.dim() > 1
            or index.dtype not in indices
            or source.dim() != input.dim() or source.dtype != input.dtype
            or input.dtype == torch.bool or input.dtype.is_complex):
        return None
    if index.dim() == 0:
        return ctx.run_python(lambda i: i.reshape(1), (index,), {})
    return index


def _out_fits(out: Any, input: Any, *operands: Any) -> bool:
    """Whether ``out=`` can be written as an in-place copy of the result: a traced tensor
    of ``input``'s shape, dtype and device, with no gradient asked of any tensor."""
    if out is None:
        return True
    return (is_proxy(out) and tuple(out.shape) == tuple(input.shape)
            and out.dtype == input.dtype and out.device == input.device
            and not (torch.is_grad_enabled()
                     and any(t.requires_grad for t in (out, input, *operands))))


def _index_add(ctx: Builder, input: Any, dim: Any, index: Any, source: Any, *,
               alpha: Any = 1, out: Any = None) -> Any:
    """``torch.index_add`` and ``Tensor.index_add``: ``ltorch.index_add`` for the plain
    case (`_slices_by_index`: an int32/int64 index of rank <= 1; a number ``alpha``),
    whatever the index's length (an unbacked count of routed tokens included);
    ``out=`` of the result's shape and dtype with no gradient asked is the result copied
    into it. 0-d, bool and complex tensors, mixed dtypes, an ``out=`` eager resizes or
    refuses and other arguments take the fallback (eager's kernel, checks and errors).
    Eager's kernels cast ``alpha`` to the tensors' dtype (``alpha=0.5`` on integers adds
    nothing, where the meta kernel refuses it): so does this."""
    idx = _slices_by_index(ctx, input, dim, index, source, (torch.int32, torch.int64))
    if (_index_add_op is None or idx is None or type(alpha) not in (bool, int, float)
            or (type(alpha) is float and not math.isfinite(alpha))
            or not _out_fits(out, input, source)):
        raise UseFallback
    alpha = alpha if input.dtype.is_floating_point and type(alpha) is float else int(alpha)
    result = _index_add_op(ctx, input, dim, idx, source, alpha=alpha)
    if out is None:
        return result
    return ctx.writes.assign(out, result._value, "index_add(out=)")


def _index_copy(ctx: Builder, input: Any, dim: Any, index: Any, source: Any, *,
                out: Any = None) -> Any:
    """``torch.index_copy`` and ``Tensor.index_copy``: ``ltorch.index_copy`` for the plain
    case (`_slices_by_index`, an int64 index as eager requires), whatever the index's
    length; ``out=`` as `_index_add`'s. The rest (a 0-d source of a 1-D input, bool and
    complex tensors) takes the fallback: eager's kernel, checks and errors."""
    idx = _slices_by_index(ctx, input, dim, index, source, (torch.int64,))
    if _index_copy_op is None or idx is None or not _out_fits(out, input, source):
        raise UseFallback
    result = _index_copy_op(ctx, input, dim, idx, source)
    if out is None:
        return result
    return ctx.writes.assign(out, result._value, "index_copy(out=)")


def _dense_range(p: Any) -> tuple[int, int] | None:
    """The elements of its storage a proxy covers, ``[first, end)``, where it is
    non-overlapping and dense (a permutation of a contiguous layout) with int sizes; None
    otherwise (torch's overlap check then says "too hard" and lets the write be)."""
    from thunder_ir.frontend.aliasing import proxy_layout

    shape, strides, offset = proxy_layout(p)
    if not all(type(n) is int for n in (*shape, *strides, offset)):
        return None
    step = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, strides) if n != 1),
                       key=lambda d: d[1]):
        if s != step:
            return None
        step *= n
    return offset, offset + step


def _no_overlap(ctx: Builder, self: Any, other: Any) -> None:
    """Eager's ``assert_no_overlap`` of an in-place indexing op's written tensor and an
    operand it reads (``y.index_add_(0, i, y[:2])``): where both are dense views of one
    storage whose elements intersect, eager's error."""
    if not is_proxy(other) or other._storage != self._storage:
        return
    ctx.read_layout(self, other)  # (the answer depends on the two layouts)
    a, b = _dense_range(self), _dense_range(other)
    if a is not None and b is not None and a[0] < b[1] and b[0] < a[1]:
        raise RuntimeError(
            "unsupported operation: some elements of the input tensor and the written-to "
            "tensor refer to a single memory location. Please clone() the tensor before "
            f"performing the operation.\n  at {where(ctx.loc)}")


def _index_add_inplace(ctx: Builder, self: Any, dim: Any, index: Any, source: Any, *,
                       alpha: Any = 1) -> Any:
    """``Tensor.index_add_``: `_index_add`, and ``self`` standing for the result (eager's
    in-place rules: leaves, views, saved values, a source sharing its memory; the other
    views of ``self`` see it)."""
    if is_proxy(self):
        _no_overlap(ctx, self, source)
    out = _index_add(ctx, self, dim, index, source, alpha=alpha)
    return ctx.writes.assign(self, out._value, "index_add_")


def _index_copy_inplace(ctx: Builder, self: Any, dim: Any, index: Any, source: Any) -> Any:
    """``Tensor.index_copy_``: `_index_copy`, and ``self`` standing for the result (a KV
    cache written at the input positions, through a view of it included)."""
    if is_proxy(self):
        _no_overlap(ctx, self, source)
    out = _index_copy(ctx, self, dim, index, source)
    return ctx.writes.assign(self, out._value, "index_copy_")


register_handlers([torch.index_add, torch.Tensor.index_add], _index_add)
register_handlers([torch.Tensor.index_add_], _index_add_inplace)
register_handlers([torch.index_copy, torch.Tensor.index_copy], _index_copy)
register_handlers([torch.Tensor.index_copy_], _index_copy_inplace)


def _scatter_add(ctx: Builder, input: Any, dim: Any, index: Any, src: Any, *,
                 out: Any = None) -> Any:
    """``torch.scatter_add`` and ``Tensor.scatter_add`` as ``prims.scatter_add`` (its VJP:
    the cotangent for ``input``, gathered at ``index`` for ``src``), whatever the
    index's length (an unbacked count of routed tokens included): an int64 index of the
    input's rank whose sizes are proved (from the expressions alone, no guard) to be
    ``src``'s, and at most the input's off ``dim``, a ``src`` of the input's dtype. Other
    calls take the fallback (eager's kernel, checks and errors)."""
    if (out is not None or not is_proxy(input) or not isinstance(index, torch.Tensor)
            or not isinstance(src, torch.Tensor) or type(dim) is not int
            or input.dim() == 0 or index.dim() != input.dim() or src.dim() != input.dim()
            or index.dtype != torch.int64 or src.dtype != input.dtype
            or input.dtype == torch.bool or input.dtype.is_complex
            or not -input.dim() <= dim < input.dim()):
        raise UseFallback
    d = dim % input.dim()
    if not all(proved_equal(i, s) for i, s in zip(index.shape, src.shape)) or not all(
            (type(i) is int and type(n) is int and i <= n) or proved_equal(i, n)
            for k, (i, n) in enumerate(zip(index.shape, input.shape)) if k != d):
        raise UseFallback
    from thunder_ir.dialects.prims import ScatterAddOp

    return ctx.wrap(ctx.emit(ScatterAddOp, ctx.value_of(input), ctx.value_of(index),
                             ctx.value_of(src), dim=d))


def _scatter_add_inplace(ctx: Builder, self: Any, dim: Any, index: Any, src: Any) -> Any:
    """``Tensor.scatter_add_``: `_scatter_add`, and ``self`` standing for the result."""
    if is_proxy(self):
        _no_overlap(ctx, self, src)
    out = _scatter_add(ctx, self, dim, index, src)
    return ctx.writes.assign(self, out._value, "scatter_add_")


register_handlers([torch.scatter_add, torch.Tensor.scatter_add], _scatter_add)
register_handlers([torch.Tensor.scatter_add_], _scatter_add_inplace)
