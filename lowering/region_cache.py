"""Compiled tiered regions kept on disk: a later process loads them without compiling.

The compile helper (`thunder_ir.lowering.compile_helper`) answers a region's `Request`
with a `Compiled`: the output code Inductor generated and what loading it needs (its
constants, the inputs to realign, a symbolic region's size checks). This module keeps
that answer in ``<Inductor's cache directory>/thunder_ir_regions/`` (`store`), keyed by
everything that changes it (`region_key`), and gives it back to a later process
(`lookup`), which then loads the kernel as it loads the helper's (``PyCodeCache``; its
C++ is in Inductor's code cache beside it, and is compiled again on load if it was
removed) without starting the helper or tracing the region. A second run of the same
script so swaps in its fused program a few calls after it is hot (``docs/fusion.md``).

Why not torch's own: ``torch._inductor.standalone_compile``'s saved artifacts (torch
2.13) go through AOTAutograd, which lifts a graph's tensor constants into inputs no
caller passes (a loaded ``x * 2 + torch.tensor([1., 2., 3.])`` expects 2 arguments and
gets 1), and its runtime wrappers cost a call ~1 µs more; Inductor's FX graph cache needs
the traced graph as its key (the helper's ``make_fx``), and keeps only guards over
``SymInt`` inputs, so a symbolic region's kernel came back without its size checks
(`symbolic_regions.symbolic_options`). What is kept here is what the FX graph cache
keeps of a ``CompiledFxGraph``, keyed by the region's request instead of its graph.

The key (`region_key`): the region's printed function, the op classes and runtime
modules it calls, its inputs' metadata (sizes or size texts, strides or layout, dtypes,
devices), its outputs' arity, the Inductor options, a symbolic region's program guards
(its symbols' relations and ranges), the global modes where it was asked (`mode_key`),
torch's version, a digest of thunder_ir's sources (`sources_digest`) and of any other
module whose ops or runtime functions the region calls (a user's extension), the machine
and its CPU's features, and the environment a compile reads (``TORCHINDUCTOR_*``, the compiler and
thread-count variables). A symbolic region keeps one file per kernel under its key; the
kernel taken is one whose size checks hold at the asking call's sizes (compiled at other
sizes it is the same kernel for every size where its checks hold, and it still checks
them on every call: `symbolic_regions.guarded`).

Nothing here can break a callable: a file that does not read back whole (its digest),
was written by another format, or whose kernel fails to load is ignored and removed, and
the region compiles anew; a folder that cannot be written keeps nothing.
``THUNDER_IR_REGION_CACHE=0`` (`ENV`) turns the cache off.

Size: the kept files are at most `MAX_MB` MiB together (``THUNDER_IR_REGION_CACHE_MB``,
`SIZE_ENV`). Each `store` that adds a file then removes the least recently used ones
(`evict`): a file's modification time is when it was written or last loaded (`lookup`
sets it on every hit), the oldest go first, the file just written stays. Several
processes may share the folder (data-parallel ranks, two runs of a script): files are
written whole under a temporary name and renamed (never seen cut short); a file that
another process removes is either read whole (removing a file another holds open
leaves its content readable) or not found (the region then compiles, as for a file
never kept); removals of a file already gone are ignored; a folder emptied by an
eviction while another process stores into it is made again. What Inductor keeps
beside it (the kernels' C++ in its code cache) is Inductor's and is not evicted here
(a loaded kernel whose C++ is gone compiles it again).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import os
import pickle
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from thunder_ir.lowering.compile_helper import Compiled, Request
from thunder_ir.lowering.tier_up_memory import inductor_cache_dir

ENV = "THUNDER_IR_REGION_CACHE"
"""``0``: kernels are neither looked up in nor kept in this cache (each process compiles
its own, as before it existed)."""
SIZE_ENV = "THUNDER_IR_REGION_CACHE_MB"
"""The cache's size cap in MiB (`MAX_MB` by default; a float: ``0.5``)."""
MAX_MB = 256.0
"""The default size cap: a kernel's file is 15-200 KiB (its output code and constants),
so thousands of kernels; Inductor's own caches beside it are not capped."""
STALE_TMP_S = 3600.0
"""A temporary file older than this is a write that never finished (its process died):
an eviction removes it."""
REGIONS_DIR = "thunder_ir_regions"
"""The folder of the cache, inside Inductor's cache directory."""
FORMAT = 1
"""The files' format; another is ignored."""
_MAGIC = b"thunder_ir region %d\n" % FORMAT
_ENV_PREFIXES = ("TORCHINDUCTOR_", "TORCH_COMPILE_", "OMP_", "MKL_", "KMP_")
_ENV_NAMES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CPATH", "LIBRARY_PATH")
LOADER_MODULES = ("torch._inductor.codecache", "torch._inductor.async_compile",
                  "torch._inductor.select_algorithm")
