"""Sentence and sentence-pair data: GLUE TSVs (``task=glue``: :class:`GlueDataModule`) and any
labelled table (``task=text_classification``: :class:`TableDataModule`).

Rows become ``index, input_ids, attention_mask[, token_type_ids], labels``; pairs go in as segments
A and B. ``labels`` is a class id, a regression score, or (``data.multi_label=true``) a multi-hot
row [C] of floats, which the collator stacks into [B, C]. Training batches are shuffled and padded
per batch; evaluation batches are length-sorted (``tasks/inputs/batching.py``). Each data module also says
how its task is scored (its settings' ``task_spec()``, ``tasks/glue/settings.py``), as the module and the predictor read it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.inputs.holdout import holdout_indices
from sesame.tasks.encoders.encoder import check_max_seq_length
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.glue.readers import (
    encode_labels,
    encode_multi_labels,
    first_data_line,
    multi_label_set,
    read_glue_tsv,
    read_table,
)

if TYPE_CHECKING:  # imported where data is read (tasks/glue/readers.py): not on sesame-predict's path
    import datasets

log = logging.getLogger(__name__)

# Evaluation splits and the data keys naming their files; MNLI also has a mismatched dev set.
EVAL_SPLITS = (("validation", "validation_file"), ("validation_mismatched", "validation_mismatched_file"), ("test", "test_file"))



class SentenceDataModule(SplitDataModule):
    """Tokenised sentence(-pair) splits; subclasses say how to read a file and how the task is scored."""

    def __init__(self, settings: Any, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        super().__init__(settings, tokenizer, seed)
        self.spec = settings.task_spec()
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.collator = PaddingCollator({"input_ids": pad_id})

    def _read(self, key: str, require_labels: bool) -> datasets.Dataset:
        """The file of setting ``data.<key>`` as rows ``index, text_a[, text_b], label``."""
        raise NotImplementedError

    def _limit(self, ds: datasets.Dataset, limit: int | None) -> datasets.Dataset:
        return ds.select(range(min(int(limit), len(ds)))) if limit else ds

    def _tokenize(self, ds: datasets.Dataset) -> datasets.Dataset:
        pair = "text_b" in ds.column_names
        max_length = self.settings.max_seq_length
        check_max_seq_length(max_length, self.tokenizer, pair=pair)

        def encode(batch: Mapping[str, list]) -> dict[str, list]:
            enc = self.tokenizer(batch["text_a"], batch["text_b"] if pair else None, truncation=True, max_length=max_length)
            enc["labels"] = batch["label"]
            return enc

        remove = [c for c in ds.column_names if c != "index"]
        return ds.map(encode, batched=True, remove_columns=remove, desc="tokenizing")

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        s = self.settings
        raw: dict[str, datasets.Dataset] = {}  # read and limited, not yet tokenised
        training = stage in (None, "fit") and bool(s.train_file)
        holding_out = training and bool(s.holdout_fraction)
        if training:
            raw["train"] = self._limit(self._read("train_file", require_labels=True), s.max_train_examples)
            if holding_out:  # validate on a share of the training file: the dev files are not read
                train, held_out = holdout_indices(len(raw["train"]), s.holdout_fraction, s.holdout_seed)
                raw["validation"] = raw["train"].select(held_out)
                raw["train"] = raw["train"].select(train)
                log.info("data.holdout_fraction=%s: training on %d examples of %s, validating on the other %d "
                         "(data.holdout_seed=%d); the dev set is not read", s.holdout_fraction, len(train),
                         s.train_file, len(held_out), s.holdout_seed)
        for split, key in EVAL_SPLITS:
            path = getattr(s, key, None)
            if path and not (split.startswith("validation") and holding_out):
                raw[split] = self._limit(self._read(key, require_labels=False), s.max_eval_examples)
        if not raw:
            raise ConfigError("no data files configured: set data.train_file and/or data.validation_file")
        self.splits = {name: self._tokenize(ds) for name, ds in raw.items()}

    def config_updates(self) -> dict[str, Any]:
        """What the module must know from the data: the label set (saved with the checkpoint)."""
        return {"data": {"label_names": list(self.spec.labels) if self.spec.labels else None}}

    def label_counts(self) -> tuple[np.ndarray, int]:
        """``(counts [C], N)``: how many of the ``N`` training examples carry each label (what
        ``head.class_weights=balanced`` is computed from)."""
        if self.spec.is_regression:
            raise ConfigError("a regression task has no label counts")
        labels = np.asarray(self.dataset("train").with_format("numpy")["labels"])
        num_labels = len(self.spec.labels or ())
        if self.spec.multi_label:  # [N, C] multi-hot
            return labels.reshape(-1, num_labels).sum(axis=0).astype(np.int64), int(labels.shape[0])
        return np.bincount(labels.astype(np.int64), minlength=num_labels), int(labels.shape[0])

    def val_dataloader(self) -> Any:
        """The dev set, and for MNLI the mismatched dev set as a second loader (dataloader_idx 1)."""
        if "validation_mismatched" not in self.splits:
            return self._loader("validation", train=False)
        return [self._loader("validation", train=False), self._loader("validation_mismatched", train=False)]


class GlueDataModule(SentenceDataModule):
    """A GLUE task's TSVs (``data.task_name``), read with quoting off (``tasks/glue/readers.py``)."""


    def _read(self, key: str, require_labels: bool) -> datasets.Dataset:
        return read_glue_tsv(getattr(self.settings, key), self.spec, require_labels=require_labels, key=key)


class TableDataModule(SentenceDataModule):
    """Any CSV / TSV / JSON-lines file with a text column, an optional pair column and a label column."""


    def _read(self, key: str, require_labels: bool) -> datasets.Dataset:
        spec = self.spec
        table, file = read_table(getattr(self.settings, key), spec.text_a, spec.text_b, spec.label, key=key,
                                 labels_as_text=spec.multi_label)
        # A line with fewer fields than the header (or an empty cell) reads as None: as a label it was a class
        # 'None' of its own (and made the column's integers floats, '1' -> '1.0'), as a text the word 'None'.
        # A multi-label example may have no labels, and an evaluation file's labels may be absent.
        needed = [(spec.text_a, "text_column"), (spec.text_b, "text_pair_column")]
        if require_labels and not spec.multi_label:
            needed.append((spec.label, "label_column"))
        for column, setting in needed:
            gap = next((i for i, value in enumerate(table[column]) if value is None), None) if column else None
            if gap is not None:
                raise DataError(f"{file}:{gap + first_data_line(file)}: nothing in column {column!r} (data.{setting}): "
                                "the line has fewer fields than the header, or the field is empty. Fix or remove this line")
        raw = list(table[spec.label])
        if not spec.is_regression and not spec.labels:
            # Label set from the training data, sorted so the mapping is the same on every run.
            labels = (multi_label_set(raw, spec.label_separator, file, str(spec.label)) if spec.multi_label
                      else tuple(sorted({str(v) for v in raw})))
            self.spec = spec = replace(spec, labels=labels)
        columns: dict[str, Any] = {"index": list(range(len(table))), "text_a": [str(t) for t in table[spec.text_a]]}
        if spec.text_b is not None:
            columns["text_b"] = [str(t) for t in table[spec.text_b]]
        first_line = first_data_line(file)
        if spec.multi_label:
            columns["label"] = encode_multi_labels(raw, spec.labels or (), spec.label_separator, file, str(spec.label),
                                                   first_line)
        else:
            columns["label"] = encode_labels(raw, spec.labels, file, first_line=first_line, column=str(spec.label))
        import datasets

        return datasets.Dataset.from_dict(columns)
