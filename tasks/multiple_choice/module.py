"""Multiple choice trained and evaluated: cross-entropy over each question's endings; accuracy, and a
prediction file ``<stage>_predictions.jsonl`` (per question: the chosen ending and every ending's
probability)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.core.distributed import Rows
from sesame.tasks.multiple_choice.metrics import choice_accuracy, example_scores, prediction_lines
from sesame.tasks.multiple_choice.network import MultipleChoiceNetwork

if TYPE_CHECKING:
    from sesame.tasks.base.run_settings import RunSettings


class MultipleChoiceModule(MultipleChoiceNetwork, EncoderTaskModule):
    """The network (``tasks/multiple_choice/network.py``) trained with cross-entropy over the endings."""

    @classmethod
    def example_scores(cls, run_dir: Path, settings: RunSettings,
                       metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
        """``tasks/multiple_choice/metrics.py``'s ``example_scores``: ``val_predictions.jsonl`` against the
        dev labels."""
        return example_scores(run_dir, settings.data.validation_file, metric)

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        loss = self.distill(F.cross_entropy(logits.float(), batch["labels"]), logits, batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Rows ``index, prediction, endings, probabilities[, label]``: the chosen ending [B], how many
        endings each question has [B], and the softmax over them [B, G]."""
        logits = self(batch).float()
        rows = {"index": batch["index"], "prediction": logits.argmax(-1),
                "endings": (batch["attention_mask"].sum(-1) > 0).sum(-1), "probabilities": logits.softmax(-1)}
        labels = batch.get("labels")
        if labels is None:
            return rows, None
        return {**rows, "label": labels}, F.cross_entropy(logits, labels)

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        probabilities = [row[:n] for row, n in zip(rows["probabilities"].tolist(), rows["endings"].tolist())]
        self.write_text(f"{stage}_predictions.jsonl", prediction_lines(rows["index"].tolist(), rows["prediction"].tolist(), probabilities))
        return {"accuracy": choice_accuracy(rows["prediction"], rows["label"])} if "label" in rows else {}
