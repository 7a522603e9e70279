"""The compiler: one call's trace, lowered with the compile context, as a cache entry.

``trace`` (`thunder_ir.frontend.trace_program`) -> a `TracedProgram`; the pass pipeline
(`thunder_ir.pipeline.jit_pipeline`) with the callable's `CompileContext` -> the final
module; ``generate`` (`thunder_ir.lowering.codegen`) -> a `CompiledProgram`; its functions
-> an `Entry` (an inference program's forward, or a training program's bridge,
`thunder_ir.runtime.autograd`). A symbolic compile (sizes kept symbolic) runs the same
steps with a context of its own that holds a new `SymbolTable`
(`CompileContext.with_symbols`, open while it runs: `compiling`) and gives the entry its
shape guard. The policies
(`thunder_ir.stages.policies`) say what else a compile does: tier-up watches the entry,
data parallelism adds its passes and gathers sharded parameters, autocast runs the
program with autocast off.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from xdsl.dialects.builtin import ModuleOp

from thunder_ir.dialects import symbols
from thunder_ir.dialects.program import BACKWARD, FORWARD, prologue_function
from thunder_ir.dialects.types import TensorType
from thunder_ir.frontend import TracedProgram, trace_program
from thunder_ir.frontend.errors import NeedsSymbols, Refused, sizes_speculated
from thunder_ir.frontend.tracer import hooks_as_now, hooks_kept
from thunder_ir.lowering.codegen import CODEGEN, CompiledProgram, generate
from thunder_ir.lowering.tiered import TRACING
from thunder_ir.passes.context import CompileContext, compiling
from thunder_ir.passes.pipeline import Pipeline, snapshot_function
from thunder_ir.passes.snapshot import freeze
from thunder_ir.pipeline import JitOptions, jit_pipeline
from thunder_ir.runtime.cache import Cache, Entry, flatten_args
from thunder_ir.runtime.dynamic import Dynamic, shape_guard
from thunder_ir.runtime.layout import check_layouts
from thunder_ir.runtime.origins import Captured, Origin, StateEntry
from thunder_ir.runtime.prologue import Prologue
from thunder_ir.runtime.pystate import written_before
from thunder_ir.runtime.rebound import leaves_guard_as_is
from thunder_ir.stages.keyer import Keyer
from thunder_ir.stages.policies import Policies, data_parallel
from thunder_ir.trace import Trace

STRICT_SYMBOLIC = os.environ.get("THUNDER_IR_SYMBOLIC_STRICT") == "1"
"""Debugging: a symbolic compile's failure raises instead of compiling per size."""


