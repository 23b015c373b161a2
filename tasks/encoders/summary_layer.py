"""A BERT-style layer run at the summary token alone (``encoder.top_layer_at_summary``).

A head that reads only the [CLS] vector (``pooling=cls`` or ``pooler``) reads the top layer it fuses at
one position. Every other position of that layer is work no output depends on: the layer needs the keys
and values of every token (the [CLS] query attends to all of them), but its query, attention output,
feed-forward block and norms only at [CLS]. Per token a layer costs about ``12 H^2`` multiply-adds
(``4 H^2`` for the four attention projections, ``8 H^2`` for the feed-forward block); here the other tokens
cost ``2 H^2``, so in a 6-layer encoder about 14% of the forward and backward work is left out.

The computation is transformers' ``BertLayer`` (also RoBERTa's, XLM-R's and ELECTRA's, which copy it):
self-attention (scaled dot product, padding masked, attention dropout in training), ``dense -> dropout ->
LayerNorm(x + input)``, then the feed-forward block ``intermediate -> output``. Each part is called
as the module it is, so LoRA adapters, int8 modules and pruned heads or neurons apply as they do in the
whole layer.
"""

from __future__ import annotations

import torch
from torch import nn

from sesame.tasks.encoders.low_precision_attention import dot_product_attention, uses_low_precision_attention
from sesame.tasks.encoders.padding_free import PaddingFreeLayout


def runs_at_summary(layer: nn.Module) -> bool:
    """Whether ``layer`` has BERT's layer structure and nothing that watches its self-attention module run
    (a forward hook other than transformers' own, as pruning's head masks are: the summary path computes
    attention without calling that module)."""
    attention = getattr(layer, "attention", None)
    self_attention = getattr(attention, "self", None)
    parts = (self_attention, getattr(attention, "output", None), getattr(layer, "intermediate", None),
             getattr(layer, "output", None))
    if any(part is None for part in parts) or getattr(layer, "crossattention", None) is not None:
        return False
    if not all(hasattr(self_attention, name) for name in ("query", "key", "value", "attention_head_size", "scaling")):
        return False
    return not watched(self_attention)


def watched(module: nn.Module) -> bool:
    """Whether a forward hook other than transformers' own watches ``module`` run."""
    return any(_foreign(hook) for hook in (*module._forward_hooks.values(), *module._forward_pre_hooks.values()))


def _foreign(hook: object) -> bool:
    # transformers installs hooks of its own that record what a module returns when the caller asks for
    # attention weights; sesame never asks, so they would record nothing here either
    return not getattr(hook, "__module__", "").startswith("transformers.")


def summary_layer_forward(layer: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor,
                          layout: PaddingFreeLayout | None = None) -> torch.Tensor:
    """The output of ``layer`` at position 0, [B, 1, H], from its input ``hidden_states`` [B, T, H] and
    ``attention_mask`` [B, T] (1 = real token): equal to ``layer(hidden_states)[:, :1]``. With the batch's
    ``layout`` (``encoder.padding_free``) keys and values are computed at the real tokens alone."""
    self_attention = layer.attention.self
    batch, length, _ = hidden_states.shape
    head_size = self_attention.attention_head_size
    summary = hidden_states[:, :1]
    query = self_attention.query(summary).view(batch, 1, -1, head_size).transpose(1, 2)
    if layout is not None:
        tokens = layout.pack(hidden_states)
        key, value = layout.unpack(self_attention.key(tokens)), layout.unpack(self_attention.value(tokens))
    else:
        key, value = self_attention.key(hidden_states), self_attention.value(hidden_states)
    key = key.view(batch, length, -1, head_size).transpose(1, 2)
    value = value.view(batch, length, -1, head_size).transpose(1, 2)
    mask = attention_mask[:, None, None, :].to(torch.bool)  # [B, 1, 1, T]: True where attention may look
    dropout = self_attention.dropout.p if self_attention.training else 0.0
    context = dot_product_attention(query, key, value, mask, dropout, self_attention.scaling,
                                    uses_low_precision_attention(self_attention))
    context = context.transpose(1, 2).reshape(batch, 1, -1)
    attended = layer.attention.output(context, summary)
    return layer.output(layer.intermediate(attended), attended)
