"""Inductor kernels of a symbolic program's regions, over the program's own symbols.

A fusion region of a symbolic program (`thunder_ir.dialects.symbols`: sizes such as
``s0`` and ``s0*s1``) compiles once for every size: Inductor's dynamic shapes. The fake
inputs it is traced on carry the program's symbols, not a fresh symbol per dimension:
``x: f32[s0, s1, 32]`` and ``ct: f32[s0, s1, 8]`` share ``s0`` and ``s1``, and the static
sizes stay static, as the region's types say (`plan`). So the kernel knows what the
program knows (two sizes are one symbol; 32 is 32), the decisions a trace would
otherwise take on this call's values (``Ne(Mod(s21, s26*s49), 0)`` for a reshape of
unrelated symbols) are not taken, and the hidden sizes are constants of the C++ loops.

The program's own shape guards over those symbols are evaluated first in the compile's
``ShapeEnv`` (`symbolic_fakes`), so that what they imply (a range, an equality) is known
there. A guard that the compile still records beyond them is a decision on this call's
sizes that the program does not check: its text comes back with the kernel
(`compile_helper.Compiled.checks`), and the kernel runs only on calls where it holds,
another kernel otherwise, compiled at the first such call (`guarded`: Inductor's C++
code generation decides per reduction whether its length exceeds 4,096, so a Llama
backward compiled at a few hundred tokens checks ``s0*s1 <= 4096``, and a call of more
than 4,096 tokens gets the kernel of the other decision), at most `KERNELS_PER_LAYOUT` per input
layout; past them, the region's unfused function.

Everything here is metadata (`SymbolicCall`, `SymbolicMeta`: size texts, the symbols'
values on the call, each input's layout), so the compile helper process can compile
these regions too (`thunder_ir.lowering.compile_helper`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_SYMBOL = re.compile(r"\b([a-z])(\d+)\b")

KERNELS_PER_LAYOUT = 3
"""Kernels a symbolic region compiles for one layout of its inputs, each for the calls
where the earlier ones' size decisions fail (`guarded`); past them it runs unfused."""


@dataclass(frozen=True)
class SymbolicMeta:
    """One tensor input of a symbolic region, as metadata.

    Attributes:
        sizes: each size: an ``int``, or the program's text over its symbols (``s0*s1``).
        layout: None: contiguous; else the dimensions from outermost to innermost of a
            dense tensor (``torch.empty_permuted``'s order), or, as ``("strides", ...)``,
            strides that no order of the sizes gives (the kernel is then this call's).
        dtype: the element type.
        device: the device.
    """

    sizes: tuple[int | str, ...]
    layout: tuple[Any, ...] | None
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class SymbolicCall:
    """What a symbolic region's compile needs besides its inputs' `SymbolicMeta`.

    Attributes:
        hints: each symbol's value on the call the kernel is compiled at, by name.
        guards: the program's shape guards over those symbols (Python text), evaluated
            before the trace (`symbolic_fakes`).
    """

    hints: tuple[tuple[str, int], ...]
    guards: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """How a region's inputs carry the program's symbols (made when the region is
    lowered, inside its compilation: `plan`).

    Attributes:
        sizes: each input's sizes (int or text), None for a non-tensor input.
        at: each symbol's first place as a whole size: ``name -> (input, dim)``.
        guards: the program's guards over these symbols only.
    """

    sizes: tuple[tuple[int | str, ...] | None, ...]
    at: dict[str, tuple[int, int]]
    guards: tuple[str, ...]

    def key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """A compiled kernel's variant: each tensor input's layout (`layout_of`); the
        sizes are the program's symbols, which the shape guard keeps at 2 or more."""
        return tuple(layout_of(a) if isinstance(a, torch.Tensor) else None for a in args)

    def call(self, args: Sequence[Any]) -> tuple[tuple[Any, ...], SymbolicCall]:
        """The metadata of a compile at this call: the inputs' and the symbols'."""
        meta = tuple(SymbolicMeta(s, layout_of(a), a.dtype, a.device)
                     if s is not None and isinstance(a, torch.Tensor) else a
                     for s, a in zip(self.sizes, args, strict=True))
        hints = tuple((name, int(args[i].shape[d])) for name, (i, d) in self.at.items())
        return meta, SymbolicCall(hints, self.guards)


def layout_of(t: torch.Tensor) -> tuple[Any, ...] | None:
    """`SymbolicMeta.layout` of a tensor: None if contiguous; its dimensions from the
    outermost to the innermost if it is dense in some order; else its strides."""
    if t.is_contiguous():
        return None
    sizes, strides = t.shape, t.stride()
    order = sorted(range(t.dim()), key=lambda d: (-strides[d], d))
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return ("strides", *strides)
        expected *= sizes[d]
    return tuple(order)


