"""Tiered compilation (``jit(fn, tiered=True)``, `thunder_ir.lowering.tiered`): the
Inductor executor's regions run unfused until a helper process (or, as the fallback, a
thread) has compiled them, and every result, before and after the swap, equals the
unfused program's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest
import torch
from torch import nn

import thunder_ir
from thunder_ir.lowering import inductor_executor, region_cache
from thunder_ir.lowering import tiered as tiering

pytestmark = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


@pytest.fixture(autouse=True)
def _compiled_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the compile itself (in the helper, on the thread, at exit):
    no kernel comes from the cache of compiled regions an earlier test filled
    (tests/test_tier_up_cache.py tests that cache), and one helper compiles (unless a
    test says otherwise). Subprocesses inherit it."""
    monkeypatch.setenv(region_cache.ENV, "0")
    monkeypatch.setenv(tiering.WORKERS_ENV, "1")  # (one helper: the ones tests replace)
    if tiering.helper_if_made() is not None and len(tiering.helper_pool()) != 1:
        tiering.end_helpers()  # (made again at that size)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.LayerNorm(48), nn.Linear(48, 8))


def _step(fn: Any, model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
    loss = fn(x).square().mean()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _same(a: tuple[torch.Tensor, list[Any]], b: tuple[torch.Tensor, list[Any]]) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=1e-5, atol=1e-6)
    for g, h in zip(a[1], b[1], strict=True):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


def _first_step_then_wait(model: nn.Module, jm: Any
                          ) -> tuple[Any, torch.Tensor, dict[str, Any]]:
    """The unfused program of ``model``, an input, and ``jm``'s compile status once its
    first step (checked against the unfused one's) has had every kernel compiled."""
    unfused = thunder_ir.jit(model)
    x = torch.randn(16, 32)
    _same(_step(jm, model, x), _step(unfused, model, x))
    return unfused, x, thunder_ir.compile_status(jm, wait=None)


def test_results_before_and_after_the_swap_equal_the_unfused_programs() -> None:
    model = _model()
    unfused = thunder_ir.jit(model)
    tiered = thunder_ir.jit(model, tiered=True)
    x = torch.randn(16, 32)
    _same(_step(tiered, model, x), _step(unfused, model, x))  # unfused: compiling
    status = thunder_ir.compile_status(tiered)
    assert status["pending"] + status["compiled"] >= 2  # a forward and a backward region
    done = thunder_ir.compile_status(tiered, wait=None)
    assert done["ready"] and done["failed"] == 0 and done["compiled"] >= 2, done
    for _ in range(2):  # fused now
        _same(_step(tiered, model, x), _step(unfused, model, x))
    assert "inductorFusion0(" in str(thunder_ir.last_traces(tiered)[-1])
    assert thunder_ir.cache_misses(tiered) == 1
    timed = thunder_ir.compile_status(tiered)["timings"]
    assert len(timed) >= 2 and all(f > 0 and u > 0 for _, f, u in timed)


