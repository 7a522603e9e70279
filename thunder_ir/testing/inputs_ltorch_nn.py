"""Input strategies of the nn ltorch ops (`thunder_ir.dialects.ltorch_nn`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import strategies as st

from thunder_ir.dialects import ltorch_nn as N
from thunder_ir.testing.inputs import (
    FLOAT_KIND,
    InputSpec,
    OpSample,
    draw_data,
    register_inputs,
    values,
)

# --------------------------------------------------------------------------- ltorch: nn

def _side(draw: st.DrawFn, lo: int = 1, hi: int = 4) -> int:
    return draw(st.integers(lo, hi))


@register_inputs(N.MatmulOp)
def _nn_matmul(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """1-D promotion and batch dims broadcast from size 1 or missing, on either side."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    n, k, p = _side(draw), _side(draw), _side(draw)
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, 2)):]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, 2)):]
    a = (k,) if draw(st.booleans()) else (*a_batch, n, k)
    b = (k,) if draw(st.booleans()) else (*b_batch, k, p)
    return OpSample([values(draw, a, dtype), values(draw, b, dtype)], {})


@register_inputs(N.BmmOp)
def _nn_bmm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    dtype = spec.dtype(draw, FLOAT_KIND)
    b, n, m, p = _side(draw), _side(draw), _side(draw), _side(draw)
    return OpSample([values(draw, (b, n, m), dtype), values(draw, (b, m, p), dtype)], {})


@register_inputs(N.GroupedMmOp)
def _nn_grouped_mm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Both forms, empty groups, rows past the last group, int32 and int64 offsets."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    e, k, n = _side(draw, 1, 3), _side(draw), _side(draw)
    sizes = [draw(st.integers(0, 3)) for _ in range(e)]
    m = sum(sizes) + draw(st.integers(0, 2))
    offs_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(offs_dtype)
    if draw(st.booleans()):
        return OpSample([values(draw, (m, k), dtype), values(draw, (e, k, n), dtype), offs], {})
    return OpSample([values(draw, (k, m), dtype), values(draw, (m, n), dtype), offs], {})


@register_inputs(N.LinearOp)
def _nn_linear(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """2-D and 1-D weights, with and without bias."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    batch = draw(st.lists(st.integers(1, 4), max_size=2))
    n_in, n_out = _side(draw, 1, 6), _side(draw, 1, 6)
    bias = draw(st.booleans())
    w: tuple[int, ...]
    b: tuple[int, ...]
    if draw(st.booleans()):  # torch allows a bias with a 1-D weight only for a 1-D input
        batch = [] if bias else batch
        w, b = (n_in,), ()
    else:
        w, b = (n_out, n_in), (n_out,)
    return OpSample([values(draw, (*batch, n_in), dtype), values(draw, w, dtype),
                     values(draw, b, dtype) if bias else None], {})


@register_inputs(N.SoftmaxOp, N.LogSoftmaxOp)
def _nn_softmax(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    bound = 5.0 if spec.for_vjp else 20.0
    x = draw_data(draw, spec, spec.shape(draw), FLOAT_KIND, -bound, bound)
    r = max(x.ndim, 1)
    dtype = None if spec.for_vjp else draw(st.sampled_from([None, torch.float32,
                                                            torch.float64]))
    return OpSample([x], {"dim": draw(st.integers(-r, r - 1)), "dtype": dtype})


@register_inputs(N.SafeSoftmaxOp)
def _nn_safe_softmax(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Softmax's samples; outside VJP checks, some rows are ``-inf`` throughout."""
    sample = _nn_softmax(draw, spec)
    x, dim = sample.operands[0], sample.params["dim"]
    if not spec.for_vjp and x.ndim and draw(st.booleans()):
        rows = list(x.shape)
        rows[dim] = 1
        seed = draw(st.integers(0, 2**16))
        masked = torch.rand(rows, generator=torch.Generator().manual_seed(seed)) < 0.5
        sample.operands[0] = x.masked_fill(masked, float("-inf"))
    return sample


@register_inputs(N.DropoutOp, N.FeatureDropoutOp, N.AlphaDropoutOp, N.FeatureAlphaDropoutOp)
def _nn_dropout(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    min_rank = 2 if spec.op.FEATURE else 0  # type: ignore[attr-defined]
    x = draw_data(draw, spec, spec.shape(draw, min_rank=min_rank), FLOAT_KIND)
    p = draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]) if spec.for_vjp else st.floats(0.0, 1.0))
    return OpSample([x], {"p": p, "train": draw(st.booleans())})


