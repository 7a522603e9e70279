"""Writes through views, as eager computes them: functionalization onto the root, then
view replay.

Tensors that share memory form a *storage group*: a root proxy (the tensor that owns the
storage: an argument, a buffer, a fresh result) and its live views
(`TensorProxy._base_proxy` and ``_views``, weakly held). Each view's value remembers how
it was made from its parent (`AliasTracking.view_parent`: the op and which of its results,
or a strided view of a span). An in-place write to any member is functionalized as
torch's functionalization does it:

1. the written tensor's new value ``N`` is computed out of place (`InPlace.assign`);
2. the root's new value is ``N`` itself where the root was written, else the root with
   ``N`` scattered into the elements the written tensor views (`scatter_strided`: the
   view's sizes, strides and storage offset relative to the root's, on eager's layout of
   the root);
3. every member, the written one included, is re-derived from the root's new value by
   replaying the ops that made it, parent first (view replay), so that each value is again
   a view of the root's;
4. an argument or buffer among them is written back after the call, once, as any input
   written in place is.

Arguments that share memory (views of one tensor passed separately) get a root that
spans all of them (`span_root`): a strided view of the first one's storage, made at the
first write, of which each argument is then a strided view.

Writes eager refuses are refused with eager's error: to a tensor whose elements overlap
(an expanded view), or to a view of a leaf that requires grad while grad mode is on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.autograd import StopGradientOp
from thunder_ir.dialects.ltorch_core import ChunkOp, SplitOp
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.types import TensorType, tensor_type
from thunder_ir.frontend.errors import ThunderTraceError, where
from thunder_ir.frontend.fallback import fallback
from thunder_ir.frontend.layout import Layout, storage_elements
from thunder_ir.frontend.proxy import TensorProxy
from thunder_ir.runtime.writes import scatter_strided, strided_view

if TYPE_CHECKING:
    from thunder_ir.frontend.context import TraceContext

ViewParent = tuple[SSAValue, Any, Any]
"""How a view's value was made: ``(parent value, op, result index)`` for a view op, or
``(parent value, None, (sizes, strides, offset))`` for a strided view of the parent."""


def proxy_layout(p: TensorProxy) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The shape, strides and storage offset eager's tensor would have (read without
    being traced: the caller notes the layout read where a decision depends on it)."""
    with torch._C.DisableTorchFunction():
        return tuple(p.shape), tuple(p.stride()), int(p.storage_offset())


def live_members(target: TensorProxy) -> list[TensorProxy]:
    """The other live proxies that share ``target``'s storage: its root and the root's
    views (empty for a tensor nothing else views, the usual case)."""
    root = target._base_proxy if target._base_proxy is not None else target
    views = root._views
    if root is target and not views:
        return []
    out = [] if root is target else [root]
    if views:
        out.extend(v for v in list(views) if v is not target)
    return out


