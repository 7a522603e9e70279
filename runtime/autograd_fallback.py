"""The backward of opaque ``torch.call`` ops: torch.autograd, run inside the backward.

The frontend records torch functions that have no ltorch op as ``torch.call`` ops (the
automatic fallback). thunder_ir has no VJP rule for an arbitrary torch function, but
torch does: the ``torch.call`` rule (`thunder_ir.passes.vjp_ltorch.torch_call`) emits a
second ``torch.call`` of `call_vjp`, which re-runs the callee on the forward inputs with
the same static arguments and asks ``torch.autograd.grad`` for the input cotangents.
Recomputing in the backward costs one more forward of the callee but saves nothing
opaque between the two programs, so the forward/backward split stays ours.

Static arguments reach `call_vjp` as Python values. A ``#prims.operand<i>`` in the
original call becomes ``("$operand", i)`` (`encode_refs`): left as an operand reference,
the ``torch.call`` machinery would substitute the value itself, and `call_vjp` could not
tell two inputs bound to the same tensor apart.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder_ir.dialects.base import OperandRef
from thunder_ir.dialects.torch import resolve_callee

OPERAND = "$operand"
"""Tag of an encoded operand reference: ``("$operand", i)`` stands for input ``i``."""


def encode_refs(value: Any) -> Any:
    """Replaces each `OperandRef` ``i`` inside a static argument by ``("$operand", i)``."""
    if isinstance(value, OperandRef):
        return (OPERAND, int(value))
    if isinstance(value, tuple | list):
        return tuple(encode_refs(v) for v in value)
    return value


def decode_refs(value: Any, inputs: Sequence[Any]) -> Any:
    """The inverse of `encode_refs`: ``("$operand", i)`` becomes ``inputs[i]``."""
    if isinstance(value, tuple):
        if len(value) == 2 and value[0] == OPERAND and type(value[1]) is int:
            return inputs[value[1]]
        return tuple(decode_refs(v, inputs) for v in value)
    return value


@functools.cache
def _callee(path: str) -> Callable[..., Any]:
    return resolve_callee(path)


def call_vjp(callee: str, *values: Any, n_inputs: int, args: Sequence[Any],
             kwargs: Sequence[tuple[str, Any]], ct_outputs: Sequence[int],
             grad_inputs: Sequence[int]) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Input cotangents of ``callee(*args, **kwargs)`` by ``torch.autograd``.

    Args:
        callee: the forward call's import path (``"torch.cumsum"``).
        values: the forward call's ``n_inputs`` inputs, then one cotangent per entry of
            ``ct_outputs``.
        n_inputs: how many of ``values`` are forward inputs.
        args: the forward call's positional arguments, operands encoded (`encode_refs`).
        kwargs: its keyword arguments as ``(name, value)`` pairs, encoded the same way.
        ct_outputs: which of the callee's results the cotangents belong to.
        grad_inputs: which inputs get a cotangent (floating-point tensors).

    Returns:
        The cotangent of each input in ``grad_inputs`` (zeros where the result does not
        depend on it): the tensor itself when there is one, else a tuple.
    """
    inputs, cts, leaves = leaves_for_grad(values, n_inputs, grad_inputs)
    with torch.enable_grad():
        out = _callee(callee)(*decode_refs(tuple(args), inputs),
                              **{k: decode_refs(v, inputs) for k, v in kwargs})
    outs = out if isinstance(out, tuple | list) else (out,)
    pairs = [(outs[i], c) for i, c in zip(ct_outputs, cts)
             if isinstance(outs[i], torch.Tensor) and outs[i].requires_grad]
    return leaf_cotangents(pairs, leaves)


def leaves_for_grad(values: Sequence[Any], n_inputs: int, grad_inputs: Sequence[int]
                    ) -> tuple[list[Any], Sequence[Any], list[torch.Tensor]]:
    """Splits a backward call's values into forward inputs and cotangents, and replaces the
    inputs in ``grad_inputs`` by detached leaves that require grad (returned too)."""
    inputs = list(values[:n_inputs])
    leaves = []
    for i in grad_inputs:
        leaf = inputs[i].detach().requires_grad_(True)
        inputs[i] = leaf
        leaves.append(leaf)
    return inputs, values[n_inputs:], leaves


def leaf_cotangents(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    leaves: Sequence[torch.Tensor]) -> Any:
    """``torch.autograd.grad`` of (output, cotangent) pairs w.r.t. ``leaves``; zeros where
    an output does not depend on a leaf. The tensor itself for one leaf, else a tuple."""
    found: Sequence[torch.Tensor | None] = (None,) * len(leaves)
    if pairs:
        found = torch.autograd.grad([o for o, _ in pairs], list(leaves),
                                    [c for _, c in pairs], allow_unused=True)
    grads = tuple(torch.zeros_like(leaf) if gr is None else gr
                  for leaf, gr in zip(leaves, found))
    return grads[0] if len(grads) == 1 else grads


__all__ = ["OPERAND", "call_vjp", "decode_refs", "encode_refs", "leaf_cotangents",
           "leaves_for_grad"]
