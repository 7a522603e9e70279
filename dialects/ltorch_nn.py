"""ltorch ops, neural-network families: linear algebra, convolution, pooling, softmax,
normalization, dropout, embedding, attention and losses (the activations, on this module's
`NNOp`, are in `thunder_ir.dialects.ltorch_activation`).

Operands are the tensor arguments in torch's order; params are the other arguments, named
as torch names them. ``SIGNATURE`` lists torch's positional order across both, and
``DEFAULTS`` torch's defaults for params. Most ops keep the default reference,
``TORCH_FN(*operands, **params)`` (so the torch executor calls torch directly); ops whose
params sit between tensor arguments (``layer_norm(input, normalized_shape, weight, bias,
eps)``) derive from `BoundCallOp`, whose `ref` binds by ``SIGNATURE`` (`NNOp.torch_args`).

Deviations from torch, on purpose:

* The dropout family is ATen's (``torch.dropout(input, p, train)``), not ``F.dropout``'s
  Python wrapper, whose checks the frontend runs as they are.
* ``scaled_dot_product_attention`` with a nonzero ``dropout_p`` draws random numbers:
  it is then not ``Pure`` (`PureWithoutDropout`), and has no decomposition (eager's
  draw happens inside ATen's math kernel, which the torch executor calls).
* ``embedding`` rejects ``max_norm`` (torch renormalizes the weight in place).
* torch's ``inplace`` flags (relu, silu, dropout) and ``F.softmax``'s ``_stacklevel`` are
  not params: the frontend drops them (``inplace=True`` is a write-back, not an op param).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute, Operation
from xdsl.irdl import (
    AttrSizedOperandSegments,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_result_def,
)
from xdsl.traits import EffectInstance, MemoryEffect, Pure

from thunder_ir.dialects import ltorch_rules as R
from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import ShapeError, ThunderOp, from_attr
from thunder_ir.dialects.ltorch_base import LtorchOp, aten_kernel, ltorch_op
from thunder_ir.dialects.symbols import INT_ARRAY, SymExprAttr, same_sizes
from thunder_ir.dialects.traits import DeviceLayout, Library, Random, Reduction
from thunder_ir.dialects.types import TensorType, is_float, tensor_type

Number = IntegerAttr | FloatAttr | SymExprAttr  # SymExprAttr: a symbolic size (x.shape[1])


_K__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL = aten_kernel("_native_batch_norm_legit_functional")
_K_CONVOLUTION_BACKWARD = aten_kernel("convolution_backward")
_K_NATIVE_GROUP_NORM = aten_kernel("native_group_norm")
_K_NATIVE_GROUP_NORM_BACKWARD = aten_kernel("native_group_norm_backward")
_K_EMBEDDING_DENSE_BACKWARD = aten_kernel("embedding_dense_backward")
_K_MAX_POOL2D_WITH_INDICES_BACKWARD = aten_kernel("max_pool2d_with_indices_backward")
_K_NATIVE_BATCH_NORM_BACKWARD = aten_kernel("native_batch_norm_backward")
_K_NATIVE_LAYER_NORM_BACKWARD = aten_kernel("native_layer_norm_backward")
_K_NLL_LOSS_BACKWARD = aten_kernel("nll_loss_backward")
_K_NLL_LOSS_FORWARD = aten_kernel("nll_loss_forward")
Bool = IntegerAttr
IntArray = INT_ARRAY  # array<i64: ...>, or [...] with a symbolic size (#prims.sym)


class NNOp(LtorchOp):
    """Base of the nn families: ``SIGNATURE`` and ``DEFAULTS`` describe torch's call."""

    SIGNATURE: ClassVar[tuple[str, ...]] = ()
    DEFAULTS: ClassVar[dict[str, Any]] = {}

    @classmethod
    def torch_args(cls, operands: Sequence[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]]:
        """Torch call arguments: positional up to the last present operand, then keywords.

        Params that are ``None`` after the positional part are left out (torch's default).
        """
        names = [n for n, _ in cls.operand_layout()]
        values = {**params, **dict(zip(names, operands))}
        sig = cls.SIGNATURE
        last = max((i for i, n in enumerate(sig) if n in names and values.get(n) is not None),
                   default=0)
        args = [values[n] if values.get(n) is not None else cls.DEFAULTS.get(n)
                for n in sig[:last + 1]]
        kwargs = {n: values[n] for n in sig[last + 1:] if values.get(n) is not None}
        return args, kwargs


class BoundCallOp(NNOp):
    """An op whose tensor arguments are not a prefix of torch's signature (a param sits
    between them), so `ref` binds through `NNOp.torch_args` instead of the default
    ``TORCH_FN(*operands, **params)``."""

    @classmethod
    def ref(cls, *operands: Any, **params: Any) -> Any:
        args, kwargs = cls.torch_args(operands, params)
        return cls.TORCH_FN(*args, **kwargs)

    @classmethod
    def torch_call(cls, op: ThunderOp, args: list[Any], params: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]] | None:
        a, kw = cls.torch_args(args, params)
        return list(a), kw


def _check_stats_dtype(name: str, x: Any) -> None:
    """Norms that return their statistics take float32 and float64 only: of lower
    precisions, the statistics' dtype depends on the device (CPU kernels return the
    input's, CUDA kernels float32)."""
    if isinstance(x, TensorType) and x.dtype not in (torch.float32, torch.float64):
        raise ShapeError(f"{name}: takes float32 or float64 input, got {x.dtype} "
                         "(whose statistics' dtype depends on the device)")


# --------------------------------------------------------------------------- linear algebra


@ltorch_op(torch.matmul, type_rule=R.matmul, symbolic=True)
class MatmulOp(NNOp):
    """`%y = ltorch.matmul %a, %b`: ``torch.matmul`` (1-D, 2-D and batched, broadcasting)"""

    name = "ltorch.matmul"

    input = operand_def(TensorType)
    other = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "other")


@ltorch_op(torch.bmm)
class BmmOp(NNOp):
    """`%y = ltorch.bmm %a, %b`: batched matmul of (b, n, m) and (b, m, p)"""

    name = "ltorch.bmm"

    input = operand_def(TensorType)
    mat2 = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "mat2")


