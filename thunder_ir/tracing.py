"""Tracing: run the user's Python natively with proxies and record every torch call.

`trace_program` flattens the inputs (pytree), makes a proxy per tensor (and per parameter
and buffer of a module, in a shallow copy of the module tree: `_shadow_modules`), runs the code
under `TraceMode`, and returns a `TracedProgram`: the ``ltorch`` program plus what the
runtime needs to call it (input and output layout, write-backs).

Under `TraceMode` each torch function, tensor method and operator goes to a handler:

* a known op (see `thunder_ir.torch_map`) becomes its ``ltorch`` op;
* an unknown one becomes an opaque ``torch.call`` whose result types come from torch's meta
  kernels, so models with ops we lack still run;
* metadata reads (``.shape``, ``.dtype``, ``.size()``…) answer directly;
* reads of data (``.item()``, ``bool(t)``…) raise `DataDependentError` naming the user's
  file:line and what to do instead.

Autograd is traced with eager's rules, so that the program differentiates exactly what
eager would. Grad mode is real while user code runs (``torch.no_grad()``,
``torch.enable_grad()``, ``torch.set_grad_enabled`` and ``torch.inference_mode()`` switch
it as they do eagerly). Each value that requires grad is *active* (`TraceContext.active`):
an op's results are active when grad mode is on, one of its operands is active, and the
result can carry a gradient (floating point or complex; eager's own answer for opaque
calls). Where eager would cut the gradient (``detach``, ``no_grad``, a result that eager
marks as not requiring grad) the tracer records ``autograd.stop_gradient``, so autodiff,
which follows dataflow, sees the same cut. Proxies report ``requires_grad`` accordingly.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import inspect
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, StopGradientOp, make_function
from thunder_ir.dialects.base import Emitter, OperandRef, ShapeError, ThunderOp, group, to_attr
from thunder_ir.dialects.prims import ConstantOp
from thunder_ir.dialects.program import Program
from thunder_ir.dialects.torch import (  # torch_name: also re-exported from here
    CallOp,
    UnnamedCallableError,
    make_call,
    meta_call,
    torch_name,
)
from thunder_ir.dialects.types import (
    NumberType,
    TensorType,
    is_complex,
    is_float,
    type_of_tensor,
)
from thunder_ir.passes.vjp import NOT_DIFFERENTIABLE, load_vjp_rules
from thunder_ir.proxy import TensorProxy, is_proxy

# --------------------------------------------------------------------------- errors


class ThunderTraceError(RuntimeError):
    """A program could not be traced. The message names the user's file:line."""


class DataDependentError(ThunderTraceError):
    """User code needs a tensor's value, which is unknown while tracing.

    The message ends by pointing at the ``torch.compile`` backend, which runs such code with
    graph breaks."""

    GRAPH_BREAKS = ("Code that needs graph breaks runs as it is under "
                    "torch.compile(fn, backend=thunder_ir.dynamo.ThunderCompiler()): Dynamo "
                    "runs the data-dependent part in Python and thunder_ir compiles the graphs "
                    "around it.")

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}\n{self.GRAPH_BREAKS}")


class UseFallback(Exception):
    """Raised by a handler that cannot express a call as its ltorch op (a tensor where the
    op takes a Python number, an argument it does not model): the tracer records the call
    as an opaque ``torch.call`` instead, which torch computes and differentiates."""


# --------------------------------------------------------------------------- locations

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_OUR_PACKAGES = ("thunder_ir", "thunder_ir.dialects", "thunder_ir.passes",
                 "thunder_ir.lowering", "thunder_ir.runtime")
_OUR_DIRS: tuple[str, ...] = ()
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep  # contextlib, functools
_SITE = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})
_SKIP_CACHE: dict[str, bool] = {}


def _our_dirs() -> tuple[str, ...]:
    """The folders of thunder_ir's own packages (wherever they are installed) and of
    Python's standard library: frames there are not the user's."""
    global _OUR_DIRS
    if not _OUR_DIRS:
        dirs: list[str] = []
        for name in _OUR_PACKAGES:
            mod = importlib.import_module(name)
            # The package's own folder (not the checkout root that a source tree's
            # `thunder_ir.__path__` also holds: the user's files may live there).
            dirs.append(os.path.dirname(os.path.abspath(str(mod.__file__))) + os.sep)
        _OUR_DIRS = tuple(dirs)
    return _OUR_DIRS


def _skip(filename: str) -> bool:
    """True for frames of torch and thunder_ir itself; user code (and other libraries,
    and code typed at a prompt or exec'd from a string) is where errors point."""
    s = _SKIP_CACHE.get(filename)
    if s is None:
        if filename.startswith("<"):  # <stdin>, <string>, <ipython-input-…>: user code
            s = filename.startswith(("<frozen", "<thunder"))
        else:
            path = os.path.abspath(filename)
            s = (path.startswith(_TORCH_DIR) or path.startswith(_our_dirs())
                 or (path.startswith(_STDLIB) and not path.startswith(_SITE)))
        _SKIP_CACHE[filename] = s
    return s


def user_location() -> str:
    """``/path/to/file.py:line`` of the innermost frame in user code (outside torch and
    thunder_ir)."""
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not _skip(code.co_filename):
            return f"{code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>:0"


def where(loc: str) -> str:
    """How an error names a location: the file's full path and the line."""
    return loc or "<unknown>:0"


# --------------------------------------------------------------------------- program state


