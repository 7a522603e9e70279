"""Helpers the benchmarks share: steady memory behaviour, page-fault counts and
interleaved timing.

glibc's malloc may hand freed memory back to the kernel (heap trimming, and ``mmap`` for
blocks above a threshold it adapts as the process runs). Whether it does so for a
variant's intermediates depends on what the process allocated before; when it does, every
call faults its buffers in again, which on this 2-core machine swung figures by 30% and
more (see ``benchmarks/executors.py``). `pin_malloc` fixes the thresholds so that all
variants allocate alike; `page_faults` lets a script show that it worked.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    import resource
except ImportError:  # not POSIX: no page fault counts
    resource = None  # type: ignore[assignment]


def page_faults() -> int:
    """Minor page faults of this process so far (0 where not countable)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


def pin_malloc() -> bool:
    """glibc: never trim the heap, ``mmap`` only blocks above 32 MB. False where that is
    not possible (not Linux/glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # from <malloc.h>
    return bool(mallopt(m_trim_threshold, 1 << 30)) and bool(mallopt(m_mmap_threshold,
                                                                      32 << 20))


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


MAPPED_ONE_BY_ONE = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""The environment of a process for `step_peak_mib`: glibc maps each allocation of 64 KiB
and more on its own from the start, so a freed tensor leaves the resident set at once
(set later, with ``mallopt``, the heap's free chunks would still serve such blocks)."""


def step_peak_mib(step: Callable[[], Any], warm: int = 3) -> float | None:
    """The most memory one call of ``step`` holds above what was held when it began (MiB):
    its tensors' peak, without the process's own baseline (the compiler's code and data,
    the model and optimizer state, which the step does not allocate).

    Meant for a process started with `MAPPED_ONE_BY_ONE`. After ``warm`` calls, the
    kernel's high-water mark of the resident set is reset (``/proc/self/clear_refs``) and
    read after one more call. None where that is not possible (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import gc

    for _ in range(warm):
        step()
    gc.collect()
    try:
        base = _status_mib("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        step()
        return _status_mib("VmHWM") - base
    except (OSError, KeyError):
        return None


# --------------------------------------------------------------------------- interleaved timing


def cpu_busy_s() -> float | None:
    """CPU seconds all processes have spent busy since boot (Linux), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


@dataclass
class Timing:
    """One variant's interleaved timing."""

    rounds: list[float]  # per-round median call time, ms
    faults: float  # minor page faults per call

    @property
    def ms(self) -> float:
        """The median over rounds of the per-round median call time, in ms."""
        return statistics.median(self.rounds)


def time_interleaved(variants: dict[str, Callable[[], Any]], device: str, seconds: float,
                     rounds: int) -> tuple[dict[str, Timing], float | None]:
    """Times the variants interleaved: about ``seconds`` each, in ``rounds`` rounds, each
    round running every variant for an equal slice (starting with a different variant each
    round), so that a slow spell of the machine hits them alike. A sample is one call, or
    a batch of calls where one call is shorter than 50 µs (the timer's own cost stays
    under 1%). Also returns how many CPUs other processes kept busy meanwhile."""

    def sync() -> None:
        if device == "cuda":
            import torch  # here, so that importing this module does not import torch

            torch.cuda.synchronize()

    def call_ms(fn: Callable[[], Any], n: int, batch: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            for _ in range(batch):
                fn()
            sync()
            out.append((time.perf_counter() - t) * 1e3 / batch)
        return out

    names = list(variants)
    calls: dict[str, int] = {}
    batches: dict[str, int] = {}
    for name in names:  # warm up, and size each variant's slice of a round
        fn = variants[name]
        call_ms(fn, 3, 1)
        per_call = statistics.median(call_ms(fn, 5, 1)) / 1e3
        batches[name] = batch = max(1, round(50e-6 / max(per_call, 1e-7)))
        calls[name] = max(3, min(10_000, round(seconds / rounds / batch / max(per_call, 1e-7))))
    samples: dict[str, list[float]] = {n: [] for n in names}
    faults = dict.fromkeys(names, 0)
    busy0, own0, t0 = cpu_busy_s(), time.process_time(), time.perf_counter()
    for r in range(rounds):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            f0 = page_faults()
            samples[name].append(statistics.median(call_ms(variants[name], calls[name],
                                                           batches[name])))
            faults[name] += page_faults() - f0
    busy1, own1, t1 = cpu_busy_s(), time.process_time(), time.perf_counter()
    others = None
    if busy0 is not None and busy1 is not None:
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)
    timings = {n: Timing(samples[n], faults[n] / (calls[n] * batches[n] * rounds))
               for n in names}
    return timings, others


# --------------------------------------------------------------------------- the Llama model


def add_llama_args(ap: argparse.ArgumentParser) -> None:
    """The Llama-style model's size options: ``--layers --embd --seq --batch``."""
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)


def llama_config(a: argparse.Namespace, vocab_size: int) -> Any:
    """`tests/models.py`'s ``Config`` for those options: 4 heads in 2 query groups, an MLP
    2.6875 times as wide as the model, the sequence as block size."""
    from models import Config  # tests/ is on sys.path in every benchmark script

    return Config(n_layer=a.layers, n_embd=a.embd, n_head=4, n_query_groups=2,
                  intermediate_size=int(a.embd * 2.6875), block_size=a.seq,
                  vocab_size=vocab_size)
