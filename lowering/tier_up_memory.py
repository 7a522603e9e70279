"""Tier-up remembers hot programs across processes, beside Inductor's on-disk caches.

A program that tiered up once is likely to run long again when the same script runs
again: its second process need not time it for `tier_up.HOT_SECONDS` first. When a fused
program is swapped in, `remember` leaves an empty file named by the program's key in
``<Inductor's cache directory>/thunder_ir_hot/``; a later process whose program has the
same key (`was_hot`) makes it hot after `tier_up.HOT_CALLS` calls, however short, and
starts the compile helper at once (`prestart`: it imports Inductor meanwhile); its
kernels then load from Inductor's FX graph cache in the same directory (the compile
helper still traces each region, but Inductor's code generation and the C++ compiler
are skipped: ``compile_status(jm)["cache_hits"]``; a symbolic program's regions compile
again, their C++ from Inductor's code cache: `symbolic_regions.symbolic_options`). With
``THUNDER_IR_TIER_UP_AFTER``
set, the memory is neither read nor written: the threshold is the user's (and a program
forced hot says nothing of how long it runs).

The key is a hash of the program's first trace (the prologue that keys it, and the
program as traced, with symbolic sizes as symbols; the line saying how long the trace
took left out) and torch's version: a program traced otherwise (another model, another
shape of a static program, another grad mode) is another key. The memory only decides
when a program is lowered, never what it computes.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import re
import tempfile
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
    """The memory's key of a cache entry's program (None: it has no first trace)."""
    if not entry.traces:
        return None
    text = str(entry.traces[0])
    lines = [line for line in text.splitlines() if not line.startswith("# Constructed by")]
    digest = hashlib.sha256(f"{torch.__version__}\n".encode())
    digest.update("\n".join(lines).encode())
    return digest.hexdigest()[:32]


def _path(key: str) -> str:
    return os.path.join(inductor_cache_dir(), MEMORY_DIR, key)


def was_hot(entry: Any) -> bool:
    """Whether a process tiered up this entry's program before."""
    key = program_key(entry)
    return key is not None and os.path.exists(_path(key))


def prestart() -> None:
    """Starts the compile helper process now (it imports Inductor meanwhile), for a
    program that `was_hot`: its kernels are asked for a few calls later."""
    from thunder_ir.lowering.tiered import HELPER_ENV, shared_helper

    if os.environ.get(HELPER_ENV, "process") != "thread":
        with contextlib.suppress(OSError):  # (a forked child: its parent's helper)
            shared_helper().start()


def remember(entry: Any) -> None:
    """Notes that this entry's program tiered up (nothing if the folder cannot be
    written)."""
    key = program_key(entry)
    if key is None:
        return
    path = _path(key)
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass


__all__ = ["MEMORY_DIR", "inductor_cache_dir", "prestart", "program_key", "remember",
           "was_hot"]