@ltorch_op(F.linear, type_rule=R.linear, symbolic=True)
class LinearOp(NNOp):
    """`%y = ltorch.linear %x, %w[, %bias]`: ``x @ w.T + bias``"""

    name = "ltorch.linear"

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "bias")


def _aligned(t: torch.Tensor) -> bool:
    """``torch._grouped_mm``'s layout rule: 16-byte aligned data; of the last two dims
    one has stride 1 and the other a stride of a multiple of 16 bytes, as every other dim
    has; nothing empty."""
    if t.numel() == 0 or t.data_ptr() % 16:
        return False
    per = 16 // t.element_size()
    *batch, a, b = t.stride()
    inner = (b == 1 and a > 0 and a % per == 0) or (a == 1 and b > 0 and b % per == 0)
    return inner and all(s > 0 and s % per == 0 for s in batch)


def grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor
               ) -> torch.Tensor:
    """One matrix product per group, the groups ending at ``offs`` (cumulative sizes):
    ``[M, K] x [E, K, N] -> [M, N]`` splits the rows of ``input`` (one ``weight[e]`` per
    group; rows past ``offs[-1]`` are zero), ``[K, M] x [M, N] -> [E, K, N]`` the shared
    dim. ``torch._grouped_mm`` where its dtype and layout rules hold, else a loop of
    ``mm`` over the groups (transformers' ``grouped_mm_fallback``). On fake tensors (an
    Inductor region traced by ``make_fx``) it is one call of `grouped_mm_op`."""
    if isinstance(input, FakeTensor):
        return grouped_mm_op()(input, weight, offs)
    if (input.dtype in (torch.float32, torch.bfloat16) and input.device.type != "meta"
            and hasattr(torch, "_grouped_mm") and _aligned(input) and _aligned(weight)):
        out = torch._grouped_mm(input, weight, offs=offs.to(torch.int32))
        if weight.dim() == 3 and offs.numel():  # rows past the last group: torch leaves them
            if out.device.type == "cpu":
                last = int(offs[-1])
                if last < out.shape[0]:
                    out[last:] = 0
            else:  # without reading the offsets back to the host
                past = torch.arange(out.shape[0], device=out.device) >= offs[-1]
                out = out.masked_fill(past[:, None], 0)
        return out
    if offs.device.type == "meta":  # no sizes to read: the result's shape and autograd
        if weight.dim() == 3:
            return input @ weight.sum(0)
        return (input @ weight).expand(offs.shape[0], input.shape[0], weight.shape[1])
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    if weight.dim() == 3:
        parts = [input[a:b] @ weight[e] for e, (a, b) in enumerate(zip(starts, ends))]
        last = ends[-1] if ends else 0
        parts.append(input.new_zeros(input.shape[0] - last, weight.shape[2]))
        return torch.cat(parts)
    if not ends:
        return input.new_zeros(0, input.shape[0], weight.shape[1])
    return torch.stack([input[:, a:b] @ weight[a:b] for a, b in zip(starts, ends)])


_LIBRARIES: list[Any] = []


@functools.cache
def grouped_mm_op() -> Any:
    """`grouped_mm` as the torch operator ``thunder_ir::grouped_mm`` (defined on first use):
    an Inductor region holds it as one call of this function on the real tensors, whose
    group sizes it reads as it runs (the shapes do not depend on them), so the region
    does not split there and its values are the unfused program's. Defined with
    ``torch.library.Library`` and a ``CompositeExplicitAutograd`` kernel (a call costs 2
    µs over the function's own; ``torch.library.custom_op``'s wrappers cost 10)."""
    lib = torch.library.Library("thunder_ir", "FRAGMENT")
    lib.define("grouped_mm(Tensor input, Tensor weight, Tensor offs) -> Tensor",
               tags=(torch.Tag.needs_exact_strides,))
    lib.impl("grouped_mm", grouped_mm, "CompositeExplicitAutograd")
    torch.library.register_fake("thunder_ir::grouped_mm", lambda a, b, offs: a.new_empty(
        (a.shape[0], b.shape[2]) if b.dim() == 3 else (offs.shape[0], a.shape[0], b.shape[1])),
        lib=lib)
    _LIBRARIES.append(lib)  # (the operator lives as long as its library object)
    return torch.ops.thunder_ir.grouped_mm.default


@ltorch_op(grouped_mm)
class GroupedMmOp(NNOp):
    """`%y = ltorch.grouped_mm %input, %weight, %offs`: a matrix product per group of
    ``input``'s rows (``[M, K] x [E, K, N] -> [M, N]``) or of the shared dim
    (``[K, M] x [M, N] -> [E, K, N]``), the groups ending at the cumulative sizes
    ``offs`` (``[E]``, integers; read only when the op runs). Mixture-of-experts layers:
    ``torch._grouped_mm`` and transformers' ``grouped_mm_fallback``."""

    name = "ltorch.grouped_mm"

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    offs = operand_def(TensorType)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "offs")

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        """From the shapes alone (torch's meta kernel takes bfloat16 only)."""
        a, b, offs = operand_types
        if not all(isinstance(t, TensorType) for t in operand_types):
            raise ShapeError(f"{cls.name}: input, weight and offs must be tensors")
        ok = offs.rank == 1 and offs.dtype in (torch.int32, torch.int64) and (
            a.dtype == b.dtype) and a.rank == 2
        if ok and b.rank == 3 and b.sizes[0] == offs.sizes[0] and a.sizes[1] == b.sizes[1]:
            return tensor_type((a.sizes[0], b.sizes[2]), a.dtype, a.dev)
        if ok and b.rank == 2 and a.sizes[1] == b.sizes[0]:
            return tensor_type((offs.sizes[0], a.sizes[0], b.sizes[1]), a.dtype, a.dev)
        raise ShapeError(f"{cls.name}: takes [M, K] x [E, K, N] or [K, M] x [M, N] with "
                         f"int offs [E] of one dtype, got {a}, {b}, {offs}")


# --------------------------------------------------------------------------- convolution


def convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                stride: Sequence[int] = (1,), padding: Sequence[int] = (0,),
                dilation: Sequence[int] = (1,), groups: int = 1) -> torch.Tensor:
    """``F.conv1d`` / ``conv2d`` / ``conv3d`` on a batched input with explicit padding: the
    ATen op they call, so its kernel and values are theirs."""
    # torch's generated binding of the same ATen op: half the per-call cost of the
    # ``torch.ops.aten`` overload (boxed arguments) on a cached call
    return torch.convolution(input, weight, bias, stride, padding, dilation, False,
                             (0,) * len(stride), groups)


@ltorch_op(convolution, type_rule=R.convolution, symbolic=True)
class ConvolutionOp(BoundCallOp):
    """`%y = ltorch.convolution %x, %w[, %bias] {stride, padding, dilation, groups}`: an
    N-d convolution (cross-correlation) of a batched ``[N, C_in, *spatial]`` input with a
    ``[C_out, C_in / groups, *kernel]`` weight; one entry per spatial dim in each list."""

    name = "ltorch.convolution"

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    stride = prop_def(IntArray)
    padding = prop_def(IntArray)
    dilation = prop_def(IntArray)
    groups = prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    # The backend picks the result's memory format (channels-last for a channels-last
    # input or weight on the CPU).
    traits = traits_def(Pure(), Library(), DeviceLayout())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "bias", "stride", "padding",
                                             "dilation", "groups")


# --------------------------------------------------------------------------- pooling


def max_pool2d_with_indices(input: torch.Tensor, kernel_size: Sequence[int],
                            stride: Sequence[int], padding: Sequence[int],
                            dilation: Sequence[int], ceil_mode: bool
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, indices)``: 2-d max pooling of a batched input, with each maximum's
    index into its input plane (the first in the window where several are equal), as
    ``F.max_pool2d`` computes it when its input requires grad."""
    return torch._C._nn.max_pool2d_with_indices(input, tuple(kernel_size), tuple(stride),
                                                tuple(padding), tuple(dilation), ceil_mode)


@ltorch_op(max_pool2d_with_indices, type_rule=R.max_pool2d, symbolic=True)
class MaxPool2dWithIndicesOp(NNOp):
    """`%y, %indices = ltorch.max_pool2d_with_indices %x {kernel_size, stride, padding,
    dilation, ceil_mode}`: ``[N, C, H, W]`` in; the maxima and their int64 indices into
    each ``H x W`` plane out."""

    name = "ltorch.max_pool2d_with_indices"

    input = operand_def(TensorType)
    kernel_size = prop_def(IntArray)
    stride = prop_def(IntArray)
    padding = prop_def(IntArray)
    dilation = prop_def(IntArray)
    ceil_mode = prop_def(Bool)
    out = result_def(TensorType)
    indices = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "kernel_size", "stride", "padding",
                                             "dilation", "ceil_mode")


# --------------------------------------------------------------------------- softmax


class SoftmaxFamilyOp(NNOp):
    """``%y = ltorch.<op> %x {dim, dtype?}``: (log-)softmax along ``dim``, after converting
    ``x`` to ``dtype`` when given."""

    input = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    dtype = opt_prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Reduction())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "dim", "dtype")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dtype": None}


@ltorch_op(torch.softmax, type_rule=R.softmax, symbolic=True)
class SoftmaxOp(SoftmaxFamilyOp):
    """`%y = ltorch.softmax %x {dim = -1}`"""

    name = "ltorch.softmax"


@ltorch_op(torch.log_softmax, type_rule=R.softmax, symbolic=True)
class LogSoftmaxOp(SoftmaxFamilyOp):
    """`%y = ltorch.log_softmax %x {dim = -1}`"""

    name = "ltorch.log_softmax"


@ltorch_op(torch._safe_softmax)
class SafeSoftmaxOp(SoftmaxFamilyOp):
    """`%y = ltorch.safe_softmax %x {dim = -1}`: softmax, with zeros (not NaN) along rows
    that are ``-inf`` throughout (fully masked attention rows, as torch's attention kernels
    give them)"""

    name = "ltorch.safe_softmax"


# --------------------------------------------------------------------------- dropout


class DropoutFamilyOp(NNOp):
    """Eager's dropout family: ``torch.<kind>(input, p, train)`` (RNG: not ``Pure``).

    In training with ``0 < p < 1`` each draws a noise tensor from torch's default generator
    (``bernoulli_(1 - p)``; one value per channel for the feature kinds), scales it, and
    multiplies (alpha kinds also shift): the decomposition does exactly what ATen's
    ``_dropout_impl`` does, so draws and results are eager's. ``train=False``, ``p == 0``
    and empty inputs are the identity and never reach the IR (the frontend returns the
    input itself, as eager does).
    """

    input = operand_def(TensorType)
    p = prop_def(Number)
    train = prop_def(Bool)
    out = result_def(TensorType)
    traits = traits_def(Random())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "p", "train")
    FEATURE: ClassVar[bool] = False
    ALPHA: ClassVar[bool] = False


@ltorch_op(torch.dropout)
class DropoutOp(DropoutFamilyOp):
    """`%y = ltorch.dropout %x {p, train}`: zeroes elements with probability ``p`` and
    scales the rest by ``1 / (1 - p)``."""

    name = "ltorch.dropout"


@ltorch_op(torch.feature_dropout)
class FeatureDropoutOp(DropoutFamilyOp):
    """`%y = ltorch.feature_dropout %x {p, train}`: zeroes whole channels (dropout1d/2d/3d)."""

    name = "ltorch.feature_dropout"
    FEATURE: ClassVar[bool] = True


@ltorch_op(torch.alpha_dropout)
class AlphaDropoutOp(DropoutFamilyOp):
    """`%y = ltorch.alpha_dropout %x {p, train}`: SELU-preserving dropout."""

    name = "ltorch.alpha_dropout"
    ALPHA: ClassVar[bool] = True


@ltorch_op(torch.feature_alpha_dropout)
class FeatureAlphaDropoutOp(DropoutFamilyOp):
    """`%y = ltorch.feature_alpha_dropout %x {p, train}`: alpha dropout of whole channels."""

    name = "ltorch.feature_alpha_dropout"
    FEATURE: ClassVar[bool] = True
    ALPHA: ClassVar[bool] = True


# --------------------------------------------------------------------------- normalization


@ltorch_op(F.layer_norm, type_rule=R.layer_norm, symbolic=True)
class LayerNormOp(BoundCallOp):
    """`%y = ltorch.layer_norm %x[, %weight][, %bias] {normalized_shape, eps}`"""

    name = "ltorch.layer_norm"

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    normalized_shape = prop_def(IntArray)
    eps = opt_prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "normalized_shape", "weight", "bias",
                                             "eps")
    DEFAULTS: ClassVar[dict[str, Any]] = {"eps": 1e-5}


def native_layer_norm(input: torch.Tensor, normalized_shape: Sequence[int],
                      weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                      eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(out, mean, rstd)``: torch's layer-norm kernel (``F.layer_norm`` runs it too)."""
    return torch.native_layer_norm(input, normalized_shape, weight, bias, eps)


