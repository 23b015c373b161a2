"""Token tagging (NER): encoder -> layer fusion -> :class:`TokenTaggerHead` (softmax or CRF).

Training: cross-entropy over labelled sub-tokens (``-100`` ignored), or the CRF's negative
log-likelihood over the first sub-token of each word. Evaluation: one prediction per word (read at
its first sub-token), stitched back into sentences across windows, scored with entity-level
precision / recall / F1 (``val_f1`` is the main metric) and written to ``{stage}_predictions.conll``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sesame.heads.masking import IGNORE_INDEX
from sesame.tasks.core.distributed import Rows, share_of_total
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.base.task_module import STAGE_SPLITS, EncoderTaskModule
from sesame.tasks.ner.network import NerNetwork
from sesame.tasks.ner.metrics import MODES, entity_scores, example_scores, format_conll_predictions, format_report

from sesame.tasks.ner.windows import stitch_words

if TYPE_CHECKING:
    from sesame.tasks.base.run_settings import RunSettings

log = logging.getLogger(__name__)


class NerModule(NerNetwork, EncoderTaskModule):
    """The tagging network (``tasks/ner/network.py``) trained and evaluated; see the module docstring
    for training and metrics. ``task.entity_metric``: ``conlleval`` or ``strict``.
    """

    eval_key = ("example_index", "word_index")
    eval_unit = "example_index"

    @classmethod
    def example_scores(cls, run_dir: Path, settings: RunSettings,
                       metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
        """``tasks/ner/metrics.py``'s ``example_scores``: ``val_predictions.conll`` (gold and predicted tags),
        sentence by sentence."""
        return example_scores(run_dir, settings.task.entity_metric, metric)

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.entity_metric = self.task.entity_metric
        if self.entity_metric not in MODES:
            raise ConfigError(f"task.entity_metric={self.entity_metric!r} is not one of {', '.join(MODES)}")

    def resolved_settings(self) -> dict[str, Any]:
        """``data.tag_names`` read from the training file (so loading the model needs no training file)."""
        return {} if self.read_tag_names is None else {"data.tag_names": list(self.read_tag_names)}

    def _loss(self, logits: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        # The CRF runs over words (first sub-tokens) even when every sub-token carries a label.
        return self.head.loss(logits, batch["labels"], mask=batch["word_index"] >= 0)

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        loss = self.distill(self._loss(logits, batch), logits, batch, mask=batch["word_index"] >= 0)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        if self.head.crf is None:  # a mean over this rank's labelled tokens: under DDP, weighted by their share
            loss = loss * share_of_total((batch["labels"] != IGNORE_INDEX).sum())
        return loss

    # Evaluation (the path is tasks/base/task_module.py's) ------------------------------------------------------
    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One row per word (read at its first sub-token): sentence, word position, predicted and gold tag."""
        logits = self(batch)
        words = batch["word_index"] >= 0  # [B, T]
        preds = self.head.decode(logits, words)
        example = batch["example_index"].unsqueeze(1).expand_as(words)
        rows = {"example_index": example[words], "word_index": batch["word_index"][words],
                "prediction": preds[words], "label": batch["labels"][words]}
        return rows, self._loss(logits, batch)

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        # Rows hold whole sentences only (tasks/base/task_module.py drops partly evaluated ones), sorted by
        # (sentence, word): renumber the sentences 0..n-1 and put each word back in its place.
        examples = self.split_data().examples[STAGE_SPLITS[stage]]
        order, ex = np.unique(rows["example_index"], return_inverse=True)
        lengths = [len(examples.tokens[i]) for i in order]
        pred_ids = stitch_words(ex, rows["word_index"], rows["prediction"], lengths)
        gold_ids = stitch_words(ex, rows["word_index"], rows["label"], lengths)
        if any((g == IGNORE_INDEX).any() for g in gold_ids):
            log.warning("%s: unlabelled words; no entity scores", stage)
            return {}
        names = np.asarray(self.tag_names, dtype=object)
        pred_tags = [names[p].tolist() for p in pred_ids]
        gold_tags = [names[g].tolist() for g in gold_ids]
        scores = entity_scores(gold_tags, pred_tags, mode=self.entity_metric)
        log.info("%s entity scores (%s):\n%s", stage, self.entity_metric, format_report(scores))
        tokens = [examples.tokens[i] for i in order]
        self.write_text(f"{stage}_predictions.conll", format_conll_predictions(tokens, gold_tags, pred_tags))
        return scores.as_flat_dict()

    # Scalar mix ----------------------------------------------------------------------------------
    def _scalar_mix_weights(self) -> list[float] | None:
        mix = getattr(self.fusion, "scalar_mix", None)
        return None if mix is None else mix.layer_weights()

    def on_train_epoch_end(self) -> None:
        weights = self._scalar_mix_weights()
        if weights is not None:  # the learned layer weights, per epoch, in the run's CSV log
            for i, w in enumerate(weights):
                self.log(f"scalar_mix_weight_{i}", w)

    def final_metrics(self) -> dict[str, float]:
        """Merged into ``metrics.json`` by the runner after evaluation: the scalar-mix weights of the
        evaluated (best) checkpoint, also rewritten to ``scalar_mix_weights.json`` so both agree."""
        weights = self._write_scalar_mix()
        return {} if weights is None else {f"scalar_mix_weight_{i}": w for i, w in enumerate(weights)}

    def on_fit_end(self) -> None:
        self._write_scalar_mix()

    def _write_scalar_mix(self) -> list[float] | None:
        """Write ``scalar_mix_weights.json`` (when the fusion is a scalar mix); returns the weights."""
        weights = self._scalar_mix_weights()
        if weights is None:
            return None
        mix = self.fusion.scalar_mix
        self.write_json(
            "scalar_mix_weights.json",
            {
                "weights": weights,  # softmax-normalised, index 0 = embeddings output, last = top layer
                "hidden_states": list(range(len(weights))),
                "gamma": float(mix.gamma.detach()),
                "encoder": str(self.settings.encoder.name_or_path),
            },
        )
        log.info("scalar-mix layer weights: %s", ", ".join(f"{i}:{w:.3f}" for i, w in enumerate(weights)))
        return weights
