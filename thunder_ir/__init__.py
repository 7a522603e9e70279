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

from typing import TYPE_CHECKING  # noqa: E402

# Every pass is registered by name on import (the lowering's as factories; no torch yet),
# so the pass registry lists them all.
from thunder_ir.lowering import pass_names as _pass_names  # noqa: E402, F401

# The public names load on first use (PEP 562), so that a tool that needs none of them
# (``thunder-ir-opt --help``) does not pay for importing torch. The first use of any of
# them composes the package as a plain import once did (`_compose`): the API, extend and
# the built-in executors, each registering what generated code calls.
_EXPORTS = {
    "DataDependentError": "thunder_ir.frontend",
    "TensorProxy": "thunder_ir.frontend",
    "ThunderTraceError": "thunder_ir.frontend",
    "ThunderModule": "thunder_ir.api",
    "cache_hits": "thunder_ir.api",
    "cache_misses": "thunder_ir.api",
    "compile_reasons": "thunder_ir.api",
    "compile_status": "thunder_ir.api",
    "examine": "thunder_ir.examination",
    "Examination": "thunder_ir.examination",
    "jit": "thunder_ir.api",
    "last_backward_traces": "thunder_ir.api",
    "last_prologue_traces": "thunder_ir.api",
    "last_traces": "thunder_ir.api",
    "transform": "thunder_ir.api",
    "mark_dynamic": "thunder_ir.runtime.dynamic",
    "get_all_executors": "thunder_ir.lowering.executors",
    "get_default_executors": "thunder_ir.lowering.executors",
    "load_builtin_executors": "thunder_ir.lowering.executors",
    "Trace": "thunder_ir.trace",
}
_SUBMODULES = frozenset({"extend", "dynamo", "api", "frontend", "trace", "pipeline", "opt",
                         "testing", "dialects", "passes", "lowering", "runtime"})


def _compose() -> None:
    """The composition root: every part that registers callees of generated code, and
    the rule tables every compile reads (decompositions, VJP rules) with the training
    runtime, so that a first call compiles without importing them.

    Once composed, one full collection of Python's cyclic GC: loading the compiler makes
    some 40,000 long-lived objects (xDSL's, the dialects' and rule tables'), and CPython
    runs a full collection of the whole process (over 100 ms beside torch) once the
    objects promoted since the last one number a quarter of those that survived it. Left
    pending, it lands in a first training step or another, by the count of what ran
    before; made here, it is part of loading, and the next one is far off."""
    global _COMPOSED
    if _COMPOSED:
        return
    import gc

    import thunder_ir.api
    import thunder_ir.extend
    import thunder_ir.runtime.autograd  # noqa: F401
    from thunder_ir.lowering.executors import load_builtin_executors
    from thunder_ir.passes.decompositions import load_rules
    from thunder_ir.passes.vjp import load_vjp_rules

    load_builtin_executors()
    load_rules()
    load_vjp_rules()
    _COMPOSED = True
    gc.collect()


_COMPOSED = False


def __getattr__(name: str) -> object:
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"thunder_ir.{name}")
    home = _EXPORTS.get(name)
    if home is None:
        raise AttributeError(f"module 'thunder_ir' has no attribute {name!r}")
    _compose()
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})


if TYPE_CHECKING:
    from thunder_ir import extend
    from thunder_ir.api import (
        ThunderModule,
        cache_hits,
        cache_misses,
        compile_reasons,
        compile_status,
        jit,
        last_backward_traces,
        last_prologue_traces,
        last_traces,
        transform,
    )
    from thunder_ir.examination import Examination, examine
    from thunder_ir.frontend import DataDependentError, TensorProxy, ThunderTraceError
    from thunder_ir.lowering.executors import (
        get_all_executors,
        get_default_executors,
        load_builtin_executors,  # noqa: F401  (a public name, not in __all__)
    )
    from thunder_ir.runtime.dynamic import mark_dynamic
    from thunder_ir.trace import Trace

__version__ = "0.1.0"

__all__ = [
    "DataDependentError",
    "TensorProxy",
    "ThunderModule",
    "ThunderTraceError",
    "Examination",
    "Trace",
    "cache_hits",
    "cache_misses",
    "compile_reasons",
    "compile_status",
    "examine",
    "extend",
    "get_all_executors",
    "get_default_executors",
    "jit",
    "last_backward_traces",
    "last_prologue_traces",
    "last_traces",
    "mark_dynamic",
    "transform",
]
