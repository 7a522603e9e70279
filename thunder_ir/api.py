"""``thunder_ir.jit`` and the introspection calls.

``jit(module)`` returns a `ThunderModule` (an ``nn.Module`` sharing the original's
parameters and buffers); ``jit(fn)`` returns a function. A call computes the cache key with
the generated prologue and runs the cached program; a miss traces, runs the pass pipeline
(recording a `Trace` after each pass), generates Python and caches it.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from thunder_ir.dialects.program import (
    BACKWARD,
    FORWARD,
    prologue_function,
)
from thunder_ir.dialects.symbols import SymbolTable
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend import ThunderTraceError, TracedProgram, trace_program
from thunder_ir.frontend.autocast import autocast_state, without_autocast
from thunder_ir.frontend.context import tracing_now
from thunder_ir.frontend.speculation import MAX_VARIANTS
from thunder_ir.frontend.tracer import hooks_kept, traced_copy
from thunder_ir.lowering.codegen import CODEGEN, CompiledProgram, generate
from thunder_ir.lowering.executors import compile_context
from thunder_ir.lowering.tiered import TRACING
from thunder_ir.passes.context import CompileContext
from thunder_ir.passes.pipeline import Pipeline, snapshot_function
from thunder_ir.passes.snapshot import freeze
from thunder_ir.pipeline import JitOptions, jit_pipeline
from thunder_ir.runtime.cache import (
    CACHE_CAPACITY,
    RECOMPILE_LIMIT,
    Cache,
    Entry,
    all_tensors,
    flatten_args,
    unflatten_outputs,
)
from thunder_ir.runtime.dynamic import (
    CACHE_MODES,
    Dynamic,
    changed,
    dynamic_key,
    every_size,
    holding,
    marked,
    merge,
    next_variant,
    shape_guard,
    sizes_of,
)
from thunder_ir.runtime.guards import StateGuard, closure_guard, globals_guard, module_guard
from thunder_ir.runtime.layout import check_layouts
from thunder_ir.runtime.origins import ArgLeaf, ArgPath, Captured, Origin, StateEntry
from thunder_ir.runtime.prologue import Prologue, make_prologue
from thunder_ir.runtime.pystate import apply as apply_epilogue
from thunder_ir.runtime.pystate import resolve, written_before
from thunder_ir.runtime.speculation import SpeculationFailed
from thunder_ir.runtime.symbolic_attrs import SymbolicAttrs
from thunder_ir.trace import Trace
from thunder_ir.transforms import STAGES, UserTransform, transform, user_transforms

_function_modes = torch._C._len_torch_function_stack
"""Tracing runs user code under its `TorchFunctionMode`: none on the stack, no trace."""


def _final_traces(module: ModuleOp, program: CompiledProgram) -> list[Trace]:
    """Each function's execution trace (its generated source)."""
    alone = len(module.body.block.ops) == 1
    out = []
    for name, gen in program.functions.items():
        f = gen.op
        if not alone:
            f.detach()
            ir = ModuleOp([f])
        else:
            ir = module
        out.append(Trace(ir, CODEGEN, gen.seconds, final=True, source=gen.source,
                         function=name))
    return out


