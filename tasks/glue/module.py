"""Sentence(-pair) classification and regression: encoder -> fusion -> pooling -> linear head."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from sesame.heads.classifier import SequenceClassifierHead
from sesame.heads.pooling import PoolerPooling, build_pooling
from sesame.tasks.distributed import gather_by_index
from sesame.tasks.glue.data import sentence_task_spec
from sesame.tasks.glue.metrics import compute_metrics
from sesame.tasks.glue.submission import submission_tsv
from sesame.tasks.hf_weights import load_prefixed_weights
from sesame.tasks.module import EncoderTaskModule


class SentenceClassificationModule(EncoderTaskModule):
    """``forward(batch) -> logits [B, num_labels]``: fused features -> ``pooling`` -> dropout -> linear.

    Evaluation stages: ``val``, ``val_mm`` (MNLI mismatched, the second validation loader), ``test``;
    each logs the task's GLUE metrics as ``<stage>_<metric>`` and writes ``<stage>_<TASK>.tsv``.
    """

    def __init__(self, cfg: Mapping[str, Any] | DictConfig) -> None:
        super().__init__(cfg)
        self.spec = sentence_task_spec(self.cfg)
        labels = self.cfg.data.get("label_names") or self.spec.labels
        self.label_names = None if self.spec.is_regression else [str(n) for n in labels]
        self.pooling = build_pooling(self.cfg.pooling.name, self.feature_size)
        if isinstance(self.pooling, PoolerPooling):
            if not self.encoder.has_pretrained("pooler"):
                raise ValueError(
                    f"pooling=pooler, but {self.cfg.encoder.name_or_path} has no pooler; use pooling=cls or mean"
                )
            self.pooling.load_from(self.encoder.model.pooler)
        num_labels = 1 if self.label_names is None else len(self.label_names)
        self.head = SequenceClassifierHead(self.pooling.output_size, num_labels, dropout=self.cfg.head.dropout)
        self.main_metric = f"val_{self.spec.metrics[0]}"
        self._outputs: dict[str, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]] = {}

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

    def _predict(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.squeeze(-1) if self.head.is_regression else logits.argmax(dim=-1)

    def _eval_step(self, batch: Mapping[str, torch.Tensor], stage: str) -> None:
        logits = self(batch)
        labels = batch.get("labels")
        if labels is not None:
            self.log(f"{stage}_loss", self.head.loss(logits, labels), batch_size=logits.shape[0], add_dataloader_idx=False)
        self._outputs.setdefault(stage, []).append((batch["index"].cpu(), self._predict(logits).float().cpu(), None if labels is None else labels.cpu()))

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step(batch, "val_mm" if dataloader_idx == 1 else "val")

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def _eval_epoch_end(self, stages: tuple[str, ...]) -> None:
        for stage in stages:
            if self._outputs.get(stage):
                self._score_and_write(stage, self._outputs.pop(stage))

    def _score_and_write(self, stage: str, outputs: list) -> None:
        rows = {
            int(i): (float(p), None if refs is None else float(r))
            for index, preds, refs in outputs
            for i, p, r in zip(index.tolist(), preds.tolist(), refs.tolist() if refs is not None else [None] * len(index))
        }
        rows = gather_by_index(rows)  # all ranks' predictions, each example once
        index = list(rows)
        preds = [p for p, _ in rows.values()]
        refs = [r for _, r in rows.values()]
        if refs[0] is not None:
            as_class = not self.head.is_regression
            metrics = compute_metrics(
                self.spec.metrics, [int(p) if as_class else p for p in preds], [int(r) if as_class else r for r in refs]
            )
            for name, value in metrics.items():
                self.log(f"{stage}_{name}", value, prog_bar=True, sync_dist=False, rank_zero_only=False)
        # GLUE's names: MNLI-m.tsv for matched, MNLI-mm.tsv for mismatched.
        name = self.spec.submission_name + ("m" if stage == "val_mm" else "")
        self.write_text(f"{stage}_{name}.tsv", submission_tsv(index, preds, self.label_names))

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end(("val", "val_mm"))

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end(("test",))
