"""Span-pointer head for extractive QA: one linear layer scoring every token as answer start/end."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from sesame.heads.masking import IGNORE_INDEX, masked_value


class SpanPointerHead(nn.Module):
    """Predict answer start/end logits for each token (BERT-style SQuAD head).

    The single ``qa_outputs = nn.Linear(hidden_size, 2)`` has the same name and shape as in
    HF ``BertForQuestionAnswering``, so its ``qa_outputs.*`` state-dict entries load directly.

    Args:
        hidden_size: feature size H of the encoder output.
        allow_null: SQuAD v2 mode. Position 0 ([CLS]) stays unmasked so it can act as the
            "no answer" pointer; in v1 mode it is masked like every other non-context token.
    """

    def __init__(self, hidden_size: int, allow_null: bool = False) -> None:
        super().__init__()
        self.qa_outputs = nn.Linear(hidden_size, 2)
        self.allow_null = allow_null

    def forward(self, features: Tensor, context_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Score start/end positions.

        Args:
            features: [B, T, H] token features.
            context_mask: [B, T] bool, True on context (passage) tokens.

        Returns:
            ``(start_logits, end_logits)``, each [B, T]; positions outside the context (except
            position 0 when ``allow_null``) hold ``masked_value(dtype)``.
        """
        logits = self.qa_outputs(features)  # [B, T, 2]
        start_logits, end_logits = logits.unbind(dim=-1)
        keep = context_mask.bool()
        if self.allow_null:
            keep = keep.clone()
            keep[:, 0] = True
        fill = masked_value(logits.dtype)
        start_logits = start_logits.masked_fill(~keep, fill)
        end_logits = end_logits.masked_fill(~keep, fill)
        return start_logits.contiguous(), end_logits.contiguous()

    @staticmethod
    def loss(
        start_logits: Tensor,
        end_logits: Tensor,
        start_positions: Tensor,
        end_positions: Tensor,
        ignore_index: int = IGNORE_INDEX,
    ) -> Tensor:
        """Mean of the start and end cross-entropies.

        Args:
            start_logits, end_logits: [B, T] logits from ``forward``.
            start_positions, end_positions: [B] long gold token indices (0 = [CLS] / no answer);
                entries equal to ``ignore_index`` do not contribute.

        Returns:
            Scalar loss tensor (float32 for low-precision logits, for a stable reduction).
        """
        start_loss = F.cross_entropy(start_logits.float(), start_positions.long(), ignore_index=ignore_index)
        end_loss = F.cross_entropy(end_logits.float(), end_positions.long(), ignore_index=ignore_index)
        return (start_loss + end_loss) / 2
