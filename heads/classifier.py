"""Sentence-level head: pooled vector -> dropout -> linear (classification or regression)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SequenceClassifierHead(nn.Module):
    """``forward(pooled [B, D]) -> logits [B, num_labels]`` ([B, 1] for regression).

    The linear layer is called ``classifier`` so a Hugging Face ``...ForSequenceClassification``
    ``classifier.*`` state dict loads into it directly.
    """

    def __init__(self, in_features: int, num_labels: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_features, num_labels)

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy on class ids [B], or MSE on float targets [B] for regression."""
        if self.is_regression:
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
        return F.cross_entropy(logits, labels)
