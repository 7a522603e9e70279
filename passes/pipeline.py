"""`Pipeline`: a tuple of named passes with hooks after each.

Why a pipeline object: every compilation runs passes in order, and after each one the
same things may happen — record a `Trace` (the pass's name, how long it
took, a snapshot of the IR) for ``last_traces``, verify the IR, print it. Those are
hooks chosen once, when the pipeline is built, not ``if config.x:`` branches in the loop::

    traces = Pipeline(("decompose-ltorch", "canonicalize", "cse", "dce")).run(module)

Switches (constructor arguments; ``verify`` and ``dump`` default to environment variables):

* ``verify`` (``THUNDER_IR_VERIFY=1``): verify the input and the IR after every pass.
  A failure raises `PassVerificationError` naming the pass, the op, its source location
  and what is wrong. Tests turn it on; it costs about as much as a pass.
* ``dump`` (``THUNDER_IR_DUMP=1``): print each pass's result as MLIR to stderr.
* ``record`` (default on): keep a Trace per pass. It records the module in a frozen form
  (`thunder_ir.passes.snapshot.freeze`, linear in its size) and builds the IR only when
  the trace is read; turn it off when nobody will read them. ``record="functions"``: a
  Trace per function the pass ran on (`Trace.function` names it; an `OnEachFunction` pass
  names the ones it runs on), which is how ``jit`` keeps ``last_traces`` (``@forward``)
  and ``last_backward_traces`` (``@backward``) apart.
  A pass that reports leaving the IR unchanged (`ReportsChange`) is recorded by sharing
  the previous record: half of ``jit``'s training pipeline is such passes (no markers to
  strip, nothing left to decompose or erase), and freezing each again cost 5 ms.
* ``pause_gc`` (default on): pause Python's cyclic garbage collector while the passes run.
  IR is a web of reference cycles; with the collector on, its full collections make
  decompositions and snapshots grow faster than the program (at 50k ops: decompose 147
  vs 90 µs/op, snapshot 34 vs 11 µs/op; see ``docs/passes.md``). It is restored after.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, ErasedSSAValue, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException, VerifyException

from thunder_ir.dialects.location import location_text
from thunder_ir.passes.change import ReportsChange, apply_pass
from thunder_ir.passes.context import compiling
from thunder_ir.passes.registry import make_passes
from thunder_ir.passes.snapshot import FrozenIR, freeze, snapshot, snapshot_function
from thunder_ir.passes.trace import Printer, Trace

VERIFY_ENV = "THUNDER_IR_VERIFY"
DUMP_ENV = "THUNDER_IR_DUMP"

Hook = Callable[[str, ModuleOp, float], None]
"""Called after each pass with the pass name, the module and the pass's duration (s)."""


class PassVerificationError(VerifyException):
    """The IR does not verify after a pass. The message names the pass and the op."""

    def __init__(self, message: str, pass_name: str, op: Operation | None) -> None:
        super().__init__(message)
        self.pass_name = pass_name
        self.op = op


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


# --------------------------------------------------------------------------- verification


def _describe(op: Operation) -> str:
    loc = location_text(op)
    where = f" at {loc}" if loc else ""
    return f"{op.name}{where}"


def _check_dominance(root: Operation) -> tuple[Operation, str] | None:
    """Finds an op that uses a value not defined before it (straight-line blocks).

    xDSL's verifier does not check SSA dominance; a pass that inserts ops in the wrong
    place, or forwards an erased value, is caught here. One walk, one set: O(n).
    """
    defined: set[SSAValue] = set()

    def block(b: Block) -> tuple[Operation, str] | None:
        defined.update(b.args)
        for op in b.ops:
            for v in op.operands:
                if v not in defined:
                    what = "an erased value" if isinstance(v, ErasedSSAValue) else (
                        f"%{v.name_hint or '?'} before its definition")
                    return op, f"uses {what}"
            for r in op.regions:
                for inner in r.blocks:
                    bad = block(inner)
                    if bad is not None:
                        return bad
            defined.update(op.results)
        return None

    for r in root.regions:
        for b in r.blocks:
            bad = block(b)
            if bad is not None:
                return bad
    return None


def verify_module(module: ModuleOp, pass_name: str = "input") -> None:
    """Verifies ``module`` (every op's verifier, then def-before-use of every value).

    Raises:
        PassVerificationError: naming ``pass_name``, the failing op and the reason.
    """
    try:
        module.verify()
    except (VerifyException, DiagnosticException, ValueError) as e:  # xDSL raises all three
        op, reason = _first_invalid_op(module)
        if op is None:
            reason = str(e)
        reason = reason.removeprefix("Operation does not verify: ")
        what = _describe(op) if op is not None else "the module"
        raise PassVerificationError(
            f"IR does not verify after pass {pass_name!r}: {what}: {reason}", pass_name, op
        ) from e
    bad = _check_dominance(module)
    if bad is not None:
        op, reason = bad
        raise PassVerificationError(
            f"IR does not verify after pass {pass_name!r}: {_describe(op)} {reason}",
            pass_name, op)


