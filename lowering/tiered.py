"""Tiered compilation: fused kernels compiled off the critical path.

A fusion region of a tiered executor (``thunder_ir.jit(fn, tiered=True)``: the Inductor
executor's regions) runs its unfused Python function, the torch calls the region holds,
until its kernel is compiled. The first call of each region (per stride signature)
hands the compile to one background thread (`BackgroundCompiler`) and returns at once;
the compiled kernel replaces the unfused function at a later call of that region, between
two calls. Both compute the same values (the region's function is what the kernel is
traced from), so a swap never changes a result beyond the fused kernel's rounding, which
the Inductor executor's tests bound already.

Where the compile runs: in a helper process (`Helper`,
`thunder_ir.lowering.compile_helper`; a pool of `compile_workers` of them, 1 on 2 cores),
shared by every tiered executor of the process. A kernel an earlier process compiled is
loaded from the cache of compiled regions instead (`thunder_ir.lowering.region_cache`),
and each one the helper compiles is kept there. The background thread sends a helper
each region's printed function and its inputs' metadata (`Request`; the requests queued
behind the first go at once, each to the least busy helper, so the helpers work while
this process loads), imports what loading needs meanwhile, and loads each finished
kernel as Inductor loads a cached graph (its output code; `compile_helper.Compiled`).
Tracing to an ATen graph and Inductor's
compile therefore never run in this process: they set process-wide state (torch.fx's
"FX tracing" flag, which makes a ``torch.compile``'d function called meanwhile raise, and
the patches FX tracing makes), and Inductor's Python would hold the GIL for seconds
beside the training loop. `TRACING` keeps ``jit``'s own traces apart from a load (which
traces nothing, but imports and runs Inductor's loader). Regions with symbolic sizes,
``THUNDER_IR_TIERED_COMPILE=thread`` (`HELPER_ENV`), and a process whose helper could not
start or died (the compiles then go on here) compile on the thread itself, where
`TRACING` is held for the whole compile; ``torch.compile`` called meanwhile can then fail.

Exit: the helper runs in a session of its own and ends with this process (its group is
killed at exit, and Linux kills it if this process dies: ``PR_SET_PDEATHSIG``), so a
process that exits before a swap loses nothing, waits for nothing and leaves nothing
running. The thread is a daemon; a compile in progress on it is stopped first
(`_stop_at_exit`: an exception raised in the thread, which unwinds it through torch's
C++ frames as any error does), since CPython ends a daemon thread that is still running
by ``pthread_exit``, and that unwinding through torch's C++ frames aborts the process
("terminate called without an active exception", about one exit in six here). A compile
that fails leaves the unfused function in place; the warning is raised on the training
thread, at the region's next call.

A compiled kernel replaces the unfused function only where it is faster: its first call
times both on that call's inputs (`measured`) and keeps the faster, so a region Inductor
does not speed up (a lone matrix product, whose kernel is the same BLAS call) stays
unfused. `Status` counts the kernels compiling, compiled, failed and kept unfused, with
each region's two timings (`thunder_ir.compile_status`); each compile and each choice is
logged at the INFO level on the ``thunder_ir.tiered`` logger.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder_ir.lowering import region_cache
from thunder_ir.lowering.compile_helper import Compiled, Request, fx_cache_hits

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
        cache_hits: kernels Inductor found in its FX graph cache (an earlier process, or
            an earlier compile of the same graph, compiled it: no code generation).
        loaded: kernels loaded from thunder_ir's own cache of compiled regions
            (`thunder_ir.lowering.region_cache`: an earlier process compiled them; no
            helper, no trace, no compile). ``compiled - loaded`` were compiled here.
    """

    pending: int = 0
    compiled: int = 0
    failed: int = 0
    seconds: float = 0.0
    unfused: int = 0
    timings: list[tuple[str, float, float]] = field(default_factory=list)
    cache_hits: int = 0
    loaded: int = 0

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


def _at_exit() -> None:
    """Ends the helper first (a thread waiting for its reply then stops), then stops the
    compiles in progress on threads (`_stop_at_exit`)."""
    for compiler in list(_COMPILERS):
        compiler._exiting = True
    end_helpers()
    _stop_at_exit()


atexit.register(_at_exit)


@dataclass
class _Job:
    name: str
    compile: Callable[[], Callable[..., Any]]
    done: Callable[[Callable[..., Any] | None, BaseException | None], None]
    # In a helper process: the request, and what loads its result into a kernel.
    request: Request | None = None
    load: Callable[[Compiled], Callable[..., Any]] | None = None
    warm: Callable[[], None] | None = None  # what loading imports, while the helper works
    modes: Any = None  # the global modes where it was asked (`region_cache.region_key`)
    stored: Any = None  # `region_cache.lookup`'s answer once looked up (False: none)


