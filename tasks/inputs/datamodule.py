"""What every task's data module shares: typed settings, named splits, and one loader recipe.

``conf/data/*.yaml`` -> the class ``task.data_settings`` names (a ``tasks/inputs/data_settings.py``
``DataSettings``; ``tasks/runs/runner.py`` ``build_datamodule`` reads it) -> ``SplitDataModule(settings, tokenizer, seed)`` -> loaders from ``tasks/inputs/batching.py`` ``make_loader``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from sesame.tasks.inputs.batching import example_size, make_loader
from sesame.tasks.encoders.encoder import check_max_seq_length
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inputs.data_settings import DataSettings


class SplitDataModule(L.LightningDataModule):
    """A data module whose splits are ``train``, ``validation`` and ``test``.

    Subclasses take their task's :class:`DataSettings`, set ``self.collator`` (a ``PaddingCollator``) and fill
    ``self.splits`` (split name -> dataset) in ``setup``, or implement ``dataset(split)`` and ``has_split(split)``
    themselves; ``eval_units`` defaults to one row per example (the dataset's ``index`` column). ``resume_at`` is set by
    ``tasks/runs/checkpoint_callbacks.py`` ``TrainingResumeCallback`` when a run resumes mid-epoch.
    """

    resume_at: tuple[int, int] | None = None

    def __init__(self, settings: DataSettings, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        super().__init__()
        check_max_seq_length(settings.max_seq_length, tokenizer)
        self.settings = settings
        self.tokenizer = tokenizer
        self.seed = int(seed)
        self.collator: Any = None
        self.splits: dict[str, Dataset] = {}

    def dataset(self, split: str) -> Dataset:
        if split not in self.splits:
            raise ConfigError(f"no {split} data: set data.{split}_file")
        return self.splits[split]

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def config_updates(self) -> dict[str, Any]:
        """What the module must learn from the data (label or tag sets), merged into the saved config."""
        return {}

    def eval_units(self, split: str) -> np.ndarray:
        """[R] for every row an evaluation of ``split`` yields (one per example, word or window), the
        example it belongs to; the module scores an example only once all its rows were evaluated.
        Default: one row per example, its ``index`` column."""
        return np.asarray(self.dataset(split)["index"], dtype=np.int64)

    def example_lengths(self, split: str) -> list[int]:
        """Tokens per example of ``split`` once padded (:func:`example_size`), for length-sorted
        evaluation and length-grouped training batches."""
        ds = self.dataset(split)
        if hasattr(ds, "lengths"):
            return list(ds.lengths())
        return [example_size(ids) for ids in ds["input_ids"]]

    def _loader(self, split: str, train: bool) -> DataLoader:
        s = self.settings
        batch_size = int(s.batch_size if train else s.eval_batch_size)
        dataset = self.dataset(split)
        # Under DDP sesame's samplers shard themselves (tasks/inputs/batching.py); no trainer yet (the
        # feature cache's loaders): one process, every example.
        rank, world_size = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        budget = s.max_tokens if train else None
        if train and not budget and world_size > 1 and len(dataset) < batch_size * world_size:
            raise ConfigError(
                f"data.batch_size={batch_size} on {world_size} processes makes global batches of "
                f"{batch_size * world_size}, more than the {len(dataset)} training examples (QA: windows): under DDP every rank "
                f"trains on full batches only. Fix: lower data.batch_size (or trainer.devices / trainer.num_nodes)")
        collator = self.collator.padded_to(s.pad_to_multiple_of, s.max_seq_length)
        return make_loader(
            dataset, train=train, batch_size=batch_size, num_workers=int(s.num_workers), collate_fn=collator,
            lengths=self.example_lengths(split) if not train or s.group_by_length or budget else None, seed=self.seed,
            resume_at=self.resume_at, group_by_length=train and bool(s.group_by_length),
            max_tokens=budget, padded_length=collator.padded_length, rank=rank, world_size=world_size,
        )

    def train_dataloader(self) -> DataLoader:
        loader = self._loader("train", train=True)
        self.resume_at = None  # only the first loader after a resume skips what was done
        return loader

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        return self._loader("validation", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)
