"""Fusion of an encoder's hidden states into one per-token feature.

A BERT-style encoder with ``L`` layers gives ``L + 1`` hidden states: index 0 is the embeddings
output and index ``-1`` the last layer. Which of them makes the best feature is a question of its
own (BERT paper, Table 7: the second-to-last layer or a sum/concat of the last four can beat the
last layer for feature-based NER), so every task reads its features through :class:`LayerFusion`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# Preset modes: the hidden-state indices they read (relative to the end, -1 = last layer)
# and how those are combined.
PRESETS: dict[str, tuple[tuple[int, ...], str]] = {
    "last": ((-1,), "mean"),
    "second_to_last": ((-2,), "mean"),
    "embeddings": ((0,), "mean"),
    "sum_last_4": ((-4, -3, -2, -1), "sum"),
    "concat_last_4": ((-4, -3, -2, -1), "concat"),
}
COMBINES = ("mean", "sum", "concat")
MODES = (*PRESETS, "scalar_mix", "layers")


class ScalarMix(nn.Module):
    """Softmax-normalised learned weights over hidden states, times a learned scale (ELMo, AllenNLP).

    ``mix = gamma * sum_k softmax(w)_k * h_k``. Weights start equal, so the initial mix is the mean.
    """

    def __init__(self, num_inputs: int) -> None:
        super().__init__()
        self.scalar_parameters = nn.Parameter(torch.zeros(num_inputs))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        """``hidden_states``: K tensors [B, T, H] -> [B, T, H]."""
        if len(hidden_states) != self.scalar_parameters.numel():
            raise ValueError(
                f"ScalarMix was built for {self.scalar_parameters.numel()} hidden states, got {len(hidden_states)}"
            )
        weights = torch.softmax(self.scalar_parameters, dim=0)
        stacked = torch.stack(tuple(hidden_states), dim=0)  # [K, B, T, H]
        mixed = torch.einsum("k,kbth->bth", weights.to(stacked.dtype), stacked)
        return self.gamma.to(stacked.dtype) * mixed

    def layer_weights(self) -> list[float]:
        """The normalised weight of each input (what the model chose), as plain floats."""
        return torch.softmax(self.scalar_parameters.detach(), dim=0).tolist()


class LayerFusion(nn.Module):
    """Select and combine hidden states into one feature per token.

    Args:
        num_hidden_states: number of hidden states the encoder gives (layers + 1).
        hidden_size: width H of each hidden state.
        mode: ``last``, ``second_to_last``, ``embeddings``, ``sum_last_4``, ``concat_last_4``,
            ``scalar_mix`` (learned weights over all hidden states), or ``layers`` (explicit list).
        layers: hidden-state indices for ``mode="layers"`` (negative counts from the end).
        combine: ``mean``, ``sum`` or ``concat`` for ``mode="layers"``.

    ``forward(hidden_states)``: a sequence of ``num_hidden_states`` tensors [B, T, H], or only the
    first ``highest + 1`` of them (an encoder that stopped at the highest layer read), or, when the
    fusion reads one hidden state, just that one as a 1-sequence; None may stand for a hidden state
    outside :attr:`indices`, which is never read (a feature-cache entry holds only those) -> [B, T, output_size], where
    ``output_size`` is ``H`` times the number of layers for concat, else ``H``.
    """

    def __init__(
        self,
        num_hidden_states: int,
        hidden_size: int,
        mode: str = "last",
        layers: Sequence[int] | None = None,
        combine: str = "mean",
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"fusion.mode={mode!r} is not one of {', '.join(MODES)}")
        self.mode = mode
        self.num_hidden_states = num_hidden_states
        self.scalar_mix: ScalarMix | None = None
        if mode == "scalar_mix":
            indices, combine = tuple(range(num_hidden_states)), "mix"
            self.scalar_mix = ScalarMix(num_hidden_states)
        elif mode == "layers":
            if not layers:
                raise ValueError("fusion.mode=layers needs a non-empty fusion.layers list, e.g. [-2, -1]")
            if combine not in COMBINES:
                raise ValueError(f"fusion.combine={combine!r} is not one of {', '.join(COMBINES)}")
            indices = tuple(int(i) for i in layers)
        else:
            indices, combine = PRESETS[mode]
        self.indices = tuple(self._absolute(i) for i in indices)
        self.combine = combine
        self.output_size = hidden_size * len(self.indices) if combine == "concat" else hidden_size
        #: Whether the feature is the last layer alone, so the encoder need not return the others.
        self.reads_last_only = self.indices == (num_hidden_states - 1,)
        #: The highest hidden state read: the encoder need not run the layers above it.
        self.highest = max(self.indices)

    def _absolute(self, index: int) -> int:
        absolute = index + self.num_hidden_states if index < 0 else index
        if not 0 <= absolute < self.num_hidden_states:
            raise ValueError(
                f"fusion reads hidden state {index}, but the encoder has only {self.num_hidden_states} "
                f"(embeddings + {self.num_hidden_states - 1} layers); pick a fusion that fits this encoder, "
                "e.g. fusion=last"
            )
        return absolute

    def forward(self, hidden_states: Sequence[torch.Tensor | None]) -> torch.Tensor:
        if len(self.indices) == 1 and self.scalar_mix is None and len(hidden_states) == 1:
            return hidden_states[0]
        if len(hidden_states) not in (self.num_hidden_states, self.highest + 1):
            raise ValueError(f"expected {self.num_hidden_states} hidden states (or the first {self.highest + 1}), "
                             f"got {len(hidden_states)}")
        if self.scalar_mix is not None:
            return self.scalar_mix(hidden_states)
        chosen = [hidden_states[i] for i in self.indices]
        if len(chosen) == 1:
            return chosen[0]
        if self.combine == "concat":
            return torch.cat(chosen, dim=-1)
        summed = torch.stack(chosen, dim=0).sum(dim=0)
        return summed / len(chosen) if self.combine == "mean" else summed

    def layer_weights(self) -> dict[int, float]:
        """Weight of each hidden state in the fused feature (learned for scalar_mix)."""
        if self.scalar_mix is not None:
            return dict(enumerate(self.scalar_mix.layer_weights()))
        share = 1.0 / len(self.indices) if self.combine == "mean" else 1.0
        return {i: share for i in self.indices}