@dataclass
class TracedProgram:
    """A traced ``ltorch`` program and how to call it.

    Attributes:
        module: the IR (one ``func.func`` named ``computation``).
        input_kinds: per program argument, where its value comes from at call time:
            ``("arg", i)`` flat user-argument leaf i, ``("param", name)`` a module parameter
            or buffer, ``("const", tensor)`` a tensor captured from user code.
        output_spec: pytree spec of the user's output.
        output_leaves: per output leaf, ``("out", k)`` program output k or ``("value", v)``.
        writebacks: ``(program output index, input kind)`` for inputs written in place.
        input_requires_grad: per program argument, whether it is a gradient source (the
            tensor requires grad, and grad mode was on where the code read it).
        output_requires_grad: per program output, whether eager's result requires grad.
        detach_outputs: program outputs that are detached aliases of inputs requiring grad
            (returned through ``.detach()`` so that they do not require grad).
        global_reads: per module namespace, the global names user code read while traced
            (the cache guards their values).
        replays: in-place metadata ops (``x.t_()``) on argument leaves, replayed on the
            caller's tensors after each call, before the write-backs.
    """

    module: ModuleOp
    input_kinds: list[tuple[Any, ...]]
    output_spec: Any
    output_leaves: list[tuple[str, Any]]
    writebacks: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list)
    input_requires_grad: list[bool] = field(default_factory=list)
    output_requires_grad: list[bool] = field(default_factory=list)
    detach_outputs: list[int] = field(default_factory=list)
    global_reads: list[tuple[dict[str, Any], set[str]]] = field(default_factory=list)
    replays: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = field(
        default_factory=list)


def _is_complex(v: SSAValue) -> bool:
    t = v.type
    return isinstance(t, TensorType) and is_complex(t.dtype)


def _differentiable(v: SSAValue) -> bool:
    """A value that can carry a gradient: a floating-point or complex tensor."""
    t = v.type
    return isinstance(t, TensorType) and (is_float(t.dtype) or is_complex(t.dtype))


