"""The program under construction while user code runs, and the mode that feeds it.

`TraceContext` is the `Builder` of tracing: it holds the ``ltorch`` program being built
and applies eager's autograd rules as ops are recorded. Grad mode is real while user code
runs (``torch.no_grad()``, ``torch.enable_grad()``, ``torch.set_grad_enabled`` and
``torch.inference_mode()`` switch it as they do eagerly). Each value that requires grad is
*active* (`TraceContext.active`): an op's results are active when grad mode is on, one of
its operands is active, and the result can carry a gradient (floating point or complex;
eager's own answer for opaque calls). Where eager would cut the gradient (``detach``,
``no_grad``, a result that eager marks as not requiring grad) the context records
``autograd.stop_gradient``, so autodiff, which follows dataflow, sees the same cut. Proxies
report ``requires_grad`` accordingly.

`TraceMode`, a ``TorchFunctionMode``, routes each torch call user code makes to its
handler (`thunder_ir.frontend.table.HANDLERS`), to the opaque-call `fallback`, or answers
it directly (metadata), or raises `DataDependentError` (a read of a tensor's value).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, StopGradientOp, make_function
from thunder_ir.dialects.base import ShapeError, ThunderOp, to_attr
from thunder_ir.dialects.location import location_text, source_location
from thunder_ir.dialects.ltorch_core import ChunkOp, GetitemOp, ProdOp, SplitOp, SumOp
from thunder_ir.dialects.ltorch_scan import CumsumOp
from thunder_ir.dialects.symbols import SYMBOLIC_NUMBERS, SymbolicError
from thunder_ir.dialects.symbols import current as current_symbols
from thunder_ir.dialects.traits import ViewLike, has_no_derivative
from thunder_ir.dialects.types import (
    NumberType,
    TensorType,
    canonical_device,
    is_complex,
    tensor_type,
    type_of_tensor,
)
from thunder_ir.frontend import symbolic_numbers
from thunder_ir.frontend.aliasing import (
    VIEW_OF_LEAF,
    AliasTracking,
    argument_tensor,
    check_writable,
    live_members,
    views_a_leaf,
    write_through,
)
from thunder_ir.frontend.autocast import (
    AutocastError,
    autocast_off,
    autocast_on,
    cast_inputs,
    cast_results,
    enabled_device_types,
    opaque_call_differs,
)
from thunder_ir.frontend.autocast import probe as autocast_probe
from thunder_ir.frontend.builder import Builder, differentiable
from thunder_ir.frontend.eager_autograd import EagerAutograd
from thunder_ir.frontend.errors import (
    DATA_HINT,
    DataDependentError,
    ThunderTraceError,
    UseFallback,
    dtype_name,
    user_location,
    where,
)
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.layout import (
    Layout,
    LayoutError,
    contiguous_layout,
    contiguous_strides,
    fresh_layouts,
    layout_of_tensor,
    view_layouts,
)
from thunder_ir.frontend.numpy_values import NDARRAY, python_numbers
from thunder_ir.frontend.program_build import ProgramBuild
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.pystate import StateReads
from thunder_ir.frontend.table import (
    COMPUTED_GETTERS,
    DATA_DEPENDENT,
    HANDLERS,
    METADATA,
    TRACES_PYTHON,
    inline,
    library_handler,
)
from thunder_ir.runtime.origins import ArgLeaf, Captured, Origin, StateEntry

_SUMS = (SumOp, ProdOp, CumsumOp)
"""Ops eager's autograd refuses to record when a ``dtype`` makes their result an integer
or bool from an input that requires grad ("Autograd not support dtype"), where ``to``,
``argmax`` and comparisons give a result that does not require grad."""

# --------------------------------------------------------------------------- program state

@dataclass
class TracedProgram:
    """A traced ``ltorch`` program and how to call it.

    Attributes:
        module: the IR (one ``func.func`` named ``forward``).
        input_kinds: per program argument, where its value comes from at call time (an
            `thunder_ir.runtime.origins.Origin`: ``ArgLeaf(i)``, ``ArgPath(i, steps)``,
            ``StateEntry(name)``, ``Captured(tensor)``).
        output_spec: pytree spec of the user's output.
        output_leaves: per output leaf, ``("out", k)`` program output k, ``("value", v)``,
            or the caller's argument leaf itself (``("arg", i)``) or a view of it
            (``("argview", (i, sizes, strides, offset))``), where eager returns those.
        writebacks: ``(program output index, origin)`` for inputs written in place.
        input_requires_grad: per program argument, whether it is a gradient source (the
            tensor requires grad, and grad mode was on where the code read it).
        output_requires_grad: per program output, whether eager's result requires grad.
        detach_outputs: program outputs that are detached aliases of inputs requiring grad
            (returned through ``.detach()`` so that they do not require grad).
        global_reads: per module namespace, the global names user code read while traced
            (the cache guards their values).
        replays: in-place metadata ops (``x.t_()``) on argument leaves, replayed on the
            caller's tensors after each call, before the write-backs.
        output_strides: per program output, eager's strides of the user's result it is,
            where the first run checks them under ``THUNDER_IR_VERIFY=1``
            (`thunder_ir.runtime.layout`): None for write-backs, layouts no copy makes and
            results of opaque calls (eager's own kernel lays those out). The forward
            function's ``torch.output_strides`` holds them all, for `restride-outputs`.
        exact_layout: user code read exact strides or storage offsets (``x.stride()``,
            ``x.storage_offset()``, ``as_strided``): the cache key must hold every
            tensor's, not only whether it is contiguous.
        layout_read: some decision of the trace depended on layout (`Builder.read_layout`);
            without one the program serves any layout of the same inputs.
        epilogue: the writes user code made to Python objects (argument objects and
            containers, the module's attributes and containers), replayed on the caller's
            objects after each call (`thunder_ir.runtime.pystate.Action`).
        speculative: the program checks conditions it was traced under
            (`thunder_ir.frontend.speculation`).
        draws: a speculative program may draw random numbers before a check stops it
            (the generators are then put back before the call runs another way).
        symbols: where the epilogue or a returned value computes a symbolic number
            (``self.step = s0 + 1``): reads the call's values of its symbols
            (`thunder_ir.runtime.dynamic.symbol_reader`); None otherwise.
    """

    module: ModuleOp
    input_kinds: list[Origin]
    output_spec: Any
    output_leaves: list[tuple[str, Any]]
    writebacks: list[tuple[int, Origin]] = field(default_factory=list)
    input_requires_grad: list[bool] = field(default_factory=list)
    output_requires_grad: list[bool] = field(default_factory=list)
    detach_outputs: list[int] = field(default_factory=list)
    global_reads: list[tuple[dict[str, Any], set[str]]] = field(default_factory=list)
    replays: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = field(
        default_factory=list)
    output_strides: list[tuple[int, ...] | None] = field(default_factory=list)
    exact_layout: bool = False
    layout_read: bool = True
    epilogue: list[Any] = field(default_factory=list)
    speculative: bool = False
    draws: bool = False
    symbols: Callable[[Sequence[Any]], dict[str, Any]] | None = None


def _is_complex(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and is_complex(t.dtype)


class TraceContext(Builder):
    """The program under construction while user code runs: the `Builder` of tracing.

    Its state lives in four parts, each of which owns its fields; `TraceContext` composes
    them, and its methods are where they meet (an in-place write reads the aliases, the
    autograd state and the program):

    Attributes:
        build: program building (`ProgramBuild`): the program, where ops go now
            (``build.block``, ``build.emitter``; see `ProgramBuild.into`), its inputs, the
            numbers made, and speculation's concrete values.
        autograd: eager autograd state (`EagerAutograd`): which values require grad, which
            are eager's leaves or inference tensors, what each backward saved.
        aliases: alias tracking (`AliasTracking`): which values share storage, how views
            were made, eager's layout of each value.
        reads: state reads (`StateReads`): globals read and written, the module copies'
            originals, replays on arguments, whether layout was read.
        active: ``autograd.active`` itself (the same set; `Builder` names it, and handlers
            ask it on every op).
        loc: the user's ``file:line`` of the torch call being handled.
        handlers: handlers of this trace only, ahead of `HANDLERS` (the extension API's
            ``replaces=`` diversions of torch callables): another thread's trace, or code
            run outside tracing, never sees them.
    """

    __slots__ = ("active", "aliases", "autograd", "build", "handlers", "loc", "reads")

    def __init__(self) -> None:
        self.build = ProgramBuild()
        self.autograd = EagerAutograd()
        self.aliases = AliasTracking()
        self.reads = StateReads()
        self.active: set[SSAValue] = self.autograd.active
        self.loc: str = ""
        self.handlers: dict[Any, Any] = {}

    # ---- inputs

    def tensor_input(self, tensor: torch.Tensor, name: str, kind: Origin,
                     sizes: Sequence[Any] | None = None) -> TensorProxy:
        """A proxy for a tensor the program takes as an argument (``sizes``: its sizes
        where some are symbolic, ``SymInt``s of the compilation's `SymbolTable`).

        A tensor that requires grad is a gradient source: active at once when grad mode
        is on, else pending until user code turns it on."""
        ty = type_of_tensor(tensor) if sizes is None else tensor_type(
            sizes, tensor.dtype, canonical_device(tensor.device))
        v = self.build.add_input(ty, name, kind)
        self.build.concrete[v] = tensor
        rg = tensor.requires_grad
        if rg and tensor.grad_fn is not None:  # not a leaf in eager: an intermediate
            self.autograd.nonleaf_inputs.add(v)
        if rg:
            if torch.is_grad_enabled():
                self.active.add(v)
                self.build.input_requires_grad[-1] = True
            else:
                self.autograd.pending.append(v)
        if tensor.is_inference():
            self.autograd.inference.add(v)
        if tensor.layout != torch.strided:
            raise ThunderTraceError(
                f"{name}: {tensor.layout} tensors are not supported by thunder_ir (only "
                "strided ones). Pass a dense tensor (x.to_dense()), or call that part outside "
                "the jitted function.")
        if sizes is None:
            strides, offset = self.aliases.layouts[v] = layout_of_tensor(tensor)
        else:  # dynamic sizes: a contiguous tensor's strides, over them
            if not tensor.is_contiguous() or tensor.storage_offset():
                raise SymbolicError(f"{name}: a dynamic size of a non-contiguous tensor")
            strides, offset = self.aliases.layouts[v] = contiguous_strides(sizes), 0
        p = TensorProxy(v, requires_grad=rg, strides=strides, offset=offset)
        self.remember(p)
        self.autograd.leaf_proxies.add(id(p))
        self.build.input_proxies.append((p, v, kind))
        return p

    def lift_constant(self, tensor: torch.Tensor) -> TensorProxy:
        """A real tensor met during tracing becomes a program argument fed at call time."""
        p = self.build.consts.get(id(tensor))
        if p is None:
            p = self.tensor_input(tensor, "c", Captured(tensor))
            self.build.consts[id(tensor)] = p
        return p

    # ---- values

    def value_of(self, x: Any) -> SSAValue:
        """The SSA value of a proxy, a real tensor (lifted) or a Python number."""
        if is_proxy(x):
            return x._value
        if isinstance(x, torch.Tensor):
            return self.lift_constant(x)._value
        if type(x) in (bool, int, float) or type(x) in SYMBOLIC_NUMBERS:
            return self.build.number(x)
        if type(x) is NDARRAY:  # eager's argument parser: a TypeError (operators: declined)
            raise TypeError(f"{where(self.loc)}: expected a Tensor or a number, not "
                            "numpy.ndarray")
        raise ThunderTraceError(f"{where(self.loc)}: cannot use {type(x).__name__} "
                                f"{x!r} as a tensor operand")

    def emit(self, op: type[ThunderOp], *operands: Any, _view: bool = False,
             **params: Any) -> Any:
        """Builds ``op`` at the current user location; shape errors name the location.

        Returns its result (a list for several), with eager's gradient rules applied
        (`track`)."""
        self.build.emitter.loc = source_location(self.loc) if self.loc else None
        try:
            out = self.build.emitter.emit(op, *operands, **params)
        except ShapeError as e:
            raise ThunderTraceError(f"{where(self.loc)}: {e}") from None
        results = out if isinstance(out, list) else [out]
        if not results:
            return out
        built = results[0].owner
        if any(_is_complex(v) for v in (*built.operands, *results)):
            # ltorch ops and their VJP rules are written for real numbers: complex values
            # go through torch itself (an opaque call, differentiated by torch).
            built.detach()
            built.erase()
            raise UseFallback
        tracked = self.track(built, results, view=_view)
        if _view and built.operands:
            for k, (r, tr) in enumerate(zip(results, tracked, strict=True)):
                self.layout_of(r, view=True)  # (and whether eager's result is a view)
                if r not in self.aliases.not_views:
                    self.note_view(tr, built.operands[0], built, k)
                else:
                    self.aliases.not_views.add(tr)
        return tracked if isinstance(out, list) else tracked[0]

    def record(self, op: Operation, requires_grad: Sequence[bool] | None = None,
               view: bool = False) -> list[SSAValue]:
        """Appends a prebuilt op at the current location; its results, tracked."""
        if self.loc:
            op.location = source_location(self.loc)
        self.build.block.add_op(op)
        return self.track(op, list(op.results), requires_grad, view)

    def track(self, op: Any, results: list[SSAValue],
              requires_grad: Sequence[bool] | None = None, view: bool = False
              ) -> list[SSAValue]:
        """Applies eager's autograd rules to a recorded op's results.

        A result is active when grad mode is on, an operand is active and the result is
        differentiable (``requires_grad``: eager's own answer per result, for opaque
        calls). A differentiable result computed from an active operand that eager does not
        mark as requiring grad is cut with ``autograd.stop_gradient``. A view made while
        grad mode is off (``view``, or eager's answer) requires grad in eager but passes no
        gradient back (`detached_view`). Returns the values the caller should use in place
        of ``results``.
        """
        autograd = self.autograd
        if torch.is_inference_mode_enabled():
            autograd.inference.update(results)
        build = self.build
        if build.block is not build.program.block:
            return results  # a region (a custom backward): no gradients of gradients
        forbidden = self.aliases.forbidden
        if forbidden and torch.is_grad_enabled():
            bad = next((forbidden[o] for o in op.operands if o in forbidden), None)
            if bad is not None:
                raise RuntimeError(f"{bad}\n  at {where(self.loc)}")
        active = self.active
        if not active or not any(o in active for o in op.operands):
            return results
        grad = torch.is_grad_enabled()
        inference = autograd.inference
        if grad and inference and any(o in inference for o in op.operands):
            autograd.check_inference_inputs(op, self.loc)
        if requires_grad is None:
            diff = (grad and not has_no_derivative(op)) or (view and not grad)
            if diff and isinstance(op, _SUMS) and not differentiable(results[0]):
                dtype = cast(TensorType, results[0].type).dtype
                raise RuntimeError(f"Autograd not support dtype: {dtype_name(dtype)}\n"
                                   f"  at {where(self.loc)}")
            flags = [diff and differentiable(r) for r in results]
        else:
            flags = list(requires_grad)
        out: list[SSAValue] = []
        for r, f in zip(results, flags, strict=True):
            if f and grad:
                active.add(r)
                out.append(r)
            elif f:
                out.append(self.detached_view(op, r))
            elif differentiable(r):
                out.append(self.stop_gradient(r))
            else:
                out.append(r)
        if grad and any(flags):
            autograd.note_saved(op, out)
        return out

    def detached_view(self, op: Operation, v: SSAValue) -> SSAValue:
        """A view made while grad mode is off of a tensor that requires grad: eager marks it
        as requiring grad, but no gradient flows back through it (an ``autograd.function``
        with no gradients)."""
        primals = [o for o in op.operands if o in self.active]
        body = Block(arg_types=[v.type])
        return self._requires_grad(make_function("view_without_grad", primals, [v], [], body,
                                                 []))

    def _requires_grad(self, fn: Operation) -> SSAValue:
        """Records an ``autograd.function`` whose one result requires grad whatever the
        grad mode (it stands for a tensor eager still tracks); returns the result."""
        if self.loc:
            fn.location = source_location(self.loc)
        self.build.block.add_op(fn)
        r = fn.results[0]
        self.active.add(r)
        return r

    def stop_gradient(self, v: SSAValue) -> SSAValue:
        """``v`` with its gradient cut (``autograd.stop_gradient``)."""
        self.build.emitter.loc = source_location(self.loc) if self.loc else None
        r: SSAValue = self.build.emitter.emit(StopGradientOp, v)
        if v in self.autograd.inference:
            self.autograd.inference.add(r)
        return r

    def wrap(self, value: Any, base: TensorProxy | None = None,
             layout: Layout | None = None) -> Any:
        """Proxies for op results (a list for several), with eager's layout (``base``: the
        proxy whose storage they view; ``layout``: the result's, where the caller knows it,
        else `layout_of`)."""
        if isinstance(value, list):
            return [self.wrap(v, base) for v in value]
        if isinstance(value.type, NumberType):
            raise ThunderTraceError(f"{where(self.loc)}: traced numbers are not supported")
        if layout is not None:
            self.aliases.layouts[value] = layout
        strides, offset = self.layout_of(value, view=base is not None)
        if base is not None and value in self.aliases.not_views:
            base = None  # eager copied (a reshape of a layout it cannot view)
            self.aliases.view_parent.pop(value, None)
        return self.remember(TensorProxy(value, requires_grad=value in self.active, base=base,
                                         strides=strides, offset=offset))

    def note_view(self, value: SSAValue, parent: SSAValue, op: Operation, index: int) -> None:
        """Records that ``value`` (result ``index`` of ``op``, or what tracking made of it)
        views ``parent``, so a write through an alias can re-derive it (view replay)."""
        self.aliases.note_view(value, parent, op, index, parent in self.active)

    def note_layout(self, v: SSAValue, layout: Layout) -> None:
        self.aliases.layouts[v] = layout

    def read_layout(self) -> None:
        self.reads.layout_read = True

    def layout_of(self, v: SSAValue, view: bool = False) -> Layout:
        """Eager's layout of the tensor ``v`` stands for: known for arguments and proxies,
        else computed from the op that made it (``view``: that op's results view its first
        operand) and its operands' layouts (`thunder_ir.frontend.layout`)."""
        lay = self.aliases.layouts.get(v)
        if lay is not None:
            return lay
        op = v.owner
        t = v.type
        assert isinstance(t, TensorType)
        if not isinstance(op, Operation):  # an argument of a region (a custom backward)
            return contiguous_layout(t)
        if isinstance(op, StopGradientOp):
            lay = self.layout_of(op.operands[0])
            self.aliases.layouts[v] = lay
            return lay
        if isinstance(op, FunctionOp):
            for r, x in zip(op.results, op.values, strict=True):
                self.aliases.layouts[r] = self.layout_of(x)
            return self.aliases.layouts[v]
        operands = [self.layout_of(o) if isinstance(o.type, TensorType) else None
                    for o in op.operands]
        tensors = [r for r in op.results if isinstance(r.type, TensorType)]
        if view or _views_its_operand(op):
            if getattr(type(op), "LAYOUT_FN", None) is not None:
                self.reads.layout_read = True  # eager's view works or raises by layout
            try:
                found = view_layouts(op, operands)
            except LayoutError as e:
                raise RuntimeError(f"{e}\n  at {where(self.loc)}") from None
            outs = [lay for lay, _ in found]
            copied = [r for r, (_, is_view) in zip(tensors, found) if not is_view]
            if copied:  # a reshape that copied: nothing aliases its result
                self.aliases.not_views.update(copied)
                self.reads.layout_read = True
        else:
            outs = fresh_layouts(op, operands)
        for r, lay in zip(tensors, outs):
            self.aliases.layouts.setdefault(r, lay)
        lay = self.aliases.layouts.get(v)
        if lay is None:  # a value tracking made of a result (its stop_gradient)
            lay = self.aliases.layouts[v] = contiguous_layout(t)
        return lay

    def remember(self, p: TensorProxy) -> TensorProxy:
        """Notes which storage ``p``'s value lives in (its base's, for a view)."""
        return self.aliases.remember(p)

    def _written(self, target: TensorProxy, skip: set[Operation],
                 keep_saved: bool = False) -> None:
        """An in-place write to ``target``'s storage: every op whose backward saved a value
        of that storage would, in eager, raise when its backward runs; so will ours. The
        writing call's own ops (``skip``) saved the tensor they write before the write,
        which eager clones for an in-place op, so those records go (with ``keep_saved`` they
        stay: see `Builder.assign`); a tensor of that storage they read as another operand
        (``x.mul_(x)``'s ``other``) eager saves as it is, and the write modifies it."""
        self.autograd.resolve_saved()
        saved, saved_operands = self.autograd.saved, self.autograd.saved_operands
        for v in self.aliases.members.get(target._storage, ()):
            ops = saved.pop(v, ())
            kept = [op for op in ops if op in skip] if keep_saved else []
            if kept:
                saved[v] = kept
            for op in ops:
                if op in skip and (keep_saved or not any(
                        i > 0 and op.operands[i] is v for i in saved_operands.get(op, ()))):
                    continue
                if "saved_modified" not in op.attributes:
                    t = v.type
                    assert isinstance(t, TensorType)
                    op.attributes["saved_modified"] = StringAttr(
                        "one of the variables needed for gradient computation has been "
                        f"modified by an inplace operation: [{t.pretty()}], saved for the "
                        f"backward of {op.name} at {where(location_text(op))}, written in place at "
                        f"{where(self.loc)}")

    def assign(self, target: Any, new: SSAValue, opname: str, keep_saved: bool = False
               ) -> TensorProxy:
        """Functionalizes an in-place op: ``target`` now stands for ``new``.

        Eager's rules for in-place ops apply: the result must be castable to the target's
        dtype; a leaf that requires grad may not be written while grad mode is on; an
        inference tensor only inside inference mode. A tensor that requires grad, written
        while grad mode is off (an EMA update under ``torch.no_grad()``), keeps its place in
        the autograd graph: later uses still send their gradient to it."""
        if not is_proxy(target):
            raise ThunderTraceError(f"{where(self.loc)}: in-place {opname} on a tensor that is "
                                    "not traced; pass it as an argument instead")
        members = live_members(target)
        if members:
            self.reads.layout_read = True  # the write reaches aliases by their strides
            check_writable(self, target, opname)
        old = target._value
        # The ops this torch call built (the in-place op's functional form, casts): their
        # reads are not later writes. A value that existed before (copy_'s source) is not.
        made = self.build.ops_of_this_call()
        tt, nt = old.type, new.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if nt.sizes != tt.sizes:
            raise ThunderTraceError(f"{where(self.loc)}: in-place {opname} would change the "
                                    f"shape {list(tt.sizes)} to {list(nt.sizes)}")
        if old in self.autograd.inference and not torch.is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not "
                               "allowed.You can make a clone to get a normal tensor before "
                               "doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                               f"for more details.\n  at {where(self.loc)}")
        if nt.dtype != tt.dtype:
            if not torch.can_cast(nt.dtype, tt.dtype):
                raise RuntimeError(f"result type {dtype_name(nt.dtype)} can't be cast to the "
                                   f"desired output type {dtype_name(tt.dtype)}\n"
                                   f"  at {where(self.loc)}")
            from thunder_ir.dialects.ltorch import OPS

            new = self.emit(OPS["to_dtype"], new, dtype=tt.dtype)
        if not torch.is_grad_enabled() and new in self.active:
            new = self.stop_gradient(new)  # written under no-grad: the values, no gradient
        if old in self.active:
            if not torch.is_grad_enabled():
                new = self.keep_identity(old, new)
            elif old in self.autograd.nonleaf_inputs or id(target) in self.autograd.leaf_proxies:
                real = argument_tensor(self, target)  # an argument itself
                if real is None or real.grad_fn is None:
                    raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                       f"in-place operation.\n  at {where(self.loc)}")
                if views_a_leaf(self, target):  # an argument w[1:] of a leaf w
                    raise RuntimeError(VIEW_OF_LEAF + f"\n  at {where(self.loc)}")
                raise ThunderTraceError(
                    f"{where(self.loc)}: in-place {opname} on an argument that requires grad "
                    "and is not a leaf (it has a grad_fn) is not supported by thunder_ir: its "
                    "autograd history would have to change outside the program. Pass "
                    "`x.clone()`, or write out of place.")
            elif new not in self.active or not (isinstance(new.owner, Operation)
                                                 and old in new.owner.operands):
                new = self.overwrites(old, new)
        self._written(target, made, keep_saved)
        with torch._C.DisableTorchFunction():  # the write keeps the target's layout
            self.aliases.layouts[new] = (tuple(target.stride()), target.storage_offset())
        self.aliases.written.add(new)
        if members:  # the other aliases see the write (`thunder_ir.frontend.aliasing`)
            new = write_through(self, target, new, members)
        self.aliases.rebind(target, new)
        return target

    def overwrites(self, old: SSAValue, new: SSAValue) -> SSAValue:
        """``new`` written over ``old`` in place (``copy_``, ``zero_``, ``fill_``): eager's
        backward gives the overwritten tensor a zero gradient (not ``None``), and passes
        the cotangent on to ``new``'s own inputs."""
        from thunder_ir.dialects.prims import FullOp

        t = old.type
        assert isinstance(t, TensorType)
        body = Block(arg_types=[new.type])
        zeros = FullOp.create(result_types=[t], properties={
            "shape": to_attr(t.sizes), "fill_value": to_attr(0.0), "device": to_attr(t.dev),
            "dtype": to_attr(t.dtype)})
        body.add_op(zeros)
        primals, mask, grads = [old], [0], [zeros.results[0]]
        if new in self.active:
            primals.append(new)
            mask.append(1)
            grads.append(body.args[0])
        return self._requires_grad(make_function("overwrite", primals, [new], mask, body,
                                                 grads))

    def set_requires_grad(self, target: TensorProxy, flag: bool) -> None:
        """``t.requires_grad = flag`` / ``t.requires_grad_(flag)`` on a tensor made while
        traced, as eager allows it: a leaf (one not computed from a tensor that requires
        grad) becomes a gradient source, or stops being one; eager's errors otherwise. The
        program's results computed from it require grad (an input that requires grad, the
        shared `GRAD_ANCHOR`, gives them their ``grad_fn``; the gradient reaching the new
        leaf goes nowhere the caller can see, as in eager)."""
        v = target._value
        if flag == self.autograd.is_source(v):
            return
        if id(target) in self.autograd.leaf_proxies:
            raise ThunderTraceError(
                f"{where(self.loc)}: requires_grad_({flag}) on an argument, parameter or "
                "buffer inside a jitted function would change which of your tensors autograd "
                "tracks; set requires_grad on them before the call (parameters already "
                "require grad), or on a tensor made inside the function.")
        if v in self.active and v not in self.autograd.grad_leaves:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you want to use "
                "a computed variable in a subgraph that doesn't require differentiation use "
                f"var_no_grad = var.detach().\n  at {where(self.loc)}")
        if flag and not differentiable(v):
            raise RuntimeError("only Tensors of floating point and complex dtype can require "
                               f"gradients\n  at {where(self.loc)}")
        if flag:
            anchor = self.lift_constant(GRAD_ANCHOR)._value
            if anchor in self.autograd.pending:  # a gradient source whatever the grad mode
                self.autograd.make_source(anchor, self.build)
            # `v`'s values, a value of its own (its aliases stay as they are) that autodiff
            # sees as computed from the anchor (a zero gradient goes there).
            leaf = self.overwrites(anchor, v)
            with torch._C.DisableTorchFunction():
                layout = (tuple(target.stride()), int(target.storage_offset()))
            self.aliases.layouts[leaf] = layout
            self.aliases.rebind(target, leaf)
            self.autograd.grad_leaves.add(leaf)
        else:
            self.active.discard(v)
            self.autograd.grad_leaves.discard(v)
        with torch._C.DisableTorchFunction():
            torch.Tensor.requires_grad.__set__(target, flag)  # type: ignore[attr-defined]

    def set_data(self, target: TensorProxy, new: Any) -> None:
        """``t.data = new`` (what ``Module.to``, ``.half()``, ``.float()`` do to each
        parameter): ``t`` keeps its place in the autograd graph and takes ``new``'s values.
        Of the same dtype and shape, that is a write under no-grad; a parameter or buffer
        that does not require grad here may also change dtype or shape (its new value is
        set as the real tensor's ``.data`` after each call)."""
        src = new if is_proxy(new) else self.lift_constant(new)
        if src is target or src._value is target._value:
            return
        tt, nt = target._value.type, src._value.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if tt.dtype == nt.dtype and tt.sizes == nt.sizes:
            value = self.stop_gradient(src._value) if src._value in self.active else src._value
            grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)
            try:
                self.assign(target, value, ".data assignment")
            finally:
                torch._C._set_grad_enabled(grad)
            return
        kind = self.build.kind_of(target)
        if not isinstance(kind, StateEntry) or target._value in self.active:
            raise ThunderTraceError(
                f"{where(self.loc)}: `.data = ` with another dtype or shape "
                f"({tt.pretty()} -> {nt.pretty()}) inside a jitted function is supported for "
                "parameters and buffers that do not require grad here; convert the model "
                "before calling it (model.to(dtype)), or call this part outside the jitted "
                "function.")
        value = self.stop_gradient(src._value) if src._value in self.active else src._value
        with torch._C.DisableTorchFunction(), torch._C._ExcludeDispatchKeyGuard(
                torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            torch.Tensor.data.__set__(target, src)  # type: ignore[attr-defined]
            self.aliases.layouts[value] = (tuple(target.stride()), int(target.storage_offset()))
        target._value = value
        if all(p is not target for p in self.reads.data_replaced):
            self.reads.data_replaced.append(target)

    def keep_identity(self, old: SSAValue, new: SSAValue) -> SSAValue:
        """``new``'s value with ``old``'s place in the autograd graph (an in-place write under
        no-grad): an ``autograd.function`` whose backward passes the cotangent to ``old``."""
        body = Block(arg_types=[old.type])
        return self._requires_grad(make_function("inplace_update", [old], [new], [0], body,
                                                 [body.args[0]]))

    def view_in_place(self, target: TensorProxy, new: SSAValue, name: str,
                      args: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorProxy:
        """An in-place metadata op (``x.t_()``, ``x.unsqueeze_(0)``): ``target`` stands for
        its view ``new``, with that view's sizes and strides. On an argument the op is
        replayed on the caller's tensor after the call; on a parameter or buffer it is
        refused."""
        kind = self.build.kind_of(target)
        if kind is not None and not isinstance(kind, ArgLeaf):
            raise ThunderTraceError(
                f"{where(self.loc)}: in-place {name} on a parameter or buffer would change the "
                f"module's tensor; thunder_ir does not. Use `{name[:-1]}` out of place.")
        old = target._value
        root = target._base_proxy
        if old in self.active and not torch.is_grad_enabled():
            raise ThunderTraceError(
                f"{where(self.loc)}: in-place {name} under no_grad on a tensor that requires "
                "grad is not supported by thunder_ir (eager keeps its autograd history with "
                f"the new shape). Use `{name[:-1]}` out of place.")
        if old in self.active:  # eager's refusals
            if root is None and id(target) in self.autograd.leaf_proxies:
                raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                   f"in-place operation.\n  at {where(self.loc)}")
            if root is not None and id(root) in self.autograd.leaf_proxies:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used "
                                   f"in an in-place operation.\n  at {where(self.loc)}")
        t = new.type
        assert isinstance(t, TensorType)
        self.reads.layout_read = True
        strides, offset = self.layout_of(new)
        target.set_layout(t.sizes, strides, offset)
        target._value = new
        self.remember(target)
        if kind is not None:
            self.reads.replays.append((kind.index, name, args, kwargs))
            self.build.input_proxies = [(p, new if p is target and orig is old else orig, k)
                                        for p, orig, k in self.build.input_proxies]
        return target

    def set_grad_enabled(self, mode: bool) -> None:
        """Grad mode switches for real while user code runs; each op reads it. Turned on,
        it makes the pending gradient sources active."""
        torch._C._set_grad_enabled(mode)
        if mode and self.autograd.pending:
            self.autograd.activate_pending(self.build)

    def is_inference(self, v: SSAValue) -> bool:
        """Whether ``v`` was created in inference mode (eager's inference tensors)."""
        return v in self.autograd.inference

    def run_python(self, fn: Callable[..., Any], args: Sequence[Any],
                   kwargs: dict[str, Any]) -> Any:
        """Runs ``fn`` under a fresh `TraceMode` (the tracer's own mode is set aside while
        a handler runs), so every torch call it makes is traced. The ops they build are
        the handler's call's own (`ProgramBuild.ops_of_this_call`), as one op would be: an
        in-place handler that assigns their result skips what they saved."""
        start = self.build.call_start
        with TraceMode(self):
            out = fn(*args, **kwargs)
        self.build.call_start = start
        return out


