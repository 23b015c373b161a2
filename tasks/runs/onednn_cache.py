"""``trainer.onednn_primitive_cache``: how many oneDNN primitives the process keeps.

On a CPU, torch runs bf16 matrix products through oneDNN, which builds one primitive per product shape and keeps up
to 1,024 of them (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``). Length-grouped batches come in many lengths, so bf16 training
fills the cache with a few primitives per length, each holding its own kernels and buffers: 221 MiB of resident
memory after 100 SST-2 steps (docs/results/train_speed_onednn_cache.md). A smaller capacity trades that memory for
building primitives again when a length comes back; 0 keeps none. Numbers are unchanged.

oneDNN reads the capacity once, when it builds its first primitive, so it is set before the run computes anything.
An ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` already in the environment wins.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

CAPACITY_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"


def bound_primitive_cache(capacity: int | None) -> int | None:
    """Have oneDNN keep at most ``capacity`` primitives in this process (None: oneDNN's own 1,024); the capacity in
    effect (None where oneDNN's default is), the environment's where it set one."""
    given = os.environ.get(CAPACITY_VARIABLE)
    if given is not None:
        if capacity is not None and given != str(capacity):
            log.info("trainer.onednn_primitive_cache=%d: %s=%s in the environment wins", capacity, CAPACITY_VARIABLE,
                     given)
        return int(given) if given.strip().isdigit() else None
    if capacity is None:
        return None
    os.environ[CAPACITY_VARIABLE] = str(capacity)
    return capacity
