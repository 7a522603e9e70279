"""Result types without a meta run: the rule table for reductions, ``cumsum``,
comparisons, ``where`` and ``masked_fill``, joins, matrix products, embeddings, layer norm,
softmax, ``arange``, cross-entropy, an index tensor among slices, convolution, 2-d max
pooling and batch norm; and the params checks of the ops that keep their tensors' floating
dtype. Each op declares its rule where it is declared (`ltorch_op`'s ``type_rule`` and
``floats``): this module holds the rules, and no table beside the ops.

torch's meta kernels for these ops are Python (``torch._refs``,
``torch._meta_registrations``), 90 to 400 µs a call, and they check their inputs with
``torch._check``, which imports torch's symbolic shapes and sympy, and (for the refs)
``torch._dynamo``: about 0.6 s the first time a process types one, which a user's first
inference call paid and eager does not. Each rule here answers the plain case of its op
and gives None for anything else (other dtypes, dims out of range, shapes that do not
match, an empty tensor), which then goes the meta way and raises eager's error.
`tests/test_decomp_core.py` checks every rule against the meta kernels.

A rule is ``(operand types, params) -> type | None``; `LtorchOp.TYPE_RULE` holds it.
Rules declared ``symbolic`` (all of these) also run in a symbolic compile, where a fake
kernel decides dozens of symbolic expressions an op (the second size's compile paid that
op after op): their size tests decide nothing and record no guard (sizes proved equal
from their expressions, `symbols.proved_same`/`proved_broadcast`; a size known nonzero
from its range, `symbols.nonempty`), and where that proves too little they give None and
the meta kernel decides, as before. `tests/test_decomp_core.py` checks them over symbols
too (no more guards than the meta kernel records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Attribute

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.ltorch_base import LTORCH, LtorchOp, alike_tensors
from thunder_ir.dialects.symbols import (
    current,
    known_positive,
    nonempty,
    proved_broadcast,
    proved_equal,
    proved_order,
    proved_same,
    range_len,
    same_sizes,
    slice_indices,
    unbacked,
)
from thunder_ir.dialects.types import (
    NumberType,
    TensorType,
    broadcast,
    is_complex,
    is_float,
    tensor_type,
)

Rule = Callable[[Sequence[Any], dict[str, Any]], Attribute | list[TensorType] | None]


def _broadcast(shapes: Sequence[Sequence[Any]]) -> tuple[Any, ...] | None:
    """`broadcast` of static shapes; in a symbolic compile, only where the expressions
    prove it (`proved_broadcast`: no guard)."""
    return broadcast(shapes) if current() is None else proved_broadcast(shapes)


def _dims(dim: Any, rank: int) -> tuple[int, ...] | None:
    """The reduced dims, normalized and sorted (None or ``()``: all of them); None where
    they are not plain ints in range without repeats (torch then raises)."""
    if dim is None or dim == ():
        return tuple(range(rank))
    dims = (dim,) if type(dim) is int else dim
    if type(dims) is not tuple or not all(type(d) is int for d in dims):
        return None
    out = tuple(sorted(d + rank if d < 0 else d for d in dims))
    if any(not 0 <= d < rank for d in out) or len(set(out)) != len(out):
        return None
    return out


def reduction(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``sum``, ``mean``, ``amax``, ``amin`` of a floating tensor of rank 1 or more, with
    no ``dtype``: that dtype, the reduced dims dropped (kept as 1 with ``keepdim``)."""
    (t,) = operands
    if type(t) is not TensorType or not is_float(t.dtype) or params.get("dtype") is not None:
        return None
    sizes = t.sizes
    dims = _dims(params.get("dim"), len(sizes))
    if not sizes or dims is None or not nonempty(sizes):
        return None
    keep = params.get("keepdim")
    if keep is not None and type(keep) is not bool:
        return None
    if keep and all(type(sizes[i]) is int and sizes[i] == 1 for i in dims):
        return t
    out = tuple(1 if i in dims else s for i, s in enumerate(sizes)) if keep else \
        tuple(s for i, s in enumerate(sizes) if i not in dims)
    return tensor_type(out, t.dtype, t.dev)


