"""The ``prims`` dialect: the primitive set every ``ltorch`` op decomposes into.

Prims are strict where ltorch is forgiving: no broadcasting (``broadcast_in_dim`` does it
explicitly), no type promotion (``convert_element_type`` does it), reductions take explicit
dims and drop them. That keeps each prim's shape rule, reference implementation, VJP rule
and fusion translation small.

Each family base declares operands, results, the shape/dtype rule and the op's kind trait
(`thunder_ir.dialects.traits`) once; a leaf is a name, its traits and a docstring.
``@prim(torch_fn)`` registers a leaf and attaches its torch reference implementation. RNG
(``bernoulli``) is not ``Pure``, so CSE and DCE keep it.

The families live in their own modules, imported here in declaration order (which is the
order of `PRIMS`): ``prims_elementwise``, ``prims_shape``, ``prims_reduction``,
``prims_creation`` and ``prims_indexing``, on the shared ``prims_base``. Every name stays
importable from this module (``from thunder_ir.dialects.prims import ConstantOp``).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from thunder_ir.dialects.base import BASE_ATTRIBUTES, ThunderOp, op_table

# The families in declaration order, which is the order of PRIMS.
# isort: off
from thunder_ir.dialects.prims_base import *  # noqa: F403
from thunder_ir.dialects.prims_elementwise import *  # noqa: F403
from thunder_ir.dialects.prims_shape import *  # noqa: F403
from thunder_ir.dialects.prims_reduction import *  # noqa: F403
from thunder_ir.dialects.prims_creation import *  # noqa: F403
from thunder_ir.dialects.prims_indexing import *  # noqa: F403
# isort: on
from thunder_ir.dialects.prims_base import PRIMS
from thunder_ir.dialects.prims_elementwise import number_fits  # noqa: F401
from thunder_ir.dialects.types import HandleType, NumberType, TensorType

OPS: dict[str, type[ThunderOp]] = op_table(PRIMS)
"""Short name (``"add"``) -> op class, for `thunder_ir.dialects.base.Emitter.ns`."""

Prims = Dialect("prims", PRIMS, [TensorType, NumberType, HandleType, *BASE_ATTRIBUTES])
