"""BERT-style layers run on a batch's real tokens alone (``encoder.padding_free``).

A batch of sentences padded to its longest wastes, in every token-wise part of a layer (the query, key, value
and output projections, the feed-forward block, the norms: all but the attention scores), the work of its
padding: on randomly ordered SST-2 batches most of the tokens computed are padding. Here the real tokens of
the batch are packed into one [N, H] matrix (N = the number of real tokens) and every token-wise part runs on
that; attention, which needs each sequence's own tokens, runs on groups of sequences of like length, each
group padded to its own longest (the padding masked, as the padded model masks it). Position and segment ids
are the padded model's, as the embeddings are computed before packing. Outputs equal the padded model's at every
real token (``tests/families/test_padding_free.py``); at padding positions the hidden states are zeros, where the
padded model leaves values no head reads.

The layer is transformers' ``BertLayer`` (RoBERTa's, XLM-R's and ELECTRA's copy it), computed as
:func:`sesame.tasks.encoders.summary_layer.summary_layer_forward` computes it, each part called as the module it
is, so LoRA adapters, int8 modules and pruned heads apply as in the whole layer. In training, dropout draws masks
for the real tokens alone, so the random stream differs from the padded model's (as another seed's would).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from sesame.tasks.encoders.low_precision_attention import dot_product_attention, uses_low_precision_attention


#: Sequences per attention group: the batch's sequences sorted by length, then cut into groups this size, each
#: padded to its own longest. Smaller groups pad less but make more calls; at SST-2's lengths, 4 and 8 cost the same.
#: A batch whose attention would cost at most 1.25x as one group (lengths alike) is one group.
ATTENTION_GROUP = 8


#: The least share of a batch's positions that must be padding for its layers to run padding-free: packing costs
#: a few small operations per layer, about 6% of a step of length-grouped SST-2 batches, which pad little.
MIN_PADDING_SHARE = 0.1


def worth_packing(attention_mask: torch.Tensor) -> bool:
    """Whether at least :data:`MIN_PADDING_SHARE` of the batch ``attention_mask`` [B, T] is padding."""
    return int(attention_mask.count_nonzero()) <= (1 - MIN_PADDING_SHARE) * attention_mask.numel()


class PaddingFreeLayout:
    """Where the real tokens of a [B, T] batch sit (``attention_mask`` [B, T]: 1 = a real token).

    :meth:`pack` [B, T, ...] -> [N, ...] and :meth:`unpack` [N, ...] -> [B, T, ...] (zeros at padding) move
    between the padded batch and the N real tokens. :meth:`attend` runs attention on packed queries, keys and
    values: the sequences sorted by length and taken :data:`ATTENTION_GROUP` at a time, each group padded only
    to its own longest (the padding masked), so a batch of mixed lengths pays little more attention than a
    batch grouped by length would. Computed once per batch, used by every layer.
    """

    def __init__(self, attention_mask: torch.Tensor) -> None:
        real = attention_mask.to(torch.bool)
        self.batch, self.length = real.shape
        self.index = real.reshape(-1).nonzero().squeeze(1)  # [N]: flat positions of the real tokens
        self.tokens = int(self.index.numel())
        self._real = real
        self._groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] | None = None

    @property
    def groups(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per attention group: (gather [G * S] of packed rows, 0 at padding; key mask [G, 1, 1, S]; the real
        slots of the group [n]; their packed rows [n]). Built at the first :meth:`attend`."""
        if self._groups is None:
            self._groups = self._attention_groups()
        return self._groups

    def _attention_groups(self) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        real = self._real
        # slot[b, t]: the packed row of position t of sequence b; row 0 at padding, which attention masks as a key
        # and whose output as a query is never read, so any real row will do (no padded copy of the inputs)
        slot = torch.zeros(self.batch * self.length, dtype=torch.long, device=real.device)
        slot[self.index] = torch.arange(self.tokens, device=real.device)
        slot = slot.view(self.batch, self.length)
        positions = torch.arange(1, self.length + 1, device=real.device)
        span = (real * positions).amax(1)  # one past each sequence's last real token; 0 for a row of padding
        order = [int(i) for i in torch.argsort(span, stable=True) if span[i] > 0]
        cuts = [order[start:start + ATTENTION_GROUP] for start in range(0, len(order), ATTENTION_GROUP)]
        # A batch of like lengths (grouped by length) gains little from groups: one call, fewer small ops.
        grouped_cost = sum(len(cut) * int(span[cut[-1]]) ** 2 for cut in cuts)
        if len(cuts) > 1 and len(order) * int(span[order[-1]]) ** 2 <= 1.25 * grouped_cost:
            cuts = [order]
        groups = []
        for cut in cuts:
            rows = torch.tensor(cut, device=real.device)
            width = int(span[rows].max())
            gather = slot[rows, :width].reshape(-1)
            mask = real[rows, :width]
            inside = mask.reshape(-1).nonzero().squeeze(1)
            groups.append((gather, mask[:, None, None, :], inside, gather[inside]))
        return groups

    def pack(self, padded: torch.Tensor) -> torch.Tensor:
        """[B, T, *rest] -> [N, *rest]."""
        return padded.reshape(self.batch * self.length, *padded.shape[2:]).index_select(0, self.index)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[N, *rest] -> [B, T, *rest], zeros at padding."""
        flat = packed.new_zeros(self.batch * self.length, *packed.shape[1:]).index_copy(0, self.index, packed)
        return flat.view(self.batch, self.length, *packed.shape[1:])

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_size: int,
               dropout: float, scale: float | None, low_precision: bool = False) -> torch.Tensor:
        """Scaled dot-product attention of each sequence over its own tokens: ``query``, ``key``, ``value``
        [N, heads * head_size] -> the attention output [N, heads * head_size]. ``low_precision``:
        ``encoder.low_precision_attention`` (:func:`dot_product_attention`)."""
        width = query.shape[-1]
        rows, outputs = [], []
        for gather, mask, inside, packed_rows in self.groups:
            group = mask.shape[0]
            q, k, v = (t.index_select(0, gather).view(group, -1, width // head_size, head_size).transpose(1, 2)
                       for t in (query, key, value))
            context = dot_product_attention(q, k, v, mask, dropout, scale, low_precision)
            outputs.append(context.transpose(1, 2).reshape(-1, width).index_select(0, inside))
            rows.append(packed_rows)
        if not rows:  # a batch of padding alone
            return query.new_zeros(self.tokens, width)
        return query.new_zeros(self.tokens, width).index_copy(0, torch.cat(rows), torch.cat(outputs))


def padding_free_layer_forward(layer: nn.Module, hidden: torch.Tensor, layout: PaddingFreeLayout) -> torch.Tensor:
    """A BERT-style ``layer`` on packed tokens: ``hidden`` [N, H] -> [N, H], equal to the whole layer's output
    at the real tokens of the batch ``layout`` describes."""
    self_attention = layer.attention.self
    dropout = self_attention.dropout.p if self_attention.training else 0.0
    context = layout.attend(self_attention.query(hidden), self_attention.key(hidden), self_attention.value(hidden),
                            self_attention.attention_head_size, dropout, self_attention.scaling,
                            uses_low_precision_attention(self_attention))
    attended = layer.attention.output(context, hidden)
    return layer.output(layer.intermediate(attended), attended)


def padding_free_stack_forward(layers: list[nn.Module], embedded: torch.Tensor, attention_mask: torch.Tensor,
                               all_layers: bool, recompute: bool) -> tuple[torch.Tensor, ...]:
    """Run ``layers`` (bottom first) on the real tokens of ``embedded`` [B, T, H] (the embeddings' output) and
    return the hidden states [B, T, H]: the embeddings' and every layer's (``all_layers``), or the last alone as
    a 1-tuple. ``recompute``: each layer keeps only its input and recomputes the rest in the backward pass."""
    layout = PaddingFreeLayout(attention_mask)
    hidden = layout.pack(embedded)
    states = [embedded]
    for layer in layers:
        if recompute and torch.is_grad_enabled():
            hidden = checkpoint(padding_free_layer_forward, layer, hidden, layout, use_reentrant=False)
        else:
            hidden = padding_free_layer_forward(layer, hidden, layout)
        if all_layers:
            states.append(layout.unpack(hidden))
    return tuple(states) if all_layers else (layout.unpack(hidden) if layers else embedded,)