class TraceContext:
    """The program under construction while user code runs.

    Attributes:
        block: where ops are recorded (the program's body, or a region being traced,
            such as a custom ``Function``'s backward; see `into`).
        active: values that require grad (see the module doc).
        pending: gradient sources met while grad mode was off; they become active if user
            code turns grad mode on (``torch.enable_grad()`` inside a no-grad call).
        inference: values created in inference mode (eager's inference tensors).
        storage, members, saved: which values share storage, and which ops' backwards
            saved which values (`note_saved`): an in-place write to a saved value makes
            eager's backward through that op raise, and so does thunder_ir's.
    """

    def __init__(self) -> None:
        self.program = Program("computation", [])
        self.block: Block = self.program.block
        self.emitter = self.program.emitter
        self.input_kinds: list[tuple[Any, ...]] = []
        self.input_requires_grad: list[bool] = []
        self.input_proxies: list[tuple[TensorProxy, SSAValue, tuple[Any, ...]]] = []
        self._consts: dict[int, TensorProxy] = {}
        self._numbers: dict[tuple[type, Any], SSAValue] = {}
        self._names: set[str] = set()
        self.loc: str = ""
        self.active: set[SSAValue] = set()
        self.pending: list[SSAValue] = []
        self.inference: set[SSAValue] = set()
        # Eager's saved-tensor checks: which storage each value lives in (views share
        # their base's), and the ops whose backward saved each value.
        self.leaf_proxies: set[int] = set()  # the program's inputs: eager's leaves
        self.call_start: Operation | None = None  # the last op before this torch call
        self.storage: dict[SSAValue, int] = {}
        self.members: dict[int, list[SSAValue]] = {}
        self.saved: dict[SSAValue, list[Operation]] = {}
        # Module namespaces whose globals user code read: id -> (namespace, names).
        self.global_reads: dict[int, tuple[dict[str, Any], set[str]]] = {}
        # What tracing ran instead of the user's modules: a copy's id -> the original.
        self.originals: dict[int, torch.nn.Module] = {}
        # The sys.settrace hook recording global reads (`_global_reads_recorded`).
        self.recorder: Callable[..., Any] | None = None
        # In-place metadata ops on arguments (x.t_()), to replay on the caller's tensors:
        # (argument leaf index, method name, args, kwargs).
        self.replays: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = []
        # Arguments passed in that share memory: storage id -> how to name them.
        self.aliased_args: dict[int, str] = {}
        # Arguments that require grad and are not leaves (they have a grad_fn).
        self.nonleaf_inputs: set[SSAValue] = set()

    # ---- inputs

    def _unique(self, name: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "t"
        if base[0].isdigit():
            base = "t_" + base
        n, i = base, 1
        while n in self._names:
            n, i = f"{base}_{i}", i + 1
        self._names.add(n)
        return n

    def add_input(self, t: Attribute, name: str, kind: tuple[Any, ...]) -> SSAValue:
        """Appends a program argument."""
        block = self.program.block
        v = block.insert_arg(t, len(block.args))
        v.name_hint = self._unique(name)
        self.input_kinds.append(kind)
        self.input_requires_grad.append(False)
        return v

    def tensor_input(self, tensor: torch.Tensor, name: str, kind: tuple[Any, ...]
                     ) -> TensorProxy:
        """A proxy for a tensor the program takes as an argument.

        A tensor that requires grad is a gradient source: active at once when grad mode
        is on, else pending until user code turns it on."""
        v = self.add_input(type_of_tensor(tensor), name, kind)
        rg = tensor.requires_grad
        if rg and tensor.grad_fn is not None:  # not a leaf in eager: an intermediate
            self.nonleaf_inputs.add(v)
        if rg:
            if torch.is_grad_enabled():
                self.active.add(v)
                self.input_requires_grad[-1] = True
            else:
                self.pending.append(v)
        if tensor.is_inference():
            self.inference.add(v)
        p = TensorProxy(v, requires_grad=rg)
        self.remember(p)
        self.leaf_proxies.add(id(p))
        self.input_proxies.append((p, v, kind))
        return p

    def lift_constant(self, tensor: torch.Tensor) -> TensorProxy:
        """A real tensor met during tracing becomes a program argument fed at call time."""
        p = self._consts.get(id(tensor))
        if p is None:
            p = self.tensor_input(tensor, "c", ("const", tensor))
            self._consts[id(tensor)] = p
        return p

    def activate_pending(self) -> None:
        """Grad mode came on: the pending gradient sources become active. Their uses so
        far (under no-grad) read them through ``autograd.stop_gradient``."""
        block = self.program.block
        for v in self.pending:
            uses = list(v.uses)
            if uses:
                sg = StopGradientOp.create(operands=[v], result_types=[v.type])
                if block.first_op is None:
                    block.add_op(sg)
                else:
                    block.insert_op_before(sg, block.first_op)
                v.replace_uses_with_if(sg.results[0], _not_used_by(sg))
            self.active.add(v)
            self.input_requires_grad[v.index] = True  # type: ignore[attr-defined]
        self.pending.clear()

    def is_leaf(self, v: SSAValue) -> bool:
        """True for the program's arguments (eager's leaves: inputs, parameters)."""
        return v.owner is self.program.block

    # ---- values

    def number(self, value: Any) -> SSAValue:
        """A Python number as an SSA value (one ``prims.constant`` per distinct value per
        block; ``0.0`` and ``-0.0`` are distinct)."""
        key = (type(value), repr(value) if type(value) is float else value)
        v = self._numbers.get(key)
        if v is None:
            v = self.emitter.emit(ConstantOp, value=value)
            self._numbers[key] = v
        return v

    def value_of(self, x: Any) -> SSAValue:
        """The SSA value of a proxy, a real tensor (lifted) or a Python number."""
        if is_proxy(x):
            return x._value
        if isinstance(x, torch.Tensor):
            return self.lift_constant(x)._value
        if type(x) in (bool, int, float):
            return self.number(x)
        raise ThunderTraceError(f"{where(self.loc)}: cannot use {type(x).__name__} "
                                f"{x!r} as a tensor operand")

    def emit_view(self, op: type[ThunderOp], *operands: Any, **params: Any) -> Any:
        """`emit` for an op whose results are views of its first operand (``x.view``,
        ``x[0]``): made while grad mode is off, they still require grad in eager."""
        return self.emit(op, *operands, _view=True, **params)

    def emit(self, op: type[ThunderOp], *operands: Any, _view: bool = False,
             **params: Any) -> Any:
        """Builds ``op`` at the current user location; shape errors name the location.

        Returns its result (a list for several), with eager's gradient rules applied
        (`track`)."""
        self.emitter.loc = StringAttr(self.loc) if self.loc else None
        try:
            out = self.emitter.emit(op, *operands, **params)
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
        return tracked if isinstance(out, list) else tracked[0]

    def record(self, op: Operation, requires_grad: Sequence[bool] | None = None,
               view: bool = False) -> list[SSAValue]:
        """Appends a prebuilt op at the current location; its results, tracked."""
        if self.loc:
            op.attributes["loc"] = StringAttr(self.loc)
        self.block.add_op(op)
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
        if torch.is_inference_mode_enabled():
            self.inference.update(results)
        if self.block is not self.program.block:
            return results  # a region (a custom backward): no gradients of gradients
        active = self.active
        if not active or not any(o in active for o in op.operands):
            return results
        grad = torch.is_grad_enabled()
        if grad and self.inference and any(o in self.inference for o in op.operands):
            self._check_inference_inputs(op)
        if requires_grad is None:
            diff = (grad and type(op) not in NOT_DIFFERENTIABLE) or (view and not grad)
            flags = [diff and _differentiable(r) for r in results]
        else:
            flags = list(requires_grad)
        out: list[SSAValue] = []
        for r, f in zip(results, flags, strict=True):
            if f and grad:
                active.add(r)
                out.append(r)
            elif f:
                out.append(self.detached_view(op, r))
            elif _differentiable(r):
                out.append(self.stop_gradient(r))
            else:
                out.append(r)
        if grad and any(flags):
            self.note_saved(op, out)
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
            fn.attributes["loc"] = StringAttr(self.loc)
        self.block.add_op(fn)
        r = fn.results[0]
        self.active.add(r)
        return r

    def stop_gradient(self, v: SSAValue) -> SSAValue:
        """``v`` with its gradient cut (``autograd.stop_gradient``)."""
        self.emitter.loc = StringAttr(self.loc) if self.loc else None
        r: SSAValue = self.emitter.emit(StopGradientOp, v)
        if v in self.inference:
            self.inference.add(r)
        return r

    def _check_inference_inputs(self, op: Any) -> None:
        """Raises eager's error where an op would save an inference tensor for backward:
        the op's torch function runs on meta tensors flagged as the traced ones are."""
        def meta(v: SSAValue) -> Any:
            t = v.type
            if isinstance(t, NumberType):
                return t.python_type(1)
            assert isinstance(t, TensorType)
            if v in self.inference:
                with torch.inference_mode():
                    return torch.empty(t.sizes, dtype=t.dtype, device="meta")
            return torch.empty(t.sizes, dtype=t.dtype, device="meta",
                               requires_grad=v in self.active and _differentiable(v))

        metas = [meta(v) for v in op.operands]
        try:
            with torch.enable_grad():
                if isinstance(op, CallOp):
                    op.run(metas)
                elif isinstance(op, ThunderOp):
                    grouped = group(op.operand_layout(), metas, op._segment_sizes())
                    type(op).ref(*grouped, **{k: v for k, v in op.params().items()
                                              if v is not None})
        except RuntimeError as e:
            if "nference tensor" in str(e):
                raise RuntimeError(f"{e}\n  at {where(self.loc)}") from None

    def wrap(self, value: Any, base: TensorProxy | None = None) -> Any:
        """Proxies for op results (a list for several)."""
        if isinstance(value, list):
            return [self.wrap(v, base) for v in value]
        if isinstance(value.type, NumberType):
            raise ThunderTraceError(f"{where(self.loc)}: traced numbers are not supported")
        return self.remember(TensorProxy(value, requires_grad=value in self.active, base=base))

    def remember(self, p: TensorProxy) -> TensorProxy:
        """Notes which storage ``p``'s value lives in (its base's, for a view)."""
        v = p._value
        if v not in self.storage:
            self.storage[v] = p._storage
            self.members.setdefault(p._storage, []).append(v)
        return p

    def note_saved(self, op: Operation, results: Sequence[SSAValue]) -> None:
        """Records the operands and results eager's backward of ``op`` saves (a meta run of
        its torch function under ``saved_tensors_hooks``, cached per signature);
        ``results``: the values the program uses for the op's results."""
        where_saved = _eager_saves(op, [o in self.active for o in op.operands])
        if not where_saved:
            return
        operands, saved_results = where_saved
        for i in operands:
            self.saved.setdefault(op.operands[i], []).append(op)
        for i in saved_results:
            self.saved.setdefault(results[i], []).append(op)

    def _written(self, target: TensorProxy, skip: set[Operation]) -> None:
        """An in-place write to ``target``'s storage: every op whose backward saved a value
        of that storage would, in eager, raise when its backward runs; so will ours."""
        for v in self.members.get(target._storage, ()):
            for op in self.saved.pop(v, ()):
                if op not in skip and "saved_modified" not in op.attributes:
                    t = v.type
                    assert isinstance(t, TensorType)
                    op.attributes["saved_modified"] = StringAttr(
                        "one of the variables needed for gradient computation has been "
                        f"modified by an inplace operation: [{t.pretty()}], saved for the "
                        f"backward of {op.name} at {where(_loc_of(op))}, written in place at "
                        f"{where(self.loc)}")

    def assign(self, target: Any, new: SSAValue, opname: str) -> TensorProxy:
        """Functionalizes an in-place op: ``target`` now stands for ``new``.

        Eager's rules for in-place ops apply: the result must be castable to the target's
        dtype; a leaf that requires grad may not be written while grad mode is on; an
        inference tensor only inside inference mode. A tensor that requires grad, written
        while grad mode is off (an EMA update under ``torch.no_grad()``), keeps its place in
        the autograd graph: later uses still send their gradient to it."""
        if not is_proxy(target):
            raise ThunderTraceError(f"{where(self.loc)}: in-place {opname} on a tensor that is "
                                    "not traced; pass it as an argument instead")
        if target._storage in self.aliased_args and (target._base_proxy is not None
                                                      or target.has_views()):
            raise ThunderTraceError(
                f"{where(self.loc)}: in-place {opname} on an argument that shares memory with "
                f"another (arguments {self.aliased_args[target._storage]} are views of one "
                "storage) is not supported by thunder_ir. Pass separate tensors (e.g. "
                "`.clone()` one of them), or write out of place.")
        if target._base_proxy is not None or target.has_views():
            raise ThunderTraceError(
                f"{where(self.loc)}: in-place {opname} on a tensor that shares memory with a "
                "view is not supported by thunder_ir (the write would have to reach the "
                "other aliases). Use the out-of-place form, e.g. `y = x.add(1)`, or .clone() "
                "the view first.")
        old = target._value
        # The ops this torch call built (the in-place op's functional form, casts): their
        # reads are not later writes. A value that existed before (copy_'s source) is not.
        made = self.ops_of_this_call()
        tt, nt = old.type, new.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if nt.sizes != tt.sizes:
            raise ThunderTraceError(f"{where(self.loc)}: in-place {opname} would change the "
                                    f"shape {list(tt.sizes)} to {list(nt.sizes)}")
        if old in self.inference and not torch.is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not "
                               "allowed.You can make a clone to get a normal tensor before "
                               "doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                               f"for more details.\n  at {where(self.loc)}")
        if nt.dtype != tt.dtype:
            if not torch.can_cast(nt.dtype, tt.dtype):
                raise RuntimeError(f"result type {_type_name(nt.dtype)} can't be cast to the "
                                   f"desired output type {_type_name(tt.dtype)}\n"
                                   f"  at {where(self.loc)}")
            from thunder_ir.dialects.ltorch import OPS

            new = self.emit(OPS["to_dtype"], new, dtype=tt.dtype)
        if not torch.is_grad_enabled() and new in self.active:
            new = self.stop_gradient(new)  # written under no-grad: the values, no gradient
        if old in self.active:
            if not torch.is_grad_enabled():
                new = self.keep_identity(old, new)
            elif old in self.nonleaf_inputs:
                raise ThunderTraceError(
                    f"{where(self.loc)}: in-place {opname} on an argument that requires grad "
                    "and is not a leaf (it has a grad_fn) is not supported by thunder_ir: its "
                    "autograd history would have to change outside the program. Pass "
                    "`x.clone()`, or write out of place.")
            elif id(target) in self.leaf_proxies:
                raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                   f"in-place operation.\n  at {where(self.loc)}")
            elif new not in self.active or not (isinstance(new.owner, Operation)
                                                 and old in new.owner.operands):
                new = self.overwrites(old, new)
        self._written(target, made)
        target._value = new
        self.storage[new] = target._storage
        self.members.setdefault(target._storage, []).append(new)
        return target

    def ops_of_this_call(self) -> set[Operation]:
        """The ops recorded since the torch call being traced began (`TraceMode`)."""
        op = self.block.first_op if self.call_start is None else self.call_start.next_op
        out: set[Operation] = set()
        while op is not None:
            out.add(op)
            op = op.next_op
        return out

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

    def keep_identity(self, old: SSAValue, new: SSAValue) -> SSAValue:
        """``new``'s value with ``old``'s place in the autograd graph (an in-place write under
        no-grad): an ``autograd.function`` whose backward passes the cotangent to ``old``."""
        body = Block(arg_types=[old.type])
        return self._requires_grad(make_function("inplace_update", [old], [new], [0], body,
                                                 [body.args[0]]))

    # ---- tracing into a region

    @contextlib.contextmanager
    def into(self, block: Block) -> Iterator[None]:
        """Records ops into ``block`` (a region's body) while the context is open."""
        saved = (self.block, self.emitter, self._numbers)
        self.block, self.emitter, self._numbers = block, Emitter(block.add_op), {}
        try:
            yield
        finally:
            self.block, self.emitter, self._numbers = saved