HELPER_ENV = "THUNDER_IR_TIERED_COMPILE"
"""``process`` (the default): compile in a helper process (`Helper`); ``thread``: on the
background thread itself, as a fallback and for regions with symbolic sizes."""


class HelperError(RuntimeError):
    """The helper process could not start, or ended before it answered: compiles go on on
    the thread."""


class Helper:
    """The compile helper process (`thunder_ir.lowering.compile_helper`), started on the
    first request. Its own session, so that an exit ends it and every compiler it ran
    (`kill`, at exit); it also ends when its stdin closes or its parent dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir = tempfile.mkdtemp(prefix="thunder_ir_tiered_")
        self.count = 0
        self.write = threading.Lock()  # compilers on several threads share the helper
        self.read = threading.Lock()
        self.replies: dict[str, tuple[Compiled | None, str | None]] = {}  # by path
        self.sent: set[str] = set()
        self.owner = os.getpid()  # a forked child neither uses nor ends its parent's helper
        self.starts = 0  # processes started
        self.answered = 0  # requests answered since it started
        self.cpu_s = 0.0  # CPU seconds of its ended processes (and their compilers)
        _HELPERS.add(self)  # its files are removed at exit

    def start(self) -> subprocess.Popen[bytes]:
        if self.owner != os.getpid():
            raise OSError("the compile helper belongs to the parent of this forked process")
        if self.proc is None:
            self.starts += 1
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "thunder_ir.lowering.compile_helper", str(self.owner)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        return self.proc

    def send(self, request: Request) -> None:
        """Queues a request with the helper (once per request)."""
        with self.write:
            if request.path in self.sent:
                return
            _SENT_TO[request.path] = self
            try:
                proc = self.start()
                assert proc.stdin is not None
                pickle.dump(request, proc.stdin)
                proc.stdin.flush()
            except OSError as e:
                self.kill()
                raise HelperError(f"the compile helper ended ({type(e).__name__}: {e})"
                                  ) from None
            self.sent.add(request.path)

    def compile(self, request: Request) -> Compiled:
        """Sends the request (if it was not) and waits for its reply (the GIL is free
        meanwhile). Raises the helper's error, or `HelperError`."""
        self.send(request)
        path = request.path
        while True:
            with self.read:
                if path in self.replies:
                    compiled, error = self.replies.pop(path)
                    break
                proc = self.proc
                try:
                    if proc is None or proc.stdout is None:
                        raise EOFError("not running")
                    got, done, err = pickle.load(proc.stdout)
                except (EOFError, OSError, pickle.UnpicklingError) as e:
                    self.kill()
                    raise HelperError(f"the compile helper ended ({type(e).__name__}: {e})"
                                      ) from None
                self.replies[got] = (done, err)
        self.answered += 1
        _SENT_TO.pop(path, None)
        if compiled is None:
            raise RuntimeError(f"in the compile helper: {error}")
        return compiled

    def peak_rss_mib(self) -> float | None:
        """The running helper's peak resident memory (Linux), else None."""
        if self.proc is None:
            return None
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def artifact_path(self, name: str) -> str:
        """A file of its own for one request's output code."""
        self.count += 1
        return os.path.join(self.dir, f"{name}_{self.count}.py")

    def kill(self) -> None:
        """Ends the helper and its children (a compiler it runs); a later request starts
        another."""
        if self.owner != os.getpid():
            return
        proc, self.proc = self.proc, None
        if proc is not None:
            self.cpu_s += _cpu_seconds(proc.pid)
        self.sent.clear()
        self.answered = 0
        for path in [p for p, h in _SENT_TO.items() if h is self]:
            del _SENT_TO[path]
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (OSError, AttributeError):  # (no process groups on Windows)
                    proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):  # unsent bytes: the helper is gone
                        pipe.close()


_HELPERS: weakref.WeakSet[Helper] = weakref.WeakSet()
_helper_failed: list[str] = []  # why the helper could not serve (then threads compile)
_SHARED: list[Helper] = []
_SENT_TO: dict[str, Helper] = {}  # each request sent, by path: the helper compiling it

WORKERS_ENV = "THUNDER_IR_COMPILE_WORKERS"
"""How many compile helper processes compile a process's regions in parallel
(`compile_workers`)."""
MAX_WORKERS = 4
"""At most this many helpers by default (each holds ~450 MiB)."""