@ltorch_op(native_layer_norm, type_rule=R.native_layer_norm, symbolic=True)
class NativeLayerNormOp(BoundCallOp):
    """`%y, %mean, %rstd = ltorch.native_layer_norm %x[, %weight][, %bias]
    {normalized_shape, eps}`: layer norm and the statistics its backward reads, shaped as
    ``x`` with the normalized dims kept as 1s. The layer-norm VJP rule puts it in the
    forward. Float32 and float64 only: of float16 and bfloat16 inputs, CPU kernels return
    the statistics in the input's dtype, CUDA kernels in float32."""

    name = "ltorch.native_layer_norm"

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    normalized_shape = prop_def(IntArray)
    eps = prop_def(Number)
    out = result_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "normalized_shape", "weight", "bias",
                                             "eps")
    NO_GRAD_RESULTS: ClassVar[tuple[int, ...]] = (1, 2)
    """The statistics do not require grad (eager's neither)."""

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        _check_stats_dtype(cls.name, operand_types[0])
        return super().infer(*operand_types, **params)


def _kernel_format(x: torch.Tensor) -> torch.memory_format:
    """The layout ATen's group-norm kernels read ``x`` in: its suggested memory format on
    the CPU (C++'s ``suggest_memory_format``: channels-last stays so), else contiguous."""
    if x.device.type == "cpu" and not x.is_contiguous():
        for rank, fmt in ((4, torch.channels_last), (5, torch.channels_last_3d)):
            if x.dim() == rank and x.is_contiguous(memory_format=fmt):
                return fmt
    return torch.contiguous_format


def _dense(x: torch.Tensor) -> torch.Tensor:
    """``x`` laid out as ATen's group-norm kernels read it (`_kernel_format`)."""
    return x.contiguous(memory_format=_kernel_format(x))


def native_group_norm(input: torch.Tensor, weight: torch.Tensor | None = None,
                      bias: torch.Tensor | None = None, N: int = 0, C: int = 0, HxW: int = 0,
                      group: int = 1, eps: float = 1e-5) -> list[torch.Tensor]:
    """``[out, mean, rstd]``: torch's group-norm kernel on the input as ``torch.group_norm``
    lays it out (``F.group_norm`` runs the same)."""
    return list(_K_NATIVE_GROUP_NORM(_dense(input), weight, bias, N, C, HxW, group, eps))


@ltorch_op(native_group_norm)
class NativeGroupNormOp(NNOp):
    """`%y, %mean, %rstd = ltorch.native_group_norm %x[, %weight][, %bias] {N, C, HxW,
    group, eps}`: group norm of ``x`` (``[N, C, *]``, ``HxW`` the product of ``*``) over
    ``group`` groups of channels, and the statistics its backward reads (``[N, group]``;
    differentiable, as eager's).
    The frontend maps ``torch.group_norm`` to it (result 0), in float32 and float64 only:
    of lower precisions the statistics' dtype depends on the device."""

    name = "ltorch.native_group_norm"

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    N = prop_def(IntegerAttr)
    C = prop_def(IntegerAttr)
    HxW = prop_def(IntegerAttr)
    group = prop_def(IntegerAttr)
    eps = prop_def(Number)
    out = result_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    traits = traits_def(Pure(), Library(), DeviceLayout())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "bias", "N", "C", "HxW", "group",
                                             "eps")

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        _check_stats_dtype(cls.name, operand_types[0])
        return super().infer(*operand_types, **params)


def native_batch_norm(input: torch.Tensor, weight: torch.Tensor | None = None,
                      bias: torch.Tensor | None = None,
                      running_mean: torch.Tensor | None = None,
                      running_var: torch.Tensor | None = None, training: bool = False,
                      momentum: float = 0.1, eps: float = 1e-5) -> list[torch.Tensor]:
    """Batch norm as ``F.batch_norm`` computes it, functional: ``[out]`` in evaluation;
    in training ``[out, mean, invstd]`` (the batch statistics the backward reads), then,
    with running statistics, their updated values (eager writes them in place)."""
    if not training:  # (evaluation reads running statistics: the frontend saw to it)
        assert running_mean is not None and running_var is not None
        return [torch._native_batch_norm_legit_no_training(
            input, weight, bias, running_mean, running_var, momentum, eps)[0]]
    if running_mean is None:
        return list(torch._native_batch_norm_legit(input, weight, bias, True, momentum, eps))
    return list(_K__NATIVE_BATCH_NORM_LEGIT_FUNCTIONAL(
        input, weight, bias, running_mean, running_var, True, momentum, eps))


