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

* ``autograd.saved_as`` says that the op that made ``%y`` saved ``%x`` for its backward,
  which the traced code then changed without eager noticing (through ``x.data``): eager's
  backward reads the memory as it is then, so the op's backward reads ``%x2``, the value
  after the write, in place of ``%x`` (its gradient still goes to ``%x``)::

      "autograd.saved_as"(%y, %x, %x2) : (...) -> ()

All three are markers for autodiff: the ``strip-autograd`` pass forwards them to their
values (the last one it drops) once the backward is built (or at once, when nothing is
differentiated), so no executor ever sees them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, IntAttr, StringAttr, i32, i64
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
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


@irdl_op_definition
class SavedAsOp(IRDLOperation):
    """`"autograd.saved_as"(%made, %saved, %now)`: the op whose result ``made`` is saved
    ``saved`` for its backward, which reads ``now`` in its place (see the module doc)."""

    name = "autograd.saved_as"

    made = operand_def(AnyValue)
    saved = operand_def(AnyValue)
    now = operand_def(AnyValue)
    traits = traits_def(Marker())


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


# --------------------------------------------------------------------------- layouts
#
# A differentiated program's functions say where their parts are: which arguments are
# the forward's inputs and which the cotangents, which results are the outputs, the
# gradients and the residuals. ``autodiff`` puts a `JointLayoutAttr` on ``@joint``;
# ``remat-split`` a `BackwardLayoutAttr` on ``@backward``; the API reads the latter to
# build the autograd bridge. Typed, so a pass that leaves a field out fails where it
# builds the attribute, not where another package reads a dict.

LAYOUT = "autograd.layout"
"""The function attribute that holds a layout."""


def _print_fields(printer: Printer, fields: Sequence[tuple[str, Attribute]]) -> None:
    def show(a: Attribute) -> str:
        if isinstance(a, IntAttr):
            return str(a.data)
        assert isinstance(a, ArrayAttr)
        return "[" + ", ".join(show(x) for x in a.data) + "]"

    printer.print_string("<" + ", ".join(f"{k} = {show(v)}" for k, v in fields) + ">")


def _parse_fields(parser: AttrParser, names: Sequence[str]) -> list[Attribute]:
    def value() -> Attribute:
        if parser.parse_optional_punctuation("[") is None:
            return IntAttr(parser.parse_integer(allow_negative=False))
        items: list[Attribute] = []
        if parser.parse_optional_punctuation("]") is None:
            items.append(value())
            while parser.parse_optional_punctuation(",") is not None:
                items.append(value())
            parser.parse_punctuation("]")
        return ArrayAttr(items)

    out: list[Attribute] = []
    with parser.in_angle_brackets():
        for i, name in enumerate(names):
            if i:
                parser.parse_punctuation(",")
            parser.parse_keyword(name)
            parser.parse_punctuation("=")
            out.append(value())
    return out


def _ints(values: Sequence[int]) -> ArrayAttr[IntAttr]:
    return ArrayAttr([IntAttr(int(v)) for v in values])


def _values(a: ArrayAttr[Any]) -> tuple[Any, ...]:
    return tuple(_values(x) if isinstance(x, ArrayAttr) else x.data for x in a.data)


class _Layout:
    """What both layouts share: their text form and their fields as Python values."""

    # (no field annotations here: IRDL would take them for the subclasses' parameters)
    FIELDS: ClassVar[tuple[str, ...]]

    def _field(self, name: str) -> Any:
        return getattr(self, name)

    def print_parameters(self, printer: Printer) -> None:
        values = [self._field(n) for n in self.FIELDS]
        _print_fields(printer, list(zip(self.FIELDS, values, strict=True)))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        return _parse_fields(parser, cls.FIELDS)

    @property
    def n_inputs(self) -> int:
        return int(self._field("inputs").data)

    @property
    def n_outputs(self) -> int:
        return int(self._field("outputs").data)

    def grad_input_list(self) -> list[int]:
        return list(_values(self._field("grad_inputs")))

    def ct_output_list(self) -> list[int]:
        return list(_values(self._field("ct_outputs")))

    def reach_list(self) -> list[tuple[int, ...]]:
        return list(_values(self._field("reaches")))


