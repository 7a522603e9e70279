"""`Builder`: what a torch-map handler writes through.

A handler (`thunder_ir.frontend.table.HANDLERS`) turns one torch call into IR. It sees the
program under construction only through this interface: turn arguments into SSA values
(lifting real tensors to program inputs), emit an op, record a prebuilt one, wrap results
in proxies, and apply eager's in-place and autograd rules. `TraceContext` implements it
for tracing Python with a ``TorchFunctionMode``; an importer of another graph format (an FX
graph) can implement it too and reuse the handler table as it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.base import ThunderOp
from thunder_ir.dialects.dist import PendingType
from thunder_ir.dialects.types import TensorType, is_complex, is_float
from thunder_ir.frontend.proxy import TensorProxy


def differentiable(v: SSAValue) -> bool:
    """A value that can carry a gradient: a floating-point or complex tensor (or a started
    collective of one, ``!dist.pending``)."""
    t = v.type
    if isinstance(t, PendingType):
        t = t.tensor
    return isinstance(t, TensorType) and (is_float(t.dtype) or is_complex(t.dtype))


class Writes(ABC):
    """In-place ops, with eager's rules (`thunder_ir.frontend.inplace.InPlace`)."""

    @abstractmethod
    def assign(self, target: Any, new: SSAValue, opname: str, keep_saved: bool = False
               ) -> TensorProxy:
        """An in-place op: ``target`` stands for ``new`` from now on. ``keep_saved``: the
        call's own ops saved ``target`` itself for their backward, not its value before
        the write (eager's batch norm saves the running statistics it updates), so a later
        in-place write still makes their backward raise."""

    @abstractmethod
    def view_in_place(self, target: TensorProxy, new: SSAValue, name: str,
                      args: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorProxy:
        """An in-place metadata op (``x.t_()``): ``target`` stands for its view ``new``."""

    @abstractmethod
    def set_data(self, target: TensorProxy, new: Any) -> None:
        """``target.data = new``: ``new``'s values, ``target``'s place in the graph."""

    @abstractmethod
    def note_data_alias(self, v: SSAValue) -> None:
        """``v`` is ``x.data``'s value: writes through it do not bump ``x``'s version."""


class Grads(ABC):
    """Eager's autograd rules (`thunder_ir.frontend.grad_tracking.GradTracking`)."""

    @abstractmethod
    def stop_gradient(self, v: SSAValue) -> SSAValue:
        """``v`` with its gradient cut."""

    @abstractmethod
    def set_requires_grad(self, target: TensorProxy, flag: bool) -> None:
        """``target.requires_grad = flag`` with eager's rules (a tensor made while traced
        may become a gradient source)."""

    @abstractmethod
    def set_grad_enabled(self, mode: bool) -> None:
        """User code switched grad mode."""

    @abstractmethod
    def is_inference(self, v: SSAValue) -> bool:
        """Whether ``v`` is an inference tensor (made in inference mode)."""


class Builder(ABC):
    """The program a handler writes into.

    Attributes:
        loc: the user's ``file:line`` of the call being handled (ops record it; errors
            name it).
        active: values that require grad (eager's autograd rules, see `TraceContext`).
        writes: in-place ops (`Writes`).
        grad: eager's autograd rules (`Grads`).
    """

    loc: str
    active: set[SSAValue]
    writes: Writes
    grad: Grads

    # ---- inputs and values

    @abstractmethod
    def tensor_input(self, tensor: torch.Tensor, name: str, kind: tuple[Any, ...]
                     ) -> TensorProxy:
        """A proxy for a tensor the program takes as an argument (``kind`` says where its
        value comes from at call time)."""

    @abstractmethod
    def lift_constant(self, tensor: torch.Tensor) -> TensorProxy:
        """A real tensor met while building becomes a program input fed at call time."""

    @abstractmethod
    def value_of(self, x: Any) -> SSAValue:
        """The SSA value of a proxy, a real tensor (lifted to an input) or a number."""

    # ---- ops

    @abstractmethod
    def emit(self, op: type[ThunderOp], *operands: Any, _view: bool = False,
             **params: Any) -> Any:
        """Builds ``op`` at `loc`; its result value (a list for several)."""

    def emit_view(self, op: type[ThunderOp], *operands: Any, **params: Any) -> Any:
        """`emit` for an op whose results are views of its first operand."""
        return self.emit(op, *operands, _view=True, **params)

    @abstractmethod
    def record(self, op: Operation, requires_grad: Sequence[bool] | None = None,
               view: bool = False) -> list[SSAValue]:
        """Appends a prebuilt op (an opaque ``torch.call``); the values to use for its
        results."""

    @abstractmethod
    def run_python(self, fn: Callable[..., Any], args: Sequence[Any],
                   kwargs: dict[str, Any]) -> Any:
        """Runs a Python torch function so that every torch call it makes is handled."""

    # ---- results

    @abstractmethod
    def wrap(self, value: Any, base: TensorProxy | None = None,
             layout: tuple[tuple[int, ...], int] | None = None) -> Any:
        """Proxies for result values (a list for several), laid out as eager's (``base``:
        the proxy whose storage they view; ``layout``: the result's, where known)."""

    @abstractmethod
    def layout_of(self, v: SSAValue, view: bool = False) -> tuple[tuple[int, ...], int]:
        """Eager's strides and storage offset of the tensor ``v`` stands for (``view``: the
        op that made it returns a view of its first operand)."""

    @abstractmethod
    def note_layout(self, v: SSAValue, layout: tuple[tuple[int, ...], int]) -> None:
        """Records eager's layout of ``v`` (where the handler knows it: an opaque call's
        meta run)."""

    @abstractmethod
    def note_view(self, value: SSAValue, parent: SSAValue, op: Operation, index: int) -> None:
        """Records that ``value`` is result ``index`` of ``op``, a view of ``parent`` (so that
        a write through an alias can re-derive it)."""

    @abstractmethod
    def read_layout(self, *values: Any) -> None:
        """The program being built depends on its inputs' layouts (a decision was made by
        strides: ``x.is_contiguous()`` asked, a ``view`` checked, a write through a view):
        it may not be reused for another layout of the inputs ``values`` (proxies or SSA
        values) come from, or of any input where none is named
        (`thunder_ir.frontend.layout_reads`)."""

    @abstractmethod
    def remember(self, p: TensorProxy) -> TensorProxy:
        """Notes which storage a proxy (made by the handler itself) lives in."""


__all__ = ["Builder", "Grads", "Writes", "differentiable"]
