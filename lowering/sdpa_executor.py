"""The SDPA executor: ``scaled_dot_product_attention`` with torch's fused attention kernels,
forward *and* backward.

Why: the forward already runs fused (the torch executor lowers the op to
``torch.nn.functional.scaled_dot_product_attention``), but the VJP table's rule
(`thunder_ir.passes.vjp_ltorch.scaled_dot_product_attention`) recomputes the attention
probabilities with matmul and softmax: an ``L x S`` matrix per head, in memory, in the
backward. This executor's rule instead emits one ``torch.call`` of `sdpa_backward`, which
runs torch's fused attention kernels, never materializing the probabilities.

On CPU, when torch would run its flash kernel (decided while building the joint program,
from the types, by `saves_statistics`), the rule also replaces the forward: one
``torch.call`` of `sdpa_forward_cpu` returns the output *and* the log-sum-exp, the split
saves both, and the backward is one call of `sdpa_backward_cpu`. Elsewhere `sdpa_backward`
recomputes the fused forward for the statistics, then runs the fused backward.

Which kernel runs is decided at run time, on the real tensors, by `sdpa_backward_path`:

=================  =====================================================================
path               kernels (``torch.ops.aten``)
=================  =====================================================================
``flash_cpu``      ``_scaled_dot_product_flash_attention_for_cpu`` (+ ``_backward``)
``flash_cuda``     ``_scaled_dot_product_flash_attention`` (+ ``_backward``), no mask
``efficient_cuda`` ``_scaled_dot_product_efficient_attention`` (+ ``_backward``)
``math``           ``_scaled_dot_product_attention_math`` differentiated by torch.autograd
=================  =====================================================================

torch's own selection logic decides (``torch._fused_sdp_choice`` on CPU;
``torch.backends.cuda.can_use_flash_attention``/``can_use_efficient_attention`` on CUDA),
so whatever ``torch.nn.attention.sdpa_kernel`` allows is respected. A boolean mask becomes
an additive float mask (``0``/``-inf``) as torch's dispatcher makes it; grouped-query
attention (``enable_gqa``) repeats the key/value heads and sums their gradients back;
3-D inputs gain a batch dim of one.

A floating-point mask's gradient is computed only when the mask may carry one
(`may_need_grad`: it derives from a floating-point program input). On CPU, where eager
then runs its math kernel (a learned position bias, as in Swin or T5-style models), the
VJP table's rule takes the op in float32 and float64 (`runs_math_kernel`, which asks
eager's selector; also broadcast key/value heads and 3-D inputs): the forward
becomes that kernel's steps and the backward reads the saved probabilities, with eager's
values. Otherwise the fused CPU backward, which returns no mask gradient, gives way to
the math path; memory-efficient attention on CUDA returns it itself. A causal or padding
mask built from int/bool inputs or constants costs nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.ltorch_nn import ScaledDotProductAttentionOp
from thunder_ir.dialects.symbols import hints
from thunder_ir.dialects.torch import make_call, meta_call, runtime_callee
from thunder_ir.dialects.types import TensorType, tensor_type
from thunder_ir.lowering.executors import Executor, register_executor
from thunder_ir.passes.vjp_ltorch import runs_math_kernel
from thunder_ir.passes.vjp_ltorch import scaled_dot_product_attention as attention_rule
from thunder_ir.runtime import namespace

SDPA_BACKWARD = runtime_callee("sdpa_backward")
"""The callee of the backward ``torch.call`` this executor's VJP rule emits."""
SDPA_FORWARD_CPU = runtime_callee("sdpa_forward_cpu")
SDPA_BACKWARD_CPU = runtime_callee("sdpa_backward_cpu")
"""The forward and backward callees when the statistics are saved (`saves_statistics`)."""

PATHS = ("flash_cpu", "flash_cuda", "efficient_cuda", "math")
"""The kernels `sdpa_backward` can run (see the module doc)."""

_FLASH: int = torch.nn.attention.SDPBackend.FLASH_ATTENTION.value


