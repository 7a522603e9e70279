"""The bridge into torch.autograd: thunder_ir's forward and backward as one autograd node.

`ThunderFunction` runs the augmented forward (outputs + residuals) and saves the tensor
residuals with ``save_for_backward``, so autograd frees them once the backward has run and
keeps them under ``retain_graph=True``. Its backward runs the generated backward program.
Outputs show ``grad_fn=<ThunderFunctionBackward>``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch


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


def _as_tuple(x: Any, n: int) -> tuple[Any, ...]:
    return (x,) if n == 1 else tuple(x)


class ThunderFunction(torch.autograd.Function):
    """One autograd node for a whole thunder_ir program."""

    @staticmethod
    def forward(ctx: Any, prog: TrainingProgram, *inputs: Any) -> Any:  # type: ignore[override]
        n_total = prog.n_outputs + prog.n_residuals
        res = _as_tuple(prog.forward(*inputs), n_total)
        outs, residuals = res[:prog.n_outputs], res[prog.n_outputs:]
        tensor_pos = [i for i, r in enumerate(residuals) if isinstance(r, torch.Tensor)]
        ctx.save_for_backward(*(residuals[i] for i in tensor_pos))
        ctx.others = [(i, r) for i, r in enumerate(residuals) if not isinstance(r, torch.Tensor)]
        ctx.tensor_pos = tensor_pos
        ctx.prog = prog
        if prog.nondiff_outputs:
            ctx.mark_non_differentiable(*(outs[i] for i in prog.nondiff_outputs))
        return outs if len(outs) != 1 else outs[0]

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError(
                "thunder_ir does not support double backward yet (create_graph=True or "
                "differentiating a gradient): its backward is a compiled program without "
                "its own backward. Compute higher-order gradients without thunder_ir.jit.")
        prog: TrainingProgram = ctx.prog
        saved = ctx.saved_tensors
        residuals: list[Any] = [None] * (len(saved) + len(ctx.others))
        for i, t in zip(ctx.tensor_pos, saved):
            residuals[i] = t
        for i, v in ctx.others:
            residuals[i] = v
        cts = []
        for i in prog.ct_outputs:
            g = grads[i]
            cts.append(g.contiguous() if g is not None else g)
        out = prog.backward(*residuals, *cts)
        grads_in = _as_tuple(out, prog.backward_n_outputs)
        result: list[Any] = [None] * prog.n_inputs
        for pos, g in zip(prog.grad_inputs, grads_in):
            result[pos] = g
        return (None, *result)


def make_runner(prog: TrainingProgram) -> Callable[..., Any]:
    """A callable with the forward program's calling convention that records autograd."""
    apply = ThunderFunction.apply

    def run(*inputs: Any) -> Any:
        return apply(prog, *inputs)

    return run


__all__ = ["ThunderFunction", "TrainingProgram", "make_runner", "Sequence"]
