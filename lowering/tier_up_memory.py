"""Tier-up remembers hot programs across processes, beside Inductor's on-disk caches.

A program that tiered up once is likely to run long again when the same script runs
again: its second process need not time it for `tier_up.HOT_SECONDS` first. When a fused
program is swapped in, `remember` leaves an empty file named by the program's key in
``<Inductor's cache directory>/thunder_ir_hot/``; a later process whose program has the
same key (`was_hot`, `hot_note`) makes it hot after `tier_up.HOT_CALLS` calls, however
short. Its kernels are then loaded from thunder_ir's cache of compiled regions
(`thunder_ir.lowering.region_cache`, in the same directory: no helper, no compile), or,
where that cache lacks one, compiled by the helper (Inductor's FX graph cache there skips
the code generation and the C++ compiler of a static region: ``compile_status(jm)
["cache_hits"]``). The note says whether every kernel of the program was kept in that
cache (with the digest of thunder_ir's sources they were kept under): `prestart` then
imports Inductor's loader on a thread of its own while the first calls run, else it
starts the compile helper at once (it imports Inductor meanwhile). With
``THUNDER_IR_TIER_UP_AFTER`` set, the memory is neither read nor written: the threshold
is the user's (and a program forced hot says nothing of how long it runs).

The key is a hash of what the program's compile made already (no printing): the prologue
that keys the program, the final forward (and backward) source that runs, and torch's
version; a program traced otherwise (another model, another shape of a static program,
another grad mode) is another key. (It was a hash of the printed first trace, which cost
a program's first call 7-17 ms on the Llama-style model; this one costs 0.05 ms.) The
memory only decides when a program is lowered, never what it computes.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import hashlib
import os
import re
import tempfile
import threading
from typing import Any

import torch

MEMORY_DIR = "thunder_ir_hot"
"""The folder of the memory, inside Inductor's cache directory."""


def inductor_cache_dir() -> str:
    """Inductor's cache directory, as ``torch._inductor.runtime.cache_dir_utils
    .cache_dir`` finds it (``TORCHINDUCTOR_CACHE_DIR``, else ``torchinductor_<user>`` in
    the temporary directory), without importing Inductor (a first call must not)."""
    given = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if given is not None:
        return os.path.abspath(given)
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return os.path.join(tempfile.gettempdir(),
                        "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def program_key(entry: Any) -> str | None:
    """The memory's key of a cache entry's program (None: it has no trace): its prologue's
    and its final functions' sources, and torch's version."""
    if not entry.traces:
        return None
    digest = hashlib.sha256(f"{torch.__version__}\n".encode())
    digest.update(entry.prologue_source.encode())
    for trace in (entry.traces[-1], *entry.backward_traces[-1:]):
        digest.update(b"\0")
        digest.update((trace.source if trace.source is not None else str(trace)).encode())
    return digest.hexdigest()[:32]


def _path(key: str) -> str:
    return os.path.join(inductor_cache_dir(), MEMORY_DIR, key)


def hot_note(entry: Any) -> str | None:
    """The note of a process that tiered up this entry's program before (`remember`),
    or None where none did."""
    key = program_key(entry)
    if key is None:
        return None
    try:
        with open(_path(key)) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def was_hot(entry: Any) -> bool:
    """Whether a process tiered up this entry's program before."""
    return hot_note(entry) is not None


_KEPT = "kept "


def start_helper() -> None:
    """Starts the compile helper processes now (they import Inductor meanwhile), unless
    compiles run on a thread (``THUNDER_IR_TIERED_COMPILE=thread``)."""
    from thunder_ir.lowering.tiered import HELPER_ENV, helper_pool

    if os.environ.get(HELPER_ENV, "process") != "thread":
        with contextlib.suppress(OSError):  # (a forked child: its parent's helpers)
            for helper in helper_pool():
                helper.start()


def prestart(note: str) -> None:
    """For a program that `was_hot` (``note``: its `hot_note`), whose kernels are asked
    for a few calls later: on a thread of its own, imports Inductor's loader (and
    computes what keys the cache of compiled regions) where the note says every kernel
    was kept there under these sources, else starts the compile helper."""
    def run() -> None:
        with contextlib.suppress(Exception):  # (the compile reports what fails)
            from thunder_ir.lowering import region_cache

            if note == _KEPT + region_cache.sources_digest():
                region_cache.warm()
            else:
                start_helper()

    thread = threading.Thread(target=run, name="thunder_ir-prestart", daemon=True)
    thread.start()
    atexit.register(thread.join, 2.0)  # (an exit does not cut it inside torch's C++)


def remember(entry: Any, kept: bool = False) -> None:
    """Notes that this entry's program tiered up (nothing if the folder cannot be
    written); ``kept``: each of its kernels is in the cache of compiled regions."""
    key = program_key(entry)
    if key is None:
        return
    path = _path(key)
    text = ""
    if kept:
        from thunder_ir.lowering import region_cache

        text = _KEPT + region_cache.sources_digest()
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


__all__ = ["MEMORY_DIR", "hot_note", "inductor_cache_dir", "prestart", "program_key",
           "remember", "start_helper", "was_hot"]