def compile_workers() -> int:
    """The helpers of this process (`WORKERS_ENV`, else the cores this process may run
    on, less the training loop's, at most `MAX_WORKERS`: 1 on 2 cores)."""
    given = os.environ.get(WORKERS_ENV)
    if given:
        return max(1, int(given))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (not on Linux)
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores - 1))


def shared_helper() -> Helper:
    """The process's first compile helper (made on first use; started on first request)."""
    return helper_pool()[0]


def helper_pool() -> list[Helper]:
    """The process's compile helpers, `compile_workers` of them (made on first use, each
    started on its first request)."""
    if not _SHARED:
        _SHARED.extend(Helper() for _ in range(compile_workers()))
    return _SHARED


def helper_for(request: Request) -> Helper:
    """The helper that compiles ``request``: the one it was sent to, else the one with
    the fewest requests not yet answered (the first among equals)."""
    sent = _SENT_TO.get(request.path)
    if sent is not None:
        return sent
    pool = helper_pool()
    return min(pool, key=lambda h: len(h.sent) - h.answered)


def helper_if_made() -> Helper | None:
    """The process's first compile helper if a tiered compile has made it, else None."""
    return _SHARED[0] if _SHARED else None


def helper_starts() -> int:
    """How many helper processes this process has started so far."""
    return sum(h.starts for h in _SHARED)


def helper_cpu_seconds() -> float:
    """The CPU seconds the helpers this process started have spent, with the compilers
    they ran (Linux; ended and running helpers of the pool)."""
    return sum(h.cpu_s + (_cpu_seconds(h.proc.pid) if h.proc is not None else 0.0)
               for h in _SHARED)


def _cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time, with its waited-for children's (0 where
    ``/proc`` does not say)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def end_helpers() -> None:
    """Ends this process's compile helpers (and removes their files): at exit, or when a
    program wants the helpers' resources back (compiles not yet done are lost; the
    regions then stay unfused). A later compile makes a new pool (`helper_pool`)."""
    for helper in list(_HELPERS):
        if helper.owner == os.getpid():
            helper.kill()
            shutil.rmtree(helper.dir, ignore_errors=True)
    _SHARED[:] = [h for h in _SHARED if h.owner != os.getpid()]  # (a fork: its parent's)