# --------------------------------------------------------------------------- run time


def _float_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as the additive float mask torch's dispatcher builds (True keeps)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(mask.logical_not(), float("-inf"))


def _prepare(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             attn_mask: torch.Tensor | None, enable_gqa: bool
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, int]:
    """The fused kernels' inputs: 4-D, key/value heads repeated for GQA, a float mask.

    Returns ``(q, k, v, mask, rep)`` with ``rep`` the GQA head repetition (1 without).
    """
    rep = 1
    if enable_gqa and query.dim() >= 3 and key.size(-3) != query.size(-3):
        rep = query.size(-3) // key.size(-3)
        key = key.repeat_interleave(rep, dim=-3)
        value = value.repeat_interleave(rep, dim=-3)
    if query.dim() == 3:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    return query, key, value, _float_mask(attn_mask, query.dtype), rep


def _choose(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            is_causal: bool, scale: float | None, mask_grad: bool) -> str:
    """The path for prepared inputs (see `sdpa_backward_path`)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or q.shape[:2] != k.shape[:2] \
            or k.shape[:3] != v.shape[:3]:
        return "math"
    if q.device.type == "cpu":
        if mask_grad:
            return "math"
        choice = torch._fused_sdp_choice(q, k, v, mask, 0.0, is_causal, scale=scale)
        return "flash_cpu" if choice == _FLASH else "math"
    if q.device.type == "cuda":
        params = torch.backends.cuda.SDPAParams(q, k, v, mask, 0.0, is_causal, False)
        if mask is None and not mask_grad and torch.backends.cuda.can_use_flash_attention(
                params):
            return "flash_cuda"
        if torch.backends.cuda.can_use_efficient_attention(params):
            return "efficient_cuda"
    return "math"


def _eager_math_on_cuda(query: torch.Tensor) -> bool:
    """Eager's selector picks the math kernel for inputs that are not 4-D on CUDA (its
    fused CUDA kernels take 4-D batches only), where the CPU's flash kernel takes 3-D ones
    too: the backward must then be the math kernel's, with its roundings."""
    return query.device.type == "cuda" and query.dim() != 4


def sdpa_backward_path(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attn_mask: torch.Tensor | None = None, *, is_causal: bool = False,
                       scale: float | None = None, enable_gqa: bool = False,
                       mask_grad: bool = False) -> str:
    """Which kernels `sdpa_backward` runs for these inputs: one of `PATHS`.

    CPU: ``flash_cpu`` when torch would pick its CPU flash kernel (4-D after adding a
    batch dim, equal head dims; a float or converted boolean mask is fine) and no mask
    gradient is asked for, else ``math``. CUDA: ``flash_cuda`` without a mask when flash
    attention supports the inputs (fp16/bf16, head dim, GPU), else ``efficient_cuda``
    when memory-efficient attention does (it takes a mask and gives its gradient), else
    ``math``; 3-D inputs on CUDA: ``math``, as eager's selector picks there (its fused CUDA
    kernels take 4-D inputs only). Any other device: ``math``.
    """
    if _eager_math_on_cuda(query):
        return "math"
    q, k, v, mask, _ = _prepare(query, key, value, attn_mask, enable_gqa)
    return _choose(q, k, v, mask, is_causal, scale, mask_grad and attn_mask is not None)


def _pad_last(t: torch.Tensor, multiple: int) -> torch.Tensor:
    extra = -t.size(-1) % multiple
    return t if extra == 0 else torch.nn.functional.pad(t, (0, extra))


def _flash_cuda(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                is_causal: bool, scale: float | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # As torch's dispatcher: head dims padded to a multiple of 8, the scale taken from the
    # unpadded head dim, results cut back.
    aten = torch.ops.aten
    e, ev = q.size(-1), v.size(-1)
    s = scale if scale is not None else q.size(-1) ** -0.5
    qp, kp, vp, gp = (_pad_last(t, 8) for t in (q, k, v, go))
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = \
        aten._scaled_dot_product_flash_attention(qp, kp, vp, 0.0, is_causal, False, scale=s)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
        gp, qp, kp, vp, out, lse, cum_q, cum_k, max_q, max_k, 0.0, is_causal, seed, offset,
        scale=s)
    return dq[..., :e], dk[..., :e], dv[..., :ev]


