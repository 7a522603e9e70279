"""Tier-up sooner on a second run (issue 53): a process whose program tiered up leaves a
note beside Inductor's on-disk caches (`thunder_ir.lowering.tier_up_memory`); the next
run of the same script makes that program hot after `HOT_CALLS` calls instead of
`HOT_SECONDS` of them, and its kernels load from the cache of compiled regions
(`thunder_ir.lowering.region_cache`), which keeps its size cap."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from thunder_ir.lowering import inductor_executor, region_cache
from thunder_ir.lowering import tier_up as tu
from thunder_ir.lowering import tier_up_memory as memory

needs_inductor = pytest.mark.skipif(
    not inductor_executor.InductorExecutor().is_available(),
    reason="the Inductor executor needs a C++ compiler on the CPU")

_SCRIPT = """
import copy, json, logging, re, sys, torch, thunder_ir
from torch import nn
from thunder_ir.lowering import tier_up, tiered

if "quick" in sys.argv[1:]:  # hot after HOT_CALLS calls, and remembered as hot
    tier_up.HOT_SECONDS = 0.0
race = [a[5:] for a in sys.argv[1:] if a.startswith("race=")]
raced = []
if race:  # this kept file is evicted after the lookup listed it, before it reads it (as
    import pathlib  # another process's eviction would: test_a_file_another_process_...)
    from thunder_ir.lowering import region_cache
    listed = region_cache.entries

    def entries(folder):
        out = listed(folder)
        if not raced and pathlib.Path(race[0]) in out:  # (once: its lookup's listing)
            raced.append(False)  # (the eviction lists the folders too)
            total = sum(f.stat().st_size for f in folder.parent.rglob("*.bin"))
            region_cache.evict(total - 1)  # a cap of all but the least recently used
            raced[0] = not pathlib.Path(race[0]).exists()
        return out

    region_cache.entries = entries

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
eager = copy.deepcopy(model)
jm = thunder_ir.jit(model)
lengths = (6, 9, 12)  # the first length's static program, then one symbolic program
xs = {n: torch.randn(2, n, 32) for n in lengths}
both = None  # the step at which both programs were hot
for step in range(1, 4001):
    jm(xs[lengths[step % 3]]).square().mean().backward()
    status = thunder_ir.compile_status(jm)
    if status["swapped"] == 2 or status["kept"]:
        break
    both = step if both is None and len(hot) == 2 else both
    if status["pending"] and both is not None and step >= both + 3:  # (each program's
        thunder_ir.compile_status(jm, wait=None)  # fused one ran: one helper compiles all)
worst = 0.0  # the fused programs against eager, every length: loss and gradients
for n in lengths:
    for m in (model, eager):
        m.zero_grad()
    got, want = jm(xs[n]).square().mean(), eager(xs[n]).square().mean()
    got.backward()
    want.backward()
    worst = max(worst, (got - want).abs().item(), *[
        (p.grad - q.grad).abs().max().item()
        for p, q in zip(model.parameters(), eager.parameters(), strict=True)])
status.pop("timings")
print(json.dumps({"hot": hot, "worst": worst, "starts": tiered.helper_starts(), "raced": raced,
                  "fused": "inductorFusion" in str(thunder_ir.last_traces(jm)[-1]),
                  **status}))
