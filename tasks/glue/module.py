"""Sentence(-pair) classification and regression: encoder -> fusion -> pooling -> linear head."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import DictConfig

from sesame.heads.classifier import SequenceClassifierHead
from sesame.heads.pooling import PoolerPooling, build_pooling
from sesame.tasks.distributed import Rows
from sesame.tasks.errors import ConfigError, settings_check
from sesame.tasks.glue.metrics import compute_metrics
from sesame.tasks.glue.submission import submission_tsv
from sesame.tasks.hf_weights import load_prefixed_weights
from sesame.tasks.encoder import Encoder
from sesame.tasks.module import EncoderTaskModule
from sesame.tasks.settings import Settings


@dataclass(frozen=True)
class PoolingSettings(Settings):
    """``cfg.pooling`` (``conf/pooling/*.yaml``): how token features become one vector (``heads/pooling.py``)."""

    group = "pooling"
    name: str


@dataclass(frozen=True)
class ClassifierHeadSettings(Settings):
    """``cfg.head`` of ``conf/task/glue.yaml`` and ``conf/task/text_classification.yaml``."""

    group = "head"
    dropout: float


class SentenceClassificationModule(EncoderTaskModule):
    """``forward(batch) -> logits [B, num_labels]``: fused features -> ``pooling`` -> dropout -> linear.

    Evaluation stages: ``val``, ``val_mm`` (MNLI mismatched, the second validation loader), ``test``;
    each logs the task's GLUE metrics as ``<stage>_<metric>`` and writes ``<stage>_<TASK>.tsv``.
    """

    def __init__(self, cfg: Mapping[str, Any] | DictConfig, encoder: Encoder | None = None) -> None:
        super().__init__(cfg, encoder)
        data_module = get_class(self.task.datamodule)  # it knows how its data settings define the task
        self.spec = data_module.task_spec(data_module.settings_class.from_config(self.cfg.data))
        self.label_names = None if self.spec.is_regression else list(self.spec.labels or ())
        pooling = PoolingSettings.from_config(self.cfg.pooling)
        head = ClassifierHeadSettings.from_config(self.cfg.head)
        with settings_check():
            self.pooling = build_pooling(pooling.name, self.feature_size)
        if isinstance(self.pooling, PoolerPooling):
            if not self.encoder.has_pretrained("pooler"):
                raise ConfigError(
                    f"pooling=pooler, but {self.encoder.name_or_path} has no pooler; use pooling=cls or mean"
                )
            self.pooling.load_from(self.encoder.model.pooler)
        num_labels = 1 if self.label_names is None else len(self.label_names)
        self.head = SequenceClassifierHead(self.pooling.output_size, num_labels, dropout=head.dropout)

    def load_hf_head(self, folder: str | Path) -> None:
        """Load the ``classifier.*`` weights of a Hugging Face ``...ForSequenceClassification`` folder."""
        load_prefixed_weights(self.head.classifier, folder, "classifier.")

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B, num_labels] ([B, 1] for regression)."""
        return self.head(self.pooling(self.encode(batch), batch["attention_mask"]))

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        loss = self.distill(self.head.loss(logits, batch["labels"]), logits, batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    # Evaluation (the path is tasks/module.py's) ------------------------------------------------------
    def eval_stage(self, stage: str, dataloader_idx: int) -> str:
        return f"{stage}_mm" if dataloader_idx == 1 else stage

    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Rows ``index, prediction[, label]``: the class id ([B] int) or the regression score ([B] float)."""
        logits = self(batch)
        pred = logits.squeeze(-1).float() if self.head.is_regression else logits.argmax(dim=-1)
        rows = {"index": batch["index"], "prediction": pred}
        labels = batch.get("labels")
        if labels is None:
            return rows, None
        return {**rows, "label": labels}, self.head.loss(logits, labels)

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        metrics: dict[str, float] = {}
        if "label" in rows:
            as_float = self.head.is_regression  # float64 like the reference implementations, not float32
            metrics = compute_metrics(self.spec.metrics, *(rows[k].astype(float) if as_float else rows[k] for k in ("prediction", "label")))
        # GLUE's names: MNLI-m.tsv for matched, MNLI-mm.tsv for mismatched.
        name = self.spec.submission_name + ("m" if stage.endswith("_mm") else "")
        self.write_text(f"{stage}_{name}.tsv", submission_tsv(rows["index"].tolist(), rows["prediction"].tolist(), self.label_names))
        return metrics