class CompiledCallable:
    """The cache and compile path behind a jitted function or module.

    A call: the guards' tokens (module state, globals, closure cells; one tuple compare per
    group while nothing changed), the prologue for this input structure and those tokens,
    its key, one dict lookup. A miss takes the lock (one compile per key, whichever thread
    gets there first), traces, compiles, and adds guards for what the trace read.
    """

    def __init__(self, fn: Callable[..., Any] | None, module: torch.nn.Module | None,
                 executors: Sequence[Any] | None, transforms: Sequence[Any] | None = None
                 ) -> None:
        self.fn = fn
        self.module = module
        self.method: Callable[..., Any] | None = None
        """With ``module``: the module's method the program is (``jit(model.forward)``),
        called on the traced copy of the module tree instead of ``module.__call__``."""
        self._executors_arg = executors
        self.ctx = compile_context(executors)
        """What this callable's compilations run their passes with: its executors (their
        own VJP rules included), the registry for executors named in pass specs, the
        trace printer. Built once; another jitted callable has its own."""
        self.executors = list(self.ctx.executors)
        self._transforms = transforms
        self.user = user_transforms(transforms)
        self.cache_mode = "auto"
        """``jit(cache=...)``: one of `thunder_ir.runtime.dynamic.CACHE_MODES`."""
        self.dynamic_args: Dynamic = {}
        """Sizes known to be dynamic before any call, as marks are (the ThunderFX backend
        sets Dynamo's symbolic sizes of a partition's inputs here)."""
        from thunder_ir.passes.remat import AUTO

        self.remat_policy: Any = AUTO
        self.tier_up: Any = None
        """A `thunder_ir.lowering.tier_up.TierUp` where hot programs tier up
        (``jit(fn)``'s default without a fusion executor)."""
        sig_target = module.forward if module is not None else fn
        try:
            self.signature: inspect.Signature | None = inspect.signature(sig_target)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.signature = None
        self._reset()

    def _reset(self) -> None:
        """No programs, no guards (a new jitted callable, or a copy of one)."""
        self.cache = Cache()
        self._prologues: dict[Any, Prologue] = {}
        self._structures: dict[Any, int] = {}
        """Each call structure seen (positional count, keywords in order, nesting): its
        number, the first token of every key (``f(a=x, b=y)`` and ``f(b=y, a=x)`` flatten
        to the same leaves in another order). Never reused: entries hold them."""
        self._lock = threading.RLock()
        self._general: set[Any] = set()
        self._exact: set[Any] = set()
        self._layout_free: dict[Any, Entry] = {}
        """Programs whose trace made no decision by layout, by their key without layouts:
        a call that misses by layout alone runs one of them (a transposed argument after a
        contiguous one, where nothing asked about layout)."""
        """Call structures a trace read exact strides or storage offsets for: their key
        holds every tensor's (`thunder_ir.dialects.guard`)."""
        """Call structures whose tensors are not all strided (sparse): their key reads
        each leaf through ``tensor_meta``, which knows layouts without strides."""
        self.guards: list[StateGuard] = []
        self._attrs = SymbolicAttrs(self.module) if self.module is not None else None
        """The module tree's ``int`` attributes that are symbolic numbers
        (`thunder_ir.runtime.symbolic_attrs`)."""
        if self._attrs is not None:
            self.guards.append(module_guard(self._attrs.root, self._attrs.by_module))
        cg = closure_guard(self.fn)
        if cg is not None:
            self.guards.append(cg)
        self._guarded_globals: dict[int, set[str]] = {}
        self._sizes_seen: dict[Any, tuple[Any, ...]] = {}
        """Per call structure, the sizes of its last miss (automatic dynamic)."""
        self._grown: dict[Any, Dynamic] = {}
        """Per call structure, the sizes that changed since (kept symbolic from then on)."""
        self._shape_entries: dict[Any, list[Entry]] = {}
        """Symbolic programs by dynamic key (`thunder_ir.runtime.dynamic.DynamicKey`)."""
        self._static_only: set[Any] = set()
        """Call structures a symbolic compile failed for: compiled per size."""
        self.symbolic_failures: list[str] = []
        """Why symbolic compiles fell back to static ones (the step and its error)."""
        self._compiles = 0
        self._warned = False

    # ---- copies (copy.deepcopy, pickle, torch.save): the compiled programs stay behind

    def __getstate__(self) -> dict[str, Any]:
        from thunder_ir.lowering.executors import executor_ref

        wrapper = {k: v for k, v in self.__dict__.items()
                   if k in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__")}
        return {"fn": self.fn, "module": self.module, "method": self.method,
                "transforms": self._transforms,
                "executors": None if self._executors_arg is None
                else [executor_ref(e) for e in self._executors_arg],
                "remat_policy": self.remat_policy, "wrapper": wrapper,
                "tier_up": self.tier_up is not None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fn"], state["module"], state["executors"],  # type: ignore[misc]
                      state["transforms"])
        self.remat_policy = state["remat_policy"]
        if state.get("tier_up"):
            from thunder_ir.lowering.tier_up import TierUp

            self.tier_up = TierUp()
        self.method = state.get("method")
        self.__dict__.update(state["wrapper"])

    # ---- module state

    def _state(self) -> dict[str, torch.Tensor]:
        if self.module is None:
            return {}
        state: dict[str, torch.Tensor] = dict(self.module.named_parameters())
        state.update(dict(self.module.named_buffers()))
        return state

    def _prologue(self, spec: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  n: int, tokens: tuple[int, ...]) -> Prologue:
        from thunder_ir.frontend.tracer import arg_names as _arg_names

        if len(self._prologues) > 4 * CACHE_CAPACITY:
            self._prologues.clear()
        target = self.module.forward if self.module is not None else self.fn
        assert target is not None
        names = _leaf_names(_arg_names(target, len(args), kwargs), args, kwargs, n)
        structure = self._structures.get(spec)
        if structure is None:
            with self._lock:  # two threads' new structures must not get one number
                structure = self._structures.setdefault(spec, len(self._structures))
        attrs = self._attrs
        pro = make_prologue(names, self._state(),
                            all_tensors=all_tensors(spec) and spec not in self._general,
                            exact=spec in self._exact,
                            tokens=(structure, *tokens),
                            token_names=["argument structure", *(g.name for g in self.guards)],
                            attrs=attrs.prologue_attrs() if attrs else (),
                            modules=attrs.modules() if attrs else ())
        self._prologues[(spec, tokens)] = pro
        return pro

    # ---- calls

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _function_modes() and tracing_now():  # called by code another jit traces
            return self._inline(args, kwargs)
        leaves, spec = flatten_args(args, kwargs)
        guards = self.guards
        tokens = tuple([g.check() for g in guards]) if guards else ()
        pro = self._prologues.get((spec, tokens))
        if pro is None:
            pro = self._prologue(spec, args, kwargs, len(leaves), tokens)
        try:
            key = pro.fn(leaves)
        except RuntimeError:
            if self.module is not None and _lazy(self.module):
                # nn.LazyLinear & co.: their first call infers the parameters' shapes and
                # makes them, as in eager; that call runs eagerly, the next ones compile.
                return self.module(*args, **kwargs) if self.method is None else \
                    self.method(self.module, *args, **kwargs)
            if spec in self._general:
                raise
            self._general.add(spec)  # a sparse tensor has no strides: the general key
            pro = self._prologue(spec, args, kwargs, len(leaves), tokens)
            key = pro.fn(leaves)
        cache = self.cache
        entry = cache.entries.get(key)
        if entry is None:
            entry = self._miss(args, kwargs, leaves, spec)
        else:
            cache.stats.hits += 1
            if cache.full:
                cache.touch(key)
        cache.last = entry
        if entry.speculative:
            entry, outs = self._speculate(entry, args, kwargs, leaves, spec)
            if entry is None:  # no program holds for this call: it ran eagerly
                return outs
        else:
            outs = entry.fn(*entry.gather(leaves))
        if entry.after:
            tops = (*args, *kwargs.values())
            env = self._write_back(entry, leaves, outs, tops)
            return unflatten_outputs(entry, outs, leaves, tops, env)
        if entry.single_output:  # the common case, without a call
            return outs
        return unflatten_outputs(entry, outs, leaves)

    def _inline(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call made while another jitted callable traces: this one's Python, traced into
        that program as if it were not jitted (the outer program holds it, with the outer
        options; gradients flow as eager's); its own programs and cache are not touched.
        A module runs as the outer trace's copy of it (its parameters are the outer
        program's), or where the traced code reached it otherwise, as itself."""
        if self.module is None:
            assert self.fn is not None
            return self.fn(*args, **kwargs)
        module = traced_copy(self.module)
        return module(*args, **kwargs) if self.method is None else \
            self.method(module, *args, **kwargs)

    def _speculate(self, entry: Entry, args: tuple[Any, ...], kwargs: dict[str, Any],
                   leaves: list[Any], spec: Any) -> tuple[Entry | None, Any]:
        """Runs a program that checks conditions it was traced under
        (`thunder_ir.frontend.speculation`): where one differs on this call, the next
        variant, else a new variant traced for this call (which takes eager's branch, or
        raises the user's own error), or past `MAX_VARIANTS`, the call itself eagerly.
        The random generators are put back before each retry: a stopped program may have
        drawn. Returns the entry that ran (None: eagerly) and its outputs."""
        rng = _rng_states() if entry.draws else None
        tried = 0
        while True:
            try:
                outs = entry.fn(*entry.gather(leaves))
                self.cache.last = entry
                return entry, outs
            except SpeculationFailed:
                if rng is not None:
                    _put_rng_states(rng)
                tried += 1
            entry, nxt = next_variant(entry, lambda: self._with_attrs({}, leaves)[1],
                                      self._name(), self.symbolic_failures)
            if nxt is not None:
                entry = nxt
                if entry.draws and rng is None:
                    rng = _rng_states()  # (the state before the first program ran: none drew)
                continue
            variant = None
            if tried < MAX_VARIANTS:
                with self._lock:
                    tokens = tuple([g.check() for g in self.guards])
                    pro = self._prologues.get((spec, tokens)) or self._prologue(
                        spec, args, kwargs, len(leaves), tokens)
                    try:
                        with _outside_functorch():
                            variant, _, _ = self._compile(args, kwargs, spec, len(leaves),
                                                          pro, exact=False,
                                                          dynamic=entry.dynamic)
                    except Exception as e:
                        if not entry.dynamic:  # the user's own error, raised by a trace of
                            written_before(e, leaves, (*args, *kwargs.values()))
                            raise
                    if variant is not None:  # (a symbolic one that failed: run eagerly)
                        self.cache.stats.misses += 1
                        self._compiles += 1
                        entry.variant = variant
            if variant is None:
                self.cache.stats.eager_calls += 1
                self.cache.last = _ran_eagerly(entry, tried)
                if self.module is None:
                    assert self.fn is not None
                    return None, self.fn(*args, **kwargs)
                if self.method is not None:
                    return None, self.method(self.module, *args, **kwargs)
                return None, self.module(*args, **kwargs)
            entry = variant
            if entry.draws and rng is None:
                rng = _rng_states()

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], leaves: list[Any],
              spec: Any) -> Entry:
        """Compiles for ``key`` (once: concurrent first calls wait for the one compiling)."""
        with self._lock:
            # Another thread may have compiled it, or added guards, while this one waited.
            tokens = tuple([g.check() for g in self.guards])
            pro = self._prologues.get((spec, tokens)) or self._prologue(
                spec, args, kwargs, len(leaves), tokens)
            key = pro.fn(leaves)
            entry = self.cache.entries.get(key)
            if entry is None and self._layout_free:
                entry = self._layout_free.get(pro.layout_free(leaves))
                if entry is not None:  # the same program: its trace read no layout
                    self.cache.insert(key, entry)
            if entry is not None:
                self.cache.stats.hits += 1
                return entry
            sizes = self._dynamic_sizes(spec, leaves)
            dynamic, ext = self._with_attrs(sizes, leaves)
            if dynamic:
                entry = self._symbolic_entry(pro, key, dynamic, ext)
                if entry is not None:  # a symbolic program holds for these sizes
                    self.cache.stats.hits += 1
                    self.cache.insert(key, entry)
                    return entry
            if self._attrs is not None and self.cache_mode != "static" and self._attrs.grow():
                # module ints that changed are symbolic from now on: the module guard no
                self.guards[0].invalidate()  # longer holds their values, the key does
                self._prologues.clear()
                tokens = tuple([g.check() for g in self.guards])
                pro = self._prologue(spec, args, kwargs, len(leaves), tokens)
                key = pro.fn(leaves)
                dynamic, ext = self._with_attrs(sizes, leaves)
            with _outside_functorch():  # compiling is not the transform's business
                entry, traced, keyed = self._compile_dynamic(args, kwargs, spec, leaves,
                                                             pro, dynamic)
            self.cache.stats.misses += 1
            if keyed is not pro:  # the trace added guards or read exact layouts: re-keyed
                pro = keyed
                key = pro.fn(leaves)
                self._layout_free.clear()
            if entry.shape_guard is not None:
                assert dynamic
                self._shape_entries.setdefault(dynamic_key(pro, dynamic, key), []).append(entry)
            if not traced.layout_read and not _restrides(entry):
                if len(self._layout_free) >= CACHE_CAPACITY:
                    self._layout_free.clear()
                self._layout_free[pro.layout_free(leaves)] = entry
            self._compiles += 1
            if self._compiles > RECOMPILE_LIMIT and not self._warned:
                self._warn_recompiles(key, pro)
            self.cache.insert(key, entry)
            return entry

    # ---- dynamic sizes (`thunder_ir.runtime.dynamic`)

    def _dynamic_sizes(self, spec: Any, leaves: list[Any]) -> Dynamic:
        """The sizes a compile for this call keeps symbolic: the marked ones (in every
        cache mode), all of them (``cache="symbolic values"``), and (automatic dynamic)
        those that changed between two misses of this call structure."""
        known = merge(marked(leaves), self.dynamic_args) if self.dynamic_args \
            else marked(leaves)
        if self.cache_mode == "static":  # the user's marks only
            return known
        now = sizes_of(leaves)
        dyn = every_size(leaves) if self.cache_mode == "symbolic values" else known
        before = self._sizes_seen.get(spec)
        self._sizes_seen[spec] = now
        if self.cache_mode == "auto":
            grown = self._grown.get(spec, {})
            if before is not None:
                grown = self._grown[spec] = merge(grown, changed(before, now))
            dyn = merge(dyn, grown)
        return dyn

    def _with_attrs(self, dynamic: Dynamic, leaves: list[Any]) -> tuple[Dynamic, list[Any]]:
        """``dynamic`` and the leaves, with the module's symbolic ``int`` attributes
        (`thunder_ir.runtime.symbolic_attrs`) as leaves after the call's own."""
        if self._attrs is None or not self._attrs.attrs:
            return dynamic, leaves
        ext = [*leaves, *self._attrs.values(self.guards[0].tok)]
        return merge(dynamic, {i: () for i in range(len(leaves), len(ext))
                               if type(ext[i]) is int}), ext

    def _symbolic_entry(self, pro: Prologue, key: Any, dynamic: Dynamic,
                        leaves: list[Any]) -> Entry | None:
        """A symbolic program whose shape guard holds for this call, if one was compiled
        (one whose guard cannot be evaluated is dropped, with a warning)."""
        found = self._shape_entries.get(dynamic_key(pro, dynamic, key), [])
        entry: Entry | None = holding(found, leaves, self._name(), self.symbolic_failures)
        return entry

    def _compile_dynamic(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any,
                         leaves: list[Any], pro: Prologue, dynamic: Dynamic
                         ) -> tuple[Entry, TracedProgram, Prologue]:
        """`_compile`, symbolic in ``dynamic`` where every step can be; else (a step that
        cannot handle a symbolic size, `symbolic_failures` says which) for this call's
        sizes."""
        failure = None
        if dynamic and spec not in self._static_only:
            try:
                return self._compile(args, kwargs, spec, len(leaves), pro, dynamic=dynamic)
            except Exception as e:
                if _STRICT_SYMBOLIC:
                    raise
                failure = f"{type(e).__name__}: {e}"
        try:
            out = self._compile(args, kwargs, spec, len(leaves), pro)
        except Exception as e:
            written_before(e, leaves, (*args, *kwargs.values()))
            raise
        if failure is not None:  # the symbolic compile's own failure: per size from now on
            self.symbolic_failures.append(failure)
            self._static_only.add(spec)
        return out

    def _keyed_prologue(self, traced: TracedProgram, spec: Any, args: tuple[Any, ...],
                        kwargs: dict[str, Any], n: int, pro: Prologue, exact: bool
                        ) -> Prologue:
        """The prologue the cache keys a traced program by: ``pro``, or the one rebuilt
        where the trace added guards (globals it read) or, with ``exact``, read exact
        strides or storage offsets for this call structure. Known once the trace is, so
        the program module takes its ``@prologue`` once (`_put_prologue`)."""
        rekey = self._guard_reads(traced)
        if exact and traced.exact_layout and spec not in self._exact:
            # The key now holds exact layouts for this structure; the entries keyed by
            # contiguity are not hit again (the cache's LRU drops them).
            self._exact.add(spec)
            self._prologues = {k: p for k, p in self._prologues.items() if k[0] != spec}
            rekey = True
        if not rekey:
            return pro
        tokens = tuple([g.check() for g in self.guards])
        return self._prologue(spec, args, kwargs, n, tokens)

    def _guard_reads(self, traced: TracedProgram) -> bool:
        """Adds guards for the globals the trace read that no guard covers yet; entries
        compiled before do not depend on them and are re-keyed to match any state of
        theirs. Returns whether guards were added."""
        added: list[StateGuard] = []
        for namespace, names in traced.global_reads:
            have = self._guarded_globals.setdefault(id(namespace), set())
            new = names - have
            if new:
                have.update(new)
                added.append(globals_guard(namespace, new))
        if not added:
            return False
        self.guards += added
        extra = tuple(g.check() for g in added)
        entries = self.cache.entries
        rekeyed = {(*k[:-1], k[-1] + extra): e for k, e in entries.items()}
        entries.clear()
        entries.update(rekeyed)
        self._prologues.clear()
        return True

    def _warn_recompiles(self, key: Any, pro: Prologue) -> None:
        self._warned = True
        name = self._name()
        what = "its inputs or the state it reads"
        prev = next(reversed(self.cache.entries), None)
        if isinstance(prev, tuple) and len(prev) == len(key):
            for label, old, new in zip(pro.labels, prev, key):
                if old != new:
                    what = f"{label} ({_shown(old)} -> {_shown(new)})"
                    break
        warnings.warn(
            f"thunder_ir.jit: {name} has compiled {self._compiles} programs; the last one "
            f"because of a change in {what}. A value that changes on every call, such as a "
            "step counter passed as a Python number, compiles a new program each time where "
            "it cannot be symbolic (cache='static', or a use of it that fixes its value; "
            "see symbolic_failures): pass it as a tensor (torch.tensor(step)) instead. The "
            f"cache keeps the {CACHE_CAPACITY} most recently used programs.", stacklevel=4)

    def _write_back(self, entry: Entry, leaves: list[Any], outs: Any,
                    tops: Sequence[Any]) -> dict[str, Any] | None:
        """Replays, writes back and runs the epilogue after a call; returns the values of
        the symbols a returned symbolic number computes with (read before any write)."""
        env = entry.symbols(leaves) if entry.symbols is not None else None
        outs_t = outs if entry.n_outputs != 1 else (outs,)
        for i, name, args, kwargs in entry.replays:  # x.t_() on an argument: its layout
            getattr(leaves[i], name)(*args, **kwargs)
        if entry.writebacks:
            targets = [leaves[kind.index] if type(kind) is ArgLeaf else
                       resolve(leaves[kind.leaf], kind.steps) if type(kind) is ArgPath
                       else kind.tensor  # type: ignore[union-attr]
                       for _, kind in entry.writebacks]
            with torch.no_grad():  # one call for all (batch norm: 3 per layer), in order
                torch._foreach_copy_(targets, [outs_t[idx] for idx, _ in entry.writebacks])
        if entry.epilogue:  # writes to Python objects, replayed with real tensors
            guard = self.guards[0] if entry.writes_symbolic_ints else None
            quiet = guard is not None and guard.unchanged()
            apply_epilogue(entry.epilogue, leaves, tops, outs_t, env)
            if quiet:  # ``self.step += 1``: the module guard's token stays; no re-read
                guard.resync()  # type: ignore[union-attr]
        return env

    def _compile_training(self, traced: TracedProgram, program: CompiledProgram,
                          traces: list[Trace], bwd_traces: list[Trace],
                          state: dict[str, torch.Tensor]) -> Entry:
        """The entry of a training program (``@forward`` and ``@backward``)."""
        from thunder_ir.runtime.autograd import TrainingProgram, make_runner

        fwd, bwd = program[FORWARD], program[BACKWARD]
        fwd_fn, fwd_op, bwd_fn = fwd.fn, fwd.op, bwd.fn
        lay = program.layout
        assert lay is not None and program.gather is not None and program.prologue is not None
        n_out = lay.n_outputs
        ct_outputs, grad_inputs = lay.ct_output_list(), lay.grad_input_list()
        out_types = fwd_op.function_type.outputs.data
        prog = TrainingProgram(
            forward=fwd_fn, backward=bwd_fn, n_inputs=lay.n_inputs, n_outputs=n_out,
            n_residuals=lay.n_residuals, grad_inputs=grad_inputs,
            ct_outputs=ct_outputs,
            nondiff_outputs=[i for i in range(n_out) if i not in ct_outputs],
            backward_n_outputs=len(grad_inputs),
            reaches=lay.reach_list(),
            ct_meta=[(None if t.symbolic else t.sizes, t.dtype, t.dev)
                     for t in (out_types[i] for i in ct_outputs)],
            symbolic_outputs=any(out_types[i].symbolic for i in ct_outputs),
            tensor_residuals=all(isinstance(t, TensorType) for t in out_types[n_out:]),
            lazy_backward=bwd.lazy)
        return Entry(
            fn=make_runner(prog, enable_grad=not torch.is_grad_enabled()), n_outputs=n_out,
            gather=program.gather,
            output_leaves=traced.output_leaves, output_spec=traced.output_spec,
            writebacks=_bind_writebacks(traced, state), traces=traces,
            prologue_source=program.prologue.source,
            single_output=_single_output(traced, n_out),
            backward_traces=bwd_traces, replays=traced.replays, epilogue=traced.epilogue,
            speculative=traced.speculative, draws=traced.draws, symbols=traced.symbols)

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, n: int,
                 pro: Prologue, *, exact: bool = True, dynamic: Dynamic | None = None
                 ) -> tuple[Entry, TracedProgram, Prologue]:
        """Traces, runs the pipeline and generates the code for one call (``spec``: its
        structure, ``n`` leaves, ``pro`` the prologue that looked it up). Returns the
        entry, the trace, and the prologue the cache keys the entry by (`_keyed_prologue`;
        ``exact=False``: a speculation variant, which takes its parent's layouts).

        ``dynamic``: the leaves' sizes to keep symbolic (`thunder_ir.runtime.dynamic`);
        the entry then holds its `ShapeGuard`."""
        if not dynamic:
            with hooks_kept(self.module):  # a failed compile leaves the model as it was
                return self._compile_in(args, kwargs, spec, n, pro, exact, None)
        table = SymbolTable()
        with table.active(), hooks_kept(self.module):
            entry, traced, keyed = self._compile_in(args, kwargs, spec, n, pro, exact,
                                                    dynamic)
            from thunder_ir.frontend.tracer import arg_names as _arg_names

            target = self.module.forward if self.module is not None else self.fn
            assert target is not None
            names = _leaf_names(_arg_names(target, len(args), kwargs), args, kwargs, n)
            if self._attrs is not None:  # the module ints: leaves after the call's own
                names += [a.label for a in self._attrs.attrs]
            ext = self._with_attrs({}, flatten_args(args, kwargs)[0])[1]
            entry.shape_guard = shape_guard(table, names, ext)  # it must hold for this call
            entry.dynamic = dynamic
        return entry, traced, keyed

    def _compile_in(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, n: int,
                    pro: Prologue, exact: bool, dynamic: Dynamic | None
                    ) -> tuple[Entry, TracedProgram, Prologue]:
        if self.signature is not None:
            try:
                self.signature.bind(*args, **kwargs)
            except TypeError as e:
                name = getattr(self.module or self.fn, "__name__", type(self.module).__name__)
                raise TypeError(f"{name}.forward() {e}" if self.module is not None
                                else f"{name}() {e}") from None
        state = self._state()
        t0 = time.perf_counter()
        fn = self.fn if self.module is None else self.module.__call__
        assert fn is not None
        under_autocast = autocast_state() is not None
        with TRACING:  # never beside a tiered background compile's make_fx
            traced = trace_program(fn, args, kwargs, self.module, state, self.method,
                                   unshard=self._unshard(), dynamic=dynamic,
                                   attrs=self._attrs.attrs if dynamic and self._attrs else ())
        t_trace = time.perf_counter() - t0
        pro = self._keyed_prologue(traced, spec, args, kwargs, n, pro, exact)
        module = traced.module
        _put_prologue(module, pro)  # once: trace 0 shows the prologue the cache keys by
        frozen = freeze(module)
        traces = [Trace(frozen, "trace", t_trace)]
        entry = self._lower(traced, module, pro, state, traces, under_autocast, self.ctx)
        tier = self.tier_up
        if tier is not None and dynamic is None and not traced.speculative \
                and not self._data_parallel(traced) and tier.worth(entry, state, args, kwargs):
            first, light = traces[0], replace(traced, module=ModuleOp([]))

            def fused() -> Entry:  # the same trace, lowered with the tiered executor
                e = self._lower(light, frozen.thaw(), pro, state, [first], under_autocast,
                                tier.context())
                check_layouts(e, light.output_strides, self._name())
                return e

            tier.watch(entry, fused, self._name())
        check_layouts(entry, traced.output_strides, self._name())
        entry.writes_symbolic_ints = self._attrs is not None and \
            self._attrs.writes_only_ints(entry.epilogue)
        return entry, traced, pro

    def _lower(self, traced: TracedProgram, module: ModuleOp, pro: Prologue,
               state: dict[str, torch.Tensor], traces: list[Trace], under_autocast: bool,
               ctx: CompileContext) -> Entry:
        """Runs the pipeline on the traced ``module`` with ``ctx``'s executors, generates
        the code and makes the entry (``traces``: those before the pipeline's)."""
        training = any(traced.output_requires_grad)
        passes = jit_pipeline(JitOptions(
            executors=tuple(ctx.executors), training=training,
            requires_grad=tuple(traced.input_requires_grad), remat=self.remat_policy,
            user=self.user, data_parallel=self._data_parallel(traced) if training else ()))
        # A trace per pass and function: `last_traces` shows @forward's,
        # `last_backward_traces` @backward's (no pass changes @prologue).
        pipeline = Pipeline(passes, record="functions", trace_type=Trace)
        recorded = pipeline.run(module, ctx)
        program = generate(module, ctx.executors, origins=traced.input_kinds,
                           state=state, prologue=pro)
        if under_autocast:  # its casts are explicit: the program runs with autocast off
            program = program.with_functions(without_autocast)
        pipeline.after_step(CODEGEN, module, sum(g.seconds for g in program.functions.values()))
        recorded += _final_traces(module, program)
        traces = [*traces, *(t for t in recorded if t.function != BACKWARD)]
        if training:
            return self._compile_training(
                traced, program, traces, [t for t in recorded if t.function == BACKWARD],
                state)
        return self._entry(traced, program, traces, state)

    def _unshard(self) -> Callable[..., Any] | None:
        """How tracing reads the parameters of a sharded module (`thunder_ir.distributed
        .fsdp`): gathered; None for any other."""
        if self.module is None or not hasattr(self.module, "_thunder_fsdp"):
            return None
        from thunder_ir.distributed.fsdp import config_of, unshard_in_trace

        cfg = config_of(self.module)
        return None if cfg is None else unshard_in_trace(cfg)

    def _data_parallel(self, traced: TracedProgram) -> tuple[ModulePass, ...]:
        """The data-parallel passes of a training program (`thunder_ir.distributed
        .training_passes`); none for a module that is not data-parallel."""
        if self.module is None or not (hasattr(self.module, "_thunder_ddp")
                                       or hasattr(self.module, "_thunder_fsdp")):
            return ()  # (without importing thunder_ir.distributed)
        from thunder_ir.distributed import training_passes

        return training_passes(self.module, traced.input_kinds)

    def _name(self) -> str:
        return (type(self.module).__name__ if self.module is not None
                else getattr(self.fn, "__qualname__", repr(self.fn)))

    def _entry(self, traced: TracedProgram, program: CompiledProgram, traces: list[Trace],
               state: dict[str, torch.Tensor]) -> Entry:
        """The entry of an inference program (``@forward`` only)."""
        assert program.gather is not None and program.prologue is not None
        fn_, fn_op = program[FORWARD].fn, program[FORWARD].op
        n_out = len(fn_op.function_type.outputs)
        if traced.detach_outputs:
            fn_ = _detaching(fn_, traced.detach_outputs, n_out)
        return Entry(
            fn=fn_,
            n_outputs=n_out,
            gather=program.gather,
            output_leaves=traced.output_leaves,
            output_spec=traced.output_spec,
            writebacks=_bind_writebacks(traced, state),
            traces=traces,
            prologue_source=program.prologue.source,
            single_output=_single_output(traced, n_out),
            replays=traced.replays,
            epilogue=traced.epilogue,
            speculative=traced.speculative,
            draws=traced.draws,
            symbols=traced.symbols,
        )


