"""Tracing: run the user's Python natively with proxies and record every torch call.

`trace_program` flattens the inputs (pytree), makes a proxy per tensor (and per parameter
and buffer of a module, in a shallow copy of the module tree: `_shadow_modules`), runs the
code under `TraceMode`, and returns a `TracedProgram`: the ``ltorch`` program plus what the
runtime needs to call it (input and output layout, write-backs).

Under `TraceMode` each torch function, tensor method and operator goes to a handler:

* a known op (see `thunder_ir.frontend.torch_map`) becomes its ``ltorch`` op;
* an unknown one becomes an opaque ``torch.call`` whose result types come from torch's meta
  kernels (`thunder_ir.frontend.fallback`), so models with ops we lack still run;
* metadata reads (``.shape``, ``.dtype``, ``.size()``…) answer directly;
* reads of data (``.item()``, ``bool(t)``…) raise `DataDependentError` naming the user's
  file:line and what to do instead.

This module imports every module that fills the handler table (`torch_map`,
`torch_map_nn`, `einsum`, `grids`, `setitem`, `repeat`, `custom_function`, `takeover`,
`backward_hooks`, `speculation`, `value_reads`, `hops`), so the table is complete
whenever a program can be traced.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import logging
import os
import random
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec

import torch
from torch.utils import _pytree as pytree
from xdsl.ir import Operation, SSAValue

from thunder_ir.dialects import symbols
from thunder_ir.dialects.autograd import FunctionOp, StopGradientOp
from thunder_ir.dialects.program import main_function
from thunder_ir.dialects.symbols import SymbolSource
from thunder_ir.dialects.torch import (
    CallOp,
    set_output_strides,
    set_symbol_args,
    set_written_outputs,
)
from thunder_ir.dialects.traits import ViewLike
from thunder_ir.dialects.types import TensorType, number_type
from thunder_ir.frontend import (
    backward_hooks,
    custom_function,
    einsum,
    grids,
    hops,
    opaque_backward,
    repeat,
    seeds,
    setitem,
    speculation,
    takeover,
    torch_map,
    torch_map_nn,
    value_reads,
)
from thunder_ir.frontend.attr_reads import AttrLog, watch_copy, watching
from thunder_ir.frontend.context import (
    TraceContext,
    TracedProgram,
    TraceMode,
    current,
    recording,
)
from thunder_ir.frontend.errors import SITE, ThunderTraceError, TraceAgain, skip
from thunder_ir.frontend.examining import tracing
from thunder_ir.frontend.guard_sites import attach as attach_guard_sites
from thunder_ir.frontend.proxy import TensorProxy, is_proxy
from thunder_ir.frontend.pystate import Recorder, contains_proxy, escaped
from thunder_ir.frontend.table import TRACING_CONTEXTS
from thunder_ir.runtime.dynamic import EVERY, symbol_reader
from thunder_ir.runtime.gather import tensor_steps
from thunder_ir.runtime.guards import MODULE_FIELDS
from thunder_ir.runtime.object_ints import paths
from thunder_ir.runtime.origins import (
    ArgLeaf,
    ArgPath,
    Captured,
    Field,
    ModuleAttr,
    ModuleTensor,
    Origin,
    StateEntry,
)
from thunder_ir.runtime.pystate import Action, path_text, plain_object
from thunder_ir.runtime.rebound import ReboundTensor
from thunder_ir.runtime.symbolic_attrs import SymbolicAttr
from thunder_ir.runtime.writes import JOIN, PLAIN, QUIET, with_bumps

HANDLER_MODULES = (torch_map, torch_map_nn, einsum, grids, setitem, repeat, custom_function,
                   opaque_backward, takeover, seeds, backward_hooks, speculation, value_reads,
                   hops)
"""The modules whose import fills `thunder_ir.frontend.table.HANDLERS`."""

def arg_names(fn: Callable[..., Any], n_args: int, kwargs: dict[str, Any]) -> list[str]:
    try:
        sig = inspect.signature(fn)
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_POSITIONAL),
                   "args")
    except (TypeError, ValueError):
        names, var = [], "args"
    out = [names[i] if i < len(names) else f"{var}{i - len(names)}" for i in range(n_args)]
    return out + list(kwargs)


def _shadow_modules(root: torch.nn.Module, proxies: dict[int, TensorProxy],
                    rec: Recorder | None = None,
                    overrides: Mapping[int, dict[str, Any]] | None = None,
                    watch: Mapping[int, frozenset[str]] | None = None,
                    log: AttrLog | None = None
                    ) -> tuple[torch.nn.Module, dict[int, torch.nn.Module],
                               dict[int, torch.nn.Module]]:
    """A copy of ``root``'s module tree that tracing runs instead of the user's.

    Each module is copied shallowly (same class, its own ``__dict__``) with its parameters
    and buffers replaced by their proxies (``proxies``: by the real tensor's id, so tied
    weights stay tied) and its submodules by their copies (a module used in two places is
    copied once). Hook dicts and config objects are shared. The user's modules are never
    written: another thread calling the model eagerly while a trace runs sees its real
    parameters. What ``forward`` assigns to ``self`` while traced (a counter, a flag, a
    cache of tensors), and writes to the lists, dicts and plain objects a module holds
    (copied too, ``rec``: `thunder_ir.frontend.pystate.Recorder`), are found after the
    trace and replayed on the user's modules after every call. ``overrides``: per module
    (by id), attributes its copy holds in place of the module's own (a symbolic ``int``,
    `thunder_ir.runtime.symbolic_attrs`). ``watch``: per module (by id), plain attributes
    whose reads and writes its copy records in ``log`` (`thunder_ir.frontend.attr_reads`).
    Returns the root's copy, a map from each
    copy's id to its original (hooks called at run time get the original) and one from
    each original's id to its copy (`traced_copy`)."""
    copies: dict[int, torch.nn.Module] = {}
    originals: dict[int, torch.nn.Module] = {}

    def swap(d: dict[str, Any]) -> dict[str, Any]:
        return type(d)((k, proxies.get(id(v), v) if v is not None else None)
                       for k, v in d.items())

    def copy(m: torch.nn.Module, path: str) -> torch.nn.Module:
        c = copies.get(id(m))
        if c is not None:
            return c
        c = object.__new__(type(m))
        if watch and log is not None and id(m) in watch:
            c = watch_copy(c, type(m), watch[id(m)], log)
        d = dict(m.__dict__)
        d["_parameters"] = swap(m._parameters)
        d["_buffers"] = swap(m._buffers)
        subs = type(m._modules)()
        d["_modules"] = subs
        if rec is not None:
            for k, v in d.items():
                if k not in MODULE_FIELDS and (type(v) in (list, dict) or plain_object(v)):
                    d[k] = rec.attribute(v, f"{path}.{k}")
        if overrides and id(m) in overrides:
            d.update(overrides[id(m)])
        c.__dict__.update(d)
        copies[id(m)] = c
        originals[id(c)] = m
        if rec is not None:
            rec.module(c, m, path, MODULE_FIELDS)
        for k, sub in m._modules.items():
            subs[k] = copy(sub, f"{path}.{k}") if sub is not None else None
        return c

    return copy(root, "self"), originals, copies


