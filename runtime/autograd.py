"""The bridge into torch.autograd: thunder_ir's forward and backward as one autograd node.

`ThunderFunction` runs the augmented forward (outputs + residuals) and saves the tensor
residuals with ``save_for_backward``, so autograd frees them once the backward has run and
keeps them under ``retain_graph=True``. A residual that is the autograd graph of an opaque
torch call (`thunder_ir.runtime.autograd_fallback.GradHandle`) is saved the same way,
through its tensors. Its backward runs the generated backward program. Outputs show
``grad_fn=<ThunderFunctionBackward>``.

Gradients are ``None`` where eager's are: autograd hands the backward ``None`` for outputs
that did not reach the loss (grads are not materialized), and an input whose dependent
outputs all got ``None`` gets ``None``; the program sees zeros for the others' missing
cotangents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_ir.runtime.autograd_fallback import GradHandle


@dataclass
class TrainingProgram:
    """What the bridge needs from a compiled training program."""

    forward: Callable[..., Any]
    backward: Callable[..., Any]
    n_inputs: int
    n_outputs: int
    n_residuals: int
    grad_inputs: list[int]
    ct_outputs: list[int]
    nondiff_outputs: list[int]
    backward_n_outputs: int
    reaches: list[tuple[int, ...]] = field(default_factory=list)
    ct_meta: list[tuple[tuple[int, ...], torch.dtype, str]] = field(default_factory=list)
    tensor_residuals: bool = False
    """Every residual is typed a tensor (no opaque call's graph, no number): they are
    saved as they come, without sorting them per call."""


def _as_tuple(x: Any, n: int) -> tuple[Any, ...]:
    return (x,) if n == 1 else tuple(x)


class ThunderFunction(torch.autograd.Function):
    """One autograd node for a whole thunder_ir program."""

    @staticmethod
    def forward(ctx: Any, prog: TrainingProgram, *inputs: Any) -> Any:  # type: ignore[override]
        n_total = prog.n_outputs + prog.n_residuals
        res = _as_tuple(prog.forward(*inputs), n_total)
        outs, residuals = res[:prog.n_outputs], res[prog.n_outputs:]
        ctx.prog = prog
        ctx.set_materialize_grads(False)
        if prog.tensor_residuals:
            ctx.save_for_backward(*residuals)
            ctx.layout = None
        else:
            _save_mixed(ctx, residuals)
        if prog.nondiff_outputs:
            outs = _mark_nondiff(ctx, prog, outs)
        return outs if len(outs) != 1 else outs[0]

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError(
                "thunder_ir does not support double backward yet (create_graph=True or "
                "differentiating a gradient): its backward is a compiled program without "
                "its own backward. Compute higher-order gradients without thunder_ir.jit.")
        prog: TrainingProgram = ctx.prog
        result: list[Any] = [None] * (prog.n_inputs + 1)
        present = [grads[i] is not None for i in prog.ct_outputs]
        if not any(present):
            return tuple(result)
        residuals = ctx.saved_tensors if ctx.layout is None else _unpack_mixed(ctx)
        cts = []
        for i, p in zip(prog.ct_outputs, present):
            g = grads[i]
            if p:
                cts.append(g.contiguous())
            else:  # the program wants a cotangent for every output it differentiates
                shape, dtype, device = prog.ct_meta[len(cts)]
                cts.append(torch.zeros(shape, dtype=dtype, device=device))
        out = prog.backward(*residuals, *cts)
        grads_in = _as_tuple(out, prog.backward_n_outputs)
        every = all(present)
        for pos, g, reach in zip(prog.grad_inputs, grads_in, prog.reaches):
            if reach and (every or any(present[j] for j in reach)):
                result[pos + 1] = g
        return tuple(result)


def _save_mixed(ctx: Any, residuals: Sequence[Any]) -> None:
    """Saves tensors, opaque calls' graphs (through their tensors) and other values."""
    saved: list[torch.Tensor] = []
    layout: list[tuple[int, Any, int]] = []  # (residual index, handle or None, count)
    others = []
    for i, r in enumerate(residuals):
        if isinstance(r, torch.Tensor):
            saved.append(r)
            layout.append((i, None, 1))
        elif isinstance(r, GradHandle):
            ts = r.tensors()
            saved.extend(ts)
            layout.append((i, r, len(ts)))
        else:
            others.append((i, r))
    ctx.save_for_backward(*saved)
    ctx.layout = layout
    ctx.others = others


def _unpack_mixed(ctx: Any) -> list[Any]:
    """The residuals `_save_mixed` saved, in their order."""
    saved = ctx.saved_tensors
    residuals: list[Any] = [None] * (len(ctx.layout) + len(ctx.others))
    k = 0
    for i, handle, n in ctx.layout:
        residuals[i] = saved[k] if handle is None else handle.from_tensors(saved[k:k + n])
        k += n
    for i, v in ctx.others:
        residuals[i] = v
    return residuals


def _mark_nondiff(ctx: Any, prog: TrainingProgram, outs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Marks the outputs that carry no gradient non-differentiable (returns the outputs,
    some replaced by aliases of their own)."""
    diff = {id(outs[i]) for i in prog.ct_outputs}
    if any(id(outs[i]) in diff or outs[i]._is_view() for i in prog.nondiff_outputs):
        # A tensor that is also a differentiable output (x.sin() and
        # x.sin().detach(), merged), or a view of an input (x.detach()[0]): autograd
        # would let it require grad; an alias of its own does not.
        nd = set(prog.nondiff_outputs)
        outs = tuple(o.detach() if i in nd and (id(o) in diff or o._is_view()) else o
                     for i, o in enumerate(outs))
    ctx.mark_non_differentiable(*(outs[i] for i in prog.nondiff_outputs))
    return outs


def _direct_apply() -> Callable[..., Any] | None:
    """``ThunderFunction``'s C++ ``apply`` without ``Function.apply``'s Python steps (a
    quarter of a small program's cached call), or None where this torch lacks one of
    them. Its result is called only while no functorch transform is active, on inputs
    with functorch's dead wrappers unwrapped: what ``Function.apply`` does then."""
    try:
        c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, ThunderFunction)
        from torch._functorch.utils import unwrap_dead_wrappers
        active = torch._C._are_functorch_transforms_active
    except (AttributeError, ImportError, KeyError):  # pragma: no cover - torch build
        return None
    apply = ThunderFunction.apply

    def run(prog: TrainingProgram, inputs: tuple[Any, ...]) -> Any:
        if active():
            return apply(prog, *inputs)
        return c_apply(prog, *unwrap_dead_wrappers(inputs))

    return run


_APPLY = _direct_apply()


def make_runner(prog: TrainingProgram, enable_grad: bool = False) -> Callable[..., Any]:
    """A callable with the forward program's calling convention that records autograd.

    ``enable_grad``: record even when called with grad mode off (the traced code turned it
    on itself, with ``torch.enable_grad()``)."""
    direct = _APPLY
    if direct is None:
        fn_apply = ThunderFunction.apply

        def run(*inputs: Any) -> Any:
            return fn_apply(prog, *inputs)
    else:
        def run(*inputs: Any) -> Any:
            return direct(prog, inputs)

    if not enable_grad:
        return run

    def run_with_grad(*inputs: Any) -> Any:
        with torch.enable_grad():
            return run(*inputs)

    return run_with_grad


__all__ = ["ThunderFunction", "TrainingProgram", "make_runner", "Sequence"]