class Compiler:
    """How one jitted callable compiles a call (see the module doc).

    Attributes:
        ctx: what its compilations run their passes with (executors and their own VJP
            rules, the registry for executors named in pass specs, the trace printer).
        user: the user's passes, by stage (`thunder_ir.transforms`).
        remat_policy: the rematerialization policy of training programs.
        method: with a module, the module's method the program is (``jit(model.forward)``),
            called on the traced copy of the module tree instead of ``module.__call__``.
    """

    def __init__(self, fn: Callable[..., Any] | None, module: torch.nn.Module | None,
                 ctx: CompileContext, user: dict[str, list[Any]], remat_policy: Any,
                 keyer: Keyer, policies: Policies, cache: Cache) -> None:
        self.fn, self.module, self.ctx, self.user = fn, module, ctx, user
        self.remat_policy = remat_policy
        self.keyer, self.policies = keyer, policies
        self.cache = cache
        """The program cache's entries (re-keyed when a trace adds guards)."""
        self.method: Callable[..., Any] | None = None
        sig_target = module.forward if module is not None else fn
        try:
            self.signature: inspect.Signature | None = inspect.signature(sig_target)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.signature = None

    def name(self) -> str:
        """What compiled programs are said to be of, in messages."""
        return (type(self.module).__name__ if self.module is not None
                else getattr(self.fn, "__qualname__", repr(self.fn)))

    def compile_dynamic(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any,
                        leaves: list[Any], pro: Prologue, dynamic: Dynamic
                        ) -> tuple[Entry, TracedProgram, Prologue]:
        """`compile`, symbolic in ``dynamic`` where every step can be; else (a step that
        cannot handle a symbolic size: the dynamic policy's ``failures`` says which) for
        this call's sizes, and from then on for this call structure."""
        sizes = self.policies.dynamic
        failure = None
        if dynamic and spec not in sizes.static_only:
            try:
                return self.compile(args, kwargs, spec, len(leaves), pro, dynamic=dynamic)
            except Exception as e:
                if STRICT_SYMBOLIC:
                    raise
                failure = f"{type(e).__name__}: {e}"
        try:
            out = self.compile(args, kwargs, spec, len(leaves), pro)
        except Exception as e:
            written_before(e, leaves, (*args, *kwargs.values()))
            raise
        if failure is not None:  # the symbolic compile's own failure: per size from now on
            sizes.failures.append(failure)
            sizes.static_only.add(spec)
        return out

    def compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, n: int,
                pro: Prologue, *, exact: bool = True, dynamic: Dynamic | None = None
                ) -> tuple[Entry, TracedProgram, Prologue]:
        """Traces, runs the pipeline and generates the code for one call (``spec``: its
        structure, ``n`` leaves, ``pro`` the prologue that looked it up). Returns the
        entry, the trace, and the prologue the cache keys the entry by (`Keyer.keyed`;
        ``exact=False``: a speculation variant, which takes its parent's layouts).
        A failed compile leaves the model as it was (`hooks_kept`).

        ``dynamic``: the leaves' sizes to keep symbolic (`thunder_ir.runtime.dynamic`);
        the entry then holds its `ShapeGuard`."""
        if not dynamic:
            try:
                with compiling(self.ctx), hooks_kept(self.module):
                    return self._compile(args, kwargs, spec, n, pro, exact, None, self.ctx)
            except NeedsSymbols:  # a data-dependent size: an unbacked symbol of a table
                return self._compile_unbacked(args, kwargs, spec, n, pro, exact)
        ctx = self.ctx.with_symbols()
        table = ctx.symbols
        assert table is not None
        with compiling(ctx), hooks_kept(self.module):
            entry, traced, keyed = self._compile(args, kwargs, spec, n, pro, exact, dynamic,
                                                 ctx)
            keyer = self.keyer
            names = [*keyer.names(args, kwargs, n), *keyer.attr_names()]
            ext = keyer.with_attrs({}, flatten_args(args, kwargs)[0])[1]
            entry.shape_guard = shape_guard(table, names, ext)  # it must hold for this call
            entry.dynamic = dynamic
        return entry, traced, keyed

    def _compile_unbacked(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any,
                          n: int, pro: Prologue, exact: bool
                          ) -> tuple[Entry, TracedProgram, Prologue]:
        """`compile` of a call whose trace met a data-dependent size (``nonzero``,
        ``x[mask]``): traced, lowered and generated inside a `SymbolTable` with the inputs'
        sizes static, where each such size is a new unbacked symbol (``u0``) that the
        generated code reads from the op's real result; the entry is keyed by the exact
        sizes as a static one (an unbacked size is never guarded on). Where that compile
        fails, the call compiles with the sizes speculated (`sizes_speculated`: the
        counts of this call, checked on every call)."""
        try:
            ctx = self.ctx.with_symbols()
            with compiling(ctx), hooks_kept(self.module):
                return self._compile(args, kwargs, spec, n, pro, exact, None, ctx)
        except Refused:  # (no compile would take it)
            raise
        except Exception as e:
            if STRICT_SYMBOLIC:
                raise
            self.policies.dynamic.failures.append(
                f"data-dependent sizes: {type(e).__name__}: {e}")
        with sizes_speculated(), compiling(self.ctx), hooks_kept(self.module):
            return self._compile(args, kwargs, spec, n, pro, exact, None, self.ctx)

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, n: int,
                 pro: Prologue, exact: bool, dynamic: Dynamic | None, ctx: CompileContext
                 ) -> tuple[Entry, TracedProgram, Prologue]:
        """One compile with ``ctx`` (the callable's context, or a symbolic compile's own,
        which holds its symbol table and is open while this runs: `compiling`)."""
        self._bind(args, kwargs)
        keyer, policies = self.keyer, self.policies
        state = keyer.state()
        t0 = time.perf_counter()
        fn = self.fn if self.module is None else self.module.__call__
        assert fn is not None
        under_autocast = policies.autocast.under()
        attrs = keyer.attrs
        with TRACING:  # never beside a tiered background compile's make_fx
            rebound = keyer.rebound
            read = len(rebound.current()) if rebound is not None else 0
            hooks_back = hooks_as_now(self.module)
            traced = self._trace(fn, args, kwargs, state, dynamic)
            once = exact and dynamic is None and symbols.current() is None
            again = once and rebound is not None and keyer.rebind(traced) \
                and (len(rebound.current()) > read or rebound.new_container)
            # It rebinds module state that holds a tensor now (`thunder_ir.runtime
            # .rebound`), or writes a plain attribute it did not watch for reads
            # (`thunder_ir.runtime.free_attrs`): traced again, with that state read from
            # the module, keyed by metadata, and the attribute watched, so that this first
            # program is the one later calls hit (a state that holds None is traced the
            # same; a symbolic compile learns after).
            if keyer.learn_writes(traced) and exact and dynamic is None:  # (also with
                # unbacked symbols: ``self.last = y.item()``; the table keeps the first
                # trace's unused symbols)
                again = True
            if again:  # (the hooks the first trace registered: registered again)
                hooks_back()
                pro = keyer.current(spec, args, kwargs, n)
                state = keyer.state()
                traced = self._trace(fn, args, kwargs, state, dynamic)
            if keyer.settle(traced):  # attributes left out of the key, or keyed again
                pro = keyer.current(spec, args, kwargs, n)
        t_trace = time.perf_counter() - t0
        pro = keyer.keyed(traced, spec, args, kwargs, n, pro, exact, self.cache)
        module = traced.module
        _put_prologue(module, pro)  # once: trace 0 shows the prologue the cache keys by
        frozen = freeze(module)
        traces = [Trace(frozen, "trace", t_trace)]
        entry = self.lower(traced, module, pro, state, traces, under_autocast, ctx)
        tier = policies.tier_up
        if tier is not None and tier.worth(entry, state, args, kwargs):
            # (speculative and data-parallel programs too: `thunder_ir.lowering.tier_up_ranks`)
            first, light = traces[0], replace(traced, module=ModuleOp([]))

            def fused() -> Entry:  # the same trace, lowered with the tiered executor (a
                # symbolic one's with its symbol table: `TierUp.lowered`)
                e = tier.lowered(ctx, lambda fctx: self.lower(
                    light, frozen.thaw(), pro, state, [first], under_autocast, fctx))
                check_layouts(e, light.output_strides, self.name())
                return e

            tier.watch(entry, fused, self.name())
        check_layouts(entry, traced.output_strides, self.name())
        entry.writes_symbolic_ints = leaves_guard_as_is(entry.epilogue, attrs, keyer.rebound,
                                                        traced.input_kinds, keyer.free)
        return entry, traced, pro

    def _trace(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               state: dict[str, torch.Tensor], dynamic: Dynamic | None) -> TracedProgram:
        """Traces one call (`thunder_ir.frontend.trace_program`) with what the keyer and
        the policies say: the module's state, its symbolic numbers and rebound tensors, data
        parallelism's unsharding."""
        keyer = self.keyer
        dp = data_parallel(self.module)
        attrs = keyer.attrs
        return trace_program(fn, args, kwargs, self.module, state, self.method,
                             unshard=dp.unshard(self.module)  # type: ignore[arg-type]
                             if dp else None,
                             dynamic=dynamic,
                             attrs=attrs.attrs if dynamic and attrs else (),
                             rebound=keyer.rebound.current() if keyer.rebound else (),
                             watch=keyer.free.watch() if keyer.free else None)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Python's own error for a call that does not fit the signature."""
        if self.signature is None:
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as e:
            name = getattr(self.module or self.fn, "__name__", type(self.module).__name__)
            raise TypeError(f"{name}.forward() {e}" if self.module is not None
                            else f"{name}() {e}") from None

    def lower(self, traced: TracedProgram, module: ModuleOp, pro: Prologue,
              state: dict[str, torch.Tensor], traces: list[Trace], under_autocast: bool,
              ctx: CompileContext) -> Entry:
        """Runs the pipeline on the traced ``module`` with ``ctx``'s executors, generates
        the code and makes the entry (``traces``: those before the pipeline's)."""
        training = any(traced.output_requires_grad)
        dp = data_parallel(self.module) if training else None
        passes = jit_pipeline(JitOptions(
            executors=tuple(ctx.executors), training=training,
            requires_grad=tuple(traced.input_requires_grad), remat=self.remat_policy,
            user=self.user,
            data_parallel=dp.passes(self.module, traced.input_kinds) if dp else ()))  # type: ignore[arg-type]
        # A trace per pass and function: `last_traces` shows @forward's,
        # `last_backward_traces` @backward's (no pass changes @prologue).
        pipeline = Pipeline(passes, record="functions", trace_type=Trace)
        recorded = pipeline.run(module, ctx)
        program = generate(module, ctx.executors, origins=traced.input_kinds,
                           state=state, prologue=pro)
        program = self.policies.autocast.program(program, under_autocast)
        pipeline.after_step(CODEGEN, module, sum(g.seconds for g in program.functions.values()))
        recorded += _final_traces(module, program)
        traces = [*traces, *(t for t in recorded if t.function != BACKWARD)]
        if training:
            return training_entry(traced, program, traces,
                                  [t for t in recorded if t.function == BACKWARD], state)
        return inference_entry(traced, program, traces, state)