def _first_invalid_op(module: ModuleOp) -> tuple[Operation | None, str]:
    """The innermost first op whose own checks fail, and why (only on the error path)."""
    for op in module.walk(region_first=True):
        try:
            op.verify(verify_nested_ops=False)
        except (VerifyException, DiagnosticException, ValueError) as e:
            return op, str(e)
    return None, ""


# --------------------------------------------------------------------------- hooks


@dataclass
class TraceRecorder:
    """Records a `Trace` after each pass: the `freeze` of the module or, ``per_function``,
    of each function the pass ran on (every function of `program_functions`, or those an
    `OnEachFunction` pass names), of class ``trace_type``. A trace builds its IR from that
    record when it is first read (`thunder_ir.passes.snapshot`)."""

    traces: list[Trace] = field(default_factory=list)
    printer: Printer | None = None
    per_function: bool = False
    trace_type: type[Trace] = Trace
    # the last record of the module (key None) and of each function, by name
    _last: dict[str | None, FrozenIR] = field(default_factory=dict)

    def record(self, p: ModulePass, module: ModuleOp, duration_s: float,
               changed: bool = True) -> None:
        """Records what pass ``p`` left in ``module``; ``changed=False``: ``p`` left it as
        the previous record shows, which is shared."""
        if not self.per_function:
            self._add(p.name, None, module, duration_s, changed)
            return
        from thunder_ir.dialects.program import program_functions

        only = p.functions if isinstance(p, OnEachFunction) else ()
        for fn in program_functions(module):
            name = fn.sym_name.data
            if not only or name in only:
                self._add(p.name, name, fn, duration_s, changed)

    def __call__(self, pass_name: str, module: ModuleOp, duration_s: float) -> None:
        self._add(pass_name, None, module, duration_s, True)

    def _add(self, pass_name: str, function: str | None, op: Operation, duration_s: float,
             changed: bool) -> None:
        frozen = None if changed else self._last.get(function)
        if frozen is None:
            frozen = self._last[function] = freeze(op)
        self.traces.append(self.trace_type(ir=frozen, pass_name=pass_name,
                                           duration_s=duration_s, printer=self.printer,
                                           function=function))


def verify_hook(pass_name: str, module: ModuleOp, duration_s: float) -> None:
    """The hook that verifies the IR a pass left (see `verify_module`)."""
    verify_module(module, pass_name)


def dump_hook(stream: TextIO | None = None) -> Hook:
    """A hook printing the IR after each pass (to stderr by default)."""

    def dump(pass_name: str, module: ModuleOp, duration_s: float) -> None:
        out = stream if stream is not None else sys.stderr
        out.write(f"// ----- IR after {pass_name} ({duration_s * 1e3:.1f} ms)\n{module}\n")
        out.flush()

    return dump


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class OnEachFunction(ModulePass):
    """Runs a pass on each function of the program as a module of its own, then verifies
    the program; it shows under the pass's own name.

    A program is one module of named functions (``@forward``; in training ``@forward`` and
    ``@backward``; last, the cache key's ``@prologue``, which this leaves alone). A user
    pass is written for a module with one function (``main_function``): this runs it once
    per function, as ``jit`` always has.

    Args:
        pass_: the pass.
        functions: the names of the functions it runs on (empty: every function).
        verify: verify the program after the pass (a broken result names the pass).
    """

    name = "on-each-function"
    pass_: ModulePass
    functions: tuple[str, ...] = ()
    verify: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.pass_.name)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from thunder_ir.dialects.program import program_functions

        fns = [f for f in program_functions(op)
               if not self.functions or f.sym_name.data in self.functions]
        if len(fns) == 1 and fns[0] is op.body.block.first_op is op.body.block.last_op:
            self.pass_.apply(ctx, op)
        else:
            block = op.body.block
            for fn in fns:
                after = fn.next_op
                fn.detach()
                alone = ModuleOp([fn])
                self.pass_.apply(ctx, alone)
                for new in list(alone.ops):
                    new.detach()
                    if after is None:
                        block.add_op(new)
                    else:
                        block.insert_op_before(new, after)
        if self.verify:
            verify_module(op, self.pass_.name)


# --------------------------------------------------------------------------- pipeline


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector inside the block (reference counting still
    frees what is not in a cycle); restores its previous state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()



