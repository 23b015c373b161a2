"""NER sentences -> sub-word windows with token labels, and per-word predictions back to sentences.

Each word's tag id goes on its first sub-token (``label_all_subwords`` puts it on all of them),
``IGNORE_INDEX`` (``heads/masking.py``) elsewhere, computed with numpy over the fast tokenizer's
``word_ids()``. A sentence longer than ``max_seq_length`` sub-tokens is cut into windows of whole
words, so every word is in exactly one window; each feature carries ``example_index`` (its sentence)
and ``word_index`` (per token: the sentence-level index of the word whose first sub-token it is,
else -1). Reading the logits at ``word_index >= 0`` gives one prediction per word;
:func:`stitch_words` puts them back in sentence order. Tag ids come from ``tasks/ner/tags.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from sesame.heads.masking import IGNORE_INDEX
from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.encoders.encoder import check_max_seq_length
from sesame.tasks.encoders.families import words_tokenizer
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.ner.readers import NerExamples

if TYPE_CHECKING:  # read where data is loaded; sesame-predict never needs it
    import datasets


def _word_ids(encoding: Any, i: int) -> np.ndarray:
    """The ``i``-th sequence's word ids as int64, -1 for special tokens."""
    # None -> NaN in a float array, then -1: no Python loop over tokens.
    return np.nan_to_num(np.array(encoding.word_ids(i), dtype=np.float64), nan=-1).astype(np.int64)


