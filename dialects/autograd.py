"""The ``autograd`` dialect: where eager autograd cuts or replaces the gradient.

Tracing records what PyTorch's autograd would do around a value, not only the value:

* ``autograd.stop_gradient`` is ``x.detach()``, ``x.data``, and every result computed
  from a tensor that requires grad while grad mode is off (``torch.no_grad()``,
  ``torch.inference_mode()``, a custom ``Function``'s forward), or that eager marks as not
  requiring grad (``torch.special.bessel_j0``). Autodiff sends no cotangent through it::

      %y = autograd.stop_gradient %x : !prims.tensor<2xf32, cpu>

* ``autograd.function`` is a custom ``torch.autograd.Function``. Its forward was traced
  inline (under no-grad, so its results are cut from its inputs); the op passes those
  results through and gives them the user's backward, traced into its region. The region
  takes one cotangent per result and yields the gradients of the ``primals`` listed in
  ``grad_mask``; it reads forward values (saved tensors) directly::

      %o = "autograd.function"(%x, %t3) <{name = "STRound", grad_mask = array<i64: 0>,
             operandSegmentSizes = array<i32: 1, 1>}> ({
      ^bb0(%ct: !prims.tensor<3xf32, cpu>):
        "autograd.yield"(%ct) : (...) -> ()
      }) : (...) -> !prims.tensor<3xf32, cpu>

Both are markers for autodiff: the ``strip-autograd`` pass forwards them to their values
once the backward is built (or at once, when nothing is differentiated), so no executor
ever sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import DenseArrayBase, StringAttr, i32, i64
from xdsl.ir import Attribute, Block, Dialect, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsTerminator, Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

from thunder_ir.dialects.base import ShapeError, ThunderOp
from thunder_ir.dialects.traits import Marker, NoDerivative, Opaque
from thunder_ir.dialects.types import NumberType, TensorType

AnyValue = TensorType | NumberType


@irdl_op_definition
class StopGradientOp(ThunderOp):
    """`%y = autograd.stop_gradient %x`: ``x`` itself, with no gradient flowing back."""

    name = "autograd.stop_gradient"

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Marker(), NoDerivative())

    @classmethod
    def infer(cls, input: Any, **params: Any) -> Attribute:
        if not isinstance(input, TensorType):
            raise ShapeError(f"{cls.name}: expected a tensor, got {input}")
        return input

    @classmethod
    def ref(cls, input: Any, **params: Any) -> Any:
        return input.detach()


@irdl_op_definition
class YieldOp(IRDLOperation):
    """`"autograd.yield"(%g0, %g1)`: the gradients an ``autograd.function`` region returns."""

    name = "autograd.yield"

    values = var_operand_def(AnyValue)
    traits = traits_def(IsTerminator(), Pure())


@irdl_op_definition
class FunctionOp(ThunderOp):
    """`%outs = autograd.function(%primals..., %values...) {name, grad_mask} ({backward})`:
    ``values``, with the user's backward as their gradient rule."""

    name = "autograd.function"

    primals = var_operand_def(AnyValue)
    values = var_operand_def(TensorType)
    fn_name = prop_def(StringAttr, prop_name="name")
    grad_mask = prop_def(DenseArrayBase)
    backward = region_def("single_block")
    outs = var_result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(RecursiveMemoryEffect(), Opaque())

    @classmethod
    def infer(cls, primals: Sequence[Any], values: Sequence[Any], **params: Any
              ) -> list[Attribute]:
        return list(values)

    @classmethod
    def ref(cls, primals: Sequence[Any], values: Sequence[Any], **params: Any) -> Any:
        return list(values)

    def params(self) -> dict[str, Any]:
        return {"name": self.fn_name.data, "grad_mask": tuple(self.grad_mask.get_values())}

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        return ("name", "grad_mask")

    def verify_(self) -> None:
        super().verify_()
        block = self.backward.block
        if [a.type for a in block.args] != [r.type for r in self.outs]:
            raise VerifyException(f"{self.name} {self.fn_name.data}: the backward takes one "
                                  "cotangent per result, of the result's type")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException(f"{self.name} {self.fn_name.data}: the backward must end "
                                  "in autograd.yield")
        mask = self.grad_mask.get_values()
        if len(term.values) != len(mask):
            raise VerifyException(f"{self.name} {self.fn_name.data}: the backward yields "
                                  f"{len(term.values)} gradients for {len(mask)} primals")
        for i, v in zip(mask, term.values, strict=True):
            if not 0 <= i < len(self.primals) or v.type != self.primals[i].type:
                raise VerifyException(f"{self.name} {self.fn_name.data}: gradient {i} does "
                                      "not match its primal's type")


def make_function(name: str, primals: Sequence[SSAValue], values: Sequence[SSAValue],
                  grad_mask: Sequence[int], body: Block, grads: Sequence[SSAValue]
                  ) -> FunctionOp:
    """Builds an ``autograd.function``.

    Args:
        name: what the op is called in traces (the ``Function`` subclass's name).
        primals: the values the user's backward gives gradients for.
        values: the forward's results (computed by ops before this one).
        grad_mask: which primals the backward gives a gradient (indices into ``primals``).
        body: the backward's block, one argument (cotangent) per value; it gets the
            terminator.
        grads: the gradients ``body`` computes, one per entry of ``grad_mask``.
    """
    body.add_op(YieldOp.create(operands=list(grads)))
    props: dict[str, Attribute] = {
        "name": StringAttr(name),
        "grad_mask": DenseArrayBase.from_list(i64, list(grad_mask)),
        "operandSegmentSizes": DenseArrayBase.from_list(i32, [len(primals), len(values)]),
    }
    return FunctionOp.create(operands=[*primals, *values],
                             result_types=[v.type for v in values],
                             properties=props, regions=[Region(body)])


AUTOGRAD_OPS: list[type[ThunderOp]] = [StopGradientOp, FunctionOp]

Autograd = Dialect("autograd", [StopGradientOp, FunctionOp, YieldOp], [])

__all__ = ["AUTOGRAD_OPS", "Autograd", "FunctionOp", "StopGradientOp", "YieldOp",
           "make_function"]