def _overlaps(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two elements of a tensor of this layout share a memory location."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    if any(n == 0 for n in shape):
        return False
    reach = 0  # the farthest element reachable with the smaller strides
    for s, n in dims:
        if s <= reach:
            return True
        reach += s * (n - 1)
    return False


NO_GRAD = "no_grad"
"""`AliasTracking.view_meta`: the view was made under no-grad (eager's ``NO_GRAD_MODE``)."""


class AliasTracking:
    """Alias tracking, one of `TraceContext`'s parts: which traced values share storage,
    how each view was made, and eager's layout of each value.

    Attributes:
        storage, members: each value's storage (a view shares its base's) and each
            storage's values, in the order they were made (`remember`).
        view_parent: how each view's value was made from its parent's (view replay).
        arg_groups: per storage, the arguments that share it (`span_root`).
        view_meta: views eager forbids writing to while grad mode is on (its creation
            metas): the op that returned several views (its name), or `NO_GRAD`.
        forbidden: such views after a write to their base: eager's error where autograd
            next uses them (`_forbid_after_write`).
        not_views: values known not to view their operand although their op could (a
            reshape that copied).
        layouts: eager's strides and storage offset of each value the trace made a proxy
            for (`thunder_ir.frontend.layout`).
        written: values an in-place write made (laid out as the tensor written, not as the
            op computing them lays its result out).
        data_cuts: values of ``x.data`` aliases (and their replays after a write).
        quiet: storages written through a ``.data`` alias (or by ``t.data =``), which
            does not bump eager's version counter: an argument written only quietly is
            written back without a bump.
        versioned: storages written otherwise, each with the number of such writes (the
            bumps of eager's version counter, `thunder_ir.runtime.writes.with_bumps`).
        unbumped: storages written by an op whose eager kernel writes without bumping the
            version counter (batch norm's running statistics, `UNBUMPED_WRITES`): their
            write-back's copy is not counted either.
        joined: storages written with grad mode on with a value that requires grad, not
            through a detached alias: the caller's tensor takes the write's history (its
            write-back runs with grad mode on).
        renewed: the last write through a view's old values of its storage's members, each
            with its value after the write (`write_through`).
    """

    __slots__ = ("arg_groups", "data_cuts", "forbidden", "joined", "layouts", "members",
                 "not_views", "quiet", "renewed", "storage", "unbumped", "versioned",
                 "view_meta", "view_parent", "written")

    def __init__(self) -> None:
        self.storage: dict[SSAValue, int] = {}
        self.members: dict[int, list[SSAValue]] = {}
        self.view_parent: dict[SSAValue, ViewParent] = {}
        self.arg_groups: dict[int, list[TensorProxy]] = {}
        self.view_meta: dict[SSAValue, str] = {}
        self.forbidden: dict[SSAValue, str] = {}
        self.not_views: set[SSAValue] = set()
        self.layouts: dict[SSAValue, Layout] = {}
        self.written: set[SSAValue] = set()
        self.data_cuts: set[SSAValue] = set()
        self.quiet: set[int] = set()
        self.versioned: dict[int, int] = {}
        self.unbumped: set[int] = set()
        self.joined: set[int] = set()
        self.renewed: dict[SSAValue, SSAValue] = {}

    def cut_from_root(self, v: SSAValue, root: SSAValue) -> str | None:
        """How ``v``, an alias of ``root``, was cut from it on the way up its views:
        ``"data"`` (``x.data``), ``"detach"`` (``detach()``), or None (a chain of views)."""
        parents = self.view_parent
        while v is not root:
            up = parents.get(v)
            if up is None:
                return None
            if isinstance(up[1], StopGradientOp):
                return "data" if v in self.data_cuts else "detach"
            v = up[0]
        return None

    def remember(self, p: TensorProxy) -> TensorProxy:
        """Notes which storage ``p``'s value lives in (its base's, for a view)."""
        v = p._value
        if v not in self.storage:
            self.storage[v] = p._storage
            self.members.setdefault(p._storage, []).append(v)
        return p

    def made_by_a_write(self, v: SSAValue) -> bool:
        """Whether ``v`` is a value an in-place write made, or a view of one."""
        written, parents = self.written, self.view_parent
        while True:
            if v in written:
                return True
            up = parents.get(v)
            if up is None:
                return False
            v = up[0]

    def rebind(self, p: TensorProxy, value: SSAValue) -> None:
        """``p`` now stands for ``value``, a new value in ``p``'s storage."""
        p._value = value
        self.storage[value] = p._storage
        self.members.setdefault(p._storage, []).append(value)

    def note_view(self, value: SSAValue, parent: SSAValue, op: Operation, index: int,
                  parent_active: bool) -> None:
        """Records that ``value`` (result ``index`` of ``op``, or what tracking made of it)
        views ``parent`` (``parent_active``: it requires grad), so a write through an alias
        can re-derive it (view replay)."""
        self.view_parent[value] = (parent, op, index)
        if not torch.is_grad_enabled() and parent_active:
            self.view_meta[value] = NO_GRAD
        elif len(op.results) > 1 or "multi" in op.properties or isinstance(op, SplitOp | ChunkOp):
            self.view_meta[value] = _backward_name(op)  # one of the views a call returns


def _backward_name(op: Operation) -> str:
    """How eager names the backward of the op that made a view (``SplitBackward0``)."""
    name = op.callee.data.rsplit(".", 1)[-1] if isinstance(op, CallOp) else \
        op.name.split(".", 1)[-1]
    return "".join(p.capitalize() for p in name.split("_")) + "Backward0"


def check_writable(ctx: TraceContext, target: TensorProxy, opname: str) -> None:
    """Eager's refusals of in-place writes that concern memory: to a tensor whose elements
    overlap; while grad mode is on, to a view of a leaf that requires grad, to a view made
    under no-grad of a tensor that requires grad, or to one of the views a function
    returns several of (``split``, ``chunk``, ``unbind``: eager's creation metas)."""
    shape, strides, _ = proxy_layout(target)
    if _overlaps(shape, strides):
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor refers to "
            "a single memory location. Please clone() the tensor before performing the "
            f"operation.\n  at {where(ctx.loc)}")
    root = target._base_proxy
    if root is None or not torch.is_grad_enabled():
        return
    if target._value in ctx.active and root._value in ctx.active and views_a_leaf(ctx, root) \
            and ctx.aliases.cut_from_root(target._value, root._value) is None:
        # a detached alias (``x.detach()``, ``x.data``, a view of one) is no view of the
        # leaf to autograd: eager allows writing it (its base is the alias, not the leaf)
        raise RuntimeError(VIEW_OF_LEAF + f"\n  at {where(ctx.loc)}")
    made = ctx.aliases.view_meta.get(target._value)
    if made is None or target._value not in ctx.active:
        return
    if made == NO_GRAD:
        raise RuntimeError(
            "A view was created in no_grad mode and is being modified inplace with grad mode "
            "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. "
            "You can clarify your code by moving both the view and the inplace either both "
            "inside the no_grad block (if you don't want the inplace to be tracked) or both "
            f"outside (if you want the inplace to be tracked).\n  at {where(ctx.loc)}")
    raise RuntimeError(
        f"Output of {made} is a view and is being modified inplace. This view is the output "
        "of a function that returns multiple views. Such functions do not allow the output "
        "views to be modified inplace. You should replace the inplace operation by an "
        f"out-of-place one.\n  at {where(ctx.loc)}")


