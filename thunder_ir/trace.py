"""`Trace`: one snapshot of a program (see `thunder_ir.passes.trace`).

Importing this module installs the lowering's Python printer, so ``str(trace)`` prints
the program as Python source.
"""

from thunder_ir.lowering.python_printer import print_python
from thunder_ir.passes.trace import PYTHON_PRINTERS, Trace

if print_python not in PYTHON_PRINTERS:
    PYTHON_PRINTERS.append(print_python)

__all__ = ["Trace"]
