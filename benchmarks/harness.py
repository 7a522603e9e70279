"""Helpers the CPU benchmarks share: steady memory behaviour and page-fault counts.

glibc's malloc may hand freed memory back to the kernel (heap trimming, and ``mmap`` for
blocks above a threshold it adapts as the process runs). Whether it does so for a
variant's intermediates depends on what the process allocated before; when it does, every
call faults its buffers in again, which on this 2-core machine swung figures by 30% and
more (see ``benchmarks/executors.py``). `pin_malloc` fixes the thresholds so that all
variants allocate alike; `page_faults` lets a script show that it worked.
"""

from __future__ import annotations

import ctypes
import sys

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
