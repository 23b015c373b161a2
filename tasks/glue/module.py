"""Sentence(-pair) classification and regression: encoder -> fusion -> pooling -> linear head.

Single-label classification trains with cross-entropy (``head.class_weights``, ``head.label_smoothing``),
regression with MSE, and multi-label tables (``data.multi_label=true``) with per-label binary
cross-entropy: there each label's decision threshold is tuned on the dev set at every validation
during training, kept in the head (``head.thresholds``, so ``best.ckpt`` holds those of its own
validation) and used as saved by every later evaluation and prediction.

Single-label classification also reports the expected calibration error of its softmax
probabilities (``<stage>_ece``, 15 bins), and ``calibrate=true`` fits a temperature on the dev
logits after training (Guo et al., 2017; ``heads/calibration.py``): ``forward`` divides the logits
by it, so evaluation, ``sesame-predict`` and ``sesame-export`` all use it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn

from sesame.heads.calibration import TemperatureScaling, calibration_doubt, expected_calibration_error
from sesame.heads.classifier import balanced_class_weights
from sesame.tasks.core.distributed import Rows
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.glue.metrics import compute_metrics, example_scores, multilabel_metrics, tune_thresholds
from sesame.tasks.glue.network import SentenceClassificationNetwork
from sesame.tasks.glue.submission import submission_tsv
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.base.task_module import EncoderTaskModule

if TYPE_CHECKING:
    from sesame.tasks.base.run_settings import RunSettings

log = logging.getLogger(__name__)



class SentenceClassificationModule(SentenceClassificationNetwork, EncoderTaskModule):
    """The network (``tasks/glue/network.py``) trained with its loss and evaluated.

    Evaluation stages: ``val``, ``val_mm`` (MNLI mismatched, the second validation loader), ``test``;
    each logs the task's GLUE metrics as ``<stage>_<metric>`` and writes ``<stage>_<TASK>.tsv``.
    """

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.class_weights_setting = settings.head.class_weights
        #: ``head.class_weights=balanced`` once resolved from the training labels (:meth:`use_balanced_weights`):
        #: the weights every checkpoint's config records instead of ``balanced``. None otherwise.
        self.balanced_weights: tuple[float, ...] | None = None
        self._eval_logits: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def setup(self, stage: str) -> None:
        """Before training: ``head.class_weights=balanced`` becomes weights from the training labels."""
        if stage != TrainerFn.FITTING:
            return
        if self.multi_label and self.distiller is not None:
            raise ConfigError("distill.teacher: distillation compares softmax distributions, which a multi-label "
                              "model does not have. Fix: train without distill.teacher")
        if self.class_weights_setting == "balanced":
            datamodule = getattr(self.trainer, "datamodule", None)
            if datamodule is None or not hasattr(datamodule, "label_counts"):
                raise RuntimeError("head.class_weights=balanced needs the training data: trainer.fit(module, datamodule=dm)")
            self.use_balanced_weights(*datamodule.label_counts())

    def use_balanced_weights(self, counts: Sequence[int] | np.ndarray, num_examples: int) -> list[float]:
        """Set the ``balanced`` class weights for training labels counted ``counts`` [C] over
        ``num_examples`` examples, and keep them (``balanced_weights``) for the config saved with every
        checkpoint, as its ``head.class_weights`` (:meth:`resolved_settings`: a trained model then needs no
        training data to rebuild its loss). The module's own config is left as it was given."""
        counts = np.asarray(counts, dtype=np.int64)
        names = self.label_names or []
        where = f"{self.settings.data.train_file} ({num_examples} examples)"
        absent = [n for n, c in zip(names, counts) if c == 0]
        if absent:
            raise DataError(f"head.class_weights=balanced: label(s) {absent} never occur in the training data {where}, so "
                            f"they have no balanced weight. Fix: give head.class_weights as a list of {len(names)} weights "
                            f"({', '.join(names)}), or drop those labels from data.label_names")
        everywhere = [n for n, c in zip(names, counts) if c == num_examples] if self.multi_label else []
        if everywhere:
            raise DataError(f"head.class_weights=balanced: label(s) {everywhere} apply to every training example of "
                            f"{where}, so they have no negatives to balance. Fix: give head.class_weights as a list")
        weights = balanced_class_weights(torch.as_tensor(counts), int(num_examples), multi_label=self.multi_label).tolist()
        self.head.set_class_weights(weights)
        self.balanced_weights = tuple(weights)
        kind = "positive weight per label" if self.multi_label else "class weights"
        log.info("head.class_weights=balanced over %d training examples (%s): %s", num_examples, kind,
                 ", ".join(f"{n}={w:.4g} ({c} examples)" for n, w, c in zip(names, weights, counts.tolist())))
        return weights

    def resolved_settings(self) -> dict[str, Any]:
        """``head.class_weights=balanced``: the weights it resolved to over the training data."""
        return {} if self.balanced_weights is None else {"head.class_weights": list(self.balanced_weights)}

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch)
        loss = self.distill(self.head.loss(logits, batch["labels"]), logits, batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    # Evaluation (the path is tasks/base/task_module.py's) ------------------------------------------------------
    @classmethod
    def example_scores(cls, run_dir: Path, settings: RunSettings,
                       metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
        """``tasks/glue/metrics.py``'s ``example_scores``: ``val_<TASK>.tsv`` against the run's gold labels."""
        return example_scores(run_dir, settings.data, metric)

    def eval_stage(self, stage: str, dataloader_idx: int) -> str:
        return f"{stage}_mm" if dataloader_idx == 1 else stage

    def eval_rows(self, batch: Mapping[str, torch.Tensor], stage: str) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
        """Rows ``index, prediction[, label]``: the class id ([B] int) or the regression score ([B] float);
        multi-label: ``index, probabilities[, label]`` with the sigmoid probabilities and the gold
        multi-hot rows, both [B, C]."""
        logits = self(batch)
        if self.multi_label:
            rows = {"index": batch["index"], "probabilities": self.head.probabilities(logits.float())}
        else:
            pred = logits.squeeze(-1).float() if self.head.is_regression else logits.argmax(dim=-1)
            rows = {"index": batch["index"], "prediction": pred}
            if self.is_single_label:  # for the calibration error, and for calibrate=true
                rows["logits"] = logits.float()
        labels = batch.get("labels")
        if labels is None:
            return rows, None
        return {**rows, "label": labels}, self.head.loss(logits, labels)

    def score(self, stage: str, rows: Rows) -> dict[str, float]:
        if self.multi_label:
            return self._score_multi_label(stage, rows)
        metrics: dict[str, float] = {}
        if "label" in rows:
            as_float = self.head.is_regression  # float64 like the reference implementations, not float32
            metrics = compute_metrics(self.spec.metrics, *(rows[k].astype(float) if as_float else rows[k] for k in ("prediction", "label")))
            if self.is_single_label:
                self._eval_logits[stage] = (rows["logits"], rows["label"])
                probs = torch.from_numpy(rows["logits"]).double().softmax(-1)
                metrics["ece"] = expected_calibration_error(probs, torch.from_numpy(rows["label"]))
        # GLUE's names: MNLI-m.tsv for matched, MNLI-mm.tsv for mismatched.
        name = self.spec.submission_name + ("m" if stage.endswith("_mm") else "")
        self.write_text(f"{stage}_{name}.tsv", submission_tsv(rows["index"].tolist(), rows["prediction"].tolist(), self.label_names))
        return metrics

    def calibration_refusal(self) -> str | None:
        if self.is_single_label:
            return None
        return (f"calibrate=true fits a softmax temperature: it applies to single-label classification, not to "
                f"task={self.task.name} here (regression or multi-label)")

    def calibrated_state(self) -> dict[str, torch.Tensor]:
        return {"calibration.temperature": self.calibration.temperature}

    def calibrate(self) -> dict[str, float | str]:
        """Fit the temperature on the logits of the latest validation (``calibrate=true``, after training).

        Returns ``val_temperature``, ``val_ece_calibrated`` (on the dev set it was fitted on) and
        ``val_ece_calibrated_crossfit``: the dev set split into even and odd examples, a temperature
        fitted on each half and the ECE measured on the other, averaged (an estimate not fitted on
        what it measures); and ``val_calibration_warning`` (also logged) where the fit means nothing
        (``heads.calibration.calibration_doubt``)."""
        if not self.is_single_label:
            raise ConfigError("calibrate=true fits a softmax temperature: it applies to single-label classification, "
                              "not to regression or multi-label tasks. Fix: drop calibrate=true")
        if "val" not in self._eval_logits:
            raise ConfigError("calibrate=true needs validation data (data.validation_file) to fit the temperature on")
        logits, labels = self._eval_logits["val"]
        raw = torch.from_numpy(logits).double() * float(self.calibration.temperature)  # as the head gave them
        gold = torch.from_numpy(labels).long()
        halves = [torch.arange(i, len(gold), 2) for i in (0, 1)]
        crossfit = []
        for fit, held_out in (halves, halves[::-1]):
            scaling = TemperatureScaling()
            scaling.fit(raw[fit], gold[fit])
            crossfit.append(expected_calibration_error(scaling(raw[held_out]).softmax(-1), gold[held_out]))
        temperature = self.calibration.fit(raw, gold)
        result = {
            "val_temperature": temperature,
            "val_ece_calibrated": expected_calibration_error((raw / temperature).softmax(-1), gold),
            "val_ece_calibrated_crossfit": float(np.mean(crossfit)),
        }
        self.evaluated.update(result)
        log.info("calibrate: temperature %.4f; dev ECE %.4f -> %.4f (cross-fitted %.4f)", temperature,
                 expected_calibration_error(raw.softmax(-1), gold), result["val_ece_calibrated"],
                 result["val_ece_calibrated_crossfit"])
        doubt = calibration_doubt(raw, gold, temperature)
        if doubt:
            log.warning("calibrate=true: %s", doubt)
            return {**result, "val_calibration_warning": doubt}  # metrics.json and the model card say it too
        return result

    def _tunes_thresholds(self, stage: str) -> bool:
        """Thresholds are tuned on the dev set by the validations of training; every other evaluation
        (the final one of best.ckpt, sesame-eval, test sets) uses them as saved."""
        return stage == "val" and self._trainer is not None and self.trainer.state.fn == TrainerFn.FITTING

    def _score_multi_label(self, stage: str, rows: Rows) -> dict[str, float]:
        """Tune (training's validations) or read the thresholds, score micro / macro F1, write
        ``<stage>_predictions.tsv`` (labels joined by ``data.label_separator``) and
        ``<stage>_thresholds.json``."""
        probabilities = rows["probabilities"].astype(np.float32)
        names = self.label_names or []
        metrics: dict[str, float] = {}
        if "label" in rows:
            gold = rows["label"] > 0.5
            if self._tunes_thresholds(stage):
                tuned = tune_thresholds(probabilities, gold)
                self.head.thresholds.copy_(torch.from_numpy(tuned).to(self.head.thresholds))
                log.info("%s: thresholds tuned on %d examples: %s", stage, len(probabilities),
                         ", ".join(f"{n}={t:.4g}" for n, t in zip(names, tuned.tolist())))
            thresholds = self.head.thresholds.detach().cpu().numpy()
            metrics = multilabel_metrics(probabilities, gold, thresholds)
        thresholds = self.head.thresholds.detach().cpu().numpy()
        decided = probabilities >= thresholds
        lines = ["index\tprediction"] + [
            f"{index}\t{self.label_separator.join(n for n, on in zip(names, row) if on)}"
            for index, row in zip(rows["index"].tolist(), decided.tolist())
        ]
        self.write_text(f"{stage}_{self.spec.submission_name}.tsv", "\n".join(lines) + "\n")
        self.write_json(f"{stage}_thresholds.json", dict(zip(names, thresholds.tolist())))
        return metrics
