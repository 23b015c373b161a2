"""How every task's examples become batches: samplers (a resumable shuffle, optionally length-grouped;
length-sorted evaluation), one padding collator, and the loader recipe that combines them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

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

    def epoch_generator(self) -> torch.Generator:
        """The random stream of this ``(seed, epoch)``: the same order every time it is replayed."""
        return torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)

    def resumed(self, order: list[int]) -> Iterator[int]:
        """``order`` less the examples already trained on (once: the next epoch starts whole)."""
        start, self._skip = self._skip, 0
        return iter(order[start:])

    def __iter__(self) -> Iterator[int]:
        return self.resumed(torch.randperm(self.num_examples, generator=self.epoch_generator()).tolist())

    def __len__(self) -> int:
        return self.num_examples


class LengthGroupedShuffleSampler(ResumableShuffleSampler):
    """A resumable shuffle whose consecutive ``batch_size`` indices have similar lengths.

    The epoch's shuffle (the parent's, fixed by ``(seed, epoch)``) is cut into mega-batches of
    ``mega_batches * batch_size`` examples; each is sorted by length and cut into batches, and the
    order of all full batches is shuffled again, so batches stay random while padding within one
    shrinks. The one partial batch (if any) goes last, so the ``DataLoader`` cuts batches exactly
    where this sampler made them and ``skip`` (examples already trained on) stays a whole number of
    batches after a resume.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, epoch: int = 0, skip: int = 0,
                 mega_batches: int = 50) -> None:
        super().__init__(len(lengths), seed, epoch=epoch, skip=skip)
        self.lengths = np.asarray(lengths)
        self.batch_size, self.mega_batches = batch_size, mega_batches

    def __iter__(self) -> Iterator[int]:
        generator = self.epoch_generator()
        order = torch.randperm(self.num_examples, generator=generator).numpy()
        size = self.batch_size * self.mega_batches
        batches: list[np.ndarray] = []
        for lo in range(0, len(order), size):
            mega = order[lo : lo + size]
            mega = mega[np.argsort(-self.lengths[mega], kind="stable")]
            batches += [mega[i : i + self.batch_size] for i in range(0, len(mega), self.batch_size)]
        partial = [b for b in batches if len(b) < self.batch_size]
        full = [b for b in batches if len(b) == self.batch_size]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()] + partial
        return self.resumed(np.concatenate(shuffled).tolist() if shuffled else [])


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
    group_by_length: bool = False,
) -> DataLoader:
    """Training: a resumable shuffle (``resume_at`` = (epoch, batches already done)), length-grouped
    with ``group_by_length`` (``lengths`` per example). Evaluation: length-sorted batches."""
    common = {"collate_fn": collate_fn, "num_workers": num_workers, "persistent_workers": num_workers > 0}
    if train:
        epoch, done = resume_at or (0, 0)
        if group_by_length:
            if lengths is None:
                raise ValueError("length-grouped training batches need per-example lengths")
            sampler: ResumableShuffleSampler = LengthGroupedShuffleSampler(
                lengths, batch_size, seed, epoch=epoch, skip=done * batch_size)
        else:
            sampler = ResumableShuffleSampler(len(dataset), seed, epoch=epoch, skip=done * batch_size)
        # Its own generator: creating the iterator then draws nothing from the global RNG.
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=torch.Generator().manual_seed(seed), **common)
    if lengths is None:
        raise ValueError("evaluation loaders need per-example lengths to sort by")
    return DataLoader(dataset, batch_size=batch_size, sampler=LengthSortedSampler(lengths), **common)


class PaddingCollator:
    """Pad a list of examples to the batch's longest one; the one collator every task uses.

    Each example is a mapping. Sequence fields (lists or numpy arrays; [T] or [T, ...]) are padded
    on the right along their first axis with ``pad_values[key]`` (0 for keys not named there) and
    stacked into a tensor [B, T_max, ...]; scalar fields become a tensor [B]. Fields that are None
    in every example (an unlabelled test file) are left out. Integer fields become int64, floats
    float32 (so a regression target stays a float), bools stay bool.
    """

    def __init__(self, pad_values: Mapping[str, Any]) -> None:
        self.pad_values = dict(pad_values)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for key, first in examples[0].items():
            if first is None:
                continue
            if isinstance(first, (list, tuple, np.ndarray)):
                rows = [np.asarray(e[key]) for e in examples]
                dtype = _batch_dtype(rows[0].dtype)
                longest = max(len(r) for r in rows)
                out = np.full((len(rows), longest, *rows[0].shape[1:]), self.pad_values.get(key, 0), dtype=dtype)
                for i, row in enumerate(rows):
                    out[i, : len(row)] = row
                batch[key] = torch.from_numpy(out)
            else:
                values = np.asarray([e[key] for e in examples])
                batch[key] = torch.from_numpy(values.astype(_batch_dtype(values.dtype)))
        return batch


def _batch_dtype(dtype: np.dtype) -> type:
    if dtype == np.bool_:
        return np.bool_
    if np.issubdtype(dtype, np.integer):
        return np.int64
    if np.issubdtype(dtype, np.floating):
        return np.float32
    raise TypeError(f"cannot batch values of dtype {dtype}")
