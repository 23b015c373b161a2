"""``trainer.malloc_mmap_threshold_mb``: glibc's mmap threshold fixed for the process.

glibc serves a block above the threshold with its own mapping, returned to the system when freed; below
it, from the heap, which keeps freed memory and shrinks only from its top. By default the threshold
follows the largest block freed (up to 32 MiB), so a training step's activations end up in the heap
and, batch shapes varying, the heap creeps up from step to step (docs/results/peak_rss_allocator.md).
Fixing it sends the large activations to mappings again. Numbers are unchanged; each large block is
mapped, zeroed and unmapped, which costs CPU where steps allocate many of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def fix_mmap_threshold(megabytes: int | None) -> bool:
    """Set glibc's mmap threshold to ``megabytes`` MiB (None: leave glibc's dynamic one); whether it was set
    (False, with a log line, off glibc)."""
    if megabytes is None:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.info("trainer.malloc_mmap_threshold_mb: not glibc; left as it is")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, megabytes * 2**20))
