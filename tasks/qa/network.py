"""The network of extractive QA: encoder -> fusion -> span-pointer head (plain torch;
``tasks/qa/module.py`` trains and evaluates it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sesame.heads.span_pointer import SpanPointerHead
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_network import EncoderTaskNetwork
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.hf_weights import load_prefixed_weights


class SquadNetwork(EncoderTaskNetwork):
    """``forward(batch) -> (start_logits, end_logits)`` over a window's tokens."""

    def __init__(self, settings: RunSettings, encoder: Encoder | None = None) -> None:
        super().__init__(settings, encoder)
        self.encoder.global_attention = "question"  # Longformer: the question attends globally (its QA model's rule)
        data = settings.data
        self.version_2 = data.version_2_with_negative
        self.decoding = settings.head
        # [CLS] stays a target wherever training labels point at it; v1 decoding never picks it.
        self.head = SpanPointerHead(self.feature_size, allow_null=data.trains_null)

    def load_hf_head(self, folder: str | Path) -> None:
        """Load the ``qa_outputs.*`` weights of a Hugging Face ``...ForQuestionAnswering`` folder
        (same name and shape as ``SpanPointerHead.qa_outputs``); sesame-eval calls it for HF folders."""
        load_prefixed_weights(self.head.qa_outputs, folder, "qa_outputs.")

    def output_contract(self) -> dict[str, Any]:
        return {"version_2_with_negative": self.version_2}

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(start_logits, end_logits)``, each [B, T], masked outside the context."""
        return self.head(self.encode(batch), batch["context_mask"])