@ltorch_op(native_batch_norm, type_rule=R.batch_norm, symbolic=True)
class NativeBatchNormOp(NNOp):
    """`%y, %stats... = ltorch.native_batch_norm %x[, %weight][, %bias][, %running_mean,
    %running_var] {training, momentum, eps}`: batch norm over every dim but the channel
    dim (1). Results: the output; in training also the batch mean and inverse standard
    deviation (``[C]``), and with running statistics their updated values, which the
    frontend writes back to the buffers. Float32 and float64 only (as `NativeLayerNormOp`:
    the statistics' dtype of lower precisions depends on the device)."""

    name = "ltorch.native_batch_norm"

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    running_mean = opt_operand_def(TensorType)
    running_var = opt_operand_def(TensorType)
    training = prop_def(Bool)
    momentum = prop_def(Number)
    eps = prop_def(Number)
    out = result_def(TensorType)
    stats = var_result_def(TensorType)
    traits = traits_def(Pure(), Library())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "bias", "running_mean",
                                             "running_var", "training", "momentum", "eps")
    NO_GRAD_RESULTS: ClassVar[tuple[int, ...]] = (1, 2, 3, 4)
    """The statistics do not require grad (eager's neither)."""
    NO_GRAD_OPERANDS: ClassVar[tuple[str, ...]] = ("running_mean", "running_var")
    """Running statistics are buffers; eager gives them no gradient."""

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        _check_stats_dtype(cls.name, operand_types[0])
        out = super().infer(*operand_types, **params)
        return out if isinstance(out, list) else [out]

    @classmethod
    def eager_ref(cls, input: Any, weight: Any = None, bias: Any = None,
                  running_mean: Any = None, running_var: Any = None, training: bool = False,
                  momentum: float = 0.1, eps: float = 1e-5) -> Any:
        """``torch.batch_norm``, which eager runs (writing the running statistics in place):
        its backward saves the running statistics, so a later write to them makes eager's
        backward raise, and ours."""
        return torch.batch_norm(input, weight, bias, running_mean, running_var, training,
                                momentum, eps, False)


@ltorch_op(F.rms_norm)
class RmsNormOp(BoundCallOp):
    """`%y = ltorch.rms_norm %x[, %weight] {normalized_shape, eps?}`: ``eps`` absent means
    ``finfo(compute dtype).eps`` as torch."""

    name = "ltorch.rms_norm"

    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    normalized_shape = prop_def(IntArray)
    eps = opt_prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "normalized_shape", "weight", "eps")
    DEFAULTS: ClassVar[dict[str, Any]] = {"eps": None}


# --------------------------------------------------------------------------- embedding


@ltorch_op(F.embedding, type_rule=R.embedding, symbolic=True)
class EmbeddingOp(NNOp):
    """`%y = ltorch.embedding %indices, %weight {padding_idx?, ...}`: rows of ``weight``

    ``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` only matter to the backward;
    ``max_norm`` is rejected (torch renormalizes the weight in place).
    """

    name = "ltorch.embedding"

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    padding_idx = opt_prop_def(IntegerAttr | SymExprAttr)
    max_norm = opt_prop_def(Number)
    norm_type = opt_prop_def(Number)
    scale_grad_by_freq = opt_prop_def(Bool)
    sparse = opt_prop_def(Bool)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "weight", "padding_idx", "max_norm",
                                             "norm_type", "scale_grad_by_freq", "sparse")
    DEFAULTS: ClassVar[dict[str, Any]] = {"padding_idx": None, "max_norm": None,
                                          "norm_type": 2.0, "scale_grad_by_freq": False,
                                          "sparse": False}

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        if params.get("max_norm") is not None:
            raise ShapeError(f"{cls.name}: max_norm renormalizes the weight in place, which "
                             "thunder_ir does not support; renormalize the weight explicitly")
        return super().infer(*operand_types, **params)


# --------------------------------------------------------------------------- attention


class PureWithoutDropout(MemoryEffect):
    """No effects, unless the op draws dropout (a nonzero ``dropout_p``): then, like every
    random op, it is never merged, dropped or moved across another draw."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance] | None:
        p = op.properties.get("dropout_p")
        return set() if p is None or not from_attr(p) else None


@ltorch_op(F.scaled_dot_product_attention)
class ScaledDotProductAttentionOp(NNOp):
    """`%y = ltorch.scaled_dot_product_attention %q, %k, %v[, %mask] {dropout_p, is_causal,
    scale?, enable_gqa}`: ``dropout(softmax(q @ k.T * scale + mask)) @ v``"""

    name = "ltorch.scaled_dot_product_attention"

    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    attn_mask = opt_operand_def(TensorType)
    dropout_p = opt_prop_def(Number)
    is_causal = opt_prop_def(Bool)
    scale = opt_prop_def(Number)
    enable_gqa = opt_prop_def(Bool)
    out = result_def(TensorType)
    # CUDA's flash and memory-efficient kernels return the heads transposed.
    traits = traits_def(PureWithoutDropout(), Library(), DeviceLayout(always=("cuda",)))
    SIGNATURE: ClassVar[tuple[str, ...]] = ("query", "key", "value", "attn_mask", "dropout_p",
                                             "is_causal", "scale", "enable_gqa")
    DEFAULTS: ClassVar[dict[str, Any]] = {"dropout_p": 0.0, "is_causal": False, "scale": None,
                                          "enable_gqa": False}

    @classmethod
    def infer(cls, *operand_types: Any, **params: Any) -> Attribute | list[Attribute]:
        """torch's meta kernel, which also broadcasts the result with a mask of more
        dims than the scores: every CPU kernel adds the mask to the scores in place, so
        eager raises there, and so does this rule."""
        q, k, _, mask = operand_types
        if isinstance(mask, TensorType) and isinstance(q, TensorType) \
                and isinstance(k, TensorType) and q.rank >= 2 and k.rank >= 2:
            kb = list(k.sizes[:-2])
            if params.get("enable_gqa") and q.rank >= 3 and kb:
                kb[-1] = q.sizes[-3]  # grouped key heads are repeated to the query's
            try:
                scores = (*torch.broadcast_shapes(q.sizes[:-2], tuple(kb)), q.sizes[-2],
                          k.sizes[-2])
                fits = tuple(torch.broadcast_shapes(mask.sizes, scores)) == scores
            except RuntimeError:
                fits = True  # the meta kernel reports what does not broadcast
            if not fits:
                raise ShapeError(f"{cls.name}: attn_mask {list(mask.sizes)} does not "
                                 f"broadcast to the attention scores' shape {list(scores)} "
                                 "(torch adds it to them in place and raises too)")
        if symbols.current() is not None:  # fake-tensor attention costs ~100 ms a call
            fast = _attention_type(q, k, operand_types[2], bool(params.get("enable_gqa")))
            if fast is not None:
                return fast
        elif mask is None and not params.get("enable_gqa") \
                and 0.0 <= (params.get("dropout_p") or 0.0) <= 1.0:
            # (the meta kernel takes 1.5 ms; with no mask nor grouped heads, and a valid
            # dropout, what it adds to the plain rule is its errors, which need a rule)
            fast = _attention_type(*operand_types[:3])
            if fast is not None:
                return fast
        return super().infer(*operand_types, **params)


def _attention_type(q: Any, k: Any, v: Any, gqa: bool = False) -> TensorType | None:
    """Attention's result type where the rule is plain (same leading dims and dtypes,
    matching head and sequence sizes; with ``gqa``, key and value heads a static divisor
    of the query's): ``(*q.shape[:-1], v.shape[-1])``; None otherwise (the meta kernel
    decides, and raises torch's errors)."""
    if not (isinstance(q, TensorType) and isinstance(k, TensorType)
            and isinstance(v, TensorType)) or not q.rank == k.rank == v.rank >= 2 \
            or not q.dtype == k.dtype == v.dtype or not is_float(q.dtype) \
            or not q.dev == k.dev == v.dev:
        return None
    qs, ks, vs = q.sizes, k.sizes, v.sizes
    if gqa and q.rank < 3:  # (torch's error)
        return None
    if gqa and not symbols.proved_same(qs[-3:-2], ks[-3:-2]):
        hq, hk = qs[-3], ks[-3]
        if type(hq) is not int or type(hk) is not int or hk < 1 or hq % hk \
                or not symbols.proved_same(qs[:-3], ks[:-3]):
            return None
        qs = (*qs[:-3], hk, *qs[-2:])  # (compared as the grouped heads; the result's: q's)
    if not (same_sizes(qs[:-2], ks[:-2]) and same_sizes(ks[:-2], vs[:-2])
            and same_sizes(qs[-1:], ks[-1:]) and same_sizes(ks[-2:-1], vs[-2:-1])):
        return None
    return tensor_type((*q.sizes[:-1], vs[-1]), q.dtype, q.dev)


