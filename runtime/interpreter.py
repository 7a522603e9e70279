"""The reference interpreter: runs a program op by op with each op's torch reference.

It is the ground truth that decompositions and passes are tested against, not the
runtime (generated Python is). It runs every dialect: ltorch/prims ops through their
Python call (`thunder_ir.dialects.base.ThunderOp.python_call`, what generated code calls
for them too), ``torch.call`` through its callee, ``fusion.region`` through its body.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from thunder_ir.dialects.autograd import SavedAsOp
from thunder_ir.dialects.base import ThunderOp, group
from thunder_ir.dialects.fusion import RegionOp, YieldOp
from thunder_ir.dialects.program import main_function
from thunder_ir.dialects.symbols import SYMBOL_NAME, SymText
from thunder_ir.dialects.torch import CallOp
from thunder_ir.runtime.python_printer import load_python

Symbols = Mapping[str, int]
"""The values of a symbolic program's symbols in one call: ``{"s0": 7}``."""


_SIZES: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {}


def _size_function(text: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
    """``def size(s0, s1): return <text>``, printed and loaded once per expression."""
    hit = _SIZES.get(text)
    if hit is None:
        names = tuple(sorted(set(SYMBOL_NAME.findall(text)), key=lambda n: int(n[1:])))
        source = f"def size({', '.join(names)}):\n    return {text}\n"
        hit = _SIZES[text] = (load_python(source, "size", {"__builtins__": builtins}), names)
    return hit


def bind(value: Any, symbols: Symbols) -> Any:
    """A static argument with its symbolic sizes (`SymText`, ``"2*s0"``) evaluated."""
    if type(value) is SymText:
        fn, names = _size_function(str(value))
        return fn(*(symbols[n] for n in names))
    if isinstance(value, list | tuple) and any(isinstance(v, list | tuple | SymText)
                                              for v in value):
        return type(value)(bind(v, symbols) for v in value)
    return value


def run_op(op: Operation, vals: Sequence[Any], symbols: Symbols | None = None) -> list[Any]:
    """Runs one op on its operands' values; returns its results' values. ``symbols``:
    the symbols' values, for an op of a symbolic program."""
    if isinstance(op, SavedAsOp):  # a note for autodiff: computes nothing
        return []
    if isinstance(op, CallOp):
        out: Any = op.run(list(vals), None if symbols is None
                          else lambda a: bind(a, symbols))  # type: ignore[arg-type]
    elif isinstance(op, RegionOp):
        out = run_block(op.body.block, vals, symbols)
    elif isinstance(op, ThunderOp):
        grouped = group(op.operand_layout(), list(vals), op._segment_sizes())
        params = op.params()
        if symbols is not None:
            params = {k: bind(v, symbols) for k, v in params.items()}
        out = type(op).python_call()(*grouped, **params)
    else:
        raise NotImplementedError(f"the interpreter cannot run {op.name}")
    if not op.results:
        return []
    if len(op.results) == 1 and not isinstance(out, list | tuple):
        return [out]
    outs = list(out)
    if len(outs) != len(op.results):
        raise RuntimeError(f"{op.name} returned {len(outs)} values for "
                           f"{len(op.results)} results")
    return outs


def run_block(block: Block, args: Sequence[Any], symbols: Symbols | None = None
              ) -> list[Any]:
    """Runs a block on argument values; returns the values its terminator returns."""
    env: dict[SSAValue, Any] = dict(zip(block.args, args, strict=True))
    for op in block.ops:
        if isinstance(op, func.ReturnOp | YieldOp):
            return [env[v] for v in op.operands]
        env.update(zip(op.results, run_op(op, [env[v] for v in op.operands], symbols),
                       strict=True))
    raise RuntimeError("block has no terminator")


def run(module: ModuleOp, *args: Any) -> list[Any]:
    """Runs a program's function on concrete arguments; returns its outputs."""
    return run_block(main_function(module).body.block, args)
