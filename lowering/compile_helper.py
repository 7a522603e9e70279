"""A helper process that compiles tiered regions with Inductor (`thunder_ir.lowering.tiered`).

Why a process of its own: tracing a region to an ATen graph (``make_fx``) and Inductor's
compile change process-wide state while they run. ``make_fx`` sets torch.fx's "FX tracing"
flag, which Dynamo reads: a ``torch.compile``'d function called on another thread at that
moment raises ("Detected that you are using FX to symbolically trace a dynamo-optimized
function"). Inductor's Python also holds the GIL for seconds, which slows the training
loop beside it. Here the whole compile runs in another interpreter; the training process
only loads the finished kernel (the output code, as Inductor loads a cached graph: no
tracing).

What crosses the pipe (`Request`): the region's Python function as printed source, the op
classes and runtime modules it calls, its inputs' metadata and the parent's cache
directories. The helper compiles it exactly as a thread of the parent would
(`inductor_executor.compile_graph`: ``make_fx``, then Inductor's ``compile_fx_inner``)
and replies with what Inductor's own graph cache keeps to load the result (`Compiled`:
the output code's file and key, its constants, the inputs to realign), or the error's
text. One request at a time, in order; the helper runs at a lower priority than its
parent (`NICENESS`).

Run as ``python -m thunder_ir.lowering.compile_helper PARENT_PID``: requests and replies
are pickled on stdin and stdout. The process ends when stdin closes, and when its parent
dies (``PR_SET_PDEATHSIG`` on Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import pickle
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import torch


class TensorMeta(NamedTuple):
    """What a kernel is specialized to: one tensor input's layout, dtype and device."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class Request:
    """One region to compile.

    Attributes:
        name: the kernel's name (for messages).
        source: the region's function as printed Python (`codegen.compile_program`).
        function: the name the source defines.
        classes: ``module:qualname`` of each op class the source calls (bound first).
        modules: the modules that register the runtime functions it calls (imported
            first).
        inputs: each input's `TensorMeta`, or the value itself.
        single: the region has one output (the kernel returns it, not a tuple).
        options: Inductor options, if any.
        path: where to write the output code.
        env: the parent's `CACHE_ENV` variables when it asked (those it had not set are
            absent): the helper compiles into the caches the parent would.
        symbols: a region of a symbolic program: its symbols' values and guards (its
            ``inputs`` are then `symbolic_regions.SymbolicMeta`), compiled for every size.
    """

    name: str
    source: str
    function: str
    classes: tuple[str, ...]
    modules: tuple[str, ...]
    inputs: tuple[Any, ...]
    single: bool
    options: dict[str, Any] | None
    path: str
    env: tuple[tuple[str, str], ...] = ()
    symbols: Any = None


CACHE_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
"""Environment variables a compile reads when it runs, which the parent may change after
starting the helper (``torch._inductor.utils.fresh_cache`` does)."""


def cache_env() -> tuple[tuple[str, str], ...]:
    """This process's `CACHE_ENV` variables that are set, for a `Request`."""
    return tuple((k, os.environ[k]) for k in CACHE_ENV if k in os.environ)


def op_class_names(classes: Any) -> tuple[str, ...]:
    """``module:qualname`` of each class, for a `Request`."""
    return tuple(sorted({f"{c.__module__}:{c.__qualname__}" for c in classes}))


def _function(req: Request) -> Any:
    """The region's function, rebuilt from its source in this process."""
    from thunder_ir.lowering.codegen import bind_op
    from thunder_ir.runtime.python_printer import load_python

    for module in req.modules:
        importlib.import_module(module)
    for spec in req.classes:
        module, _, qualname = spec.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        bind_op(obj)
    fn = load_python(req.source, req.function, {"__name__": "thunder_ir_generated"})
    return getattr(fn, "__wrapped__", fn)  # without the no_grad wrapper: set below