# --------------------------------------------------------------------------- losses


@ltorch_op(F.cross_entropy, type_rule=R.cross_entropy, symbolic=True)
class CrossEntropyOp(NNOp):
    """`%l = ltorch.cross_entropy %input, %target[, %weight] {ignore_index, reduction,
    label_smoothing}`: class-index (int) or class-probability (float) targets"""

    name = "ltorch.cross_entropy"

    input = operand_def(TensorType)
    target = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    size_average = opt_prop_def(Bool)
    ignore_index = opt_prop_def(IntegerAttr | SymExprAttr)
    reduce = opt_prop_def(Bool)
    reduction = opt_prop_def(StringAttr)
    label_smoothing = opt_prop_def(Number)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "target", "weight", "size_average",
                                             "ignore_index", "reduce", "reduction",
                                             "label_smoothing")
    DEFAULTS: ClassVar[dict[str, Any]] = {"size_average": None, "ignore_index": -100,
                                          "reduce": None, "reduction": "mean",
                                          "label_smoothing": 0.0}


@ltorch_op(F.mse_loss)
class MseLossOp(BoundCallOp):
    """`%l = ltorch.mse_loss %input, %target[, %weight] {reduction}`: ``(input - target)²``
    (broadcast), optionally weighted, then reduced"""

    name = "ltorch.mse_loss"

    input = operand_def(TensorType)
    target = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    size_average = opt_prop_def(Bool)
    reduce = opt_prop_def(Bool)
    reduction = opt_prop_def(StringAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "target", "size_average", "reduce",
                                             "reduction", "weight")
    DEFAULTS: ClassVar[dict[str, Any]] = {"size_average": None, "reduce": None,
                                          "reduction": "mean"}


# --------------------------------------------------------------------------- backward kernels
#
# Emitted by VJP rules (never traced from user code): each is one torch kernel that eager's
# autograd runs, where the composition it stands for is several small ops; each decomposes
# into prims for fusion executors (`thunder_ir.passes.decomp_nn`).


def softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                     input_dtype: torch.dtype) -> torch.Tensor:
    """``y * (dy - sum(dy * y, dim))`` on softmax's result ``y`` (torch's kernel)."""
    return torch._softmax_backward_data(grad_output, output, dim, input_dtype)


def log_softmax_backward(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                         input_dtype: torch.dtype) -> torch.Tensor:
    """``dy - exp(y) * sum(dy, dim)`` on log_softmax's result ``y`` (torch's kernel)."""
    return torch._log_softmax_backward_data(grad_output, output, dim, input_dtype)


class SoftmaxBackwardFamilyOp(NNOp):
    """``%dx = ltorch.<op> %grad_output, %output {dim, input_dtype}``: the gradient of
    (log-)softmax from its result, as ``input_dtype``"""

    grad_output = operand_def(TensorType)
    output = operand_def(TensorType)
    dim = prop_def(IntegerAttr | SymExprAttr)
    input_dtype = prop_def(Attribute)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Reduction())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "output", "dim", "input_dtype")


@ltorch_op(softmax_backward, type_rule=R.softmax_backward, symbolic=True)
class SoftmaxBackwardOp(SoftmaxBackwardFamilyOp):
    """`%dx = ltorch.softmax_backward %dy, %y {dim, input_dtype}`"""

    name = "ltorch.softmax_backward"


@ltorch_op(log_softmax_backward, type_rule=R.softmax_backward, symbolic=True)
class LogSoftmaxBackwardOp(SoftmaxBackwardFamilyOp):
    """`%dx = ltorch.log_softmax_backward %dy, %y {dim, input_dtype}`"""

    name = "ltorch.log_softmax_backward"


def layer_norm_backward(grad_output: torch.Tensor, input: torch.Tensor,
                        normalized_shape: Sequence[int], mean: torch.Tensor | None = None,
                        rstd: torch.Tensor | None = None, weight: torch.Tensor | None = None,
                        bias: torch.Tensor | None = None,
                        output_mask: Sequence[bool] = (True, True, True),
                        eps: float | None = None) -> list[torch.Tensor]:
    """The gradients ``output_mask`` asks for, of (input, weight, bias): torch's backward
    kernel on the forward's statistics (``native_layer_norm``'s ``mean`` and ``rstd``),
    recomputed from ``input`` when not given."""
    shape = list(normalized_shape)
    if mean is None or rstd is None:
        _, mean, rstd = torch.native_layer_norm(input, shape, weight, bias,
                                                1e-5 if eps is None else eps)
    mask = [bool(m) for m in output_mask]
    grads = _K_NATIVE_LAYER_NORM_BACKWARD(
        grad_output, input, shape, mean, rstd, weight, bias, mask)
    return [gr for gr, m in zip(grads, mask) if m]