_STRICT_SYMBOLIC = os.environ.get("THUNDER_IR_SYMBOLIC_STRICT") == "1"
"""Debugging: a symbolic compile's failure raises instead of compiling per size."""


def _rng_states() -> tuple[torch.Tensor, torch.Tensor | None]:
    """The CPU random generator's state, and the current CUDA device's where CUDA is in
    use."""
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_initialized() else None
    return torch.random.get_rng_state(), cuda


def _put_rng_states(states: tuple[torch.Tensor, torch.Tensor | None]) -> None:
    torch.random.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1])


def _outside_functorch() -> Any:
    """A context in which torch.func's transforms (vmap, grad...) are set aside: a call
    made inside one traces the function on the tensors' own metadata (vmap's per-example
    shapes), and the program then runs inside the transform."""
    import contextlib

    if not torch._C._are_functorch_transforms_active():
        return contextlib.nullcontext()
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack

    return temporarily_clear_interpreter_stack()


def _lazy(module: torch.nn.Module) -> bool:
    """Whether a module of the tree still has uninitialized (lazy) parameters."""
    from torch.nn.modules.lazy import LazyModuleMixin

    return any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()
               for m in module.modules())


def _restrides(entry: Entry) -> bool:
    """Whether the program restrides results to the layout eager's had for the traced
    inputs (`thunder_ir.passes.restride`): then it serves those layouts only."""
    from thunder_ir.dialects.torch import CallOp
    from thunder_ir.passes.restride import RESTRIDE

    return any(isinstance(op, CallOp) and op.callee.data == RESTRIDE
               for op in entry.traces[-1].ir.walk())