def _loc_of(op: Operation) -> str:
    loc = op.attributes.get("loc")
    return loc.data if isinstance(loc, StringAttr) else ""


_SAVES: dict[Any, tuple[tuple[int, ...], tuple[int, ...]] | None] = {}


def _eager_saves(op: Operation, active: Sequence[bool]
                 ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Which operands and results eager's backward of ``op`` saves, by running its torch
    function on meta tensors (the ``active`` ones requiring grad) under
    ``saved_tensors_hooks``; None if it saves none or cannot run (cached per signature)."""
    if not isinstance(op, ThunderOp) or isinstance(op, FunctionOp):
        return None  # a custom Function's saved tensors are what its ctx saved
    try:
        key: Any = (op.name, tuple(o.type for o in op.operands), str(op.properties),
                    tuple(active))
        hash(key)
    except TypeError:
        return None
    if key in _SAVES:
        return _SAVES[key]
    metas: list[Any] = []
    for o, a in zip(op.operands, active, strict=True):
        t = o.type
        if isinstance(t, TensorType):
            metas.append(torch.empty(t.sizes, dtype=t.dtype, device="meta",
                                     requires_grad=a and _differentiable(o)))
        elif isinstance(t, NumberType):
            metas.append(t.python_type(1))
        else:
            metas.append(None)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    result: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if isinstance(op, CallOp):
                out = op.run(metas)
            else:
                grouped = group(op.operand_layout(), metas, op._segment_sizes())
                out = type(op).ref(*grouped, **op.params())
        outs = list(out) if isinstance(out, list | tuple) else [out]
        ids = {id(t._base if t._base is not None else t) for t in saved}  # views: their base
        operands = tuple(i for i, m in enumerate(metas) if id(m) in ids)
        results = tuple(i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and
                        id(o._base if o._base is not None else o) in ids)
        result = (operands, results) if operands or results else None
    except Exception:  # a kernel without a meta implementation: nothing known
        result = None
    _SAVES[key] = result
    return result


def _not_used_by(op: Operation) -> Callable[[Any], bool]:
    return lambda use: use.operation is not op


def _type_name(dtype: torch.dtype) -> str:
    """Eager's name of a dtype in type-promotion errors (``Float``, ``Long``)."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat",
            torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


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
    try:
        yield
    finally:
        s.pop()


# --------------------------------------------------------------------------- the mode

Handler = Callable[..., Any]
HANDLERS: dict[Any, Handler] = {}
"""torch callable -> handler(ctx, *args, **kwargs). Filled by `thunder_ir.torch_map`."""
TRACING_CONTEXTS: list[Callable[[], Any]] = []
"""Factories of context managers entered around user code while it is traced (and only
then): e.g. the extension API's diversion of ``replaces=`` functions."""

_T = torch.Tensor


def getter(name: str) -> Any:
    """The ``__get__`` of a Tensor property, as torch function handlers receive it."""
    return getattr(_T, name).__get__


_COMPUTED_GETTERS = {getter(n) for n in ("T", "mT", "H", "mH", "real", "imag", "data")}
METADATA: set[Any] = {
    torch.device,  # constructing one (FX code spells device constants as device(...))
    _T.size, _T.dim, _T.numel, _T.nelement, _T.ndimension, _T.__len__, _T.is_floating_point,
    _T.is_complex, _T.element_size, _T.get_device, _T.is_contiguous, _T.stride,
    _T.is_signed, _T.storage_offset, _T.is_conj, _T.is_neg, _T.is_same_size,
    torch.is_floating_point, torch.is_complex, torch.numel, torch.is_conj, torch.is_neg,
    torch.is_same_size, torch.is_signed,
}
DATA_DEPENDENT: dict[Any, str] = {
    _T.__bool__: "bool(tensor)", _T.item: ".item()", _T.tolist: ".tolist()",
    _T.__int__: "int(tensor)", _T.__float__: "float(tensor)",
    _T.__index__: "using a tensor as an index",
    _T.numpy: ".numpy()", _T.nonzero: ".nonzero()", torch.nonzero: "torch.nonzero",
    torch.masked_select: "torch.masked_select", _T.masked_select: ".masked_select()",
    torch.unique: "torch.unique", _T.unique: ".unique()", _T.data_ptr: ".data_ptr()",
    torch.argwhere: "torch.argwhere", _T.__array__: "numpy conversion",
    _T.__complex__: "complex(tensor)", torch.is_nonzero: "torch.is_nonzero",
    _T.equal: ".equal()",
    torch.equal: "torch.equal", _T.allclose: ".allclose()", torch.allclose: "torch.allclose",
}

_DATA_HINT = ("its value is not known while tracing. Keep the computation in tensors (for "
              "example torch.where instead of `if`), or compute it outside the jitted function "
              "and pass the result in as an argument.")

_any_autocast = torch._C._is_any_autocast_enabled


def _repr(self: Any, *a: Any, **k: Any) -> str:
    return self.describe() if is_proxy(self) else object.__repr__(self)


def _refuse_autocast(ctx: TraceContext) -> None:
    raise ThunderTraceError(
        f"{where(ctx.loc)}: torch.autocast inside a jitted function is not supported yet: "
        "thunder_ir does not apply autocast's casting rules to traced ops, so results would "
        "differ from eager. Cast explicitly instead (e.g. `h.to(torch.bfloat16)` and a "
        "bfloat16 module), or run that part outside the jitted function.")


class TraceMode(TorchFunctionMode):
    """Routes every torch call made while tracing to its handler."""

    def __init__(self, ctx: TraceContext) -> None:
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        recorder = self.ctx.recorder
        if recorder is None:
            return self._dispatch(func, args, kwargs or {})
        sys.settrace(None)  # thunder_ir's own code reads no user globals: not recorded
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            sys.settrace(recorder)

    def _dispatch(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        h = HANDLERS.get(func)
        ctx = self.ctx
        if h is not None:
            ctx.loc = user_location()
            ctx.call_start = ctx.block.last_op
            if _any_autocast():
                _refuse_autocast(ctx)
            try:
                return h(ctx, *args, **kwargs)
            except UseFallback:
                return fallback(ctx, func, args, kwargs)
        if func in METADATA or (getattr(func, "__name__", "") == "__get__"
                                and func not in _COMPUTED_GETTERS):
            with torch._C.DisableTorchFunction():
                return func(*args, **kwargs)
        if func in (_T.__repr__, _T.__str__, _T.__format__):
            return _repr(*args)
        ctx.loc = user_location()
        what = DATA_DEPENDENT.get(func)
        if what is not None:
            raise DataDependentError(
                f"{where(ctx.loc)}: {what} needs a traced tensor's value, but {_DATA_HINT}")
        if _any_autocast():
            _refuse_autocast(ctx)
        ctx.call_start = ctx.block.last_op
        return fallback(ctx, func, args, kwargs)


# --------------------------------------------------------------------------- fallback

_NOT_FUNCTIONAL = frozenset({"resize_", "resize_as_", "set_", "as_strided_", "bernoulli_"})
"""In-place methods whose same-named out-of-place function means something else."""


def fallback(ctx: TraceContext, func: Any, args: Sequence[Any], kwargs: dict[str, Any],
             result_type: Attribute | None = None) -> Any:
    """Records an unknown torch function as an opaque ``torch.call``.

    Result types, the result structure (a named tuple, ``None`` entries) and which results
    require grad come from running the function on meta tensors; a caller that knows the
    one result's type (a meta kernel that would read a tensor's value) passes it."""
    try:
        name = torch_name(func)
    except UnnamedCallableError as e:
        raise ThunderTraceError(str(e)) from None
    if (name.endswith("_") and not name.endswith("__") and args and is_proxy(args[0])
            and name.startswith(("torch.Tensor.", "torch."))):
        owner, _, short = name.rpartition(".")
        functional = None if short in _NOT_FUNCTIONAL else \
            getattr(torch.Tensor if owner == "torch.Tensor" else torch, short[:-1], None)
        if functional is not None:
            out = fallback(ctx, functional, args, kwargs)
        else:  # uniform_, normal_, zero_...: applied to a copy, drawn as eagerly
            out = fallback(ctx, _inplace_on_copy(), (name, *args), kwargs)
        return ctx.assign(args[0], out._value, name)
    operands: list[SSAValue] = []
    passed: list[Any] = []  # the tensor (proxy) passed for each operand
    index: dict[int, int] = {}

    def encode(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            v = ctx.value_of(x)
            k = index.get(id(v))
            if k is None:
                k = index[id(v)] = len(operands)
                operands.append(v)
                passed.append(x)
            return OperandRef(k)
        if isinstance(x, list | tuple | torch.Size):
            return tuple(encode(e) for e in x)
        try:
            to_attr(x)
        except TypeError:
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name} got an argument thunder_ir cannot record: "
                f"{type(x).__name__} {x!r}") from None
        return x

    enc_args = [encode(a) for a in args]
    enc_kwargs = {k: encode(v) for k, v in kwargs.items()}
    grad_mask = None  # eager's requires_grad per result needs stand-ins that require grad
    if ctx.active:
        grad_mask = [v in ctx.active and _differentiable(v) for v in operands]
        if not any(grad_mask):
            grad_mask = None
    if result_type is not None:
        op = make_call(name, operands, enc_args, enc_kwargs, result_types=[result_type])
        return ctx.wrap(ctx.record(op)[0])
    try:
        meta = meta_call(name, operands, enc_args, enc_kwargs, grad_mask)
    except ThunderTraceError:
        raise
    except Exception as e:
        if "out" in kwargs and "cast" in str(e):
            _raise_out_cast(ctx, name, operands, enc_args, enc_kwargs, kwargs["out"])
        if _is_data_dependent(e):
            raise DataDependentError(
                f"{where(ctx.loc)}: {name} needs a traced tensor's values (to size its result "
                f"or to check its inputs), but {_DATA_HINT}") from None
        if "no fake impl or Meta kernel" in str(e):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name} cannot be traced: torch has no meta kernel for it "
                "(its result's shape is unknown without running it, often because it depends "
                "on the values). Run it outside the jitted function and pass its result in."
            ) from None
        raise ThunderTraceError(f"{where(ctx.loc)}: {name} failed on traced inputs "
                                f"(meta run): {e}") from None
    if meta.mutated:
        if "out" in kwargs:
            _check_out_shapes(ctx, name, kwargs["out"], meta.result_types)
        result = _call_on_copies(ctx, name, operands, passed, enc_args, enc_kwargs, meta,
                                 grad_mask is not None)
        out = kwargs.get("out")
        if is_proxy(out):  # eager returns the out= tensor itself
            return out
        if isinstance(out, tuple | list) and out and all(is_proxy(o) for o in out):
            return meta.rebuild(list(out))
        return result
    op = make_call(name, operands, enc_args, enc_kwargs, result_types=meta.result_types,
                   layout=meta.layout, nograd=meta.nograd)
    results = ctx.record(op, meta.requires_grad if grad_mask is not None else None,
                         view=any(i is not None for i in meta.views))
    return meta.rebuild([ctx.wrap(r, None if i is None else _root_of(passed[i]))
                         for r, i in zip(results, meta.views, strict=True)])


