"""Multiple choice on raw input (``task=multiple_choice``).

Input, one per line: ``{"context": "She opens the box.", "question": "Inside, she finds", "endings":
["a cat.", "the sky."]}`` (``question`` optional; optional ``"id"``). Tokenised as in training
(``tasks/multiple_choice/data.py``). Output: ``{"choice": 0, "ending": "a cat.", "probabilities": [0.8, 0.2]}``
(softmax over the endings; ``choice`` is the most likely, ties to the first, as evaluation picks it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sesame.tasks.base.predictor import ModelRunner, TaskPredictor
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.multiple_choice.data import choice_collator, encode_questions
from sesame.tasks.multiple_choice.readers import JSON_EXAMPLE, ChoiceQuestion, choice_question

#: What ``sesame-predict --help`` says of this task (read from this file, not imported).
PREDICT_HELP = """\
multiple choice (task=multiple_choice): {"context", "endings": [...][, "question"]}
  echo '{"context": "He turns the key.", "endings": ["The engine starts.", "The sea freezes."]}' \\
    | sesame-predict outputs/multiple_choice/<run>
  -> {"choice": 0, "ending": "The engine starts.", "probabilities": [0.93, 0.07]}
  (each ending is read as the pair [context] [question ending]; questions may have any number of endings)
"""


class MultipleChoicePredictor(TaskPredictor):
    """The chosen ending, and every ending's probability, of each question."""

    input_example = JSON_EXAMPLE.replace(', "label": 0', "")

    def __init__(self, runner: ModelRunner, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self.collator = choice_collator(self.tokenizer)

    def prepare(self, record: Mapping[str, Any], where: str) -> ChoiceQuestion:
        return choice_question(dict(record), where, f"give each input as {self.input_example}", with_label=False)

    def predict_prepared(self, items: Sequence[ChoiceQuestion]) -> list[dict[str, Any]]:
        features = encode_questions(self.tokenizer, items, self.max_seq_length)
        outputs: list[dict[str, Any]] = [{} for _ in items]
        for index, _, logits in self.run_sorted(features, self.collator, ENCODER_INPUT_KEYS):
            for i, row in zip(index.tolist(), logits):
                count = len(items[i].endings)
                best = int(row[:count].argmax())
                outputs[i] = {"choice": best, "ending": items[i].endings[best],
                              "probabilities": torch.softmax(row[:count].double(), -1).tolist()}
        return outputs
