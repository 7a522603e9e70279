"""Tier-up of programs that hold collectives: every process of the group changes to the
fused programs at the same call.

A data-parallel program (``thunder_ir.distributed``'s ``ddp`` and ``fsdp``: all-reduces of
the gradients' buckets, all-gathers of the shards, their reduce-scatters) pairs its
collectives with the other processes' one for one, in order. The fused program's
collectives are put by the same passes on the same trace, but around another backward:
its gradients may be computed, and its collectives started, in another order (an
``fsdp`` ZERO3 backward's gathers and reduce-scatters interleave otherwise). So at every
call all processes must run fused programs or all unfused ones; and since the processes
may run different programs at one call (their batches' lengths differ), that holds for
the callable as a whole, not per program. `Ranks` (one per jitted callable and process
group) keeps that mode and makes each change of it a collective decision:

* every completed call of a collective program of the callable is counted (the counts
  are equal on every process: each call runs collectives every process runs); at the end
  of every `AGREE_EVERY`-th call from `HOT_CALLS` on, each process starts an
  asynchronous all-reduce (MAX) of two flags over the group (`Exchange`): *not ready*
  and *failed*; the next call waits for it first (it has arrived: the step's backward
  waited for the collectives started after it), and every process acts on the same
  answer;
* *ready* means, before priming: some program of this process is hot (`Watch`'s
  measure) and deterministic algorithms are off; after it: none of this process's
  kernels is pending. When all are ready, the next call is the priming call: on every
  process the called program runs its fused version (lowered then, if it was not; its
  regions run unfused and ask for their kernels), then the unfused programs run again
  while the kernels compile; when all are ready again, every process swaps at the next
  call: from it on every collective program of the callable runs fused (each watched
  program's entry takes its fused program, lowered then if it was not; a region whose
  kernel was not asked for yet runs unfused until its own compiles, which changes no
  collective). A program compiled later runs fused from its first call.
* *failed*: a lowering or a kernel failed on some process: every process keeps its
  unfused programs for good, and exchanges nothing more. (A program first lowered at the
  priming call, or after the swap, whose lowering fails runs unfused at that call, with a
  warning: the same trace fails alike on every process, but where the processes' programs
  differ that call may pair a fused program's collectives with an unfused one's.)

The fused program keeps the bucketed collectives and their overlap: no fusion region
holds a collective (their ops carry memory effects), so the regions run between them, in
the order the passes scheduled. Not tiered up: a speculative program that holds
collectives (not handled: a call that breaks the speculation on one process runs a second
program there, after the first may have started collectives).
A program without collectives (a ``ddp`` module's inference program, ``no_sync``'s)
tiers up on each process alone (`Watch`), as on one process. A program swapped in by the
default threshold is remembered as `Watch` remembers it
(`thunder_ir.lowering.tier_up_memory`): in a later run of the script each process makes
it hot after `HOT_CALLS` calls (hot is each process's own say; they still swap together)
and loads its kernels from the cache of compiled regions.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch

from thunder_ir.dialects.dist import CollectiveOp, communicate, process_group
from thunder_ir.lowering.tier_up import AFTER_ENV, HOT_CALLS, Watch, hot_seconds
from thunder_ir.lowering.tier_up_memory import hot_note, prestart, remember
from thunder_ir.lowering.tiered import LOG, stop_idle_helper
from thunder_ir.runtime.cache import Entry

AGREE_EVERY = 4
"""The processes exchange their flags every this many calls (from `HOT_CALLS` on)."""

UNFUSED, PRIMING, PRIMED, FUSED, KEPT = range(5)
"""`Ranks`' modes: unfused programs, none hot everywhere yet; the next call runs its
program's fused version; kernels compiling (unfused programs); fused programs from now
on; unfused programs for good."""


def collective_group(entry: Entry) -> str | None:
    """The process group (its name in the ``dist`` dialect) of the first collective in
    ``entry``'s final forward or backward trace; None if it holds none."""
    for trace in (entry.traces[-1], *entry.backward_traces[-1:]):
        for op in trace.ir.walk():
            if isinstance(op, CollectiveOp):
                return str(op.group.data)
    return None


