"""The argument gather: a call's flat argument leaves -> the program's arguments.

Each program argument has an origin (`thunder_ir.runtime.origins`); the gather reads each
from the leaves, or binds it once when the program is built, so a call does no per-call
branching and does not collect the module's state::

    def gather(L):
      return (L[0], L[1].h, s2, c3, m4.step,)

``L[i]`` is leaf ``i`` (`ArgLeaf`), ``L[1].h`` a tensor inside an argument object
(`ArgPath`, `thunder_ir.runtime.pystate.path_expr`), ``s2`` a parameter or buffer
(`StateEntry`) and ``c3`` a captured tensor (`Captured`), bound as globals, and
``m4.step`` a number the module keeps (`ModuleAttr`: the module bound, its attribute read
on each call), as is a tensor ``forward`` rebinds (`ModuleTensor`: ``m5._buffers['avg']``
for a buffer, ``m5.h`` for a plain attribute). It has no IR
(its origins are not values of the program); it is a `PyFunction` of the one printer
(`thunder_ir.runtime.python_printer`), rendered and executed as every generated function is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from thunder_ir.runtime.origins import (
    ArgLeaf,
    ArgPath,
    Captured,
    Field,
    ModuleAttr,
    ModuleTensor,
    Origin,
    StateEntry,
)
from thunder_ir.runtime.pystate import path_expr
from thunder_ir.runtime.python_printer import PyFunction, load_python, render, tuple_expr

LEAVES = "L"
"""The gather's parameter: the call's flat leaves."""


def tensor_steps(kind: ModuleTensor) -> tuple[tuple[str, str], ...]:
    """Where a `ModuleTensor` lies in its module: ``_buffers[name]`` for a buffer (not
    through ``nn.Module.__getattr__``), the attribute ``name`` otherwise, then the entry
    of the dict or list it holds, or the field of the plain object it holds (``item``)."""
    if kind.buffer:
        return (("attr", "_buffers"), ("item", kind.name))
    return (("attr", kind.name), *(("attr", k.name) if type(k) is Field else ("item", k)
                                   for k in kind.item))


def gather_function(origins: Sequence[Origin], state: Mapping[str, torch.Tensor]
                    ) -> tuple[PyFunction, dict[str, Any]]:
    """The gather of a program whose arguments come from ``origins``, and the globals it
    reads (``state``: the module's parameters and buffers, by name).

    Raises:
        TypeError: an origin a call cannot gather (a cotangent placeholder).
    """
    parts: list[str] = []
    bound: dict[str, Any] = {}
    for i, kind in enumerate(origins):
        if isinstance(kind, ArgLeaf):
            parts.append(f"{LEAVES}[{kind.index}]")
        elif isinstance(kind, ArgPath):  # a tensor inside an argument object
            parts.append(path_expr(f"{LEAVES}[{kind.leaf}]", kind.steps))
        elif isinstance(kind, StateEntry):
            bound[f"s{i}"] = state[kind.name]
            parts.append(f"s{i}")
        elif isinstance(kind, Captured):
            bound[f"c{i}"] = kind.tensor
            parts.append(f"c{i}")
        elif isinstance(kind, ModuleAttr):  # a number the module keeps: read on each call
            bound[f"m{i}"] = kind.module
            parts.append(path_expr(f"m{i}", (("attr", kind.name),)))
        elif isinstance(kind, ModuleTensor):  # a tensor forward rebinds: read on each call
            bound[f"m{i}"] = kind.module
            parts.append(path_expr(f"m{i}", tensor_steps(kind)))
        else:
            raise TypeError(f"a program argument comes from {kind!r}, which a call cannot "
                            "gather")
    return PyFunction("gather", (), tuple_expr(parts), packed=LEAVES), bound


def make_gather(origins: Sequence[Origin], state: Mapping[str, torch.Tensor]
                ) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``gather(leaves) -> program arguments``, printed and executed (`gather_function`)."""
    fn, bound = gather_function(origins, state)
    return load_python(render(fn), fn.name, bound)


__all__ = ["LEAVES", "gather_function", "make_gather", "tensor_steps"]