def traced_copy(module: torch.nn.Module) -> torch.nn.Module:
    """What the trace running in this thread runs in place of ``module``: its copy in the
    traced module tree (`_shadow_modules`), or ``module`` itself where the traced code
    reached it another way (a global, a closure: its tensors are lifted as any captured
    tensor is)."""
    return current().reads.copies.get(id(module), module)


_USER_PSEUDO_FILES = ("<stdin>", "<string>", "<console>", "<ipython-input")


def _reads_globals_of(filename: str, namespace: dict[str, Any], model_files: set[str]
                      ) -> bool:
    """Whether the cache guards the globals that code of ``filename`` reads: the user's own
    files and prompts, and the files defining the traced modules' classes (a model from an
    installed package); not torch, thunder_ir, the standard library or the packages that
    tracing itself runs (xdsl, sympy...), nor code those libraries generate with ``exec``
    (judged by the file of the namespace it runs in)."""
    if filename in model_files:
        return True
    if filename.startswith("<"):
        if not filename.startswith(_USER_PSEUDO_FILES):
            return False
        home = namespace.get("__file__")
        if home is None:  # a prompt, or exec'd into a namespace of its own
            return namespace.get("__name__") in (None, "__main__")
        return _reads_globals_of(str(home), {}, model_files)
    return not skip(filename) and not os.path.abspath(filename).startswith(SITE)


@contextlib.contextmanager
def _global_reads_recorded(ctx: TraceContext, module: torch.nn.Module | None
                           ) -> Iterator[None]:
    """Records, per module namespace, the global names that user code run by the trace
    reads (a ``sys.settrace`` hook on calls only, this thread only): the cache guards them
    (see `thunder_ir.runtime.guards`). A tracer already installed (a debugger, coverage)
    keeps running."""
    from thunder_ir.runtime.guards import global_loads, global_stores
    from thunder_ir.runtime.pystate import MISSING

    model_files: set[str] = set()
    if module is not None:
        for m in module.modules():
            code = getattr(type(m).forward, "__code__", None)
            if code is not None and not skip(code.co_filename):
                model_files.add(code.co_filename)
    reads, writes = ctx.reads.global_reads, ctx.reads.global_writes
    seen: set[Any] = set()
    before = sys.gettrace()

    def trace_calls(frame: Any, event: Any, arg: Any) -> Any:
        code = frame.f_code
        if code not in seen:
            seen.add(code)
            if _reads_globals_of(code.co_filename, frame.f_globals, model_files):
                names = global_loads(code)
                g = frame.f_globals
                if names:
                    reads.setdefault(id(g), (g, set()))[1].update(names)
                for n in global_stores(code):  # before the body runs: the value before
                    writes.setdefault((id(g), n), (g, n, g.get(n, MISSING)))
        return before(frame, event, arg) if before is not None else None

    ctx.reads.settrace_hook = trace_calls
    sys.settrace(trace_calls)
    try:
        yield
    finally:
        sys.settrace(before)
        ctx.reads.settrace_hook = None


def _is_size(x: Any) -> bool:
    """``torch.Size`` stays whole in pytrees (unflattened, torch's pytree makes a tuple)."""
    return isinstance(x, torch.Size)


class _OtherThreads(logging.Filter):
    """Drops the records of one thread (see `_fake_tensor_logs_quiet`)."""

    def __init__(self, ident: int) -> None:
        super().__init__()
        self.ident = ident

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.ident