def _views_its_operand(op: Operation) -> bool:
    """Whether ``op``'s results are views of its first operand (by its kind: a view-like op
    other than a copy; ``split``/``chunk``; ``getitem`` without tensor indices)."""
    kind = op.get_trait(ViewLike)
    if kind is not None:
        return kind.free
    if isinstance(op, SplitOp | ChunkOp):
        return True
    return isinstance(op, GetitemOp) and len(op.operands) == 1


_LOCAL = threading.local()


def _stack() -> list[TraceContext]:
    s: list[TraceContext] | None = getattr(_LOCAL, "stack", None)
    if s is None:
        s = _LOCAL.stack = []
    return s


def current() -> TraceContext:
    """The trace being recorded in this thread."""
    return _stack()[-1]


def tracing_now() -> bool:
    """True while this thread traces user code."""
    return bool(_stack())




@contextlib.contextmanager
def recording(ctx: TraceContext) -> Iterator[None]:
    """Makes ``ctx`` this thread's current trace while the context is open."""
    s = _stack()
    s.append(ctx)
    # (a static compile hands user code no symbolic number: no wrapper to pay for)
    classes = symbolic_numbers.classes_as_eager() if current_symbols() is not None \
        else contextlib.nullcontext()
    try:
        with classes:
            yield
    finally:
        s.pop()


