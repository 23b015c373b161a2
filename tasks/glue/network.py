"""The network of sentence(-pair) classification and regression: encoder -> fusion -> pooling -> linear
head (plain torch; ``tasks/glue/module.py`` trains and evaluates it).

Single-label classification logits are divided by the temperature ``calibrate=true`` fitted (1
otherwise), so evaluation, ``sesame-predict`` and ``sesame-export`` all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sesame.heads.calibration import TemperatureScaling
from sesame.heads.classifier import SequenceClassifierHead
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.hf_weights import load_prefixed_weights
from sesame.tasks.glue.settings import ClassifierHeadSettings


class SentenceClassificationNetwork(EncoderTaskNetwork):
    """``forward(batch) -> logits [B, num_labels]``: fused features -> ``pooling`` -> dropout -> linear.

    Attributes beyond the base network's: ``label_names`` (None for regression), ``multi_label``
    (``data.multi_label``), ``thresholds`` (multi-label: the head's [C] per-label thresholds on the
    sigmoid probabilities, a label applying where ``probability >= threshold``; else None) and
    ``label_separator`` (multi-label: joins an example's labels in prediction files).
    """

    pools_sequences = True

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        data = settings.data
        self.spec = data.task_spec()
        self.label_names = None if self.spec.is_regression else list(self.spec.labels or ())
        self.multi_label = self.spec.multi_label
        self.label_separator = self.spec.label_separator
        head = settings.head
        self.pooling = self.build_pooling(built_from_trained=encoder is not None)
        num_labels = 1 if self.label_names is None else len(self.label_names)
        self.head = SequenceClassifierHead(
            self.pooling.output_size, num_labels, dropout=head.dropout, multi_label=self.multi_label,
            label_smoothing=self._checked_smoothing(head), class_weights=self._listed_weights(head),
        )
        self.calibration = TemperatureScaling()  # 1 (no change) unless calibrate=true fitted it

    # Loss settings ---------------------------------------------------------------------------------
    def _checked_smoothing(self, head: ClassifierHeadSettings) -> float:
        if self.label_names is None and (head.class_weights is not None or head.label_smoothing):
            raise ConfigError(
                "head.class_weights and head.label_smoothing apply to classification; this task is a regression "
                "(STS-B, or data.regression=true). Fix: set head.class_weights=null head.label_smoothing=0"
            )
        return head.label_smoothing

    def _listed_weights(self, head: ClassifierHeadSettings) -> tuple[float, ...] | None:
        """The weights of a ``head.class_weights`` list, checked against the labels; None otherwise."""
        if not isinstance(head.class_weights, tuple):
            return None
        names = self.label_names or []
        if len(head.class_weights) != len(names):
            raise ConfigError(
                f"head.class_weights has {len(head.class_weights)} weights for {len(names)} labels "
                f"({', '.join(names)}): give one weight per label, in that order, or head.class_weights=balanced"
            )
        return head.class_weights

    @property
    def thresholds(self) -> torch.Tensor | None:
        """Multi-label: the per-label decision thresholds [C] (probability >= threshold); else None."""
        return self.head.thresholds if self.multi_label else None

    def load_hf_head(self, folder: str | Path) -> None:
        """Load the ``classifier.*`` weights of a Hugging Face ``...ForSequenceClassification`` folder."""
        load_prefixed_weights(self.head.classifier, folder, "classifier.")

    def decoding_state(self) -> dict[str, torch.Tensor]:
        """Multi-label: ``{"thresholds": [C]}``, each label's decision threshold; else nothing."""
        thresholds = self.thresholds
        return {} if thresholds is None else {"thresholds": thresholds.detach().float().cpu()}

    def output_contract(self) -> dict[str, Any]:
        return {"label_names": self.label_names, "multi_label": self.multi_label}

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B, num_labels] ([B, 1] for regression; multi-label: one independent logit per label);
        single-label classification logits are divided by the calibrated temperature (1 unless fitted)."""
        logits = self.head(self.pooling(self.encode(batch), batch["attention_mask"]))
        return logits if not self.is_single_label else self.calibration(logits)

    @property
    def is_single_label(self) -> bool:
        return not self.multi_label and not self.head.is_regression

