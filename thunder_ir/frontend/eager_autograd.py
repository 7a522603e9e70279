"""Eager autograd state, one of `TraceContext`'s parts: which traced values require grad,
which are eager's leaves, which were made in inference mode, and what each op's backward
saved.

Grad mode itself is torch's (it switches for real while user code runs); this part holds
what eager's autograd would know of each tensor. `GradTracking.track` applies the rules
to each recorded op with it; ops that the rules add (``stop_gradient``, an
``autograd.function``) are built by `TraceContext`, which owns the program.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, StopGradientOp
from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.modes import neutral
from thunder_ir.dialects.symbols import hinted, hints
from thunder_ir.dialects.torch import CallOp
from thunder_ir.dialects.types import NumberType, TensorType
from thunder_ir.frontend.builder import differentiable
from thunder_ir.frontend.errors import where
from thunder_ir.frontend.program_build import ProgramBuild


class EagerAutograd:
    """What eager's autograd knows of the traced values.

    Attributes:
        active: values that require grad (see `thunder_ir.frontend.context`).
        pending: gradient sources met while grad mode was off; they become active if user
            code turns grad mode on (``torch.enable_grad()`` inside a no-grad call).
        inference: values created in inference mode (eager's inference tensors).
        leaf_proxies: the ids of the program inputs' proxies: eager's leaves.
        nonleaf_inputs: arguments that require grad and are not leaves (they have a
            ``grad_fn``).
        grad_leaves: tensors made while traced that user code made require grad
            (`GradTracking.set_requires_grad`): eager's leaves, not computed from a tensor
            that requires grad.
        grad_leaf_sites: per proxy id, such a leaf's proxy (kept alive) and the user's
            line that made it: it may not leave the function (`GradTracking.check_leaf`).
        saved, saved_operands: which ops' backwards saved which values (`note_saved`), and
            which operands of each: an in-place write to a saved value makes eager's
            backward through that op raise, and so does thunder_ir's. Read them after
            `resolve_saved`: what each op saves is worked out when first needed.
        saved_written: (op, saved operand) pairs a write through ``.data`` being made
            changes (`thunder_ir.frontend.inplace`: their backwards read the value after
            the write, eager's memory then).
    """

    __slots__ = ("_unresolved", "active", "grad_leaf_sites", "grad_leaves", "inference",
                 "leaf_proxies", "nonleaf_inputs", "pending", "saved", "saved_operands",
                 "saved_written")

    def __init__(self) -> None:
        self.active: set[SSAValue] = set()
        self.pending: list[SSAValue] = []
        self.inference: set[SSAValue] = set()
        self.leaf_proxies: set[int] = set()
        self.nonleaf_inputs: set[SSAValue] = set()
        self.grad_leaves: set[SSAValue] = set()
        self.grad_leaf_sites: dict[int, tuple[Any, str]] = {}
        self.saved: dict[SSAValue, list[Operation]] = {}
        self.saved_operands: dict[Operation, tuple[int, ...]] = {}
        self.saved_written: list[tuple[Operation, SSAValue]] = []
        # (op, its operands, which were active, its results), as `note_saved` saw them
        self._unresolved: list[tuple[Operation, tuple[SSAValue, ...], list[bool],
                                     list[SSAValue]]] = []

    def is_inference(self, v: SSAValue) -> bool:
        """Whether ``v`` was created in inference mode (eager's inference tensors)."""
        return v in self.inference

    def is_source(self, v: SSAValue) -> bool:
        """Whether ``v`` requires grad now or will when grad mode comes on."""
        return v in self.active or v in self.pending

    def make_source(self, v: SSAValue, build: ProgramBuild) -> None:
        """The program argument ``v`` is a gradient source whatever the grad mode."""
        if v in self.pending:
            self.pending.remove(v)
        self.active.add(v)
        build.input_requires_grad[v.index] = True  # type: ignore[attr-defined]

    def activate_pending(self, build: ProgramBuild) -> None:
        """Grad mode came on: the pending gradient sources become active. Their uses so
        far (under no-grad) read them through ``autograd.stop_gradient``."""
        block = build.program.block
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
            build.input_requires_grad[v.index] = True  # type: ignore[attr-defined]
        self.pending.clear()

    def note_saved(self, op: Operation, results: Sequence[SSAValue]) -> None:
        """Notes that eager's backward of ``op`` saves some of its operands and results
        (``results``: the values the program uses for them); which, `resolve_saved` works
        out when an in-place write asks. Most programs write nothing in place, and the
        meta run that answers costs about 0.2 ms per op signature."""
        operands = tuple(op.operands)
        self._unresolved.append((op, operands, [o in self.active for o in operands],
                                 list(results)))

    def resolve_saved(self) -> None:
        """Fills `saved` and `saved_operands` for the ops noted since the last call (a meta
        run of each op's torch function under ``saved_tensors_hooks``, cached per
        signature: `eager_saves`)."""
        noted, self._unresolved = self._unresolved, []
        for op, operands, active, results in noted:
            if op.parent is None:  # no longer in the program
                continue
            where_saved = eager_saves(op, active)
            if not where_saved:
                continue
            saved_operands, saved_results = where_saved
            self.saved_operands[op] = saved_operands
            for i in saved_operands:
                self.saved.setdefault(operands[i], []).append(op)
            for i in saved_results:
                self.saved.setdefault(results[i], []).append(op)

    def check_inference_inputs(self, op: Any, loc: str) -> None:
        """Raises eager's error where an op would save an inference tensor for backward:
        the op's torch function runs on meta tensors flagged as the traced ones are."""
        def meta(v: SSAValue) -> Any:
            t = v.type
            if isinstance(t, NumberType):
                return t.python_type(1)
            assert isinstance(t, TensorType)
            if v in self.inference:
                with torch.inference_mode():
                    return torch.empty(hints(t.sizes), dtype=t.dtype, device="meta")
            return torch.empty(hints(t.sizes), dtype=t.dtype, device="meta",
                               requires_grad=v in self.active and differentiable(v))

        metas = [meta(v) for v in op.operands]
        try:
            with torch.enable_grad():
                if isinstance(op, CallOp):
                    op.run(metas)
                elif isinstance(op, ThunderOp):
                    grouped = group(op.operand_layout(), metas, op._segment_sizes())
                    type(op).eager_ref(*grouped, **{k: v for k, v in op.params().items()
                                                    if v is not None})
        except RuntimeError as e:
            if "nference tensor" in str(e):
                raise RuntimeError(f"{e}\n  at {where(loc)}") from None


_SAVES: dict[Any, tuple[tuple[int, ...], tuple[int, ...]] | None] = {}


def eager_saves(op: Operation, active: Sequence[bool]
                ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Which operands and results eager's backward of ``op`` saves, by running its torch
    function on meta tensors (the ``active`` ones requiring grad) under
    ``saved_tensors_hooks``; None if it saves none or cannot run (cached per signature and
    default dtype; run outside inference mode and autocast, `neutral`, which would record
    no graph or another one)."""
    if not isinstance(op, ThunderOp) or isinstance(op, FunctionOp):
        return None  # a custom Function's saved tensors are what its ctx saved
    try:  # attributes hash without printing; one that cannot is keyed by its text
        key: Any = (op.name, tuple([o.type for o in op.operands]),
                    tuple(op.properties.items()), tuple(active), torch.get_default_dtype())
        hash(key)
    except TypeError:
        try:
            key = (op.name, tuple([o.type for o in op.operands]), str(op.properties),
                   tuple(active), torch.get_default_dtype())
            hash(key)
        except TypeError:
            return None
    if key in _SAVES:
        return _SAVES[key]
    metas: list[Any] = []
    for o, a in zip(op.operands, active, strict=True):
        t = o.type
        if isinstance(t, TensorType):
            metas.append(torch.empty(hints(t.sizes), dtype=t.dtype, device="meta",
                                     requires_grad=a and differentiable(o)))
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
        with torch._C.DisableTorchFunction(), neutral(), torch.enable_grad(), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if isinstance(op, CallOp):  # (its sizes as their hints, as an op's params)
                out = op.run(metas, hinted)
            else:
                grouped = group(op.operand_layout(), metas, op._segment_sizes())
                out = type(op).eager_ref(*grouped, **hinted(op.params()))
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


__all__ = ["EagerAutograd", "eager_saves"]