def align_labels(
    word_ids: np.ndarray, tag_ids: np.ndarray | None, word_offset: int = 0, label_all_subwords: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Token labels and word indices of one window.

    Args:
        word_ids: [T] window-level word id per token, -1 for special tokens.
        tag_ids: [W_sentence] tag id per word of the whole sentence (None: unlabelled).
        word_offset: sentence index of the window's first word.
        label_all_subwords: label every sub-token, not only the first of each word.

    Returns:
        ``(labels [T], word_index [T])``: tag id or -100; sentence-level word index on the first
        sub-token of each word, -1 elsewhere.
    """
    is_word = word_ids >= 0
    prev = np.concatenate([[-1], word_ids[:-1]])
    first = is_word & (word_ids != prev)
    word_index = np.where(first, word_ids + word_offset, -1)
    labels = np.full(word_ids.shape, IGNORE_INDEX, dtype=np.int64)
    if tag_ids is not None:
        on = is_word if label_all_subwords else first
        labels[on] = tag_ids[word_ids[on] + word_offset]
    return labels, word_index


def plan_windows(subword_counts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Split a sentence into windows of whole words with at most ``budget`` sub-tokens each.

    Greedy left to right; a single word longer than ``budget`` gets a window of its own (the
    tokenizer then truncates it, keeping its first sub-token). Returns ``[(start, end), ...]`` word
    ranges covering ``0..len(subword_counts)`` exactly once.
    """
    total = int(subword_counts.sum())
    if total <= budget:
        return [(0, len(subword_counts))]
    windows: list[tuple[int, int]] = []
    start, used = 0, 0
    for j, count in enumerate(subword_counts.tolist()):
        if j > start and used + count > budget:
            windows.append((start, j))
            start, used = j, 0
        used += count
    windows.append((start, len(subword_counts)))
    return windows


class WindowTokenizer:
    """Batched ``datasets.map`` function: sentences -> windows with labels and word indices."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_seq_length: int, label_all_subwords: bool = False) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ConfigError("NER needs a fast tokenizer (word_ids); this encoder's tokenizer is a slow one")
        # Byte-level BPE tokenizers (RoBERTa, BART, ModernBERT) get a prefix space on each word, which
        # pre-split words otherwise lack: the form a word has after a space in running text.
        self.tokenizer = words_tokenizer(tokenizer)
        self.max_seq_length = int(max_seq_length)
        self.budget = self.max_seq_length - tokenizer.num_special_tokens_to_add(pair=False)
        if self.budget < 1:
            raise ConfigError(f"data.max_seq_length={max_seq_length} leaves no room for words after special tokens")
        check_max_seq_length(self.max_seq_length, tokenizer)
        self.label_all_subwords = label_all_subwords

    def _fix_empty_words(self, sentences: list[list[str]]) -> tuple[list[list[str]], list[np.ndarray]]:
        """Replace words the tokenizer drops entirely (e.g. U+FE0F in WNUT-17) by the unknown token.

        Such a word would have no sub-token, hence no prediction. Returns the sentences and the
        sub-token count of every word.
        """
        # verbose=False: no 'longer than the maximum' warning, these lengths only plan the windows.
        enc = self.tokenizer(sentences, is_split_into_words=True, add_special_tokens=False, verbose=False)
        counts = []
        for i, words in enumerate(sentences):
            ids = _word_ids(enc, i)
            count = np.bincount(ids[ids >= 0], minlength=len(words))
            empty = np.flatnonzero(count == 0)
            if len(empty):
                unk = self.tokenizer.unk_token
                if unk is None:
                    raise DataError(f"words {[words[j] for j in empty]} give no sub-tokens and the tokenizer has no unknown token")
                words = list(words)
                for j in empty:
                    words[j] = unk
                sentences[i] = words
                count[empty] = 1
            counts.append(count)
        return sentences, counts

    def __call__(self, batch: Mapping[str, list]) -> dict[str, list]:
        sentences = [list(w) for w in batch["tokens"]]
        all_tags = batch.get("tag_ids")
        sentences, counts = self._fix_empty_words(sentences)
        window_words: list[list[str]] = []
        owners: list[tuple[int, int]] = []  # (row in batch, word offset)
        for row, count in enumerate(counts):
            for start, end in plan_windows(count, self.budget):
                window_words.append(sentences[row][start:end])
                owners.append((row, start))
        enc = self.tokenizer(window_words, is_split_into_words=True, truncation=True, max_length=self.max_seq_length)
        out: dict[str, list] = {key: list(enc[key]) for key in enc.keys()}
        out.update(labels=[], word_index=[], example_index=[])
        for k, (row, offset) in enumerate(owners):
            tags = None if all_tags is None else np.asarray(all_tags[row], dtype=np.int64)
            labels, word_index = align_labels(_word_ids(enc, k), tags, offset, self.label_all_subwords)
            if int((word_index >= 0).sum()) != len(window_words[k]):
                raise RuntimeError(  # plan_windows guarantees this; a failure is a bug, not bad data
                    f"window of sentence {batch['example_index'][row]} kept {(word_index >= 0).sum()} of "
                    f"{len(window_words[k])} words"
                )
            out["labels"].append(labels.tolist())
            out["word_index"].append(word_index.tolist())
            out["example_index"].append(batch["example_index"][row])
        return out


def tokenize_examples(
    examples: NerExamples,
    tag_ids: Sequence[np.ndarray] | None,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    label_all_subwords: bool = False,
) -> datasets.Dataset:
    """Sentences -> a ``datasets.Dataset`` of windows (columns: encoder inputs, ``labels``,
    ``word_index``, ``example_index``)."""
    columns: dict[str, list] = {"tokens": examples.tokens, "example_index": list(range(len(examples)))}
    if tag_ids is not None:
        columns["tag_ids"] = [t.tolist() for t in tag_ids]
    import datasets

    ds = datasets.Dataset.from_dict(columns)
    fn = WindowTokenizer(tokenizer, max_seq_length, label_all_subwords)
    # An explicit fingerprint skips hashing the tokenizer; in-memory datasets write no cache anyway.
    fingerprint = f"ner-{len(examples)}-{max_seq_length}-{label_all_subwords}-{abs(hash(str(examples.path)))}"
    return ds.map(fn, batched=True, remove_columns=ds.column_names, new_fingerprint=fingerprint, desc="tokenizing")


def stitch_words(
    example_index: np.ndarray, word_index: np.ndarray, values: np.ndarray, num_words: Sequence[int]
) -> list[np.ndarray]:
    """Per-word values from windows back into sentences.

    Args:
        example_index: [N] sentence of each word prediction.
        word_index: [N] word position within its sentence.
        values: [N] the prediction (e.g. tag id).
        num_words: words per sentence.

    Returns:
        One array per sentence, of length ``num_words[i]``. Every word must be given exactly once.
    """
    offsets = np.concatenate([[0], np.cumsum(num_words)]).astype(np.int64)
    flat_pos = offsets[np.asarray(example_index, dtype=np.int64)] + np.asarray(word_index, dtype=np.int64)
    seen = np.bincount(flat_pos, minlength=int(offsets[-1]))
    if len(seen) != offsets[-1] or (seen != 1).any():
        missing, repeated = int((seen == 0).sum()), int((seen > 1).sum())
        raise ValueError(f"word predictions do not cover every word once ({missing} missing, {repeated} repeated)")
    flat = np.empty(int(offsets[-1]), dtype=np.asarray(values).dtype)
    flat[flat_pos] = values
    return np.split(flat, offsets[1:-1])


def tagging_collator(tokenizer: PreTrainedTokenizerBase) -> PaddingCollator:
    """Pads windows to the batch's longest one: ``input_ids`` with the pad token (0 without one),
    ``labels`` with ``IGNORE_INDEX``, ``word_index`` with -1 (no word), the masks and segments with 0."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return PaddingCollator({"input_ids": pad_id, "attention_mask": 0, "token_type_ids": 0, "labels": IGNORE_INDEX,
                            "word_index": -1})
