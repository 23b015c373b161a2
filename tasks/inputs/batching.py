"""How every task's examples become batches: samplers (a resumable shuffle, optionally length-grouped;
length-sorted evaluation), one padding collator, and the loader recipe that combines them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from sesame.tasks.core.errors import ConfigError

log = logging.getLogger(__name__)


class LengthSortedSampler(Sampler[int]):
    """Indices in order of decreasing length, for evaluation.

    With per-batch padding, batches of similar length waste no compute on padding (padding every
    SQuAD window to 384 tokens costs about 2x); the longest batch comes first so memory limits show
    at once. Predictions carry their example index, so order does not matter downstream.

    Under DDP (``world_size`` N > 1) rank r takes every N-th index from r on, the order padded with
    its first indices to a multiple of N as ``torch.utils.data.DistributedSampler`` does, so every
    rank runs the same number of batches; ``tasks/core/distributed.py`` ``gather_rows`` scores each
    example once.
    """

    def __init__(self, lengths: Sequence[int], rank: int = 0, world_size: int = 1) -> None:
        order = np.argsort(-np.asarray(lengths), kind="stable").tolist()
        padded = order + (order * world_size)[: -len(order) % world_size]
        self.order = padded[rank::world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


class ResumableShuffleSampler(Sampler[int]):
    """A shuffle fixed by ``(seed, epoch)``, so a run resumed mid-epoch replays the same order and
    skips exactly the examples it already trained on (``skip``, set by :class:`TrainingResumeCallback`).

    Under DDP (``world_size`` N > 1) every rank draws the same global order, cut into global batches
    of ``N * batch_size``; rank r takes the r-th ``batch_size`` of each, so the ranks' k-th batches
    together are exactly the k-th batch of one process with batch ``N * batch_size``. ``skip`` counts
    global examples (global batches done x global batch). A last partial global batch (``num_examples
    % (N * batch_size)`` examples, a different set each epoch) is left out of that epoch under DDP:
    split, it would leave ranks without a batch or with unequal ones, and padded, it would train
    repeats (``make_loader`` warns). One process keeps it, as before.

    ``len()`` stays this rank's full epoch so the schedule's total step count matches an uninterrupted run.
    """

    def __init__(self, num_examples: int, seed: int, epoch: int = 0, skip: int = 0, *, batch_size: int = 1,
                 rank: int = 0, world_size: int = 1) -> None:
        self.num_examples, self.seed, self.epoch, self._skip = num_examples, seed, epoch, skip
        self.batch_size, self.rank, self.world_size = batch_size, rank, world_size
        self.global_batch = batch_size * world_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_generator(self) -> torch.Generator:
        """The random stream of this ``(seed, epoch)``: the same order every time it is replayed."""
        return torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)

    def this_rank(self, order: list[int]) -> Iterator[int]:
        """The global ``order`` less the examples already trained on (once: the next epoch starts
        whole), then this rank's slice of every full global batch."""
        start, self._skip = self._skip, 0
        order = order[start:]
        if self.world_size == 1:
            return iter(order)
        full = len(order) - len(order) % self.global_batch
        batches = np.asarray(order[:full], dtype=np.int64).reshape(-1, self.world_size, self.batch_size)
        return iter(batches[:, self.rank].ravel().tolist())

    def __iter__(self) -> Iterator[int]:
        return self.this_rank(torch.randperm(self.num_examples, generator=self.epoch_generator()).tolist())

    def __len__(self) -> int:
        if self.world_size == 1:
            return self.num_examples
        return self.num_examples // self.global_batch * self.batch_size