def _out_tensors(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple | list) else [out]


def _check_out_shapes(ctx: TraceContext, name: str, out: Any,
                      result_types: Sequence[Attribute]) -> None:
    """Eager resizes an ``out=`` tensor of another shape (the caller's tensor changes
    shape); thunder_ir keeps its arguments' shapes, so it says so instead."""
    for o, t in zip(_out_tensors(out), result_types):
        if is_proxy(o) and isinstance(t, TensorType) and tuple(o.shape) != tuple(t.sizes):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: {name}(..., out=) would resize the out= tensor from "
                f"{list(o.shape)} to {list(t.sizes)}, which thunder_ir does not do to a "
                "traced tensor. Pass an out= tensor of the result's shape, or use the result "
                "instead of out=.")


def _raise_out_cast(ctx: TraceContext, name: str, operands: list[SSAValue], args: list[Any],
                    kwargs: dict[str, Any], out: Any) -> None:
    """Eager's error for a result that cannot be cast to the ``out=`` tensor's dtype."""
    try:
        meta = meta_call(name, operands, args, {k: v for k, v in kwargs.items() if k != "out"})
    except Exception:
        return
    for o, t in zip(_out_tensors(out), meta.result_types):
        if (isinstance(o, torch.Tensor) and isinstance(t, TensorType)
                and not torch.can_cast(t.dtype, o.dtype)):
            raise RuntimeError(f"result type {_type_name(t.dtype)} can't be cast to the "
                               f"desired output type {_type_name(o.dtype)}\n"
                               f"  at {where(ctx.loc)}")


