"""`Trace`: one snapshot of a program, as the pass that made it left it.

``str(trace)`` prints the program as Python source in the reference system's style
(``t3 = prims.mul(t1, t2)  # t3: "cpu f32[8, 784]"``); ``trace.mlir()`` prints MLIR text
that parses back to the same IR; ``trace.ir`` is the xDSL module itself.

The pipeline records traces (`thunder_ir.passes.pipeline`). The Python printer belongs to
the lowering, so a trace is given the printer it prints with (``printer``; without one
it prints MLIR): `thunder_ir.trace.Trace`, what ``jit`` records, has the lowering's.
Nothing is installed at import time, so how a trace prints never depends on what
happened to be imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from thunder_ir.dialects.location import print_mlir
from thunder_ir.passes.snapshot import FrozenIR

Printer = Callable[..., str]
"""``print(module, header=..., free_after_last_use=...) -> source``."""


class _IR:
    """``Trace.ir``: given a module or a `FrozenIR`; read, always the module (a frozen
    record is thawed on the first read and kept)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, objtype: type | None = None) -> ModuleOp:
        if obj is None:  # no default: the field is required
            raise AttributeError(self.slot)
        ir = obj.__dict__[self.slot]
        if isinstance(ir, FrozenIR):
            ir = obj.__dict__[self.slot] = ir.thaw()
        return ir

    def __set__(self, obj: Any, value: ModuleOp | FrozenIR) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class Trace:
    """A program snapshot: its IR, the pass that produced it and how long that took.

    ``ir`` may be given as a `thunder_ir.passes.snapshot.FrozenIR` (what the pipeline
    records): it is built on the first read of ``trace.ir``."""

    ir: _IR = _IR()
    pass_name: str = "trace"
    duration_s: float = 0.0
    final: bool = False  # the execution trace: prints with `del` after last uses
    source: str | None = None  # for the execution trace: the exact source that runs
    printer: Printer | None = None  # how it prints as Python (None: as MLIR)
    function: str | None = None  # the one function it shows (None: the whole module)

    def mlir(self) -> str:
        """MLIR text of the program, with the ops' source locations (parses back with
        `thunder_ir.dialects.program.parse`)."""
        return print_mlir(self.ir)

    def python(self) -> str:
        """The program as Python source (what ``str(trace)`` returns)."""
        if self.source is not None:
            return self.source
        if self.printer is None:
            return self.mlir()
        header = (f"# Constructed by {self.pass_name} "
                  f"(took {self.duration_s * 1000:.0f} milliseconds)")
        return self.printer(self.ir, header=header, free_after_last_use=self.final)

    def __str__(self) -> str:
        return self.python()

    def __repr__(self) -> str:
        return self.python()


__all__ = ["Printer", "Trace"]