@irdl_attr_definition
class JointLayoutAttr(_Layout, ParametrizedAttribute):
    """The layout of ``@joint(inputs..., cotangents...) -> (outputs..., grads...)``:
    ``#autograd.joint<inputs = 2, outputs = 1, forward_ops = 2, grad_inputs = [0],
    ct_outputs = [0], reaches = [[0]]>``.

    ``forward_ops``: the body's first ops that are the forward; ``grad_inputs``: the
    input positions whose gradients are returned, in order; ``ct_outputs``: the output
    positions that take a cotangent; ``reaches``: per grad input, the positions in
    ``ct_outputs`` of the outputs that depend on it.
    """

    name = "autograd.joint"

    inputs: IntAttr
    outputs: IntAttr
    forward_ops: IntAttr
    grad_inputs: ArrayAttr[IntAttr]
    ct_outputs: ArrayAttr[IntAttr]
    reaches: ArrayAttr[ArrayAttr[IntAttr]]

    FIELDS: ClassVar[tuple[str, ...]] = ("inputs", "outputs", "forward_ops", "grad_inputs",
                                         "ct_outputs", "reaches")

    @staticmethod
    def make(n_inputs: int, n_outputs: int, n_forward_ops: int, grad_inputs: Sequence[int],
             ct_outputs: Sequence[int], reaches: Sequence[Sequence[int]]) -> JointLayoutAttr:
        """The attribute of these Python values."""
        return JointLayoutAttr(IntAttr(n_inputs), IntAttr(n_outputs), IntAttr(n_forward_ops),
                               _ints(grad_inputs), _ints(ct_outputs),
                               ArrayAttr([_ints(r) for r in reaches]))

    @property
    def n_forward_ops(self) -> int:
        return self.forward_ops.data


@irdl_attr_definition
class BackwardLayoutAttr(_Layout, ParametrizedAttribute):
    """The layout of a program split by ``remat-split``, on ``@backward(residuals...,
    cotangents...) -> grads``: ``#autograd.backward<inputs = 2, outputs = 1,
    residuals = 2, grad_inputs = [0], ct_outputs = [0], reaches = [[0]]>``.

    ``inputs`` and ``outputs`` count the forward's own (``@forward`` returns its outputs,
    then the ``residuals``); the other fields are the joint's (`JointLayoutAttr`).
    """

    name = "autograd.backward"

    inputs: IntAttr
    outputs: IntAttr
    residuals: IntAttr
    grad_inputs: ArrayAttr[IntAttr]
    ct_outputs: ArrayAttr[IntAttr]
    reaches: ArrayAttr[ArrayAttr[IntAttr]]

    FIELDS: ClassVar[tuple[str, ...]] = ("inputs", "outputs", "residuals", "grad_inputs",
                                         "ct_outputs", "reaches")

    @staticmethod
    def make(n_inputs: int, n_outputs: int, n_residuals: int, grad_inputs: Sequence[int],
             ct_outputs: Sequence[int], reaches: Sequence[Sequence[int]]
             ) -> BackwardLayoutAttr:
        """The attribute of these Python values."""
        return BackwardLayoutAttr(IntAttr(n_inputs), IntAttr(n_outputs), IntAttr(n_residuals),
                                  _ints(grad_inputs), _ints(ct_outputs),
                                  ArrayAttr([_ints(r) for r in reaches]))

    @property
    def n_residuals(self) -> int:
        return self.residuals.data


AUTOGRAD_OPS: list[type[ThunderOp]] = [StopGradientOp, FunctionOp]

Autograd = Dialect("autograd", [StopGradientOp, FunctionOp, YieldOp, SavedAsOp],
                   [JointLayoutAttr, BackwardLayoutAttr])

__all__ = ["AUTOGRAD_OPS", "LAYOUT", "Autograd", "BackwardLayoutAttr", "FunctionOp",
           "JointLayoutAttr", "SavedAsOp", "StopGradientOp", "YieldOp", "make_function"]