class Exchange:
    """The all-reduce (MAX) of one process's two flags over a group, started at once;
    `flags` waits for it."""

    __slots__ = ("group", "values", "work")

    def __init__(self, group: str, not_ready: bool, failed: bool) -> None:
        import torch.distributed as dist

        self.group = group
        self.values = torch.tensor([int(not_ready), int(failed)], dtype=torch.int64)
        self.work = communicate("tier-up's agreement", group, lambda: dist.all_reduce(
            self.values, op=dist.ReduceOp.MAX, group=process_group(group), async_op=True))

    def flags(self) -> tuple[bool, bool]:
        """``(some process is not ready, some process failed)``."""
        communicate("waiting for tier-up's agreement", self.group, self.work.wait)
        not_ready, failed = self.values.tolist()
        return bool(not_ready), bool(failed)


class Ranks:
    """The tier-up of one jitted callable's collective programs over one process group
    (see the module doc): its mode, its count of calls, its programs' watches."""

    def __init__(self, tier: Any, group: str) -> None:
        self.tier, self.group = tier, group
        self.mode = UNFUSED
        self.calls = 0
        self.exchange: Exchange | None = None
        self.watches: list[AgreedWatch] = []
        self.failed = 0  # the background's failures when priming
        self.primed_at = 0  # the priming call
        self.swapped_at: int | None = None
        """The call (of the callable's collective programs, from 1) run fused first."""

    def begin(self) -> None:
        """At a call's start: acts on the processes' answer, if one is due."""
        if self.exchange is None:
            return
        exchange, self.exchange = self.exchange, None
        not_ready, failed = exchange.flags()
        if failed:
            self._keep("a lowering or a kernel failed to compile on a process of its group")
        elif not not_ready and self.mode == UNFUSED:
            self.mode = PRIMING
            LOG.info("tiered: every process of group %r has a hot program: the next call "
                     "runs it fused", self.group)
        elif not not_ready and self.mode == PRIMED:
            self.mode = FUSED
            self.swapped_at = self.calls + 1
            LOG.info("tiered: every process of group %r has its kernels: the fused "
                     "programs run from this call (%d) on", self.group, self.swapped_at)
            for w in self.watches:  # (the others at their next call: lowered then)
                if w.program is not None:
                    w.swap()
            self.watches = [w for w in self.watches if w.entry.fn is w]
            stop_idle_helper()

    def end(self) -> None:
        """At a call's end (it completed): counts it; starts the next exchange if due."""
        self.calls += 1
        if self.mode in (FUSED, KEPT) or self.calls < HOT_CALLS \
                or self.calls % AGREE_EVERY or self.calls == self.primed_at:
            return
        bg = self.tier.background
        failed = any(w.failed for w in self.watches) or (
            self.mode == PRIMED and bg is not None and bg.status.failed > self.failed)
        if self.mode == UNFUSED:
            ready = not torch.are_deterministic_algorithms_enabled() and any(
                w.hot() for w in self.watches)
        else:  # (the priming call's backward has asked for its kernels: a call ago)
            ready = bg is None or bg.status.pending == 0
        self.exchange = Exchange(self.group, not ready, failed)

    def _keep(self, why: str) -> None:
        self.mode = KEPT
        for w in self.watches:
            w.keep(why)
        self.watches = []


_RANKS: weakref.WeakKeyDictionary[Any, dict[str, Ranks]] = weakref.WeakKeyDictionary()


def ranks_of(tier: Any, group: str) -> Ranks:
    """The `Ranks` of a callable's `TierUp` and a group (made on first use)."""
    by_group = _RANKS.setdefault(tier, {})
    if group not in by_group:
        by_group[group] = Ranks(tier, group)
    return by_group[group]