# --------------------------------------------------------------------------- the mode

_T = torch.Tensor
_any_autocast = torch._C._is_any_autocast_enabled
_functorch_active = torch._C._are_functorch_transforms_active

GRAD_ANCHOR = torch.zeros((), requires_grad=True)
"""An input that requires grad, given to programs in which a tensor made while traced was
made to require grad (`TraceContext.set_requires_grad`) so that the results' autograd node
records a graph even when nothing else requires grad. No gradient reaches it."""

EXACT_LAYOUT_READS = frozenset({_T.stride, _T.storage_offset, torch.as_strided, _T.as_strided,
                                _T.as_strided_})
"""Calls whose answer or result depends on exact strides or the storage offset, not only on
contiguity (what the cache key holds of a contiguous tensor)."""
LAYOUT_READS = EXACT_LAYOUT_READS | {_T.is_contiguous}
"""Calls that make the program depend on its inputs' layouts (see `Builder.read_layout`)."""


def _repr(self: Any, *a: Any, **k: Any) -> str:
    return self.describe() if is_proxy(self) else object.__repr__(self)


_INLINE = threading.local()


def _inlining() -> set[Any]:
    """torch's Python functions this thread is tracing through under autocast."""
    s: set[Any] | None = getattr(_INLINE, "functions", None)
    if s is None:
        s = _INLINE.functions = set()
    return s