@contextlib.contextmanager
def _fake_tensor_logs_quiet() -> Iterator[None]:
    """torch's fake tensors log every meta kernel that fails at ERROR, with its traceback,
    before raising; tracing runs kernels on fake stand-ins that fail by design (a call
    with a wrong shape: thunder_ir reports eager's error at the user's line). While this
    thread traces, its records of that logger are dropped; other threads' are kept."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    quiet = _OtherThreads(threading.get_ident())
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


_MODULE_HOOKS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
                 "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_backward_hooks",
                 "_backward_pre_hooks", "_state_dict_hooks", "_state_dict_pre_hooks",
                 "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called", "_global_forward_pre_hooks",
                 "_global_backward_hooks", "_global_backward_pre_hooks",
                 "_global_buffer_registration_hooks", "_global_module_registration_hooks",
                 "_global_parameter_registration_hooks")


@contextlib.contextmanager
def hooks_kept(root: torch.nn.Module | None) -> Iterator[None]:
    """Puts every hook dict of ``root``'s module tree, and torch's global module hooks,
    back as they were if the body raises. The traced copies share the user's hook dicts
    (`_shadow_modules`), so a hook the traced code registers lands on the user's module:
    transformers installs its output-capturing hooks on the first call that asks for
    hidden states, and records that it did in an attribute (written back only after a
    compile succeeds). A compile that fails must leave the model as it was, so those hooks
    go (and any the code removed come back); after a success they stay, as eager's call
    leaves them."""
    restore = hooks_as_now(root)
    try:
        yield
    except BaseException:
        restore()
        raise


def hooks_as_now(root: torch.nn.Module | None) -> Callable[[], None]:
    """A function that puts every hook dict of ``root``'s module tree, and torch's global
    module hooks, back as they are now (`hooks_kept`; a compile that traces again undoes
    the hooks its first trace registered)."""
    from torch.nn.modules import module as nn_module

    dicts = [d for d in (getattr(nn_module, n, None) for n in _GLOBAL_HOOKS)
             if isinstance(d, dict)]
    if root is not None:
        for m in root.modules():
            dicts += [d for d in (m.__dict__.get(n) for n in _MODULE_HOOKS)
                      if isinstance(d, dict)]
    saved = [(d, list(d.items())) for d in dicts]

    def restore() -> None:
        for d, items in saved:
            if len(d) != len(items) or any(d.get(k, d) is not v for k, v in items):
                d.clear()
                d.update(items)

    return restore


@contextlib.contextmanager
def _global_state_kept() -> Iterator[None]:
    """Restores what user code may leave changed if tracing fails (grad mode, default
    dtype), and the RNG state always: tracing draws nothing, so the program's first run
    draws what eager would."""
    grad = torch.is_grad_enabled()
    dtype = torch.get_default_dtype()
    rng = torch.random.get_rng_state()
    ok = False
    try:
        yield
        ok = True
    finally:
        torch.random.set_rng_state(rng)
        if not ok:
            torch._C._set_grad_enabled(grad)
            torch.set_default_dtype(dtype)
        elif torch.is_grad_enabled() != grad:
            torch._C._set_grad_enabled(grad)


_P = ParamSpec("_P")


def _traced_again(trace: Callable[_P, TracedProgram]) -> Callable[_P, TracedProgram]:
    """``trace``, again where the trace learned something that changes how it traces
    (`TraceAgain`: a custom ``Function`` whose backward runs at run time; it starts over
    with nothing of the attempt kept)."""

    @functools.wraps(trace)
    def again(*args: _P.args, **kwargs: _P.kwargs) -> TracedProgram:
        while True:
            try:
                return trace(*args, **kwargs)
            except TraceAgain:
                continue

    return again


@_traced_again
def trace_program(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any],
                  module: torch.nn.Module | None = None,
                  state: dict[str, torch.Tensor] | None = None,
                  method: Callable[..., Any] | None = None,
                  unshard: Callable[[TraceContext, dict[str, TensorProxy]],
                                    dict[str, TensorProxy]] | None = None,
                  dynamic: Mapping[int, tuple[int, ...]] | None = None,
                  attrs: Sequence[SymbolicAttr] = (),
                  rebound: Sequence[tuple[ReboundTensor, torch.Tensor]] = (),
                  watch: Mapping[int, frozenset[str]] | None = None
                  ) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (or ``module`` called, with ``state``; or its
    ``method``, a function of its class, on it) into IR.

    ``unshard(ctx, inputs)``: what the module's code sees of the state entries whose
    program inputs are ``inputs`` (by name), where it is not the input itself (a sharded
    parameter: its full value, gathered in the trace; `thunder_ir.distributed.fsdp`).

    ``dynamic``: flat argument leaf -> its dimensions traced as symbols (an ``int`` leaf:
    ``()``, the value itself), of the current `thunder_ir.dialects.symbols.SymbolTable`.
    ``attrs``: ``int`` attributes of ``module``'s tree that stand for the leaves after the
    call's own (`thunder_ir.runtime.symbolic_attrs`): those ``dynamic`` names are symbolic
    numbers the module's copies hold, program inputs read from the module on each call.
    ``rebound``: the buffers and tensor attributes of ``module``'s tree that ``forward``
    rebinds on every call, with their tensors now (`thunder_ir.runtime.rebound`): program
    inputs read from the module on each call, which the module's copies hold as proxies
    (``state`` leaves the buffers among them out). ``watch``: per module of the tree (by
    id), plain attributes the trace finds out whether it reads before writing them
    (`thunder_ir.frontend.attr_reads`: the program's ``attr_reads``)."""
    ctx = TraceContext()
    compiling = symbols.current()
    if compiling is not None:  # decisions on unbacked sizes: speculated while it traces
        compiling.on_data_decision(speculation.decide)
    table = symbols.current() if dynamic else None
    if table is not None:  # its guards say which op and line made them (a size fixed)
        attach_guard_sites(table)
    rec = Recorder(ctx)
    log = AttrLog()
    names = arg_names(types.MethodType(method, module) if method is not None and module
                      is not None else module.forward if module is not None else fn,
                      len(args), kwargs)
    top = [*args, *kwargs.values()]
    proxied_top = []
    symbol_args: dict[str, int] = {}  # a symbolic int argument's symbol -> its program input
    leaf_index = 0
    by_storage: dict[int, tuple[torch.Tensor, TensorProxy, str]] = {}
    for top_index, (name, value) in enumerate(zip(names, top)):
        leaves, spec = pytree.tree_flatten(value, is_leaf=_is_size)
        new_leaves = []
        for j, leaf in enumerate(leaves):
            nm = name if len(leaves) == 1 else f"{name}_{j}"
            dims = dynamic.get(leaf_index) if table is not None and dynamic else None
            if isinstance(leaf, torch.Tensor):
                sizes = None if dims is None else [
                    table.size(n, SymbolSource(leaf_index, i)) if i in dims else n  # type: ignore[union-attr]
                    for i, n in enumerate(leaf.shape)]
                p = _input_proxy(ctx, leaf, nm, leaf_index, by_storage, sizes)
                rec.sources[id(p)] = ("path", leaf_index, ())
                new_leaves.append(p)
            elif plain_object(leaf):  # its tensors are inputs; writes to it, replayed
                make = _symbolic_inputs(ctx, table) if dims and dims[0] == EVERY \
                    else ctx.tensor_input  # type: ignore[arg-type]
                numbers = paths(dims or ())  # its symbolic int fields
                new_leaves.append(rec.argument(
                    leaf, leaf_index, nm, make,
                    _object_ints(ctx, table, numbers, symbol_args)  # type: ignore[arg-type]
                    if numbers else None))
            elif dims is not None and type(leaf) is int:  # a symbolic int argument
                new_leaves.append(_int_input(ctx, table, leaf, nm, leaf_index, symbol_args))  # type: ignore[arg-type]
            else:
                new_leaves.append(leaf)
            leaf_index += 1
        rebuilt = pytree.tree_unflatten(new_leaves, spec)
        _pair_containers(rec, value, rebuilt, top_index, (), name)
        proxied_top.append(rebuilt)
    overrides = _symbolic_attrs(ctx, table, attrs, leaf_index, dynamic, symbol_args) \
        if attrs and table is not None else {}
    for a in attrs or ():  # (a plain object's field: its shadow holds the input there)
        sym = overrides.get(id(a.module), {}).get(a.name) \
            if not isinstance(a.module, torch.nn.Module) else None
        if sym is not None:
            rec.inputs[(id(a.module), Field(a.name))] = sym
    p_args = proxied_top[:len(args)]
    p_kwargs = dict(zip(kwargs, proxied_top[len(args):]))
    params = {id(v) for v in module.parameters()} if module is not None else set()
    proxies: dict[int, TensorProxy] = {}
    by_name: dict[str, TensorProxy] = {}
    for k, v in (state or {}).items():
        p = ctx.tensor_input(v, "t_" + k.replace(".", "_"), StateEntry(k))
        if id(v) in params:  # model code asks isinstance(w, nn.Parameter): so do proxies
            p._is_param = True  # type: ignore[attr-defined]
        proxies[id(v)] = by_name[k] = p
    first_rebound = leaf_index + len(attrs)  # (the leaves they stand for: `Keyer.with_attrs`)
    for j, (r, v) in enumerate(rebound):
        dims = dynamic.get(first_rebound + j) if table is not None and dynamic else None
        sizes = None if not dims else [  # the dims of it that grew: symbolic
            table.size(n, SymbolSource(first_rebound + j, i)) if i in dims else n  # type: ignore[union-attr]
            for i, n in enumerate(v.shape)]
        name = "t_" + r.label.removeprefix("self.").replace(".", "_")
        if r.item:  # an entry of a dict or list the module holds: ``cache_k``, ``states_0``
            name = name.split("[", 1)[0] + "_" + "".join(
                c if c.isalnum() else "_" for c in str(r.item[0])).strip("_")
        p = ctx.tensor_input(v, name, r.origin, sizes)
        if r.item:  # its shadow holds the input there (`Recorder.inputs`)
            rec.inputs[(id(r.container()), r.item[0])] = p
        elif r.buffer:  # the copy's _buffers, as a parameter's proxy
            proxies[id(v)] = p
        else:
            overrides = {**overrides, id(r.module): {**overrides.get(id(r.module), {}),
                                                     r.name: p}}
    if unshard is not None and state:
        for k, full in unshard(ctx, by_name).items():
            # the module's code reads it through the shadow module, and code that holds
            # the real parameter (a closure over the module) reads it as lifted: both see
            # the full value
            proxies[id(state[k])] = ctx.build.consts[id(state[k])] = full
    call: Callable[..., Any] = fn
    if module is not None:
        root, ctx.reads.originals, ctx.reads.copies = _shadow_modules(module, proxies, rec,
                                                                      overrides, watch,
                                                                      log)
        call = types.MethodType(method, root) if method is not None else root
    gc_was_enabled = gc.isenabled()
    gc.disable()  # IR is a web of reference cycles: full collections grow with the program
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_global_state_kept())
            stack.enter_context(_fake_tensor_logs_quiet())
            stack.enter_context(recording(ctx))
            for factory in TRACING_CONTEXTS:
                stack.enter_context(factory())
            stack.enter_context(_global_reads_recorded(ctx, module))
            stack.enter_context(TraceMode(ctx))
            tracing(ctx)  # (`thunder_ir.examine` reads what a trace that stopped recorded)
            drawn = random.getstate()
            if log.watched:
                stack.enter_context(log.active())
                stack.enter_context(watching(log, ctx.reads.originals, ctx.reads.copies))
            out = call(*p_args, **p_kwargs)
            if random.getstate() != drawn:  # `from random import random`: not refused by name
                random.setstate(drawn)
                raise ThunderTraceError(
                    f"Python's random generator drew while {getattr(fn, '__qualname__', fn)} "
                    "was traced: the compiled program would reuse that draw on every call "
                    "(eager draws on every call). Use torch's random functions (torch.rand, "
                    "torch.randint...), or draw outside the jitted function and pass the "
                    "value in.")
    except BaseException as e:
        rec.globals_written(ctx.reads.global_writes, failed=True)
        if isinstance(e, Exception) and not isinstance(e, ThunderTraceError
                                                       | symbols.SymbolicError):
            # the user's error: what eager's call wrote before raising, for the caller to
            # write (once, where no other trace follows)
            with contextlib.suppress(Exception):
                e._thunder_ir_writes = rec.written_before_failing()  # type: ignore[attr-defined]
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    leaves, out_spec = pytree.tree_flatten(out, is_leaf=_is_size)
    outputs: list[SSAValue] = []
    out_leaves: list[tuple[str, Any]] = []
    detach_outputs: list[int] = []
    written: list[int] = []  # results that stand for memory an in-place write changed
    strides_at: dict[int, tuple[int, ...] | None] = {}
    arg_proxies = {id(p): (k.index, v) for p, v, k in ctx.build.input_proxies
                   if isinstance(k, ArgLeaf)}
    rec.begin(outputs, _known_tensors(ctx, state or {}))
    for leaf in leaves:
        ctx.grad.check_leaf(leaf, "returned")
        returned = _returned_argument(ctx, leaf, arg_proxies) if is_proxy(leaf) else None
        if returned is not None:
            out_leaves.append(returned)
        elif is_proxy(leaf):
            strides_at[len(outputs)] = _dense_strides(leaf)
            base = leaf._base_proxy
            if (leaf._value not in ctx.active and base is not None
                    and (not base.requires_grad or ctx.build.is_leaf(base._value))
                    and _cut(ctx, leaf._value, base._value)):
                # A detached alias of an input that requires grad (x.detach().view(-1)): run
                # without its detach, it would come out as a view requiring grad. (A view
                # made under no_grad, x.t(), requires grad in eager, as the program's does.)
                # Of one that does not (x.detach()), it would be the caller's tensor itself.
                detach_outputs.append(len(outputs))
            if ctx.aliases.made_by_a_write(leaf._value):
                written.append(len(outputs))
            out_leaves.append(("out", len(outputs)))
            outputs.append(leaf._value)
        elif contains_proxy(leaf, symbolic=True):  # an object made while traced holding
            # tensors (a cache), or a symbolic number (``step + 1``): made on each call
            out_leaves.append(("build", rec.template(leaf, "the returned value")))
        else:  # a Python value, or a tensor captured from outside: returned as it is
            out_leaves.append(("value", leaf))
    writebacks = []
    modes = []  # how each is written back (`thunder_ir.runtime.writes`)
    written_storages = []
    aliases = ctx.aliases
    replaced = {id(p) for p in ctx.reads.data_replaced}
    for p, original, kind in ctx.build.input_proxies:
        if p._value is not original \
                and isinstance(kind, ArgLeaf | StateEntry | ArgPath | ModuleTensor) \
                and id(p) not in replaced:
            writebacks.append((len(outputs), kind))
            modes.append(JOIN if p._value in ctx.active and (
                original not in ctx.active or p._storage in aliases.joined)
                         else QUIET if p._storage in aliases.quiet
                         and p._storage not in aliases.versioned else PLAIN)
            written_storages.append(p._storage)
            outputs.append(p._value)
    # eager's version counts
    modes = with_bumps(modes, written_storages, aliases.versioned, aliases.unbumped)
    epilogue = rec.epilogue() + rec.globals_written(ctx.reads.global_writes) + [
        Action(("obj", state[k.name]), "setattr", "data", rec.template(p, f"{k.name}.data"),
               f"{k.name}.data")  # `Module.to(dtype)` in forward: the tensor's new data
        for p, _, k in ctx.build.input_proxies
        if id(p) in replaced and state is not None and isinstance(k, StateEntry)]
    reader = _symbol_reader(table, rec.symbols, leaf_index, attrs, rebound) \
        if rec.symbols else None
    rec.release()
    _check_no_proxy_escaped(ctx, module, args, kwargs, names)
    strides = [strides_at.get(i) for i in range(len(outputs))]
    ir = ctx.build.program.finish(outputs)
    if symbol_args:
        set_symbol_args(main_function(ir), symbol_args)
    if any(s is not None for s in strides):  # for `restride-outputs`
        set_output_strides(main_function(ir), strides)
        if written:
            set_written_outputs(main_function(ir), written)
    checked = [None if s is None or _made_by_a_call(v) or not all(type(x) is int for x in s)
               else s for v, s in zip(outputs, strides, strict=True)]
    build, reads = ctx.build, ctx.reads
    return TracedProgram(ir, build.input_kinds, out_spec, out_leaves,
                         writebacks, build.input_requires_grad,
                         [o in ctx.active for o in outputs], detach_outputs,
                         list(reads.global_reads.values()), reads.replays, checked,
                         reads.exact_layout, reads.layout_read, epilogue, build.speculative,
                         build.speculative and speculation.may_draw(ir), reader,
                         writeback_modes=tuple(modes) if any(modes) else (),
                         attr_reads=log.result(reads.originals),
                         layout_reads=reads.layout_deps.result())


