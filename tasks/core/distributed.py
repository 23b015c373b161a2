"""Evaluation rows across processes: every rank's rows to every rank, each example counted once; a
per-rank mean weighted as one process would weigh it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

Rows = dict[str, np.ndarray]


#: Where launchers put a process's rank before any process group exists: torchrun ``RANK`` (global) and
#: ``GROUP_RANK`` (its node), Lightning ``NODE_RANK`` and ``LOCAL_RANK`` (its launcher's copies of the command,
#: or set by hand on each node), SLURM ``SLURM_PROCID`` (global; one process per task, no ``LOCAL_RANK``).
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK")


def _rank_variable(name: str) -> int:
    return int(os.environ.get(name) or 0)


def is_main_process() -> bool:
    """Whether this process is global rank 0, known before any process group exists. On several nodes
    every node has a ``LOCAL_RANK`` 0, so every rank variable a launcher sets must be 0, the node's too."""
    return all(_rank_variable(k) == 0 for k in RANK_VARIABLES)


def process_rank_name() -> str:
    """A name for this process unique among the run's processes, known before any process group exists:
    the global rank where the launcher gives it (torchrun, SLURM), else ``<local rank>`` on node 0 and
    ``<node>.<local rank>`` on node ``node`` > 0 (Lightning's launcher and its ``NODE_RANK``, whose global
    rank needs the devices per node)."""
    for name in ("RANK", "SLURM_PROCID"):
        if os.environ.get(name):
            return str(_rank_variable(name))
    node = _rank_variable("NODE_RANK") or _rank_variable("GROUP_RANK")
    local = _rank_variable("LOCAL_RANK")
    return f"{node}.{local}" if node else str(local)


def gather_objects(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]``; just ``[obj]`` in a single process."""
    import torch.distributed as dist  # here: is_main_process (console scripts' --help) must not import torch

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def share_of_total(count: torch.Tensor) -> torch.Tensor | float:
    """``count * world_size / count summed over the ranks`` (1.0 in a single process).

    A rank's loss that is a mean over its own ``count`` items (NER: labelled tokens), times this, is
    its part of the mean over the whole global batch once DDP averages the ranks' gradients; without
    it, ranks with fewer tokens would weigh each token more than one process with the global batch does.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 1.0
    total = count.detach().to(torch.int64).clone()  # integers: exact, and every backend reduces them
    dist.all_reduce(total)
    return count.float() * dist.get_world_size() / total.clamp(min=1).float()


def concat_rows(parts: Sequence[Mapping[str, np.ndarray]], pad_values: Mapping[str, Any] | None = None) -> Rows:
    """Concatenate row blocks column by column.

    Columns of rank >= 2 ([N, T, ...], e.g. per-token logits of batches padded to their own length)
    are padded along axis 1 to the widest block with ``pad_values[column]`` (default 0).
    """
    pad_values = pad_values or {}
    out: Rows = {}
    for key in parts[0]:
        blocks = [np.asarray(p[key]) for p in parts]
        if blocks[0].ndim >= 2:
            width = max(b.shape[1] for b in blocks)
            fill = pad_values.get(key, 0)
            blocks = [
                np.pad(b, [(0, 0), (0, width - b.shape[1])] + [(0, 0)] * (b.ndim - 2), constant_values=fill)
                for b in blocks
            ]
        out[key] = np.concatenate(blocks)
    return out


def gather_rows(rows: Rows, key: Sequence[str], pad_values: Mapping[str, Any] | None = None) -> Rows:
    """Every rank's ``rows``, each key once, sorted by key.

    ``key`` names the columns that identify a row (an example index; a window index; a sentence and
    word index). A distributed sampler pads the last ranks with repeats of the first examples; keyed
    rows collapse those repeats onto their originals.
    """
    parts = [p for p in gather_objects(rows) if p and len(next(iter(p.values())))]
    if not parts:
        return {k: v[:0] for k, v in rows.items()}
    merged = concat_rows(parts, pad_values) if len(parts) > 1 else dict(parts[0])
    keys = np.stack([merged[k].astype(np.int64) for k in key], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)  # sorted by key, the first occurrence of each
    return {k: v[first] for k, v in merged.items()}
