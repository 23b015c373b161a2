"""Extractive QA (SQuAD v1.1 / v2.0): encoder -> fusion -> span-pointer head.

Evaluation keeps the logits of every window and decodes all windows of a question together at the
end of the epoch (:func:`sesame.heads.span_decode.decode_predictions`), then scores with the
official metrics. Files in the run folder (``test_`` prefix for the test split):
``predictions.json`` ({id: answer}), ``nbest_predictions.json`` and, for v2, ``null_odds.json``
({id: null score - best span score}, for ``sesame-score squad_v2 --na-prob-file``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from sesame.heads.span_decode import QuestionPrediction, decode_predictions
from sesame.heads.span_pointer import SpanPointerHead
from sesame.tasks.distributed import gather_objects
from sesame.tasks.hf_weights import load_prefixed_weights
from sesame.tasks.module import EncoderTaskModule
from sesame.tasks.qa.metrics import compute

if TYPE_CHECKING:
    import datasets

_SPLITS = {"val": "validation", "test": "test"}


class SquadModule(EncoderTaskModule):
    """Span-pointer QA. Reads ``cfg.data.version_2_with_negative`` and ``cfg.head.{n_best_size,
    max_answer_length, null_score_diff_threshold}``; needs the :class:`SquadDataModule` attached to
    the trainer at evaluation (its questions give the contexts and gold answers)."""

    main_metric = "val_f1"

    def __init__(self, cfg: Mapping[str, Any] | DictConfig) -> None:
        super().__init__(cfg)
        head = self.cfg.get("head") or {}
        self.version_2 = bool(self.cfg.data.get("version_2_with_negative", False))
        self.n_best_size = int(head.get("n_best_size", 20))
        self.max_answer_length = int(head.get("max_answer_length", 30))
        self.null_score_diff_threshold = float(head.get("null_score_diff_threshold", 0.0))
        self.head = SpanPointerHead(self.feature_size, allow_null=self.version_2)
        self.metric_version = "squad_v2" if self.version_2 else "squad_v1"
        self._outputs: list[tuple[torch.Tensor, ...]] = []

    def load_hf_head(self, folder: str | Path) -> None:
        """Load the ``qa_outputs.*`` weights of a Hugging Face ``...ForQuestionAnswering`` folder
        (same name and shape as ``SpanPointerHead.qa_outputs``); sesame-eval calls it for HF folders."""
        load_prefixed_weights(self.head.qa_outputs, folder, "qa_outputs.")

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(start_logits, end_logits)``, each [B, T], masked outside the context."""
        return self.head(self.encode(batch), batch["context_mask"])

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        start, end = self(batch)
        loss = self.head.loss(start, end, batch["start_positions"], batch["end_positions"])
        loss = self.distill(loss, (start, end), batch)  # non-context positions (head-masked) are left out
        self.log("train_loss", loss, prog_bar=True, batch_size=start.shape[0])
        return loss

    def _eval_step(self, batch: Mapping[str, torch.Tensor]) -> None:
        start, end = self(batch)
        self._outputs.append((
            batch["feature_index"].cpu(), batch["example_index"].cpu(),
            start.float().cpu(), end.float().cpu(), batch["offsets"].to(torch.int32).cpu(),
        ))

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def test_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def _eval_epoch_end(self, stage: str) -> None:
        if not self._outputs:
            return
        outputs, self._outputs = self._outputs, []
        outputs = [o for part in gather_objects(outputs) for o in part]  # every rank's windows
        width = max(o[2].shape[1] for o in outputs)  # batches were padded to their own length

        def cat(i: int, pad: float) -> torch.Tensor:
            parts = [o[i] for o in outputs]
            if parts[0].dim() == 1:
                return torch.cat(parts)
            extra = (0, 0) if parts[0].dim() == 3 else ()
            return torch.cat([F.pad(p, (*extra, 0, width - p.shape[1]), value=pad) for p in parts])

        # Back to feature order, so the windows of each question come in document order; a window a
        # distributed sampler repeated as padding counts once.
        order = torch.from_numpy(np.unique(cat(0, 0).numpy(), return_index=True)[1])
        example_index = cat(1, 0)[order]
        start, end, offsets = cat(2, 0.0)[order], cat(3, 0.0)[order], cat(4, -1)[order]
        examples = self._examples(stage)
        ids, contexts = list(examples["id"]), list(examples["context"])
        preds = decode_predictions(
            start, end, offsets, example_index, contexts, ids,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
            allow_null=self.version_2, null_score_diff_threshold=self.null_score_diff_threshold,
        )
        self._log_metrics(stage, preds, examples)
        self._write_predictions(stage, preds)

    def _examples(self, stage: str) -> datasets.Dataset:
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        if datamodule is None or not hasattr(datamodule, "examples"):
            raise ValueError(
                "SquadModule needs its SquadDataModule at evaluation (trainer.validate(module, datamodule=dm)): "
                "the questions' contexts and gold answers come from it"
            )
        return datamodule.examples(_SPLITS[stage])

    def _log_metrics(self, stage: str, preds: dict[str, QuestionPrediction], examples: datasets.Dataset) -> None:
        # Score the questions that were decoded (all of them, unless limit_{val,test}_batches cut the run short).
        gold = {qid: list(a["text"]) for qid, a in zip(examples["id"], examples["answers"]) if qid in preds}
        answers = {qid: p.text for qid, p in preds.items()}
        na_probs = {qid: p.null_score_diff for qid, p in preds.items()} if self.version_2 else None
        # na_prob_thresh = the decoder's threshold, so exact/f1 score exactly the written predictions.
        metrics = compute(self.metric_version, gold, answers, na_probs, self.null_score_diff_threshold)
        for name, value in metrics.items():
            self.log(f"{stage}_{name}", float(value), prog_bar=name in ("exact_match", "f1"))

    def _write_predictions(self, stage: str, preds: dict[str, QuestionPrediction]) -> None:
        prefix = "" if stage == "val" else f"{stage}_"
        self.write_json(f"{prefix}predictions.json", {qid: p.text for qid, p in preds.items()})
        # Compact: 20 entries a question, read by programs; indented JSON goes through the pure-Python
        # encoder, about 2-3x slower (seconds on the full dev set).
        self.write_text(f"{prefix}nbest_predictions.json",
                        json.dumps({qid: p.nbest for qid, p in preds.items()}, ensure_ascii=False) + "\n")
        if self.version_2:
            self.write_json(f"{prefix}null_odds.json", {qid: p.null_score_diff for qid, p in preds.items()})