def stop_idle_helper() -> None:
    """Ends the compile helper's process (its ~450 MiB) when no compiler of this process
    has a compile pending; a later request starts it again. Its files stay: kernels
    loaded from them keep their sources for tracebacks."""
    running = [h for h in _SHARED if h.proc is not None]
    if not running:
        return
    if all(c.status.pending == 0 for c in list(_COMPILERS)):
        for helper in running:
            with helper.write:
                helper.kill()
        LOG.info("tiered: the compile helper ended (nothing pending)")


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
    unkept: int = 0
    """Kernels compiled that are not in the cache of compiled regions (compiled on this
    thread, or the cache could not keep them)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> BackgroundCompiler:
        return BackgroundCompiler()  # a copy of a jitted callable compiles its own

    def __reduce__(self) -> tuple[Any, ...]:
        return (BackgroundCompiler, ())

    def submit(self, name: str, compile: Callable[[], Callable[..., Any]],
               done: Callable[[Callable[..., Any] | None, BaseException | None], None],
               request: Request | None = None,
               load: Callable[[Compiled], Callable[..., Any]] | None = None,
               warm: Callable[[], None] | None = None) -> None:
        """Queues ``compile()``; ``done(kernel, error)`` is called on the thread after.
        With a ``request`` (and the ``load`` of its artifact), the helper process
        compiles it instead, unless `HELPER_ENV` says ``thread`` or the helper failed
        to start (then ``compile()`` runs here)."""
        modes = None
        if request is not None:
            from thunder_ir.dialects.modes import mode_key

            modes = mode_key()
        with self._lock:
            self.status.pending += 1
            self._last_submit = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="thunder_ir-tiered",
                                                daemon=True)
                _COMPILERS.add(self)
                self._thread.start()
        self._queue.put(_Job(name, compile, done, request, load, warm, modes))

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
            kernel = self._compile(job)
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

    def _compile(self, job: _Job) -> Callable[..., Any]:
        """The job's kernel: loaded from the cache of compiled regions
        (`thunder_ir.lowering.region_cache`), or compiled by the helper and loaded here
        (`TRACING` held only for the load) and kept in that cache, or compiled on this
        thread."""
        if job.request is not None and job.load is not None:
            kernel = self._stored(job)
            if kernel is not None:
                return kernel
        if job.request is not None and job.load is not None and not _helper_failed:
            try:
                with self._queue.mutex:  # the jobs queued behind it go to the helpers
                    waiting = list(self._queue.queue)  # too, each to the least busy
                for j in (job, *waiting):  # (those not kept in the cache)
                    if j.request is not None and j.load is not None and (
                            j is job or not _looked_up(j)):
                        helper_for(j.request).send(j.request)
                if job.warm is not None:  # the imports of loading, while the helper works
                    with TRACING, contextlib.suppress(Exception):  # (the load reports it)
                        job.warm()
                compiled = helper_for(job.request).compile(job.request)
            except HelperError as e:  # compile here from now on
                if self._exiting:
                    raise _Exiting from None
                _helper_failed.append(str(e))
                LOG.warning("tiered: %s; compiling on a thread instead", e)
            else:
                with TRACING:  # (the output code stays, for tracebacks, until exit)
                    kernel = job.load(compiled)
                if compiled.cache_hit:
                    with self._lock:
                        self.status.cache_hits += 1
                if not region_cache.store(job.request, job.modes, compiled):
                    self.unkept += 1
                return kernel
        self.unkept += 1  # (compiled here: not kept for a later process)
        with TRACING:
            hits = fx_cache_hits()
            kernel = job.compile()
            if fx_cache_hits() > hits:
                with self._lock:
                    self.status.cache_hits += 1
            return kernel

    def _stored(self, job: _Job) -> Callable[..., Any] | None:
        """The job's kernel loaded from the cache of compiled regions, or None (none
        kept, or it did not load: that file is removed and the region compiles)."""
        assert job.request is not None and job.load is not None
        found = _looked_up(job)
        job.stored = False
        if not found:
            return None
        compiled, path = found
        start = time.perf_counter()
        try:
            with TRACING:
                kernel = job.load(compiled)
        except Exception as e:  # a stale or damaged entry: compiled anew
            LOG.info("tiered: %s: the kept kernel did not load (%s: %s); compiling it",
                     job.name, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            region_cache.discard(path)
            return None
        with self._lock:
            self.status.loaded += 1
        LOG.info("tiered: %s loaded from the cache of compiled regions in %.2f s", job.name,
                 time.perf_counter() - start)
        return kernel

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


def _looked_up(job: _Job) -> Any:
    """`region_cache.lookup` of a job's request, once (False: none kept)."""
    if job.stored is None:
        assert job.request is not None
        try:
            job.stored = region_cache.lookup(job.request, job.modes) or False
        except Exception as e:  # (Inductor's loader missing, say): compiled as before
            LOG.info("tiered: %s: the cache of compiled regions failed (%s: %s)", job.name,
                     type(e).__name__, e)
            job.stored = False
    return job.stored


def measured(name: str, fused: Callable[..., Any], unfused: Callable[..., Any],
             install: Callable[[Callable[..., Any]], None], status: Status,
             rounds: int = 3, *, draws: bool = False) -> Callable[..., Any]:
    """The kernel's first call: times the compiled kernel and the region's unfused
    function on the call's own inputs (``rounds`` each, alternating; the best of each),
    installs the faster for the region's later calls (``install``), and returns its
    result. A region where Inductor's kernel does not pay (a lone matmul, say) stays
    unfused. A region that ``draws`` random numbers makes each run from the generators'
    state at the call, so the call draws what one run would, and leaves them so."""

    def first_call(*args: Any) -> Any:
        cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
        best = {fused: float("inf"), unfused: float("inf")}
        outs: dict[Any, Any] = {}
        states = _rng_states() if draws else None
        for _ in range(rounds):
            for f in (fused, unfused):
                if states is not None:
                    _set_rng_states(states)
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


def _rng_states() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """The default CPU generator's state, and every CUDA device's where CUDA is in use."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_states(states: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state_all(states[1])


def warn_failures(compiler: BackgroundCompiler, executor: str) -> None:
    """Raises the background failures as warnings on this thread."""
    for msg in compiler.take_warnings():
        warnings.warn(f"{executor}: {msg}", RuntimeWarning, stacklevel=3)


__all__ = ["HELPER_ENV", "LOG", "MAX_WORKERS", "TRACING", "WORKERS_ENV", "BackgroundCompiler",
           "Helper", "HelperError", "Status", "compile_workers", "end_helpers", "helper_for",
           "helper_cpu_seconds", "helper_if_made", "helper_pool", "helper_starts", "measured",
           "shared_helper", "stop_idle_helper", "warn_failures"]
