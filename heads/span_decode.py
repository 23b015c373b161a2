"""Vectorised best-span search for extractive QA: the top spans of every window, tensors in and out.

Per window (one tokenised question + context chunk) the score of span (s, e) is
``start_logits[s] + end_logits[e]``, allowed when both ends are context tokens and
``0 <= e - s < max_answer_length``. Instead of the T x T matrix we gather the end logits of the
band ``e = s + 0 .. s + L - 1`` (an ``unfold`` view): scores are [N, T, L].

Order within a window (total, which makes the output deterministic):
    1. higher score,
    2. earlier character start in the context, then earlier character end (when offsets are given),
    3. earlier start token, then earlier end token.
The top-k is exact under that order without sorting all T x L scores: one ``topk`` finds the k-th
best score, entries above it are in, and the places left go to the entries equal to it with the
smallest tie-break keys (a second ``topk``); only the k chosen are then sorted.

Merging the windows of a question into answer strings, null scores and n-best lists is
``tasks/qa/predictions.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class WindowTopSpans:
    """Best spans of each window, ranked; every tensor is [N, K]."""

    score: Tensor  # float64 start_logit + end_logit, -inf where there is no valid span
    start: Tensor  # int64 start token index
    end: Tensor  # int64 end token index (inclusive)
    start_logit: Tensor  # float64
    end_logit: Tensor  # float64
    char_start: Tensor | None = None  # int64 offsets of start / end token when offsets were given
    char_end: Tensor | None = None

    @property
    def valid(self) -> Tensor:
        """[N, K] bool: the entry is a real span."""
        return torch.isfinite(self.score)


def top_spans_per_window(
    start_logits: Tensor,
    end_logits: Tensor,
    context_mask: Tensor,
    max_answer_length: int,
    n_best_size: int,
    offsets: Tensor | None = None,
) -> WindowTopSpans:
    """Top ``n_best_size`` spans of every window, without materialising T x T.

    Args:
        start_logits, end_logits: [N, T] float.
        context_mask: [N, T] bool, True on context tokens (the only allowed span ends).
        max_answer_length: L; spans with ``e - s + 1 > L`` are excluded.
        n_best_size: K.
        offsets: optional [N, T, 2] char offsets. When given, equal scores are ordered by
            (char start, char end, start token, end token); otherwise by (start token, end token).
            For monotone offsets both orders agree.

    Returns:
        :class:`WindowTopSpans` with [N, K'] tensors, K' = min(K, T * L).
    """
    n, t = start_logits.shape
    band = max(1, min(int(max_answer_length), t))
    m = t * band
    # float64: sums of fp32 logits are then exact, so rankings match a Python-float reference.
    neg_inf = torch.tensor(float("-inf"), dtype=torch.float64, device=start_logits.device)
    ctx = context_mask.bool()
    start_m = torch.where(ctx, start_logits.double(), neg_inf)  # [N, T]
    end_m = torch.where(ctx, end_logits.double(), neg_inf)
    # end_band[n, s, l] = end_m[n, s + l]; the -inf tail covers s + l >= T.
    end_pad = torch.cat([end_m, neg_inf.expand(n, band - 1)], dim=1)  # [N, T + L - 1]
    end_band = end_pad.unfold(1, band, 1)  # [N, T, L] view, no copy
    scores = (start_m.unsqueeze(-1) + end_band).reshape(n, m)  # flat index = s * L + l

    # Tie-break key, ascending: (char start, char end, flat index = (s, e)); unique per row.
    if offsets is not None:
        char_start = offsets[..., 0].long().clamp_min(0)  # [N, T]
        char_end = offsets[..., 1].long().clamp_min(0)
        width = int(char_end.max().item()) + 1 if char_end.numel() else 1

    def tie_key(rows: Tensor, flat: Tensor) -> Tensor:
        """Keys of flat indices ``flat`` [R, X] in windows ``rows`` [R]."""
        if offsets is None:
            return flat
        s_tok = torch.div(flat, band, rounding_mode="floor")
        e_tok = (s_tok + flat % band).clamp_max(t - 1)
        cs, ce = char_start[rows].gather(1, s_tok), char_end[rows].gather(1, e_tok)
        return (cs * width + ce) * m + flat

    # Exact top-k under (score desc, tie key asc) without a full sort: everything above the k-th
    # best score is in; the places left go to the entries equal to it with the smallest keys. Only
    # rows with such a tie at the boundary (integer-valued logits, say) pay for the keys.
    k = min(int(n_best_size), m)
    top_val, chosen = scores.topk(k, dim=1)  # sorted: entries above the threshold come first
    threshold = top_val[:, -1:]
    n_above = (top_val > threshold).sum(dim=1)  # [N]
    n_tied = (scores == threshold).sum(dim=1)
    # Rows whose boundary ties are -inf only differ in invalid entries, which are dropped anyway.
    ambiguous = ((n_tied > k - n_above) & torch.isfinite(threshold[:, 0])).nonzero().squeeze(1)
    if ambiguous.numel():
        rows, r = ambiguous, ambiguous.numel()
        flat = torch.arange(m, device=scores.device).expand(r, m)
        tied = scores[rows] == threshold[rows]
        keys = torch.where(tied, tie_key(rows, flat), torch.iinfo(torch.int64).max)
        tied_idx = keys.topk(k, dim=1, largest=False).values % m
        pos = torch.arange(k, device=scores.device).expand(r, k)
        above = n_above[rows].unsqueeze(1)
        chosen[rows] = torch.where(pos < above, chosen[rows], tied_idx.gather(1, (pos - above).clamp_min(0)))
    # Order the k chosen: by key, then (stably) by score.
    all_rows = torch.arange(n, device=scores.device)
    chosen = chosen.gather(1, tie_key(all_rows, chosen).argsort(dim=1, stable=True))
    chosen = chosen.gather(1, scores.gather(1, chosen).argsort(dim=1, descending=True, stable=True))

    start = torch.div(chosen, band, rounding_mode="floor")
    end = start + chosen % band
    end_safe = end.clamp_max(t - 1)  # entries of invalid (-inf) spans may point past T
    return WindowTopSpans(
        score=scores.gather(1, chosen),
        start=start,
        end=end,
        start_logit=start_logits.double().gather(1, start),
        end_logit=end_logits.double().gather(1, end_safe),
        char_start=None if offsets is None else offsets[..., 0].long().gather(1, start),
        char_end=None if offsets is None else offsets[..., 1].long().gather(1, end_safe),
    )