"""


def _start(cache: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in (tu.AFTER_ENV, tu.TIER_ENV)}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _damage(cache: Path) -> list[Path]:
    """Damages a kept kernel (its envelope whole, its output code fails to load), and
    makes another the least recently used (an eviction's first); returns both. (A file
    cut short is found by the lookup not to read back whole: the unit test below.)"""
    files = sorted((cache / region_cache.REGIONS_DIR).rglob("*.bin"))
    bad, old = files[0], files[1]
    os.utime(old, (0, 0))
    head, _, rest = bad.read_bytes().partition(b"\n")
    payload = pickle.loads(rest[65:])
    payload["code"] = "raise ImportError('a stale kernel')\n"
    body = pickle.dumps(payload)
    bad.write_bytes(head + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    return [bad, old]


@needs_inductor
def test_a_second_run_loads_its_kernels_without_compiling(tmp_path: Path) -> None:
    """A model trained over three lengths (a static program, then a symbolic one): the
    first run compiles 4 kernels and keeps them; the second is hot after `HOT_CALLS`
    calls of each program and loads every kernel from the cache of compiled regions
    (`thunder_ir.lowering.region_cache`) without starting the compile helper; a third,
    with a kept kernel damaged and another evicted while it is looked up, compiles those
    two again. Every run's fused programs give eager's loss and gradients at every
    length."""
    cache, copy = tmp_path / "cache", tmp_path / "copy"
    first = _result(_start(cache, "quick"))  # (it waits for kernels once both are hot)
    assert first["swapped"] == 2 and first["compiled"] == 4, first  # 2 programs x fwd/bwd
    assert first["loaded"] == 0 and first["starts"] >= 1, first
    assert first["hot"] == [tu.HOT_CALLS] * 2 and first["worst"] < 1e-5, first
    notes = list((cache / memory.MEMORY_DIR).iterdir())
    assert len(notes) == 2
    assert len(list((cache / region_cache.REGIONS_DIR).rglob("*.bin"))) == 4
    # The second and third runs side by side, each on its own copy of the first's caches.
    # The default threshold (2 s of calls) would take thousands of these calls: the note
    # makes each program hot after HOT_CALLS, and no kernel is compiled.
    shutil.copytree(cache, copy)
    damaged = _damage(copy)
    second = _start(cache)
    # A kernel whose code fails to load, and one evicted after the lookup listed it,
    # before it read it: the two compile again, the other two load.
    third = _result(_start(copy, f"race={damaged[1]}"))
    out = _result(second)
    assert out["swapped"] == 2 and out["hot"] == [tu.HOT_CALLS] * 2, out
    assert out["loaded"] == out["compiled"] == 4, out
    assert out["starts"] == 0 and out["worst"] < 1e-5 and out["fused"], out
    assert list((cache / memory.MEMORY_DIR).iterdir()) == notes
    assert third["raced"] == [True], third
    assert third["swapped"] == 2 and third["compiled"] == 4 and third["loaded"] == 2, third
    assert third["failed"] == 0 and third["worst"] < 1e-5, third
    assert all(p.exists() for p in damaged)  # compiled anew, and kept again
    assert len(list((copy / region_cache.REGIONS_DIR).rglob("*.bin"))) == 4


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


def test_the_region_key_holds_the_sources_of_a_users_extension(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A region that calls a runtime function of a module outside thunder_ir (a user's
    extension) keys by that module's source: an edit is another key, not a stale kernel;
    the same request and modes are the same key, other modes another."""
    from thunder_ir.lowering.compile_helper import Request

    module = tmp_path / "thunder_ir_test_user_ext.py"
    module.write_text("def scale(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    request = Request("k", "def k(x):\n  return x\n", "k", (), ("thunder_ir_test_user_ext",),
                      (), True, None, str(tmp_path / "k.py"))
    modes = (True, False, False, "torch.float32", False, None)
    key = region_cache.region_key(request, modes)
    assert region_cache.region_key(request, modes) == key
    assert region_cache.region_key(request, (False, *modes[1:])) != key
    module.write_text("def scale(x):\n    return x * 3\n")
    assert region_cache.region_key(request, modes) != key


