"""VJP rules of the ``autograd`` dialect (see `thunder_ir.passes.vjp`).

* ``autograd.stop_gradient`` is not differentiable: no cotangent crosses it.
* ``autograd.function``'s rule is the user's backward, traced into the op's region: its ops
  are copied into the backward program with each cotangent in place of its block argument
  (zeros where a result has none, as eager materializes them), and its yielded values are
  the gradients of the primals in ``grad_mask``. The region reads forward values directly
  (the tensors the user saved), which the joint program has in scope.
"""

from __future__ import annotations

from typing import Any

from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects.autograd import FunctionOp, YieldOp
from thunder_ir.dialects.types import TensorType
from thunder_ir.passes.snapshot import clone_op
from thunder_ir.passes.vjp import Grad, vjp


@vjp(FunctionOp)
def function(g: Grad, out: list[SSAValue], ct: list[SSAValue | None], primals: list[SSAValue],
             values: list[SSAValue], name: str | None = None,
             grad_mask: tuple[int, ...] = ()) -> list[Any]:
    """The traced backward, inlined with the results' cotangents."""
    op = out[0].owner
    assert isinstance(op, FunctionOp)
    body = op.backward.block
    vm: dict[SSAValue, SSAValue] = {}
    for arg, c, r in zip(body.args, ct, out, strict=True):
        if c is None:
            t = r.type
            assert isinstance(t, TensorType)
            c = g.prims.full(shape=t.sizes, fill_value=0.0, device=t.dev, dtype=t.dtype)
        vm[arg] = c
    grads: list[SSAValue | None] = [None] * len(primals)
    loc, g.emitter.loc = g.emitter.loc, None  # the backward's ops keep their own lines
    try:
        for bop in body.ops:
            if isinstance(bop, YieldOp):
                for i, v in zip(grad_mask, bop.values, strict=True):
                    grads[i] = vm.get(v, v)
                break
            new: Operation = clone_op(bop, vm)
            g.emitter.insert(new)
    finally:
        g.emitter.loc = loc
    return [grads, [None] * len(values)]
