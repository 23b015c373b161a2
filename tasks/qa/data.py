"""The SQuAD data module: ``cfg.data`` (``conf/data/squad_*.yaml``) -> typed settings -> loaders of windows.

Reading and validation live in ``tasks/qa/readers.py``, windowing and batching in
``tasks/qa/windows.py``; the loader recipe is the shared one of ``tasks/inputs/datamodule.py``.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.qa.readers import LoadReport, read_squad, report_problems
from sesame.tasks.qa.windows import WindowDataset, check_question_lengths, encode_windows, window_collator
from sesame.tasks.qa.settings import SquadDataSettings

log = logging.getLogger(__name__)





class SquadDataModule(SplitDataModule):
    """SQuAD v1.1 / v2.0 from the JSON files named in :class:`SquadDataSettings`.

    Splits are read on first use, evaluation splits first: with ``drop_train_overlap`` the training
    questions whose context paragraph is also evaluated are left out, so partly overlapping files
    (the CS224N and official SQuAD 2.0 dev copies) cannot leak. Evaluation windows are served
    longest first and padded per batch; :meth:`examples` gives the questions that decoding and
    scoring need, :attr:`reports` what reading each split kept and dropped.
    """

    settings: SquadDataSettings
    FILE_KEYS: ClassVar[dict[str, str]] = {"train": "train_file", "validation": "validation_file", "test": "test_file"}

    def __init__(self, settings: SquadDataSettings, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        super().__init__(settings, tokenizer, seed)
        if tokenizer.pad_token_id is None:
            raise ConfigError("the tokenizer has no pad token; set one (e.g. tokenizer.pad_token = tokenizer.eos_token)")
        self.collator = window_collator(tokenizer.pad_token_id)
        self._examples: dict[str, datasets.Dataset] = {}
        self._windows: dict[str, WindowDataset] = {}
        self.reports: dict[str, LoadReport] = {}

    def _file(self, split: str) -> str | None:
        return getattr(self.settings, self.FILE_KEYS[split])

    def has_split(self, split: str) -> bool:
        return bool(self._file(split))

    def eval_units(self, split: str) -> np.ndarray:
        """One row per window: the question of each window."""
        return np.fromiter((w["example_index"] for w in self.windows(split).windows), dtype=np.int64)

    def setup(self, stage: str | None = None) -> None:
        # Evaluation splits first: the training split's overlap check reads their contexts.
        stage_splits = {"fit": ("validation", "train"), "validate": ("validation",), "test": ("test",), "predict": ("test",)}
        for split in stage_splits.get(stage or "", ("validation", "test", "train")):
            if self.has_split(split) and split not in self._windows:
                self._build(split)

    def _build(self, split: str) -> None:
        s = self.settings
        path = self._file(split)
        ds, report = read_squad(path, allow_impossible=s.version_2_with_negative, on_bad_example=s.on_bad_example,
                                key=self.FILE_KEYS[split])
        if split == "train" and s.drop_train_overlap:
            ds = self._without_eval_contexts(ds, path)
        limit = s.max_train_examples if split == "train" else s.max_eval_examples
        if limit is not None:
            ds = ds.select(range(min(limit, len(ds))))
        too_long = check_question_lengths(ds, self.tokenizer, s.max_seq_length, s.doc_stride)
        if too_long:
            problems = [p for _, p in too_long]
            report_problems(LoadReport(str(path), skipped=len(problems), problems=problems),
                            s.on_bad_example, what="questions (too long)")
            report.problems += problems
            report.skipped += len(problems)
            drop = {i for i, _ in too_long}
            ds = ds.select([i for i in range(len(ds)) if i not in drop])
        report.kept = len(ds)
        windows = encode_windows(
            ds, self.tokenizer, max_seq_length=s.max_seq_length, doc_stride=s.doc_stride,
            train=split == "train", drop_windows_without_answer=split == "train" and s.train_windows == "with_answer",
        )
        if not windows:
            raise DataError(f"{path}: no {split} windows left (every window lacks its answer?)")
        self._examples[split], self._windows[split], self.reports[split] = ds, WindowDataset(windows), report
        log.info("%s: %d questions -> %d windows (%s)", split, len(ds), len(windows), path)

    def _without_eval_contexts(self, ds: datasets.Dataset, path: str) -> datasets.Dataset:
        """``ds`` less the questions whose context is also a context of an evaluated split."""
        eval_contexts: set[str] = set()
        for split in ("validation", "test"):
            if self.has_split(split):
                eval_contexts.update(self.examples(split)["context"])
        keep = [i for i, c in enumerate(ds["context"]) if c not in eval_contexts]
        if len(keep) < len(ds):
            log.warning("left out %d of %d training questions of %s whose paragraph is also in the evaluation "
                        "data (data.drop_train_overlap=true)", len(ds) - len(keep), len(ds), path)
            if not keep:
                raise DataError(f"{path}: every training paragraph is also in the evaluation data. "
                                "Fix: use a separate training file, or set data.drop_train_overlap=false")
            ds = ds.select(keep)
        return ds

    def examples(self, split: str) -> datasets.Dataset:
        """The questions of ``split`` ("validation" / "test"), row = ``example_index`` of its windows."""
        if split not in self._examples:
            self._build(split)
        return self._examples[split]

    def windows(self, split: str) -> WindowDataset:
        if split not in self._windows:
            self._build(split)
        return self._windows[split]

    def dataset(self, split: str) -> WindowDataset:
        return self.windows(split)