class TraceMode(TorchFunctionMode):
    """Routes every torch call made while tracing to its handler."""

    def __init__(self, ctx: TraceContext) -> None:
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        recorder = self.ctx.reads.settrace_hook
        if recorder is None:
            return self._dispatch(func, args, kwargs or {})
        sys.settrace(None)  # thunder_ir's own code reads no user globals: not recorded
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            sys.settrace(recorder)

    def _dispatch(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        ctx = self.ctx
        h = (ctx.handlers.get(func) if ctx.handlers else None) or HANDLERS.get(func)
        args, kwargs = python_numbers(args, kwargs)
        if _functorch_active():  # (transforms outside the jitted call were set aside)
            ctx.loc = user_location()
            raise ThunderTraceError(
                f"{where(ctx.loc)}: a torch.func transform (vmap, grad, jacrev...) runs inside "
                "the jitted function, which thunder_ir does not support yet: its traced "
                "tensors cannot be wrapped. Apply the transform outside the jitted function "
                "(torch.func.vmap(jitted_fn) works), or run this part eagerly.")
        if func in LAYOUT_READS:
            ctx.reads.layout_read = True
            if func in EXACT_LAYOUT_READS:
                ctx.reads.exact_layout = True
        if h is not None:
            ctx.loc = user_location()
            ctx.build.call_start = ctx.build.block.last_op
            if _any_autocast():
                return self._under_autocast(func, h, args, kwargs)
            try:
                return h(ctx, *args, **kwargs)
            except UseFallback:
                return fallback(ctx, func, args, kwargs)
        if func in METADATA or (getattr(func, "__name__", "") == "__get__"
                                and func not in COMPUTED_GETTERS):
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if func in (_T.__repr__, _T.__str__, _T.__format__):
            return _repr(*args)
        if library_handler(func) is not None:  # now in HANDLERS
            return self._dispatch(func, args, kwargs)
        ctx.loc = user_location()
        what = DATA_DEPENDENT.get(func)
        if what is not None:
            raise DataDependentError(
                f"{where(ctx.loc)}: {what} needs a traced tensor's value, but {DATA_HINT}")
        ctx.build.call_start = ctx.build.block.last_op
        if _any_autocast():
            return self._under_autocast(func, None, args, kwargs)
        return fallback(ctx, func, args, kwargs)

    def _under_autocast(self, func: Any, h: Any, args: Sequence[Any],
                        kwargs: dict[str, Any]) -> Any:
        """A call made under ``torch.autocast``: recorded on its inputs cast as eager's
        autocast casts them, with autocast off, its results cast to eager's dtypes
        (`thunder_ir.frontend.autocast`)."""
        ctx = self.ctx
        if h is not None and getattr(h, TRACES_PYTHON, False):
            try:  # autocast stays on: each torch call of the body is cast as eager casts it
                return h(ctx, *args, **kwargs)
            except UseFallback:
                h = None
        # real tensors the function captured (a global weight) are program inputs like the
        # proxies, and autocast casts them as it casts those (the probe sees only proxies)
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        if any(isinstance(x, torch.Tensor) and not is_proxy(x) for x in leaves):
            args, kwargs = pytree.tree_unflatten(
                [ctx.lift_constant(x) if isinstance(x, torch.Tensor) and not is_proxy(x)
                 else x for x in leaves], spec)
        try:
            found = autocast_probe(ctx, func, args, kwargs)
        except AutocastError as e:
            raise type(e.error)(f"{where(ctx.loc)}: {e.error}") from None
        casts = found[0] if found is not None else {}
        enabled = enabled_device_types()
        with autocast_off():
            if h is not None:
                try:
                    if casts:
                        args, kwargs = cast_inputs(args, kwargs, casts, self._cast)
                        casts = {}
                    out = h(ctx, *args, **kwargs)
                except UseFallback:
                    h = None
            inlining = _inlining()
            if h is None and isinstance(func, types.FunctionType) and func not in inlining:
                # torch's own Python (torch.svd_lowrank): eager autocasts each call it
                # makes, and so do we, tracing through it with autocast on (once: a
                # function that hands itself back to the tracer is then one call)
                inlining.add(func)
                try:
                    with autocast_on(enabled):
                        return inline(func)(ctx, *args, **kwargs)
                except ThunderTraceError:
                    pass  # (a data-dependent body) an opaque call, checked below
                finally:
                    inlining.discard(func)
            if h is None:  # one opaque call: torch runs it, with autocast off
                problem = opaque_call_differs(func, args, kwargs, casts, enabled)
                if isinstance(problem, list):  # eager's dtypes: our values, cast to them
                    found = (casts, problem)
                elif problem is not None:
                    raise ThunderTraceError(
                        f"{where(ctx.loc)}: under torch.autocast, {problem}; thunder_ir "
                        "cannot reproduce what eager's autocast does inside this function. "
                        "Call it outside the autocast region (or with "
                        "torch.autocast(..., enabled=False) around it), casting its inputs "
                        "as you need.")
                if casts:
                    args, kwargs = cast_inputs(args, kwargs, casts, self._cast)
                out = fallback(ctx, func, args, kwargs)
            if found is not None:
                out = cast_results(out, found[1], self._cast)
        return out

    def _cast(self, p: Any, dtype: torch.dtype) -> Any:
        """``p.to(dtype)``, recorded (an autocast conversion)."""
        return self._dispatch(_T.to, (p, dtype), {})


__all__ = ["TraceContext", "TraceMode", "TracedProgram", "current", "recording", "tracing_now"]
