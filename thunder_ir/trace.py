"""`Trace`: one snapshot of a program, printing as Python with the lowering's printer
(what ``jit`` records and `thunder_ir.last_traces` returns; see
`thunder_ir.passes.trace`, whose traces print as MLIR unless given a printer)."""

from __future__ import annotations

from dataclasses import dataclass

from thunder_ir.lowering.python_printer import print_python
from thunder_ir.passes.trace import Printer
from thunder_ir.passes.trace import Trace as _Trace


@dataclass(repr=False)
class Trace(_Trace):
    """A program snapshot that prints as the Python source of a trace."""

    printer: Printer | None = print_python


__all__ = ["Trace"]
