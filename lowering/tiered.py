"""Tiered compilation: fused kernels compiled off the critical path.

A fusion region of a tiered executor (``thunder_ir.jit(fn, tiered=True)``: the Inductor
executor's regions) runs its unfused Python function, the torch calls the region holds,
until its kernel is compiled. The first call of each region (per stride signature)
hands the compile to one background thread (`BackgroundCompiler`) and returns at once;
the compiled kernel replaces the unfused function at a later call of that region, between
two calls. Both compute the same values (the region's function is what the kernel is
traced from), so a swap never changes a result beyond the fused kernel's rounding, which
the Inductor executor's tests bound already.

Why a thread: the compile's slow parts are Inductor's code generation and the C++
compiler, which runs in a subprocess and releases the GIL; the training loop keeps
running meanwhile (slower while the thread holds the GIL: `docs/performance.md` measures
it). The thread is a daemon: a process that exits before a swap loses nothing and waits
for nothing. At exit a compile in progress is stopped first (`_stop_at_exit`: an
exception raised in the thread, which unwinds it through torch's C++ frames as any error
does), since CPython ends a daemon thread that is still running by ``pthread_exit``, and
that unwinding through torch's C++ frames aborts the process ("terminate called without
an active exception", about one exit in six here). A compile that fails leaves the
unfused function in place; the warning is raised on the training thread, at the region's
next call. ``make_fx`` is not thread-safe with other FX tracing: `TRACING` keeps
``jit``'s own traces apart from a background compile, but not ``torch.compile`` (Dynamo)
called while a kernel compiles, which can fail ("SpeculationLog diverged"); wait with
``thunder_ir.compile_status(jm, wait=None)`` before compiling other code with
``torch.compile`` in the same process.

A compiled kernel replaces the unfused function only where it is faster: its first call
times both on that call's inputs (`measured`) and keeps the faster, so a region Inductor
does not speed up (a lone matrix product, whose kernel is the same BLAS call) stays
unfused. `Status` counts the kernels compiling, compiled, failed and kept unfused, with
each region's two timings (`thunder_ir.compile_status`); each compile and each choice is
logged at the INFO level on the ``thunder_ir.tiered`` logger.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

LOG = logging.getLogger("thunder_ir.tiered")

TRACING = threading.RLock()
"""Held while a background compile traces and compiles, and by ``jit``'s own tracing:
``make_fx`` sets torch.fx's process-wide "FX tracing" flag, which user code and torch
read (``torch.fx._symbolic_trace.is_fx_tracing()``), so a trace on the calling thread
must not overlap one (a miss waits for the compile in progress)."""

QUIET_S = 0.25
"""The thread starts a compile once no region has asked for one for this long: the call
that asked (a first training step submits its forward's and its backward's regions) then
runs without sharing the GIL with a compile."""


@dataclass
class Status:
    """What a tiered executor has compiled so far.

    Attributes:
        pending: kernels queued or compiling.
        compiled: kernels swapped in (or ready for their region's next call).
        failed: kernels whose compile failed (their regions stay unfused).
        seconds: background compile time so far.
        unfused: compiled kernels that lost to their region's unfused function when both
            were timed on the region's real inputs (`measured`): that region stays unfused.
        timings: ``(kernel, fused_ms, unfused_ms)`` of each region timed so far.
    """

    pending: int = 0
    compiled: int = 0
    failed: int = 0
    seconds: float = 0.0
    unfused: int = 0
    timings: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Every kernel asked for so far is compiled (or failed)."""
        return self.pending == 0


class _Exiting(BaseException):
    """Raised in a compiling thread when the process exits (`_stop_at_exit`); not an
    `Exception`, so that no ``except Exception`` on the way swallows it."""


_COMPILERS: weakref.WeakSet[BackgroundCompiler] = weakref.WeakSet()
"""The compilers whose thread has started (for `_stop_at_exit`)."""

EXIT_WAIT_S = 1.0
"""How long an exit waits for a stopped compile to unwind. A thread running Python takes
the exception within milliseconds; one blocked in a system call (waiting for the C++
compiler, sleeping) takes it only when the call returns, and is safe to leave: it does
not run again before the process ends."""


def _stop_at_exit() -> None:
    """Stops the compiles in progress before the interpreter ends their threads: raises
    `_Exiting` in each compiling thread (at its next Python bytecode) until it has
    unwound, or `EXIT_WAIT_S` has passed. Again every 20 ms: an exception that lands in
    a weakref callback is printed and dropped there. A thread waiting for work, or
    sleeping between jobs, is left alone: ending it is safe."""
    for compiler in list(_COMPILERS):
        compiler._exiting = True
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline:
        busy = [t for c in list(_COMPILERS) if c._busy and (t := c._thread) is not None
                and t.is_alive()]
        if not busy:
            return
        for thread in busy:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident or 0),
                                                       ctypes.py_object(_Exiting))
        for thread in busy:
            thread.join(0.02)


