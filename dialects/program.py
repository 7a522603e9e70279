"""Programs: how a traced computation sits in IR, and the parsing context.

A program is a ``builtin.module`` of named ``func.func``s: `FORWARD` (the traced function;
in training the forward that also returns the residuals), `BACKWARD` in training, and the
cache key's `PROLOGUE`. Function arguments and op results carry name hints (``%x``,
``%t_fc_1_weight``) that both the MLIR and the Python printers use. ``func.return`` lists
the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.ir import Attribute, Block, Region, SSAValue

from thunder_ir.dialects.base import Emitter

FORWARD = "forward"
"""The program's forward function: the traced function (inference), or in training the
forward that returns its outputs, then the residuals the backward reads."""
BACKWARD = "backward"
"""The training program's backward function."""
PROLOGUE = "prologue"
"""The cache key's function (``guard`` ops): the last function of a compiled program, which
no pass transforms (`program_functions` leaves it out)."""


class Program:
    """A module with one function under construction. ``emitter`` appends to its body."""

    def __init__(self, name: str, arg_types: Sequence[Attribute],
                 arg_names: Sequence[str | None] | None = None) -> None:
        self.block = Block(arg_types=list(arg_types))
        for a, n in zip(self.block.args, arg_names or [None] * len(arg_types)):
            if n:
                a.name_hint = n
        self.name = name
        self.emitter = Emitter(self.block.add_op)

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.block.args)

    def finish(self, outputs: Sequence[SSAValue]) -> ModuleOp:
        """Adds ``func.return`` and wraps the function into a module."""
        self.block.add_op(func.ReturnOp(*outputs))
        fn = func.FuncOp(self.name, (self.block.arg_types, [o.type for o in outputs]),
                         Region(self.block))
        return ModuleOp([fn])


def main_function(module: ModuleOp) -> func.FuncOp:
    """The program's function (the first ``func.func`` of the module)."""
    for op in module.ops:
        if isinstance(op, func.FuncOp):
            return op
    raise ValueError("module holds no func.func")


def program_functions(module: ModuleOp) -> list[func.FuncOp]:
    """The functions passes transform and code generation compiles: every ``func.func`` of
    the module but `PROLOGUE`."""
    return [op for op in module.ops if isinstance(op, func.FuncOp)
            and op.sym_name.data != PROLOGUE]


def prologue_function(module: ModuleOp) -> func.FuncOp | None:
    """The module's `PROLOGUE` function, or None."""
    last = module.body.block.last_op
    if isinstance(last, func.FuncOp) and last.sym_name.data == PROLOGUE:
        return last
    return next((op for op in module.ops if isinstance(op, func.FuncOp)
                 and op.sym_name.data == PROLOGUE), None)


def context() -> Context:
    """A context with every thunder_ir dialect loaded (for parsing)."""
    from thunder_ir.dialects.autograd import Autograd
    from thunder_ir.dialects.dist import Dist
    from thunder_ir.dialects.fusion import Fusion
    from thunder_ir.dialects.guard import Guard
    from thunder_ir.dialects.ltorch import Ltorch
    from thunder_ir.dialects.prims import Prims
    from thunder_ir.dialects.quant import Quant
    from thunder_ir.dialects.torch import Torch

    ctx = Context()
    for d in (Builtin, func.Func, Prims, Ltorch, Torch, Fusion, Autograd, Guard, Dist, Quant):
        ctx.load_dialect(d)
    return ctx


def parse(text: str) -> ModuleOp:
    """Parses MLIR text into a module."""
    from xdsl.parser import Parser

    return Parser(context(), text).parse_module()
