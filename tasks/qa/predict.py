"""Extractive question answering on raw input (``task=squad_v1`` / ``squad_v2``).

Input, one per line: ``{"question": "Who won?", "context": "Marie Curie won ...", "id": "q1"}``
(``id`` optional). A context of any length works: question + context are cut into windows of
``data.max_seq_length`` tokens overlapping by ``data.doc_stride`` (``tasks/qa/windows.py``), and
the windows of a question are decoded together (``tasks/qa/predictions.py``) with the model's
``head.*`` settings (``n_best_size``, ``max_answer_length``, ``null_score_diff_threshold``).

Output::

    {"id": "q1", "answer": "Marie Curie", "char_start": 0, "char_end": 11, "score": 7.2, "probability": 0.8}

``context[char_start:char_end] == answer``. ``score`` is the span's start + end logit; ``probability``
its softmax over the scores of the n-best list (the ``probability`` of ``nbest_predictions.json``).
SQuAD v2 models add ``null_score_diff`` (null score - best span score; the answer is ``""`` when it
exceeds ``head.null_score_diff_threshold``); an unanswered question has ``answer == ""``, char offsets
-1 and the null entry's score and probability. ``n_best=K`` (``--n-best K``) adds ``"nbest"``: the K
best spans ``{text, char_start, char_end, score, probability, start_logit, end_logit}`` ranked by
score, and for v2 also the null entry (``""``, offsets -1) where it ranks, as in
``nbest_predictions.json`` (which lists ``head.n_best_size`` spans); a K above ``head.n_best_size``
decodes K spans per question, and the probabilities are over those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import torch

from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.base.predictor import ModelRunner, TaskPredictor, finite, string_field
from sesame.tasks.qa.predictions import QuestionPrediction, decode_predictions
from sesame.tasks.qa.windows import check_question_lengths, encode_windows, window_collator

#: What ``sesame-predict --help`` says of this task (read from this file, not imported).
PREDICT_HELP = """\
question answering (task=squad_v1 / squad_v2): {"question", "context"[, "id"]}, contexts of any length
  echo '{"id": "q1", "question": "Who won?", "context": "Marie Curie won the prize."}' \\
    | sesame-predict outputs/squad_v1/<run>
  -> {"id": "q1", "answer": "Marie Curie", "char_start": 0, "char_end": 11, "score": 9.1, "probability": 0.87}
  sesame-predict outputs/squad_v2/<run> questions.jsonl -o answers.jsonl --n-best 5 \\
    --set head.null_score_diff_threshold=1.5
  (v2 adds "null_score_diff"; "answer" is "" when the question has no answer in the context)
"""

#: What the QA module's forward reads: the encoder's inputs and the context mask.
MODEL_INPUTS = (*ENCODER_INPUT_KEYS, "context_mask")


class QuestionAnsweringPredictor(TaskPredictor):
    """Answers (text, char offsets, score, probability; n-best on request) of questions about contexts
    (``task=squad_v1`` / ``squad_v2``).

    Args:
        n_best: how many n-best entries each output lists (0: none).
    """

    input_example = '{"question": "Who won?", "context": "Marie Curie won the prize.", "id": "q1"}'

    def __init__(self, runner: ModelRunner, *, n_best: int = 0, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        if n_best < 0:
            raise ConfigError(f"n_best={n_best}: use 0 (no n-best list) or more")
        self.n_best = int(n_best)
        head, data = self.settings.head, self.settings.data  # SpanHeadSettings, SquadDataSettings
        self.version_2 = data.version_2_with_negative
        self.doc_stride = data.doc_stride
        self.n_best_size = max(head.n_best_size, self.n_best)
        self.max_answer_length = head.max_answer_length
        self.threshold = head.null_score_diff_threshold
        if self.tokenizer.pad_token_id is None:
            raise ConfigError("the model's tokenizer has no pad token")
        self.collator = window_collator(self.tokenizer.pad_token_id)

    def prepare(self, record: Mapping[str, Any], where: str) -> tuple[str, str, str]:
        fix = f"give each input as {self.input_example}"
        question = string_field(record, "question", where, fix)
        context = string_field(record, "context", where, fix)
        return question, context, where

    def predict_prepared(self, items: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
        # The "id" column names the input in errors; decoding keys the questions by their position.
        examples = datasets.Dataset.from_dict(
            {"id": [w for _, _, w in items], "question": [q for q, _, _ in items], "context": [c for _, c, _ in items]}
        )
        too_long = check_question_lengths(examples, self.tokenizer, self.max_seq_length, self.doc_stride)
        if too_long:
            raise DataError(f"{too_long[0][1]} (sesame-predict --set data.max_seq_length=N)")
        keys = [str(i) for i in range(len(items))]
        windows = encode_windows(examples, self.tokenizer, max_seq_length=self.max_seq_length,
                                 doc_stride=self.doc_stride, train=False)
        n, longest = len(windows), max(len(w["input_ids"]) for w in windows)
        start = torch.zeros(n, longest)
        end = torch.zeros(n, longest)
        for index, batch, (s, e) in self.run_sorted(windows, self.collator, MODEL_INPUTS):
            rows = torch.from_numpy(index)
            start[rows, : s.shape[1]] = s
            end[rows, : e.shape[1]] = e
        everything = self.collator([{"offsets": w["offsets"], "example_index": w["example_index"]} for w in windows])
        preds = decode_predictions(
            start, end, everything["offsets"], everything["example_index"], list(examples["context"]), keys,
            n_best_size=self.n_best_size, max_answer_length=self.max_answer_length,
            allow_null=self.version_2, null_score_diff_threshold=self.threshold,
        )
        return [self._output(preds[key]) for key in keys]

    def _output(self, pred: QuestionPrediction) -> dict[str, Any]:
        if pred.text == "" and self.version_2:  # no answer: the null entry
            chosen = next((c for c in pred.nbest if c["char_start"] < 0), None)
        else:  # the best span (first non-null entry)
            chosen = next((c for c in pred.nbest if c["char_start"] >= 0), None)
        out: dict[str, Any] = {
            "answer": pred.text,
            "char_start": int(chosen["char_start"]) if chosen else -1,
            "char_end": int(chosen["char_end"]) if chosen else -1,
            "score": finite(chosen["score"]) if chosen else None,
            "probability": finite(chosen["probability"]) if chosen else None,
        }
        if self.version_2:
            out["null_score_diff"] = finite(pred.null_score_diff)
        if self.n_best:
            out["nbest"] = [_entry(c) for c in self._first_spans(pred.nbest)]
        return out

    def _first_spans(self, nbest: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The ``n_best`` best spans and (v2) the null entry, in their ranked order: with ``n_best ==
        head.n_best_size`` the list of ``nbest_predictions.json``."""
        kept, spans = [], 0
        for entry in nbest:
            if entry["char_start"] < 0:
                kept.append(entry)
            elif spans < self.n_best:
                kept.append(entry)
                spans += 1
        return kept


def _entry(candidate: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "text": candidate["text"], "char_start": int(candidate["char_start"]), "char_end": int(candidate["char_end"]),
        "score": finite(candidate["score"]), "probability": finite(candidate["probability"]),
        "start_logit": finite(candidate["start_logit"]), "end_logit": finite(candidate["end_logit"]),
    }