def training_entry(traced: TracedProgram, program: CompiledProgram, traces: list[Trace],
                   bwd_traces: list[Trace], state: dict[str, torch.Tensor]) -> Entry:
    """The entry of a training program (``@forward`` and ``@backward``)."""
    from thunder_ir.runtime.autograd import TrainingProgram, make_runner, per_call_inputs

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
        fn=make_runner(prog, enable_grad=not torch.is_grad_enabled(),
                       side_outputs=_side_outputs(traced, prog.nondiff_outputs),
                       per_call=per_call_inputs(traced.input_kinds, state)),
        n_outputs=n_out,
        gather=program.gather,
        output_leaves=traced.output_leaves, output_spec=traced.output_spec,
        writebacks=_bind_writebacks(traced, state), traces=traces,
        prologue_source=program.prologue.source,
        single_output=_single_output(traced, n_out),
        backward_traces=bwd_traces, replays=traced.replays, epilogue=traced.epilogue,
        speculative=traced.speculative, draws=traced.draws, symbols=traced.symbols,
        writeback_modes=traced.writeback_modes)


def _side_outputs(traced: TracedProgram, nondiff: list[int]) -> list[int]:
    """The non-differentiable outputs the call only copies into the caller's tensors (the
    write-backs: a batch norm's running statistics), which the user never sees: they
    need not pass through the autograd node (`thunder_ir.runtime.autograd.make_runner`).
    None (empty) where Python state is written or built from the outputs (an epilogue,
    a built value): those read the outputs autograd returns."""
    if traced.epilogue or traced.symbols is not None or any(
            kind == "build" for kind, _ in traced.output_leaves):
        return []
    seen = {v for kind, v in traced.output_leaves if kind == "out"}
    written = {idx for idx, _ in traced.writebacks}
    return [i for i in nondiff if i in written and i not in seen]


