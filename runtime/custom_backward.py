"""A custom ``torch.autograd.Function``'s backward run as eager runs it.

Some backwards cannot be traced: they recompute part of the forward with grad enabled and
call ``.backward()`` or ``torch.autograd.grad`` inside (Reformer's reversible layers,
activation checkpointing written by hand), accumulating gradients into parameters as they
go. The tracer (`thunder_ir.frontend.opaque_backward`) records such a ``Function``'s
forward as usual and its backward as one ``torch.call`` to `run_custom_backward`: on every
backward of the program it calls the user's ``backward`` on the real cotangents with a
``ctx`` holding the real tensors the forward saved and the attributes it set (a module
the forward got is the user's module, not the copy tracing ran), as autograd's engine
calls it; the gradients it returns are checked and conformed as the engine does.

Each call site's state (the ``Function`` class, the shape of its ``ctx``, which inputs
are tensors and which need gradients) is registered at trace time (`keep`) and named by
its key in the IR.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

_STATE: dict[int, CustomBackward] = {}
_KEYS = itertools.count()


@dataclass(frozen=True)
class Slot:
    """Where a ``ctx`` template holds a tensor the program passes in: operand ``index``
    of the saved and captured tensors."""

    index: int


@dataclass(frozen=True)
class ModuleRef:
    """Where a ``ctx`` template holds a module (the user's): weakly, so that a program's
    registered state does not keep the model alive."""

    ref: weakref.ref[Any]


@dataclass
class CustomBackward:
    """One traced ``Function.apply`` whose backward runs at run time.

    Attributes:
        cls: the ``Function`` subclass.
        name: its name, for eager's messages.
        outputs: per output of ``forward``, whether it is a tensor (its cotangent is an
            operand) or not (``None``).
        inputs: per argument of ``apply``, whether it is a tensor.
        needs: eager's ``ctx.needs_input_grad``.
        saved: what ``ctx.saved_tensors`` holds (`Slot`s for the tensors).
        attrs: the other attributes the forward set on ``ctx`` (`Slot`s for tensors,
            `ModuleRef`s for modules).
        metas: the dtype and device of each input that needs a gradient.
    """

    cls: Any
    name: str
    outputs: tuple[bool, ...]
    inputs: tuple[bool, ...]
    needs: tuple[bool, ...]
    saved: tuple[Any, ...]
    attrs: dict[str, Any]
    metas: tuple[tuple[torch.dtype, torch.device], ...]


def keep(state: CustomBackward) -> int:
    """Registers a call site's state for the program's backwards; returns its key."""
    key = next(_KEYS)
    _STATE[key] = state
    return key


class BackwardCtx:
    """The ``ctx`` the user's ``backward`` gets: the saved tensors, ``needs_input_grad``
    and the attributes the forward set, with real tensors and the user's modules."""

    def __init__(self, needs: tuple[bool, ...], saved: tuple[Any, ...]) -> None:
        self.needs_input_grad = needs
        self._saved = saved

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self._saved

    saved_variables = saved_tensors


def _fill(template: Any, tensors: Sequence[torch.Tensor]) -> Any:
    """``template`` with each `Slot` replaced by its tensor (tuples, lists, dicts)."""
    if isinstance(template, Slot):
        return tensors[template.index]
    if isinstance(template, ModuleRef):
        module = template.ref()
        if module is None:
            raise RuntimeError("a custom backward's ctx holds a module that no longer exists")
        return module
    t = type(template)
    if t is tuple or t is list:
        return t(_fill(v, tensors) for v in template)
    if isinstance(template, tuple) and hasattr(template, "_fields"):  # a namedtuple
        return t(*(_fill(v, tensors) for v in template))
    if t is dict:
        return {k: _fill(v, tensors) for k, v in template.items()}
    return template


def _conform(name: str, i: int, g: Any, shape: torch.Size, dtype: torch.dtype
             ) -> torch.Tensor:
    """A gradient as autograd's engine takes it for an input of ``shape`` and ``dtype``:
    summed to the shape where it broadcasts to it, cast to the dtype; eager's error
    otherwise."""
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"function {name}Backward returned {type(g).__name__} as the "
                        f"gradient at position {i + 1}; expected a tensor or None")
    if g.shape != shape:
        try:
            ok = torch.broadcast_shapes(shape, g.shape) == g.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise RuntimeError(f"Function {name}Backward returned an invalid gradient at "
                               f"index {i} - got {list(g.shape)} but expected shape "
                               f"compatible with {list(shape)}")
        g = g.sum_to_size(shape)
    if g.dtype != dtype:
        g = g.to(dtype)
    return g


def run_custom_backward(*tensors: torch.Tensor, key: int, shapes: Sequence[Sequence[int]]
                        ) -> list[torch.Tensor]:
    """The user's ``backward`` of call site ``key``: ``tensors`` are the cotangents of
    its tensor outputs, then the tensors its ``ctx`` holds (`Slot` order); ``shapes``:
    this call's shapes of the inputs that need gradients (the inputs themselves are not
    kept for it). Returns their gradients (zeros where ``backward`` returns ``None``,
    as the traced path gives)."""
    st = _STATE[key]
    n_out = sum(st.outputs)
    cts = iter(tensors[:n_out])
    held = tensors[n_out:]
    ctx = BackwardCtx(st.needs, _fill(st.saved, held))
    for k, v in st.attrs.items():
        setattr(ctx, k, _fill(v, held))
    grads = st.cls.backward(ctx, *(next(cts) if o else None for o in st.outputs))
    grads = grads if isinstance(grads, tuple) else (grads,)
    n = len(st.inputs)
    if len(grads) < n or any(g is not None for g in grads[n:]):
        raise RuntimeError(f"function {st.name}Backward returned an incorrect number of "
                           f"gradients (expected {n}, got {len(grads)})")
    out: list[torch.Tensor] = []
    metas = iter(zip(shapes, st.metas, strict=True))
    for i, (is_tensor, need) in enumerate(zip(st.inputs, st.needs, strict=True)):
        g = grads[i]
        if not is_tensor and g is not None:
            raise RuntimeError(f"function {st.name}Backward returned a gradient different "
                               f"than None at position {i + 1}, but the corresponding "
                               "forward input was not a Variable")
        if not need:
            continue
        sizes, (dtype, device) = next(metas)
        shape = torch.Size(sizes)
        out.append(torch.zeros(shape, dtype=dtype, device=device) if g is None
                   else _conform(st.name, i, g, shape, dtype))
    return out


__all__ = ["BackwardCtx", "CustomBackward", "ModuleRef", "Slot", "keep", "run_custom_backward"]
