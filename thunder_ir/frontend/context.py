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
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, StopGradientOp
from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.location import source_location
from thunder_ir.dialects.ltorch_core import ChunkOp, GetitemOp, ProdOp, SplitOp, SumOp
from thunder_ir.dialects.ltorch_scan import CumsumOp
from thunder_ir.dialects.symbols import SYMBOLIC_NUMBERS, SymbolicError
from thunder_ir.dialects.symbols import current as current_symbols
from thunder_ir.dialects.traits import ViewLike
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
    AliasTracking,
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
    user_location,
    where,
)
from thunder_ir.frontend.examining import went_on
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.grad_tracking import GradTracking
from thunder_ir.frontend.inplace import InPlace
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
from thunder_ir.passes.context import overlays
from thunder_ir.runtime.layout_key import LayoutReads
from thunder_ir.runtime.origins import Captured, Origin

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
        writeback_modes: per write-back, how it writes (`thunder_ir.runtime.writes`:
            ``JOIN``, an input that did not require grad written with a value that does,
            which eager leaves requiring grad with a ``grad_fn``; ``QUIET``, written only
            through ``.data``, which does not bump eager's version counter; else
            ``PLAIN``); empty when every one is plain.
        attr_reads: per module (by id), the plain attributes the trace watched (some
            earlier epilogue wrote them) and those it read before writing them
            (`thunder_ir.frontend.attr_reads`, `thunder_ir.runtime.free_attrs`).
        layout_reads: whose layouts (which inputs', exactly or by class) the decisions
            that made ``layout_read`` read (`thunder_ir.frontend.layout_reads`); None:
            every input's.
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
    writeback_modes: tuple[int, ...] = ()
    attr_reads: dict[int, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    layout_reads: LayoutReads | None = None


def _is_complex(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and is_complex(t.dtype)


class TraceContext(Builder):
    """The program under construction while user code runs: the `Builder` of tracing.

    Its state lives in four parts, each of which owns its fields, and its behaviour in
    three: the program's inputs, ops and results here; in-place writes (``writes``,
    `thunder_ir.frontend.inplace.InPlace`) and eager's autograd rules (``grad``,
    `thunder_ir.frontend.grad_tracking.GradTracking`), each of which reads the parts it
    needs through this context:

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
        writes: in-place writes (`InPlace`).
        grad: eager's autograd rules (`GradTracking`).
        loc: the user's ``file:line`` of the torch call being handled.
        handlers: handlers of this trace only, ahead of `HANDLERS` (the compilation's own
            routes, `thunder_ir.passes.context.CompileContext.handlers`, and the extension
            API's ``replaces=`` diversions of torch callables): another thread's trace, or
            code run outside tracing, never sees them.
    """

    __slots__ = ("active", "aliases", "autograd", "build", "grad", "handlers", "loc", "reads",
                 "writes")
    writes: InPlace
    grad: GradTracking

    def __init__(self) -> None:
        self.build = ProgramBuild()
        self.autograd = EagerAutograd()
        self.aliases = AliasTracking()
        self.reads = StateReads()
        self.writes = InPlace(self)
        self.grad = GradTracking(self)
        self.active: set[SSAValue] = self.autograd.active
        self.loc: str = ""
        own = overlays()[2]  # the compilation's own routes (`CompileContext.handlers`)
        self.handlers: dict[Any, Any] = dict(own) if own else {}

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
        tracked = self.grad.track(built, results, view=_view)
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
        return self.grad.track(op, list(op.results), requires_grad, view)

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

    def read_layout(self, *values: Any, exact: bool = False) -> None:
        """See `Builder.read_layout`; ``exact``: the decision read exact strides (a size-1
        dim's too), which a layout's class does not fix."""
        self.reads.layout_read = True
        seen = [v._value if is_proxy(v) else v for v in values
                if is_proxy(v) or isinstance(v, SSAValue)]
        if not values:  # (no value named: every input's layout counts)
            self.reads.layout_deps.read_all()
        elif seen:
            aliases = self.aliases
            self.reads.layout_deps.read(self.build.program.block, self.build.input_kinds,
                                        aliases.layouts, aliases.view_parent.__contains__,
                                        seen, exact)

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
                self.read_layout(*_tensor_operands(op))  # eager's view works or raises by layout
            try:
                found = view_layouts(op, operands)
            except LayoutError as e:
                raise RuntimeError(f"{e}\n  at {where(self.loc)}") from None
            outs = [lay for lay, _ in found]
            copied = [r for r, (_, is_view) in zip(tensors, found) if not is_view]
            if copied:  # a reshape that copied: nothing aliases its result
                self.aliases.not_views.update(copied)
                self.read_layout(*_tensor_operands(op))
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


def _tensor_operands(op: Operation) -> list[SSAValue]:
    return [o for o in op.operands if isinstance(o.type, TensorType)]


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


FACTORIES = frozenset([
    torch.zeros, torch.ones, torch.empty, torch.full, torch.rand, torch.randn, torch.randint,
    torch.arange, torch.linspace, torch.logspace, torch.eye, torch.tensor, torch.zeros_like,
    torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like, torch.randn_like,
    torch.randint_like, torch.empty_strided, torch.randperm, torch.scalar_tensor,
    torch.Tensor.new_zeros, torch.Tensor.new_ones, torch.Tensor.new_empty,
    torch.Tensor.new_full, torch.Tensor.new_tensor])
"""Torch calls that make a new tensor and take ``requires_grad=``: with it true, the new
tensor is an autograd leaf (`TraceMode._grad_factory`)."""


class TraceMode(TorchFunctionMode):
    """Routes every torch call made while tracing to its handler."""

    def __init__(self, ctx: TraceContext) -> None:
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        recorder = self.ctx.reads.settrace_hook
        if recorder is None:
            try:
                return self._dispatch(func, args, kwargs or {})
            except ThunderTraceError as e:  # `thunder_ir.examine` goes on past it
                return went_on(self.ctx, e, func, args, kwargs or {})
        sys.settrace(None)  # thunder_ir's own code reads no user globals: not recorded
        try:
            return self._dispatch(func, args, kwargs or {})
        except ThunderTraceError as e:
            return went_on(self.ctx, e, func, args, kwargs or {})
        finally:
            sys.settrace(recorder)

    def _dispatch(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        ctx = self.ctx
        if func in FACTORIES and kwargs.get("requires_grad"):
            return self._grad_factory(func, args, kwargs)
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
            ctx.read_layout(*[a for a in args if is_proxy(a)] or [None],
                            exact=func in EXACT_LAYOUT_READS)
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

    def _grad_factory(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A factory called with ``requires_grad=True`` (``torch.zeros(3,
        requires_grad=True)``): eager's new leaf, as the factory without it followed by
        ``requires_grad_()`` (`GradTracking.set_requires_grad`), whatever the grad mode."""
        ctx = self.ctx
        out = self._dispatch(func, args, {k: v for k, v in kwargs.items()
                                          if k != "requires_grad"})
        ctx.loc = user_location()
        if not is_proxy(out):
            return out  # (not reached: each factory makes a traced tensor)
        if not differentiable(out._value):
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               f"gradients\n  at {where(ctx.loc)}")
        ctx.grad.set_requires_grad(out, True)
        return out

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
