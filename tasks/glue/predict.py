"""Sentence(-pair) classification and regression on raw text (``task=glue`` / ``text_classification``).

Input, one per line: ``{"text": "a gripping film"}``, or for a model trained on pairs (RTE, MNLI,
STS-B, a table with ``data.text_pair_column``) ``{"text": ..., "text_pair": ...}``; optional ``"id"``.
Tokenised as in training (``tasks/glue/data.py``): the pair as segments A and B, truncated to
``data.max_seq_length`` tokens.

Output: ``{"label": "positive", "probabilities": {"negative": 0.1, "positive": 0.9}}`` (softmax of
the logits; ``label`` is the most likely one), or ``{"score": 3.8}`` for a regression model (STS-B,
``data.regression=true``). The labels are the names ``val_<TASK>.tsv`` holds. A multi-label model
(``data.multi_label=true``) gives ``{"labels": ["music", "story"], "probabilities": {...}}``: each
label's sigmoid probability, and the labels whose probability reaches the threshold saved with the
model (``val_thresholds.json``), in label order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.base.predictor import ModelRunner, TaskPredictor, string_field

#: What ``sesame-predict --help`` says of this task (read from this file, not imported).
PREDICT_HELP = """\
classification (task=glue / text_classification): {"text"[, "text_pair"]}
  echo '{"text": "a gripping, funny film"}' | sesame-predict outputs/glue/<run>
  -> {"label": "1", "probabilities": {"0": 0.08, "1": 0.92}}
  echo '{"text": "a man sleeps", "text_pair": "a man is awake"}' | sesame-predict outputs/rte/<run>
  (regression models, e.g. STS-B, give {"score": 3.8}; multi-label models {"labels": [...], "probabilities": {...}})
"""


def encode_texts(tokenizer: Any, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int) -> Any:
    """Texts (with their pairs as segment B, for a pair task) tokenised as training tokenises them
    (``tasks/glue/data.py``): truncated to ``max_length`` tokens, not padded."""
    return tokenizer(list(texts), list(pairs) if pairs is not None else None, truncation=True, max_length=max_length)


class ClassificationPredictor(TaskPredictor):
    """Labels and probabilities (or regression scores) of texts and text pairs (``task=glue`` /
    ``text_classification``)."""

    input_example = '{"text": "a gripping film"}'

    def __init__(self, runner: ModelRunner, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        # How the data settings define the task, as training reads them.
        spec = self.settings.data.task_spec()
        self.label_names: list[str] | None = None if spec.is_regression else list(spec.labels or ())
        self.pairs = spec.text_b is not None
        self.multi_label = bool(getattr(spec, "multi_label", False))
        self.thresholds: torch.Tensor | None = None
        if self.multi_label:
            self.thresholds = runner.head_state().get("thresholds")
            if self.thresholds is None:
                raise ConfigError(f"a multi-label model needs its per-label thresholds, which {type(runner).__name__} "
                                  "does not give. Fix: predict with the run folder or its .ckpt")
        if self.pairs:
            self.input_example = '{"text": "a man sleeps", "text_pair": "a man is awake"}'
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.collator = PaddingCollator({"input_ids": pad_id})

    def prepare(self, record: Mapping[str, Any], where: str) -> tuple[str, str | None]:
        fix = f"give each input as {self.input_example}"
        text = string_field(record, "text", where, fix)
        pair = string_field(record, "text_pair", where, fix, required=self.pairs)
        if pair is not None and not self.pairs:
            raise DataError(f"{where}: this model was trained on single texts, but the input has 'text_pair'. "
                            "Fix: leave 'text_pair' out (or join the texts)")
        return text, pair

    def predict_prepared(self, items: Sequence[tuple[str, str | None]]) -> list[dict[str, Any]]:
        texts = [t for t, _ in items]
        pairs = [p for _, p in items] if self.pairs else None
        enc = encode_texts(self.tokenizer, texts, pairs, self.max_seq_length)
        keys = [k for k in ENCODER_INPUT_KEYS if k in enc]
        features = [{k: enc[k][i] for k in keys} for i in range(len(items))]
        outputs: list[dict[str, Any]] = [{} for _ in items]
        for index, _, logits in self.run_sorted(features, self.collator, ENCODER_INPUT_KEYS):
            if self.label_names is None:
                for i, score in zip(index.tolist(), logits[:, 0].tolist()):
                    outputs[i] = {"score": score}
                continue
            if self.multi_label:  # as evaluation decides: float32 sigmoid >= the saved thresholds
                probs = torch.sigmoid(logits.float())
                chosen = (probs >= self.thresholds).tolist()
                for i, row, on in zip(index.tolist(), probs.tolist(), chosen):
                    outputs[i] = {"labels": [n for n, yes in zip(self.label_names, on) if yes],
                                  "probabilities": dict(zip(self.label_names, row))}
                continue
            best = logits.argmax(dim=-1).tolist()  # as evaluation picks it, ties to the first label
            probs = torch.softmax(logits.double(), dim=-1).tolist()
            for i, label, p in zip(index.tolist(), best, probs):
                outputs[i] = {"label": self.label_names[label], "probabilities": dict(zip(self.label_names, p))}
        return outputs