"""What loading a kernel imports (its output code's header: 2-3 s of Inductor's import on
this machine), imported ahead by `warm`."""
_PACKAGES = ("thunder_ir", "thunder_ir.dialects", "thunder_ir.passes",
             "thunder_ir.lowering", "thunder_ir.runtime")


@functools.cache
def sources_digest() -> str:
    """A digest of thunder_ir's Python sources (its packages' ``.py`` files, by path
    relative to their package and content): a changed source is another key. Computed
    once per process, on the compiling thread."""
    digest = hashlib.sha256()
    seen: set[Path] = set()
    for name in _PACKAGES:  # (each package's own folder: in a checkout, thunder_ir's
        # path also names the checkout's root, whose tests and benchmarks are not sources)
        root = Path(importlib.import_module(name).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _machine() -> str:
    """The machine, its cores and the CPU's features (Linux: the flags of
    ``/proc/cpuinfo``, from which Inductor picks the vector extensions its C++ uses),
    without importing Inductor."""
    flags = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        flags = next((line for line in f if line.startswith("flags")), "")
    return f"{platform.machine()} {platform.processor()} {os.cpu_count()} " \
           f"{hashlib.sha256(flags.encode()).hexdigest()[:16]}"


def warm() -> None:
    """Computes the key's parts (the digest of the sources) and imports Inductor's loader
    (and probes the CPU's vector extensions: a C++ compile), so that a first `lookup`
    and load are quick (a thread of its own, while a program's first
    calls run: `tier_up_memory.prestart`)."""
    from thunder_ir.lowering.tiered import TRACING

    sources_digest()
    _machine()
    with TRACING:  # (imports of Inductor one thread at a time: a load holds it too)
        for module in LOADER_MODULES:
            importlib.import_module(module)
        from torch._inductor.cpu_vec_isa import pick_vec_isa

        pick_vec_isa()


def _environment() -> str:
    return repr(sorted((k, v) for k, v in os.environ.items()
                       if (k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES)
                       and k != "TORCHINDUCTOR_CACHE_DIR"))


def _outside_sources(request: Request) -> tuple[str, ...]:
    """A digest of each module outside thunder_ir whose op classes or runtime functions
    the region calls (a user's extension: `thunder_ir.extend`), by its file's content."""
    names = {spec.partition(":")[0] for spec in request.classes} | set(request.modules)
    out = []
    for name in sorted(n for n in names if n.partition(".")[0] != "thunder_ir"):
        module = importlib.import_module(name)
        path = getattr(module, "__file__", None)
        data = Path(path).read_bytes() if path else repr(module).encode()
        out.append(f"{name}:{hashlib.sha256(data).hexdigest()}")
    return tuple(out)


def region_key(request: Request, modes: Any) -> str:
    """The key of a region's compiled kernel (the module doc lists what it holds; a
    symbolic region's: not the sizes it was asked at, which its kernels' checks
    decide). ``modes``: `thunder_ir.dialects.modes.mode_key` where the region asked."""
    symbols = request.symbols
    parts = (FORMAT, torch.__version__, sources_digest(), _machine(), _environment(),
             repr(modes), request.source, request.function, request.classes,
             request.modules, tuple(repr(m) for m in request.inputs), request.single,
             repr(sorted((request.options or {}).items())),
             None if symbols is None else tuple(symbols.guards), _outside_sources(request))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:40]


def _folder(key: str) -> Path:
    return Path(inductor_cache_dir()) / REGIONS_DIR / key


def _holds(checks: tuple[str, ...], request: Request) -> bool:
    """Whether a symbolic kernel's size checks hold at the request's sizes."""
    if not checks:
        return True
    if request.symbols is None:
        return False
    from thunder_ir.runtime.python_printer import load_python

    hints = dict(request.symbols.hints)
    reads = "".join(f"  {name} = H[{name!r}]\n" for name in hints if name.isidentifier())
    source = "def holds(H):\n" + reads + "  return " + " and ".join(
        f"({c})" for c in checks) + "\n"
    try:  # (its own text, run where generated source runs: the printer's loader)
        return bool(load_python(source, "holds", {})(hints))
    except Exception:
        return False


def _read(path: Path) -> dict[str, Any] | None:
    """A file's payload, or None (and the file removed) where it does not read back
    whole in this format."""
    try:
        data = path.read_bytes()
        head, _, rest = data.partition(b"\n")
        digest, body = rest[:64], rest[65:]
        if head + b"\n" != _MAGIC or hashlib.sha256(body).hexdigest().encode() != digest:
            raise ValueError("not a whole file of this format")
        payload = pickle.loads(body)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ValueError("another format")
        return payload
    except FileNotFoundError:
        return None
    except Exception:
        discard(path)
        return None