atexit.register(_stop_at_exit)


@dataclass
class _Job:
    name: str
    compile: Callable[[], Callable[..., Any]]
    done: Callable[[Callable[..., Any] | None, BaseException | None], None]


@dataclass(eq=False)  # (hashed by identity: `_COMPILERS`)
class BackgroundCompiler:
    """One daemon thread that runs compile jobs in order (started on the first job)."""

    status: Status = field(default_factory=Status)
    _queue: queue.Queue[_Job] = field(default_factory=queue.Queue)
    _thread: threading.Thread | None = None
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _warnings: list[str] = field(default_factory=list)
    _last_submit: float = 0.0
    _busy: bool = False  # a compile is running
    _exiting: bool = False  # the process is exiting: start nothing more

    def __deepcopy__(self, memo: dict[int, Any]) -> BackgroundCompiler:
        return BackgroundCompiler()  # a copy of a jitted callable compiles its own

    def __reduce__(self) -> tuple[Any, ...]:
        return (BackgroundCompiler, ())

    def submit(self, name: str, compile: Callable[[], Callable[..., Any]],
               done: Callable[[Callable[..., Any] | None, BaseException | None], None]
               ) -> None:
        """Queues ``compile()``; ``done(kernel, error)`` is called on the thread after."""
        with self._lock:
            self.status.pending += 1
            self._last_submit = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="thunder_ir-tiered",
                                                daemon=True)
                _COMPILERS.add(self)
                self._thread.start()
        self._queue.put(_Job(name, compile, done))

    def _run(self) -> None:
        try:
            while not self._exiting:
                self._run_one(self._queue.get())
        except _Exiting:  # the process exits (`_stop_at_exit`)
            return

    def _run_one(self, job: _Job) -> None:
        while (quiet := time.monotonic() - self._last_submit) < QUIET_S:
            time.sleep(QUIET_S - quiet)
        if self._exiting:
            return
        start = time.perf_counter()
        kernel: Callable[..., Any] | None = None
        error: BaseException | None = None
        self._busy = True
        try:
            with TRACING:
                kernel = job.compile()
        except Exception as e:  # a region Inductor cannot compile stays unfused
            error = e
        finally:
            self._busy = False
        secs = time.perf_counter() - start
        job.done(kernel, error)
        with self._lock:
            st = self.status
            st.pending -= 1
            st.seconds += secs
            if error is None:
                st.compiled += 1
                LOG.info("tiered: %s compiled in %.2f s (%d compiled, %d pending)",
                         job.name, secs, st.compiled, st.pending)
            else:
                st.failed += 1
                first = str(error).splitlines()[0] if str(error) else ""
                self._warnings.append(f"compiling {job.name} in the background failed, "
                                      f"it stays unfused ({type(error).__name__}: "
                                      f"{first})")
            self._lock.notify_all()

    def take_warnings(self) -> list[str]:
        """The failures not reported yet (the caller warns on its own thread)."""
        if not self._warnings:
            return []
        with self._lock:
            out, self._warnings[:] = list(self._warnings), []
        return out

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until no compile is pending (or ``timeout`` seconds); True if none is."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self.status.pending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._lock.wait(left)
        return True


def measured(name: str, fused: Callable[..., Any], unfused: Callable[..., Any],
             install: Callable[[Callable[..., Any]], None], status: Status,
             rounds: int = 3) -> Callable[..., Any]:
    """The kernel's first call: times the compiled kernel and the region's unfused
    function on the call's own inputs (``rounds`` each, alternating; the best of each),
    installs the faster for the region's later calls (``install``), and returns its
    result. A region where Inductor's kernel does not pay (a lone matmul, say) stays
    unfused."""

    def first_call(*args: Any) -> Any:
        cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        best = {fused: float("inf"), unfused: float("inf")}
        outs: dict[Any, Any] = {}
        for _ in range(rounds):
            for f in (fused, unfused):
                if cuda:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                outs[f] = f(*args)
                if cuda:
                    torch.cuda.synchronize()
                best[f] = min(best[f], time.perf_counter() - start)
        winner = fused if best[fused] <= best[unfused] else unfused
        install(winner)
        status.timings.append((name, best[fused] * 1e3, best[unfused] * 1e3))
        if winner is unfused:
            status.unfused += 1
        LOG.info("tiered: %s fused %.3f ms, unfused %.3f ms: %s", name, best[fused] * 1e3,
                 best[unfused] * 1e3, "fused" if winner is fused else "kept unfused")
        return outs[winner]

    return first_call


def warn_failures(compiler: BackgroundCompiler, executor: str) -> None:
    """Raises the background failures as warnings on this thread."""
    for msg in compiler.take_warnings():
        warnings.warn(f"{executor}: {msg}", RuntimeWarning, stacklevel=3)


__all__ = ["LOG", "TRACING", "BackgroundCompiler", "Status", "measured", "warn_failures"]
