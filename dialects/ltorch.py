"""The ``ltorch`` dialect: PyTorch-level ops with PyTorch's semantics.

Ops are declared by family in ``ltorch_core`` (elementwise, reductions, shape and
creation ops), ``ltorch_scan`` (``cumsum``), ``ltorch_index`` (``index_add``),
``ltorch_nn`` (linear algebra, normalization, attention, losses) and
``ltorch_activation`` (activations and their backward kernels); the shared base is
``ltorch_base``. This module assembles the dialect.
"""

from __future__ import annotations

from xdsl.ir import Dialect

import thunder_ir.dialects.ltorch_activation
import thunder_ir.dialects.ltorch_core
import thunder_ir.dialects.ltorch_index
import thunder_ir.dialects.ltorch_nn
import thunder_ir.dialects.ltorch_scan  # noqa: F401  (each module registers its ops)
from thunder_ir.dialects.base import ThunderOp, op_table
from thunder_ir.dialects.ltorch_base import LTORCH, LtorchOp

OPS: dict[str, type[ThunderOp]] = op_table(LTORCH)
"""Short name (``"add"``) -> op class."""

Ltorch = Dialect("ltorch", LTORCH, [])

__all__ = ["LTORCH", "OPS", "Ltorch", "LtorchOp"]
