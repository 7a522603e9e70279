"""Where a program argument comes from at call time: one small type per kind of origin.

Tracing records an origin per program argument (`TracedProgram.input_kinds`), and per
input the program writes in place (``writebacks``); the API reads them to gather a call's
arguments and to write the results back. They are read by type and field, never by
position in a tuple::

    ArgLeaf(2)                           the flat user-argument leaf 2
    ArgPath(0, (("attr", "h"),))         a tensor inside argument object 0: ``a0.h``
    StateEntry("fc.weight")              a module parameter or buffer, by name
    Captured(t)                          a tensor captured from user code (or, once bound,
                                         the parameter or buffer itself)
    ModuleAttr(m, "step")                an ``int`` the module keeps (``self.step``), read
                                         from it on each call: a symbolic number
    ModuleTensor(m, "h", False)          a tensor ``forward`` rebinds (``self.h = ...``, a
                                         buffer or a plain attribute), read from the module
                                         on each call
    Cotangent()                          a cotangent placeholder (an extension's grad
                                         transform, traced on its own)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True, slots=True)
class ArgLeaf:
    """The flat user-argument leaf ``index``."""

    index: int


@dataclass(frozen=True, slots=True)
class ArgPath:
    """A tensor inside the argument object at flat leaf ``leaf``, reached by ``steps``
    (`thunder_ir.runtime.pystate.resolve`)."""

    leaf: int
    steps: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class StateEntry:
    """A module parameter or buffer, by its qualified name."""

    name: str


@dataclass(frozen=True, slots=True, eq=False)
class Captured:
    """A tensor known when the program is built: captured from user code, or a parameter
    or buffer bound to its entry (compared by identity)."""

    tensor: torch.Tensor


@dataclass(frozen=True, slots=True, eq=False)
class ModuleAttr:
    """An ``int`` attribute of a module of the jitted tree (``self.step``) that changes
    between calls: a symbolic number of the program, read from the module on each call
    (`thunder_ir.runtime.symbolic_attrs`). Compared by identity."""

    module: Any
    name: str


@dataclass(frozen=True, slots=True)
class Field:
    """Attribute ``name`` of a plain object a module attribute holds, as the entry of a
    `ModuleTensor` (``self.state.h``); shown as ``.name``, the text that reads it."""

    name: str

    def __repr__(self) -> str:
        return f".{self.name}"


@dataclass(frozen=True, slots=True, eq=False)
class ModuleTensor:
    """A tensor that ``forward`` rebinds on every call (``self.avg = self.avg * 0.9 + ...``,
    a recurrent state): buffer ``name`` of ``module`` (``buffer``) or its plain attribute,
    read from the module on each call and keyed by its metadata, not its identity
    (`thunder_ir.runtime.rebound`). Compared by identity."""

    module: Any
    name: str
    buffer: bool
    item: tuple[Any, ...] = ()
    """An entry of the dict or list the attribute holds (``self.cache["k"]``,
    ``self.states[0]``): ``(key,)``, or a field of the plain object it holds
    (``self.state.h``): ``(Field("h"),)``; ``()`` for the attribute itself."""

    def read(self) -> Any:
        """The tensor the module holds there now."""
        d = self.module.__dict__
        v = d["_buffers"][self.name] if self.buffer else d[self.name]
        if not self.item:
            return v
        k = self.item[0]
        return v.__dict__[k.name] if type(k) is Field else v[k]


@dataclass(frozen=True, slots=True)
class Cotangent:
    """A cotangent placeholder of an extension's grad transform traced on its own."""


Origin = ArgLeaf | ArgPath | StateEntry | Captured | ModuleAttr | ModuleTensor | Cotangent
"""Where a program argument comes from."""

__all__ = ["ArgLeaf", "ArgPath", "Captured", "Cotangent", "Field", "ModuleAttr", "ModuleTensor",
           "Origin",
           "StateEntry"]
