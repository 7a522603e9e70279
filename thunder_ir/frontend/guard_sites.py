"""Where a symbolic compile's guards come from: the traced op and the user's line.

A symbolic program holds for every size its shape guard admits. A guard that fixes a
varying size (``Eq(16*s0*s1, 224)``, ``s0 == 7``) makes it a program for one size, and the
call structure compiles once per length, correct but not shared. Such a guard is recorded
by torch's ``ShapeEnv`` when something makes a decision on a size: user code (``int(n)``,
``if n == 7``), or a step of thunder_ir that should not have (a layout probe that made an
``int`` of a symbolic storage offset). torch notes, with each guard, the first frame
outside torch (``SLoc.framework_loc``: thunder_ir's own step, or the user's line); `attach`
makes the table's ``ShapeEnv`` note also what was being traced then (``maybe_user_loc``):
the torch function the tracer was handling and the innermost frame of user code, so that
`thunder_ir.runtime.pins` can say which op and which line fixed a size.
"""

from __future__ import annotations

import sys
from typing import Any

from thunder_ir.dialects import symbols
from thunder_ir.dialects.symbols import SymbolTable
from thunder_ir.frontend import context, int_sizes
from thunder_ir.frontend.context import tracing_now
from thunder_ir.frontend.errors import user_location

_ATTACHED = "_thunder_ir_guard_sites"
_CONTEXT_FILE = context.__file__
"""Where the tracer's ``TraceMode._dispatch`` is (its frame holds the torch function)."""
_SYMBOLS_FILE = symbols.__file__
"""Where the table's ``ShapeEnv.evaluate_expr`` is: a frame of torch's machinery, not
the step that decided a size."""


def attach(table: SymbolTable) -> None:
    """Makes ``table``'s ``ShapeEnv`` note, with each guard recorded while a trace runs,
    the traced op and the user's line (`site`) as the guard's ``sloc.maybe_user_loc``
    (once per table; a guard recorded by a pass after tracing keeps torch's location)."""
    env = table.env
    if getattr(env, _ATTACHED, False):
        return
    from torch.fx.experimental.symbolic_shapes import SLoc

    original = env._get_sloc

    def _get_sloc(framework_loc: str | None = None) -> Any:
        sloc = original(framework_loc if framework_loc is not None else _framework_frame())
        where = site()
        return SLoc(sloc.framework_loc, where) if where else sloc

    env._get_sloc = _get_sloc  # type: ignore[method-assign]
    setattr(env, _ATTACHED, True)


def site() -> str | None:
    """``"<torch function> at <file>:<line>"`` while this thread traces user code: the
    innermost torch function the tracer handles (`traced_function`) and the innermost
    frame of user code (None outside a trace); for a guard recorded later for a line,
    that line's (`thunder_ir.frontend.int_sizes.site_for`)."""
    later = int_sizes.site_for()
    if later is not None:
        return later
    if not tracing_now():
        return None
    where = user_location()
    fn = traced_function()
    return f"{fn} at {where}" if fn else f"user code at {where}"


def _framework_frame() -> str:
    """torch's ``framework_loc`` as torch finds it (the innermost frame outside torch),
    but outside this module and the table's ``ShapeEnv`` too (a decision made by a rule of
    thunder_ir, ``float(n)`` in a VJP, names that rule's line): ``path:line in function``."""
    from torch.fx.experimental.symbolic_shapes import uninteresting_files

    skip = uninteresting_files() | {_SYMBOLS_FILE}
    f: Any = sys._getframe(2)
    while f is not None and f.f_code.co_filename in skip:
        f = f.f_back
    if f is None:
        return ""
    return f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}"


def traced_function() -> str | None:
    """The name of the innermost torch function the tracer is handling on this thread's
    stack (``torch.nn.functional.linear``, ``Tensor.__getitem__``), or None (a decision
    user code made itself: ``int(n)``)."""
    where = _CONTEXT_FILE
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "_dispatch" and code.co_filename == where:  # TraceMode's
            return _name(f.f_locals.get("func"))
        f = f.f_back
    return None


def _name(func: Any) -> str | None:
    """How a reason names a torch function: ``torch.nn.functional.linear``,
    ``Tensor.__getitem__``."""
    if func is None:
        return None
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if qual is None:
        return repr(func)
    mod = getattr(func, "__module__", None)
    if qual.startswith("_TensorBase.") or qual.startswith("TensorBase."):
        qual = "Tensor." + qual.split(".", 1)[1]
    return f"{mod}.{qual}" if mod and not qual.startswith("Tensor.") else str(qual)


__all__ = ["attach", "site", "traced_function"]