def _norm_case(draw: st.DrawFn, spec: InputSpec) -> tuple[torch.Tensor, tuple[int, ...]]:
    """An input and the trailing dims (``normalized_shape``) a norm normalizes over."""
    batch = spec.shape(draw, max_rank=2)
    lo = 2 if spec.for_vjp else 1
    ns = spec.shape(draw, min_rank=1, max_rank=2, min_side=lo)
    return draw_data(draw, spec, (*batch, *ns), FLOAT_KIND, -5.0, 5.0), ns


@register_inputs(N.LayerNormOp)
def _nn_layer_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, ns = _norm_case(draw, spec)
    w = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    b = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    eps = draw(st.sampled_from([None, 1e-5, 1e-3, 1e-2]))
    return OpSample([x, w, b], {"normalized_shape": ns, "eps": eps})


@register_inputs(N.NativeLayerNormOp)
def _nn_native_layer_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Layer norm's samples in float32 or float64 (the op's dtypes), ``eps`` given."""
    sample = _nn_layer_norm(draw, spec)
    dtype = torch.float64 if spec.for_vjp else draw(st.sampled_from([torch.float32,
                                                                      torch.float64]))
    sample.operands = [None if t is None else t.to(dtype) for t in sample.operands]
    if sample.params["eps"] is None:
        sample.params["eps"] = 1e-5
    return sample


def _conv_case(draw: st.DrawFn, spec: InputSpec) -> tuple[torch.Tensor, torch.Tensor,
                                                           dict[str, Any]]:
    """A batched input, a weight and the params of a 1-, 2- or 3-d convolution: groups,
    strides, dilations and paddings, every output size at least 1."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    nd = draw(st.integers(1, 3 if not spec.for_vjp else 2))
    g = draw(st.integers(1, 2))
    c_in, c_out = g * _side(draw, 1, 2), g * _side(draw, 1, 2)
    kernel = [_side(draw, 1, 3) for _ in range(nd)]
    stride = [_side(draw, 1, 2) for _ in range(nd)]
    dilation = [_side(draw, 1, 2) for _ in range(nd)]
    padding = [draw(st.integers(0, 1)) for _ in range(nd)]
    spatial = [max(dl * (k - 1) + 1 - 2 * q, 1) + draw(st.integers(0, 3))
               for k, dl, q in zip(kernel, dilation, padding)]
    x = values(draw, (_side(draw, 1, 2), c_in, *spatial), dtype)
    w = values(draw, (c_out, c_in // g, *kernel), dtype)
    return x, w, {"stride": tuple(stride), "padding": tuple(padding),
                  "dilation": tuple(dilation), "groups": g}


@register_inputs(N.ConvolutionOp)
def _nn_convolution(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """With and without bias (see `_conv_case`)."""
    x, w, params = _conv_case(draw, spec)
    bias = values(draw, (w.shape[0],), x.dtype) if draw(st.booleans()) else None
    return OpSample([x, w, bias], params)


@register_inputs(N.ConvolutionBackwardOp)
def _nn_convolution_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Every non-empty choice of gradients, on an output gradient of the output's shape."""
    x, w, params = _conv_case(draw, spec)
    out = N.convolution(x.to("meta"), w.to("meta"), None, **params)
    dy = draw_data(draw, spec, tuple(out.shape), FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    mask = draw(st.tuples(st.booleans(), st.booleans(), st.booleans()).filter(any))
    return OpSample([dy, x, w], {**params, "output_mask": tuple(int(m) for m in mask)})



def _max_pool_case(draw: st.DrawFn, spec: InputSpec) -> tuple[torch.Tensor, dict[str, Any]]:
    """A batched ``[N, C, H, W]`` input and max-pooling params: padding at most half the
    kernel (torch's rule), strides, dilations, ``ceil_mode``; ties (a relu'd input) too.
    The input spans at least one dilated kernel, so that no window lies in the padding
    alone (torch's kernels then give an index outside the input)."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    kernel = [_side(draw, 1, 3) for _ in range(2)]
    stride = [_side(draw, 1, 3) for _ in range(2)]
    dilation = [_side(draw, 1, 2) for _ in range(2)]
    padding = [draw(st.integers(0, k // 2)) for k in kernel]
    spatial = [dl * (k - 1) + 1 + draw(st.integers(0, 4)) for k, dl in zip(kernel, dilation)]
    x = draw_data(draw, spec, (_side(draw, 1, 2), _side(draw, 1, 3), *spatial), FLOAT_KIND,
              -3.0, 3.0).to(dtype)
    if not spec.for_vjp and draw(st.booleans()):
        x = x.clamp(min=0)  # ties: every window of zeros
    return x, {"kernel_size": tuple(kernel), "stride": tuple(stride),
               "padding": tuple(padding), "dilation": tuple(dilation),
               "ceil_mode": draw(st.booleans())}


@register_inputs(N.MaxPool2dWithIndicesOp)
def _nn_max_pool2d_with_indices(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, params = _max_pool_case(draw, spec)
    return OpSample([x], params)


@register_inputs(N.MaxPool2dWithIndicesBackwardOp)
def _nn_max_pool2d_with_indices_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """The forward's indices, and an output gradient of the output's shape."""
    x, params = _max_pool_case(draw, spec)
    out, indices = N.max_pool2d_with_indices(x, **params)
    dy = draw_data(draw, spec, tuple(out.shape), FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    return OpSample([dy, x, indices], params)

def _batch_norm_case(draw: st.DrawFn, spec: InputSpec) -> tuple[list[Any], dict[str, Any]]:
    """``[x, weight, bias, running_mean, running_var]`` and the params, float32 or float64
    (the op's dtypes): affine or not, with or without running statistics (always with them
    in evaluation), at least 2 values per channel, each channel spread (a ramp added)."""
    dtype = torch.float64 if spec.for_vjp else draw(st.sampled_from([torch.float32,
                                                                      torch.float64]))
    c = _side(draw, 1, 3)
    shape = (_side(draw, 1, 3), c, *[_side(draw, 1, 3) for _ in range(draw(st.integers(0, 2)))])
    if math.prod(shape) // c < 2:
        shape = (shape[0] * 2, *shape[1:])
    x = draw_data(draw, spec, shape, FLOAT_KIND, -3.0, 3.0).to(dtype)
    x = x + torch.linspace(-1.0, 1.0, x.numel(), dtype=dtype).reshape(shape)
    training = draw(st.booleans())
    stats = not training or draw(st.booleans())
    w = values(draw, (c,), dtype) if draw(st.booleans()) else None
    b = values(draw, (c,), dtype) if draw(st.booleans()) else None
    rm = values(draw, (c,), dtype) if stats else None
    rv = (values(draw, (c,), dtype).abs() + 0.5) if stats else None
    return [x, w, b, rm, rv], {"training": training,
                               "momentum": draw(st.sampled_from([0.1, 0.5])),
                               "eps": draw(st.sampled_from([1e-5, 1e-3]))}


@register_inputs(N.NativeBatchNormOp)
def _nn_native_batch_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    operands, params = _batch_norm_case(draw, spec)
    return OpSample(operands, params)


@register_inputs(N.NativeBatchNormBackwardOp)
def _nn_native_batch_norm_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """The statistics the forward saves (training) or the running ones (evaluation), and
    every non-empty choice of gradients the affine params allow."""
    (x, w, b, rm, rv), params = _batch_norm_case(draw, spec)
    training = params["training"]
    save = [None, None]
    if training:
        save = N.native_batch_norm(x, w, b, rm, rv, **params)[1:3]
    dy = draw_data(draw, spec, tuple(x.shape), FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    mask = (True, w is not None and draw(st.booleans()), draw(st.booleans()))
    if not draw(st.booleans()) and (mask[1] or mask[2]):
        mask = (False, *mask[1:])
    running = (None, None) if training else (rm, rv)
    return OpSample([dy, x, w, *running, *save],
                    {"training": training, "eps": params["eps"],
                     "output_mask": tuple(int(m) for m in mask)})


@register_inputs(N.RmsNormOp)
def _nn_rms_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, ns = _norm_case(draw, spec)
    w = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    return OpSample([x, w], {"normalized_shape": ns,
                             "eps": draw(st.sampled_from([None, 1e-6, 1e-3, 1e-2]))})


@register_inputs(N.EmbeddingOp)
def _nn_embedding(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    num, dim = _side(draw, 2, 6), _side(draw, 1, 5)
    idx = values(draw, spec.shape(draw, max_rank=2), draw(st.sampled_from([torch.int64,
                                                                          torch.int32])),
                 0, num - 1)
    weight = draw_data(draw, spec, (num, dim), FLOAT_KIND)
    return OpSample([idx, weight], {"padding_idx": draw(st.sampled_from([None, 0, 1, -1])),
                                    "scale_grad_by_freq": draw(st.booleans())})


def _group_norm_input(draw: st.DrawFn, spec: InputSpec
                      ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, Any]]:
    """``[N, C, *spatial]`` (rank 2 to 4) in float32/float64, ``C`` a multiple of the group
    count, an optional weight, and the op's sizes."""
    dtype = spec.dtype(draw, (torch.float32, torch.float64))
    group, per = _side(draw, 1, 3), _side(draw, 1, 3)
    n, spatial = _side(draw, 1, 3), [_side(draw, 1, 4) for _ in range(draw(st.integers(0, 2)))]
    x = values(draw, (n, group * per, *spatial), dtype)
    weight = values(draw, (group * per,), dtype) if draw(st.booleans()) else None
    return x, weight, {"N": n, "C": group * per, "HxW": math.prod(spatial), "group": group}


@register_inputs(N.NativeGroupNormOp)
def _nn_group_norm(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    x, weight, sizes = _group_norm_input(draw, spec)
    # (a bias without a weight: eager's backward kernel raises, and so does the VJP's)
    bias = values(draw, (sizes["C"],), x.dtype) if weight is not None and draw(
        st.booleans()) else None
    return OpSample([x, weight, bias], {**sizes, "eps": draw(st.sampled_from([1e-5, 0.1]))})


@register_inputs(N.NativeGroupNormBackwardOp)
def _nn_group_norm_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """The forward's own statistics (eager's kernel on the drawn input)."""
    x, weight, sizes = _group_norm_input(draw, spec)
    _, mean, rstd = torch.native_group_norm(x, weight, None, sizes["N"], sizes["C"],
                                            sizes["HxW"], sizes["group"], 1e-5)
    mask = draw(st.sampled_from([(1, 1, 1), (1, 0, 0), (0, 1, 1), (1, 0, 1)]))
    if weight is None:  # eager's kernel raises for any other mask
        mask = (1, 0, 0)
    dy = values(draw, tuple(x.shape), x.dtype)
    return OpSample([dy, x, mean, rstd, weight], {**sizes, "output_mask": mask})


@register_inputs(N.ScaledDotProductAttentionOp)
def _nn_sdpa(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """(B, H, L, E) queries, keys and values (3-D too), masks, causal, GQA, scale."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    kind = draw(st.sampled_from(["plain", "causal", "bool_mask", "float_mask", "gqa",
                                 "gqa_causal", "3d"]))
    b, hk = _side(draw, 1, 2), _side(draw, 1, 2)
    rep = _side(draw, 2, 3) if kind.startswith("gqa") else 1
    length, source, e, ev = _side(draw, 1, 5), _side(draw, 1, 5), _side(draw), _side(draw)
    lead_q, lead_kv = ((b, hk * rep), (b, hk)) if kind != "3d" else ((hk,), (hk,))
    q = values(draw, (*lead_q, length, e), dtype)
    k = values(draw, (*lead_kv, source, e), dtype)
    v = values(draw, (*lead_kv, source, ev), dtype)
    mask = None
    if kind.endswith("mask"):
        shapes = [(length, source), (b, 1, length, source), (1, hk * rep, length, source)]
        mshape = draw(st.sampled_from(shapes))
        if kind == "bool_mask":
            mask = values(draw, mshape, torch.bool)
            if not spec.for_vjp:
                mask[..., 0] = True  # no fully masked row: softmax of all -inf is NaN
        else:
            mask = values(draw, mshape, dtype)
    params = {"is_causal": kind.endswith("causal"),
              "scale": draw(st.sampled_from([None, 0.25])),
              "enable_gqa": kind.startswith("gqa")}
    return OpSample([q, k, v, mask], params)


def _class_targets(draw: st.DrawFn, batch: tuple[int, ...], classes: int
                   ) -> tuple[torch.Tensor, int]:
    """Class-index targets of shape ``batch``, about a third ignored (never all of them:
    an all-ignored mean is NaN), and the ``ignore_index`` (-100, or a class)."""
    ignore = draw(st.sampled_from([-100, 1]))
    target = values(draw, batch, torch.int64, 0, classes - 1)
    drop = values(draw, batch, torch.float64, 0.0, 1.0) < 0.3
    drop.view(-1)[0] = False
    target = torch.where(drop, ignore, target)
    if ignore != -100:
        target.view(-1)[0] = 0
    return target, ignore


@register_inputs(N.CrossEntropyOp)
def _nn_cross_entropy(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Class-index (with ignored targets) or class-probability targets, (C,), (N, C) and
    (N, C, d) inputs, class weights, label smoothing and every reduction.

    With ``for_vjp`` class weights come with probability targets only: torch cannot
    differentiate the weights of class-index targets.
    """
    dtype = spec.dtype(draw, FLOAT_KIND)
    classes = _side(draw, 2, 5)
    batch = draw(st.sampled_from([(), (3,), (2, 3), (4,)]))
    shape = (classes,) if not batch else (batch[0], classes, *batch[1:])
    x = values(draw, shape, dtype, -4.0, 4.0)
    probabilities = draw(st.booleans())
    params: dict[str, Any] = {"reduction": draw(st.sampled_from(["mean", "sum", "none"])),
                              "label_smoothing": draw(st.sampled_from([0.0, 0.1, 0.25]))}
    if probabilities:
        target = torch.softmax(values(draw, shape, torch.float64), dim=1 if batch else 0
                               ).to(dtype)
    else:
        target, params["ignore_index"] = _class_targets(draw, batch, classes)
    with_weight = draw(st.booleans()) and (probabilities or not spec.for_vjp)
    weight = values(draw, (classes,), dtype, 0.2, 2.0) if with_weight else None
    return OpSample([x, target, weight], params)


@register_inputs(N.MseLossOp)
def _nn_mse_loss(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Same-shape or broadcast targets, optional elementwise weights, every reduction."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    shape = spec.shape(draw)
    x = values(draw, shape, dtype)
    target = values(draw, draw(st.sampled_from([shape, shape[1:]])), dtype)
    weight = values(draw, shape, dtype, 0.1, 2.0) if draw(st.booleans()) else None
    return OpSample([x, target, weight],
                    {"reduction": draw(st.sampled_from(["mean", "sum", "none"]))})


# --------------------------------------------------------------------------- backward kernels


@register_inputs(N.SoftmaxBackwardOp, N.LogSoftmaxBackwardOp)
def _nn_softmax_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """The result of (log-)softmax of a random input, and a random cotangent."""
    shape = spec.shape(draw)
    x = draw_data(draw, spec, shape, FLOAT_KIND, -5.0, 5.0)
    r = max(x.ndim, 1)
    dim = draw(st.integers(-r, r - 1))
    log = spec.op is N.LogSoftmaxBackwardOp
    y = (torch.log_softmax if log else torch.softmax)(x.detach(), dim)
    dy = draw_data(draw, spec, shape, FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    return OpSample([dy, y],
                    {"dim": dim, "input_dtype": x.dtype})


@register_inputs(N.LayerNormBackwardOp)
def _nn_layer_norm_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """Affine or not, and every non-empty choice of gradients that the affine params
    allow. Each normalized group has at least 3 elements and a spread (a ramp added):
    with 2 (the input's gradient is then zero up to ``eps``) or a near-zero variance,
    cancellation leaves rounding beyond any fixed tolerance, in eager's kernel as in the
    decomposition."""
    x, ns = _norm_case(draw, spec)
    n = math.prod(ns)
    if n < 3:
        ns, n = (*ns[:-1], 3 * ns[-1]), 3 * n
        x = x.repeat_interleave(3, dim=-1)
    ramp = torch.linspace(-2.0, 2.0, n, dtype=torch.float64)[torch.randperm(
        n, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**16))))]
    x = (x.to(torch.float64) + ramp.reshape(ns)).to(x.dtype)
    w = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    b = values(draw, ns, x.dtype) if draw(st.booleans()) else None
    dy = draw_data(draw, spec, tuple(x.shape), FLOAT_KIND, -2.0, 2.0).to(x.dtype)
    mask = (True, w is not None and draw(st.booleans()), b is not None and draw(st.booleans()))
    if not draw(st.booleans()) and (mask[1] or mask[2]):
        mask = (False, *mask[1:])
    eps = draw(st.sampled_from([None, 1e-5, 1e-3]))
    mean = rstd = None
    if x.dtype in (torch.float32, torch.float64) and draw(st.booleans()):
        # the statistics as the forward's native_layer_norm gives them
        _, mean, rstd = torch.native_layer_norm(
            x.detach(), list(ns), None, None, 1e-5 if eps is None else eps)
    return OpSample([dy, x, w, b, mean, rstd],
                    {"normalized_shape": ns, "eps": eps,
                     "output_mask": tuple(int(m) for m in mask)})


@register_inputs(N.EmbeddingBackwardOp)
def _nn_embedding_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    num, dim = _side(draw, 2, 6), _side(draw, 1, 5)
    shape = spec.shape(draw, max_rank=2)
    idx = values(draw, shape, draw(st.sampled_from([torch.int64, torch.int32])), 0, num - 1)
    dy = draw_data(draw, spec, (*shape, dim), FLOAT_KIND)
    return OpSample([dy, idx], {"num_weights": num,
                                "padding_idx": draw(st.sampled_from([None, 0, 1])),
                                "scale_grad_by_freq": draw(st.booleans())})


def _nll_case(draw: st.DrawFn, spec: InputSpec
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, dict[str, Any]]:
    """Log-probabilities ``(C,)`` or ``(N, C)``, class-index targets (some ignored), class
    weights (not in VJP checks: torch cannot differentiate them), every reduction."""
    dtype = spec.dtype(draw, FLOAT_KIND)
    classes = _side(draw, 2, 5)
    batch = draw(st.sampled_from([(), (3,), (4,)]))
    x = values(draw, (*batch, classes), dtype, -4.0, 4.0)
    logp = torch.log_softmax(x, -1)
    reduction = draw(st.sampled_from(["mean", "sum", "none"]))
    target, ignore = _class_targets(draw, batch, classes)
    weight = values(draw, (classes,), dtype, 0.2, 2.0) \
        if not spec.for_vjp and draw(st.booleans()) else None
    return logp, target, weight, {"reduction": reduction, "ignore_index": ignore}


@register_inputs(N.NllLossForwardOp)
def _nn_nll_loss_forward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    logp, target, weight, params = _nll_case(draw, spec)
    return OpSample([logp, target, weight], params)


@register_inputs(N.NllLossBackwardOp)
def _nn_nll_loss_backward(draw: st.DrawFn, spec: InputSpec) -> OpSample:
    """The total weight as the forward's ``nll_loss_forward`` gives it."""
    logp, target, weight, params = _nll_case(draw, spec)
    total = N.nll_loss_forward(logp.detach(), target, weight, **params)[1]
    batch = logp.shape[:-1]
    dloss = values(draw, batch if params["reduction"] == "none" else (), logp.dtype, -2.0,
                   2.0)
    return OpSample([dloss, logp, target, total, weight], params)
