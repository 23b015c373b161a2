"""Sentence vectors from per-token features (config group ``pooling``).

Every pooling takes ``features`` [B, T, H] and ``attention_mask`` [B, T] (1 = real token) and returns
[B, output_size]. Padding never counts towards mean or max.
"""

from __future__ import annotations

import torch
from torch import nn


class ClsPooling(nn.Module):
    """The first token's vector ([CLS] for BERT-style tokenizers)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.output_size = hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return features[:, 0]


class MeanPooling(nn.Module):
    """Average over real tokens only."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.output_size = hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(features.dtype)
        return (features * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


class MaxPooling(nn.Module):
    """Element-wise maximum over real tokens only."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.output_size = hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        masked = features.masked_fill(~attention_mask.bool().unsqueeze(-1), torch.finfo(features.dtype).min)
        return masked.max(dim=1).values


class ClsMeanPooling(nn.Module):
    """[CLS] and the masked mean, concatenated: [B, 2H]."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.cls, self.mean = ClsPooling(hidden_size), MeanPooling(hidden_size)
        self.output_size = 2 * hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.cls(features, attention_mask), self.mean(features, attention_mask)], dim=-1)


class PoolerPooling(nn.Module):
    """BERT's pooler: ``tanh(W h_[CLS] + b)``. Load a checkpoint's pooler with :meth:`load_from`."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.output_size = hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(features[:, 0]))

    def load_from(self, pooler: nn.Module) -> None:
        """Copy the weights of a Hugging Face ``BertPooler`` (``pooler.dense``)."""
        self.dense.load_state_dict(pooler.dense.state_dict())


POOLINGS: dict[str, type[nn.Module]] = {
    "cls": ClsPooling,
    "mean": MeanPooling,
    "max": MaxPooling,
    "cls_mean": ClsMeanPooling,
    "pooler": PoolerPooling,
}


def build_pooling(name: str, hidden_size: int) -> nn.Module:
    if name not in POOLINGS:
        raise ValueError(f"pooling={name!r} is not one of {', '.join(POOLINGS)}")
    return POOLINGS[name](hidden_size)
