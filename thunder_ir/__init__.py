"""thunder_ir: a deep-learning compiler for PyTorch on typed SSA IR built on xDSL.

``thunder_ir.jit(model)`` traces a PyTorch program into IR in four dialects (``ltorch``,
``prims``, ``torch``, ``fusion``), transforms it with rewrite passes and runs generated
Python. ``last_traces`` shows every step as Python source.
"""

from thunder_ir import extend
from thunder_ir.api import (
    ThunderModule,
    cache_hits,
    cache_misses,
    jit,
    last_backward_traces,
    last_prologue_traces,
    last_traces,
    transform,
)
from thunder_ir.extend import TensorProxy
from thunder_ir.lowering.executors import get_all_executors, get_default_executors
from thunder_ir.trace import Trace
from thunder_ir.tracing import DataDependentError, ThunderTraceError

__version__ = "0.1.0"

__all__ = [
    "DataDependentError",
    "TensorProxy",
    "ThunderModule",
    "ThunderTraceError",
    "Trace",
    "cache_hits",
    "cache_misses",
    "extend",
    "get_all_executors",
    "get_default_executors",
    "jit",
    "last_backward_traces",
    "last_prologue_traces",
    "last_traces",
    "transform",
]