def test_a_symbolic_kernel_is_taken_where_its_checks_hold_and_a_damaged_file_is_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels of one symbolic region compiled on both sides of a size decision are kept
    side by side; a lookup takes the one whose checks hold at the asking call's sizes
    (none where neither does), and a file that does not read back whole is removed."""
    from thunder_ir.lowering.compile_helper import Compiled, Request
    from thunder_ir.lowering.symbolic_regions import SymbolicCall

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(region_cache.ENV, raising=False)

    def request(s0: int) -> Request:
        return Request("k", "def k(x):\n  return x\n", "k", (), (), (), True, None,
                       str(tmp_path / f"k{s0}.py"), (),
                       SymbolicCall((("s0", s0),), ("s0 >= 2",)))

    modes = (True, False, False, "torch.float32", False, None)
    for side, checks in (("small", ("s0 <= 4096",)), ("large", ("s0 > 4096", "s0 < 10**6"))):
        code = tmp_path / f"{side}.py"
        code.write_text(f"# {side}\n")
        assert region_cache.store(request(7), modes,
                                  Compiled(str(code), side, [], {}, [], [], checks))
    found = region_cache.lookup(request(100), modes)
    assert found is not None and found[0].key == "small"
    assert Path(found[0].path).read_text() == "# small\n"  # written where it loads from
    found = region_cache.lookup(request(5000), modes)
    assert found is not None and found[0].key == "large" and found[0].checks[0] == "s0 > 4096"
    assert region_cache.lookup(request(10**7), modes) is None
    kept = found[1]
    kept.write_bytes(kept.read_bytes()[:-1])  # cut short
    assert region_cache.lookup(request(5000), modes) is None and not kept.exists()
    monkeypatch.setenv(region_cache.ENV, "0")
    assert region_cache.lookup(request(100), modes) is None


def _kept(tmp_path: Path, source: str, code: str) -> tuple[object, Path]:
    """Keeps a kernel (its output code ``code``) for a request of ``source``; returns the
    request and its file."""
    from thunder_ir.lowering.compile_helper import Compiled, Request

    request = Request("k", source, "k", (), (), (), True, None, str(tmp_path / "load.py"))
    path = tmp_path / "code.py"
    path.write_text(code)
    assert region_cache.store(request, _MODES, Compiled(str(path), source, [], {}, [], [], ()))
    return request, region_cache.entries(
        tmp_path / region_cache.REGIONS_DIR / region_cache.region_key(request, _MODES))[0]


_MODES = (True, False, False, "torch.float32", False, None)


def test_the_cache_keeps_its_size_cap_and_evicts_the_least_recently_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``THUNDER_IR_REGION_CACHE_MB`` caps the kept files' bytes: a store beyond it removes
    the files written or loaded longest ago (a lookup makes its file the most recent),
    never the one just written, and the folders it empties; a temporary file of a write
    that never finished goes once it is old."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(region_cache.ENV, raising=False)
    monkeypatch.delenv(region_cache.SIZE_ENV, raising=False)
    assert region_cache.limit_bytes() == int(region_cache.MAX_MB * 2**20)
    kept = {n: _kept(tmp_path, f"def k(x):\n  return x + {i}\n", "#" * 20000)
            for i, n in enumerate("abcd")}
    size = kept["a"][1].stat().st_size
    for age, n in enumerate("abcd"):  # written in that order, a minute apart
        os.utime(kept[n][1], (1e9 + 60 * age, 1e9 + 60 * age))
    stale = kept["d"][1].parent / "left.tmp"
    stale.write_bytes(b"x" * 100)
    os.utime(stale, (1e9, 1e9))
    assert region_cache.lookup(kept["a"][0], _MODES) is not None  # used now
    monkeypatch.setenv(region_cache.SIZE_ENV, str(3.5 * size / 2**20))
    assert region_cache.limit_bytes() == int(3.5 * size)
    kept["e"] = _kept(tmp_path, "def k(x):\n  return x * 2\n", "#" * 20000)
    left = sorted((tmp_path / region_cache.REGIONS_DIR).rglob("*.bin"))
    assert sorted(left) == sorted(kept[n][1] for n in "ade")  # b and c: the oldest
    assert sum(p.stat().st_size for p in left) <= region_cache.limit_bytes()
    assert not kept["b"][1].parent.exists() and not stale.exists()
    assert region_cache.lookup(kept["b"][0], _MODES) is None  # (it compiles again)
    monkeypatch.setenv(region_cache.SIZE_ENV, "0")  # below one file: the new one stays
    kept["f"] = _kept(tmp_path, "def k(x):\n  return x * 3\n", "#" * 20000)
    assert list((tmp_path / region_cache.REGIONS_DIR).rglob("*.bin")) == [kept["f"][1]]


def test_a_file_another_process_evicts_while_it_is_looked_up_is_not_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process's eviction between a lookup's listing and its read: the lookup
    finds nothing (the region then compiles), raises nothing; a store into the folder
    it emptied makes the folder again."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(region_cache.ENV, raising=False)
    request, path = _kept(tmp_path, "def k(x):\n  return x - 1\n", "# kernel\n")
    listed = region_cache.entries

    def entries(folder: Path) -> list[Path]:
        out = listed(folder)
        subprocess.run([sys.executable, "-c", "from thunder_ir.lowering import region_cache;"
                        " region_cache.evict(0)"], check=True, env=os.environ)
        return out

    monkeypatch.setattr(region_cache, "entries", entries)
    assert region_cache.lookup(request, _MODES) is None
    assert not path.exists() and not path.parent.exists()
    monkeypatch.setattr(region_cache, "entries", listed)
    _, again = _kept(tmp_path, "def k(x):\n  return x - 1\n", "# kernel\n")
    assert again == path and region_cache.lookup(request, _MODES) is not None
