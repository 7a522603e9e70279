"""The dispatcher: a call of a jitted callable, from its arguments to its results.

A cached call: the guards' tokens (one tuple compare per group while nothing changed),
the prologue for this call structure and those tokens, its key, one dict lookup, the
program, and (where the program writes to the caller's objects) the write-back. A miss
takes the lock (one compile per key, whichever thread gets there first), looks again
(another thread, the layout-free and symbolic programs), then compiles (`Compiler`). A
program that checks conditions it was traced under runs its variants in turn
(`Dispatcher._speculate`). A call made while another jitted callable traces runs inline,
as the user's Python. A fast-path policy (`thunder_ir.stages.policies.FastPath`) may
answer a call before the key is computed.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from thunder_ir.frontend.context import tracing_now
from thunder_ir.frontend.speculation import MAX_VARIANTS
from thunder_ir.frontend.tracer import traced_copy
from thunder_ir.runtime.cache import Entry, flatten_args, unflatten_outputs
from thunder_ir.runtime.dynamic import dynamic_key, next_variant
from thunder_ir.runtime.origins import ArgLeaf, ArgPath, ModuleTensor
from thunder_ir.runtime.pystate import apply as apply_epilogue
from thunder_ir.runtime.pystate import resolve, written_before
from thunder_ir.runtime.speculation import SpeculationFailed
from thunder_ir.stages.compiler import Compiler
from thunder_ir.stages.keyer import Keyer
from thunder_ir.stages.policies import NOT_TAKEN, FastPath, Policies
from thunder_ir.stages.programs import ProgramCache
from thunder_ir.stages.reasons import speculation_reason
from thunder_ir.trace import Trace

_function_modes = torch._C._len_torch_function_stack


class Dispatcher:
    """Calls (see the module doc), over the stages it is given: ``keyer``, ``programs``,
    ``compiler`` and ``policies``. ``guards``, ``prologues`` and ``cache`` are the
    keyer's and the program cache's own objects, held here for the cached call, and so is
    the fast-path policy (``fast_path``, `thunder_ir.stages.policies.FastPath`)."""

    fast_path: FastPath | None

    def _stages(self, keyer: Keyer, programs: ProgramCache, compiler: Compiler,
                policies: Policies, lock: threading.RLock) -> None:
        self.keyer, self.programs, self.compiler, self.policies = \
            keyer, programs, compiler, policies
        self.lock = lock
        self.fast_path = None
        self.guards = keyer.guards
        self.prologues = keyer.prologues
        self.cache = programs.cache

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _function_modes() and tracing_now():  # called by code another jit traces
            return self._inline(args, kwargs)
        fast = self.fast_path
        if fast is not None:
            out = fast.call(self, args, kwargs)
            if out is not NOT_TAKEN:
                return out
        leaves, spec = flatten_args(args, kwargs)
        guards = self.guards
        tokens = tuple([g.check() for g in guards]) if guards else ()
        pro = self.prologues.get((spec, tokens))
        if pro is None:
            pro = self.keyer.prologue(spec, args, kwargs, len(leaves), tokens)
        try:
            key = pro.fn(leaves)
        except RuntimeError:
            module = self.compiler.module
            if module is not None and _lazy(module):
                # nn.LazyLinear & co.: their first call infers the parameters' shapes and
                # makes them, as in eager; that call runs eagerly, the next ones compile.
                return self._eager(args, kwargs)
            if not self.keyer.generalize(spec):
                raise
            pro = self.keyer.prologue(spec, args, kwargs, len(leaves), tokens)
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
            ran, outs = self._speculate(entry, args, kwargs, leaves, spec)
            if ran is None:  # no program holds for this call: it ran eagerly
                return outs
            entry = ran
        else:
            outs = entry.fn(*entry.gather(leaves))
        if fast is not None:
            fast.saw(self, args, kwargs)
        if entry.after:
            tops = (*args, *kwargs.values())
            env = self.write_back(entry, leaves, outs, tops)
            return unflatten_outputs(entry, outs, leaves, tops, env)
        if entry.single_output:  # the common case, without a call
            return outs
        return unflatten_outputs(entry, outs, leaves)

    def _eager(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call run eagerly, as the user's own code."""
        compiler = self.compiler
        if compiler.module is None:
            assert compiler.fn is not None
            return compiler.fn(*args, **kwargs)
        if compiler.method is not None:
            return compiler.method(compiler.module, *args, **kwargs)
        return compiler.module(*args, **kwargs)

    def _inline(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call made while another jitted callable traces: this one's Python, traced into
        that program as if it were not jitted (the outer program holds it, with the outer
        options; gradients flow as eager's); its own programs and cache are not touched.
        A module runs as the outer trace's copy of it (its parameters are the outer
        program's), or where the traced code reached it otherwise, as itself."""
        compiler = self.compiler
        if compiler.module is None:
            assert compiler.fn is not None
            return compiler.fn(*args, **kwargs)
        module = traced_copy(compiler.module)
        return module(*args, **kwargs) if compiler.method is None else \
            compiler.method(module, *args, **kwargs)

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
        keyer, compiler = self.keyer, self.compiler
        failures = self.policies.dynamic.failures
        while True:
            try:
                outs = entry.fn(*entry.gather(leaves))
                self.cache.last = entry
                return entry, outs
            except SpeculationFailed as e:
                if rng is not None:
                    _put_rng_states(rng)
                tried += 1
                failed = e
            entry, nxt = next_variant(entry, lambda: keyer.with_attrs({}, leaves)[1],
                                      compiler.name(), failures)
            if nxt is not None:
                entry = nxt
                if entry.draws and rng is None:
                    rng = _rng_states()  # (the state before the first program ran: none drew)
                continue
            variant = None
            if tried < MAX_VARIANTS:
                with self.lock:
                    pro = keyer.current(spec, args, kwargs, len(leaves))
                    try:
                        with _outside_functorch():
                            variant, _, _ = compiler.compile(args, kwargs, spec, len(leaves),
                                                             pro, exact=False,
                                                             dynamic=entry.dynamic)
                    except Exception as e:
                        if not entry.dynamic:  # the user's own error, raised by a trace of
                            written_before(e, leaves, (*args, *kwargs.values()))
                            raise
                    if variant is not None:  # (a symbolic one that failed: run eagerly)
                        self.cache.stats.misses += 1
                        self.programs.reasons.record(
                            variant, compiler.name(), [speculation_reason(
                                failed.where, failed.expected)], pending=False)
                        self.programs.compiles += 1
                        entry.variant = variant
            if variant is None:
                self.cache.stats.eager_calls += 1
                self.cache.last = _ran_eagerly(entry, tried)
                return None, self._eager(args, kwargs)
            entry = variant
            if entry.draws and rng is None:
                rng = _rng_states()

    def _miss(self, args: tuple[Any, ...], kwargs: dict[str, Any], leaves: list[Any],
              spec: Any) -> Entry:
        """Compiles for this call (once: concurrent first calls wait for the one compiling)."""
        keyer, programs, compiler = self.keyer, self.programs, self.compiler
        with self.lock:
            # Another thread may have compiled it, or added guards, while this one waited.
            pro = keyer.current(spec, args, kwargs, len(leaves))
            key = pro.fn(leaves)
            entry = self.cache.entries.get(key) or programs.without_layouts(pro, key, leaves)
            if entry is not None:
                self.cache.stats.hits += 1
                return entry
            sizes = self.policies.dynamic.sizes(spec, leaves)
            dynamic, ext = keyer.with_attrs(sizes, leaves)
            if dynamic:
                entry = programs.symbolic(pro, key, dynamic, ext, compiler.name(),
                                          self.policies.dynamic.failures)
                if entry is not None:  # a symbolic program holds for these sizes
                    self.cache.stats.hits += 1
                    self.cache.insert(key, entry, alias=True)
                    return entry
                unblanked = programs.unblanked(pro, key, dynamic)
                if unblanked:  # (why each size compiles: `symbolic_failures` says)
                    self.policies.dynamic.note_key(unblanked, compiler.name())
            if programs.compiles:  # why it compiles again (`thunder_ir.compile_reasons`)
                programs.reasons.explain(pro.labels, key, self.cache.entries, self.guards,
                                         keyer.names(args, kwargs, len(leaves)),
                                         compiler.module or compiler.fn)
                if dynamic:  # symbolic programs whose guards these sizes fail: which
                    programs.reasons.shape_guards(programs.shape_entries.get(
                        dynamic_key(pro, dynamic, key), []), ext)
            if keyer.free is not None:  # a module attribute's value made it miss: say so
                self.policies.dynamic.failures += keyer.free.miss(keyer.guards[0],
                                                                  compiler.name())
            if self.policies.dynamic.mode != "static" and keyer.grow():
                pro = keyer.current(spec, args, kwargs, len(leaves))
                key = pro.fn(leaves)
                dynamic, ext = keyer.with_attrs(sizes, leaves)
            with _outside_functorch():  # compiling is not the transform's business
                entry, traced, keyed = compiler.compile_dynamic(args, kwargs, spec, leaves,
                                                                pro, dynamic)
            self.cache.stats.misses += 1
            if keyed is not pro:  # the trace added guards or read exact layouts: re-keyed
                pro = keyed
                key = pro.fn(leaves)
                programs.layout_free.clear()
            programs.add(key, entry, pro, dynamic, traced, leaves, compiler.name())
            if entry.shape_guard is not None:  # one that fixes a varying size: say so
                self.policies.dynamic.note_pins(spec, entry.shape_guard, compiler.name())
            keyer.rebind(traced)  # state it rebinds: read and keyed by metadata from now on
            programs.reasons.snapshot(self.guards)  # (what the next miss compares with)
            return entry

    def write_back(self, entry: Entry, leaves: Sequence[Any], outs: Any,
                   tops: Sequence[Any]) -> dict[str, Any] | None:
        """Replays, writes back and runs the epilogue after a call; returns the values of
        the symbols a returned symbolic number computes with (read before any write)."""
        env = entry.symbols(leaves) if entry.symbols is not None else None
        outs_t = outs if entry.n_outputs != 1 else (outs,)
        for i, name, args, kwargs in entry.replays:  # x.t_() on an argument: its layout
            getattr(leaves[i], name)(*args, **kwargs)
        plan = entry.write_plan
        if plan is not None:  # (batch norm: one copy for all, in order; `WritePlan`)
            targets = None if plan.fixed is not None else [
                leaves[kind.index] if type(kind) is ArgLeaf else
                resolve(leaves[kind.leaf], kind.steps) if type(kind) is ArgPath
                else kind.read() if type(kind) is ModuleTensor  # (rebound state)
                else kind.tensor  # type: ignore[union-attr]
                for _, kind in entry.writebacks]
            plan(targets, [outs_t[idx] for idx, _ in entry.writebacks])
        if entry.epilogue:  # writes to Python objects, replayed with real tensors
            guard = self.guards[0] if entry.writes_symbolic_ints else None
            quiet = guard is not None and guard.unchanged()
            apply_epilogue(entry.epilogue, leaves, tops, outs_t, env)
            if quiet:  # ``self.step += 1``: the module guard's token stays; no re-read
                guard.resync()  # type: ignore[union-attr]
        return env


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


__all__ = ["Dispatcher"]
