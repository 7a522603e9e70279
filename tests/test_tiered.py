"""Tiered compilation (``jit(fn, tiered=True)``, `thunder_ir.lowering.tiered`): the
Inductor executor's regions run unfused until a background thread has compiled them, and
every result, before and after the swap, equals the unfused program's."""

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
from thunder_ir.lowering import inductor_executor

pytestmark = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")


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


def test_a_failing_background_compile_leaves_the_unfused_region(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(inductor_executor, "_compile_graph", broken)
    model = _model()
    unfused = thunder_ir.jit(model)
    tiered = thunder_ir.jit(model, tiered=True)
    x = torch.randn(16, 32)
    _same(_step(tiered, model, x), _step(unfused, model, x))
    status = thunder_ir.compile_status(tiered, wait=None)
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


def test_an_exit_during_the_background_compile_waits_for_nothing_and_leaves_nothing(
        tmp_path: Any) -> None:
    """The process exits while its kernels compile (each takes a minute here): at once,
    and no process of its own (a compiler it started) is left running."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "THUNDER_IR_TIERED_TEST": mark,
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