def plan(operand_types: Sequence[Any], table: Any) -> Plan | None:
    """The `Plan` of a region whose operands have these types (`TensorType`, or another
    for a non-tensor input), inside the compilation of ``table`` (its `SymbolTable`).
    None where a size is over a symbol that is no whole size of an input (an unbacked
    count, a product only), or no table is open: the region then compiles with a
    symbol per dimension."""
    from thunder_ir.dialects.symbols import SymExprAttr
    from thunder_ir.dialects.types import TensorType

    if table is None:
        return None
    sizes: list[tuple[int | str, ...] | None] = []
    at: dict[str, tuple[int, int]] = {}
    used: set[str] = set()
    for i, t in enumerate(operand_types):
        if not isinstance(t, TensorType):
            sizes.append(None)
            continue
        dims: list[int | str] = []
        for d, attr in enumerate(t.shape.data):
            if isinstance(attr, SymExprAttr):
                text = attr.text
                dims.append(text)
                used.update(m.group(0) for m in _SYMBOL.finditer(text))
                if _SYMBOL.fullmatch(text):
                    at.setdefault(text, (i, d))
            else:
                dims.append(attr.data)
        sizes.append(tuple(dims))
    if not used or any(not name.startswith("s") or name not in at for name in used):
        return None
    guards = tuple(g for g in table.guards()
                   if {m.group(0) for m in _SYMBOL.finditer(g)} <= used)
    return Plan(tuple(sizes), dict(sorted(at.items())), guards)


def symbolic_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Inductor's options for a symbolic region's compile: ``options`` with its FX graph
    cache off. That cache keeps a graph's guards over its ``SymInt`` inputs only; a
    region's graph takes tensors, so a cached kernel would come back without the checks
    its compile recorded and serve sizes on the other side of its decisions. (The C++ of
    its kernels is still found in Inductor's code cache.)"""
    return {**(options or {}), "fx_graph_cache": False}


def symbolic_fakes(inputs: Sequence[Any], call: SymbolicCall
                   ) -> tuple[Any, list[Any], Callable[[], tuple[str, ...]]]:
    """A fake mode and fake tensors of ``inputs`` (`SymbolicMeta`, or values) whose sizes
    are the call's symbols, in a ``ShapeEnv`` of their own where the program's guards
    hold, and ``new_guards()``: the guards recorded there since (as text over the
    program's symbol names), after the compile."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from thunder_ir.dialects.symbols import SymbolSource, SymbolTable
    from thunder_ir.runtime.dynamic import symbolic_value

    table = SymbolTable()
    scope: dict[str, Any] = {}
    rename: dict[str, str] = {}
    for k, (name, hint) in enumerate(call.hints):
        value = table.size(hint, SymbolSource(k, 0))
        scope[name] = value
        rename[str(table.text(value))] = name
    for guard in call.guards:  # what the program knows, known here (a guard that
        # does not evaluate is not known: a decision it implies is checked on each call)
        with contextlib.suppress(Exception):
            bool(symbolic_value(guard)(scope))  # (the program's own printed guards)
    seeded = set(table.guards())
    mode = FakeTensorMode(shape_env=table.env)
    fake: list[Any] = []
    with mode:
        for m in inputs:
            if not isinstance(m, SymbolicMeta):
                fake.append(m)
                continue
            sizes = [s if isinstance(s, int) else symbolic_value(s)(scope) for s in m.sizes]
            if m.layout is None:
                t = torch.empty(sizes, dtype=m.dtype, device=m.device)
            elif m.layout[0] == "strides":
                t = torch.empty_strided(sizes, m.layout[1:], dtype=m.dtype, device=m.device)
            else:
                t = torch.empty_permuted(sizes, m.layout, dtype=m.dtype, device=m.device)
            fake.append(t)

    def new_guards() -> tuple[str, ...]:
        return tuple(_SYMBOL.sub(lambda g: rename.get(g.group(0), g.group(0)), text)
                     for text in table.guards() if text not in seeded)

    return mode, fake, new_guards


def guarded(kernel: Callable[..., Any], fn: Callable[..., Any], at: dict[str, tuple[int, int]],
            checks: Sequence[str]) -> Callable[..., Any]:
    """``kernel``, which a compile specialized by ``checks`` (Python text over the
    program's symbols, which ``at`` locates in the inputs): on a call where one does not
    hold, ``fn`` runs instead (the region's unfused function, or what compiles another
    kernel for such calls). ``kernel`` itself without checks."""
    if not checks:
        return kernel
    from thunder_ir.runtime.python_printer import load_python

    reads = "".join(f"  {name} = A[{i}].shape[{d}]\n" for name, (i, d) in at.items())
    source = (f"def holds(A):\n{reads}  return "
              + " and ".join(f"({c})" for c in checks) + "\n")
    holds = load_python(source, "holds", {})

    def checked(*args: Any) -> Any:
        return kernel(*args) if holds(args) else fn(*args)

    return checked


__all__ = ["KERNELS_PER_LAYOUT", "Plan", "SymbolicCall", "SymbolicMeta", "guarded",
           "layout_of", "plan", "symbolic_fakes", "symbolic_options"]
