"""Sentence and sentence-pair data: GLUE TSVs (``task=glue``) and any labelled table (``task=text_classification``).

Rows become ``index, input_ids, attention_mask[, token_type_ids], labels``; pairs go in as segments
A and B. Training batches are shuffled and padded per batch; evaluation batches are length-sorted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import datasets
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast

from sesame.tasks.batching import make_loader
from sesame.tasks.datamodule import SplitDataModule
from sesame.tasks.glue.readers import DataFileError, encode_labels, read_glue_tsv, read_table
from sesame.tasks.glue.specs import GlueTaskSpec, glue_spec


# Evaluation splits and the data keys naming their files; MNLI also has a mismatched dev set.
EVAL_SPLITS = (("validation", "validation_file"), ("validation_mismatched", "validation_mismatched_file"), ("test", "test_file"))


def sentence_task_spec(cfg: DictConfig) -> GlueTaskSpec:
    """The spec of a run: a GLUE task, or one described by ``data.*`` keys for text_classification."""
    if cfg.task.name == "glue":
        return glue_spec(cfg.data.task_name)
    data = cfg.data
    label_names = data.get("label_names")
    regression = bool(data.get("regression", False))
    return GlueTaskSpec(
        text_a=data.text_column,
        text_b=data.get("text_pair_column"),
        label=data.label_column,
        labels=None if regression else (tuple(str(n) for n in label_names) if label_names else ()),
        metrics=("pearson", "spearmanr") if regression else tuple(data.get("metrics") or ("accuracy",)),
        submission_name=str(data.get("name", "predictions")),
    )


class SentenceDataModule(SplitDataModule):
    def __init__(self, cfg: DictConfig, tokenizer: PreTrainedTokenizerFast) -> None:
        super().__init__()
        self.cfg = cfg
        self.data = cfg.data
        self.tokenizer = tokenizer
        self.spec = sentence_task_spec(cfg)
        self.splits: dict[str, datasets.Dataset] = {}
        self.collator = DataCollatorWithPadding(tokenizer)

    # Reading ---------------------------------------------------------------------------------------
    def _read(self, path: str, require_labels: bool = True) -> datasets.Dataset:
        if self.cfg.task.name == "glue":
            return read_glue_tsv(path, self.spec, require_labels=require_labels)
        table, file = read_table(path, self.spec.text_a, self.spec.text_b, self.spec.label)
        if not self.spec.is_regression and not self.spec.labels:
            # Label set from the training data, sorted so the mapping is the same on every run.
            self.spec = GlueTaskSpec(**{**self.spec.__dict__, "labels": tuple(sorted({str(v) for v in table[self.spec.label]}))})
        columns: dict[str, Any] = {"index": list(range(len(table))), "text_a": [str(t) for t in table[self.spec.text_a]]}
        if self.spec.text_b is not None:
            columns["text_b"] = [str(t) for t in table[self.spec.text_b]]
        columns["label"] = encode_labels(list(table[self.spec.label]), self.spec.labels, file, first_line=2)
        return datasets.Dataset.from_dict(columns)

    def _limit(self, ds: datasets.Dataset, key: str) -> datasets.Dataset:
        limit = self.data.get(key)
        return ds.select(range(min(int(limit), len(ds)))) if limit else ds

    def _tokenize(self, ds: datasets.Dataset) -> datasets.Dataset:
        pair = "text_b" in ds.column_names

        def encode(batch: Mapping[str, list]) -> dict[str, list]:
            enc = self.tokenizer(
                batch["text_a"], batch["text_b"] if pair else None, truncation=True, max_length=self.data.max_seq_length
            )
            enc["labels"] = batch["label"]
            return enc

        remove = [c for c in ds.column_names if c != "index"]
        return ds.map(encode, batched=True, remove_columns=remove, desc="tokenizing")

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if stage in (None, "fit") and self.data.get("train_file"):
            self.splits["train"] = self._limit(self._read(self.data.train_file), "max_train_examples")
        for split, key in EVAL_SPLITS:
            if self.data.get(key):
                self.splits[split] = self._limit(self._read(self.data[key], require_labels=False), "max_eval_examples")
        if not self.splits:
            raise DataFileError("no data files configured: set data.train_file and/or data.validation_file")
        self.raw = dict(self.splits)
        self.splits = {name: self._tokenize(ds) for name, ds in self.splits.items()}

    def config_updates(self) -> dict[str, Any]:
        """What the module must know from the data: the label set (saved with the checkpoint)."""
        return {"data": {"label_names": list(self.spec.labels) if self.spec.labels else None}}

    # Loaders ---------------------------------------------------------------------------------------
    def _collate(self, features: list[dict]) -> dict:
        if features and features[0]["labels"] is None:  # unlabelled test file
            features = [{k: v for k, v in f.items() if k != "labels"} for f in features]
        return self.collator(features)

    def _loader(self, split: str, train: bool) -> DataLoader:
        ds = self.splits[split]
        batch_size = int(self.data.batch_size if train else self.data.eval_batch_size)
        return make_loader(
            ds, train=train, batch_size=batch_size, collate_fn=self._collate, num_workers=int(self.data.get("num_workers", 0)),
            lengths=None if train else [len(ids) for ids in ds["input_ids"]], seed=int(self.cfg.seed), resume_at=self.resume_at,
        )

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """The dev set, and for MNLI the mismatched dev set as a second loader (dataloader_idx 1)."""
        if "validation_mismatched" not in self.splits:
            return self._loader("validation", train=False)
        return [self._loader("validation", train=False), self._loader("validation_mismatched", train=False)]

    def has_split(self, split: str) -> bool:
        return split in self.splits