@dataclass(frozen=True)
class Placeholder:
    """An input of `subtrace` known by its type alone (no real tensor behind it): a plain
    proxy of that type, laid out contiguously."""

    type: TensorType
    name: str = "t"
    requires_grad: bool = False


@dataclass
class SubTrace:
    """A function traced on its own by `subtrace`.

    Attributes:
        ctx: the trace (its program is ``ctx.build.program``; its inputs, in order,
            ``ctx.build.input_kinds``: those of ``inputs`` first, then any the function
            added, such as captured tensors).
        args: what the function was called with: the inputs, proxies in place of their
            tensors and placeholders.
        inputs: per input leaf (``inputs`` flattened), the program argument it became
            (None for a value passed as it is).
        result: what the function returned.
    """

    ctx: TraceContext
    args: list[Any]
    inputs: list[SSAValue | None]
    result: Any

    @property
    def ops(self) -> list[Operation]:
        """The ops recorded, in order."""
        return list(self.ctx.build.program.block.ops)


def subtrace(fn: Callable[..., Any], inputs: Sequence[Any], *, names: Sequence[str] = (),
             user_code: bool = True) -> SubTrace:
    """Traces ``fn(*inputs)`` into a program of its own, with every torch call it makes
    recorded as `trace_program` records it; the caller reads the ops (`SubTrace.ops`).

    Each tensor among ``inputs`` (pytree leaves) becomes a program argument with that
    tensor's metadata, each `Placeholder` one of its type, and other values are passed as
    they are. ``names``: the inputs' names in the program (by top-level input). While
    ``fn`` runs, `thunder_ir.frontend.context.current` is the trace (``fn`` may add inputs
    or read the ops recorded so far), and the torch-function modes of a trace in progress
    are set aside, so neither the recorded calls nor the shape rules of the ops they make
    reach it.

    ``user_code``: ``fn`` is the user's (a graph of user code: the ThunderFX splitter's
    probe), traced with what `trace_program` enters around user code (the diversions of
    extensions' ``replaces=`` functions, the take-overs of functions no mode sees), and
    grad mode, the default dtype and the random state as they were afterwards. Otherwise
    it is a fragment of thunder_ir's or an extension's own (an execution or grad
    transform, a meta function): traced with the handlers alone, in the state it finds.
    """
    stash = []  # the modes of a trace in progress, set aside
    while torch._C._len_torch_function_stack() > 0:
        stash.append(torch._C._pop_torch_function_stack())
    gc_was_enabled = gc.isenabled()
    gc.disable()  # IR is a web of reference cycles: full collections grow with the program
    try:
        ctx = TraceContext()
        args, values = _bind(ctx, inputs, names)
        with contextlib.ExitStack() as stack:
            if user_code:
                stack.enter_context(_global_state_kept())
            stack.enter_context(_fake_tensor_logs_quiet())
            stack.enter_context(recording(ctx))
            if user_code:
                for factory in TRACING_CONTEXTS:
                    stack.enter_context(factory())
            stack.enter_context(TraceMode(ctx))
            result = fn(*args)
    finally:
        if gc_was_enabled:
            gc.enable()
        for m in reversed(stash):
            torch._C._push_on_torch_function_stack(m)
    return SubTrace(ctx, args, values, result)