def inference_entry(traced: TracedProgram, program: CompiledProgram, traces: list[Trace],
                    state: dict[str, torch.Tensor]) -> Entry:
    """The entry of an inference program (``@forward`` only)."""
    assert program.gather is not None and program.prologue is not None
    fn_, fn_op = program[FORWARD].fn, program[FORWARD].op
    n_out = len(fn_op.function_type.outputs)
    if traced.detach_outputs:
        fn_ = _detaching(fn_, traced.detach_outputs, n_out)
    return Entry(
        fn=fn_, n_outputs=n_out, gather=program.gather,
        output_leaves=traced.output_leaves, output_spec=traced.output_spec,
        writebacks=_bind_writebacks(traced, state), traces=traces,
        prologue_source=program.prologue.source,
        single_output=_single_output(traced, n_out),
        replays=traced.replays, epilogue=traced.epilogue, speculative=traced.speculative,
        draws=traced.draws, symbols=traced.symbols, writeback_modes=traced.writeback_modes)


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


def _put_prologue(module: ModuleOp, pro: Prologue) -> None:
    """Makes a copy of ``pro``'s ``@prologue`` the last function of the program ``module``
    (in place of one it holds), once per program, with the prologue the cache keys the
    program by."""
    new = prologue_function(pro.ir)
    assert new is not None
    old = prologue_function(module)
    if old is not None:
        module.body.block.erase_op(old)
    copy = snapshot_function(new).body.block.first_op
    assert copy is not None
    copy.detach()
    module.body.block.add_op(copy)


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
    from torch.utils import _pytree as pytree

    spec = traced.output_spec
    return (n_outputs == 1 and traced.output_leaves == [("out", 0)]
            and isinstance(spec, pytree.TreeSpec) and spec.is_leaf())


def _bind_writebacks(traced: TracedProgram, state: dict[str, torch.Tensor]
                     ) -> list[tuple[int, Origin]]:
    """The program's in-place writes, each ``(output index, origin)``, a parameter's or
    buffer's bound to the tensor (``Captured``): bound once, as the gather binds the
    state it reads (a replaced parameter or buffer fails the guards, so the call compiles
    again), so that a call does not collect the module's state."""
    return [(idx, Captured(state[kind.name]) if isinstance(kind, StateEntry) else kind)
            for idx, kind in traced.writebacks]


__all__ = ["STRICT_SYMBOLIC", "Compiler", "inference_entry", "training_entry"]
