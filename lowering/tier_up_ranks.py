"""Tier-up of programs that hold collectives: every process of the group swaps at one call.

A data-parallel program (``thunder_ir.distributed``'s ``ddp`` and ``fsdp``: all-reduces of
the gradients' buckets, all-gathers of the shards, their reduce-scatters) pairs its
collectives with the other processes' one for one, in order. The fused program's
collectives are put by the same passes (``ddp-allreduce``, ``fsdp-grad-scale``,
``fsdp-zero3``, ``schedule-collectives``) on the same trace, but around another
backward: its gradients may be computed in another order, so its buckets may differ. A
process that ran the fused program while another ran the unfused one would pair
collectives of two programs. So each step of `thunder_ir.lowering.tier_up` is agreed
(`AgreedWatch`):

* at the end of some calls each process starts an asynchronous all-reduce (MAX) of two
  flags over the program's process group (`Exchange`): *not ready* (not hot yet, its
  lowering not agreed yet, kernels still compiling) and *failed* (its lowering or a
  kernel failed). While counting this is every `AGREE_EVERY`-th call from `HOT_CALLS` on
  (the processes' call counts are equal: a program's own collectives need each call on
  every process); once hot, every call;
* the next call first waits for it (it has arrived: the step's backward waited for the
  collectives started after it) and every process acts on the same answer: lower the
  trace, run the fused program's priming call, swap the fused program in, keep the
  unfused one for good (any process failed), or nothing yet.

So every process lowers, primes and swaps at the same call, and swaps only once every
process has all its kernels; one failure anywhere keeps every process unfused. The fused
program keeps the bucketed collectives and their overlap: no fusion region holds a
collective (their ops carry memory effects), so the regions run between them, in the
order the passes scheduled.

Not tiered up: a speculative program that holds collectives (a process whose condition
fails runs another variant there, so the processes' calls of one program would differ).
A program without collectives (a ``ddp`` module's inference program, ``no_sync``'s) tiers
up on each process alone, as on one process: its values differ from the unfused
program's only by the kernels' rounding, and ``ddp``'s gradients are averaged after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from thunder_ir.dialects.dist import CollectiveOp, communicate, process_group
from thunder_ir.lowering.tier_up import COUNTING, HOT_CALLS, KEPT, PRIMING, WAITING, Watch
from thunder_ir.lowering.tiered import LOG
from thunder_ir.runtime.cache import Entry

AGREE_EVERY = 4
"""While counting, the processes exchange their flags every this many calls (from
`HOT_CALLS` on): a program goes hot at most this many calls after the slowest process
would have."""
LOWERED = 4
"""An `AgreedWatch`'s state after its lowering, until the processes agree on priming."""


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


class AgreedWatch(Watch):
    """`Watch` of a program that holds collectives: each change of program is agreed by
    every process of ``group`` at a call boundary (see the module doc)."""

    state: int  # (`Watch`'s: declared for mypy, which sees the sibling package as Any)
    failed: int


    def __init__(self, tier: Any, entry: Entry, fused: Callable[[], Entry], name: str,
                 group: str) -> None:
        super().__init__(tier, entry, fused, name)
        self.group = group
        self.exchange: Exchange | None = None

    def __call__(self, *args: Any) -> Any:
        if self.exchange is not None:
            exchange, self.exchange = self.exchange, None
            swapped = self._agreed(*exchange.flags())
            if swapped is not None:  # every process runs the fused program from this call
                return swapped(*args)
            if self.exchange is not None:  # the lowering's, started by this answer
                return self.unfused(*args)
        state = self.state
        if state == COUNTING:
            out = self._counted(args)
            if self.calls >= HOT_CALLS and self.calls % AGREE_EVERY == 0:
                hot = self.spent >= self.hot_s and \
                    not torch.are_deterministic_algorithms_enabled()
                self.exchange = Exchange(self.group, not hot, False)
            return out
        if state == PRIMING:  # agreed: every process runs the fused program's first call
            assert self.program is not None
            self.state = WAITING
            return self.program.fn(*args)
        if state != WAITING:
            return self.unfused(*args)
        out = self.unfused(*args)  # the kernels compile (here or on another process)
        self.waited += 1
        bg = self.tier.background
        assert bg is not None
        # (the priming call's backward has asked for its kernels before this call)
        self.exchange = Exchange(self.group, bg.status.pending > 0,
                                 bg.status.failed > self.failed)
        return out

    def _counted(self, args: tuple[Any, ...]) -> Any:
        start = time.perf_counter()
        out = self.unfused(*args)
        self.spent += time.perf_counter() - start
        self.calls += 1
        return out

    def _agreed(self, not_ready: bool, failed: bool) -> Callable[..., Any] | None:
        """Acts on the processes' answer, at the start of a call (the same on each);
        returns the fused program's function where they swap at this call."""
        state = self.state
        if failed:  # (a lowering or a kernel failed somewhere: every process keeps)
            if state != KEPT:
                self._keep("another process of its group kept its unfused program, or one "
                           "of this process's kernels failed to compile")
            return None
        if state == COUNTING:
            if not not_ready:
                self._hot()  # (PRIMING; KEPT where the lowering failed; COUNTING where
                # deterministic algorithms were turned on meanwhile)
                lowered = self.state == PRIMING
                if lowered:
                    self.state = LOWERED
                # every process says whether its lowering worked
                self.exchange = Exchange(self.group, False, not lowered)
            return None
        if state == LOWERED:
            self.state = PRIMING
            LOG.info("tiered: %s: every process of group %r has lowered it", self.name,
                     self.group)
        elif state == WAITING and not not_ready:
            bg = self.tier.background
            assert bg is not None
            self.failed = bg.status.failed  # (the agreed answer rules: no failure anywhere)
            LOG.info("tiered: %s: every process of group %r swaps at this call",
                     self.name, self.group)
            return self._swap_or_keep(bg)
        return None


def watch_for(tier: Any, entry: Entry, fused: Callable[[], Entry], name: str
              ) -> Watch | None:
    """The `Watch` of ``entry``'s program: an `AgreedWatch` where it holds collectives;
    None where it may not tier up (a speculative program that holds collectives)."""
    group = collective_group(entry)
    if group is None:
        return Watch(tier, entry, fused, name)
    if entry.speculative:
        LOG.info("tiered: %s holds collectives and speculates: it stays unfused", name)
        return None
    return AgreedWatch(tier, entry, fused, name, group)


__all__ = ["AGREE_EVERY", "LOWERED", "AgreedWatch", "Exchange", "collective_group",
           "watch_for"]
