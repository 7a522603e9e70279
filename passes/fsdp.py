"""The passes of fully sharded data parallelism (`thunder_ir.distributed.fsdp`).

Tracing reads each sharded parameter as ``dist.wait(dist.all_gather(shard))`` (its padding
sliced off), and autodiff transposes that into a ``dist.reduce_scatter`` of the full
parameter's gradient: the sum over the processes of their gradients of this process's
rows. After ``remat-split``:

* ``fsdp-grad-scale`` divides those gradients by the world size (each process's loss is
  its own batch's mean: the average is one process's gradient on the whole batch);
* ``fsdp-zero3`` (`FSDPType.ZERO3`) keeps the gathered parameters out of the residuals:
  where ``@forward`` would return a gathered parameter for the backward, it returns the
  shard, and ``@backward`` gathers it again. The forward's copy is then freed after its
  last use there (generated code frees each value after its last use);
* ``schedule-collectives`` (`thunder_ir.passes.collectives`) moves the starts and waits.
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
from thunder_ir.dialects.program import BACKWARD, FORWARD, program_functions
from thunder_ir.dialects.types import TensorType
from thunder_ir.passes.collectives import LAYOUT_OPS


def _functions(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {f.sym_name.data: f for f in program_functions(module)}


def _layout(bwd: func.FuncOp, what: str) -> BackwardLayoutAttr:
    lay = bwd.attributes.get("autograd.layout")
    if not isinstance(lay, BackwardLayoutAttr):
        raise ValueError(f"{what}: @backward has no #autograd.backward layout (run "
                         "remat-split first)")
    return lay


def scale_gradients(bwd: func.FuncOp, params: tuple[int, ...], world: int) -> int:
    """Divides ``@backward``'s gradients of the forward inputs ``params`` by ``world``;
    returns how many."""
    lay = _layout(bwd, "fsdp-grad-scale")
    ret = bwd.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    wanted = set(params)
    targets = [k for k, i in enumerate(lay.grad_input_list())
               if i in wanted and isinstance(ret.operands[k].type, TensorType)]
    if not targets or world <= 1:
        return 0
    E = Emitter(lambda op: bwd.body.block.insert_op_before(op, ret))
    P = E.ns(prims.OPS)
    scale = P.constant(value=float(world))
    for k in targets:
        ret.operands[k] = P.div(ret.operands[k], scale)
    return len(targets)


@dataclass(frozen=True)
class FSDPGradScalePass(ModulePass):
    """Averages the shards' gradients: divides them by the world size (the module doc).

    Args:
        params: the forward's input positions of the sharded parameters.
        world: the number of processes.
    """

    name = "fsdp-grad-scale"
    params: tuple[int, ...] = ()
    world: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        bwd = _functions(op).get(BACKWARD)
        if bwd is not None:
            scale_gradients(bwd, tuple(self.params), self.world)


def _gathered(v: SSAValue) -> tuple[SSAValue, list[Operation]] | None:
    """Whether ``v`` is a gathered parameter (``wait(all_gather(x))``, laid out by
    `LAYOUT_OPS`): ``x`` and the ops from the gather to ``v``, in order."""
    chain: list[Operation] = []
    op = v.owner
    while isinstance(op, Operation) and not isinstance(op, dist.WaitOp):
        if op.name not in LAYOUT_OPS or len(op.operands) != 1:
            return None
        chain.append(op)
        op = op.operands[0].owner
    if not isinstance(op, dist.WaitOp):
        return None
    start = op.operands[0].owner
    if not isinstance(start, dist.AllGatherOp):
        return None
    return start.operands[0], [start, op, *reversed(chain)]


def regather_in_backward(fwd: func.FuncOp, bwd: func.FuncOp) -> int:
    """ZERO3: each residual that is a gathered parameter becomes what was gathered (the
    shard, or a bucket's flat shards), gathered again at the top of ``@backward`` (once
    per gathered buffer); returns how many residuals changed."""
    lay = _layout(bwd, "fsdp-zero3")
    ret = fwd.body.block.last_op
    assert isinstance(ret, func.ReturnOp)
    n_out = lay.n_outputs
    block = bwd.body.block
    regathered: dict[SSAValue, dict[SSAValue, SSAValue]] = {}  # forward buffer -> mapping
    anchor = block.first_op  # the gathers go before the backward's own ops, in order
    assert anchor is not None
    n = 0
    for k in range(n_out, len(ret.operands)):
        value = ret.operands[k]
        found = _gathered(value)
        if found is None:
            continue
        source, chain = found
        ret.operands[k] = source
        old = block.args[k - n_out]  # @backward takes the residuals first, in order
        new = block.insert_arg(source.type, old.index)
        vm = regathered.get(source)
        if vm is None:
            vm = regathered[source] = {source: new}
        for op in chain:  # the same gather and layout, on the backward's own input
            if op.results[0] in vm:
                continue
            copy = op.clone(value_mapper=dict(vm))
            block.insert_op_before(copy, anchor)
            vm.update(zip(op.results, copy.results))
        old.replace_all_uses_with(vm[value])
        block.erase_arg(old)
        n += 1
    if n:
        fwd.update_function_type()
        bwd.update_function_type()
    return n


@dataclass(frozen=True)
class Zero3Pass(ModulePass):
    """Gathers the parameters again in ``@backward`` instead of keeping them (ZERO3)."""

    name = "fsdp-zero3"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fns = _functions(op)
        if FORWARD in fns and BACKWARD in fns:
            regather_in_backward(fns[FORWARD], fns[BACKWARD])


__all__ = ["FSDPGradScalePass", "Zero3Pass", "regather_in_backward", "scale_gradients"]