@ltorch_op(layer_norm_backward, type_rule=R.layer_norm_backward, symbolic=True)
class LayerNormBackwardOp(BoundCallOp):
    """`%dx, %dw, %db = ltorch.layer_norm_backward %dy, %x[, %weight][, %bias][, %mean,
    %rstd] {normalized_shape, output_mask, eps?}`: one result per true entry of
    ``output_mask`` (input, weight, bias). ATen's kernel on the forward's statistics
    (``native_layer_norm``'s), recomputed from ``x`` (with ``eps``, default ``1e-5``) when
    absent."""

    name = "ltorch.layer_norm_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    mean = opt_operand_def(TensorType)
    rstd = opt_operand_def(TensorType)
    normalized_shape = prop_def(IntArray)
    eps = opt_prop_def(Number)
    output_mask = prop_def(IntArray)
    outs = var_result_def(TensorType)
    traits = traits_def(Pure(), Library())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "normalized_shape",
                                             "mean", "rstd", "weight", "bias", "output_mask",
                                             "eps")


def convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                         stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int], groups: int, output_mask: Sequence[bool]
                         ) -> list[torch.Tensor]:
    """The gradients ``output_mask`` asks for, of (input, weight, bias): torch's backward
    kernel, as eager's autograd runs it."""
    mask = [bool(m) for m in output_mask]
    grads = _K_CONVOLUTION_BACKWARD(
        grad_output, input, weight, [weight.shape[0]] if mask[2] else None, list(stride),
        list(padding), list(dilation), False, [0] * len(stride), groups, mask)
    return [gr for gr, m in zip(grads, mask) if m]


@ltorch_op(convolution_backward)
class ConvolutionBackwardOp(NNOp):
    """`%dx, %dw, %db = ltorch.convolution_backward %dy, %x, %w {stride, padding, dilation,
    groups, output_mask}`: one result per true entry of ``output_mask`` (input, weight,
    bias)."""

    name = "ltorch.convolution_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    stride = prop_def(IntArray)
    padding = prop_def(IntArray)
    dilation = prop_def(IntArray)
    groups = prop_def(IntegerAttr | SymExprAttr)
    output_mask = prop_def(IntArray)
    outs = var_result_def(TensorType)
    traits = traits_def(Pure(), Library(), DeviceLayout())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "weight", "stride",
                                             "padding", "dilation", "groups", "output_mask")


def max_pool2d_with_indices_backward(grad_output: torch.Tensor, input: torch.Tensor,
                                     indices: torch.Tensor, kernel_size: Sequence[int],
                                     stride: Sequence[int], padding: Sequence[int],
                                     dilation: Sequence[int], ceil_mode: bool
                                     ) -> torch.Tensor:
    """Each output's gradient added at its maximum's index: torch's backward kernel, as
    eager's autograd runs it."""
    return _K_MAX_POOL2D_WITH_INDICES_BACKWARD(
        grad_output, input, list(kernel_size), list(stride), list(padding), list(dilation),
        ceil_mode, indices)


@ltorch_op(max_pool2d_with_indices_backward)
class MaxPool2dWithIndicesBackwardOp(NNOp):
    """`%dx = ltorch.max_pool2d_with_indices_backward %dy, %x, %indices {kernel_size,
    stride, padding, dilation, ceil_mode}`: ``dy`` added into zeros shaped as ``x`` at
    ``indices``."""

    name = "ltorch.max_pool2d_with_indices_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    kernel_size = prop_def(IntArray)
    stride = prop_def(IntArray)
    padding = prop_def(IntArray)
    dilation = prop_def(IntArray)
    ceil_mode = prop_def(Bool)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "indices", "kernel_size",
                                             "stride", "padding", "dilation", "ceil_mode")


def native_batch_norm_backward(grad_output: torch.Tensor, input: torch.Tensor,
                               weight: torch.Tensor | None = None,
                               running_mean: torch.Tensor | None = None,
                               running_var: torch.Tensor | None = None,
                               save_mean: torch.Tensor | None = None,
                               save_invstd: torch.Tensor | None = None,
                               training: bool = False, eps: float = 1e-5,
                               output_mask: Sequence[bool] = (True, True, True)
                               ) -> list[torch.Tensor]:
    """The gradients ``output_mask`` asks for, of (input, weight, bias): torch's backward
    kernel on the forward's batch statistics (training) or the running ones (evaluation),
    as eager's autograd runs it."""
    mask = [bool(m) for m in output_mask]
    grads = _K_NATIVE_BATCH_NORM_BACKWARD(
        grad_output, input, weight, running_mean, running_var, save_mean, save_invstd,
        training, eps, mask)
    return [gr for gr, m in zip(grads, mask) if m]


@ltorch_op(native_batch_norm_backward)
class NativeBatchNormBackwardOp(NNOp):
    """`%dx, %dw, %db = ltorch.native_batch_norm_backward %dy, %x[, %weight][,
    %running_mean, %running_var][, %save_mean, %save_invstd] {training, eps,
    output_mask}`: one result per true entry of ``output_mask`` (input, weight, bias)."""

    name = "ltorch.native_batch_norm_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    running_mean = opt_operand_def(TensorType)
    running_var = opt_operand_def(TensorType)
    save_mean = opt_operand_def(TensorType)
    save_invstd = opt_operand_def(TensorType)
    training = prop_def(Bool)
    eps = prop_def(Number)
    output_mask = prop_def(IntArray)
    outs = var_result_def(TensorType)
    traits = traits_def(Pure(), Library())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "weight", "running_mean",
                                             "running_var", "save_mean", "save_invstd",
                                             "training", "eps", "output_mask")
    # eager's kernel refuses running statistics that require grad, as the forward's does
    NO_GRAD_OPERANDS: ClassVar[tuple[str, ...]] = ("running_mean", "running_var")


