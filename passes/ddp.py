"""``ddp-allreduce``: data-parallel gradients, averaged across processes inside
``@backward``, in buckets that start as soon as their last gradient is computed.

Why in the program: eager DDP hooks autograd to launch each bucket's all-reduce while the
rest of the backward runs. Here the backward is one function of the IR, so the same
schedule is a rewrite: the gradients of the parameters (``params``: the forward's input
positions they come from) are grouped, in the order ``@backward`` computes them, into
buckets of at most ``bucket_bytes`` (one dtype and device each); right after the op that
computes a bucket's last gradient, the bucket is flattened into one buffer and its
``dist.all_reduce`` starts; the ``dist.wait`` of every bucket comes just before the
return, so communication overlaps everything computed in between. Each waited buffer is
divided by the world size (gloo has no average) and split back into the gradients'
shapes::

    %b = "prims.cat"(%g1_flat, %g2_flat) <{dim = 0}>            // after %g2 is computed
    %h = "dist.all_reduce"(%b) <{reduce = "sum", group = "world", donated = true}>
    ...                                                          // the rest of @backward
    %r = "dist.wait"(%h)
    %avg = "prims.div"(%r, %world)
    %g1 = "prims.reshape"("prims.slice"(%avg) ...)               // returned in place of %g1

The collectives carry effects, so no later pass merges, drops, recomputes or fuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from thunder_ir.dialects import dist, prims
from thunder_ir.dialects.autograd import BackwardLayoutAttr
from thunder_ir.dialects.base import Emitter
from thunder_ir.dialects.program import BACKWARD, program_functions
from thunder_ir.dialects.types import TensorType

DEFAULT_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default bucket size (25 MiB)."""


def _buckets(grads: list[tuple[int, SSAValue]], order: dict[Operation, int],
             bucket_bytes: int) -> list[list[tuple[int, SSAValue]]]:
    """The gradients (``(output index, value)``) in the order they are computed, cut into
    buckets of at most ``bucket_bytes`` (a larger gradient is a bucket of its own) that
    share a dtype and a device."""

    def computed_at(v: SSAValue) -> int:
        return order.get(v.owner, -1) if isinstance(v.owner, Operation) else -1

    out: list[list[tuple[int, SSAValue]]] = []
    size = 0
    for k, v in sorted(grads, key=lambda kv: computed_at(kv[1])):
        t = v.type
        assert isinstance(t, TensorType)
        if out and (size + t.nbytes() > bucket_bytes or not _same_kind(out[-1][0][1], v)):
            out.append([])
            size = 0
        if not out:
            out.append([])
        out[-1].append((k, v))
        size += t.nbytes()
    return [b for b in out if b]


def _same_kind(a: SSAValue, b: SSAValue) -> bool:
    ta, tb = a.type, b.type
    assert isinstance(ta, TensorType) and isinstance(tb, TensorType)
    return ta.dtype == tb.dtype and ta.dev == tb.dev


def all_reduce_gradients(fn: func.FuncOp, params: tuple[int, ...], world: int,
                         group: str = dist.WORLD,
                         bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> int:
    """Rewrites ``@backward`` ``fn`` so that the gradients of the forward inputs
    ``params`` are averaged over the ``world`` processes of ``group`` (see the module
    doc). Returns the number of buckets."""
    lay = fn.attributes.get("autograd.layout")
    if not isinstance(lay, BackwardLayoutAttr):
        raise ValueError("ddp-allreduce: @backward has no #autograd.backward layout "
                         "(run remat-split first)")
    block = fn.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    wanted = set(params)
    grads = [(k, ret.operands[k]) for k, i in enumerate(lay.grad_input_list())
             if i in wanted and isinstance(ret.operands[k].type, TensorType)]
    if not grads or world <= 1:
        return 0
    order = {op: n for n, op in enumerate(block.ops)}
    buckets = _buckets(grads, order, bucket_bytes)
    pending: list[tuple[list[tuple[int, SSAValue]], SSAValue]] = []
    for bucket in buckets:
        last = max((v.owner for _, v in bucket if isinstance(v.owner, Operation)),
                   key=order.__getitem__, default=None)
        anchor = last.next_op if last is not None else block.first_op
        assert anchor is not None
        E = Emitter(lambda op, at=anchor: block.insert_op_before(op, at))
        P, D = E.ns(prims.OPS), E.ns(dist.OPS)
        flats = [P.reshape(v, shape=(v.type.numel(),)) for _, v in bucket]  # type: ignore[attr-defined]
        flat = flats[0] if len(flats) == 1 else P.cat(flats, dim=0)
        handle = D.all_reduce(flat, reduce="sum", group=group, donated=len(flats) > 1)
        pending.append((bucket, handle))
    E = Emitter(lambda op: block.insert_op_before(op, ret))
    P, D = E.ns(prims.OPS), E.ns(dist.OPS)
    scale = P.constant(value=float(world))
    for bucket, handle in pending:
        avg = P.div(D.wait(handle), scale)
        offset = 0
        for k, v in bucket:
            t = v.type
            assert isinstance(t, TensorType)
            n = t.numel()
            piece = avg if len(bucket) == 1 else P.slice(
                avg, start_indices=(offset,), end_indices=(offset + n,), strides=(1,))
            ret.operands[k] = P.reshape(piece, shape=t.sizes)
            offset += n
    return len(buckets)


@dataclass(frozen=True)
class DDPAllReducePass(ModulePass):
    """Averages the parameters' gradients across processes inside ``@backward``.

    Args:
        params: the forward's input positions whose gradients are averaged (the
            parameters; ``jit`` names them from the arguments' origins).
        world: the number of processes.
        group: the process group's name (`thunder_ir.dialects.dist.register_group`).
        bucket_bytes: the most bytes one all-reduce carries.
    """

    name = "ddp-allreduce"
    params: tuple[int, ...] = ()
    world: int = 1
    group: str = dist.WORLD
    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in program_functions(op):
            if fn.sym_name.data == BACKWARD:
                all_reduce_gradients(fn, tuple(self.params), self.world, self.group,
                                     self.bucket_bytes)




__all__ = ["DEFAULT_BUCKET_BYTES", "DDPAllReducePass", "all_reduce_gradients"]
