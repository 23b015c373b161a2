"""Linear-chain conditional random field over tag sequences, in plain torch.

Shapes: ``B`` sequences, ``L`` positions, ``C`` tags. Sequences are given left-aligned with a
boolean ``mask`` [B, L] that is a prefix (``True`` for the first ``n_b`` positions, then ``False``).

The log-likelihood (training) uses the unconstrained transition scores, as AllenNLP's CRF does:
hard-masking the likelihood would give ``-inf`` on a gold sequence that breaks the constraints (IOB1
data read as BIO, say). The constraints are applied where they matter, in Viterbi decoding, so a
decoded sequence never contains a forbidden transition.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def bio_transition_mask(tag_names: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Allowed transitions of the BIO2 scheme for ``tag_names`` (``O``, ``B-X``, ``I-X``).

    ``I-X`` may only follow ``B-X`` or ``I-X`` and may not start a sequence; everything else is
    allowed. Any sequence may end on any tag.

    Returns:
        ``(transitions [C, C] bool, start [C] bool)``: ``transitions[i, j]`` is whether tag ``j`` may
        follow tag ``i``; ``start[j]`` whether a sequence may begin with tag ``j``.
    """
    num_tags = len(tag_names)
    prefixes, types = [], []
    for name in tag_names:
        if name == "O":
            prefixes.append("O")
            types.append(None)
        elif len(name) > 2 and name[:2] in ("B-", "I-"):
            prefixes.append(name[0])
            types.append(name[2:])
        else:
            raise ValueError(f"tag {name!r} is not BIO (expected 'O', 'B-TYPE' or 'I-TYPE')")
    transitions = torch.ones(num_tags, num_tags, dtype=torch.bool)
    start = torch.ones(num_tags, dtype=torch.bool)
    for j in range(num_tags):
        if prefixes[j] != "I":
            continue
        start[j] = False
        for i in range(num_tags):
            transitions[i, j] = prefixes[i] in ("B", "I") and types[i] == types[j]
    return transitions, start


class CRF(nn.Module):
    """Linear-chain CRF with learned start, end and transition scores.

    Args:
        num_tags: ``C``.
        allowed_transitions: optional bool [C, C]; ``[i, j]`` False forbids tag ``j`` right after ``i``
            in decoding.
        allowed_start: optional bool [C]; False forbids a sequence starting with that tag in decoding.

    The score of a path ``y`` for emissions ``e`` is
    ``start[y_0] + sum_t e[t, y_t] + sum_{t>0} trans[y_{t-1}, y_t] + end[y_{n-1}]``.
    """

    def __init__(
        self,
        num_tags: int,
        allowed_transitions: torch.Tensor | None = None,
        allowed_start: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        if num_tags < 1:
            raise ValueError(f"num_tags must be >= 1, got {num_tags}")
        self.num_tags = num_tags
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        for param in (self.start_transitions, self.end_transitions, self.transitions):
            nn.init.uniform_(param, -0.1, 0.1)
        if allowed_transitions is None:
            allowed_transitions = torch.ones(num_tags, num_tags, dtype=torch.bool)
        if allowed_start is None:
            allowed_start = torch.ones(num_tags, dtype=torch.bool)
        if tuple(allowed_transitions.shape) != (num_tags, num_tags) or tuple(allowed_start.shape) != (num_tags,):
            raise ValueError(
                f"constraint masks must be [{num_tags}, {num_tags}] and [{num_tags}], got "
                f"{list(allowed_transitions.shape)} and {list(allowed_start.shape)}"
            )
        # Buffers, so they move with the module and are saved in checkpoints.
        self.register_buffer("allowed_transitions", allowed_transitions.bool().clone())
        self.register_buffer("allowed_start", allowed_start.bool().clone())

    # Scoring -------------------------------------------------------------------------------------
    @staticmethod
    def _check(emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if emissions.ndim != 3 or mask.shape != emissions.shape[:2]:
            raise ValueError(f"emissions must be [B, L, C] and mask [B, L]; got {list(emissions.shape)}, {list(mask.shape)}")
        return mask.bool()

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log p(tags | emissions)`` per sequence.

        Args:
            emissions: [B, L, C] unnormalised tag scores.
            tags: [B, L] gold tag ids (any value where ``mask`` is False).
            mask: [B, L] bool prefix mask.

        Returns:
            [B] log-likelihoods (0 for an empty sequence).
        """
        mask = self._check(emissions, mask)
        emissions = emissions.float()
        tags = tags.masked_fill(~mask, 0).long()
        return self._path_score(emissions, tags, mask) - self._log_partition(emissions, mask)

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood over the batch (a scalar loss)."""
        return -self.log_likelihood(emissions, tags, mask).mean()

    def _path_score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score of the given paths: [B]."""
        maskf = mask.to(emissions.dtype)
        lengths = mask.sum(1)
        emit = emissions.gather(2, tags.unsqueeze(-1)).squeeze(-1)  # [B, L]
        score = (emit * maskf).sum(1)
        trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # [B, L-1]
        score = score + (trans * maskf[:, 1:]).sum(1)
        last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        edge = self.start_transitions[tags[:, 0]] + self.end_transitions[last]
        return score + torch.where(lengths > 0, edge, torch.zeros_like(edge))

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Forward algorithm, vectorised over the batch: [B] log-sum-exp over all paths."""
        alpha = self.start_transitions + emissions[:, 0]  # [B, C]
        for t in range(1, emissions.shape[1]):
            # [B, C_prev, 1] + [C_prev, C] + [B, 1, C] -> logsumexp over C_prev
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t : t + 1], step, alpha)
        log_z = torch.logsumexp(alpha + self.end_transitions, dim=1)
        return torch.where(mask.any(1), log_z, torch.zeros_like(log_z))

    # Decoding ------------------------------------------------------------------------------------
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor, constrained: bool = True) -> torch.Tensor:
        """Viterbi: the highest-scoring path per sequence, vectorised over the batch.

        Args:
            emissions: [B, L, C].
            mask: [B, L] bool prefix mask.
            constrained: apply ``allowed_transitions`` / ``allowed_start``.

        Returns:
            [B, L] long tag ids; 0 where ``mask`` is False.
        """
        mask = self._check(emissions, mask)
        emissions = emissions.float()
        batch, length, _ = emissions.shape
        if length == 0:
            return torch.zeros(batch, 0, dtype=torch.long, device=emissions.device)
        start, trans = self.start_transitions.float(), self.transitions.float()
        if constrained:
            neg_inf = torch.tensor(float("-inf"), device=emissions.device)
            start = torch.where(self.allowed_start, start, neg_inf)
            trans = torch.where(self.allowed_transitions, trans, neg_inf)
        score = start + emissions[:, 0]  # [B, C]
        backpointers = []
        for t in range(1, length):
            best, idx = (score.unsqueeze(2) + trans).max(dim=1)  # over the previous tag
            step = best + emissions[:, t]
            on = mask[:, t : t + 1]
            score = torch.where(on, step, score)
            # Where masked the pointer is the identity, so backtracking passes through unchanged.
            identity = torch.arange(self.num_tags, device=emissions.device).expand(batch, -1)
            backpointers.append(torch.where(on, idx, identity))
        last = (score + self.end_transitions).argmax(dim=1)  # [B]
        path = [last]
        for pointers in reversed(backpointers):
            last = pointers.gather(1, last.unsqueeze(1)).squeeze(1)
            path.append(last)
        path.reverse()
        return torch.stack(path, dim=1).masked_fill(~mask, 0)