VIEW_OF_LEAF = ("a view of a leaf Variable that requires grad is being used in an in-place "
                "operation.")
"""Eager's error for a write through a view of a leaf that requires grad."""


def argument_tensor(ctx: TraceContext, p: TensorProxy) -> torch.Tensor | None:
    """The caller's tensor that argument proxy ``p`` stands for (None: not an argument)."""
    if id(p) not in ctx.autograd.leaf_proxies:
        return None
    for q, v, _ in ctx.build.input_proxies:
        if q is p:
            return ctx.build.concrete.get(v)
    return None


def views_a_leaf(ctx: TraceContext, p: TensorProxy) -> bool:
    """Whether argument proxy ``p`` requires grad and is, in eager, a leaf or a view of one
    (an argument ``w[1:]`` of a leaf ``w``: its base is the leaf), so that a write through
    a view of it is eager's error."""
    real = argument_tensor(ctx, p)
    if real is None or not real.requires_grad:
        return False
    base = real._base
    return real.grad_fn is None or (base is not None and base.is_leaf and base.requires_grad)


def span_root(ctx: TraceContext, group: list[TensorProxy]) -> TensorProxy:
    """A root for arguments that share memory: a 1-d strided view of the first one's
    storage spanning all of them (``torch.as_strided`` on the caller's tensor, so its
    elements are the storage's), of which each becomes a strided view."""
    layouts = [proxy_layout(p) for p in group]
    lo = min(off for _, _, off in layouts)
    hi = max(off + storage_elements(shape, strides, 0) for shape, strides, off in layouts)
    first = group[0]
    t = first._value.type
    assert isinstance(t, TensorType)

    made = fallback(ctx, strided_view, (first, (hi - lo,), (1,), lo), {},
                    result_type=tensor_type((hi - lo,), t.dtype, t.dev))
    # its proxy, laid out from offset ``lo`` of a storage of ``hi`` elements (the one made
    # for the call's result starts at 0 and holds ``hi - lo``)
    span = ctx.wrap(made._value, layout=((1,), lo))
    span._storage = first._storage
    members = {id(p): p for p in group}
    for p in group:
        members.update((id(v), v) for v in list(p._views or ()))
        p._views = None
    for p, (shape, strides, off) in zip(group, layouts, strict=True):
        ctx.aliases.view_parent[p._value] = (span._value, None, (shape, strides, off - lo))
    for m in members.values():
        m._base_proxy = span
        span.add_view(m)
    return span


