"""Multiple-choice data: questions -> one group of token sequences per question, one sequence per ending.

Each ending is tokenised as a pair: segment A the context, segment B the question's start and the
ending (``"sent2 ending"``, SWAG's convention and transformers' ``run_swag.py``'s), truncated to
``data.max_seq_length`` tokens. Rows are ``index, input_ids, attention_mask[, token_type_ids], labels``
with the encoder's fields ``[G][T_g]``: the collator pads them to [B, G_max, T_max]
(``tasks/inputs/batching.py``), and the encoder reads [B * G, T] (``encoder_inputs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedTokenizerBase

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS, check_max_seq_length
from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.multiple_choice.readers import ChoiceQuestion, read_choices
from sesame.tasks.multiple_choice.settings import MultipleChoiceDataSettings

if TYPE_CHECKING:
    import datasets

SPLITS = (("train", "train_file"), ("validation", "validation_file"), ("test", "test_file"))


def choice_collator(tokenizer: PreTrainedTokenizerBase) -> PaddingCollator:
    """The collator of grouped encoder fields ([B, G, T]; the pad token's id for ``input_ids``)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return PaddingCollator({"input_ids": pad_id}, grouped=ENCODER_INPUT_KEYS)


def encode_questions(tokenizer: PreTrainedTokenizerBase, questions: Sequence[ChoiceQuestion],
                     max_length: int) -> list[dict[str, list[list[int]]]]:
    """Each question's endings tokenised as ``[context] [question ending]`` pairs: per question, the
    encoder's fields as one list of token ids per ending (not padded)."""
    firsts = [q.context for q in questions for _ in q.endings]
    seconds = [f"{q.question} {e}".strip() for q in questions for e in q.endings]
    enc = tokenizer(firsts, seconds, truncation=True, max_length=max_length)
    keys = [k for k in ENCODER_INPUT_KEYS if k in enc]
    out, at = [], 0
    for q in questions:
        out.append({k: enc[k][at: at + len(q.endings)] for k in keys})
        at += len(q.endings)
    return out


class MultipleChoiceDataModule(SplitDataModule):
    """Tokenised multiple-choice splits (``train``, ``validation``, ``test``)."""

    def __init__(self, settings: MultipleChoiceDataSettings, tokenizer: PreTrainedTokenizerBase, seed: int) -> None:
        super().__init__(settings, tokenizer, seed)
        check_max_seq_length(settings.max_seq_length, tokenizer, pair=True)
        self.collator = choice_collator(tokenizer)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        s = self.settings
        for split, key in SPLITS:
            path = getattr(s, key)
            if not path or (split == "train" and stage not in (None, "fit")):
                continue
            questions = read_choices(path, key, require_labels=split == "train")
            limit = s.max_train_examples if split == "train" else s.max_eval_examples
            self.splits[split] = self._tokenize(questions[: limit or None])
        if not self.splits:
            raise ConfigError("no data files configured: set data.train_file and/or data.validation_file")

    def _tokenize(self, questions: list[ChoiceQuestion]) -> datasets.Dataset:
        import datasets

        rows: dict[str, list[Any]] = {"index": list(range(len(questions)))}
        for enc in encode_questions(self.tokenizer, questions, self.settings.max_seq_length):
            for k, v in enc.items():
                rows.setdefault(k, []).append(v)
        rows["labels"] = [q.label for q in questions]
        return datasets.Dataset.from_dict(rows)