def _bind(ctx: TraceContext, inputs: Sequence[Any], names: Sequence[str]
          ) -> tuple[list[Any], list[SSAValue | None]]:
    """`subtrace`'s inputs as ``ctx``'s arguments: the inputs with proxies in place of their
    tensors and placeholders, and per input leaf its argument (None: passed as it is)."""
    flat, spec = pytree.tree_flatten(list(inputs), is_leaf=_is_size)
    leaf_names = [names[i] if i < len(names) else "t" for i, x in enumerate(inputs)
                  for _ in pytree.tree_leaves(x, is_leaf=_is_size)]
    values: list[SSAValue | None] = []
    bound: list[Any] = []
    for i, leaf in enumerate(flat):
        if isinstance(leaf, torch.Tensor):
            p = ctx.tensor_input(leaf, leaf_names[i], ArgLeaf(i))
        elif isinstance(leaf, Placeholder):
            v = ctx.build.add_input(leaf.type, leaf.name, ArgLeaf(i))
            p = TensorProxy(v, requires_grad=leaf.requires_grad)
        else:
            values.append(None)
            bound.append(leaf)
            continue
        values.append(p._value)
        bound.append(p)
    return pytree.tree_unflatten(bound, spec), values


def _cut(ctx: TraceContext, v: SSAValue, root: SSAValue) -> bool:
    """Whether ``v``, an alias of ``root``, was cut from it (``detach``, ``.data``: an
    ``autograd.stop_gradient`` on the way up its views), or may have been (a way up that
    does not reach ``root``); False for a plain chain of views of ``root``."""
    parents = ctx.aliases.view_parent
    while v is not root:
        up = parents.get(v)
        if up is None or isinstance(up[1], StopGradientOp):
            return True
        v = up[0]
    return False