def _efficient_cuda(go: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor | None, is_causal: bool, scale: float | None,
                    mask_grad: bool) -> tuple[torch.Tensor, ...]:
    aten = torch.ops.aten
    bias = None
    if mask is not None:
        # As torch's dispatcher: the bias's rows 16-element aligned, expanded to (B, H, L, S).
        s = mask.size(-1)
        bias = _pad_last(mask, 16)[..., :s].expand(q.size(0), q.size(1), q.size(2), k.size(2))
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention(
        q, k, v, bias, True, 0.0, is_causal, scale=scale)
    dq, dk, dv, dbias = aten._scaled_dot_product_efficient_attention_backward(
        go, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, mask_grad],
        is_causal, scale=scale)
    return (dq, dk, dv, dbias) if mask_grad else (dq, dk, dv)


def _math(go: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
          attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None,
          enable_gqa: bool, mask_grad: bool) -> tuple[torch.Tensor, ...]:
    """torch's math kernel (``_safe_softmax``: fully masked rows give zeros) under autograd."""
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        inputs = [q, k, v]
        mask = attn_mask
        if mask_grad and mask is not None:
            mask = mask.detach().requires_grad_()
            inputs.append(mask)
        out, _ = torch.ops.aten._scaled_dot_product_attention_math(
            q, k, v, _float_mask(mask, query.dtype), 0.0, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)
        return tuple(torch.autograd.grad(out, inputs, go))


