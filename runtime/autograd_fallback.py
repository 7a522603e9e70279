"""The backward of opaque ``torch.call`` ops: torch.autograd's own graph, saved by the forward.

The frontend records torch functions that have no ltorch op as ``torch.call`` ops (the
automatic fallback). thunder_ir has no VJP rule for an arbitrary torch function, but
torch does. When a training program differentiates such a call, its forward runs the
callee through `call_with_grad`: on detached copies of the inputs that need gradients,
with grad mode on, so torch records its autograd graph. The call returns its outputs
(detached) and a `GradHandle` holding that graph; the backward's `handle_vjp` asks
``torch.autograd.grad`` for the input cotangents through it.

So the backward uses exactly what the forward computed: the same random draws
(``dropout2d``, ``rrelu``, ``fractional_max_pool2d``…), the same kernels, and each
callee runs once (``batch_norm`` updates its running statistics once). The graph holds
what eager's would, and is freed with the training step's other saved tensors (the
bridge saves the handle's tensors with ``ctx.save_for_backward``).

Static arguments reach `call_with_grad` as Python values. A ``#prims.operand<i>`` in the
original call becomes ``("$operand", i)`` (`encode_refs`): left as an operand reference,
the ``torch.call`` machinery would substitute the value itself, and `call_with_grad`
could not put its differentiable copies in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder_ir.dialects.torch import OPERAND, encode_refs, resolve_callee

COPIED = "$copied"
"""The tag `call_on_copies` uses, so that a `call_with_grad` around it leaves its refs."""


def decode_refs(value: Any, inputs: Sequence[Any], tag: str = OPERAND) -> Any:
    """The inverse of `encode_refs`: ``(tag, i)`` becomes ``inputs[i]``."""
    if isinstance(value, tuple):
        if len(value) == 2 and value[0] == tag and type(value[1]) is int:
            return inputs[value[1]]
        return tuple(decode_refs(v, inputs, tag) for v in value)
    return value


@functools.cache
def _callee(path: str) -> Callable[..., Any]:
    return resolve_callee(path)


def _tensors_of(out: Any, layout: Sequence[int] | bool | None) -> list[Any]:
    """A callee's tensors, by ``torch.call``'s ``multi``: ``None`` one, ``True`` all of a
    sequence, else those marked 1."""
    if layout is None:
        return [out]
    if isinstance(layout, bool):
        return list(out)
    return [o for o, k in zip(out, layout, strict=True) if k]


class GradHandle:
    """The autograd graph of one opaque call: the outputs that carry gradients (by their
    position among the callee's outputs) and the leaves standing for its inputs."""

    __slots__ = ("leaves", "outputs", "positions")

    def __init__(self, outputs: Sequence[torch.Tensor], positions: Sequence[int],
                 leaves: Sequence[torch.Tensor]) -> None:
        self.outputs = tuple(outputs)
        self.positions = tuple(positions)
        self.leaves = tuple(leaves)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """What the bridge saves for the backward (`from_tensors` rebuilds the handle)."""
        return (*self.outputs, *self.leaves)

    def from_tensors(self, tensors: Sequence[torch.Tensor]) -> GradHandle:
        n = len(self.outputs)
        return GradHandle(tensors[:n], self.positions, tensors[n:])


def record_graph(fn: Callable[[list[Any]], Any], inputs: Sequence[Any],
                 grad_inputs: Sequence[int], layout: Sequence[int] | bool | None
                 ) -> tuple[list[Any], GradHandle]:
    """The one way a torch-computed op gets its gradient: runs ``fn(values)`` with grad
    mode on, the inputs in ``grad_inputs`` replaced by detached leaves that require grad,
    so that torch records its autograd graph. Returns the tensors ``fn`` returned (by
    ``layout``, as `call_with_grad`'s) and the `GradHandle` of that graph, which
    `handle_vjp` differentiates.

    Opaque calls record in the forward (`call_with_grad`: the backward then uses the
    forward's own draws and side effects); extension operators without a grad transform
    record in the backward, re-running their pure ``fn`` (``thunder_ir.extend``'s
    ``operator_vjp``), so the forward keeps the operator claimable by executors."""
    vals = list(inputs)
    leaves = []
    for i in grad_inputs:
        leaf = vals[i].detach().requires_grad_(True)
        vals[i] = leaf
        leaves.append(leaf)
    with torch.enable_grad():
        out = fn(vals)
    outs = _tensors_of(out, layout)
    graph = [(i, o) for i, o in enumerate(outs) if o.requires_grad]
    return outs, GradHandle([o for _, o in graph], [i for i, _ in graph], leaves)


def call_with_grad(callee: str, *inputs: Any, args: Sequence[Any],
                   kwargs: Sequence[tuple[str, Any]], grad_inputs: Sequence[int],
                   layout: Sequence[int] | bool | None) -> tuple[Any, ...]:
    """Runs ``callee`` recording its autograd graph for the inputs in ``grad_inputs``
    (`record_graph`).

    Args:
        callee: the call's import path (``"torch.cumsum"``).
        inputs: the call's operands.
        args: its positional arguments, operands encoded (`encode_refs`).
        kwargs: its keyword arguments as ``(name, value)`` pairs, encoded the same way.
        grad_inputs: the operands that need gradients.
        layout: as ``torch.call``'s ``multi``: ``None`` for one returned tensor, ``True``
            for a sequence of tensors, else 1 per tensor and 0 per ``None`` of the
            returned sequence.

    Returns:
        The call's tensors (detached), then a `GradHandle`.
    """
    fn = _callee(callee)
    outs, handle = record_graph(
        lambda vals: fn(*decode_refs(tuple(args), vals),
                        **{k: decode_refs(v, vals) for k, v in kwargs}),
        inputs, grad_inputs, layout)
    return (*(o.detach() for o in outs), handle)


def handle_vjp(handle: GradHandle, *cts: torch.Tensor | None, ct_outputs: Sequence[int]
               ) -> Any:
    """Input cotangents of a recorded call (`record_graph`) through its graph.

    Args:
        handle: the call's `GradHandle`.
        cts: one cotangent per entry of ``ct_outputs``.
        ct_outputs: which of the call's tensors the cotangents belong to.

    Returns:
        The cotangent of each of the call's ``grad_inputs`` (zeros where no output depends
        on it): the tensor itself for one, else a tuple.
    """
    where = dict(zip(handle.positions, handle.outputs))
    pairs = [(where[i], c) for i, c in zip(ct_outputs, cts) if i in where and c is not None]
    return leaf_cotangents(pairs, handle.leaves)


def leaf_cotangents(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    leaves: Sequence[torch.Tensor]) -> Any:
    """``torch.autograd.grad`` of (output, cotangent) pairs w.r.t. ``leaves``; zeros where
    an output does not depend on a leaf. The tensor itself for one leaf, else a tuple.

    The graph is retained: a second backward of the step (``retain_graph=True``) reads it
    again; it is freed with the handle."""
    found: Sequence[torch.Tensor | None] = (None,) * len(leaves)
    if pairs:
        # torch.autograd.grad without its Python checks of the cotangents' shapes (symbolic
        # comparisons that cost more than a small graph's backward): the program gives
        # each output a cotangent of the output's own type.
        found = _run_backward(tuple(o for o, _ in pairs), tuple(c for _, c in pairs),
                              True, False, tuple(leaves), True, False)
    grads = tuple(torch.zeros_like(leaf) if gr is None else gr
                  for leaf, gr in zip(leaves, found))
    return grads[0] if len(grads) == 1 else grads


_run_backward = torch.autograd.Variable._execution_engine.run_backward  # type: ignore[attr-defined]
"""The autograd engine's entry (``outputs, cotangents, retain_graph, create_graph, inputs,
allow_unused, accumulate_grad``), as ``torch.autograd.grad`` calls it."""


def call_on_copies(callee: str, *inputs: Any, args: Sequence[Any],
                   kwargs: Sequence[tuple[str, Any]], mutated: Sequence[int],
                   layout: Sequence[int] | bool | None) -> tuple[Any, ...]:
    """Runs ``callee`` with copies of the inputs it writes into (``out=``,
    ``batch_norm``'s running statistics): the functional form of a call with side effects.
    Returns its tensors, then the written copies (the program writes them back where the
    originals came from). ``args``, ``kwargs`` and ``layout`` as for `call_with_grad`, refs
    encoded with the `COPIED` tag."""
    vals = list(inputs)
    for i in mutated:
        vals[i] = vals[i].clone()
    out = _callee(callee)(*decode_refs(tuple(args), vals, COPIED),
                          **{k: decode_refs(v, vals, COPIED) for k, v in kwargs})
    return (*_tensors_of(out, layout), *(vals[i] for i in mutated))


def no_derivative(message: str, *cts: torch.Tensor) -> Any:
    """The backward of an op that eager cannot differentiate: raises eager's error when
    (and only when) a gradient flows through it, as eager does."""
    raise RuntimeError(message)


def inplace_on_copy(callee: str, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The in-place torch function ``callee`` (``torch.Tensor.uniform_``, ``torch.zero_``)
    applied to a copy of ``x``: the functional form of an in-place op that has none. The
    copy has ``x``'s strides, so random draws land where eager puts them."""
    out = x.clone()
    _callee(callee)(out, *args, **kwargs)
    return out


__all__ = ["COPIED", "OPERAND", "GradHandle", "call_on_copies", "call_with_grad",
           "decode_refs", "encode_refs", "handle_vjp", "inplace_on_copy", "leaf_cotangents",
           "no_derivative", "record_graph"]
