"""In-place writes while tracing: `InPlace`, the writes facet of a `TraceContext`.

The program is functional: an in-place op (``x.add_(1)``, ``x[0] = v``, ``x.copy_(y)``,
``x.data = y``, ``x.t_()``) is recorded as its out-of-place form, and the proxy written
to then stands for the new value (`InPlace.assign`). Eager's rules for in-place ops apply
here (castable dtypes, leaves that require grad, inference tensors, what a backward saved
and an in-place write then changed); the other aliases of the written storage see the
write (`thunder_ir.frontend.aliasing`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import StringAttr, UnitAttr
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, SavedAsOp, make_function
from thunder_ir.dialects.base import to_attr
from thunder_ir.dialects.location import location_text
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend.aliasing import (
    VIEW_OF_LEAF,
    argument_tensor,
    check_writable,
    live_members,
    renewed_value,
    views_a_leaf,
    write_through,
)
from thunder_ir.frontend.builder import Writes
from thunder_ir.frontend.errors import ThunderTraceError, dtype_name, where
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.runtime.origins import ArgLeaf, StateEntry

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext


DATA_ASSIGNMENT = ".data assignment"
"""`InPlace.assign`'s ``opname`` for ``t.data = new``."""


UNBUMPED_WRITES = frozenset({"batch_norm"})
"""The in-place writes whose eager kernel leaves the version counter as it was: the CPU and
CUDA batch norm kernels write the running statistics through raw pointers
(``torch.nn.BatchNorm*`` in training: ``running_mean._version`` stays put, while
``num_batches_tracked += 1`` bumps its own)."""

_QUIET_NOTE = (" through `.data`. Eager does not detect this (a write through `.data` does "
               "not bump the version counter) and its backward silently uses the written "
               "values; the program's backward cannot read them here (a saved result, or "
               "an op differentiated through its decomposition), so thunder_ir refuses "
               "rather than differ. Use a clone of the tensor "
               "where the backward needs its value before the write (`x.clone()`), or make "
               "the write after the backward.")


def reads(new: SSAValue, old: SSAValue) -> bool:
    """Whether the op that made ``new`` reads ``old``, or a slice of it (``x[index] = v``
    rebuilds ``x`` as a ``cat`` of ``x``'s slices around ``v``,
    `thunder_ir.frontend.setitem`): then ``old``'s gradient flows through ``new``'s own
    backward (zero on the written box, as eager's ``CopySlices`` gives), and the write
    needs no ``overwrite`` function to give ``old`` a zero gradient."""
    from thunder_ir.dialects.ltorch_core import GetitemOp

    op = new.owner
    if not isinstance(op, Operation):
        return False
    return any(v is old or (isinstance(v.owner, GetitemOp) and v.owner.input is old)
               for v in op.operands)


def grad_leaf(ctx: TraceContext, p: TensorProxy) -> bool:
    """Whether proxy ``p`` is, in eager, a leaf that requires grad, which an in-place op may
    not write while grad mode is on: a program input (an argument, parameter, buffer or
    captured tensor) whose tensor requires grad and has no ``grad_fn``. One that does not
    require grad is a leaf no longer once written with a value that does (its proxy's
    value is then active): eager writes it again as a non-leaf."""
    if id(p) not in ctx.autograd.leaf_proxies:
        return False
    real = argument_tensor(ctx, p)
    return real is None or (real.requires_grad and real.grad_fn is None)