class AgreedWatch:
    """The function of a program that holds collectives, until its callable's processes
    swap (`Ranks`): it times the unfused program's calls, runs the fused one at the
    priming call, and swaps it in when its `Ranks` says."""

    __slots__ = ("calls", "entry", "failed", "fused", "hot_s", "name", "program", "ranks",
                 "spent", "unfused")

    def __init__(self, ranks: Ranks, entry: Entry, fused: Callable[[], Entry], name: str
                 ) -> None:
        self.ranks, self.entry, self.fused, self.name = ranks, entry, fused, name
        self.unfused = entry.fn
        self.calls = 0
        self.spent = 0.0
        self.hot_s = hot_seconds()
        note = hot_note(entry) if os.environ.get(AFTER_ENV) is None else None
        if note is not None:  # an earlier run's program: hot after HOT_CALLS calls (each
            self.hot_s = 0.0  # process decides alone; they swap together all the same)
            prestart(note)
        self.program: Entry | None = None
        self.failed = False  # its lowering failed
        if ranks.mode not in (FUSED, KEPT):  # (later ones swap or keep at their first call)
            ranks.watches.append(self)

    def __call__(self, *args: Any) -> Any:
        ranks = self.ranks
        ranks.begin()
        mode = ranks.mode
        if mode == FUSED:  # (a program compiled after the swap: fused from its first call)
            out = self.swap()(*args)
        elif mode == PRIMING:
            program = self.lowered()
            bg = ranks.tier.background
            ranks.failed = 0 if bg is None else bg.status.failed
            ranks.mode, ranks.primed_at = PRIMED, ranks.calls + 1
            out = (self.unfused if program is None else program.fn)(*args)
        elif mode == UNFUSED:
            start = time.perf_counter()
            out = self.unfused(*args)
            self.spent += time.perf_counter() - start
            self.calls += 1
            if self.program is None and self.hot():  # lowered here, as `Watch` does
                self.lowered()
        else:
            if mode == KEPT:  # (a program compiled after its group kept the unfused ones)
                self.entry.fn = self.unfused
            out = self.unfused(*args)
        ranks.end()
        return out

    def hot(self) -> bool:
        """Whether its calls have taken `hot_seconds` over `HOT_CALLS` calls."""
        return self.spent >= self.hot_s and self.calls >= HOT_CALLS

    def lowered(self) -> Entry | None:
        """The fused program (lowered on first use); None where the lowering failed."""
        if self.program is None and not self.failed:
            start = time.perf_counter()
            try:
                self.program = self.fused()
            except Exception as e:  # the processes agree to keep the unfused programs
                self.failed = True
                first = str(e).splitlines()[0] if str(e) else ""
                warnings.warn(f"thunder_ir: lowering {self.name} with the Inductor executor "
                              f"failed ({type(e).__name__}: {first})", RuntimeWarning,
                              stacklevel=3)
                return None
            LOG.info("tiered: %s lowered in %.2f s", self.name, time.perf_counter() - start)
        return self.program

    def swap(self) -> Callable[..., Any]:
        """Puts the fused program in the entry (its function and traces); returns the
        function to run (the unfused one where the lowering failed, with a warning)."""
        program = self.lowered()
        entry = self.entry
        if program is None:
            if entry.fn is self:
                entry.fn = self.unfused
                self.ranks.tier.kept.append(f"{self.name}: its lowering failed after its "
                                            "group swapped")
            return self.unfused
        if entry.fn is self:
            if os.environ.get(AFTER_ENV) is None:  # a later run's is hot at once
                bg = self.ranks.tier.background
                remember(entry, kept=bg is not None and bg.unkept == 0)
            entry.traces, entry.backward_traces = program.traces, program.backward_traces
            entry.fn = program.fn
            self.ranks.tier.swapped += 1
        return program.fn

    def keep(self, why: str) -> None:
        """The unfused program for good."""
        if self.entry.fn is self:
            self.entry.fn = self.unfused
            self.program = None
            self.ranks.tier.kept.append(f"{self.name}: {why}")
            warnings.warn(f"thunder_ir: {self.name} keeps running its unfused program: {why}",
                          RuntimeWarning, stacklevel=4)


def watch_for(tier: Any, entry: Entry, fused: Callable[[], Entry], name: str
              ) -> Callable[..., Any] | None:
    """The watch of ``entry``'s program: an `AgreedWatch` where it holds collectives, a
    `Watch` otherwise; None where it may not tier up (a speculative program that holds
    collectives)."""
    group = collective_group(entry)
    if group is None:
        return Watch(tier, entry, fused, name)
    if entry.speculative:
        LOG.info("tiered: %s holds collectives and speculates: it stays unfused", name)
        return None
    return AgreedWatch(ranks_of(tier, group), entry, fused, name)


__all__ = ["AGREE_EVERY", "FUSED", "KEPT", "PRIMED", "PRIMING", "UNFUSED", "AgreedWatch",
           "Exchange", "Ranks", "collective_group", "ranks_of", "watch_for"]