def _root_of(p: Any) -> TensorProxy | None:
    """The proxy whose storage ``p`` views (``p`` itself if it is no view)."""
    if not is_proxy(p):
        return None
    return p._base_proxy if p._base_proxy is not None else p


CALL_ON_COPIES = "thunder_ir.runtime.autograd_fallback.call_on_copies"


def _call_on_copies(ctx: TraceContext, name: str, operands: list[SSAValue], passed: list[Any],
                    args: list[Any], kwargs: dict[str, Any], meta: Any, tracked: bool) -> Any:
    """A call that writes into operands (``out=``, running statistics), functionalized: it
    runs on copies of them (`call_on_copies`), and each written tensor then stands for its
    copy, as after an in-place op (written back to inputs and buffers after the call)."""
    from thunder_ir.runtime.autograd_fallback import COPIED, encode_refs

    n = len(meta.result_types)
    op = make_call(
        CALL_ON_COPIES, operands, [name, *(OperandRef(i) for i in range(len(operands)))],
        {"args": encode_refs(tuple(args), COPIED),
         "kwargs": tuple((k, encode_refs(v, COPIED)) for k, v in kwargs.items()),
         "mutated": meta.mutated, "layout": meta.layout if meta.layout is not None else None},
        result_types=[*meta.result_types, *(operands[i].type for i in meta.mutated)],
        layout=True, nograd=meta.nograd)
    rg = [*meta.requires_grad, *(False for _ in meta.mutated)] if tracked else None
    results = ctx.record(op, rg)
    for i, copy in zip(meta.mutated, results[n:], strict=True):
        ctx.assign(passed[i], copy, name)
    return meta.rebuild([ctx.wrap(r) for r in results[:n]])


