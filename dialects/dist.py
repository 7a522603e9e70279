"""The ``dist`` dialect: collectives across the processes of a ``torch.distributed`` group.

A collective is asynchronous: it starts the communication and returns a pending value,
typed by the tensor it will hold (``!dist.pending<!prims.tensor<...>>``); ``dist.wait``
finishes it and returns that tensor. A pass decides where each starts and where it is
waited for, so communication overlaps the computation between the two::

    %h = "dist.all_reduce"(%flat) <{reduce = "sum", group = "world", donated = true}>
    ...                                   // the rest of @backward runs meanwhile
    %g = "dist.wait"(%h) : (!dist.pending<!prims.tensor<1024xf32, cpu>>) -> ...

They lower to ``torch.distributed``'s own calls with ``async_op=True`` and
``work.wait()`` (NCCL on GPUs, gloo on CPU); the trace shows them as
``dist.all_reduce(...)`` / ``dist.wait(...)``. Their kind is `Collective`, and they have
effects (xDSL's ``MemoryEffect``), so CSE never merges two, DCE never drops one, remat
never recomputes one and no fusion region holds one.

``group`` names a process group: ``"world"`` (the default group) or a name
`register_group` gave. ``world`` on the ops that change a shape is the group's size.
``donated`` says the operand is read by nothing else, so the collective may reduce it in
place (the buckets the ``ddp`` pass builds); otherwise it works on a copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from xdsl.dialects.builtin import IntegerAttr, StringAttr
from xdsl.ir import Dialect, Operation, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import (
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind

from thunder_ir.dialects.base import ShapeError, ThunderOp, op_table
from thunder_ir.dialects.traits import Collective
from thunder_ir.dialects.types import TensorType, tensor_type

WORLD = "world"
"""The default process group's name."""

REDUCE_OPS = ("sum", "product", "min", "max")
"""The reductions every backend has (gloo has no ``avg``: divide after a ``sum``)."""


@irdl_attr_definition
class PendingType(ParametrizedAttribute, TypeAttribute):
    """``!dist.pending<!prims.tensor<...>>``: a started collective, which ``dist.wait``
    turns into the tensor it will hold."""

    name = "dist.pending"

    tensor: TensorType

    def pretty(self) -> str:
        return f"pending {self.tensor.pretty()}"


# --------------------------------------------------------------------------- process groups

_GROUPS: dict[str, Any] = {}


def register_group(group: Any) -> str:
    """The name collectives use for ``group`` (a ``ProcessGroup``; None: the default)."""
    if group is None:
        return WORLD
    name = f"group{id(group):x}"
    _GROUPS[name] = group
    return name


def process_group(name: str) -> Any:
    """The ``ProcessGroup`` a collective names (None for the default group)."""
    if name == WORLD:
        return None
    try:
        return _GROUPS[name]
    except KeyError:
        raise ValueError(f"dist: no process group is registered as {name!r}") from None


class CollectiveError(RuntimeError):
    """A collective failed: another process of the group stopped, or the transport did."""