def _made_by_a_call(v: SSAValue) -> bool:
    """Whether an opaque torch call made ``v`` (through views): eager's own kernel runs it,
    so the result is laid out as eager's whatever torch's fake kernels say (they are not
    right for every op: ``max_unpool2d`` of a channels-last input)."""
    op = v.owner
    while isinstance(op, Operation):
        kind = op.get_trait(ViewLike)
        if (kind is None or not kind.free) and not isinstance(op, StopGradientOp | FunctionOp):
            return isinstance(op, CallOp)
        v = op.operands[-1] if isinstance(op, FunctionOp) else op.operands[0]
        op = v.owner
    return False


def _returned_argument(ctx: TraceContext, leaf: TensorProxy,
                       args: dict[int, tuple[int, SSAValue]]) -> tuple[str, Any] | None:
    """Where eager returns the caller's tensor itself (``x.add_(1); return x``, ``return x``),
    or a view of an argument written in place (``x[0].add_(1); return x[0]``), the result
    is that tensor, or that view of it, made after the call's write-backs: ``("arg", i)``
    or ``("argview", (i, sizes, strides, offset))``, not a copy of its values."""
    hit = args.get(id(leaf))
    if hit is not None:
        return ("arg", hit[0])
    root = leaf._base_proxy
    hit = args.get(id(root)) if root is not None else None
    if hit is None or root is None or root._value is hit[1] or leaf._value in ctx.active:
        return None
    with torch._C.DisableTorchFunction():
        view = (tuple(leaf.shape), tuple(leaf.stride()), leaf.storage_offset())
    if not all(type(n) is int for n in (*view[0], *view[1], view[2])):
        raise symbols.SymbolicError("a returned view of an argument written in place has "
                                    "symbolic sizes (made again per call from its layout)")
    ctx.read_layout()  # the view is made by its strides
    return ("argview", (hit[0], *view))


