"""The ``fusion`` dialect: a region of prims that one executor compiles into one kernel.

``fusion.region`` takes the values its body reads as operands (the body block's
arguments) and returns what ``fusion.yield`` yields::

    %y = "fusion.region"(%a, %b) <{executor = "nvfuser", kernel = "nvFusion0"}> ({
    ^bb0(%x: ..., %w: ...):
      %t = "prims.mul"(%x, %w) ...
      "fusion.yield"(%t) ...
    }) : (...) -> ...

It is ``Pure`` only through its body (``RecursiveMemoryEffect``): a region holding RNG is
kept by CSE and DCE. It is ``IsolatedFromAbove``: its body reads only its block arguments,
so no pass (CSE included) can make it capture an outer value.

An op an executor has claimed (the ``claim`` pass) carries ``fusion.claimed =
#fusion.executor<"torch">`` (`ExecutorAttr`; `claim`, `claimed_by`): the executor that
runs it whole, which decompositions then leave alone and fusion groups by.
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Dialect, Operation, ParametrizedAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import IsolatedFromAbove, IsTerminator, Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

from thunder_ir.dialects.traits import Library
from thunder_ir.dialects.types import NumberType, TensorType


@irdl_op_definition
class YieldOp(IRDLOperation):
    """`"fusion.yield"(%a, %b)`: the values a fusion region returns."""

    name = "fusion.yield"

    values = var_operand_def(TensorType | NumberType)
    traits = traits_def(IsTerminator(), Pure())


@irdl_op_definition
class RegionOp(IRDLOperation):
    """`%r = "fusion.region"(%a) <{executor = "torch_compile", kernel = "fusion0"}> ({...})`"""

    name = "fusion.region"

    inputs = var_operand_def(TensorType | NumberType)
    executor = prop_def(StringAttr)
    kernel = prop_def(StringAttr)
    body = region_def("single_block")
    outs = var_result_def(TensorType | NumberType)
    traits = traits_def(RecursiveMemoryEffect(), IsolatedFromAbove(), Library())

    def verify_(self) -> None:
        block = self.body.block
        if [a.type for a in block.args] != [v.type for v in self.inputs]:
            raise VerifyException(f"fusion.region {self.kernel.data}: block argument types do "
                                  "not match the operand types")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException(f"fusion.region {self.kernel.data}: body must end in "
                                  "fusion.yield")
        if [v.type for v in term.values] != [r.type for r in self.outs]:
            raise VerifyException(f"fusion.region {self.kernel.data}: yielded types do not "
                                  "match the result types")


CLAIMED = "fusion.claimed"
"""The discardable attribute naming the executor that claimed an op."""


@irdl_attr_definition
class ExecutorAttr(ParametrizedAttribute):
    """``#fusion.executor<"torch">``: an executor, by its registered name."""

    name = "fusion.executor"

    executor: StringAttr


def claim(op: Operation, executor: str) -> None:
    """Marks ``op`` as claimed by the executor named ``executor``."""
    attr = _CLAIMS.get(executor)
    if attr is None:  # (one attribute per executor, shared: building one costs ~5 µs)
        attr = _CLAIMS[executor] = ExecutorAttr(StringAttr(executor))
    op.attributes[CLAIMED] = attr


_CLAIMS: dict[str, ExecutorAttr] = {}


def claimed_by(op: Operation) -> str | None:
    """The name of the executor that claimed ``op``; None if none did."""
    attr = op.attributes.get(CLAIMED)
    return attr.executor.data if isinstance(attr, ExecutorAttr) else None


Fusion = Dialect("fusion", [RegionOp, YieldOp], [ExecutorAttr])
