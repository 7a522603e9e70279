"""thunder_ir: a deep-learning compiler for PyTorch on typed SSA IR built on xDSL.

``thunder_ir.jit(model)`` traces a PyTorch program into IR in four dialects (``ltorch``,
``prims``, ``torch``, ``fusion``), transforms it with rewrite passes and runs generated
Python. ``last_traces`` shows every step as Python source.
"""

import os as _os

# In a source checkout the sibling packages are top-level folders (`dialects/`, `passes/`,
# `lowering/`, `runtime/`; pyproject.toml maps them to `thunder_ir.*`). When Python finds
# this folder first (run from the checkout, next to an installed copy), point the package's
# path at the checkout too, so that `thunder_ir.dialects` and the others resolve here.
_HERE = _os.path.dirname(_os.path.abspath(__file__))
_ROOT = _os.path.dirname(_HERE)
if (not _os.path.isdir(_os.path.join(_HERE, "dialects"))
        and _os.path.isfile(_os.path.join(_ROOT, "dialects", "__init__.py"))
        and _os.path.isfile(_os.path.join(_ROOT, "pyproject.toml"))):
    __path__.append(_ROOT)

from thunder_ir import extend  # noqa: E402
from thunder_ir.api import (  # noqa: E402
    ThunderModule,
    cache_hits,
    cache_misses,
    jit,
    last_backward_traces,
    last_prologue_traces,
    last_traces,
    transform,
)
from thunder_ir.frontend import (  # noqa: E402
    DataDependentError,
    TensorProxy,
    ThunderTraceError,
)
from thunder_ir.lowering.executors import (  # noqa: E402
    get_all_executors,
    get_default_executors,
    load_builtin_executors,
)
from thunder_ir.trace import Trace  # noqa: E402

load_builtin_executors()  # the composition root: executors register what they call

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
