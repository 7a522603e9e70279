"""Tier-up: ``jit(fn)``'s default on CPU fuses the programs that turn out hot.

A jitted callable whose default executors include no fusion executor (CPU, where the
Inductor executor's compile costs seconds) runs each program unfused, as compiled on its
first call. `Watch` times the program's calls; once they have taken `HOT_SECONDS`
(``THUNDER_IR_TIER_UP_AFTER``) over at least `HOT_CALLS` calls, the program is hot (and
once it swaps, so are the callable's other programs that have run their share beside
it, `SIBLING_SHARE`: a model's static and symbolic programs at several lengths):

1. the same trace (trace 0, the prologue included) is lowered again with a tiered
   Inductor executor (`thunder_ir.lowering.tiered`), on the calling thread, at that
   call's end (the length of a first call's pipeline, once);
2. the next call runs that fused program: its regions run their unfused functions, and
   each asks the background compiler for its kernel (a training call's backward asks for
   the backward's when it runs);
3. later calls run the unfused program again while the kernels compile in the helper
   process; the first call that finds none pending (after at least one such call, so
   that a training step's backward has asked for its kernels) swaps the fused program
   in, at the call boundary: the entry's function and traces become the fused
   program's, so ``last_traces`` shows what runs. Each kernel's first call keeps it only
   where it beats its region's unfused function (`thunder_ir.lowering.tiered.measured`).

A forward run before the swap keeps its own backward (its autograd node holds it), so a
swap in the middle of gradient accumulation adds the same gradients. A kernel that fails
to compile keeps the unfused program, with a warning. A program that holds collectives
(data-parallel training) swaps on every process of its group at the same call
(`thunder_ir.lowering.tier_up_ranks`); a speculative program keeps its checks between
the fused regions. A symbolic program (variable lengths) is lowered over its own
symbols, so one fused program serves every size its shape guard admits
(`TierUp.lowered`, `thunder_ir.lowering.symbolic_regions`). A program that tiered up in
an earlier process (the same script run again) is hot after `HOT_CALLS` calls
(`thunder_ir.lowering.tier_up_memory`), and its kernels load from the cache of compiled
regions without a compile (`thunder_ir.lowering.region_cache`). Not
tiered up: a
speculative program that holds collectives, tensors on several device types (CUDA
programs tier up where a GPU is here: `tier_devices`; a launch-bound one may then replay
a CUDA graph, `thunder_ir.lowering.cuda_graphs`), programs under
`MIN_OPS` ops, and calls made while ``torch.use_deterministic_algorithms``
is on (the swap's call depends on the compile's timing, and Inductor's kernels round
otherwise than eager's). ``jit(fn, tiered=False)`` or ``THUNDER_IR_TIER_UP=0`` turns it
off; ``tiered=True`` fuses from the first call. The compile helper is ended once nothing
is pending (`thunder_ir.lowering.tiered.stop_idle_helper`); each step logs at the INFO
level on the ``thunder_ir.tiered`` logger.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from thunder_ir.lowering.tier_up_memory import hot_note, prestart, remember, start_helper
from thunder_ir.lowering.tiered import LOG, BackgroundCompiler, stop_idle_helper
from thunder_ir.passes.context import compiling
from thunder_ir.runtime.cache import Entry

TIER_ENV = "THUNDER_IR_TIER_UP"
"""``0``: no program tiers up (as ``jit(fn, tiered=False)``)."""
AFTER_ENV = "THUNDER_IR_TIER_UP_AFTER"
"""Seconds of a program's calls after which it is hot (`HOT_SECONDS` by default)."""

HOT_SECONDS = 2.0
"""A program whose calls have taken this long is hot. A training call times its forward
(the backward runs later, under autograd), about a third of the step: a program tiers up
after about six seconds of training. The Inductor compile it starts takes 5-25 s of the
other core (docs/fusion.md)."""
HOT_CALLS = 8
"""...over at least this many calls (a single long call does not make a program hot)."""
SIBLING_SHARE = 0.25
"""When a program that went hot by its own calls swaps in its fused version, each other
program of the same callable that is still timed (its sibling: a model's static program
for its first length and its symbolic one for the others) goes hot at its own next
call, where it has run at least `HOT_CALLS` calls for at least this share of the first
one's time (`joins`): its kernels compile next, on the helper still running, instead
of after its own `HOT_SECONDS` (docs/fusion.md, "The threshold, measured"). Not at the
first one's hot: its swap waits for every pending kernel, so a sibling's compile then
would delay it. A program run rarely beside it (an evaluation program, a last short
batch) keeps its own threshold."""
MIN_OPS = 10
"""A program of fewer ops in its final forward (and backward) never tiers up: fusing a
handful of ops does not pay for the compile, and the watch would cost a short program's
calls."""


