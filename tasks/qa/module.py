"""Extractive QA (SQuAD v1.1 / v2.0): encoder -> fusion -> span-pointer head.

Evaluation keeps the logits of every window (rows keyed by window, ``tasks/base/task_module.py``) and decodes
all windows of a question together (``tasks/qa/predictions.py``), then scores with the official
metrics (``tasks/qa/metrics.py``). Files in the run folder (``test_`` prefix for the test split):
``predictions.json`` ({id: answer}), ``nbest_predictions.json`` and, for v2, ``null_odds.json``
({id: null score - best span score}, for ``sesame-score squad_v2 --na-prob-file``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from sesame.heads.calibration import confidence_ece
from sesame.tasks.core.distributed import Rows
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.base.task_module import STAGE_SPLITS, EncoderTaskModule
from sesame.tasks.qa.network import SquadNetwork
from sesame.tasks.qa.metrics import compute, example_scores, raw_scores_v2
from sesame.tasks.qa.predictions import QuestionPrediction, decode_predictions

if TYPE_CHECKING:
    from sesame.tasks.base.run_settings import RunSettings



class SquadModule(SquadNetwork, EncoderTaskModule):
    """The span-pointer network (``tasks/qa/network.py``) trained and evaluated; needs the
    ``SquadDataModule`` attached to the trainer at evaluation (its questions give the contexts and
    gold answers)."""

    eval_key = ("feature_index",)
    eval_unit = "example_index"
    eval_pad_values = {"offsets": -1}

    @classmethod
    def example_scores(cls, run_dir: Path, settings: RunSettings,
                       metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
        """``tasks/qa/metrics.py``'s ``example_scores``: ``predictions.json`` against the dev file's answers."""
        return example_scores(run_dir, settings.data, settings.head, metric)

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.metric_version = "squad_v2" if self.version_2 else "squad_v1"

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        start, end = self(batch)
        loss = self.head.loss(start, end, batch["start_positions"], batch["end_positions"])
        loss = self.distill(loss, (start, end), batch)  # non-context positions (head-masked) are left out
        self.log("train_loss", loss, prog_bar=True, batch_size=start.shape[0])
        return loss

    # Evaluation (the path is tasks/base/task_module.py's) ------------------------------------------------------
    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], None]:
        """One row per window: its index, its question, start/end logits [B, T] and offsets [B, T, 2]."""
        start, end = self(batch)
        return {
            "feature_index": batch["feature_index"], "example_index": batch["example_index"],
            "start": start.float(), "end": end.float(), "offsets": batch["offsets"].to(torch.int32),
        }, None

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        # Rows come sorted by window, so the windows of each question are in document order.
        examples = self.split_data().examples(STAGE_SPLITS[stage])
        preds = decode_predictions(
            torch.from_numpy(rows["start"]), torch.from_numpy(rows["end"]), torch.from_numpy(rows["offsets"]),
            torch.from_numpy(rows["example_index"]), list(examples["context"]), list(examples["id"]),
            n_best_size=self.decoding.n_best_size, max_answer_length=self.decoding.max_answer_length,
            allow_null=self.version_2, null_score_diff_threshold=self.decoding.null_score_diff_threshold,
        )
        self._write_predictions(stage, preds)
        # Score the questions that were decoded (all of them, unless limit_{val,test}_batches cut the run short).
        gold = {qid: list(a["text"]) for qid, a in zip(examples["id"], examples["answers"]) if qid in preds}
        answers = {qid: p.text for qid, p in preds.items()}
        na_probs = {qid: p.null_score_diff for qid, p in preds.items()} if self.version_2 else None
        # na_prob_thresh = the decoder's threshold, so exact/f1 score exactly the written predictions.
        metrics = compute(self.metric_version, gold, answers, na_probs, self.decoding.null_score_diff_threshold)
        # Calibration of the answers' n-best probabilities against exact match (0-1 scale, 15 bins).
        exact, _ = raw_scores_v2(gold, answers)
        metrics["ece"] = confidence_ece(torch.tensor([preds[q].confidence for q in exact], dtype=torch.float64),
                                        torch.tensor([exact[q] > 0 for q in exact]))
        return metrics

    def _write_predictions(self, stage: str, preds: dict[str, QuestionPrediction]) -> None:
        prefix = "" if stage == "val" else f"{stage}_"
        self.write_json(f"{prefix}predictions.json", {qid: p.text for qid, p in preds.items()})
        # Compact: 20 entries a question, read by programs; indented JSON goes through the pure-Python
        # encoder, about 2-3x slower (seconds on the full dev set).
        self.write_text(f"{prefix}nbest_predictions.json",
                        json.dumps({qid: p.nbest for qid, p in preds.items()}, ensure_ascii=False) + "\n")
        if self.version_2:
            self.write_json(f"{prefix}null_odds.json", {qid: p.null_score_diff for qid, p in preds.items()})
