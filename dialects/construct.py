"""`new_op`: what ``Operation.create`` builds, in half its time (no torch needed here,
so the snapshot code and ``thunder-ir-opt --help`` import it freely)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import UNKNOWN_LOC
from xdsl.ir import Attribute, Operation, OpResult, Region, SSAValue
from xdsl.ir.core import SSAValues, Use
from xdsl.irdl import IRDLOperation, OptionalDef


def new_op(cls: type[Operation], operands: Sequence[SSAValue],
           result_types: Sequence[Attribute], properties: dict[str, Attribute],
           attributes: dict[str, Attribute] | None = None, location: Any = None,
           regions: Sequence[Region] = (), defaults: bool = True) -> Operation:
    """A new op of class ``cls``, what ``cls.create(...)`` returns, built in half its time.

    It sets the fields ``Operation.create`` sets, directly, and takes ``properties`` and
    ``attributes`` as they are (the op owns the dicts). ``create`` routes every field
    through a setter and runs the IRDL ``__post_init__``, which only fills in default
    properties and attributes: ``defaults`` does that here, from a table built once per
    class (a copy of an op already has them: ``defaults=False``). This follows the pinned
    xDSL's `Operation` fields; `tests/test_passes.py` compares the ops with ``create``'s.
    """
    new = cls.__new__(cls)
    vals = SSAValues(operands)
    uses = tuple([Use(new, i) for i in range(len(vals))])
    for v, u in zip(vals, uses):
        v.add_use(u)
    new._operands = vals
    new._operand_uses = uses
    new.results = SSAValues([OpResult(t, new, i) for i, t in enumerate(result_types)])
    attributes = {} if attributes is None else attributes
    if defaults:
        props_default, attrs_default = _defaults(cls)
        for name, value in props_default:
            if name not in properties:
                properties[name] = value
        for name, value in attrs_default:
            if name not in attributes:
                attributes[name] = value
    new.properties = properties
    new.attributes = attributes
    new.location = UNKNOWN_LOC if location is None else location
    for region in regions:
        new.add_region(region)
    return new


def _defaults(cls: type[Operation]) -> tuple[tuple[tuple[str, Attribute], ...], ...]:
    """The default properties and attributes IRDL's ``__post_init__`` fills in."""
    d = _DEFAULTS.get(cls)
    if d is None:
        if issubclass(cls, IRDLOperation):
            op_def = cls.get_irdl_definition()
            d = tuple(tuple((k, p.default_value) for k, p in defs.items()
                            if not isinstance(p, OptionalDef) and p.default_value is not None)
                      for defs in (op_def.properties, op_def.attributes))
        else:
            d = ((), ())
        _DEFAULTS[cls] = d
    return d


_DEFAULTS: dict[type, tuple[tuple[tuple[str, Attribute], ...], ...]] = {}


__all__ = ["new_op"]