def write_through(ctx: TraceContext, target: TensorProxy, new: SSAValue,
                  members: list[TensorProxy]) -> SSAValue:
    """Functionalizes a write of ``new`` into ``target`` onto its storage group (see the
    module doc); every member's value is re-derived. Returns ``target``'s new value."""
    root = target._base_proxy if target._base_proxy is not None else target
    group = ctx.aliases.arg_groups.pop(root._storage, None)
    if group is not None:  # arguments sharing memory: a root spanning them
        root = span_root(ctx, group)
        members = [m for m in [root, *list(root._views or ())] if m is not target]
    old_root = root._value
    if root is target:
        new_root = new
    else:
        t_shape, t_strides, t_off = proxy_layout(target)
        _, r_strides, r_off = proxy_layout(root)
        base = _stand_in(ctx, old_root)
        if torch.is_grad_enabled() and old_root in ctx.active and _inputs_memory(ctx, root):
            # (an argument or state that requires grad, not a leaf): the opaque scatter's
            # recorded graph keeps the tensor it differentiates for, which would share the
            # caller's version counter and so fail the backward after the write-back;
            # eager's CopySlices needs none of the old values
            from thunder_ir.dialects.ltorch import OPS

            base = _stand_in(ctx, ctx.emit(OPS["clone"], old_root))
        out = fallback(ctx, scatter_strided,
                       (base, _stand_in(ctx, new), r_strides, t_shape, t_strides,
                        t_off - r_off), {})
        new_root = out._value
        ctx.note_layout(new_root, (r_strides, r_off))
    grad = torch.is_grad_enabled()
    cut = ctx.aliases.cut_from_root(target._value, old_root) is not None
    if old_root in ctx.active and (not grad or cut or target._value not in ctx.active):
        # written outside autograd (under no-grad, or through a detached alias such as
        # ``y.detach()`` or ``w.data``): the root keeps its place in the autograd graph
        new_root = ctx.writes.keep_identity(old_root, new_root)
    elif cut and new_root in ctx.active:
        # through a detached alias of a tensor that does not require grad, with a value
        # that does: the alias requires grad in eager, the tensor still does not
        new_root = ctx.grad.stop_gradient(new_root)
    renewed: dict[SSAValue, SSAValue] = {old_root: new_root}
    ctx.aliases.renewed = renewed
    for m in members:
        if m is not root:
            old = m._value
            m._value = _renew_member(ctx, old, renewed, grad)
            if m is not target and grad and old in ctx.active:
                _forbid_after_write(ctx, old, m._value)
            ctx.remember(m)
    root._value = new_root
    ctx.remember(root)
    if root is target:
        return new_root
    out = _renew_member(ctx, target._value, renewed, grad)
    if cut and new in ctx.active:
        # the detached alias itself requires grad now (eager: its grad_fn is the write's),
        # the tensor it aliases does not change its autograd identity; the alias stays
        # cut from it (a later write through another alias re-derives its values)
        aliases = ctx.aliases
        how = aliases.view_parent.get(out)
        if how is not None:
            aliases.view_parent[new] = how
        if out in aliases.data_cuts:
            aliases.data_cuts.add(new)
        return new
    return out


def _inputs_memory(ctx: TraceContext, root: TensorProxy) -> bool:
    """Whether ``root``'s value is memory the caller passed in (an input's storage, not
    yet replaced by a value the program made)."""
    return any(p._storage == root._storage for p, _, _ in ctx.build.input_proxies)


def renewed_value(ctx: TraceContext, v: SSAValue) -> SSAValue | None:
    """``v``, an old value of the storage the last write through a view wrote, re-derived
    from that write's new values (its view ops replayed, as `write_through` renews the
    members: ``ctx.aliases.renewed``); None where its chain of views does not lead there."""
    try:
        return _renew_member(ctx, v, ctx.aliases.renewed, torch.is_grad_enabled())
    except ThunderTraceError:
        return None


