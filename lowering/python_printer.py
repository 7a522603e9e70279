"""The Python printer, re-exported from its home, `thunder_ir.runtime.python_printer`.

The printer lives in the runtime because the prologue (the cache key function, generated
before tracing) and the argument gather print through it as the program's functions do,
and the runtime may not import the lowering. Importers of this path keep working.
"""

from __future__ import annotations

from thunder_ir.runtime.python_printer import (
    callee_expr,
    callee_module,
    print_python,
    py_literal,
    sanitize,
)

__all__ = ["callee_expr", "callee_module", "print_python", "py_literal", "sanitize"]