def hot_seconds() -> float:
    """`HOT_SECONDS`, or what ``THUNDER_IR_TIER_UP_AFTER`` says."""
    value = os.environ.get(AFTER_ENV)
    return HOT_SECONDS if value is None else float(value)


_INDUCTOR: list[bool] = []


def joins(calls: int, spent: float, hot_spent: float) -> bool:
    """Whether a sibling that has run ``calls`` calls for ``spent`` seconds goes hot with
    a program that went hot after ``hot_spent`` seconds of its own (`SIBLING_SHARE`)."""
    return calls >= HOT_CALLS and spent >= SIBLING_SHARE * hot_spent


def _inductor_available() -> bool:
    if not _INDUCTOR:
        from thunder_ir.lowering.inductor_executor import InductorExecutor

        _INDUCTOR.append(InductorExecutor().is_available())
    return _INDUCTOR[0]


def _triton_available() -> bool:
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("triton") is not None


def program_device(values: Any) -> str | None:
    """The device type of every tensor among ``values`` (``"cpu"``, ``"cuda"``); None
    where they are on several types (or there is none)."""
    types = {t.device.type for t in values if isinstance(t, torch.Tensor)}
    return types.pop() if len(types) == 1 else None


def tier_devices(default_executors: Any, cuda_available: bool) -> frozenset[str]:
    """The device types whose programs tier up, for ``jit(fn)`` with the default
    executors: the CPU where no default executor fuses (a machine without a GPU: no
    Triton executor), and CUDA where a GPU is here: its programs start on the Triton
    executor's own regions and tier up to Inductor's (Triton) kernels."""
    cpu = not any(getattr(e, "is_fusion", False) for e in default_executors)
    return frozenset({"cpu"} if cpu else set()) | frozenset({"cuda"} if cuda_available
                                                           else set())


