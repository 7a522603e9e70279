"""Errors of tracing, and where they point: the user's file:line.

`user_location` walks the Python stack to the innermost frame outside torch, thunder_ir's
own packages (this one included) and the standard library; every error a user can hit
names that location (`where`).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

import torch

# --------------------------------------------------------------------------- errors


class ThunderTraceError(RuntimeError):
    """A program could not be traced. The message names the user's file:line."""


class DataDependentError(ThunderTraceError):
    """User code needs a tensor's value, which is unknown while tracing.

    The message ends by pointing at the ``torch.compile`` backend, which runs such code with
    graph breaks."""

    GRAPH_BREAKS = ("Code that needs graph breaks runs as it is under "
                    "torch.compile(fn, backend=thunder_ir.dynamo.ThunderCompiler()): Dynamo "
                    "runs the data-dependent part in Python and thunder_ir compiles the graphs "
                    "around it.")

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}\n{self.GRAPH_BREAKS}")


class NeedsSymbols(DataDependentError):
    """A trace without a symbol table met an op whose result's size depends on tensor
    values (``nonzero``, ``x[mask]``): the compiler traces the call again inside a
    `thunder_ir.dialects.symbols.SymbolTable`, where that size is a new *unbacked* symbol
    (``u0``), or, where that compile fails, speculates the size (`sizes_speculated`)."""


_SPECULATE_SIZES: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "thunder_ir_speculate_sizes", default=False)


@contextlib.contextmanager
def sizes_speculated() -> Iterator[None]:
    """Data-dependent sizes met without a symbol table are speculated (their values this
    call, checked on every call) rather than raising `NeedsSymbols`: the compile after an
    unbacked-symbol compile failed."""
    token = _SPECULATE_SIZES.set(True)
    try:
        yield
    finally:
        _SPECULATE_SIZES.reset(token)


def speculating_sizes() -> bool:
    """Whether data-dependent sizes met without a symbol table are speculated."""
    return _SPECULATE_SIZES.get()


class Refused(ThunderTraceError):
    """A construct no compile of the call takes (with symbols or without): the compiler
    passes it on rather than compiling again another way."""


class UseFallback(Exception):
    """Raised by a handler that cannot express a call as its ltorch op (a tensor where the
    op takes a Python number, an argument it does not model): the tracer records the call
    as an opaque ``torch.call`` instead, which torch computes and differentiates."""


class TraceAgain(BaseException):
    """The trace learned something that changes how it traces (a custom ``Function``
    whose backward must run at run time: `thunder_ir.frontend.opaque_backward`): it
    starts over. A ``BaseException``, so that user code's ``except Exception`` between
    the point it is raised and `thunder_ir.frontend.tracer.trace_program` lets it pass."""


DATA_HINT = ("its value is not known while tracing. Keep the computation in tensors (for "
             "example torch.where instead of `if`), or compute it outside the jitted function "
             "and pass the result in as an argument.")
"""What a `DataDependentError` tells the user to do instead."""


def dtype_name(dtype: torch.dtype) -> str:
    """Eager's name of a dtype in type-promotion errors (``Float``, ``Long``)."""
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
            torch.bfloat16: "BFloat16", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat",
            torch.complex128: "ComplexDouble"}.get(dtype, str(dtype))


# --------------------------------------------------------------------------- locations

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_OUR_PACKAGES = ("thunder_ir", "thunder_ir.dialects", "thunder_ir.passes",
                 "thunder_ir.lowering", "thunder_ir.runtime")
_OUR_DIRS: tuple[str, ...] = ()
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep  # contextlib, functools
SITE = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})
_SKIP_CACHE: dict[str, bool] = {}


def _our_dirs() -> tuple[str, ...]:
    """The folders of thunder_ir's own packages (wherever they are installed) and of
    Python's standard library: frames there are not the user's."""
    global _OUR_DIRS
    if not _OUR_DIRS:
        dirs: list[str] = []
        for name in _OUR_PACKAGES:
            mod = importlib.import_module(name)
            # The package's own folder (not the checkout root that a source tree's
            # `thunder_ir.__path__` also holds: the user's files may live there).
            dirs.append(os.path.dirname(os.path.abspath(str(mod.__file__))) + os.sep)
        _OUR_DIRS = tuple(dirs)
    return _OUR_DIRS


def skip(filename: str) -> bool:
    """True for frames of torch and thunder_ir itself; user code (and other libraries,
    and code typed at a prompt or exec'd from a string) is where errors point."""
    s = _SKIP_CACHE.get(filename)
    if s is None:
        if filename.startswith("<"):  # <stdin>, <string>, <ipython-input-…>: user code
            s = filename.startswith(("<frozen", "<thunder"))
        else:
            path = os.path.abspath(filename)
            s = (path.startswith(_TORCH_DIR) or path.startswith(_our_dirs())
                 or (path.startswith(_STDLIB) and not path.startswith(SITE)))
        _SKIP_CACHE[filename] = s
    return s


def user_location() -> str:
    """``/path/to/file.py:line`` of the innermost frame in user code (outside torch and
    thunder_ir)."""
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not skip(code.co_filename):
            return f"{code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>:0"


def where(loc: str) -> str:
    """How an error names a location: the file's full path and the line."""
    return loc or "<unknown>:0"


# --------------------------------------------------------------------------- program state


__all__ = ["DATA_HINT", "DataDependentError", "NeedsSymbols", "Refused", "ThunderTraceError",
           "TraceAgain",
           "UseFallback",
           "dtype_name", "sizes_speculated", "skip", "speculating_sizes", "user_location",
           "where"]