@dataclass(frozen=True)
class Compiled:
    """A compiled region, as the parent loads it (what Inductor's graph cache keeps of a
    ``CompiledFxGraph``).

    Attributes:
        path: the output code (Python; its C++ kernels are in the shared Inductor cache).
        key: its cache key (the module's name).
        linemap: its line map (for tracebacks).
        attrs: the graph's constants, set on the module.
        realign: inputs whose alignment the call checks (as Inductor's ``post_compile``).
        mutated: inputs the graph writes.
        checks: a symbolic region's decisions on sizes beyond its program's guards
            (`symbolic_regions.guarded`).
        cache_hit: Inductor found the graph in its FX graph cache (`fx_cache_hits`).
    """

    path: str
    key: str
    linemap: list[Any]
    attrs: dict[str, Any]
    realign: list[int]
    mutated: list[int]
    checks: tuple[str, ...] = ()
    cache_hit: bool = False


def fx_cache_hits() -> int:
    """How many graphs Inductor has found in its FX graph cache in this process (its
    ``fxgraph_cache_hit`` counter; 0 before Inductor is loaded)."""
    if "torch._dynamo.utils" not in sys.modules:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"])


def compile_request(req: Request) -> Compiled:
    """Traces the region on fake inputs of its metadata and compiles it with Inductor, as
    a thread of the parent would (`inductor_executor.compile_graph`); writes the output
    code to ``req.path``."""
    from thunder_ir.lowering.inductor_executor import compile_graph, fake_from_metadata

    given = dict(req.env)
    for key in CACHE_ENV:
        if key in given:
            os.environ[key] = given[key]
        else:
            os.environ.pop(key, None)
    options = req.options
    if req.symbols is not None:
        from thunder_ir.lowering.symbolic_regions import symbolic_fakes, symbolic_options

        mode, fake, new_guards = symbolic_fakes(req.inputs, req.symbols)
        options = symbolic_options(options)
    else:
        mode, fake = fake_from_metadata(list(req.inputs))
        new_guards = tuple
    hits = fx_cache_hits()
    graph = compile_graph(_function(req), mode, fake, req.single, options)
    with open(req.path, "w") as f:
        f.write(graph.source_code)
    realign = list(graph.inputs_to_check)
    mutated = sorted(graph.mutated_input_idxs)
    if getattr(graph, "_defers_input_alignment", False):  # the code copies the others
        realign = [i for i in realign if i in mutated]
    return Compiled(req.path, graph.cache_key, list(graph.cache_linemap or []),
                    {**(graph.constants or {}),
                     **getattr(graph, "opaque_value_type_classes", {})},
                    realign, mutated, new_guards(), fx_cache_hits() > hits)


def _die_with_parent(parent: int | None) -> None:
    """Asks Linux to end this process when its parent ends (a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:  # it ended before the call above
        os._exit(0)


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Compiles each request read from ``inp`` and writes ``(path, compiled, error)`` to
    ``out``: the request's path, and its `Compiled`, or None and the error's text."""
    while True:
        try:
            req = pickle.load(inp)
        except EOFError:
            return
        try:
            reply: tuple[str, Compiled | None, str | None] = (req.path, compile_request(req),
                                                              None)
        except Exception as e:  # the parent keeps the unfused function
            tb = traceback.format_exception_only(type(e), e)
            reply = (req.path, None, "".join(tb).strip())
        pickle.dump(reply, out)
        out.flush()


NICENESS = 10
"""The helper's scheduling priority below its parent's: where the training loop keeps
every core busy, the compile waits for idle time instead of slowing the loop."""


def main() -> None:
    """The helper's entry point: serve requests on stdin and stdout. Its one argument, if
    given, is the parent's process id."""
    _die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else None)
    with contextlib.suppress(OSError, AttributeError):
        os.nice(NICENESS)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything a compile prints must not corrupt the replies
    with contextlib.suppress(Exception):  # what every compile imports, before the first
        # request: a helper started ahead (`tier_up_memory.prestart`) is ready sooner
        importlib.import_module("torch._inductor.compile_fx")
        importlib.import_module("thunder_ir.lowering.inductor_executor")
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":  # run the module's own copy: requests pickle its classes
    from thunder_ir.lowering import compile_helper

    compile_helper.main()


__all__ = ["CACHE_ENV", "Compiled", "Request", "TensorMeta", "cache_env", "compile_request",
           "fx_cache_hits", "op_class_names", "serve"]
