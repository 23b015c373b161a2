"""The two conventions every head and loss shares for positions that do not count."""

from __future__ import annotations

import torch

#: Label of a position that has no target (PyTorch's cross-entropy default): padding, special
#: tokens, and sub-tokens after the first of a word.
IGNORE_INDEX = -100


def masked_value(dtype: torch.dtype) -> float:
    """The logit heads put at masked-out positions: half of ``finfo(dtype).min``.

    Half, so that ``start + end`` of two masked positions is still finite (no ``-inf``/NaN in
    fp16/bf16 sums or softmax gradients).
    """
    return torch.finfo(dtype).min / 2


def is_masked(logits: torch.Tensor) -> torch.Tensor:
    """Bool mask of the entries a head masked out with :func:`masked_value`.

    A quarter of the dtype's minimum also catches a low-precision fill value later cast to float32;
    no real logit comes near it.
    """
    return logits <= torch.finfo(logits.dtype).min / 4