def _inplace_on_copy() -> Any:
    from thunder_ir.runtime.autograd_fallback import inplace_on_copy

    return inplace_on_copy


def _is_data_dependent(e: Exception) -> bool:
    """A meta run failed because the result's shape needs a tensor's values."""
    msg = str(e)
    return any(m in msg for m in ("data-dependent", "data dependent", "without output_size",
                                  "cannot be called on meta tensors"))


# --------------------------------------------------------------------------- entry point


def _arg_names(fn: Callable[..., Any], n_args: int, kwargs: dict[str, Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_POSITIONAL),
                   "args")
    except (TypeError, ValueError):
        names, var = [], "args"
    out = [names[i] if i < len(names) else f"{var}{i - len(names)}" for i in range(n_args)]
    return out + list(kwargs)


def _shadow_modules(root: torch.nn.Module, proxies: dict[int, TensorProxy]
                   ) -> tuple[torch.nn.Module, dict[int, torch.nn.Module]]:
    """A copy of ``root``'s module tree that tracing runs instead of the user's.

    Each module is copied shallowly (same class, its own ``__dict__``) with its parameters
    and buffers replaced by their proxies (``proxies``: by the real tensor's id, so tied
    weights stay tied) and its submodules by their copies (a module used in two places is
    copied once). Hook dicts and config objects are shared. The user's modules are never
    written: another thread calling the model eagerly while a trace runs sees its real
    parameters, and whatever ``forward`` assigns to ``self`` while traced (a lazily built
    cache of traced tensors) is dropped with the copy. Returns the root's copy and a map
    from each copy's id to its original (hooks called at run time get the original)."""
    copies: dict[int, torch.nn.Module] = {}
    originals: dict[int, torch.nn.Module] = {}

    def swap(d: dict[str, Any]) -> dict[str, Any]:
        return type(d)((k, proxies.get(id(v), v) if v is not None else None)
                       for k, v in d.items())

    def copy(m: torch.nn.Module) -> torch.nn.Module:
        c = copies.get(id(m))
        if c is not None:
            return c
        c = object.__new__(type(m))
        d = dict(m.__dict__)
        d["_parameters"] = swap(m._parameters)
        d["_buffers"] = swap(m._buffers)
        subs = type(m._modules)()
        d["_modules"] = subs
        c.__dict__.update(d)
        copies[id(m)] = c
        originals[id(c)] = m
        for k, sub in m._modules.items():
            subs[k] = copy(sub) if sub is not None else None
        return c

    return copy(root), originals


_USER_PSEUDO_FILES = ("<stdin>", "<string>", "<console>", "<ipython-input")


def _reads_globals_of(filename: str, namespace: dict[str, Any], model_files: set[str]
                      ) -> bool:
    """Whether the cache guards the globals that code of ``filename`` reads: the user's own
    files and prompts, and the files defining the traced modules' classes (a model from an
    installed package); not torch, thunder_ir, the standard library or the packages that
    tracing itself runs (xdsl, sympy...), nor code those libraries generate with ``exec``
    (judged by the file of the namespace it runs in)."""
    if filename in model_files:
        return True
    if filename.startswith("<"):
        if not filename.startswith(_USER_PSEUDO_FILES):
            return False
        home = namespace.get("__file__")
        if home is None:  # a prompt, or exec'd into a namespace of its own
            return namespace.get("__name__") in (None, "__main__")
        return _reads_globals_of(str(home), {}, model_files)
    return not _skip(filename) and not os.path.abspath(filename).startswith(_SITE)


@contextlib.contextmanager
def _global_reads_recorded(ctx: TraceContext, module: torch.nn.Module | None
                           ) -> Iterator[None]:
    """Records, per module namespace, the global names that user code run by the trace
    reads (a ``sys.settrace`` hook on calls only, this thread only): the cache guards them
    (see `thunder_ir.runtime.guards`). A tracer already installed (a debugger, coverage)
    keeps running."""
    from thunder_ir.runtime.guards import global_loads

    model_files: set[str] = set()
    if module is not None:
        for m in module.modules():
            code = getattr(type(m).forward, "__code__", None)
            if code is not None and not _skip(code.co_filename):
                model_files.add(code.co_filename)
    reads = ctx.global_reads
    seen: set[Any] = set()
    before = sys.gettrace()

    def trace_calls(frame: Any, event: Any, arg: Any) -> Any:
        code = frame.f_code
        if code not in seen:
            seen.add(code)
            if _reads_globals_of(code.co_filename, frame.f_globals, model_files):
                names = global_loads(code)
                if names:
                    g = frame.f_globals
                    reads.setdefault(id(g), (g, set()))[1].update(names)
        return before(frame, event, arg) if before is not None else None

    ctx.recorder = trace_calls
    sys.settrace(trace_calls)
    try:
        yield
    finally:
        sys.settrace(before)
        ctx.recorder = None