def _sum_to(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sums a broadcast gradient back to ``shape`` (numpy broadcasting rules)."""
    lead = t.dim() - len(shape)
    dims = [*range(lead), *(lead + i for i, s in enumerate(shape)
                            if s == 1 and t.size(lead + i) != 1)]
    return (t.sum(dims, keepdim=True) if dims else t).reshape(shape)


@namespace.export
def sdpa_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, attn_mask: torch.Tensor | None = None, *,
                  is_causal: bool = False, scale: float | None = None,
                  enable_gqa: bool = False, mask_grad: bool = False
                  ) -> tuple[torch.Tensor, ...]:
    """``(dq, dk, dv)`` of ``scaled_dot_product_attention`` with torch's fused kernels, and
    the float mask's gradient after them when ``mask_grad``.

    Recomputes the forward with the fused kernel that returns the log-sum-exp, then runs
    that kernel's backward. Paths (chosen by `sdpa_backward_path`):

    * ``flash_cpu``: ``_scaled_dot_product_flash_attention_for_cpu`` and its ``_backward``;
      a mask (boolean ones converted to ``0``/``-inf``) and ``is_causal`` go to the kernel.
    * ``flash_cuda``: ``_scaled_dot_product_flash_attention`` and its ``_backward`` (no
      mask; head dims padded to a multiple of 8 as torch does).
    * ``efficient_cuda``: ``_scaled_dot_product_efficient_attention`` and its
      ``_backward``, the mask as an aligned, expanded bias (whose gradient it also gives).
    * ``math``, the fallback where no fused kernel supports the case (float64 on CUDA,
      unequal head dims, other devices, non-4-D batches, and a mask gradient on CPU, which
      the CPU flash backward does not compute): torch's math kernel under autograd.

    With ``enable_gqa`` the key/value heads are repeated for the fused kernels and their
    gradients summed back per group.
    """
    mask_grad = mask_grad and attn_mask is not None
    q, k, v, mask, rep = _prepare(query, key, value, attn_mask, enable_gqa)
    path = "math" if _eager_math_on_cuda(query) else _choose(q, k, v, mask, is_causal, scale,
                                                               mask_grad)
    if path == "math":
        return _math(grad_out, query, key, value, attn_mask, is_causal, scale, enable_gqa,
                     mask_grad)
    go = grad_out.unsqueeze(0) if grad_out.dim() == 3 else grad_out
    grads: tuple[torch.Tensor, ...]
    if path == "flash_cpu":
        aten = torch.ops.aten
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, attn_mask=mask, scale=scale)
        grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            go.contiguous(), q, k, v, out, lse, 0.0, is_causal, attn_mask=mask, scale=scale)
    elif path == "flash_cuda":
        grads = _flash_cuda(go, q, k, v, is_causal, scale)
    else:
        grads = _efficient_cuda(go, q, k, v, mask, is_causal, scale, mask_grad)
    dq, dk, dv = grads[:3]
    if query.dim() == 3:
        dq, dk, dv = dq.squeeze(0), dk.squeeze(0), dv.squeeze(0)
    if rep > 1:
        dk = dk.unflatten(-3, (-1, rep)).sum(-3)
        dv = dv.unflatten(-3, (-1, rep)).sum(-3)
    if mask_grad:
        assert attn_mask is not None
        return dq, dk, dv, _sum_to(grads[3], attn_mask.shape).to(attn_mask.dtype)
    return dq, dk, dv


@namespace.export
def sdpa_forward_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: torch.Tensor | None = None, *, is_causal: bool = False,
                     scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, logsumexp)`` of CPU flash attention: the output
    ``scaled_dot_product_attention`` gives, and the statistics its backward needs."""
    out, lse = torch._scaled_dot_product_flash_attention_for_cpu(  # (torch's binding)
        query, key, value, 0.0, is_causal, attn_mask=_float_mask(attn_mask, query.dtype),
        scale=scale)
    return out, lse


@namespace.export
def sdpa_backward_cpu(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, out: torch.Tensor, logsumexp: torch.Tensor,
                      attn_mask: torch.Tensor | None = None, *, is_causal: bool = False,
                      scale: float | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of CPU flash attention from the saved output and log-sum-exp."""
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, 0.0, is_causal,
        attn_mask=_float_mask(attn_mask, query.dtype), scale=scale)
    return dq, dk, dv


# --------------------------------------------------------------------------- the VJP rule


def saves_statistics(q: SSAValue, k: SSAValue, v: SSAValue, attn_mask: SSAValue | None,
                     is_causal: bool, scale: float | None, mask_grad: bool | None = None
                     ) -> bool:
    """True when torch runs CPU flash attention for operands of these types (4-D, equal
    batch and head counts, no mask gradient): then the forward can keep the log-sum-exp
    for the backward (`sdpa_forward_cpu`). Asks torch's own selector on empty tensors of
    the operands' shapes and dtypes. ``mask_grad``: whether the mask needs a gradient
    (default: whether it may, `may_need_grad`)."""
    types = [x.type for x in (q, k, v)] + ([attn_mask.type] if attn_mask is not None else [])
    tensors = [t for t in types if isinstance(t, TensorType) and t.dev == "cpu"]
    if len(tensors) != len(types):
        return False
    tq, tk, tv = tensors[:3]
    if tq.rank != 4 or tk.rank != 4 or tv.rank != 4 or tq.sizes[:2] != tk.sizes[:2] \
            or tk.sizes[:3] != tv.sizes[:3]:
        return False
    if attn_mask is not None and (may_need_grad(attn_mask) if mask_grad is None else mask_grad):
        return False
    empty = [torch.empty(hints(t.sizes), dtype=t.dtype) for t in tensors]
    mask = _float_mask(empty[3], tq.dtype) if attn_mask is not None else None
    choice = torch._fused_sdp_choice(empty[0], empty[1], empty[2], mask, 0.0, is_causal,
                                     scale=scale)
    return bool(choice == _FLASH)


def _emit_call(g: Any, callee: str, operands: list[SSAValue], kwargs: dict[str, Any],
               result_types: list[Any] | None = None,
               layout: bool | tuple[int, ...] | None = None) -> Any:
    """A pure ``torch.call`` of ``callee`` on ``operands`` (passed positionally), tagged
    with the forward op's source location. Without ``result_types``, the meta run that
    gives them is made once per callee, operand types and ``kwargs`` (the layers of a
    model repeat their attention). ``layout``: as `make_call` takes it."""
    args = [OperandRef(i) for i in range(len(operands))]
    if result_types is None:
        static = symbols.current() is None  # (symbolic types belong to one compilation)
        key = (callee, tuple(o.type for o in operands), tuple(sorted(kwargs.items())))
        known = _CALL_TYPES.get(key) if static else None
        if known is None:
            meta = meta_call(callee, operands, args, kwargs)
            known = (meta.result_types, meta.layout)
            if static:
                _CALL_TYPES[key] = known
        result_types, layout = known
    call = make_call(callee, operands, args, kwargs, result_types=result_types, pure=True,
                     layout=layout)
    if g.emitter.loc is not None:
        call.location = g.emitter.loc
    return call


_CALL_TYPES: dict[Any, tuple[list[Any], tuple[int, ...] | None]] = {}


def _forward_cpu_types(q: TensorType, v: TensorType) -> list[TensorType]:
    """The types of `sdpa_forward_cpu`'s output and log-sum-exp, for operands torch runs
    CPU flash attention on (`saves_statistics`): the queries' sizes with the values' head
    size, in their dtype; the queries' sizes but the last, in float32 for half types
    (without a meta run: its Python meta kernel imports ``torch._dynamo``)."""
    half = q.dtype in (torch.float16, torch.bfloat16)
    return [tensor_type((*q.sizes[:-1], v.sizes[-1]), q.dtype, q.dev),
            tensor_type(q.sizes[:-1], torch.float32 if half else q.dtype, q.dev)]


def _attention_kwargs(is_causal: bool, scale: float | None) -> dict[str, Any]:
    return {"is_causal": is_causal} if scale is None else {"is_causal": is_causal,
                                                            "scale": float(scale)}


def _sdpa_vjp_saving(g: Any, out: SSAValue, ct: SSAValue, q: SSAValue, k: SSAValue,
                     v: SSAValue, attn_mask: SSAValue | None, is_causal: bool,
                     scale: float | None) -> list[Any]:
    """The rule's CPU flash form: the forward op's result is replaced by the output of one
    `sdpa_forward_cpu` call placed just before it (the old op is left to DCE); the
    backward is one `sdpa_backward_cpu` call reading the saved output and log-sum-exp."""
    fwd_op = out.owner
    assert isinstance(fwd_op, Operation)
    mask = [attn_mask] if attn_mask is not None else []
    kwargs = _attention_kwargs(is_causal, scale)
    fwd = _emit_call(g, SDPA_FORWARD_CPU, [q, k, v, *mask], kwargs,
                     result_types=_forward_cpu_types(q.type, v.type), layout=True)
    g.replace_forward(fwd_op, fwd, fwd.results[:1])
    new_out, lse = fwd.results
    bwd = _emit_call(g, SDPA_BACKWARD_CPU, [ct, q, k, v, new_out, lse, *mask], kwargs,
                     result_types=[q.type, k.type, v.type])
    g.emitter.insert(bwd)
    return [*bwd.results, None]


def may_need_grad(v: SSAValue) -> bool:
    """False when ``v`` provably carries no gradient: it is not a floating-point tensor, or
    every path back from it ends in constants, int/bool values or ops declared not
    differentiable. True otherwise (a floating-point program input may require grad).

    VJP rules are not told which values are active, so a rule that must decide *now*
    whether to compute an operand's cotangent uses this conservative test.
    """
    from xdsl.ir import BlockArgument

    from thunder_ir.dialects.traits import has_no_derivative
    from thunder_ir.passes.vjp import is_differentiable_value

    seen: set[SSAValue] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x in seen or not is_differentiable_value(x):
            continue
        seen.add(x)
        if isinstance(x, BlockArgument):
            return True
        owner = x.owner
        if isinstance(owner, Operation) and not has_no_derivative(owner):
            stack.extend(owner.operands)
    return False


def sdpa_vjp(g: Any, out: list[SSAValue], ct: list[SSAValue | None], q: SSAValue,
             k: SSAValue, v: SSAValue, attn_mask: SSAValue | None,
             dropout_p: float | None = None, is_causal: bool | None = None,
             scale: float | None = None, enable_gqa: bool | None = None) -> list[Any]:
    """The VJP of ``ltorch.scaled_dot_product_attention`` through `sdpa_backward`.

    Emits ``dq, dk, dv = sdpa_backward(ct, q, k, v[, mask], is_causal=…, scale=…,
    enable_gqa=…)``. A floating-point mask that carries a gradient (`may_need_grad`, and
    autodiff's ``g.active``: it depends on an input that requires grad) adds
    ``mask_grad=True`` and a fourth result, its cotangent.
    """
    if dropout_p:
        raise ValueError(f"{ScaledDotProductAttentionOp.name}: sdpa_vjp has no dropout; the "
                         "VJP table's attention rule handles dropout_p > 0")
    if runs_math_kernel(g, q, k, v, attn_mask, 0.0, bool(is_causal), scale, bool(enable_gqa)):
        # eager runs its math kernel (on CPU: a mask that requires grad, broadcast heads,
        # 3-D inputs): the table's rule writes that kernel's steps and saves the
        # probabilities, as eager's autograd does
        return attention_rule(g, out, ct, q, k, v, attn_mask, dropout_p, is_causal, scale,
                              enable_gqa)
    assert ct[0] is not None
    mask_grad = attn_mask is not None and may_need_grad(attn_mask) and g.active(attn_mask)
    if saves_statistics(q, k, v, attn_mask, bool(is_causal), scale, mask_grad):
        return _sdpa_vjp_saving(g, out[0], ct[0], q, k, v, attn_mask, bool(is_causal), scale)
    operands = [ct[0], q, k, v] + ([attn_mask] if attn_mask is not None else [])
    kwargs = {**_attention_kwargs(bool(is_causal), scale), "enable_gqa": bool(enable_gqa)}
    result_types = [q.type, k.type, v.type]
    if mask_grad:
        assert attn_mask is not None
        kwargs["mask_grad"] = True
        result_types.append(attn_mask.type)
    call = _emit_call(g, SDPA_BACKWARD, operands, kwargs, result_types)
    g.emitter.insert(call)  # prebuilt: a torch.call has no shape rule to build it from
    grads: list[Any] = list(call.results)
    return grads if mask_grad else [*grads, None]


# --------------------------------------------------------------------------- the executor


class SdpaExecutor(Executor):
    """Claims ``scaled_dot_product_attention``: the fused forward (as the torch executor
    lowers it) and the fused backward of `sdpa_backward`. Available everywhere."""

    name = "sdpa"
    version = torch.__version__

    def can_claim(self, op: Any) -> bool:
        """True for ``ltorch.scaled_dot_product_attention`` on tensors."""
        return isinstance(op, ScaledDotProductAttentionOp) and all(
            isinstance(o.type, TensorType) for o in op.operands)

    def vjp_rule(self, op: Operation) -> Callable[..., Any] | None:
        """`sdpa_vjp` for attention ops without dropout; None (the table) for everything
        else (the table's rule computes attention with dropout as eager's math kernel
        does, and saves what its backward reads)."""
        if not isinstance(op, ScaledDotProductAttentionOp) or op.params()["dropout_p"]:
            return None
        return sdpa_vjp


register_executor(SdpaExecutor(), default=True, priority=0)

__all__ = ["PATHS", "SDPA_BACKWARD", "SDPA_BACKWARD_CPU", "SDPA_FORWARD_CPU", "SdpaExecutor",
           "may_need_grad", "saves_statistics", "sdpa_backward", "sdpa_backward_cpu",
           "sdpa_backward_path", "sdpa_forward_cpu", "sdpa_vjp"]
