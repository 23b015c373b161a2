"""Evaluation across processes: every rank's outputs to every rank, each example counted once."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.distributed as dist


def gather_objects(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]``; just ``[obj]`` in a single process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def gather_by_index(rows: dict[int, Any]) -> dict[int, Any]:
    """Merge ``{example index: output}`` from all ranks. A distributed sampler pads the last ranks with
    repeats of the first examples; keyed by index, each repeat collapses onto its original."""
    merged: dict[int, Any] = {}
    for part in gather_objects(rows):
        merged.update(part)
    return dict(sorted(merged.items()))


def gather_rows(*columns: np.ndarray, key_columns: int = 1) -> tuple[np.ndarray, ...]:
    """Concatenate equal-length column arrays from all ranks and drop rows whose key (the first
    ``key_columns`` columns) repeats: the distributed sampler's padding repeats whole examples."""
    parts = gather_objects(columns)
    if len(parts) == 1:
        return columns
    merged = [np.concatenate(cols) for cols in zip(*parts)]
    keys = np.stack(merged[:key_columns], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    first.sort()
    return tuple(col[first] for col in merged)
