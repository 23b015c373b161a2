"""Dropout with masks drawn four elements per random draw (``encoder.fast_dropout``).

torch's CPU dropout draws one float from its generator per element and compares it with ``p``: for the
[B, heads, T, T] attention probabilities and the [B, T, H] hidden states of every layer, a good share of a
training step. Here each 64-bit draw of the same generator gives four 16-bit uniform integers, compared with a
threshold: about 4x fewer draws, and the mask repeats under a seed as torch's does (activation recomputation
restores the generator, so a recomputed layer draws the same mask). The rate is ``p`` rounded to a multiple of
2⁻¹⁶ (0.1 -> 0.100006) and kept elements are scaled by ``1 / (1 - p)`` of that rate, so the expectation is
unchanged. The masks differ from torch's: a run draws other masks, as with another seed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

#: :func:`sixteen_bit_dropout`'s resolution: the dropout rate is a multiple of 1 / DROPOUT_LEVELS.
DROPOUT_LEVELS = 1 << 16


def dropout_keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """Which elements of a tensor of ``shape`` survive dropout at rate ``p`` (bool, True = kept), and the scale
    kept elements take, ``1 / (1 - p')`` with ``p'`` = ``p`` rounded to a multiple of 1 / :data:`DROPOUT_LEVELS`.
    Each 64-bit draw of torch's generator gives four elements 16 uniform bits each."""
    dropped = round(p * DROPOUT_LEVELS)
    count = shape.numel()
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)
    uniform = words.view(torch.int16)[:count].view(shape)  # uniform over [-2^15, 2^15)
    keep = uniform >= dropped - DROPOUT_LEVELS // 2
    return keep, (DROPOUT_LEVELS / (DROPOUT_LEVELS - dropped) if dropped < DROPOUT_LEVELS else 0.0)


def sixteen_bit_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout of ``x`` (any shape) at rate ``p`` (rounded to a multiple of 2⁻¹⁶) with :func:`dropout_keep_mask`:
    dropped elements 0, kept ones scaled by ``1 / (1 - p)``, as ``F.dropout`` in training."""
    keep, scale = dropout_keep_mask(x.shape, p, x.device)
    return torch.where(keep, x * scale, 0)


class SixteenBitDropout(nn.Dropout):
    """``nn.Dropout`` (``p``, training only) with :func:`sixteen_bit_dropout` on CPU tensors; on a GPU, torch's own
    (a fused kernel already). Shapes: any -> the same."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu":
            return F.dropout(x, self.p, self.training, self.inplace)
        return sixteen_bit_dropout(x, self.p)


def use_fast_dropout(model: nn.Module) -> int:
    """Replace every ``nn.Dropout`` in ``model`` with a :class:`SixteenBitDropout` of the same rate and mode (no
    weights change, nothing is saved differently); how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                fast = SixteenBitDropout(child.p, child.inplace)
                fast.train(child.training)
                setattr(parent, name, fast)
                replaced += 1
    return replaced