def native_group_norm_backward(grad_output: torch.Tensor, input: torch.Tensor,
                                mean: torch.Tensor, rstd: torch.Tensor,
                                weight: torch.Tensor | None = None, N: int = 0, C: int = 0,
                                HxW: int = 0, group: int = 1,
                                output_mask: Sequence[bool] = (True, True, True)
                                ) -> list[torch.Tensor]:
    """The gradients ``output_mask`` asks for, of (input, weight, bias): torch's backward
    kernel, on the gradient and input laid out as the forward's kernel read the input."""
    mask = [bool(m) for m in output_mask]
    x = _dense(input)
    dy = grad_output.contiguous(memory_format=_kernel_format(x))
    grads = _K_NATIVE_GROUP_NORM_BACKWARD(dy, x, mean, rstd, weight, N, C, HxW, group, mask)
    return [gr for gr, m in zip(grads, mask) if m]


@ltorch_op(native_group_norm_backward)
class NativeGroupNormBackwardOp(NNOp):
    """`%dx, %dw, %db = ltorch.native_group_norm_backward %dy, %x, %mean, %rstd[, %weight]
    {N, C, HxW, group, output_mask}`: one result per true entry of ``output_mask`` (input,
    weight, bias). Emitted by group norm's VJP rule."""

    name = "ltorch.native_group_norm_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    mean = operand_def(TensorType)
    rstd = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    N = prop_def(IntegerAttr)
    C = prop_def(IntegerAttr)
    HxW = prop_def(IntegerAttr)
    group = prop_def(IntegerAttr)
    output_mask = prop_def(IntArray)
    outs = var_result_def(TensorType)
    traits = traits_def(Pure(), Library(), DeviceLayout())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "mean", "rstd", "weight",
                                             "N", "C", "HxW", "group", "output_mask")


def embedding_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                       padding_idx: int | None = None, scale_grad_by_freq: bool | None = None
                       ) -> torch.Tensor:
    """The dense gradient of ``embedding``'s weight (torch's kernel)."""
    pad = -1 if padding_idx is None else padding_idx
    return _K_EMBEDDING_DENSE_BACKWARD(
        grad_output, indices, num_weights, pad, bool(scale_grad_by_freq))


@ltorch_op(embedding_backward)
class EmbeddingBackwardOp(NNOp):
    """`%dw = ltorch.embedding_backward %dy, %indices {num_weights, padding_idx?,
    scale_grad_by_freq?}`: each cotangent row added into row ``indices[i]`` of zeros
    ``[num_weights, ...]``; row ``padding_idx`` stays zero; ``scale_grad_by_freq`` divides
    a row by how often its index occurs"""

    name = "ltorch.embedding_backward"

    grad_output = operand_def(TensorType)
    indices = operand_def(TensorType)
    num_weights = prop_def(IntegerAttr | SymExprAttr)
    padding_idx = opt_prop_def(IntegerAttr | SymExprAttr)
    scale_grad_by_freq = opt_prop_def(Bool)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "indices", "num_weights",
                                             "padding_idx", "scale_grad_by_freq")


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def nll_loss_forward(input: torch.Tensor, target: torch.Tensor,
                     weight: torch.Tensor | None = None, reduction: str | None = None,
                     ignore_index: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, total_weight)``: torch's ``nll_loss`` kernel on log-probabilities (how
    ``cross_entropy`` ends), ``total_weight`` the summed class weights of the unignored
    targets (zero for reduction ``"none"`` on a batch)."""
    return _K_NLL_LOSS_FORWARD(input, target, weight, _REDUCTIONS[reduction or "mean"],
                               -100 if ignore_index is None else ignore_index)


@ltorch_op(nll_loss_forward, type_rule=R.nll_loss_forward, symbolic=True)
class NllLossForwardOp(NNOp):
    """`%loss, %total_weight = ltorch.nll_loss_forward %logp, %target[, %weight]
    {reduction, ignore_index}`: class-index targets, ``[N, C]`` or ``[C]`` log-probabilities.
    The cross-entropy VJP rule puts it in the forward, after ``log_softmax``, as eager's
    ``cross_entropy`` runs them."""

    name = "ltorch.nll_loss_forward"

    input = operand_def(TensorType)
    target = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    reduction = opt_prop_def(StringAttr)
    ignore_index = opt_prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    total_weight = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("input", "target", "weight", "reduction",
                                             "ignore_index")
    NO_GRAD_RESULTS: ClassVar[tuple[int, ...]] = (1,)
    """The total weight does not require grad (eager's neither)."""


def nll_loss_backward(grad_output: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                      total_weight: torch.Tensor, weight: torch.Tensor | None = None,
                      reduction: str | None = None, ignore_index: int | None = None
                      ) -> torch.Tensor:
    """The gradient of ``nll_loss_forward``'s log-probabilities (torch's kernel)."""
    return _K_NLL_LOSS_BACKWARD(grad_output, input, target, weight,
                                _REDUCTIONS[reduction or "mean"],
                                -100 if ignore_index is None else ignore_index, total_weight)


@ltorch_op(nll_loss_backward, type_rule=R.nll_loss_backward, symbolic=True)
class NllLossBackwardOp(NNOp):
    """`%dlogp = ltorch.nll_loss_backward %dloss, %logp, %target, %total_weight[, %weight]
    {reduction, ignore_index}`: ``-dloss w_t`` at each unignored target's class (divided by
    ``total_weight`` for the mean), zero elsewhere"""

    name = "ltorch.nll_loss_backward"

    grad_output = operand_def(TensorType)
    input = operand_def(TensorType)
    target = operand_def(TensorType)
    total_weight = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    reduction = opt_prop_def(StringAttr)
    ignore_index = opt_prop_def(IntegerAttr | SymExprAttr)
    out = result_def(TensorType)
    traits = traits_def(Pure(), Library())
    SIGNATURE: ClassVar[tuple[str, ...]] = ("grad_output", "input", "target", "total_weight",
                                             "weight", "reduction", "ignore_index")
    NO_GRAD_OPERANDS: ClassVar[tuple[str, ...]] = ("total_weight",)
    """Eager refuses a total weight that requires grad (it has no derivative)."""


def legacy_reduction(reduction: str | None, size_average: bool | None,
                     reduce: bool | None) -> str:
    """The reduction a loss uses, honouring torch's deprecated ``size_average``/``reduce``."""
    if size_average is not None or reduce is not None:
        from torch.nn import _reduction

        return _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    return reduction or "mean"
