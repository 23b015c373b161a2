"""Batching helpers shared by the tasks' data modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class LengthSortedSampler(Sampler[int]):
    """Indices in order of decreasing length, for evaluation.

    With per-batch padding, batches of similar length waste no compute on padding (padding every
    SQuAD window to 384 tokens costs about 2x); the longest batch comes first so memory limits show
    at once. Predictions carry their example index, so order does not matter downstream.
    """

    def __init__(self, lengths: Sequence[int]) -> None:
        self.order = np.argsort(-np.asarray(lengths), kind="stable").tolist()

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class ResumableShuffleSampler(Sampler[int]):
    """A shuffle fixed by ``(seed, epoch)``, so a run resumed mid-epoch replays the same order and
    skips exactly the examples it already trained on (set by :class:`TrainingResumeCallback`).

    ``len()`` stays the full dataset size so the schedule's total step count matches an uninterrupted run.
    """

    def __init__(self, num_examples: int, seed: int, epoch: int = 0, skip: int = 0) -> None:
        self.num_examples, self.seed, self.epoch, self._skip = num_examples, seed, epoch, skip

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.num_examples, generator=generator).tolist()
        start, self._skip = self._skip, 0
        return iter(order[start:])

    def __len__(self) -> int:
        return self.num_examples


def make_loader(
    dataset: Dataset,
    *,
    train: bool,
    batch_size: int,
    collate_fn: Callable,
    num_workers: int = 0,
    lengths: Sequence[int] | None = None,
    seed: int = 0,
    resume_at: tuple[int, int] | None = None,
) -> DataLoader:
    """Training: a resumable shuffle (``resume_at`` = (epoch, batches already done)). Evaluation:
    length-sorted batches (``lengths`` per example)."""
    common = {"collate_fn": collate_fn, "num_workers": num_workers, "persistent_workers": num_workers > 0}
    if train:
        epoch, done = resume_at or (0, 0)
        sampler = ResumableShuffleSampler(len(dataset), seed, epoch=epoch, skip=done * batch_size)
        # Its own generator: creating the iterator then draws nothing from the global RNG.
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=torch.Generator().manual_seed(seed), **common)
    if lengths is None:
        raise ValueError("evaluation loaders need per-example lengths to sort by")
    return DataLoader(dataset, batch_size=batch_size, sampler=LengthSortedSampler(lengths), **common)