def cat(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``cat`` of nonempty tensors of one dtype, device and rank, equal but at ``dim``."""
    (tensors,) = operands
    if not tensors or not all(type(t) is TensorType for t in tensors):
        return None
    first = tensors[0]
    rank, dim = first.rank, params.get("dim", 0)
    if type(dim) is not int or rank == 0 or not -rank <= dim < rank:
        return None
    dim %= rank
    total = 0
    for t in tensors:
        sizes = t.sizes
        if t.element_type != first.element_type or t.dev != first.dev or len(sizes) != rank \
                or not nonempty(sizes) or not proved_same(sizes[:dim], first.sizes[:dim]) \
                or not proved_same(sizes[dim + 1:], first.sizes[dim + 1:]):
            return None
        total += sizes[dim]
    out = list(first.sizes)
    out[dim] = total
    return tensor_type(out, first.dtype, first.dev)


def linear(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``(*x.shape[:-1], w.shape[0])`` for a floating ``x``, a 2-d weight of its dtype,
    device and inner size, and a matching 1-d bias or none."""
    x, w, b = operands
    if type(x) is TensorType and x.rank >= 1 and type(w) is TensorType and w.rank == 2 \
            and x.element_type == w.element_type and x.dev == w.dev \
            and is_float(x.dtype) and same_sizes(x.sizes[-1:], w.sizes[-1:]) and (
                b is None or (type(b) is TensorType and b.rank == 1
                              and b.element_type == x.element_type and b.dev == x.dev
                              and same_sizes(b.sizes, w.sizes[:1]))):
        return tensor_type((*x.sizes[:-1], w.sizes[0]), x.dtype, x.dev)
    return None


def matmul(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """Floating tensors of one dtype and device: a matrix times a matrix, a batch of
    matrices or vectors times one matrix or vector (either way round), and, for static
    sizes, two batches whose batch dims broadcast. (In a symbolic compile this also keeps
    torch 2.11's ``matmul`` from asking a symbolic batch its ``numel()``.)"""
    a, b = operands
    if type(a) is not TensorType or type(b) is not TensorType \
            or a.element_type != b.element_type or a.dev != b.dev or not is_float(a.dtype):
        return None
    x, y = a.sizes, b.sizes
    if a.rank == 2 and b.rank == 2:
        return tensor_type((x[0], y[1]), a.dtype, a.dev) if same_sizes(x[1:], y[:1]) \
            else None
    if max(a.rank, b.rank) >= 3 and min(a.rank, b.rank) in (1, 2):
        if b.rank == 2 and same_sizes(x[-1:], y[:1]):
            return tensor_type((*x[:-1], y[1]), a.dtype, a.dev)
        if b.rank == 1 and same_sizes(x[-1:], y):
            return tensor_type(x[:-1], a.dtype, a.dev)
        if a.rank == 1 and same_sizes(x, y[-2:-1]):
            return tensor_type((*y[:-2], y[-1]), a.dtype, a.dev)
        if a.rank == 2 and same_sizes(x[-1:], y[-2:-1]):
            return tensor_type((*y[:-2], x[0], y[-1]), a.dtype, a.dev)
        return None
    if a.rank >= 3 and b.rank >= 3 and proved_equal(x[-1], y[-2]) and nonempty(x) \
            and nonempty(y):
        batch = _broadcast((x[:-2], y[:-2]))
        if batch is None:
            return None
        return tensor_type((*batch, x[-2], y[-1]), a.dtype, a.dev)
    return None


def embedding(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """Rows of a 2-d floating weight at int64 or int32 indices, without ``padding_idx``
    or ``max_norm``: ``(*indices.shape, weight.shape[1])`` in the weight's dtype."""
    idx, w = operands
    if type(idx) is not TensorType or type(w) is not TensorType or w.rank != 2 \
            or idx.dtype not in (torch.int64, torch.int32) or not is_float(w.dtype) \
            or idx.dev != w.dev or params.get("padding_idx") is not None \
            or params.get("max_norm") is not None:
        return None
    return tensor_type((*idx.sizes, w.sizes[1]), w.dtype, w.dev)


def layer_norm(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """A floating input whose last dims are ``normalized_shape``, with a weight and a bias
    of that shape and the input's dtype, or none: the input's type."""
    x, *affine = operands
    shape = params.get("normalized_shape")
    if type(x) is not TensorType or not is_float(x.dtype) or type(shape) is not tuple \
            or not shape or len(shape) > x.rank \
            or not proved_same(x.sizes[x.rank - len(shape):], shape) or not nonempty(x.sizes):
        return None
    for t in affine:
        if t is not None and (type(t) is not TensorType or not proved_same(t.sizes, shape)
                              or t.element_type != x.element_type or t.dev != x.dev):
            return None
    return x


def comparison(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``eq``, ``lt``...: tensors of one dtype (not complex) and device, and numbers: a
    bool tensor of their broadcast shape."""
    alike = alike_tensors(operands, True)
    if alike is None or is_complex(alike[0].dtype):
        return None
    first, shapes = alike
    shape = _broadcast(shapes)
    return None if shape is None else tensor_type(shape, torch.bool, first.dev)


def where(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """A bool condition, and branches that are tensors of one dtype, or a floating tensor
    and a number: the branch tensors' dtype, the broadcast shape, on their device."""
    cond, *branches = operands
    tensors = [t for t in branches if type(t) is TensorType]
    if type(cond) is not TensorType or cond.dtype != torch.bool or not tensors \
            or any(t.element_type != tensors[0].element_type or t.dev != cond.dev
                   for t in tensors) \
            or (len(tensors) == 1 and not is_float(tensors[0].dtype)) \
            or not all(type(t) in (TensorType, NumberType) for t in branches):
        return None
    shape = _broadcast([cond.sizes, *(t.sizes for t in tensors)])
    return None if shape is None else tensor_type(shape, tensors[0].dtype, cond.dev)


def masked_fill(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """A floating input, a bool mask on its device that broadcasts to its shape, a number:
    the input's type."""
    x, mask = operands
    if type(x) is TensorType and is_float(x.dtype) and type(mask) is TensorType \
            and mask.dtype == torch.bool and mask.dev == x.dev \
            and type(params.get("value")) in (bool, int, float):
        shape = _broadcast([x.sizes, mask.sizes])
        if shape is not None and proved_same(shape, x.sizes):
            return x
    return None


def softmax(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``softmax``, ``log_softmax`` and ``cumsum`` of a floating tensor along a dim in
    range, with no ``dtype``: the input's type."""
    (x,) = operands
    dim = params.get("dim")
    if type(x) is TensorType and is_float(x.dtype) and x.rank >= 1 and type(dim) is int \
            and -x.rank <= dim < x.rank and params.get("dtype") is None:
        return x
    return None


def arange(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``arange`` of ints on a given device, as int64: ``ceil((end - start) / step)``
    values (none where the step runs away from the end: eager raises)."""
    start, end, step = params.get("start", 0), params.get("end"), params.get("step", 1)
    if end is None:
        start, end = 0, start
    dev = params.get("device")
    if not all(type(v) is int for v in (start, end, step)) or step == 0 \
            or params.get("dtype") not in (None, torch.int64) or type(dev) is not str:
        return None
    n = -((start - end) // step)
    return tensor_type((n,), torch.int64, dev) if n >= 0 else None


def cross_entropy(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """Scores ``(N, C)`` of a floating dtype, int64 class indices ``(N,)`` on their
    device, no weight, no legacy ``size_average``/``reduce``: a 0-d loss of the scores'
    dtype (``"mean"``, ``"sum"``), or ``(N,)`` (``"none"``)."""
    x, target, weight = operands
    reduction = params.get("reduction", "mean")
    if type(x) is not TensorType or type(target) is not TensorType or weight is not None \
            or not is_float(x.dtype) or x.rank != 2 or target.rank != 1 \
            or target.dtype != torch.int64 or target.dev != x.dev \
            or not proved_equal(target.sizes[0], x.sizes[0]) or not nonempty(x.sizes) \
            or params.get("size_average") is not None or params.get("reduce") is not None \
            or reduction not in ("mean", "sum", "none") \
            or type(params.get("label_smoothing", 0.0)) not in (int, float):
        return None
    return tensor_type(() if reduction != "none" else target.sizes, x.dtype, x.dev)


def nll_loss_forward(operands: Sequence[Any], params: dict[str, Any]
                      ) -> list[TensorType] | None:
    """As `cross_entropy`, on log-probabilities: the loss, and the total weight (0-d)."""
    loss = cross_entropy(operands, {"reduction": params.get("reduction") or "mean"})
    x = operands[0]
    return None if loss is None else [loss, tensor_type((), x.dtype, x.dev)]


def nll_loss_backward(operands: Sequence[Any], params: dict[str, Any]
                       ) -> TensorType | None:
    """The gradient of `nll_loss_forward`'s log-probabilities: their type, where the
    loss's gradient and the total weight are typed as that forward's results."""
    grad, x, target, total, weight = operands
    fwd = nll_loss_forward([x, target, weight], params)
    if fwd is None or grad != fwd[0] or total != fwd[1]:
        return None
    return x


def same_as_first(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """A gradient and what it is the gradient of, of one floating type (``gelu_backward``
    with an approximation eager knows): that type."""
    grad, x = operands
    if type(grad) is TensorType and grad == x and is_float(grad.dtype) \
            and params.get("approximate") in (None, "none", "tanh"):
        return grad
    return None


def softmax_backward(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """The gradient of (log-)softmax from its output, all of one floating type, along a dim
    in range: that type."""
    grad, out = operands
    dim = params.get("dim")
    if type(grad) is TensorType and grad == out and is_float(grad.dtype) and grad.rank >= 1 \
            and params.get("input_dtype") == grad.dtype and type(dim) is int \
            and -grad.rank <= dim < grad.rank:
        return grad
    return None


def stats_type(x: TensorType, shape: tuple[int, ...]) -> TensorType:
    """Layer norm's mean and rstd: ``x``'s sizes, the normalized dims kept as 1s."""
    return tensor_type((*x.sizes[:x.rank - len(shape)], *(1,) * len(shape)), x.dtype, x.dev)


def native_layer_norm(operands: Sequence[Any], params: dict[str, Any]
                       ) -> list[TensorType] | None:
    """As `layer_norm`, float32 and float64: the output, and the mean and rstd."""
    x = operands[0]
    out = layer_norm(operands, params)
    if out is None or x.dtype not in (torch.float32, torch.float64):
        return None
    stats = stats_type(x, params["normalized_shape"])
    return [out, stats, stats]


def layer_norm_backward(operands: Sequence[Any], params: dict[str, Any]
                         ) -> list[TensorType] | None:
    """float32 and float64: a gradient of the input's type, the forward's mean and rstd (or
    none), and one result per true ``output_mask`` entry, typed as the input, the weight
    and the bias (each present)."""
    grad, x, weight, bias, mean, rstd = operands
    mask = params.get("output_mask")
    if native_layer_norm([x, weight, bias], params) is None or grad != x \
            or type(mask) is not tuple or len(mask) != 3:
        return None
    stats = stats_type(x, params["normalized_shape"])
    if (mean is None) != (rstd is None) or (mean is not None and (mean != stats
                                                                 or rstd != stats)):
        return None
    outs = []
    for m, t in zip(mask, (x, weight, bias)):
        if m:
            if t is None:
                return None
            outs.append(t)
    return outs


# --------------------------------------------------------------------------- shape ops
# Closed forms of the shape ops, also run in a symbolic compile (``symbolic=True``): torch's
# fake kernels type a reshape of a symbolic size by deciding dozens of symbolic expressions
# (``_reshape_view_helper``), about 0.3 s an op on a Swin block; these compute the sizes
# as expressions and decide at most one thing (a reshape's element count, where the
# expressions alone do not prove it: recorded as the guard the meta kernel would record).


def _numel(sizes: Any) -> Any:
    n: Any = 1
    for s in sizes:
        n = n * s
    return n


def _size(s: Any) -> bool:
    return (type(s) is int and s > 0) or isinstance(s, torch.SymInt)


def _expr(s: Any) -> Any:
    return s.node.expr if isinstance(s, torch.SymInt) else s


def reshape(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``reshape``/``view`` of a nonempty tensor to positive sizes with at most one -1:
    the -1 is the element count over the other sizes, where that division is exact. In a
    symbolic compile the answer is kept for the compilation, by the sizes' expressions
    (a model reshapes alike layer after layer; the decision costs a ``ShapeEnv`` query)."""
    (x,) = operands
    shape: Any = params.get("shape", params.get("size"))
    if type(x) is not TensorType or type(shape) not in (tuple, list) \
            or any(type(s) is int and s == 0 for s in x.sizes):
        return None
    table = current()
    if table is None:
        return _reshape(x, shape)
    memo = table.__dict__.setdefault("_reshapes", {})
    key = (tuple(_expr(s) for s in x.sizes), tuple(_expr(s) for s in shape), x.element_type,
           x.dev)
    if key not in memo:
        memo[key] = _reshape(x, shape)
    return memo[key]


def _reshape(x: TensorType, shape: Sequence[Any]) -> TensorType | None:
    free = [i for i, s in enumerate(shape) if type(s) is int and s == -1]
    if len(free) > 1 or not all(_size(s) for i, s in enumerate(shape) if i not in free):
        return None
    numel = _numel(x.sizes)
    known = _numel(s for i, s in enumerate(shape) if i not in free)
    out = list(shape)
    if free:
        if type(known) is int and type(numel) is int and numel % known:
            return None
        out[free[0]] = numel // known
    total = _numel(out)
    if not proved_equal(total, numel) and (unbacked(total, numel)  # (no decision on u0)
                                    or not bool(total == numel)):  # (one decision, a guard)
        return None
    return tensor_type(tuple(out), x.dtype, x.dev)


def _dim(d: Any, rank: int) -> int | None:
    if type(d) is not int or not -rank <= d < rank:
        return None
    return d + rank if d < 0 else d


def permute(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``permute`` by a permutation of the dims (ints, negative ones counted from the end)."""
    (x,) = operands
    dims: Any = params.get("dims")
    if type(x) is not TensorType or type(dims) not in (tuple, list) or len(dims) != x.rank:
        return None
    norm = [_dim(d, x.rank) for d in dims]
    if sorted(d for d in norm if d is not None) != list(range(x.rank)):
        return None
    sizes = x.sizes
    return tensor_type(tuple(sizes[d] for d in norm if d is not None), x.dtype, x.dev)


def transpose(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``transpose`` of two dims of a tensor of rank 1 or more."""
    (x,) = operands
    if type(x) is not TensorType or x.rank == 0:
        return None
    a, b = _dim(params.get("dim0"), x.rank), _dim(params.get("dim1"), x.rank)
    if a is None or b is None:
        return None
    sizes = list(x.sizes)
    sizes[a], sizes[b] = sizes[b], sizes[a]
    return tensor_type(tuple(sizes), x.dtype, x.dev)


def unsqueeze(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``unsqueeze``: a 1 inserted at ``dim`` (in ``[-rank - 1, rank]``)."""
    (x,) = operands
    if type(x) is not TensorType:
        return None
    d = _dim(params.get("dim"), x.rank + 1)
    if d is None:
        return None
    sizes = x.sizes
    return tensor_type((*sizes[:d], 1, *sizes[d:]), x.dtype, x.dev)


def same_type(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``clone``/``contiguous`` in the contiguous or preserved memory format: the operand's
    type (another format may be refused by rank: the meta kernel's way)."""
    (x,) = operands
    if type(x) is not TensorType or params.get("memory_format") not in (
            None, torch.contiguous_format, torch.preserve_format):
        return None
    return x


def flatten(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``flatten`` of dims ``start_dim..end_dim`` (in range, in order) of a tensor of rank
    1 or more: their sizes' product in their place."""
    (x,) = operands
    if type(x) is not TensorType or x.rank == 0:
        return None
    start = _dim(params.get("start_dim", 0), x.rank)
    end = _dim(params.get("end_dim", -1), x.rank)
    if start is None or end is None or start > end:
        return None
    sizes = x.sizes
    return tensor_type((*sizes[:start], _numel(sizes[start:end + 1]), *sizes[end + 1:]),
                       x.dtype, x.dev)


def expand(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``expand(size)`` as ATen's ``inferExpandGeometry`` sizes it: -1 keeps a dim, a dim
    of size 1 takes the new size, another must equal it (proved from the expressions: no
    decision); new leading dims take theirs (not -1)."""
    (x,) = operands
    target: Any = params.get("size")
    if type(x) is not TensorType or type(target) not in (tuple, list) \
            or len(target) < x.rank:
        return None
    sizes = x.sizes
    lead = len(target) - x.rank
    out: list[Any] = []
    for i, want in enumerate(target):
        if type(want) is int and want < 0:
            if want != -1 or i < lead:
                return None
            out.append(sizes[i - lead])
        elif i < lead or (type(sizes[i - lead]) is int and sizes[i - lead] == 1) \
                or proved_order(sizes[i - lead], want) == 0:
            out.append(want)  # (a new dim; a broadcast one; or the same size)
        else:
            return None
    return tensor_type(tuple(out), x.dtype, x.dev)


def split(operands: Sequence[Any], params: dict[str, Any]) -> list[TensorType] | None:
    """``split`` along a dim of static positive size (other dims may be symbols): by an
    int size (the last piece the rest), or by int sections summing to it."""
    (x,) = operands
    if type(x) is not TensorType or x.rank == 0:
        return None
    d = _dim(params.get("dim", 0), x.rank)
    how: Any = params.get("split_size_or_sections")
    if d is None:
        return None
    n = x.sizes[d]
    if type(n) is not int or n <= 0:
        return None
    if type(how) is int:
        if how <= 0:
            return None
        pieces = [how] * (n // how) + ([n % how] if n % how else [])
    elif type(how) in (tuple, list) and all(type(k) is int and k >= 0 for k in how) \
            and sum(how) == n:
        pieces = list(how)
    else:
        return None
    sizes = x.sizes
    return [tensor_type((*sizes[:d], k, *sizes[d + 1:]), x.dtype, x.dev) for k in pieces]


_ALL = slice(None, None, None)


def getitem(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """``x[:, idx, :]``: one int64 index tensor on ``x``'s device among full slices
    (nanoGPT's ``x[:, [-1], :]``): ``x``'s type with that dim replaced by the index's
    sizes. (A view's index, a bool mask or several index tensors go the meta way.) In a
    symbolic compile, only a basic index with a slice bound over unbacked symbols
    (`_sliced`)."""
    x, indices = operands
    index = params.get("index")
    if not indices and type(x) is TensorType and (_unbacked_slice(index)
                                                  or current() is not None):
        return _sliced(x, index)
    if current() is not None:  # (symbolic compiles: only the basic indices above)
        return None
    if type(x) is not TensorType or len(indices) != 1 or type(index) is not tuple \
            or len(index) > x.rank:
        return None
    (idx,) = indices
    at = [i for i, e in enumerate(index) if type(e) is OperandRef]
    if type(idx) is not TensorType or idx.dtype != torch.int64 or idx.dev != x.dev \
            or at != [i for i, e in enumerate(index) if e != _ALL] or len(at) != 1 \
            or index[at[0]] != 0 or 0 in x.sizes:
        return None
    i = at[0]
    return tensor_type((*x.sizes[:i], *idx.sizes, *x.sizes[i + 1:]), x.dtype, x.dev)


def _unbacked_slice(index: Any) -> bool:
    """Whether a basic index has a slice bound over unbacked symbols (``x[:n.item()]``)."""
    items = index if type(index) is tuple else (index,)
    return any(type(i) is slice and unbacked(i.start, i.stop) for i in items)


def _sliced(x: TensorType, index: Any) -> TensorType | None:
    """``x[index]`` for a basic index (ints, slices of positive int steps, ``None``,
    ``...``) in a symbolic compile, whose slice bounds may be unbacked: each slice's length
    in closed form (`slice_indices`: ``min``, ``max`` and conditional expressions), where
    torch's fake kernel would make each call a new unbacked size (and decides a dozen
    expressions a slice over backed sizes). An int index into a symbolic size is answered
    where the size's range puts it in bounds (no guard)."""
    items = list(index) if type(index) is tuple else [index]
    consuming = [i for i in items if i is not None and i is not Ellipsis]
    if len(consuming) > x.rank or items.count(Ellipsis) > 1:
        return None
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k:k + 1] = [slice(None)] * (x.rank - len(consuming))
    else:
        items += [slice(None)] * (x.rank - len(consuming))
    sizes: list[Any] = []
    dim = 0
    for it in items:
        if it is None:
            sizes.append(1)
            continue
        n = x.sizes[dim]
        dim += 1
        if type(it) is int:
            if not known_positive(n - it if it >= 0 else n + it + 1):
                return None
            continue
        step = it.step if type(it) is slice else None
        if type(it) is not slice or not (step is None or (type(step) is int and step > 0)) \
                or any(b is not None and type(b) is not int and not unbacked(b)
                       for b in (it.start, it.stop)):
            return None
        lo, hi, step = slice_indices(it, n)
        sizes.append(range_len(lo, hi, step))
    return tensor_type(tuple(sizes), x.dtype, x.dev)


def _ints(v: Any, n: int) -> bool:
    return type(v) is tuple and len(v) == n and all(type(i) is int for i in v)


def convolution(operands: Sequence[Any], params: dict[str, Any]) -> TensorType | None:
    """A batched floating input ``[N, C_in, *spatial]``, a weight ``[C_out, C_in / groups,
    *kernel]`` and a bias ``[C_out]`` or none, of its dtype and device, one positive
    stride and dilation and one padding per spatial dim: ``[N, C_out, *out]``, each out
    size ``(size + 2 padding - dilation (kernel - 1) - 1) // stride + 1``, at least 1."""
    x, w, b = operands
    groups = params.get("groups")
    if type(x) is not TensorType or type(w) is not TensorType or not is_float(x.dtype) \
            or w.element_type != x.element_type or w.dev != x.dev or x.rank < 3 \
            or w.rank != x.rank or type(groups) is not int or groups < 1 \
            or not nonempty(x.sizes) or w.symbolic:
        return None
    n, c_in, *size = x.sizes
    c_out, per_group, *kernel = w.sizes
    if type(c_in) is not int:
        return None
    stride, padding, dilation = (params.get(k, ()) for k in ("stride", "padding", "dilation"))
    if not (_ints(stride, len(size)) and _ints(padding, len(size))
            and _ints(dilation, len(size))) or per_group * groups != c_in \
            or c_out % groups or c_out == 0 or min(stride) < 1 or min(dilation) < 1 \
            or min(padding) < 0 or (b is not None and (type(b) is not TensorType
                                                       or b.symbolic or b.sizes != (c_out,)
                                                       or b.element_type != x.element_type
                                                       or b.dev != x.dev)):
        return None
    out = [(i + 2 * p - d * (k - 1) - 1) // s + 1
           for i, k, s, p, d in zip(size, kernel, stride, padding, dilation)]
    if not nonempty(out):
        return None
    return tensor_type((n, c_out, *out), x.dtype, x.dev)


def max_pool2d(operands: Sequence[Any], params: dict[str, Any]) -> list[TensorType] | None:
    """2-d max pooling of a floating ``[N, C, H, W]`` or ``[C, H, W]`` input without
    ``ceil_mode``, each padding at most half its dilated window: the maxima in its dtype
    and their int64 indices, ``(size + 2 padding - dilation (kernel - 1) - 1) // stride +
    1`` a side, at least 1."""
    (x,) = operands
    kernel, stride, padding, dilation = (params.get(k, ()) for k in (
        "kernel_size", "stride", "padding", "dilation"))
    if type(x) is not TensorType or not is_float(x.dtype) or x.rank not in (3, 4) \
            or not nonempty(x.sizes) or params.get("ceil_mode") is not False \
            or not all(_ints(v, 2) for v in (kernel, stride, padding, dilation)) \
            or min(kernel) < 1 or min(stride) < 1 or min(dilation) < 1 or min(padding) < 0 \
            or any(p > ((k - 1) * d + 1) // 2 for k, p, d in zip(kernel, padding, dilation)):
        return None
    out = [(i + 2 * p - d * (k - 1) - 1) // s + 1
           for i, k, s, p, d in zip(x.sizes[-2:], kernel, stride, padding, dilation)]
    if not nonempty(out):
        return None
    shape = (*x.sizes[:-2], *out)
    return [tensor_type(shape, x.dtype, x.dev), tensor_type(shape, torch.int64, x.dev)]


def batch_norm(operands: Sequence[Any], params: dict[str, Any]) -> list[TensorType] | None:
    """float32 and float64 ``[N, C, ...]``, with a weight, a bias and running statistics
    ``[C]`` of its dtype or none (evaluation reads running statistics): the output; in
    training also the batch mean and inverse standard deviation, and with running
    statistics their updated values, all ``[C]``."""
    x, *rest = operands
    training = params.get("training")
    if type(x) is not TensorType or x.dtype not in (torch.float32, torch.float64) \
            or x.rank < 2 or not nonempty(x.sizes) or type(training) is not bool:
        return None
    stat = tensor_type((x.sizes[1],), x.dtype, x.dev)
    if any(t is not None and t != stat for t in rest):
        return None
    running = rest[2] is not None and rest[3] is not None
    if (rest[2] is None) != (rest[3] is None) or (not training and not running):
        return None
    if not training:
        return [x]
    return [x, stat, stat, stat, stat] if running else [x, stat, stat]


# --------------------------------------------------------------------------- float params
#
# The checks of the params with which an op keeps its tensors' floating dtype
# (`ltorch_op`'s ``floats``): params eager refuses with float tensors must fail them, so
# that the meta kernel raises eager's error.


def alpha(params: dict[str, Any]) -> bool:
    """``add``/``sub``: a number ``alpha`` (a bool alpha needs bool tensors)."""
    a = params.get("alpha")
    return a is None or type(a) in (int, float)


def rounding_mode(params: dict[str, Any]) -> bool:
    """``div``: true division or a known rounding mode."""
    return params.get("rounding_mode") in (None, "trunc", "floor")


def decimals(params: dict[str, Any]) -> bool:
    """``round``: an int ``decimals``."""
    d = params.get("decimals")
    return d is None or type(d) is int


def approximate(params: dict[str, Any]) -> bool:
    """``gelu``: a known approximation."""
    return params.get("approximate") in (None, "none", "tanh")


def softplus(params: dict[str, Any]) -> bool:
    """``softplus``: number ``beta`` and ``threshold``."""
    return all(type(params.get(k, 1)) in (int, float) for k in ("beta", "threshold"))


# --------------------------------------------------------------------------- the views


def type_rules() -> dict[type[LtorchOp], Rule]:
    """Op class -> the rule that types its plain case, as the ops declare them."""
    return {op: op.TYPE_RULE for op in LTORCH if op.TYPE_RULE is not None}  # type: ignore[misc]


def float_preserving() -> dict[type[LtorchOp], Callable[[dict[str, Any]], bool]]:
    """Op class -> the params check with which it keeps its floating dtype, as the ops
    declare them."""
    return {op: op.FLOAT_PARAMS for op in LTORCH if op.FLOAT_PRESERVING}


__all__ = ["alpha", "approximate", "arange", "batch_norm", "cat", "comparison",
           "convolution", "cross_entropy", "decimals", "embedding", "expand", "flatten",
           "float_preserving",
           "getitem", "layer_norm", "layer_norm_backward", "linear", "masked_fill",
           "matmul", "max_pool2d", "native_layer_norm", "nll_loss_backward",
           "nll_loss_forward", "reduction", "rounding_mode", "same_as_first", "softmax",
           "softmax_backward", "softplus", "same_type", "split", "type_rules", "where"]