def discard(path: str | Path) -> None:
    """Removes a cache file (one that did not load); nothing if it is gone."""
    with contextlib.suppress(OSError):
        os.remove(path)


def lookup(request: Request, modes: Any) -> tuple[Compiled, Path] | None:
    """The kernel kept for this request, written to ``request.path`` as the helper would
    have written it, and the cache file it came from (`discard` it if it does not
    load); None where none is kept (or none whose checks hold at these sizes)."""
    if os.environ.get(ENV) == "0":
        return None
    files = entries(_folder(region_key(request, modes)))
    for path in files:
        if path.suffix != ".bin":
            continue
        payload = _read(path)
        if payload is None or not _holds(tuple(payload["checks"]), request):
            continue
        try:
            with open(request.path, "w") as f:
                f.write(payload["code"])
        except OSError:
            return None
        with contextlib.suppress(OSError):  # used now: the last to be evicted (gone
            os.utime(path)  # meanwhile, or not ours to touch: nothing)
        return Compiled(request.path, payload["key"], payload["linemap"], payload["attrs"],
                        payload["realign"], payload["mutated"], tuple(payload["checks"]),
                        False), path
    return None


def store(request: Request, modes: Any, compiled: Compiled) -> bool:
    """Keeps a kernel the helper compiled for ``request``; False where it could not be
    kept (its constants do not pickle, the folder cannot be written, `ENV` is ``0``)."""
    if os.environ.get(ENV) == "0":
        return False
    try:
        with open(compiled.path) as f:
            code = f.read()
        body = pickle.dumps({"format": FORMAT, "code": code, "key": compiled.key,
                             "linemap": compiled.linemap, "attrs": compiled.attrs,
                             "realign": compiled.realign, "mutated": compiled.mutated,
                             "checks": tuple(compiled.checks)})
        folder = _folder(region_key(request, modes))
        name = hashlib.sha256(repr(tuple(compiled.checks)).encode()).hexdigest()[:16]
        fd, tmp = _temporary(folder)
    except Exception:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, folder / f"{name}.bin")  # whole or not at all
    except Exception:
        discard(tmp)
        return False
    with contextlib.suppress(Exception):  # (a cap that cannot be kept keeps the file)
        evict(limit_bytes(), keep=folder / f"{name}.bin")
    return True


def _temporary(folder: Path) -> tuple[int, str]:
    """A new temporary file in ``folder`` (made if missing; made again if another
    process's `evict` removed it, emptied, between the two)."""
    for _ in range(3):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            return tempfile.mkstemp(dir=folder, suffix=".tmp")
        except FileNotFoundError:
            continue
    raise FileNotFoundError(folder)


def entries(folder: Path) -> list[Path]:
    """The files under one key's folder, by name (none where it is missing)."""
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def limit_bytes() -> int:
    """The size cap in bytes: `SIZE_ENV` in MiB, or `MAX_MB`."""
    value = os.environ.get(SIZE_ENV)
    try:
        mb = MAX_MB if value is None else float(value)
    except ValueError:
        mb = MAX_MB
    return max(0, int(mb * 2**20))


def evict(limit: int, keep: Path | None = None) -> int:
    """Removes the least recently used kept files (the oldest modification time: written
    or last loaded) until those left take at most ``limit`` bytes, never ``keep`` (the
    file just written), and temporary files older than `STALE_TMP_S`, and the folders
    left empty; returns the bytes removed. Safe beside other processes that store, look
    up or evict in the same folder (the module doc)."""
    root = Path(inductor_cache_dir()) / REGIONS_DIR
    files: list[tuple[float, int, Path]] = []
    now = time.time()
    try:
        folders = list(root.iterdir())
    except OSError:
        return 0
    for folder in folders:
        for path in entries(folder):
            try:
                st = path.stat()
            except OSError:  # (removed meanwhile)
                continue
            if path.suffix == ".tmp" and now - st.st_mtime > STALE_TMP_S:
                discard(path)
            elif path.suffix == ".bin":
                files.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, path in sorted(files, key=lambda f: f[0]):
        if total <= limit:
            break
        if keep is not None and path == keep:
            continue
        discard(path)
        total -= size
        removed += size
        with contextlib.suppress(OSError):  # (only where empty: another's file stays)
            path.parent.rmdir()
    return removed


__all__ = ["ENV", "FORMAT", "LOADER_MODULES", "MAX_MB", "REGIONS_DIR", "SIZE_ENV", "STALE_TMP_S",
           "discard", "entries", "evict", "limit_bytes", "lookup", "region_key",
           "sources_digest", "store", "warm"]
