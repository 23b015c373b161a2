"""Sentence vectors from per-token features (config group ``pooling``).

Every pooling takes ``features`` [B, T, H] and ``attention_mask`` [B, T] (1 = real token) and returns
[B, output_size]. Padding never counts towards mean or max.

The poolings that read the summary token ([CLS]) take ``summary_token``: ``first`` (BERT's [CLS],
RoBERTa's <s>) or ``last``, the last real token of each right-padded row (XLNet's <cls>, which ends
its input).
"""

from __future__ import annotations

import torch
from torch import nn


SUMMARY_TOKENS = ("first", "last")


def summary_vectors(features: torch.Tensor, attention_mask: torch.Tensor, summary_token: str = "first") -> torch.Tensor:
    """[B, H]: each row's summary token, the first token or (``last``) its last real one."""
    if summary_token == "first":
        return features[:, 0]
    last = (attention_mask.long().sum(dim=1) - 1).clamp(min=0)  # right padding: real tokens come first
    return features[torch.arange(features.shape[0], device=features.device), last]


class ClsPooling(nn.Module):
    """The summary token's vector ([CLS] for BERT-style tokenizers; ``summary_token="last"``: XLNet's <cls>)."""

    def __init__(self, hidden_size: int, summary_token: str = "first") -> None:
        super().__init__()
        if summary_token not in SUMMARY_TOKENS:
            raise ValueError(f"summary_token={summary_token!r} is not one of {', '.join(SUMMARY_TOKENS)}")
        self.output_size = hidden_size
        self.summary_token = summary_token

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return summary_vectors(features, attention_mask, self.summary_token)


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

    def __init__(self, hidden_size: int, summary_token: str = "first") -> None:
        super().__init__()
        self.cls, self.mean = ClsPooling(hidden_size, summary_token), MeanPooling(hidden_size)
        self.output_size = 2 * hidden_size

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.cls(features, attention_mask), self.mean(features, attention_mask)], dim=-1)


class PoolerPooling(nn.Module):
    """BERT's pooler: ``tanh(W h_[CLS] + b)``. Load a checkpoint's pooler with :meth:`load_from`."""

    def __init__(self, hidden_size: int, summary_token: str = "first") -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.output_size = hidden_size
        self.summary_token = summary_token

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(summary_vectors(features, attention_mask, self.summary_token)))

    def load_from(self, pooler: nn.Module) -> None:
        """Copy the weights of a Hugging Face pooler: ``pooler.dense`` (``BertPooler`` and its kin) or
        the pooler itself where it is a bare ``Linear`` (ALBERT's, whose activation is tanh too)."""
        dense = pooler if isinstance(pooler, nn.Linear) else getattr(pooler, "dense", None)
        if not isinstance(dense, nn.Linear):
            raise ValueError(f"{type(pooler).__name__} has no dense layer to copy into pooling=pooler")
        self.dense.load_state_dict(dense.state_dict())


POOLINGS: dict[str, type[nn.Module]] = {
    "cls": ClsPooling,
    "mean": MeanPooling,
    "max": MaxPooling,
    "cls_mean": ClsMeanPooling,
    "pooler": PoolerPooling,
}


#: The poolings that read the summary token.
SUMMARY_POOLINGS = ("cls", "cls_mean", "pooler")
#: The poolings that read the summary token and nothing else.
SUMMARY_ONLY_POOLINGS = ("cls", "pooler")


def build_pooling(name: str, hidden_size: int, summary_token: str = "first") -> nn.Module:
    """``summary_token``: where the encoder's summary token is (``first`` / ``last``), for the
    poolings that read it."""
    if name not in POOLINGS:
        raise ValueError(f"pooling={name!r} is not one of {', '.join(POOLINGS)}")
    if name in SUMMARY_POOLINGS:
        return POOLINGS[name](hidden_size, summary_token)
    return POOLINGS[name](hidden_size)
