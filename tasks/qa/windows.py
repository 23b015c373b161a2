"""SQuAD questions (rows of ``tasks/qa/readers.py``) -> tokenised windows, and their batching.

Question + context go in with ``truncation="only_second"``: a long context becomes several windows
of at most ``max_seq_length`` tokens overlapping by ``doc_stride`` tokens. Nothing is padded here;
:func:`window_collator` pads each batch to its own longest window.

The "no answer" pointer is position 0 in every family: [CLS] / <s> where the tokenizer puts one first,
else (XLNet, whose <cls> ends the input; T5, which has none) the question's first token. Position 0
is never a context token, since the question comes first, so labels (0 = no answer), the v2 head
(which leaves position 0 unmasked) and decoding (null score = start[0] + end[0]) all agree.
Offsets are trimmed of white space (DeBERTa-v2/v3's tokenizer counts the space before a word into
its span), so answers never start or end with one, and widened to whole grapheme clusters
(``tasks/core/graphemes.py``): a tokenizer that strips accents ends ``cafe\u0301``'s token before its
combining accent, and an answer ending there would lose it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.encoders.families import offsets_include_spaces, trim_space_offsets
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.graphemes import cluster_bounds, whole_clusters

if TYPE_CHECKING:  # read where data is loaded; sesame-predict never needs it
    import datasets

log = logging.getLogger(__name__)


def check_question_lengths(
    examples: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    doc_stride: int,
) -> list[tuple[int, str]]:
    """``(row, problem)`` for questions too long to leave a window with more than ``doc_stride``
    context tokens (the fast tokenizer aborts the process on those, so they are caught first).

    Raises :class:`ConfigError` when ``max_seq_length`` leaves no room for any question.
    """
    specials = tokenizer.num_special_tokens_to_add(pair=True)
    budget = max_seq_length - specials - doc_stride - 1  # most question tokens that still fit
    if budget < 1:
        raise ConfigError(
            f"data.max_seq_length={max_seq_length} leaves no room for a question: it must exceed "
            f"data.doc_stride ({doc_stride}) + {specials} special tokens + 1. Fix: raise max_seq_length or lower doc_stride"
        )
    questions = [q.lstrip() for q in examples["question"]]
    lengths = np.fromiter((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), dtype=np.int64)
    return [
        (int(i), f"question {examples[int(i)]['id']!r} has {lengths[i]} tokens; with max_seq_length={max_seq_length} "
                 f"and doc_stride={doc_stride} at most {budget} fit. Fix: raise data.max_seq_length or lower data.doc_stride")
        for i in np.flatnonzero(lengths > budget)
    ]


def answer_token_span(offsets: np.ndarray, context_mask: np.ndarray, start_char: int, end_char: int) -> tuple[int, int]:
    """Token span of the answer ``[start_char, end_char)`` in one window, or (0, 0) if not wholly inside.

    Args:
        offsets: [T, 2] char offsets; context_mask: [T] bool.
    """
    ctx = np.flatnonzero(context_mask)
    if ctx.size == 0 or offsets[ctx[0], 0] > start_char or offsets[ctx[-1], 1] < end_char:
        return 0, 0
    starts, ends = offsets[ctx, 0], offsets[ctx, 1]
    # Last context token starting at or before the answer; first one ending at or after it.
    start = ctx[np.searchsorted(starts, start_char, side="right") - 1]
    end = ctx[np.searchsorted(ends, end_char, side="left")]
    return int(start), int(end)


def encode_windows(
    examples: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_seq_length: int,
    doc_stride: int,
    train: bool,
    drop_windows_without_answer: bool = False,
    chunk_size: int = 1000,
) -> list[dict[str, Any]]:
    """Tokenise every question with its context into overlapping windows.

    Each window is a dict of numpy arrays (length T_i, no padding): ``input_ids``,
    ``attention_mask``, optional ``token_type_ids``, ``context_mask`` (bool) and ints
    ``example_index`` (row in ``examples``) and ``feature_index``. Training windows add
    ``start_positions``/``end_positions`` (token indices of the first answer; 0 = [CLS] when the
    question has no answer or the answer is not wholly inside the window). Evaluation windows add
    ``offsets`` [T_i, 2] (char offsets into the context, -1 outside the context).

    Args:
        drop_windows_without_answer: training only; leave out windows labelled 0 for answerable
            questions (SQuAD v1, whose head masks [CLS] and so has no target for them).
    """
    if tokenizer.padding_side != "right":
        raise ConfigError("SQuAD windows put the question first; use a tokenizer with padding_side='right'")
    features: list[dict[str, Any]] = []
    dropped = 0
    trim = offsets_include_spaces(tokenizer)
    for lo in range(0, len(examples), chunk_size):
        chunk = examples[lo : lo + chunk_size]
        bounds: dict[str, np.ndarray] = {}  # cluster boundaries per context (questions share contexts)
        enc = tokenizer(
            [q.lstrip() for q in chunk["question"]],  # some SQuAD questions start with long whitespace
            chunk["context"],
            truncation="only_second",
            max_length=max_seq_length,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
        )
        has_types = "token_type_ids" in enc
        for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
            # float dtype turns the None of special tokens into NaN, so no per-token loop
            ctx = np.asarray(enc.sequence_ids(i), dtype=np.float64) == 1
            window: dict[str, Any] = {
                "input_ids": np.asarray(enc["input_ids"][i], dtype=np.int64),
                "attention_mask": np.asarray(enc["attention_mask"][i], dtype=np.int64),
                "context_mask": ctx,
                "example_index": lo + sample,
            }
            if has_types:
                window["token_type_ids"] = np.asarray(enc["token_type_ids"][i], dtype=np.int64)
            if ctx[0]:  # the null pointer (position 0) must not be a context token
                raise ConfigError("SQuAD windows need the question first: this tokenizer puts the context at position 0")
            offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int64).reshape(-1, 2)
            context = chunk["context"][sample]
            if trim:
                offsets = trim_space_offsets(offsets, ctx, context)
            if not context.isascii():  # in ASCII text every character is a cluster
                if context not in bounds:
                    bounds[context] = cluster_bounds(context)
                offsets[ctx] = whole_clusters(offsets[ctx], bounds[context])
            if train:
                answers = chunk["answers"][sample]
                if answers["text"]:
                    start_char = answers["answer_start"][0]
                    s, e = answer_token_span(offsets, ctx, start_char, start_char + len(answers["text"][0]))
                    if s == 0 and drop_windows_without_answer:
                        dropped += 1
                        continue
                else:
                    s = e = 0
                window["start_positions"], window["end_positions"] = s, e
            else:
                offsets[~ctx] = -1
                window["offsets"] = offsets
            window["feature_index"] = len(features)
            features.append(window)
    if dropped:
        log.info("left out %d training windows that do not contain their answer", dropped)
    return features


class WindowDataset(Dataset):
    """The windows of one split (a list of dicts of numpy arrays)."""

    def __init__(self, windows: list[dict[str, Any]]) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.windows[i]

    def lengths(self) -> list[int]:
        return [len(w["input_ids"]) for w in self.windows]


def window_collator(pad_token_id: int) -> PaddingCollator:
    """Pads windows to the batch's longest one.

    Batches are dicts of tensors: [B, T] int64 ``input_ids`` (``pad_token_id``), ``attention_mask``
    and ``token_type_ids`` (0), bool ``context_mask`` (False); [B, T, 2] int64 ``offsets`` (-1);
    [B] int64 ``example_index``, ``feature_index`` and, for training, ``start_positions`` /
    ``end_positions``.
    """
    return PaddingCollator(
        {"input_ids": pad_token_id, "attention_mask": 0, "token_type_ids": 0, "context_mask": False, "offsets": -1}
    )