def _put_prologue(module: ModuleOp, pro: Prologue) -> None:
    """Makes a copy of ``pro``'s ``@prologue`` the last function of the program ``module``
    (in place of one it holds). `CompiledCallable._compile` calls it once per program,
    with the prologue the cache keys the program by."""
    new = prologue_function(pro.ir)
    assert new is not None
    old = prologue_function(module)
    if old is not None:
        module.body.block.erase_op(old)
    copy = snapshot_function(new).body.block.first_op
    assert copy is not None
    copy.detach()
    module.body.block.add_op(copy)


def _leaf_names(names: Sequence[str], args: tuple[Any, ...], kwargs: dict[str, Any],
                n: int) -> list[str]:
    """A name per flat argument leaf, for messages: the parameter's name, with the leaf's
    index when an argument holds several."""
    from torch.utils import _pytree as pytree

    if len(names) == n:
        return list(names)
    out: list[str] = []
    for name, value in zip(names, [*args, *kwargs.values()]):
        k = len(pytree.tree_leaves(value, is_leaf=lambda x: isinstance(x, torch.Size)))
        out += [name] if k == 1 else [f"{name}[{j}]" for j in range(k)]
    return out + [f"leaf {i}" for i in range(len(out), n)]


def _shown(v: Any) -> str:
    """A key part, as a warning shows it: a value's repr (without its type tag)."""
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], type):
        v = v[1]
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _detaching(fn: Callable[..., Any], positions: Sequence[int], n_out: int
               ) -> Callable[..., Any]:
    """``fn`` with the outputs at ``positions`` detached (aliases that must not require
    grad, which the program, run without its ``detach``, returns as views)."""
    def run(*args: Any) -> Any:
        outs = fn(*args)
        if n_out == 1:
            return outs.detach()
        outs = list(outs)
        for i in positions:
            outs[i] = outs[i].detach()
        return tuple(outs)

    return run