def _pair_containers(rec: Recorder, original: Any, rebuilt: Any, top: int,
                     steps: tuple[Any, ...], name: str) -> None:
    """Records the lists and dicts among an argument's containers that user code gets
    rebuilt (pytree), with the caller's container each stands for (written back after
    each call)."""
    t = type(original)
    if t is not type(rebuilt):
        return
    if isinstance(original, list):
        rec.container(rebuilt, original, ("top", top, steps), path_text(name, steps))
        for i, (o, r) in enumerate(zip(original, rebuilt)):
            _pair_containers(rec, o, r, top, (*steps, ("item", i)), name)
    elif isinstance(original, dict):
        rec.container(rebuilt, original, ("top", top, steps), path_text(name, steps))
        for k in original:
            if k in rebuilt:
                _pair_containers(rec, original[k], rebuilt[k], top, (*steps, ("item", k)), name)
    elif isinstance(original, tuple):
        for i, (o, r) in enumerate(zip(original, rebuilt)):
            _pair_containers(rec, o, r, top, (*steps, ("item", i)), name)


def _known_tensors(ctx: TraceContext, state: dict[str, torch.Tensor]
                   ) -> Callable[[TensorProxy], tuple[Any, ...] | None]:
    """For the epilogue: a proxy that stands for a tensor the program does not make (a
    parameter or buffer, a captured tensor) is that very tensor (if it was not written)."""
    kinds = {id(p): (kind, v) for p, v, kind in ctx.build.input_proxies}

    def known(p: TensorProxy) -> tuple[Any, ...] | None:
        hit = kinds.get(id(p))
        if hit is None or hit[1] is not p._value:
            return None
        kind = hit[0]
        if isinstance(kind, Captured):
            return ("const", kind.tensor)
        if isinstance(kind, StateEntry):
            return ("const", state[kind.name])
        return None

    return known


def _check_no_proxy_escaped(ctx: TraceContext, module: torch.nn.Module | None,
                            args: Sequence[Any], kwargs: dict[str, Any], names: Sequence[str]
                            ) -> None:
    """No traced tensor is left in user-visible state: the user's modules, the arguments
    or the globals the trace read (a returned object holding traced tensors is made again
    on each call with real ones). Raises a clear error naming where one was found."""
    places: list[tuple[str, Any]] = []
    found: list[str] = []
    if module is not None:
        places += [(f"self{'.' + n if n else ''}", m) for n, m in module.named_modules()]
    places += list(zip(names, [*args, *kwargs.values()]))
    for ns, read in ctx.reads.global_reads.values():
        mod = ns.get("__name__", "?")
        for n in [n for n in read if n in ns]:
            if is_proxy(ns[n]):
                del ns[n]  # `global g; g = x * 2`: taken out, as `escaped` takes them out
                found.append(f"the global {mod}.{n}")
            else:
                places.append((f"the global {mod}.{n}", ns[n]))
    seen: set[int] = set()
    found += [f for f in (escaped(where, v, seen) for where, v in places) if f is not None]
    if found:  # every place walked first: each proxy found is taken out of the user's state
        raise ThunderTraceError(
            f"a traced tensor was left in {found[0]}: the code wrote it there while traced, "
            "where thunder_ir cannot write the real tensor after each call (it writes "
            "back to the arguments, their objects and containers, the jitted module's own "
            "attributes and containers, and globals your code rebinds with `global`, not "
            "to other containers held in globals). Return the tensor instead, "
            "or keep it in one of those. (What the traced tensors were stored in has been "
            "taken out again.)")


def _dense_strides(p: TensorProxy) -> tuple[int, ...] | None:
    """Eager's strides of a result, where a copy can lay a tensor out so (dense)."""
    from thunder_ir.runtime.layout import is_dense

    with torch._C.DisableTorchFunction():
        shape, strides = tuple(p.shape), tuple(p.stride())
    if symbols.unbacked(*shape, *strides):  # (a data-dependent size: eager's own kernel's)
        return None
    return strides if is_dense(shape, strides) else None


def _symbolic_inputs(ctx: TraceContext, table: symbols.SymbolTable
                     ) -> Callable[[torch.Tensor, str, Any], TensorProxy]:
    """``make_input`` for an argument object whose tensors' sizes are all dynamic (a
    ``DynamicCache`` that grows by a token a call). A tensor that is not contiguous (a
    sliding window's keys, a slice of a longer tensor) keeps its sizes, which the shape
    guard then checks (the dynamic key blanks every size of such an object)."""
    def make(tensor: torch.Tensor, name: str, kind: Any) -> TensorProxy:
        leaf, steps = (kind.leaf, kind.steps) if isinstance(kind, ArgPath) else (-1, ())
        if leaf < 0:
            return ctx.tensor_input(tensor, name, kind)
        sizes = [table.size(n, SymbolSource(leaf, i, tuple(steps)))
                 for i, n in enumerate(tensor.shape)]
        if not tensor.is_contiguous() or tensor.storage_offset():
            from torch.fx.experimental.symbolic_shapes import guard_int

            for s in sizes:  # (each a symbol fixed to its value: ``s3 == 3`` in the guard)
                if isinstance(s, torch.SymInt):
                    guard_int(s)
            return ctx.tensor_input(tensor, name, kind)
        return ctx.tensor_input(tensor, name, kind, sizes)

    return make