def test_two_helpers_compile_in_parallel_with_the_same_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``THUNDER_IR_COMPILE_WORKERS=2`` (a pool of two helper processes: by default the
    cores less the training loop's, so 1 on 2 cores): the forward's and the backward's
    regions go to different helpers at once, and the kernels give the values and
    gradients of the unfused program, before and after the swap."""
    monkeypatch.setenv(tiering.WORKERS_ENV, "2")
    monkeypatch.setattr(tiering, "_helper_failed", [])
    monkeypatch.delenv(tiering.HELPER_ENV, raising=False)
    tiering.end_helpers()  # a pool of two, from here on
    assert tiering.compile_workers() == 2 and len(tiering.helper_pool()) == 2
    model = _model()
    jm = thunder_ir.jit(model, tiered=True)
    unfused, x, status = _first_step_then_wait(model, jm)
    assert status["compiled"] >= 2 and status["failed"] == 0 and status["loaded"] == 0
    assert [h.starts for h in tiering.helper_pool()] == [1, 1]  # both compiled one
    for _ in range(2):  # fused now
        _same(_step(jm, model, x), _step(unfused, model, x))
    assert "inductorFusion0(" in str(thunder_ir.last_traces(jm)[-1])
    assert not tiering._helper_failed
    tiering.end_helpers()
    monkeypatch.setenv(tiering.WORKERS_ENV, "1")


def test_the_default_pool_leaves_the_training_loop_a_core(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiering.WORKERS_ENV)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    assert tiering.compile_workers() == max(1, min(tiering.MAX_WORKERS, cores - 1))


def test_a_swap_during_gradient_accumulation() -> None:
    """Micro-batches accumulate gradients across the swap: the sum is eager's."""
    model = _model()
    eager = _model()
    tiered = thunder_ir.jit(model, tiered=True)
    batches = [torch.randn(8, 32, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    for i, x in enumerate(batches):
        if i == 2:
            assert thunder_ir.compile_status(tiered, wait=None)["ready"]
        tiered(x).square().mean().backward()
        eager(x).square().mean().backward()
    for p, q in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_the_main_process_never_traces_while_the_helper_compiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing sets torch.fx's process-wide "FX tracing" flag, and a ``torch.compile``'d
    function called while it is set raises. With the helper process (the default) this
    process never sets it: sampled on this thread all through the compile (it is set
    during ``make_fx`` when a thread compiles, ``THUNDER_IR_TIERED_COMPILE=thread``)."""
    monkeypatch.delenv(tiering.HELPER_ENV, raising=False)
    monkeypatch.setattr(tiering, "_helper_failed", [])
    model = _model()
    jm = thunder_ir.jit(model, tiered=True)
    _step(jm, model, torch.randn(16, 32))
    seen = samples = 0
    while not thunder_ir.compile_status(jm)["ready"]:
        seen += torch.fx._symbolic_trace.is_fx_tracing()
        samples += 1
    status = thunder_ir.compile_status(jm)
    assert status["compiled"] >= 2 and status["failed"] == 0, status
    assert samples > 1000 and seen == 0, (samples, seen)
    assert tiering.shared_helper().proc is not None  # the helper compiled them


def test_a_helper_that_dies_leaves_the_compiles_to_a_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiering.HELPER_ENV, raising=False)
    monkeypatch.setattr(tiering, "_helper_failed", [])
    helper = tiering.shared_helper()
    helper.kill()
    real_start = helper.start

    def start_and_die() -> Any:
        proc = real_start()
        proc.kill()
        proc.wait()
        return proc

    monkeypatch.setattr(helper, "start", start_and_die)
    model = _model()
    jm = thunder_ir.jit(model, tiered=True)
    unfused, x, status = _first_step_then_wait(model, jm)
    assert status["compiled"] >= 2 and status["failed"] == 0, status
    assert tiering._helper_failed and "helper ended" in tiering._helper_failed[0]
    _same(_step(jm, model, x), _step(unfused, model, x))


def test_a_compile_that_fails_in_the_helper_leaves_the_unfused_region(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tiering.HELPER_ENV, raising=False)
    monkeypatch.setattr(tiering, "_helper_failed", [])
    model = _model()
    executor = inductor_executor.InductorExecutor({"no_such_inductor_option": 1}, tiered=True)
    jm = thunder_ir.jit(model, executors=[executor, *thunder_ir.get_default_executors()])
    unfused, x, status = _first_step_then_wait(model, jm)
    assert status["failed"] >= 2 and status["compiled"] == 0, status
    with pytest.warns(RuntimeWarning, match="in the compile helper: .*no_such_inductor_option"):
        result = _step(jm, model, x)
    _same(result, _step(unfused, model, x))
    assert not tiering._helper_failed  # the helper itself is fine


class _Scaled(nn.Module):
    """A forward that makes a tensor from Python numbers: its region's graph holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * torch.tensor([1.0, -2.0, 0.5])


def test_a_region_that_makes_tensors_from_numbers_compiles_in_the_helper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A region whose graph makes a tensor of its own (``torch.tensor([...])``) loads with
    what its compiled graph holds: the kernels take the region's inputs, as they would
    compiled on a thread (a standalone compile had lifted such tensors into inputs no
    caller passes)."""
    monkeypatch.delenv(tiering.HELPER_ENV, raising=False)
    monkeypatch.setattr(tiering, "_helper_failed", [])
    torch.manual_seed(0)
    model = _Scaled()
    jm = thunder_ir.jit(model, tiered=True)
    unfused, x, status = _first_step_then_wait(model, jm)
    assert status["compiled"] >= 2 and status["failed"] == 0, status
    for _ in range(2):  # every kernel runs
        _same(_step(jm, model, x), _step(unfused, model, x))
    assert len(thunder_ir.compile_status(jm)["timings"]) >= 2
    assert not tiering._helper_failed


def test_a_forked_child_leaves_its_parents_helper_alone() -> None:
    """A child forked from a process with a helper (a data-loader worker) that exits
    through ``atexit`` neither ends nor removes the parent's helper."""
    helper = tiering.shared_helper()
    proc = helper.start()
    pid = os.fork()
    if pid == 0:  # the child: what its exit would run
        tiering.end_helpers()
        os._exit(0)
    os.waitpid(pid, 0)
    assert helper.proc is proc and proc.poll() is None
    assert os.path.isdir(helper.dir)


def test_a_failing_background_compile_leaves_the_unfused_region(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no compiler today")

    monkeypatch.setenv(tiering.HELPER_ENV, "thread")
    monkeypatch.setattr(inductor_executor, "_compile_graph", broken)
    model = _model()
    tiered = thunder_ir.jit(model, tiered=True)
    unfused, x, status = _first_step_then_wait(model, tiered)
    assert status["failed"] >= 2 and status["compiled"] == 0 and status["ready"]
    with pytest.warns(RuntimeWarning, match="stays unfused .RuntimeError: no compiler today"):
        result = _step(tiered, model, x)
    _same(result, _step(unfused, model, x))


def test_each_kernel_is_kept_only_where_it_is_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiled kernel's first call times it against the region's unfused function on
    the same inputs and keeps the faster: a kernel slower than the torch calls it replaces
    is dropped, and the region stays unfused."""
    def slow(fn: Any, mode: Any, fake: Any, single: bool, options: Any) -> Any:
        def kernel(*args: Any) -> Any:
            time.sleep(0.01)
            return fn(*args)
        return kernel

    monkeypatch.setenv(tiering.HELPER_ENV, "thread")
    monkeypatch.setattr(inductor_executor, "_compile_graph", slow)
    model = _model()
    unfused = thunder_ir.jit(model)
    tiered = thunder_ir.jit(model, tiered=True)
    x = torch.randn(16, 32)
    _step(tiered, model, x)
    assert thunder_ir.compile_status(tiered, wait=None)["compiled"] >= 2
    for _ in range(2):
        _same(_step(tiered, model, x), _step(unfused, model, x))
    status = thunder_ir.compile_status(tiered)
    assert status["unfused"] == len(status["timings"]) >= 2, status
    assert all(fused > unfused_ms for _, fused, unfused_ms in status["timings"])


_EXIT = """
import time, torch, thunder_ir
from thunder_ir.lowering import inductor_executor

real = inductor_executor._compile_graph


def long_compile(*args, **kwargs):  # Inductor's compile, then 60 s more of "compiling"
    out = real(*args, **kwargs)
    time.sleep(60)
    return out


inductor_executor._compile_graph = long_compile
m = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 8))
jm = thunder_ir.jit(m, tiered=True)
jm(torch.randn(4, 32)).sum().backward()
time.sleep(0.5)  # the thread is compiling
print(thunder_ir.compile_status(jm)["pending"], time.time())
"""


_SPIN = """
import time, torch
from torch.utils._python_dispatch import TorchDispatchMode
from thunder_ir.lowering.tiered import BackgroundCompiler


class Mode(TorchDispatchMode):  # every op: torch's C++ dispatcher -> Python -> C++
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def spin():  # a "compile" in and out of torch's C++ frames until the process ends
    x = torch.ones(8)
    with Mode():
        while True:
            x = x + 1


compiler = BackgroundCompiler()
compiler.submit("spin", spin, lambda kernel, error: None)
time.sleep(0.6)  # past the thread's quiet wait: it is spinning
print(time.time())
"""


def test_an_exit_while_the_thread_runs_torch_code_stops_it_and_does_not_abort() -> None:
    """A process that exits while the compile thread is inside torch's C++ frames (each
    op calls back into Python here) exits normally: CPython would end the thread by
    ``pthread_exit``, whose unwinding through those frames aborts the process
    ("terminate called without an active exception"; every time without
    `tiered._stop_at_exit`), so the exit raises in the thread first and waits for it."""
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(_SPIN)],
                             capture_output=True, text=True, timeout=120)
        exited = time.time()
        assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
        assert exited - float(out.stdout.split()[-1]) < 5.0


@pytest.mark.parametrize("where", ["process", "thread"])
def test_an_exit_during_the_background_compile_waits_for_nothing_and_leaves_nothing(
        tmp_path: Any, where: str) -> None:
    """The process exits while its kernels compile (on a thread each takes a minute here;
    the helper's compile, with an empty Inductor cache, takes seconds): at once, and no
    process of its own (the helper, a compiler either started) is left running."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "THUNDER_IR_TIERED_TEST": mark, tiering.HELPER_ENV: where,
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_EXIT)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    exited = time.time()
    pending, printed = out.stdout.split()[-2:]
    assert int(pending) >= 1, out.stdout  # still compiling when the script ended
    assert exited - float(printed) < 10.0, (exited - float(printed), out.stderr[-2000:])
    time.sleep(1.0)
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    left.append(pid)
        except OSError:
            continue
    assert left == [], left