def _single_output(traced: TracedProgram, n_outputs: int) -> bool:
    """The program returns exactly the user's one tensor (nothing to unflatten)."""
    return (n_outputs == 1 and traced.output_leaves == [("out", 0)]
            and _is_leaf_spec(traced.output_spec))


def _is_leaf_spec(spec: Any) -> bool:
    from torch.utils import _pytree as pytree

    return isinstance(spec, pytree.TreeSpec) and spec.is_leaf()


def _bind_writebacks(traced: TracedProgram, state: dict[str, torch.Tensor]
                     ) -> list[tuple[int, Origin]]:
    """The program's in-place writes, each ``(output index, origin)``, a parameter's or
    buffer's bound to the tensor (``Captured``): bound once, as the gather binds the
    state it reads (a replaced parameter or buffer fails the guards, so the call compiles
    again), so that a call does not collect the module's state."""
    return [(idx, Captured(state[kind.name]) if isinstance(kind, StateEntry) else kind)
            for idx, kind in traced.writebacks]


_OWN = frozenset({"_model", "_compiled", "__signature__", "training", "_forward_jit"})


class ThunderModule(torch.nn.Module):
    """A jitted module: same forward signature, shares the original's parameters.

    Its ``_parameters`` and ``_buffers`` are the model's own dicts, so what reaches the
    model's tensors by name reaches them through it too (``functional_call(jm, params,
    ...)`` swaps them in the model's dicts, as on the model); its ``training`` is the
    model's."""

    def __init__(self, model: torch.nn.Module, compiled: CompiledCallable) -> None:
        super().__init__()
        self._model = model
        self._compiled = compiled
        self.__signature__ = compiled.signature
        self.__dict__["_parameters"] = model._parameters
        self.__dict__["_buffers"] = model._buffers

    @property  # type: ignore[override]
    def training(self) -> bool:
        model = self.__dict__.get("_modules", {}).get("_model")
        return True if model is None else model.training

    @training.setter
    def training(self, mode: bool) -> None:
        model = self.__dict__.get("_modules", {}).get("_model")
        if model is not None:  # (Module.__init__ sets it before the model is there)
            model.training = mode

    def _apply(self, fn: Any, recurse: bool = True) -> ThunderModule:
        self._model._apply(fn, recurse)  # (its tensors once: the dicts are the model's)
        return self

    # Assigning through the jitted module changes the model (``jm.fc = nn.Linear(...)``,
    # ``jm.scale = 5.0``), as it would the module itself; the guards see the change.
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or "_model" not in self.__dict__.get("_modules", {}):
            super().__setattr__(name, value)
        else:
            setattr(self._modules["_model"], name, value)

    def __delattr__(self, name: str) -> None:
        if name in _OWN:
            super().__delattr__(name)
        else:
            delattr(self._modules["_model"], name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._compiled(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The model's ``generate`` (Hugging Face), each step's forward compiled: while it
        runs, the model's ``forward`` is ``thunder_ir.jit(model.forward)`` (with this
        module's options), as if the user had written that; afterwards it is the model's
        own again."""
        model: Any = self._model
        if not hasattr(type(model), "generate"):
            raise AttributeError(f"{type(model).__name__} has no generate()")
        fwd = self.__dict__.get("_forward_jit")
        if fwd is None:
            c = self._compiled
            fwd = build(model.forward, type(c), executors=c._executors_arg,
                        transforms=c._transforms, remat=c.remat_policy, cache=c.cache_mode)
            self.__dict__["_forward_jit"] = fwd
        had, old = "forward" in model.__dict__, model.__dict__.get("forward")
        model.forward = fwd
        try:
            return model.generate(*args, **kwargs)
        finally:
            if had:
                model.forward = old
            else:
                del model.forward

    def no_sync(self) -> Any:
        """``with jitted.no_sync():`` backwards accumulate gradients without communication
        (a data-parallel module, `thunder_ir.distributed.no_sync`)."""
        from thunder_ir.distributed import no_sync

        return no_sync(self._model)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_model"], name)

    # The original's state passes through, with its own names.
    def state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return self._model.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_buffers(*args, **kwargs)

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        return self._model.named_modules(*args, **kwargs)


def _on_the_model(name: str) -> Callable[..., Any]:
    def method(self: ThunderModule, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._model, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of the original module (its state dict is the model's)."
    return method


# State-dict hooks registered on the jitted module act on the model's state dict, which is
# what ``state_dict``/``load_state_dict`` return and fill.
for _name in ("register_state_dict_pre_hook", "register_state_dict_post_hook",
              "_register_state_dict_hook", "register_load_state_dict_pre_hook",
              "register_load_state_dict_post_hook", "_register_load_state_dict_pre_hook"):
    if hasattr(torch.nn.Module, _name):
        setattr(ThunderModule, _name, _on_the_model(_name))


def jit(fn: Callable[..., Any] | torch.nn.Module, *, executors: Sequence[Any] | None = None,
        transforms: Sequence[Any] | None = None, remat: Any = "auto", cache: str = "auto",
        tiered: bool | str = "auto", **options: Any) -> Any:
    """Compiles a module or function with thunder_ir.

    Args:
        fn: an ``nn.Module`` (returns a `ThunderModule`) or a function.
        executors: executor objects or names, in priority order (``"torch"`` is always last).
        transforms: user passes: ``ModulePass`` instances or lists of ``RewritePattern``
            (run on the traced ltorch program), or `transform` (pass, stage=...) for the
            ``"prims"``, ``"fusion"`` or ``"backward"`` stage. Each shows in ``last_traces``
            under its own name.
        remat: the rematerialization policy for training: ``"auto"`` (recompute cheap
            elementwise chains in the backward when that saves bytes and a fusion executor
            fuses the recomputation; views always), ``"min-cut"`` (recompute them even
            where each is an eager kernel of its own), ``"save-all"``, or a
            `thunder_ir.passes.remat.RematPolicy`.
        cache: ``"auto"`` (a size, ``int`` argument or ``int`` attribute of the module
            tree that changed between two compiles is symbolic from then on: one program
            serves every value its guards allow; `thunder_ir.runtime.symbolic_attrs`),
            ``"static"`` (a program per size but for `mark_dynamic`'s dimensions) or
            ``"symbolic values"`` (every size and
            ``int`` argument symbolic from the first compile; module attributes as under
            ``"auto"``). `mark_dynamic` marks
            single dimensions. See `thunder_ir.runtime.dynamic`.
        tiered: ``"auto"``: where the default executors fuse nothing (CPU), a program
            whose calls have taken a few seconds is lowered again with the Inductor
            executor, its kernels compile in the background, and the fused program
            replaces it at a call boundary once they are in (`thunder_ir.lowering
            .tier_up`). ``True``: fuse with the Inductor executor from the first call,
            its regions running unfused until their kernels are in (`thunder_ir.lowering
            .tiered`). ``False``: never. `compile_status` shows the compiles. Fusing needs
            what the Inductor executor needs (on CPU, a C++ compiler).

    Returns:
        A drop-in replacement that traces on the first call with new input metadata and
        then runs the cached program.
    """
    if tiered not in (True, False, "auto"):
        raise ValueError(f"tiered must be True, False or 'auto', got {tiered!r}")
    if tiered is True:
        from thunder_ir.lowering.inductor_executor import tiered_executors

        executors = tiered_executors(executors)
    out = build(fn, CompiledCallable, executors=executors, transforms=transforms, remat=remat,
                cache=cache, **options)
    compiled = _compiled_of(out)
    if tiered == "auto" and executors is None and not any(
            getattr(e, "is_fusion", False) for e in compiled.executors):
        from thunder_ir.lowering.tier_up import TierUp

        compiled.tier_up = TierUp()
    return out


def build(fn: Callable[..., Any] | torch.nn.Module, cls: type[CompiledCallable], *,
          executors: Sequence[Any] | None = None, transforms: Sequence[Any] | None = None,
          remat: Any = "auto", cache: str = "auto", **options: Any) -> Any:
    """`jit` with the compiled callable of class ``cls`` (a `CompiledCallable`; the torch.compile
    backend's partitions use one that skips the prologue Dynamo makes redundant)."""
    if options:
        raise TypeError(f"jit() got unsupported options: {', '.join(options)}")
    if cache not in CACHE_MODES:
        raise ValueError(f"unknown cache mode {cache!r}; choose from "
                         f"{', '.join(map(repr, CACHE_MODES))}")
    from thunder_ir.passes.remat import POLICIES, RematPolicy

    if isinstance(remat, str):
        if remat not in POLICIES:
            raise ValueError(f"unknown remat policy {remat!r}; choose from "
                             f"{', '.join(POLICIES)} or pass a RematPolicy")
        remat = POLICIES[remat]
    elif not isinstance(remat, RematPolicy):
        raise TypeError(f"remat must be a policy name or a RematPolicy, got {remat!r}")
    if isinstance(fn, torch.nn.Module):
        compiled = cls(None, fn, executors, transforms)
        compiled.remat_policy, compiled.cache_mode = remat, cache
        return ThunderModule(fn, compiled)
    if inspect.ismethod(fn) and isinstance(fn.__self__, torch.nn.Module):
        # ``model.forward = thunder_ir.jit(model.forward)`` (what `generate` calls): the
        # module's state is guarded and traced on a copy, as for ``jit(model)``; the
        # method runs on the copy (not ``model.forward``, which is now this callable).
        compiled = cls(None, fn.__self__, executors, transforms)
        compiled.method = fn.__func__
        compiled.signature = inspect.signature(fn)
        compiled.remat_policy, compiled.cache_mode = remat, cache
        functools.update_wrapper(compiled, fn)  # type: ignore[arg-type]
        return compiled
    if not callable(fn):
        raise TypeError(f"jit() expects a function or an nn.Module, got {type(fn).__name__}")
    compiled = cls(fn, None, executors, transforms)
    compiled.remat_policy, compiled.cache_mode = remat, cache
    functools.update_wrapper(compiled, fn)  # type: ignore[arg-type]
    return compiled


def _compiled_of(f: Any) -> CompiledCallable:
    c = getattr(f, "_compiled", None) if isinstance(f, ThunderModule) else f
    if not isinstance(c, CompiledCallable):
        raise TypeError(f"{f!r} is not a function or module returned by thunder_ir.jit")
    return c


def _last(f: Any) -> Entry:
    c = _compiled_of(f)
    if c.cache.last is None:
        raise RuntimeError("no traces yet: call the jitted function first")
    return c.cache.last


def _ran_eagerly(entry: Entry, tried: int) -> Entry:
    """What `last_traces` shows of a call that ran eagerly: the last program tried, then a
    note saying why."""
    note = (f"# This call ran eagerly: a condition checked by each of the {tried} programs "
            "traced for this call's inputs (tir.assume above) came out otherwise, and\n"
            f"# thunder_ir keeps at most {MAX_VARIANTS} programs per input signature "
            "(thunder_ir.frontend.speculation.MAX_VARIANTS).\n")
    last = entry.traces[-1]
    return replace(entry, traces=[*entry.traces, Trace(last.ir, "eager fallback", 0.0, True,
                                                     note)], variant=None)


def last_traces(f: Any) -> list[Trace]:
    """Every trace of the last call, from acquisition to the execution trace."""
    return list(_last(f).traces)


def last_backward_traces(f: Any) -> list[Trace]:
    """The backward traces of the last call (empty when nothing required grad)."""
    return list(_last(f).backward_traces)


def last_prologue_traces(f: Any) -> list[str]:
    """The guard (cache-key) code of the last call, as Python source: the prologue that
    builds the key, then each guard on the Python state the programs read (module
    attributes, submodules, parameters, hooks, globals, closure cells), as checks."""
    c = _compiled_of(f)
    last = _last(f)
    src = last.prologue_source
    if last.shape_guard is not None:
        src += ("\n# A symbolic program: it runs for a call whose dynamic sizes pass\n"
                + last.shape_guard.source)
    if c.guards:
        src += "\n# The key's _tokens: one per guard below.\n"
        src += "\n\n".join(g.source() for g in c.guards) + "\n"
    return [src]


def _with_generate(f: Any) -> list[CompiledCallable]:
    """A jitted module's compiled callables: its own, and its ``generate``'s forward."""
    out = [_compiled_of(f)]
    if isinstance(f, ThunderModule):
        gen = f.__dict__.get("_forward_jit")
        if isinstance(gen, CompiledCallable):
            out.append(gen)
    return out


def cache_hits(f: Any) -> int:
    """How many calls ran a cached program (a jitted module's ``generate`` steps too)."""
    return sum(c.cache.stats.hits for c in _with_generate(f))


def cache_misses(f: Any) -> int:
    """How many calls compiled a new program (a jitted module's ``generate`` steps too)."""
    return sum(c.cache.stats.misses for c in _with_generate(f))


def compile_status(f: Any, wait: float | None = 0.0) -> dict[str, Any]:
    """A jitted callable's background compiles (``jit(fn, tiered=...)``): kernels
    ``pending``, ``compiled`` and ``failed``, compile ``seconds``, ``ready`` (none
    pending), the compiled kernels kept ``unfused`` because their region ran faster
    without them, ``timings``: ``(kernel, fused_ms, unfused_ms)`` per region timed;
    under ``tiered="auto"``, ``swapped``: the hot programs whose fused version replaced
    them, and ``kept``: why others kept their unfused version. ``wait``: first wait up
    to this many seconds for the pending ones (None: until they are done)."""
    from thunder_ir.lowering.tier_up import status_of

    return status_of(_with_generate(f), wait)


__all__ = ["STAGES", "ThunderModule", "ThunderTraceError", "UserTransform",
           "transform", "cache_hits", "cache_misses", "compile_status", "jit",
           "last_backward_traces", "last_prologue_traces", "last_traces"]