class TierUp:
    """A jitted callable's tier-up (``jit(fn)`` with ``tiered="auto"``): the executors
    its fused programs are lowered with (one tiered Inductor executor, whose background
    compiler every program of the callable shares), and what happened so far."""

    def __init__(self, devices: frozenset[str] = frozenset({"cpu"})) -> None:
        self.devices = devices
        """The device types whose programs tier up (`tier_devices`)."""
        self.cuda = "cuda" in devices
        self._ctx: Any = None
        self.swapped = 0
        """Programs whose fused version was swapped in."""
        self.kept: list[str] = []
        """Why programs kept their unfused version."""
        self.watches: weakref.WeakSet[Watch] = weakref.WeakSet()
        """The callable's programs that are timed on their own (`Watch`), for `siblings`."""

    def context(self) -> Any:
        """The compile context with the tiered Inductor executor first (made once)."""
        if self._ctx is None:
            from thunder_ir.lowering.executors import compile_context
            from thunder_ir.lowering.inductor_executor import tiered_executors

            self._ctx = compile_context(tiered_executors(None))
        return self._ctx

    @property
    def background(self) -> BackgroundCompiler | None:
        """The background compiler of the fused programs (None before the first)."""
        return None if self._ctx is None else self._ctx.executors[0].background

    def lowered(self, ctx: Any, lower: Callable[[Any], Entry]) -> Entry:
        """``lower(fctx)``: a program's trace lowered again with `context` (``ctx``: the
        compile context of the program's own compile). A symbolic program's (``ctx``
        holds its `SymbolTable`) is lowered with that table open, so its sizes stay the
        program's symbols and its regions compile for every size (Inductor's dynamic
        shapes); a lowering that would add a shape guard the program's `ShapeGuard` does
        not check raises (the program then stays unfused)."""
        table = getattr(ctx, "symbols", None)
        if table is None:
            return lower(self.context())
        fctx = replace(self.context(), symbols=table)
        before = set(table.guards())
        with compiling(fctx):
            entry = lower(fctx)
        added = [g for g in table.guards() if g not in before]
        if added:
            raise RuntimeError("lowering it with the Inductor executor added shape guards "
                               f"its program does not check: {', '.join(added)}")
        return entry

    def worth(self, entry: Entry, state: dict[str, torch.Tensor], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> bool:
        """Whether ``entry``'s program may tier up: every tensor on one device type of
        `devices` (`program_device`), at least `MIN_OPS` ops, what Inductor needs there,
        and no ``THUNDER_IR_TIER_UP=0``."""
        if os.environ.get(TIER_ENV) == "0":
            return False
        device = program_device((*state.values(), *tree_leaves((args, kwargs))))
        if device not in self.devices:
            return False
        finals = [entry.traces[-1], *entry.backward_traces[-1:]]  # a training step's both
        ops = 0
        for trace in finals:
            for _ in trace.ir.walk():
                ops += 1
                if ops >= MIN_OPS:
                    return _inductor_available() if device == "cpu" else _triton_available()
        return False

    def watch(self, entry: Entry, fused: Callable[[], Entry], name: str) -> None:
        """Makes ``entry`` time its calls (`Watch`; a program that holds collectives: an
        `thunder_ir.lowering.tier_up_ranks.AgreedWatch`, whose processes swap together);
        ``fused()`` lowers its trace with the tiered executor when it is hot."""
        from thunder_ir.lowering.tier_up_ranks import watch_for

        watch = watch_for(self, entry, fused, name)
        if watch is not None:
            entry.fn = watch
            if isinstance(watch, Watch):  # (an `AgreedWatch`'s callable swaps as a whole)
                self.watches.add(watch)

    def siblings(self, hot: Watch) -> list[Watch]:
        """Makes the callable's other timed programs that `joins` ``hot`` (which went hot
        by its own calls and just swapped) hot at their next call; returns them."""
        out = [w for w in list(self.watches) if w is not hot and w.state == _COUNTING
               and not w.joined and joins(w.calls, w.spent, hot.spent)]
        for w in out:
            w.joined, w.hot_s = True, 0.0
        return out


COUNTING, PRIMING, WAITING, KEPT = 0, 1, 2, 3
"""A `Watch`'s states: timing the calls; the fused program's first call is next; its
kernels compile; done (swapped, or kept unfused)."""
_COUNTING, _PRIMING, _WAITING, _KEPT = COUNTING, PRIMING, WAITING, KEPT


class Watch:
    """The function of a program that may tier up, until it does (see the module doc)."""

    __slots__ = ("__weakref__", "calls", "entry", "failed", "fused", "hot_s", "joined", "lock",
                 "name", "noted", "program", "spent", "state", "tier", "unfused", "waited")

    def __init__(self, tier: TierUp, entry: Entry, fused: Callable[[], Entry], name: str
                 ) -> None:
        self.tier, self.entry, self.fused, self.name = tier, entry, fused, name
        self.unfused = entry.fn
        self.state = _COUNTING
        self.calls = 0
        self.spent = 0.0
        self.hot_s = hot_seconds()
        note = hot_note(entry) if os.environ.get(AFTER_ENV) is None else None
        self.noted = note is not None
        self.joined = False  # hot because a sibling was (`TierUp.siblings`)
        if note is not None:  # an earlier process's program: hot after HOT_CALLS calls
            self.hot_s = 0.0
            prestart(note)
        self.program: Entry | None = None
        self.failed = 0  # the background's failures when the fused program was made
        self.waited = 0  # calls since the fused program's first
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        state = self.state
        if state == _COUNTING:
            start = time.perf_counter()
            out = self.unfused(*args)
            self.spent += time.perf_counter() - start
            self.calls += 1
            if self.spent >= self.hot_s and self.calls >= HOT_CALLS:
                self._hot()
            return out
        if state == _WAITING:
            bg = self.tier.background
            assert bg is not None and self.program is not None
            if self.waited and bg.status.pending == 0:
                with self.lock:
                    fn = self._swap_or_keep(bg, args) if self.state == _WAITING \
                        else self.unfused
                return fn(*args)
            self.waited += 1
            return self.unfused(*args)
        if state == _PRIMING:
            with self.lock:
                priming, self.state = self.state == _PRIMING, _WAITING
            if priming:
                assert self.program is not None
                return self.program.fn(*args)
        return self.unfused(*args)

    def _hot(self) -> None:
        """Lowers the trace with the tiered executor; the next call runs it."""
        with self.lock:
            if self.state != _COUNTING:
                return
            if torch.are_deterministic_algorithms_enabled():
                self.spent = 0.0  # asked again after as long, in case it was turned off
                LOG.info("tiered: %s is hot, but deterministic algorithms are on: it "
                         "stays unfused", self.name)
                return
            LOG.info("tiered: %s is hot (%d calls, %.1f s%s): lowering it with the "
                     "Inductor executor, whose kernels compile in the background",
                     self.name, self.calls, self.spent,
                     "; another program of its callable was" if self.joined else "")
            if not self.noted:  # (an earlier process's program: `prestart` decided)
                start_helper()  # it imports Inductor while this lowers
            start = time.perf_counter()
            try:
                self.program = self.fused()
            except Exception as e:  # the unfused program stays
                self._keep(f"lowering it with the Inductor executor failed "
                           f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
                return
            bg = self.tier.background
            assert bg is not None
            self.failed = bg.status.failed
            self.state = _PRIMING
            LOG.info("tiered: %s lowered in %.2f s", self.name, time.perf_counter() - start)

    def _swap_or_keep(self, bg: BackgroundCompiler, args: tuple[Any, ...] = ()
                      ) -> Callable[..., Any]:
        """Every kernel asked for is in: swaps the fused program in, unless one failed;
        returns the function this call runs. A CUDA program may then be captured as a
        CUDA graph (`thunder_ir.lowering.cuda_graphs`; ``args``: this call's)."""
        assert self.program is not None
        failed = bg.status.failed - self.failed
        fn = self.unfused
        if failed:
            self._keep(f"{failed} of its kernels failed to compile")
        else:
            program, entry = self.program, self.entry
            if os.environ.get(AFTER_ENV) is None:  # hot by the default threshold: a
                # later process's program of this trace is hot at once
                remember(entry, kept=bg.unkept == 0)
            fn = program.fn
            if self.tier.cuda:  # launch-bound: replayed as a CUDA graph where that pays
                from thunder_ir.lowering.cuda_graphs import maybe_graphed

                def install(f: Callable[..., Any]) -> None:
                    entry.fn = f

                fn = maybe_graphed(program, fn, self.name, install, args)
            entry.traces, entry.backward_traces = program.traces, program.backward_traces
            entry.fn = fn
            self.tier.swapped += 1
            self.state = _KEPT
            LOG.info("tiered: %s: the fused program runs from this call on (%d calls "
                     "after it was hot)", self.name, self.waited)
            if not self.joined and not self.noted:  # (hot by its own calls)
                joined = self.tier.siblings(self)
                for w in joined:
                    LOG.info("tiered: %s goes hot with it (%d calls, %.1f s)", w.name,
                             w.calls, w.spent)
                if joined:  # the helper compiles theirs next, without a new start
                    self.program = None
                    return fn
        self.program = None
        stop_idle_helper()
        return fn

    def _keep(self, why: str) -> None:
        self.state, self.program = _KEPT, None
        self.tier.kept.append(f"{self.name}: {why}")
        warnings.warn(f"thunder_ir: {self.name} keeps running its unfused program: {why}",
                      RuntimeWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame, above the caller, outside thunder_ir and
    torch (the user's call of the jitted module or function)."""
    frame: Any = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in (
            "thunder_ir", "torch"):
        frame, level = frame.f_back, level + 1
    return level


def status_of(callables: list[Any], wait: float | None) -> dict[str, Any]:
    """`thunder_ir.compile_status` of jitted callables (`thunder_ir.api.CompiledCallable`;
    a module's own and its ``generate``'s): their tiered executors' background compiles
    and their tier-ups', summed."""
    backgrounds = [e.background for c in callables for e in c.executors
                   if getattr(e, "background", None) is not None]
    tiers = [c.tier_up for c in callables if c.tier_up is not None]
    backgrounds += [t.background for t in tiers if t.background is not None]
    if wait != 0.0:
        for b in backgrounds:
            b.wait(wait)
    out: dict[str, Any] = {"pending": 0, "compiled": 0, "failed": 0, "seconds": 0.0,
                           "unfused": 0, "cache_hits": 0, "loaded": 0, "timings": []}
    for b in backgrounds:
        for k in out:
            out[k] += getattr(b.status, k)
    out["ready"] = out["pending"] == 0
    out["swapped"] = sum(t.swapped for t in tiers)
    out["kept"] = [why for t in tiers for why in t.kept]
    return out


__all__ = ["AFTER_ENV", "COUNTING", "HOT_CALLS", "HOT_SECONDS", "KEPT", "MIN_OPS", "PRIMING",
           "SIBLING_SHARE", "TIER_ENV", "WAITING", "TierUp", "Watch", "hot_seconds", "joins",
           "program_device", "status_of", "tier_devices"]