def communicate(what: str, group: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, with a failure of torch.distributed's said in the program's terms."""
    try:
        return fn()
    except RuntimeError as e:
        raise CollectiveError(
            f"thunder_ir.distributed: {what} on process group {group!r} failed; another "
            "process of the group may have stopped or failed (see its output). "
            f"torch.distributed said: {e}") from e


class Pending:
    """What a started collective returns at run time: torch's ``Work`` and the tensor it
    fills (``wait`` waits, then returns it)."""

    __slots__ = ("group", "result", "what", "work")

    def __init__(self, work: Any, result: torch.Tensor, what: str, group: str) -> None:
        self.work = work
        self.result = result
        self.what = what
        self.group = group

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            communicate(f"waiting for {self.what}", self.group, self.work.wait)
            self.work = None
        return self.result


def _reduce_op(name: str) -> Any:
    import torch.distributed as dist

    return {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
            "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[name]


# --------------------------------------------------------------------------- ops


class Communicates(MemoryEffect):
    """Reads and writes what other processes see: never merged, dropped or moved past
    another effect."""

    @classmethod
    def get_effects(cls, op: Operation) -> set[EffectInstance]:
        return {EffectInstance(MemoryEffectKind.WRITE), EffectInstance(MemoryEffectKind.READ)}


class CollectiveOp(ThunderOp):
    """Family of the collectives: a tensor in, a pending tensor out (see the module doc).
    Generated code calls them through their namespace (``dist.all_reduce(...)``)."""

    EXECUTABLE: ClassVar[bool] = True
    DEFAULTS: ClassVar[dict[str, Any]] = {"donated": False}

    input = operand_def(TensorType)
    group = prop_def(StringAttr)
    donated = opt_prop_def(IntegerAttr)
    out = result_def(PendingType)
    traits = traits_def(Collective(), Communicates())

    @classmethod
    def result_tensor(cls, t: TensorType, **params: Any) -> TensorType:
        """The tensor the collective will hold, for an operand of type ``t``."""
        return t

    @classmethod
    def infer(cls, input: Any, **params: Any) -> PendingType:
        if not isinstance(input, TensorType):
            raise ShapeError(f"{cls.name}: operand must be a tensor, got {input}")
        reduce = params.get("reduce")
        if reduce is not None and reduce not in REDUCE_OPS:
            raise ShapeError(f"{cls.name}: reduce must be one of {REDUCE_OPS}, got {reduce!r}")
        return PendingType(cls.result_tensor(input, **params))


def _in_place(what: str, input: torch.Tensor, donated: bool | None, group: str,
              start: Callable[[torch.Tensor, Any], Any]) -> Pending:
    """Starts a collective that writes its buffer in place (``start(buffer, group)``): on
    ``input`` itself when donated, else on a copy."""
    buf = input if donated else input.clone(memory_format=torch.contiguous_format)
    work = communicate(what, group, lambda: start(buf, process_group(group)))
    return Pending(work, buf, what, group)


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    """`%h = dist.all_reduce %x {reduce, group}`: every process's ``x`` reduced
    elementwise, on every process."""

    name = "dist.all_reduce"

    reduce = prop_def(StringAttr)

    @classmethod
    def ref(cls, input: torch.Tensor, *, group: str, reduce: str,
            donated: bool | None = False) -> Pending:
        import torch.distributed as dist

        return _in_place(cls.name, input, donated, group, lambda buf, pg: dist.all_reduce(
            buf, op=_reduce_op(reduce), group=pg, async_op=True))


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """`%h = dist.all_gather %x {world, group}`: the processes' ``x`` concatenated along
    dim 0, in rank order (``world`` times as many rows)."""

    name = "dist.all_gather"

    world = prop_def(IntegerAttr)

    @classmethod
    def result_tensor(cls, t: TensorType, **params: Any) -> TensorType:
        if not t.sizes:
            raise ShapeError(f"{cls.name}: cannot gather a 0-d tensor along dim 0")
        return tensor_type((t.sizes[0] * params["world"], *t.sizes[1:]), t.dtype, t.dev)

    @classmethod
    def ref(cls, input: torch.Tensor, *, group: str, world: int,
            donated: bool | None = False) -> Pending:
        import torch.distributed as dist

        out = input.new_empty((input.shape[0] * world, *input.shape[1:]))
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        work = communicate(cls.name, group, lambda: fn(
            out, input.contiguous(), group=process_group(group), async_op=True))
        return Pending(work, out, cls.name, group)


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    """`%h = dist.reduce_scatter %x {reduce, world, group}`: the processes' ``x`` reduced
    elementwise, and this process's ``1/world`` of the rows (in rank order)."""

    name = "dist.reduce_scatter"

    reduce = prop_def(StringAttr)
    world = prop_def(IntegerAttr)

    @classmethod
    def result_tensor(cls, t: TensorType, **params: Any) -> TensorType:
        world = params["world"]
        if not t.sizes or t.sizes[0] % world:
            raise ShapeError(f"{cls.name}: dim 0 of {t.pretty()} does not split into "
                             f"{world} equal parts")
        return tensor_type((t.sizes[0] // world, *t.sizes[1:]), t.dtype, t.dev)

    @classmethod
    def ref(cls, input: torch.Tensor, *, group: str, reduce: str, world: int,
            donated: bool | None = False) -> Pending:
        import torch.distributed as dist

        out = input.new_empty((input.shape[0] // world, *input.shape[1:]))
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        work = communicate(cls.name, group, lambda: fn(
            out, input.contiguous(), op=_reduce_op(reduce), group=process_group(group),
            async_op=True))
        return Pending(work, out, cls.name, group)


@irdl_op_definition
class BroadcastOp(CollectiveOp):
    """`%h = dist.broadcast %x {src, group}`: process ``src``'s ``x``, on every process."""

    name = "dist.broadcast"

    src = prop_def(IntegerAttr)

    @classmethod
    def ref(cls, input: torch.Tensor, *, group: str, src: int,
            donated: bool | None = False) -> Pending:
        import torch.distributed as dist

        return _in_place(cls.name, input, donated, group, lambda buf, pg: dist.broadcast(
            buf, src, group=pg, async_op=True))


@irdl_op_definition
class WaitOp(ThunderOp):
    """`%y = dist.wait %h`: waits for a started collective; its tensor."""

    name = "dist.wait"

    EXECUTABLE: ClassVar[bool] = True

    pending = operand_def(PendingType)
    out = result_def(TensorType)
    traits = traits_def(Collective(), Communicates())

    @classmethod
    def infer(cls, pending: Any) -> TensorType:
        if not isinstance(pending, PendingType):
            raise ShapeError(f"{cls.name}: operand must be a pending collective, got {pending}")
        return pending.tensor

    @classmethod
    def ref(cls, pending: Pending) -> torch.Tensor:
        return pending.wait()


DIST_OPS: list[type[ThunderOp]] = [AllReduceOp, AllGatherOp, ReduceScatterOp, BroadcastOp,
                                   WaitOp]
OPS: dict[str, type[ThunderOp]] = op_table(DIST_OPS)
"""Short name (``"all_reduce"``) -> op class, for `thunder_ir.dialects.base.Emitter.ns`."""

Dist = Dialect("dist", DIST_OPS, [PendingType])

__all__ = ["DIST_OPS", "OPS", "REDUCE_OPS", "WORLD", "AllGatherOp", "AllReduceOp",
           "BroadcastOp", "CollectiveError", "CollectiveOp", "Communicates", "Dist",
           "Pending", "PendingType", "ReduceScatterOp", "WaitOp", "communicate",
           "process_group", "register_group"]