def _context() -> Context:
    global _CTX
    if _CTX is None:
        from thunder_ir.dialects.program import context

        _CTX = context()
    return _CTX


_CTX: Context | None = None


class Pipeline:
    """A tuple of passes, run in order, with hooks after each.

    Args:
        passes: pass instances, or specs resolved through the registry: names
            (``"cse"``), names with options (``"my-pass{n=2}"``) or one comma-separated
            string.
        verify: verify the input and the IR after each pass (default: ``THUNDER_IR_VERIFY``).
        dump: print the IR after each pass to stderr (default: ``THUNDER_IR_DUMP``).
        record: record a `Trace` after each pass (``"functions"``: one per function the
            pass ran on).
        printer: how the recorded traces print as Python (the lowering's
            ``print_python``); None: the compile context's printer, if it has one, else
            they print as MLIR.
        trace_type: the class of the recorded traces (``thunder_ir.Trace`` for jit's).
        pause_gc: pause the cyclic garbage collector while the passes run.
        hooks: more hooks, called after the built-in ones.
    """

    def __init__(self, passes: str | Iterable[str | ModulePass], *,
                 verify: bool | None = None, dump: bool | None = None,
                 record: bool | Literal["functions"] = True, printer: Printer | None = None,
                 pause_gc: bool = True, hooks: Sequence[Hook] = (),
                 trace_type: type[Trace] = Trace) -> None:
        specs = [passes] if isinstance(passes, str) else list(passes)
        resolved: list[ModulePass] = []
        for p in specs:
            resolved.extend(make_passes(p) if isinstance(p, str) else (p,))
        self.passes: tuple[ModulePass, ...] = tuple(resolved)
        self.verify = _env_flag(VERIFY_ENV) if verify is None else verify
        self.dump = _env_flag(DUMP_ENV) if dump is None else dump
        self.record = record
        self.printer = printer
        self.trace_type = trace_type
        self.pause_gc = pause_gc
        self.extra_hooks = tuple(hooks)

    @property
    def names(self) -> tuple[str, ...]:
        """The pass names, in order."""
        return tuple(p.name for p in self.passes)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(self.names)})"

    def after_step(self, name: str, module: ModuleOp, duration_s: float) -> None:
        """Verifies and dumps ``module`` after a step run outside the pass list (``jit``'s
        code generation), as after a pass, when this pipeline does."""
        if self.verify:
            verify_hook(name, module, duration_s)
        if self.dump:
            dump_hook()(name, module, duration_s)

    def run(self, module: ModuleOp, ctx: Context | None = None) -> list[Trace]:
        """Runs every pass on ``module`` in place; returns one `Trace` per pass (per function
        it ran on, with ``record="functions"``).

        ``ctx`` is what the passes compile with: a
        `thunder_ir.passes.context.CompileContext` (its executors, the registry that
        finds executors named in pass specs, the printer); None: the dialects only.

        Raises:
            PassVerificationError: with ``verify``, when the input or a pass's result
                does not verify.
        """
        ctx = ctx if ctx is not None else _context()
        recorder = TraceRecorder(printer=self.printer if self.printer is not None
                                 else getattr(ctx, "printer", None),
                                 per_function=self.record == "functions",
                                 trace_type=self.trace_type)
        record = recorder.record if self.record else None
        hooks: list[Hook] = []  # after verifying and recording
        if self.dump:
            hooks.append(dump_hook())
        hooks.extend(self.extra_hooks)
        if self.verify:
            verify_module(module, "input")
        clock = time.perf_counter
        with gc_paused() if self.pause_gc else nullcontext(), compiling(ctx):
            for p in self.passes:
                start = clock()
                changed = apply_pass(p, ctx, module)
                duration = clock() - start
                if self.verify:  # a broken result is reported, not recorded
                    verify_hook(p.name, module, duration)
                if record is not None:
                    record(p, module, duration, changed)
                for hook in hooks:
                    hook(p.name, module, duration)
        return recorder.traces


def run_passes(module: ModuleOp, passes: str | Iterable[str | ModulePass], **kw: Any
               ) -> list[Trace]:
    """Shorthand: ``Pipeline(passes, **kw).run(module)``."""
    return Pipeline(passes, **kw).run(module)


__all__ = [
    "DUMP_ENV",
    "VERIFY_ENV",
    "Hook",
    "OnEachFunction",
    "PassVerificationError",
    "Pipeline",
    "ReportsChange",
    "TraceRecorder",
    "apply_pass",
    "dump_hook",
    "gc_paused",
    "run_passes",
    "snapshot",
    "snapshot_function",
    "verify_hook",
    "verify_module",
]
