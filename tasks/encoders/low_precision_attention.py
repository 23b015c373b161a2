"""Attention with dropout computed in the autocast precision (``encoder.low_precision_attention``).

torch's CPU ``scaled_dot_product_attention`` has a fused (flash) kernel that takes a mask but no dropout. In
training, with attention dropout, it falls back to its math path, which upcasts bf16/fp16 queries, keys and
values to fp32 and builds the [B, heads, T, T] probabilities, their dropout mask and their gradients in fp32:
about 3x the fused kernel's time, most of a bf16 step on long inputs (SQuAD's 256-token windows). That one case
is computed here unfused in the inputs' own precision, as autocast computes any other matmul: the scores by a
bf16 matmul, the softmax accumulated in fp32 and rounded to bf16 (the precision P·V reads them in), the dropout
applied to the bf16 probabilities. torch's dropout draws a float per element (about half the unfused attention's
time); the probabilities' dropout mask is :func:`~sesame.tasks.encoders.fast_dropout.dropout_keep_mask`'s instead,
four elements per draw of torch's generator. Given the same dropout mask, the result is SDPA's within bf16 rounding
(``tests/families/test_low_precision_attention.py``). Everything else (fp32, where the unfused path gains
nothing, evaluation, no dropout, causal or biased attention, a GPU) is torch's SDPA unchanged.

The switch sets the model's attention to :data:`ATTENTION_NAME`, registered with transformers' attention
interface, so transformers' own layers use it, and sesame's packed and [CLS]-only layers call
:func:`dot_product_attention` with it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from sesame.tasks.encoders.fast_dropout import dropout_keep_mask

#: The attention implementation name the switch gives the model (``config._attn_implementation``).
ATTENTION_NAME = "sesame_sdpa"
#: transformers' own implementation that :data:`ATTENTION_NAME` stands in for: the switch replaces only it, and a
#: model rebuilt for transformers (``--format hf``) gets it back.
TRANSFORMERS_ATTENTION = "sdpa"
#: The profiler range :func:`unfused_attention` runs in: a profile (``benchmarks/step_profile.py``) counts its
#: matmuls, softmax and dropout as attention, as it counts SDPA's.
UNFUSED_ATTENTION_RANGE = "sesame::unfused_attention"

_LOW_PRECISION = (torch.bfloat16, torch.float16)


def computes_unfused(query: torch.Tensor, dropout: float, is_causal: bool = False) -> bool:
    """Whether :func:`dot_product_attention` leaves torch's SDPA for this call: dropout in training, reduced
    precision, on a CPU (where SDPA would take its fp32 math path)."""
    return dropout > 0 and not is_causal and query.dtype in _LOW_PRECISION and query.device.type == "cpu"


def unfused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                      dropout: float, scale: float | None) -> torch.Tensor:
    """softmax(q kᵀ · scale, masked) with dropout, times v, in the inputs' precision: ``query`` [B, h, Tq, d],
    ``key`` and ``value`` [B, h, Tk, d], ``attn_mask`` broadcastable to [B, h, Tq, Tk] (bool: True where
    attention may look; float: added to the scores) -> [B, h, Tq, d]."""
    with torch.profiler.record_function(UNFUSED_ATTENTION_RANGE):
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = torch.matmul(query * scale, key.transpose(-2, -1))
        if attn_mask is not None:
            # the dtype's lowest value, not -inf: a row with nothing to look at stays finite, as SDPA's does
            scores = (scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min) if attn_mask.dtype == torch.bool
                      else scores + attn_mask)
        probs = torch.softmax(scores, dim=-1)
        keep, keep_scale = dropout_keep_mask(probs.shape, dropout, probs.device)
        # dropout's 1 / (1 - p) scales the [.., Tq, d] context, not the [.., Tq, Tk] probabilities: a smaller pass
        return torch.matmul(torch.where(keep, probs, 0), value) * keep_scale


def dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attn_mask: torch.Tensor | None, dropout: float, scale: float | None,
                          low_precision: bool) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` ([B, h, Tq, d] -> [B, h, Tq, d]); with ``low_precision`` (the switch
    on), the calls :func:`computes_unfused` names run :func:`unfused_attention` instead."""
    if low_precision and computes_unfused(query, dropout):
        return unfused_attention(query, key, value, attn_mask, dropout, scale)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout, scale=scale)


def uses_low_precision_attention(module: nn.Module) -> bool:
    """Whether the attention ``module`` (a BERT-style self-attention) belongs to a model the switch set."""
    config = getattr(module, "config", None)
    return getattr(config, "_attn_implementation", None) == ATTENTION_NAME


def sesame_sdpa_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                  attention_mask: torch.Tensor | None, dropout: float = 0.0,
                                  scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface (its ``sdpa_attention_forward``'s signature and output,
    [B, Tq, h, d]), with the calls :func:`computes_unfused` names run by :func:`unfused_attention`."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    is_causal = kwargs.get("is_causal")
    is_causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
    plain = kwargs.get("position_bias") is None and getattr(module, "num_key_value_groups", 1) == 1
    if plain and computes_unfused(query, dropout, bool(is_causal)):
        context = unfused_attention(query, key, value, attention_mask, dropout, scaling)
        return context.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  **kwargs)


def register_attention() -> None:
    """Make :data:`ATTENTION_NAME` known to transformers: the attention above, SDPA's masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, sesame_sdpa_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
