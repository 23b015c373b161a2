"""What ``sesame-export``, the ONNX runner and the model card know of multiple choice:
:class:`MultipleChoiceExport` (``tasks/base/export.py``).

transformers' ``...ForMultipleChoice`` (BERT, RoBERTa, ELECTRA-style: ``classifier`` one linear
layer over the base model's pooled [CLS]) scores each (context, ending) pair as sesame's
``pooling=pooler`` network does: the trained pooler goes into the base model's pooler, the scorer into
``classifier``. Other poolings read what that model does not, and are refused with the reason. Inputs
and outputs carry a choices axis: ``input_ids`` [B, G, T], ``logits`` [B, G].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sesame.tasks.base.export import TaskExport
from sesame.tasks.multiple_choice.data import choice_collator, encode_questions
from sesame.tasks.multiple_choice.readers import ChoiceQuestion, read_choices

#: Probe questions (context, question, endings).
PROBES = (
    ChoiceQuestion("A woman is standing at the stove.", "She", ("stirs the soup in the pot.", "flies over the ocean.",
                                                                 "reads the newspaper in a canoe.", "paints the moon.")),
    ChoiceQuestion("The boy kicks the ball toward the goal.", "The goalkeeper", ("dives and catches it.", "starts to sing.",
                                                                                 "eats a sandwich.", "sleeps.")),
    ChoiceQuestion("It started to rain heavily during the picnic.", "The family", (
        "packed up the food and ran to the car before everything in the basket got soaked.", "sunbathed.",
        "planted a tree.", "bought a boat.")),
    ChoiceQuestion("He turns the key.", "", ("The engine starts.", "The sea freezes.", "The cat barks.", "Nothing is blue.")),
)


def _pooled_scorer(hf: nn.Module) -> bool:
    """Whether ``hf`` scores each pair with ``classifier`` (linear) over its base model's pooler (dense + tanh)."""
    pooler = getattr(getattr(hf, hf.base_model_prefix, None), "pooler", None)
    return (isinstance(getattr(hf, "classifier", None), nn.Linear) and isinstance(getattr(pooler, "dense", None), nn.Linear)
            and isinstance(getattr(pooler, "activation", None), nn.Tanh))


class MultipleChoiceExport(TaskExport):
    """Multiple choice: logits [B, G] of the module ``MultipleChoiceModule``."""

    auto_class = "AutoModelForMultipleChoice"
    pipeline_tag = "multiple-choice"
    task_kind = "multiple choice"
    input_axes = ("batch", "choices", "length")
    example = {"context": "She opens the box.", "question": "Inside, she finds", "endings": ["a sleeping cat.", "the sky."]}

    def output_axes(self) -> tuple[str, ...]:
        return ("batch", "choices")

    @property
    def pooling(self) -> str:
        """``pooling.name`` the model was trained with."""
        return self.settings.pooling.name if self.settings.pooling is not None else "cls"

    # Probes and comparisons ----------------------------------------------------------------------
    def probe_batch(self, tokenizer: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        return choice_collator(tokenizer)(encode_questions(tokenizer, [PROBES[i] for i in rows], self.max_length))

    def compared_positions(self, output: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The endings each question has ([B, G]): absent ones score the masked value."""
        return batch["attention_mask"].sum(-1) > 0

    # transformers --------------------------------------------------------------------------------
    def refusal_reasons(self, hf: Any | None) -> list[str]:
        name = self.pooling
        hf_name = type(hf).__name__ if hf is not None else "its ...ForMultipleChoice"
        if name != "pooler":
            return [f"pooling={name}: {hf_name} scores each pair from its pooler's dense + tanh over [CLS], which this "
                    "model never trained (train with pooling=pooler for a model that maps)"]
        if hf is not None and not _pooled_scorer(hf):
            return [f"{hf_name} has no pooler (dense + tanh) with one linear classifier on it for sesame's head to go into"]
        return []

    def fill_head(self, hf: Any) -> set[str]:
        module = self.trained_module
        getattr(hf, hf.base_model_prefix).pooler.dense.load_state_dict(module.pooling.dense.state_dict())
        hf.classifier.load_state_dict(module.head.classifier.state_dict())
        return {"pooler.dense.weight", "pooler.dense.bias"}

    def report_labels(self, hf: Any) -> list[str] | None:
        return None  # the endings are the choices: no label set

    # The model card ------------------------------------------------------------------------------
    def label_row(self) -> tuple[str, Any]:
        return ("predicts", "the index of the right ending among each question's endings")

    def model_rows(self) -> list[tuple[str, Any]]:
        return [("pooling", self.pooling)]

    def hf_usage(self, folder: str, example: Mapping[str, Any]) -> str:
        """transformers has no multiple-choice pipeline: the snippet tokenises the pairs itself."""
        pairs = [f"{example.get('question', '')} {e}".strip() for e in example["endings"]]
        return (f"```python\nimport torch\nfrom transformers import {self.auto_class}, AutoTokenizer\n\n" + self.hf_load(folder) +
                f"context, endings = {example['context']!r}, {pairs!r}\n"
                "enc = tokenizer([context] * len(endings), endings, padding=True, return_tensors=\"pt\")\n"
                "with torch.no_grad():\n"
                "    logits = model(**{k: v.unsqueeze(0) for k, v in enc.items()}).logits   # [1, endings]\n"
                "print(logits.softmax(-1).tolist())\n```")

    def count_examples(self, path: Path) -> int:
        return len(read_choices(path))