class LengthGroupedShuffleSampler(ResumableShuffleSampler):
    """A resumable shuffle whose consecutive global batches (``world_size * batch_size`` indices)
    have similar lengths.

    The epoch's shuffle (the parent's, fixed by ``(seed, epoch)``) is cut into mega-batches of
    ``mega_batches`` global batches; each is sorted by length and cut into global batches, and the
    order of all full ones is shuffled again, so batches stay random while padding within one
    shrinks. The one partial batch (if any) goes last, so the ``DataLoader`` cuts batches exactly
    where this sampler made them and ``skip`` (examples already trained on) stays a whole number of
    batches after a resume. Under DDP each rank then takes its slice of every global batch, as in
    the parent: the same batches as one process with batch ``world_size * batch_size``.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, epoch: int = 0, skip: int = 0,
                 mega_batches: int = 50, *, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(len(lengths), seed, epoch=epoch, skip=skip, batch_size=batch_size, rank=rank,
                         world_size=world_size)
        self.lengths = np.asarray(lengths)
        self.mega_batches = mega_batches

    def __iter__(self) -> Iterator[int]:
        generator = self.epoch_generator()
        order = torch.randperm(self.num_examples, generator=generator).numpy()
        batch = self.global_batch
        size = batch * self.mega_batches
        batches: list[np.ndarray] = []
        for lo in range(0, len(order), size):
            mega = order[lo : lo + size]
            mega = mega[np.argsort(-self.lengths[mega], kind="stable")]
            batches += [mega[i : i + batch] for i in range(0, len(mega), batch)]
        partial = [b for b in batches if len(b) < batch]
        full = [b for b in batches if len(b) == batch]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()] + partial
        return self.this_rank(np.concatenate(shuffled).tolist() if shuffled else [])


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Training batches by token budget (``data.max_tokens``, as fairseq's ``--max-tokens``): each batch holds as
    many examples as fit in ``max_tokens`` padded tokens, so batches of short examples hold more of them.

    The epoch's shuffle (``self.sampler``'s, fixed by ``(seed, epoch)``: Lightning's ``set_epoch`` reaches it there)
    is cut into mega-batches of about ``mega_batches`` batches' worth of examples; each is sorted by length and cut
    greedily into batches whose padded size (examples x the longest one's ``padded_length``) stays within the
    budget, and the order of all batches is shuffled again. Every example is in exactly one batch of the epoch.

    Under DDP (``world_size`` N > 1) the batches are dealt in rounds of N: rank r takes the r-th of each round, and
    a last round with fewer than N batches is left out, so every rank runs the same number of steps. ``skip``
    counts this rank's batches already trained on (a resumed run), skipped once.

    ``len()`` is this rank's batch count of the current epoch; it changes a little from epoch to epoch as the
    shuffle packs differently (the learning-rate schedule is sized from the first epoch's).
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, seed: int, epoch: int = 0, skip: int = 0,
                 mega_batches: int = 50, padded_length: Callable[[int], int] | None = None, *, rank: int = 0,
                 world_size: int = 1) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.padded_length = padded_length or (lambda n: n)
        self.max_tokens, self.mega_batches = max_tokens, mega_batches
        longest = self.padded_length(int(self.lengths.max(initial=0)))
        if longest > max_tokens:
            raise ConfigError(f"data.max_tokens={max_tokens}: the longest training example takes {longest} tokens "
                              "once padded (a multiple-choice example: every ending), more than a batch may hold. "
                              f"Fix: data.max_tokens={longest} or more")
        self.sampler = ResumableShuffleSampler(len(self.lengths), seed, epoch=epoch)
        self.rank, self.world_size, self._skip = rank, world_size, skip
        self._cut: tuple[int, list[np.ndarray]] | None = None  # (epoch, its batches)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def epoch_batches(self) -> list[np.ndarray]:
        """Every batch of the epoch (all ranks'), in training order: the same list every time it is asked for."""
        epoch = self.sampler.epoch
        if self._cut is None or self._cut[0] != epoch:
            generator = self.sampler.epoch_generator()
            order = torch.randperm(len(self.lengths), generator=generator).numpy()
            mean = max(float(self.lengths.mean()) if len(self.lengths) else 1.0, 1.0)
            mega = max(1, int(self.mega_batches * self.max_tokens / mean))
            batches: list[np.ndarray] = []
            for lo in range(0, len(order), mega):
                chunk = order[lo : lo + mega]
                chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
                start = 0
                while start < len(chunk):  # longest first: a batch's padded length is its first example's
                    size = max(1, self.max_tokens // self.padded_length(int(self.lengths[chunk[start]])))
                    batches.append(chunk[start : start + size])
                    start += size
            self._cut = epoch, [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        return self._cut[1]

    def _this_rank(self) -> list[np.ndarray]:
        batches = self.epoch_batches()
        rounds = len(batches) // self.world_size
        return batches[self.rank : rounds * self.world_size : self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        start, self._skip = self._skip, 0
        return iter([batch.tolist() for batch in self._this_rank()[start:]])

    def __len__(self) -> int:
        return len(self._this_rank())

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
    max_tokens: int | None = None,
    padded_length: Callable[[int], int] | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> DataLoader:
    """Training: a resumable shuffle (``resume_at`` = (epoch, batches already done)), length-grouped
    with ``group_by_length`` (``lengths`` per example), or batches of up to ``max_tokens`` padded tokens
    (:class:`TokenBudgetBatchSampler`; an example's padded length is ``padded_length`` of its length, and
    ``batch_size`` is not used). Evaluation: length-sorted batches.

    ``batch_size`` is per process; under DDP (``world_size`` > 1, this process ``rank``) the samplers
    shard themselves (Lightning must not wrap them: ``use_distributed_sampler=False``), training
    batches as one process with batch ``world_size * batch_size`` would see them."""
    common = {"collate_fn": collate_fn, "num_workers": num_workers, "persistent_workers": num_workers > 0}
    shard = {"rank": rank, "world_size": world_size}
    if train and max_tokens:
        if lengths is None:
            raise ValueError("token-budget training batches need per-example lengths")
        epoch, done = resume_at or (0, 0)
        budget = TokenBudgetBatchSampler(lengths, max_tokens, seed, epoch=epoch, skip=done, padded_length=padded_length,
                                         **shard)
        batches = len(budget.epoch_batches())
        if batches < world_size:
            raise ConfigError(f"data.max_tokens={max_tokens} packs the {len(lengths)} training examples into {batches} "
                              f"batch(es), fewer than the {world_size} processes: under DDP every rank trains on a batch "
                              "of each round. Fix: lower data.max_tokens (or trainer.devices / trainer.num_nodes)")
        if batches % world_size and rank == 0:
            log.warning("%d processes: %d of this epoch's %d token-budget batches make a last round that is not whole, "
                        "which DDP leaves out (others each epoch, as the shuffle changes)", world_size,
                        batches % world_size, batches)
        return DataLoader(dataset, batch_sampler=budget, **common)
    if train:
        epoch, done = resume_at or (0, 0)
        skip = done * batch_size * world_size  # global batches done x global batch
        if group_by_length:
            if lengths is None:
                raise ValueError("length-grouped training batches need per-example lengths")
            sampler: ResumableShuffleSampler = LengthGroupedShuffleSampler(
                lengths, batch_size, seed, epoch=epoch, skip=skip, **shard)
        else:
            sampler = ResumableShuffleSampler(len(dataset), seed, epoch=epoch, skip=skip, batch_size=batch_size, **shard)
        left_out = sampler.num_examples % sampler.global_batch
        if world_size > 1 and left_out and rank == 0:
            log.warning("%d processes x data.batch_size=%d: %d of the %d training examples fall in a last partial global "
                        "batch, which DDP leaves out of each epoch (another %d each epoch, as the shuffle changes); a "
                        "global batch that divides the example count trains on all", world_size, batch_size, left_out,
                        sampler.num_examples, left_out)
        # Its own generator: creating the iterator then draws nothing from the global RNG.
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, generator=torch.Generator().manual_seed(seed), **common)
    if lengths is None:
        raise ValueError("evaluation loaders need per-example lengths to sort by")
    return DataLoader(dataset, batch_size=batch_size, sampler=LengthSortedSampler(lengths, **shard), **common)


class PaddingCollator:
    """Pad a list of examples to the batch's longest one; the one collator every task uses.

    Each example is a mapping. Sequence fields (lists or numpy arrays; [T] or [T, ...]) are padded
    on the right along their first axis with ``pad_values[key]`` (0 for keys not named there) and
    stacked into a tensor [B, T_max, ...]; scalar fields become a tensor [B]. Fields that are None
    in every example (an unlabelled test file) are left out. Integer fields become int64, floats
    float32 (so a regression target stays a float), bools stay bool.

    ``grouped`` names the fields that hold a group of sequences per example (multiple choice: one
    token sequence per candidate, ``[G][T_g]``): they are padded on both axes into [B, G_max, T_max],
    a missing member being all padding (an all-zero ``attention_mask`` row says it is absent).

    ``multiple_of`` (``data.pad_to_multiple_of``) rounds T_max up to a multiple of it, never past
    ``max_length`` (unless the longest example already is longer): length-grouped batches then come in a
    handful of shapes instead of one per length, which keeps glibc from holding freed activation memory
    of every shape (docs/results/peak_rss_allocator.md).
    """

    def __init__(self, pad_values: Mapping[str, Any], multiple_of: int | None = None, max_length: int | None = None,
                 grouped: Collection[str] = ()) -> None:
        self.pad_values = dict(pad_values)
        self.multiple_of = multiple_of
        self.max_length = max_length
        self.grouped = frozenset(grouped)

    def padded_to(self, multiple_of: int | None, max_length: int | None) -> PaddingCollator:
        """The same collator, padding to a multiple of ``multiple_of`` tokens (None: to the longest)."""
        return PaddingCollator(self.pad_values, multiple_of, max_length, self.grouped)

    def padded_length(self, longest: int) -> int:
        """What a batch whose longest example has ``longest`` tokens is padded to."""
        if not self.multiple_of:
            return longest
        rounded = -(-longest // self.multiple_of) * self.multiple_of
        return max(longest, min(rounded, self.max_length)) if self.max_length else rounded

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        for key, first in examples[0].items():
            if first is None:
                continue
            if key in self.grouped:
                batch[key] = self._grouped(key, [[np.asarray(m) for m in e[key]] for e in examples])
            elif isinstance(first, (list, tuple, np.ndarray)):
                rows = [np.asarray(e[key]) for e in examples]
                dtype = _batch_dtype(rows[0].dtype)
                longest = self.padded_length(max(len(r) for r in rows))
                out = np.full((len(rows), longest, *rows[0].shape[1:]), self.pad_values.get(key, 0), dtype=dtype)
                for i, row in enumerate(rows):
                    out[i, : len(row)] = row
                batch[key] = torch.from_numpy(out)
            else:
                values = np.asarray([e[key] for e in examples])
                batch[key] = torch.from_numpy(values.astype(_batch_dtype(values.dtype)))
        return batch

    def _grouped(self, key: str, groups: list[list[np.ndarray]]) -> torch.Tensor:
        """[B, G_max, T_max, ...] of each example's members, padded on both axes."""
        members = [m for group in groups for m in group]
        if not members:
            raise ValueError(f"field {key!r}: every example's group is empty")
        width = max(len(group) for group in groups)
        longest = self.padded_length(max(len(m) for m in members))
        out = np.full((len(groups), width, longest, *members[0].shape[1:]), self.pad_values.get(key, 0),
                      dtype=_batch_dtype(members[0].dtype))
        for i, group in enumerate(groups):
            for j, member in enumerate(group):
                out[i, j, : len(member)] = member
        return torch.from_numpy(out)


def example_size(input_ids: Sequence[Any]) -> int:
    """Tokens an example costs once padded: its length, or for a group of sequences (multiple
    choice) members x the longest member. What length sorting and grouping order examples by."""
    if len(input_ids) and isinstance(input_ids[0], (list, tuple, np.ndarray)):
        return len(input_ids) * max(len(member) for member in input_ids)
    return len(input_ids)


def _batch_dtype(dtype: np.dtype) -> type:
    if dtype == np.bool_:
        return np.bool_
    if np.issubdtype(dtype, np.integer):
        return np.int64
    if np.issubdtype(dtype, np.floating):
        return np.float32
    raise TypeError(f"cannot batch values of dtype {dtype}")
