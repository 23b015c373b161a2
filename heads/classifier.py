"""Sentence-level head: pooled vector -> dropout -> linear, and its loss.

Shapes: ``B`` batch, ``D`` pooled feature size, ``C`` labels.

Three kinds of target, one linear layer:

- single-label classification (``num_labels >= 2``): class ids [B] int64, cross-entropy with optional
  per-class weights and label smoothing;
- multi-label classification (``multi_label=True``): multi-hot targets [B, C] float (1 = the label
  applies), binary cross-entropy with logits per label; the class weights act as BCE's
  ``pos_weight`` (they scale the loss of each label's *positive* targets), and each label has a
  decision threshold on its sigmoid probability (:attr:`SequenceClassifierHead.thresholds`, saved
  in the state dict);
- regression (``num_labels == 1``, not multi-label): float targets [B], mean squared error; class
  weights and label smoothing do not apply to it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


def balanced_class_weights(counts: torch.Tensor, num_examples: int, multi_label: bool = False) -> torch.Tensor:
    """The ``balanced`` class weights [C] of a training set, from its label counts.

    Args:
        counts: [C] how many training examples carry each label (every count must be positive).
        num_examples: ``N``, the number of training examples.
        multi_label: False: scikit-learn's ``compute_class_weight("balanced")``,
            ``N / (C * counts[c])`` (a class's examples then weigh as much in total as any other
            class's). True: the positive weight of each label, ``(N - counts[c]) / counts[c]``
            (its positive targets then weigh as much in total as its negative ones), as BCE's
            ``pos_weight`` is meant to be set.

    Returns:
        [C] float64 weights.
    """
    counts = counts.to(torch.float64)
    if multi_label:
        return (num_examples - counts) / counts
    return num_examples / (counts.numel() * counts)


class SequenceClassifierHead(nn.Module):
    """``forward(pooled [B, D]) -> logits [B, C]`` ([B, 1] for regression); ``loss(logits, targets)``.

    Args:
        in_features: ``D``.
        num_labels: ``C`` (1 with ``multi_label=False``: regression).
        dropout: dropout on the pooled vector before the linear layer.
        multi_label: targets are multi-hot [B, C] and the loss is per-label BCE-with-logits.
        label_smoothing: ``eps`` in [0, 1). Single-label: torch's cross-entropy smoothing (the target
            is ``(1 - eps) * one_hot + eps / C``). Multi-label: each binary target ``y`` becomes
            ``(1 - eps) * y + eps / 2`` (the same rule with two classes per label).
        class_weights: [C] positive weights, or None (all 1). Single-label: cross-entropy's ``weight``
            (each example's loss times its class's weight; the batch mean divides by the summed
            weights, as torch does). Multi-label: BCE's ``pos_weight``. Often known only once the
            training data is read: :meth:`set_class_weights`.

    Buffers: ``class_weights`` [C] (not saved in the state dict: the trained model's config records
    them) and, multi-label only, ``thresholds`` [C] (saved in the state dict; 0.5 until tuned).

    The linear layer is called ``classifier`` so a Hugging Face ``...ForSequenceClassification``
    ``classifier.*`` state dict loads into it directly.
    """

    class_weights: torch.Tensor | None
    thresholds: torch.Tensor

    def __init__(
        self, in_features: int, num_labels: int, dropout: float = 0.1, *, multi_label: bool = False,
        label_smoothing: float = 0.0, class_weights: torch.Tensor | Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels={num_labels}: a classifier needs at least one label")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={label_smoothing}: must be in [0, 1)")
        self.num_labels = num_labels
        self.multi_label = multi_label
        if self.is_regression and label_smoothing:
            raise ValueError(f"label_smoothing={label_smoothing} applies to classification, not to regression")
        self.label_smoothing = float(label_smoothing)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_features, num_labels)
        self.register_buffer("class_weights", None, persistent=False)
        if multi_label:
            self.register_buffer("thresholds", torch.full((num_labels,), 0.5))
        self.set_class_weights(class_weights)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1 and not self.multi_label

    def set_class_weights(self, weights: torch.Tensor | Sequence[float] | None) -> None:
        """Use ``weights`` [C] (positive, finite) in the loss from now on; None: unweighted."""
        if weights is None:
            self.class_weights = None
            return
        if self.is_regression:
            raise ValueError("class weights apply to classification, not to regression")
        device = self.classifier.weight.device
        values = torch.as_tensor(weights, dtype=torch.float32, device=device).flatten()
        if values.numel() != self.num_labels:
            raise ValueError(f"{values.numel()} class weights for {self.num_labels} labels: give one weight per label")
        if not bool(torch.isfinite(values).all() and (values > 0).all()):
            raise ValueError(f"class weights {values.tolist()}: each must be a positive, finite number")
        self.class_weights = values

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """``pooled`` [B, D] -> logits [B, C]."""
        return self.classifier(self.dropout(pooled))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The batch's mean loss (scalar).

        Args:
            logits: [B, C] (``forward``'s output).
            labels: [B] int64 class ids (single-label); [B, C] multi-hot, any numeric dtype
                (multi-label); [B] float targets (regression).
        """
        if self.is_regression:
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
        weights = None if self.class_weights is None else self.class_weights.to(logits.dtype)
        if self.multi_label:
            targets = labels.to(logits.dtype)
            if self.label_smoothing:
                targets = targets * (1.0 - self.label_smoothing) + self.label_smoothing / 2
            return F.binary_cross_entropy_with_logits(logits, targets, pos_weight=weights)
        return F.cross_entropy(logits, labels, weight=weights, label_smoothing=self.label_smoothing)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """[B, C] per-label sigmoid (multi-label) or softmax over the labels (single-label)."""
        if self.is_regression:
            raise ValueError("a regression head has no probabilities")
        return torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=-1)

    def decide(self, probabilities: torch.Tensor) -> torch.Tensor:
        """Multi-label: [B, C] bool, True where a label's probability reaches its threshold
        (``probability >= thresholds[c]``)."""
        if not self.multi_label:
            raise ValueError("thresholds belong to multi-label heads")
        return probabilities >= self.thresholds.to(probabilities.dtype)
