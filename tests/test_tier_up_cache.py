"""Tier-up sooner on a second run (issue 53): a process whose program tiered up leaves a
note beside Inductor's on-disk caches (`thunder_ir.lowering.tier_up_memory`); the next
run of the same script makes that program hot after `HOT_CALLS` calls instead of
`HOT_SECONDS` of them, and its kernels come from Inductor's FX graph cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thunder_ir.lowering import inductor_executor
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering import tier_up_memory as memory

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")

_SCRIPT = """
import json, logging, re, sys, torch, thunder_ir
from torch import nn
from thunder_ir.lowering import tier_up

if sys.argv[1:] == ["quick"]:  # hot after HOT_CALLS calls, and remembered as hot
    tier_up.HOT_SECONDS = 0.0

hot = []

class Hot(logging.Handler):
    def emit(self, record):
        m = re.search(r"is hot \\((\\d+) calls", record.getMessage())
        if m:
            hot.append(int(m.group(1)))

log = logging.getLogger("thunder_ir.tiered")
log.setLevel(logging.INFO)
log.addHandler(Hot())
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.LayerNorm(48), nn.Linear(48, 8))
jm = thunder_ir.jit(model)
x = torch.randn(16, 32)
for step in range(1, 2001):
    jm(x).square().mean().backward()
    status = thunder_ir.compile_status(jm)
    if status["swapped"] or status["kept"]:
        break
    if status["pending"]:
        thunder_ir.compile_status(jm, wait=None)
status.pop("timings")
print(json.dumps({"hot": hot, **status}))
"""


def _run(cache: Path, *args: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in (tu.AFTER_ENV, tu.TIER_ENV)}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _SCRIPT, *args], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@needs_inductor
def test_a_second_run_is_hot_at_once_and_loads_its_kernels_from_the_cache(
        tmp_path: Path) -> None:
    first = _run(tmp_path, "quick")
    assert first["swapped"] == 1 and first["compiled"] == 2, first  # forward, backward
    assert first["cache_hits"] == 0 and first["hot"] == [tu.HOT_CALLS], first
    notes = list((tmp_path / memory.MEMORY_DIR).iterdir())
    assert len(notes) == 1
    # The default threshold (2 s of calls) would take thousands of these calls: the
    # note makes it hot after HOT_CALLS, and every kernel is a hit of Inductor's cache.
    second = _run(tmp_path)
    assert second["swapped"] == 1 and second["hot"] == [tu.HOT_CALLS], second
    assert second["cache_hits"] == second["compiled"] == 2, second
    assert list((tmp_path / memory.MEMORY_DIR).iterdir()) == notes


@needs_inductor
def test_a_threshold_the_user_set_is_neither_read_nor_remembered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``THUNDER_IR_TIER_UP_AFTER`` wins: a note does not make a program hot before the
    user's threshold."""
    import torch
    from torch import nn

    import thunder_ir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(tu.AFTER_ENV, "3600")
    monkeypatch.delenv(tu.TIER_ENV, raising=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4),
                          nn.Tanh())
    jm = thunder_ir.jit(model)
    x = torch.randn(4, 8)
    jm(x)
    entry = jm._compiled.cache.last
    memory.remember(entry)  # as if an earlier run had tiered it up
    jm2 = thunder_ir.jit(model)
    for _ in range(2 * tu.HOT_CALLS):
        jm2(x)
    watch = jm2._compiled.cache.last.fn
    assert memory.was_hot(jm2._compiled.cache.last)  # the note is there, and read not
    assert isinstance(watch, tu.Watch) and watch.state == tu.COUNTING


def test_the_memory_is_keyed_by_the_program_and_found_in_inductors_cache_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import thunder_ir

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert memory.inductor_cache_dir() == str(tmp_path)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert memory.inductor_cache_dir() == os.path.abspath(default_cache_dir())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 2 + 1).sum(-1)

    keys = []
    for shape in ((4, 8), (4, 8), (4, 9)):
        jf = thunder_ir.jit(f, tiered=False)
        jf(torch.randn(*shape))
        keys.append(memory.program_key(jf._compiled.cache.last if hasattr(jf, "_compiled")
                                       else jf.cache.last))
    assert keys[0] == keys[1] != keys[2]  # a new process's same trace: the same key
    entry = thunder_ir.jit(f, tiered=False)
    entry(torch.randn(4, 8))
    last = getattr(entry, "_compiled", entry).cache.last
    assert not memory.was_hot(last)
    memory.remember(last)
    assert memory.was_hot(last)
