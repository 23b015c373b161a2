"""The network of multiple choice: each (context, ending) pair -> encoder -> fusion -> pooling ->
dropout -> one score; the question's scores side by side (plain torch; ``tasks/multiple_choice/module.py``
trains and evaluates it). The shape of transformers' ``...ForMultipleChoice`` with ``pooling=pooler``."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from sesame.heads.classifier import SequenceClassifierHead
from sesame.heads.masking import masked_value
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.encoders.encoder import Encoder


class MultipleChoiceNetwork(EncoderTaskNetwork):
    """``forward(batch) -> logits [B, G]``: one score per ending of each question.

    ``batch`` holds the encoder's fields [B, G, T] (G: the batch's most endings); an ending a question
    does not have (all of its ``attention_mask`` 0) scores ``masked_value``, so softmax and argmax
    never pick it.
    """

    pools_sequences = True

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        head = settings.head
        self.pooling = self.build_pooling(built_from_trained=encoder is not None)
        self.head = SequenceClassifierHead(self.pooling.output_size, 1, dropout=head.dropout)

    def forward(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Logits [B, G] of the G endings of each of the B questions."""
        mask = batch["attention_mask"]
        questions, endings, length = mask.shape
        flat_mask = mask.reshape(questions * endings, length)
        scores = self.head(self.pooling(self.encode(batch), flat_mask)).reshape(questions, endings)
        return scores.masked_fill(mask.sum(-1) == 0, masked_value(scores.dtype))