def _is_size(x: Any) -> bool:
    """``torch.Size`` stays whole in pytrees (unflattened, torch's pytree makes a tuple)."""
    return isinstance(x, torch.Size)


@contextlib.contextmanager
def _global_state_kept() -> Iterator[None]:
    """Restores what user code may leave changed if tracing fails (grad mode, default
    dtype), and the RNG state always: tracing draws nothing, so the program's first run
    draws what eager would."""
    grad = torch.is_grad_enabled()
    dtype = torch.get_default_dtype()
    rng = torch.random.get_rng_state()
    ok = False
    try:
        yield
        ok = True
    finally:
        torch.random.set_rng_state(rng)
        if not ok:
            torch._C._set_grad_enabled(grad)
            torch.set_default_dtype(dtype)
        elif torch.is_grad_enabled() != grad:
            torch._C._set_grad_enabled(grad)


def trace_program(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                  module: torch.nn.Module | None = None,
                  state: dict[str, torch.Tensor] | None = None) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (or ``module``'s forward with ``state``) into IR."""
    import thunder_ir.backward_hooks
    import thunder_ir.custom_function
    import thunder_ir.takeover
    import thunder_ir.torch_map  # noqa: F401  (fills HANDLERS)

    load_vjp_rules()  # NOT_DIFFERENTIABLE, which `TraceContext.track` reads
    if torch._C._is_any_autocast_enabled():
        raise ThunderTraceError(
            "thunder_ir does not trace under torch.autocast yet: its casting rules are not "
            "applied to traced ops, so results would differ from eager. Call the jitted "
            "function outside autocast, or cast the model and inputs (e.g. model.bfloat16()).")
    ctx = TraceContext()
    names = _arg_names(module.forward if module is not None else fn, len(args), kwargs)
    top = [*args, *kwargs.values()]
    proxied_top = []
    leaf_index = 0
    by_storage: dict[int, tuple[torch.Tensor, TensorProxy, str]] = {}
    for name, value in zip(names, top):
        leaves, spec = pytree.tree_flatten(value, is_leaf=_is_size)
        new_leaves = []
        for j, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                nm = name if len(leaves) == 1 else f"{name}_{j}"
                new_leaves.append(_input_proxy(ctx, leaf, nm, leaf_index, by_storage))
            else:
                new_leaves.append(leaf)
            leaf_index += 1
        proxied_top.append(pytree.tree_unflatten(new_leaves, spec))
    p_args = proxied_top[:len(args)]
    p_kwargs = dict(zip(kwargs, proxied_top[len(args):]))
    params = {id(v) for v in module.parameters()} if module is not None else set()
    proxies: dict[int, TensorProxy] = {}
    for k, v in (state or {}).items():
        p = ctx.tensor_input(v, "t_" + k.replace(".", "_"), ("param", k))
        if id(v) in params:  # model code asks isinstance(w, nn.Parameter): so do proxies
            p._is_param = True  # type: ignore[attr-defined]
        proxies[id(v)] = p
    call: Callable[..., Any] = fn
    if module is not None:
        call, ctx.originals = _shadow_modules(module, proxies)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # IR is a web of reference cycles: full collections grow with the program
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_global_state_kept())
            stack.enter_context(recording(ctx))
            for factory in TRACING_CONTEXTS:
                stack.enter_context(factory())
            stack.enter_context(_global_reads_recorded(ctx, module))
            stack.enter_context(TraceMode(ctx))
            out = call(*p_args, **p_kwargs)
    finally:
        if gc_was_enabled:
            gc.enable()
    leaves, out_spec = pytree.tree_flatten(out, is_leaf=_is_size)
    outputs: list[SSAValue] = []
    out_leaves: list[tuple[str, Any]] = []
    detach_outputs: list[int] = []
    for leaf in leaves:
        if is_proxy(leaf):
            base = leaf._base_proxy
            if (leaf._value not in ctx.active and base is not None and base.requires_grad
                    and ctx.is_leaf(base._value)):
                # A detached alias of an input that requires grad (x.detach().view(-1)): run
                # without its detach, it would come out as a view requiring grad.
                detach_outputs.append(len(outputs))
            out_leaves.append(("out", len(outputs)))
            outputs.append(leaf._value)
        else:  # a Python value, or a tensor captured from outside: returned as it is
            out_leaves.append(("value", leaf))
    writebacks = []
    for p, original, kind in ctx.input_proxies:
        if p._value is not original and kind[0] in ("arg", "param"):
            writebacks.append((len(outputs), kind))
            outputs.append(p._value)
    return TracedProgram(ctx.program.finish(outputs), ctx.input_kinds, out_spec, out_leaves,
                         writebacks, ctx.input_requires_grad,
                         [o in ctx.active for o in outputs], detach_outputs,
                         list(ctx.global_reads.values()), ctx.replays)


def _input_proxy(ctx: TraceContext, tensor: torch.Tensor, name: str, index: int,
                 by_storage: dict[int, tuple[torch.Tensor, TensorProxy, str]]) -> TensorProxy:
    """The proxy of argument leaf ``index``. Arguments that share memory (the prologue keys
    on that, see `thunder_ir.runtime.cache.aliases`) are traced as such: the same tensor
    passed twice is one proxy, so a write through one name is seen through the other; a
    tensor that shares storage with an earlier argument (a view of it, or both views of one
    base) is traced as that argument's alias, so writes to either are refused with a clear
    error instead of being lost."""
    from thunder_ir.runtime.cache import storage_ptr

    ptr = storage_ptr(tensor)
    first = by_storage.get(ptr) if ptr else None
    if first is not None and first[0] is tensor:
        return first[1]  # the program reads it once, from the first leaf
    p = ctx.tensor_input(tensor, name, ("arg", index))
    if first is not None:
        base = first[1]
        p._base_proxy = base
        p._storage = base._storage
        base.add_view(p)
        ctx.aliased_args[base._storage] = f"'{first[2]}' and '{name}'"
    elif ptr:
        by_storage[ptr] = (tensor, p, name)
    return p


__all__ = ["DataDependentError", "HANDLERS", "TraceContext", "TraceMode", "TracedProgram",
           "ThunderTraceError", "UseFallback", "current", "fallback", "recording",
           "trace_program", "tracing_now", "user_location", "where"]
