"""Builtin ``max`` and ``min`` of symbolic sizes in user code: ``torch.sym_max`` and
``torch.sym_min``, as symbolic as the sizes they compare.

Python's ``max(a, b)`` compares its operands (``b > a``), and on ``SymInt`` operands that
comparison is a decision: the compilation's ``ShapeEnv`` records a guard on it and the
program holds for one side only. Hugging Face's ``get_mask_sizes`` computes
``max(n - 15, 0)`` for a window of 16: a generate over a prompt shorter than the window
compiled the step at 15 tokens (``n - 15 == 0`` with ``n >= 16`` still false) as a
program of its own.

While this thread traces user code of a symbolic compilation, builtin ``max`` and ``min``
called from a user frame (`thunder_ir.frontend.symbolic_numbers.from_user_code`) with two
positional operands, each an ``int`` or a ``SymInt`` and one a ``SymInt``, answer
``torch.sym_max`` / ``torch.sym_min`` of them: a ``SymInt`` whose value is eager's (the
larger / smaller of the two ints), with no decision. A later decision on it is guarded
as any decision on a size is, so the program stays eager's for every value it serves.
Every other call (iterables, ``key=``, ``default=``, floats, ``bool``s, torch's and
thunder_ir's own code, other threads, no trace) is Python's own. What differs from eager
is what differs for every symbolic size: ``type(m) is int`` is False (``isinstance(m,
int)`` is True, `thunder_ir.frontend.symbolic_numbers`), and the result is a new number,
not one of the operands (``max(a, b) is a``).
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable
from typing import Any

import torch

from thunder_ir.dialects import symbols
from thunder_ir.frontend.context import tracing_now
from thunder_ir.frontend.symbolic_numbers import from_user_code

_INTS = (int, torch.SymInt)


def _symbolic(sym: Callable[[Any, Any], Any]
              ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 2 and not kwargs:
                ta, tb = type(args[0]), type(args[1])
                if (ta is torch.SymInt or tb is torch.SymInt) and ta in _INTS \
                        and tb in _INTS and tracing_now() \
                        and torch._C._len_torch_function_stack() > 0 \
                        and symbols.current() is not None \
                        and from_user_code(sys._getframe(1).f_code.co_filename):
                    return sym(args[0], args[1])
            return original(*args, **kwargs)

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.__doc__ = original.__doc__
        wrapper.__name__ = original.__name__
        return wrapper

    return make


def swaps() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """The swaps of builtin ``max`` and ``min`` while some thread traces
    (`thunder_ir.frontend.takeover.patched`; see the module doc)."""
    return [(builtins, "max", _symbolic(torch.sym_max)),
            (builtins, "min", _symbolic(torch.sym_min))]


__all__ = ["swaps"]