def _object_ints(ctx: TraceContext, table: symbols.SymbolTable, numbers: frozenset[Any],
                 symbol_args: dict[str, int]) -> Callable[[int, str, ArgPath], Any]:
    """``make_number`` for an argument object whose ``int`` fields at ``numbers`` (paths)
    are symbolic numbers (`thunder_ir.runtime.object_ints`): each a program input read
    from the object on each call; any other ``int`` stays itself."""
    def make(value: int, name: str, kind: ArgPath) -> Any:
        if kind.steps not in numbers:
            return value
        return _int_input(ctx, table, value, name, kind.leaf, symbol_args, kind)

    return make


def _int_input(ctx: TraceContext, table: symbols.SymbolTable, value: int, name: str,
               index: int, symbol_args: dict[str, int], origin: Origin | None = None) -> Any:
    """A dynamic ``int`` argument (or, with ``origin``, a number the module keeps, or an
    ``int`` field of argument object ``index``): a ``SymInt`` that user code computes
    with, and a program input of its own (the generated code binds its symbol from it; a
    number operand made from it is that input)."""
    steps = tuple(origin.steps) if isinstance(origin, ArgPath) else ()
    sym = table.integer(value, SymbolSource(index, None, steps))
    if isinstance(sym, torch.SymInt):
        v = ctx.build.add_input(number_type(int), name,
                                ArgLeaf(index) if origin is None else origin)
        text = symbols.sym_text(sym)
        ctx.build.numbers[(torch.SymInt, text)] = v
        symbol_args[str(text)] = len(ctx.build.input_kinds) - 1
    return sym


def _symbolic_attrs(ctx: TraceContext, table: symbols.SymbolTable,
                    attrs: Sequence[SymbolicAttr], first: int,
                    dynamic: Mapping[int, tuple[int, ...]] | None,
                    symbol_args: dict[str, int]) -> dict[int, dict[str, Any]]:
    """The symbolic numbers the module's copies hold in place of ``attrs`` (leaves
    ``first``, ``first + 1``... of ``dynamic``), each a program input read from its module
    on each call: per module id, attribute -> ``SymInt`` (0, 1 and negative values stay
    ``int``s)."""
    out: dict[int, dict[str, Any]] = {}
    for k, a in enumerate(attrs):
        value = a.module.__dict__.get(a.name)
        if dynamic is None or dynamic.get(first + k) is None or type(value) is not int:
            continue
        sym = _int_input(ctx, table, value, a.label.replace(".", "_"), first + k,
                         symbol_args, ModuleAttr(a.module, a.name))
        out.setdefault(id(a.module), {})[a.name] = sym
    return out


def _symbol_reader(table: symbols.SymbolTable | None, used: set[str], first: int,
                   attrs: Sequence[SymbolicAttr],
                   rebound: Sequence[tuple[ReboundTensor, torch.Tensor]] = ()) -> Any:
    """What reads, on each call, the symbols the epilogue or a returned value computes with
    (`thunder_ir.runtime.dynamic.symbol_reader`): from the call's leaves, or from the
    modules (leaves ``first`` on: ``attrs``, then the ``rebound`` state tensors)."""
    if table is None:
        raise symbols.SymbolicError("a symbolic number outside a symbolic compilation")
    sources: dict[str, tuple[Any, tuple[Any, ...], int | None]] = {}
    for name in sorted(used, key=lambda n: int(n[1:])):
        src = table.sources.get(name)
        if src is None:
            raise symbols.SymbolicError(f"the symbol {name} written back has no source")
        if src.leaf >= first + len(attrs):  # a size of a rebound state tensor
            r = rebound[src.leaf - first - len(attrs)][0]
            sources[name] = (r.module, tensor_steps(r.origin), src.dim)
        elif src.leaf >= first:
            a = attrs[src.leaf - first]
            sources[name] = (a.module, (("attr", a.name),), None)
        else:
            sources[name] = (src.leaf, tuple(src.steps), src.dim)
    return symbol_reader(sources)


def _input_proxy(ctx: TraceContext, tensor: torch.Tensor, name: str, index: int,
                 by_storage: dict[int, tuple[torch.Tensor, TensorProxy, str]],
                 sizes: Sequence[Any] | None = None) -> TensorProxy:
    """The proxy of argument leaf ``index``. Arguments that share memory (the prologue keys
    on that, see `thunder_ir.runtime.cache.aliases`) are traced as such: the same tensor
    passed twice is one proxy, so a write through one name is seen through the other; a
    tensor that shares storage with an earlier argument (a view of it, or both views of one
    base) is traced as that argument's alias, so that a write to either reaches the other
    (`thunder_ir.frontend.aliasing.span_root`)."""
    from thunder_ir.runtime.cache import storage_ptr

    ptr = storage_ptr(tensor)
    first = by_storage.get(ptr) if ptr else None
    if first is not None and first[0] is tensor:
        return first[1]  # the program reads it once, from the first leaf
    p = ctx.tensor_input(tensor, name, ArgLeaf(index), sizes)
    if first is not None:
        base = first[1]
        p._base_proxy = base
        p._storage = base._storage
        base.add_view(p)
        ctx.aliases.arg_groups.setdefault(base._storage, [base]).append(p)
    elif ptr:
        by_storage[ptr] = (tensor, p, name)
    return p


__all__ = ["HANDLER_MODULES", "Placeholder", "SubTrace", "arg_names", "hooks_kept", "subtrace",
           "trace_program"]