def _forbid_after_write(ctx: TraceContext, old: SSAValue, new: SSAValue) -> None:
    """A view eager cannot rebase after a write to its base (one of several views a
    function returned, or one made under no-grad): eager raises where autograd next needs
    it, in a forward op that requires grad or in the backward. So does the trace
    (`GradTracking.track`), and so does the program's backward (``saved_modified``)."""
    made = ctx.aliases.view_meta.get(old)
    if made is None:
        return
    if made == NO_GRAD:
        msg = ("A view was created in no_grad mode and its base or another view of its base "
               "has been modified inplace with grad mode enabled. Given that this use case "
               "is ambiguous and error-prone, it is forbidden. You can clarify your code by "
               "moving both the view and the inplace either both inside the no_grad block "
               "(if you don't want the inplace to be tracked) or both outside (if you want "
               "the inplace to be tracked).")
    else:
        msg = (f"Output of {made} is a view and its base or another view of its base has "
               "been modified inplace. This view is the output of a function that returns "
               "multiple views. Such functions do not allow the output views to be modified "
               "inplace. You should replace the inplace operation by an out-of-place one.")
    ctx.aliases.forbidden[new] = msg
    op = new.owner
    if isinstance(op, Operation):
        op.attributes["saved_modified"] = StringAttr(f"{msg} (written at {where(ctx.loc)})")


def _renew_member(ctx: TraceContext, v: SSAValue, renewed: dict[SSAValue, SSAValue],
                  grad: bool) -> SSAValue:
    """`_renew` of a member's value. Under no-grad a view made with grad mode on still
    passes its gradient to the root (eager regenerates its ``grad_fn`` from the base's):
    its ops are replayed with grad mode on."""
    if grad or ctx.aliases.view_meta.get(v) == NO_GRAD:
        return _renew(ctx, v, renewed)
    with torch.enable_grad():
        return _renew(ctx, v, renewed)


def _stand_in(ctx: TraceContext, value: SSAValue) -> TensorProxy:
    """A proxy of ``value`` with its recorded layout, to pass to `fallback` (the tensor a
    member stood for before the write)."""
    strides, offset = ctx.layout_of(value)
    return TensorProxy(value, strides=strides, offset=offset)


def _renew(ctx: TraceContext, v: SSAValue, renewed: dict[SSAValue, SSAValue]) -> SSAValue:
    """``v``'s value after the write: its view ops replayed on its parent's new value."""
    done = renewed.get(v)
    if done is not None:
        return done
    how = ctx.aliases.view_parent.get(v)
    if how is None:
        raise ThunderTraceError(
            f"{where(ctx.loc)}: an in-place write reaches a tensor that shares its memory "
            "in a way thunder_ir cannot re-derive (it was written through another alias "
            "before it became a view). Clone it before writing, or write out of place.")
    parent, op, index = how
    new_parent = _renew(ctx, parent, renewed)
    if op is None:  # a strided view of its parent
        shape, strides, off = index
        t = v.type
        assert isinstance(t, TensorType)
        out = fallback(ctx, strided_view, (_stand_in(ctx, new_parent), shape, strides, off),
                       {}, result_type=t)
        r = out._value
        ctx.aliases.view_parent[r] = (new_parent, None, index)
    else:
        r = _replay(ctx, op, parent, new_parent, index)
        if v in ctx.aliases.data_cuts:  # ``x.data`` after the write is still one
            ctx.aliases.data_cuts.add(r)
        if isinstance(op, StopGradientOp) and v in ctx.active:
            # a detached alias that took a gradient of its own (``d = x.detach();
            # d.add_(s)``): the new values, its own place in the autograd graph
            how, cut = ctx.aliases.view_parent[r], r in ctx.aliases.data_cuts
            r = ctx.writes.keep_identity(v, r)
            ctx.aliases.view_parent[r] = how
            if cut:
                ctx.aliases.data_cuts.add(r)
    ctx.note_layout(r, ctx.layout_of(v))
    renewed[v] = r
    return r


def _replay(ctx: TraceContext, op: Operation, parent: SSAValue, new_parent: SSAValue,
            index: int) -> SSAValue:
    """The op that made a view, again, on the parent's new value; its result ``index``
    (with eager's autograd rules, as the first time)."""
    clone = op.clone(value_mapper={parent: new_parent})
    results = ctx.record(clone, view=True)
    r = results[index]
    ctx.aliases.view_parent[r] = (new_parent, clone, index)
    return r


__all__ = ["NO_GRAD", "VIEW_OF_LEAF", "argument_tensor", "check_writable", "live_members",
           "renewed_value", "span_root", "views_a_leaf", "write_through"]