class InPlace(Writes):
    """The in-place writes of one trace (see the module doc): ``ctx`` is the trace."""

    __slots__ = ("ctx",)

    def __init__(self, ctx: TraceContext) -> None:
        self.ctx = ctx

    def _written(self, target: TensorProxy, skip: set[Operation],
                 keep_saved: bool = False, quiet: bool = False) -> None:
        """An in-place write to ``target``'s storage: every op whose backward saved a value
        of that storage would, in eager, raise when its backward runs; so will ours. The
        writing call's own ops (``skip``) saved the tensor they write before the write,
        which eager clones for an in-place op, so those records go (with ``keep_saved`` they
        stay: see `Writes.assign`); a tensor of that storage they read as another operand
        (``x.mul_(x)``'s ``other``) eager saves as it is, and the write modifies it. A
        ``quiet`` write (through ``x.data``) eager does not detect: its backward uses the
        written values. So does the program's where the saved tensor is the caller's
        memory (an argument or state as passed in, or a view of it: `_callers_memory`),
        which the write-back changes through ``.data`` before the backward runs (the
        record stays, for a later write that eager does detect). Elsewhere (a value the
        program made) the op's backward reads the value after the write in its place
        (`_saved_as`), or, where that cannot be said (an opaque call, a saved result), it
        raises, saying so."""
        ctx = self.ctx
        ctx.autograd.resolve_saved()
        saved, saved_operands = ctx.autograd.saved, ctx.autograd.saved_operands
        inputs = None
        for v in ctx.aliases.members.get(target._storage, ()):
            ops = saved.pop(v, ())
            spared = quiet and bool(ops) and self._callers_memory(v)
            kept = [op for op in ops if op in skip] if keep_saved else []
            kept += [op for op in ops if op not in skip] if spared else []
            if kept:
                saved[v] = kept
            for op in ops:
                if spared and op not in skip:
                    continue
                if op in skip and (keep_saved or not any(
                        i > 0 and op.operands[i] is v for i in saved_operands.get(op, ()))):
                    if not keep_saved:
                        if inputs is None:
                            inputs = {p._storage for p, _, _ in ctx.build.input_proxies}
                        if target._storage in inputs:
                            self._save_a_copy(op, v)
                    continue
                if quiet and not isinstance(op, CallOp | FunctionOp) \
                        and v not in op.results and "saved_modified" not in op.attributes:
                    self.ctx.autograd.saved_written.append((op, v))  # (`_saved_as`, once made)
                    continue
                self._mark_modified(op, v, quiet)

    def _mark_modified(self, op: Operation, v: SSAValue, quiet: bool) -> None:
        """``op``'s backward raises eager's error (its saved ``v`` was written since)."""
        if "saved_modified" not in op.attributes:
            t = v.type
            assert isinstance(t, TensorType)
            op.attributes["saved_modified"] = StringAttr(
                "one of the variables needed for gradient computation has been "
                f"modified by an inplace operation: [{t.pretty()}], saved for the "
                f"backward of {op.name} at {where(location_text(op))}, written in place at "
                f"{where(self.ctx.loc)}" + (_QUIET_NOTE if quiet else ""))

    def _saved_as(self, now: dict[SSAValue, SSAValue]) -> None:
        """After a write through ``.data``: each op whose saved operand it changed (a value
        the program made, the autograd part's ``saved_written``) reads, in its backward,
        the value after the write (``now``: each old value's new one), as eager's backward
        reads the memory then: an ``autograd.saved_as`` note after the write (the op kept
        whole for autodiff). A
        value with no new one known raises at backward, as before."""
        from thunder_ir.passes.vjp import load_vjp_rules

        saved, rules = self.ctx.autograd.saved, load_vjp_rules()
        pending = self.ctx.autograd.saved_written
        self.ctx.autograd.saved_written = []
        for op, v in pending:
            n = now.get(v)
            if n is None and self.ctx.aliases.renewed:  # a view no proxy holds now
                n = renewed_value(self.ctx, v)
            if n is None or op.parent is None or type(op) not in rules:
                # (an op without a rule of its own is differentiated through its
                # decomposition, whose ops this note could not follow)
                self._mark_modified(op, v, True)
                continue
            if "saved_modified" in op.attributes:
                continue
            self.ctx.build.block.add_op(SavedAsOp.create(operands=[op.results[0], v, n]))
            op.attributes["saved_as"] = UnitAttr()
            saved.setdefault(n, []).append(op)  # a later write to it is seen

    def assign(self, target: Any, new: SSAValue, opname: str, keep_saved: bool = False
               ) -> TensorProxy:
        """Functionalizes an in-place op: ``target`` now stands for ``new``.

        Eager's rules for in-place ops apply: the result must be castable to the target's
        dtype; a leaf that requires grad may not be written while grad mode is on; an
        inference tensor only inside inference mode. A tensor that requires grad, written
        while grad mode is off (an EMA update under ``torch.no_grad()``), keeps its place in
        the autograd graph: later uses still send their gradient to it."""
        ctx = self.ctx
        if not is_proxy(target):
            raise ThunderTraceError(f"{where(ctx.loc)}: in-place {opname} on a tensor that is "
                                    "not traced; pass it as an argument instead")
        members = live_members(target)
        if members:
            ctx.read_layout()  # the write reaches aliases by their strides
            check_writable(ctx, target, opname)
        quiet = self._note_version(target, opname)
        old = target._value
        # The ops this torch call built (the in-place op's functional form, casts): their
        # reads are not later writes. A value that existed before (copy_'s source) is not.
        made = ctx.build.ops_of_this_call()
        tt, nt = old.type, new.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if nt.sizes != tt.sizes:
            raise ThunderTraceError(f"{where(ctx.loc)}: in-place {opname} would change the "
                                    f"shape {list(tt.sizes)} to {list(nt.sizes)}")
        if old in ctx.autograd.inference and not torch.is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not "
                               "allowed.You can make a clone to get a normal tensor before "
                               "doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                               f"for more details.\n  at {where(ctx.loc)}")
        if nt.dtype != tt.dtype:
            if not torch.can_cast(nt.dtype, tt.dtype):
                raise RuntimeError(f"result type {dtype_name(nt.dtype)} can't be cast to the "
                                   f"desired output type {dtype_name(tt.dtype)}\n"
                                   f"  at {where(ctx.loc)}")
            from thunder_ir.dialects.ltorch import OPS

            new = ctx.emit(OPS["to_dtype"], new, dtype=tt.dtype)
        if not torch.is_grad_enabled() and new in ctx.active:
            new = ctx.grad.stop_gradient(new)  # written under no-grad: the values, no gradient
        if old in ctx.active:
            if not torch.is_grad_enabled():
                new = self.keep_identity(old, new)
            elif old in ctx.autograd.nonleaf_inputs or id(target) in ctx.autograd.leaf_proxies:
                if grad_leaf(ctx, target):  # an argument itself
                    raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                       f"in-place operation.\n  at {where(ctx.loc)}")
                if views_a_leaf(ctx, target):  # an argument w[1:] of a leaf w
                    raise RuntimeError(VIEW_OF_LEAF + f"\n  at {where(ctx.loc)}")
                # an argument that is not a leaf: its new history is the program's (its
                # write-back runs with grad mode on, `thunder_ir.runtime.writes.JOIN`)
            if torch.is_grad_enabled() and (new not in ctx.active or not reads(new, old)):
                new = self.overwrites(old, new)
        if torch.is_grad_enabled() and new in ctx.active and not quiet \
                and (target._base_proxy is None or target._value in ctx.active):
            ctx.aliases.joined.add(target._storage)  # the caller's tensor's new grad_fn
        self._written(target, made, keep_saved, quiet)
        with torch._C.DisableTorchFunction():  # the write keeps the target's layout
            ctx.aliases.layouts[new] = (tuple(target.stride()), target.storage_offset())
        ctx.aliases.written.add(new)
        if members:  # the other aliases see the write (`thunder_ir.frontend.aliasing`)
            new = write_through(ctx, target, new, members)
        ctx.aliases.rebind(target, new)
        if ctx.autograd.saved_written:
            if not members:
                ctx.aliases.renewed = {}
            self._saved_as({**ctx.aliases.renewed, old: new})
        return target

    def _callers_memory(self, v: SSAValue) -> bool:
        """Whether ``v`` is, at run time, memory the caller passed in: an input's value as
        passed (or a chain of views of it), not one an in-place write made."""
        aliases = self.ctx.aliases
        if aliases.made_by_a_write(v):
            return False
        parents = aliases.view_parent
        while v in parents:
            v = parents[v][0]
        return any(original is v for _, original, _ in self.ctx.build.input_proxies)

    def _save_a_copy(self, op: Operation, v: SSAValue) -> None:
        """``op`` (an in-place op's functional form) reads ``v``, a value of an input's
        storage that the call writes, and its backward saves it: eager saves a copy (the
        original of the tensor an in-place op writes); the program would save the caller's
        memory itself, which the write-back then changes. ``op`` reads a clone of ``v``."""
        from thunder_ir.dialects.ltorch import OPS

        ctx = self.ctx
        copy = ctx.emit(OPS["clone"], v)
        made = copy.owner
        block = op.parent_block()
        if not isinstance(made, Operation) or block is None:
            return
        made.detach()
        block.insert_op_before(made, op)
        op.operands = [copy if o is v else o for o in op.operands]

    def _note_version(self, target: TensorProxy, opname: str) -> bool:
        """Notes whether the write bumps the written storage's version counter in eager
        (not through an ``x.data`` alias, nor by ``t.data = ...``: those are quiet, and
        the result is True), counting the bumps. A write eager's kernel makes without a bump
        (`UNBUMPED_WRITES`) is not quiet but counts none."""
        aliases = self.ctx.aliases
        root = target._base_proxy
        quiet = opname == DATA_ASSIGNMENT or (root is not None and aliases.cut_from_root(
            target._value, root._value) == "data")
        if quiet:
            aliases.quiet.add(target._storage)
        elif opname in UNBUMPED_WRITES:
            aliases.unbumped.add(target._storage)
        else:
            aliases.versioned[target._storage] = aliases.versioned.get(target._storage, 0) + 1
        return quiet

    def note_data_alias(self, v: SSAValue) -> None:
        self.ctx.aliases.data_cuts.add(v)

    def overwrites(self, old: SSAValue, new: SSAValue) -> SSAValue:
        """``new`` written over ``old`` in place (``copy_``, ``zero_``, ``fill_``): eager's
        backward gives the overwritten tensor a zero gradient (not ``None``), and passes
        the cotangent on to ``new``'s own inputs."""
        ctx = self.ctx
        from thunder_ir.dialects.prims import FullOp

        t = old.type
        assert isinstance(t, TensorType)
        body = Block(arg_types=[new.type])
        zeros = FullOp.create(result_types=[t], properties={
            "shape": to_attr(t.sizes), "fill_value": to_attr(0.0), "device": to_attr(t.dev),
            "dtype": to_attr(t.dtype)})
        body.add_op(zeros)
        primals, mask, grads = [old], [0], [zeros.results[0]]
        if new in ctx.active:
            primals.append(new)
            mask.append(1)
            grads.append(body.args[0])
        return ctx.grad.requires_grad_fn(make_function("overwrite", primals, [new], mask, body,
                                                 grads))

    def set_data(self, target: TensorProxy, new: Any) -> None:
        """``t.data = new`` (what ``Module.to``, ``.half()``, ``.float()`` do to each
        parameter): ``t`` keeps its place in the autograd graph and takes ``new``'s values.
        Of the same dtype and shape, that is a write under no-grad; a parameter or buffer
        that does not require grad here may also change dtype or shape (its new value is
        set as the real tensor's ``.data`` after each call)."""
        ctx = self.ctx
        src = new if is_proxy(new) else ctx.lift_constant(new)
        if src is target or src._value is target._value:
            return
        tt, nt = target._value.type, src._value.type
        assert isinstance(tt, TensorType) and isinstance(nt, TensorType)
        if tt.dtype == nt.dtype and tt.sizes == nt.sizes:
            value = ctx.grad.stop_gradient(src._value) if src._value in ctx.active else src._value
            grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)
            try:
                self.assign(target, value, DATA_ASSIGNMENT)
            finally:
                torch._C._set_grad_enabled(grad)
            return
        kind = ctx.build.kind_of(target)
        if not isinstance(kind, StateEntry) or target._value in ctx.active:
            raise ThunderTraceError(
                f"{where(ctx.loc)}: `.data = ` with another dtype or shape "
                f"({tt.pretty()} -> {nt.pretty()}) inside a jitted function is supported for "
                "parameters and buffers that do not require grad here; convert the model "
                "before calling it (model.to(dtype)), or call this part outside the jitted "
                "function.")
        value = ctx.grad.stop_gradient(src._value) if src._value in ctx.active else src._value
        with torch._C.DisableTorchFunction(), torch._C._ExcludeDispatchKeyGuard(
                torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            torch.Tensor.data.__set__(target, src)  # type: ignore[attr-defined]
            ctx.aliases.layouts[value] = (tuple(target.stride()), int(target.storage_offset()))
        target._value = value
        if all(p is not target for p in ctx.reads.data_replaced):
            ctx.reads.data_replaced.append(target)

    def keep_identity(self, old: SSAValue, new: SSAValue) -> SSAValue:
        """``new``'s value with ``old``'s place in the autograd graph (an in-place write under
        no-grad): an ``autograd.function`` whose backward passes the cotangent to ``old``."""
        ctx = self.ctx
        body = Block(arg_types=[old.type])
        return ctx.grad.requires_grad_fn(make_function("inplace_update", [old], [new], [0], body,
                                                 [body.args[0]]))

    def view_in_place(self, target: TensorProxy, new: SSAValue, name: str,
                      args: tuple[Any, ...], kwargs: dict[str, Any]) -> TensorProxy:
        """An in-place metadata op (``x.t_()``, ``x.unsqueeze_(0)``): ``target`` stands for
        its view ``new``, with that view's sizes and strides. On an argument the op is
        replayed on the caller's tensor after the call; on a parameter or buffer it is
        refused."""
        ctx = self.ctx
        kind = ctx.build.kind_of(target)
        if kind is not None and not isinstance(kind, ArgLeaf):
            raise ThunderTraceError(
                f"{where(ctx.loc)}: in-place {name} on a parameter or buffer would change the "
                f"module's tensor; thunder_ir does not. Use `{name[:-1]}` out of place.")
        old = target._value
        root = target._base_proxy
        if old in ctx.active and not torch.is_grad_enabled():
            raise ThunderTraceError(
                f"{where(ctx.loc)}: in-place {name} under no_grad on a tensor that requires "
                "grad is not supported by thunder_ir (eager keeps its autograd history with "
                f"the new shape). Use `{name[:-1]}` out of place.")
        if old in ctx.active:  # eager's refusals
            if root is None and grad_leaf(ctx, target):
                raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                   f"in-place operation.\n  at {where(ctx.loc)}")
            if root is not None and grad_leaf(ctx, root):
                raise RuntimeError("a view of a leaf Variable that requires grad is being used "
                                   f"in an in-place operation.\n  at {where(ctx.loc)}")
        t = new.type
        assert isinstance(t, TensorType)
        ctx.read_layout()
        strides, offset = ctx.layout_of(new)
        target.set_layout(t.sizes, strides, offset)
        target._value = new
        ctx.remember(target)
        if kind is not None:
            ctx.reads.replays.append((kind.index, name, args, kwargs))
            ctx.build.input_proxies = [(p, new if p is target and orig is old else orig, k)
                                        for p, orig, k in ctx.build.input_proxies]
        return target



__all__ = ["InPlace"]
