"""Per-token tagging head: features -> dropout -> linear -> tag logits, optionally with a CRF on top.

Shapes: ``B`` batch, ``T`` (sub)tokens, ``F`` feature size, ``C`` tags.

With ``crf=True`` the CRF runs over a *selection* of positions (normally the first sub-token of each
word): ``compact`` packs the selected positions of each row to the left so the CRF sees a
contiguous sequence, and ``decode`` scatters the result back to [B, T].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from sesame.heads.crf import CRF, bio_transition_mask
from sesame.heads.masking import IGNORE_INDEX



def compact(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Move the positions where ``mask`` is True to the front of each row, keeping their order.

    Args:
        values: [B, T, ...].
        mask: [B, T] bool.

    Returns:
        ``(packed [B, L, ...], packed_mask [B, L], index [B, L])`` with ``L = max_b mask[b].sum()``;
        ``index`` holds the original position of each packed entry (0 where ``packed_mask`` is False).
    """
    mask = mask.bool()
    batch, length = mask.shape
    counts = mask.sum(1)
    width = int(counts.max()) if batch else 0
    # A stable sort puts selected positions first, in their original order.
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :width]  # [B, L]
    packed_mask = torch.arange(width, device=mask.device).unsqueeze(0) < counts.unsqueeze(1)
    index = order.masked_fill(~packed_mask, 0)
    gather_index = index.view(batch, width, *([1] * (values.ndim - 2))).expand(batch, width, *values.shape[2:])
    packed = values.gather(1, gather_index)
    return packed, packed_mask, index


class TokenTaggerHead(nn.Module):
    """``forward(features [B, T, F]) -> logits [B, T, C]``.

    Args:
        in_features: ``F``.
        num_tags: ``C``.
        dropout: dropout on the features before the linear layer.
        crf: add a linear-chain CRF (trained by its negative log-likelihood, decoded by Viterbi).
        tag_names: the ``C`` tag names; with ``crf`` and ``constrain_bio`` they define the BIO
            constraints applied in decoding.
        constrain_bio: forbid invalid BIO transitions (``O -> I-X``, ``B-X -> I-Y``) in CRF decoding.

    The linear layer is called ``classifier`` like a Hugging Face ``...ForTokenClassification``.
    """

    def __init__(
        self,
        in_features: int,
        num_tags: int,
        dropout: float = 0.1,
        crf: bool = False,
        tag_names: Sequence[str] | None = None,
        constrain_bio: bool = True,
    ) -> None:
        super().__init__()
        if tag_names is not None and len(tag_names) != num_tags:
            raise ValueError(f"got {len(tag_names)} tag names for num_tags={num_tags}")
        self.num_tags = num_tags
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(in_features, num_tags)
        self.crf: CRF | None = None
        if crf:
            if constrain_bio and tag_names is None:
                raise ValueError("a BIO-constrained CRF needs tag_names (or set constrain_bio=False)")
            transitions, start = bio_transition_mask(tag_names) if constrain_bio else (None, None)
            self.crf = CRF(num_tags, transitions, start)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """[B, T, F] -> [B, T, C]."""
        return self.classifier(self.dropout(features))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Scalar training loss.

        Args:
            logits: [B, T, C].
            labels: [B, T] tag ids, ``-100`` where there is no label.
            mask: [B, T] bool, the positions the CRF runs over (default: ``labels != -100``); ignored
                without a CRF, where cross-entropy skips ``-100`` labels.
        """
        if self.crf is None:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX)
        if mask is None:
            mask = labels != IGNORE_INDEX
        emissions, packed_mask, index = compact(logits, mask)
        tags = labels.gather(1, index).masked_fill(~packed_mask, 0)
        if bool(((tags < 0) & packed_mask).any()):
            raise ValueError("the CRF mask selects positions whose label is -100")
        return self.crf(emissions, tags, packed_mask)

    def decode(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Predicted tag ids [B, T] at the positions in ``mask`` [B, T] (``-100`` elsewhere).

        Argmax per position, or CRF Viterbi over the masked positions of each row.
        """
        mask = mask.bool()
        if self.crf is None:
            return logits.argmax(-1).masked_fill(~mask, IGNORE_INDEX)
        emissions, packed_mask, index = compact(logits, mask)
        best = self.crf.decode(emissions, packed_mask)
        out = torch.full(mask.shape, IGNORE_INDEX, dtype=torch.long, device=logits.device)
        rows = torch.arange(mask.shape[0], device=mask.device).unsqueeze(1).expand_as(index)
        out[rows[packed_mask], index[packed_mask]] = best[packed_mask]
        return out
