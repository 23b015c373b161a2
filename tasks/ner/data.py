"""NER data: CoNLL / JSON-lines files -> BIO2 tag ids -> sub-word windows, and back to words.

Reading
    CoNLL-style text (one ``token ... tag`` line per word, blank lines between sentences,
    ``-DOCSTART-`` lines skipped; columns split on tabs when the line has one, else on whitespace;
    the tag is in column ``tag_column``) or JSON lines ``{"tokens": [...], "tags": [...]}`` (through
    ``datasets.load_dataset("json")``). Errors name the file, the line and the fix.

Tags
    Converted to BIO2: ``tag_scheme=iob1`` converts, ``bio`` keeps the file as is, ``auto`` converts a
    file in which some ``I-X`` starts a chunk (IOB1, as CoNLL-2003's files are). The tag set comes from
    the training data: ``O`` first, then ``B-X`` and ``I-X`` for every type ``X`` seen, sorted. (Both
    prefixes of a seen type are always included, so a dev file with a multi-word entity of a type that
    is only ever one word long in training is still readable.) A type not in the training data is an
    error.

Sub-words
    Each word's tag goes on its first sub-token (``label_all_subwords`` puts it on all of them), -100
    elsewhere, computed with numpy over the fast tokenizer's ``word_ids()``. A sentence longer than
    ``max_seq_length`` sub-tokens is cut into windows of whole words, so every word is in exactly one
    window; each feature carries ``example_index`` (its sentence) and ``word_index`` (per token: the
    sentence-level index of the word whose first sub-token it is, else -1). Reading the logits at
    ``word_index >= 0`` gives one prediction per word; :func:`stitch_words` puts them back in sentence
    order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from sesame.tasks.batching import make_loader
from sesame.tasks.datamodule import SplitDataModule

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
DOCSTART = "-DOCSTART-"
FORMATS = ("auto", "conll", "jsonl")
TAG_SCHEMES = ("auto", "iob1", "bio")


class NerDataError(ValueError):
    """A data file or setting that cannot be used as configured; the message says where and what to do."""


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------
@dataclass
class NerExamples:
    """Sentences of one file. ``lines[i]`` is the line of sentence ``i``'s first word (1-based).

    In CoNLL files word ``j`` of sentence ``i`` is on line ``lines[i] + j``; in JSON lines the whole
    sentence is on line ``lines[i]`` (``per_word_lines`` False).
    """

    path: Path
    tokens: list[list[str]]
    tags: list[list[str]]
    lines: list[int]
    per_word_lines: bool = True

    def __len__(self) -> int:
        return len(self.tokens)

    def where(self, sentence: int, word: int) -> str:
        """``file:line`` (plus the word position for JSON lines) for error messages."""
        if self.per_word_lines:
            return f"{self.path}:{self.lines[sentence] + word}"
        return f"{self.path}:{self.lines[sentence]} (word {word})"

    def head(self, n: int | None) -> NerExamples:
        """The first ``n`` sentences (all when ``n`` is None)."""
        if n is None or n >= len(self):
            return self
        return NerExamples(self.path, self.tokens[:n], self.tags[:n], self.lines[:n], self.per_word_lines)


def _check_file(path: str | Path, key: str) -> Path:
    path = Path(path).expanduser()
    if not path.is_file():
        raise NerDataError(f"{path}: no such file (set data.{key}; relative paths start from {Path.cwd()})")
    if path.stat().st_size == 0:
        raise NerDataError(f"{path}: the file is empty (data.{key})")
    return path


def _check_tag(tag: str, where: str, hint: str) -> None:
    if tag == "O" or (len(tag) > 2 and tag[1] == "-" and tag[0] in "BI"):
        return
    if not tag:
        raise NerDataError(f"{where}: empty tag; every word needs a tag ('O' outside entities)")
    raise NerDataError(f"{where}: tag {tag!r} is not BIO/IOB ('O', 'B-TYPE' or 'I-TYPE'); {hint}")


def read_conll(path: str | Path, tag_column: int = -1) -> NerExamples:
    """Read a CoNLL-style file (see the module docstring); every line must have the same columns."""
    path = Path(path)
    tokens: list[list[str]] = []
    tags: list[list[str]] = []
    lines: list[int] = []
    words: list[str] = []
    labels: list[str] = []
    width: int | None = None
    width_line = 0
    hint = f"is data.tag_column={tag_column} the tag column?"

    def close() -> None:
        if words:
            tokens.append(list(words))
            tags.append(list(labels))
            words.clear()
            labels.clear()

    with path.open(encoding="utf-8-sig") as handle:
        for line_no, raw in enumerate(handle, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip():  # blank or whitespace-only (WNUT-17 train separates with a tab)
                close()
                continue
            columns = line.split("\t") if "\t" in line else line.split()
            if columns[0] == DOCSTART:
                close()
                continue
            where = f"{path}:{line_no}"
            if width is None:
                width, width_line = len(columns), line_no
                if width < 2:
                    raise NerDataError(
                        f"{where}: one column ({line!r}); expected a token and a tag separated by a tab or spaces"
                    )
                if not -width <= tag_column < width or tag_column in (0, -width):
                    raise NerDataError(
                        f"{where}: data.tag_column={tag_column} does not name a tag column of this "
                        f"{width}-column file (column 0 is the token); use e.g. -1 for the last column"
                    )
            elif len(columns) != width:
                raise NerDataError(
                    f"{where}: {len(columns)} columns, but line {width_line} has {width}; every word line "
                    f"needs the same columns (tab-separated, or whitespace-separated without tabs). Fix this line."
                )
            token, tag = columns[0], columns[tag_column].strip()
            if not token.strip():
                raise NerDataError(f"{where}: empty token; remove the line or put the word in the first column")
            _check_tag(tag, where, hint)
            if not words:
                lines.append(line_no)
            words.append(token)
            labels.append(tag)
    close()
    if not tokens:
        raise NerDataError(f"{path}: no sentences found (only blank or -DOCSTART- lines)")
    return NerExamples(path, tokens, tags, lines)


def _json_line_numbers(path: Path) -> list[int]:
    with path.open(encoding="utf-8-sig") as handle:
        return [n for n, line in enumerate(handle, start=1) if line.strip()]


def _first_bad_json_line(path: Path) -> str:
    with path.open(encoding="utf-8-sig") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                return f"{path}:{n}: not valid JSON ({err.msg}); each line must be one JSON object"
            if not isinstance(record, dict):
                return f"{path}:{n}: a JSON {type(record).__name__}, not an object with 'tokens' and 'tags'"
    return f"{path}: could not be read as JSON lines"


def read_jsonl(path: str | Path) -> NerExamples:
    """Read JSON lines ``{"tokens": [str, ...], "tags": [str, ...]}`` via ``datasets``."""
    path = Path(path)
    try:
        ds = datasets.load_dataset("json", data_files=str(path), split="train")
    except Exception as err:  # the datasets / pyarrow error does not say which line
        raise NerDataError(_first_bad_json_line(path)) from err
    missing = [c for c in ("tokens", "tags") if c not in ds.column_names]
    if missing:
        extra = " (tag ids such as 'ner_tags' must be written out as tag strings)" if "ner_tags" in ds.column_names else ""
        raise NerDataError(
            f"{path}: records lack the {missing} field(s); each line must be "
            f'{{"tokens": [...], "tags": [...]}}; found fields {ds.column_names}{extra}'
        )
    numbers = _json_line_numbers(path)
    if len(numbers) != len(ds):  # not one record per line (a JSON array?): fall back to record numbers
        numbers = list(range(1, len(ds) + 1))
    tokens, tags = ds["tokens"], ds["tags"]
    for i, (words, labels) in enumerate(zip(tokens, tags)):
        where = f"{path}:{numbers[i]}"
        if not isinstance(words, list) or not isinstance(labels, list):
            raise NerDataError(f"{where}: 'tokens' and 'tags' must be lists of strings")
        if not words:
            raise NerDataError(f"{where}: empty sentence; remove the line")
        if len(words) != len(labels):
            raise NerDataError(f"{where}: {len(words)} tokens but {len(labels)} tags; give one tag per token")
        for j, (word, tag) in enumerate(zip(words, labels)):
            if not isinstance(word, str) or not word.strip():
                raise NerDataError(f"{where} (word {j}): token {word!r} is not a non-empty string")
            if not isinstance(tag, str):
                raise NerDataError(f"{where} (word {j}): tag {tag!r} is not a string; write tags as 'O', 'B-X', 'I-X'")
            _check_tag(tag, f"{where} (word {j})", "fix the tags of this record")
    return NerExamples(path, [list(w) for w in tokens], [list(t) for t in tags], numbers, per_word_lines=False)


def detect_format(path: Path, fmt: str = "auto") -> str:
    """``conll`` or ``jsonl``: as given, or from the extension / first character for ``auto``."""
    if fmt not in FORMATS:
        raise NerDataError(f"data.format={fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt != "auto":
        return fmt
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    with path.open(encoding="utf-8-sig") as handle:
        for line in handle:
            if line.strip():
                return "jsonl" if line.lstrip().startswith("{") else "conll"
    return "conll"


def read_examples(path: str | Path, fmt: str = "auto", tag_column: int = -1, key: str = "train_file") -> NerExamples:
    """Read one file as CoNLL or JSON lines (``fmt``: auto | conll | jsonl)."""
    path = _check_file(path, key)
    if detect_format(path, fmt) == "jsonl":
        return read_jsonl(path)
    return read_conll(path, tag_column)


# --------------------------------------------------------------------------------------------------
# Tag schemes and the tag set
# --------------------------------------------------------------------------------------------------
def _chunk_starts_with_inside(tags: Sequence[str]) -> np.ndarray:
    """[n] bool: positions holding an ``I-X`` that does not continue an ``X`` chunk."""
    prev = ["O", *tags[:-1]]
    return np.array([t[0] == "I" and (p == "O" or p[2:] != t[2:]) for p, t in zip(prev, tags)], dtype=bool)


def is_iob1(sequences: Iterable[Sequence[str]]) -> bool:
    """True when some ``I-X`` starts a chunk (IOB1; never the case in valid BIO2)."""
    return any(_chunk_starts_with_inside(tags).any() for tags in sequences)


def iob1_to_bio2(tags: Sequence[str]) -> list[str]:
    """IOB1 -> BIO2: an ``I-X`` that starts a chunk becomes ``B-X``; valid BIO2 is unchanged."""
    starts = _chunk_starts_with_inside(tags)
    return [f"B-{t[2:]}" if s else t for t, s in zip(tags, starts)]


def apply_tag_scheme(examples: NerExamples, scheme: str) -> NerExamples:
    """Convert ``examples`` to BIO2 in place per ``scheme`` (auto | iob1 | bio); returns them."""
    if scheme not in TAG_SCHEMES:
        raise NerDataError(f"data.tag_scheme={scheme!r} is not one of {', '.join(TAG_SCHEMES)}")
    if scheme == "bio":
        return examples
    if scheme == "auto" and not is_iob1(examples.tags):
        return examples
    if scheme == "auto":
        log.info("%s: some I-X tags start a chunk, reading it as IOB1 and converting to BIO2", examples.path)
    examples.tags = [iob1_to_bio2(t) for t in examples.tags]
    return examples


def build_tag_set(sequences: Iterable[Sequence[str]]) -> list[str]:
    """``["O", "B-A", "B-B", ..., "I-A", "I-B", ...]``: both prefixes of every type seen, sorted."""
    types = sorted({t[2:] for tags in sequences for t in tags if t != "O"})
    return ["O", *sorted([f"B-{x}" for x in types] + [f"I-{x}" for x in types])]


def encode_tags(examples: NerExamples, tag_names: Sequence[str], role: str = "this") -> list[np.ndarray]:
    """Tag ids per sentence (int64 arrays); an unknown tag is an error naming its line."""
    index = {name: i for i, name in enumerate(tag_names)}
    out = []
    for i, tags in enumerate(examples.tags):
        try:
            out.append(np.array([index[t] for t in tags], dtype=np.int64))
        except KeyError:
            j = next(j for j, t in enumerate(tags) if t not in index)
            raise NerDataError(
                f"{examples.where(i, j)}: tag {tags[j]!r} in {role} file is not in the training data's tag set "
                f"{list(tag_names)}; every entity type must occur in data.train_file"
            ) from None
    return out


# --------------------------------------------------------------------------------------------------
# Sub-word alignment and windows
# --------------------------------------------------------------------------------------------------
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
            raise NerDataError("NER needs a fast tokenizer (word_ids); this encoder's tokenizer is a slow one")
        self.tokenizer = tokenizer
        self.max_seq_length = int(max_seq_length)
        self.budget = self.max_seq_length - tokenizer.num_special_tokens_to_add(pair=False)
        if self.budget < 1:
            raise NerDataError(f"data.max_seq_length={max_seq_length} leaves no room for words after special tokens")
        limit = getattr(tokenizer, "model_max_length", None)
        if limit is not None and limit < 1_000_000 and self.max_seq_length > limit:
            raise NerDataError(f"data.max_seq_length={max_seq_length} exceeds the encoder's maximum of {limit}")
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
                    raise NerDataError(f"words {[words[j] for j in empty]} give no sub-tokens and the tokenizer has no unknown token")
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


# --------------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------------
class NerCollator:
    """Pads a list of features to the longest in the batch (right padding).

    Output: ``input_ids, attention_mask[, token_type_ids], labels, word_index`` [B, T] and
    ``example_index`` [B]; padding is ``pad_token_id`` / 0 / 0 / -100 / -1.
    """

    def __init__(self, pad_token_id: int) -> None:
        self.pad = {"input_ids": pad_token_id, "attention_mask": 0, "token_type_ids": 0, "labels": IGNORE_INDEX, "word_index": -1}

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        length = max(len(f["input_ids"]) for f in features)
        batch: dict[str, torch.Tensor] = {}
        for key, value in self.pad.items():
            if key not in features[0]:
                continue
            out = torch.full((len(features), length), value, dtype=torch.long)
            for row, f in enumerate(features):
                out[row, : len(f[key])] = torch.as_tensor(f[key], dtype=torch.long)
            batch[key] = out
        batch["example_index"] = torch.tensor([f["example_index"] for f in features], dtype=torch.long)
        return batch


# --------------------------------------------------------------------------------------------------
# The data module
# --------------------------------------------------------------------------------------------------
@dataclass
class NerDataSettings:
    """``cfg.data`` for ``task=ner`` (see ``conf/data/wnut17.yaml``)."""

    train_file: str | None = None
    validation_file: str | None = None
    test_file: str | None = None
    format: str = "auto"
    tag_column: int = -1
    tag_scheme: str = "auto"
    tag_names: list[str] | None = None  # null: from the training data (filled in for the checkpoint)
    max_seq_length: int = 128
    label_all_subwords: bool = False
    batch_size: int = 32
    eval_batch_size: int = 64
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    num_workers: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, data: Mapping[str, Any] | DictConfig) -> NerDataSettings:
        raw = OmegaConf.to_container(data, resolve=True) if isinstance(data, DictConfig) else dict(data)
        known = {f.name for f in fields(cls)} - {"extras"}
        extras = {k: v for k, v in raw.items() if k not in known}
        if extras:  # kept aside rather than rejected (a preset may carry a name), but a typo should show
            log.warning("data.%s: not an NER data setting; ignored", ", data.".join(sorted(extras)))
        return cls(**{k: v for k, v in raw.items() if k in known}, extras=extras)


def load_tag_names(settings: NerDataSettings) -> list[str]:
    """The tag set: ``data.tag_names`` when given, else from the (BIO2-converted) training file."""
    if settings.tag_names:
        names = [str(n) for n in settings.tag_names]
        for n in names:
            _check_tag(n, "data.tag_names", "list tags as 'O', 'B-TYPE', 'I-TYPE'")
        return names
    if not settings.train_file:
        raise NerDataError("set data.train_file (the tag set comes from it) or data.tag_names")
    train = read_examples(settings.train_file, settings.format, settings.tag_column, "train_file")
    return build_tag_set(apply_tag_scheme(train, settings.tag_scheme).tags)


class NerDataModule(SplitDataModule):
    """Token tagging data (``task=ner``). Built as ``NerDataModule(cfg, tokenizer)``; reads ``cfg.data``.

    After ``setup``: ``tag_names``, ``examples[split]`` (the sentences, for metrics and prediction
    files) and ``splits[split]`` (tokenised windows) for ``train`` / ``validation`` / ``test``.
    """

    def __init__(self, cfg: DictConfig | Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> None:
        super().__init__()
        self.cfg = cfg
        self.settings = NerDataSettings.from_config(cfg["data"])
        self.tokenizer = tokenizer
        self.tag_names: list[str] = []
        self.examples: dict[str, NerExamples] = {}
        self.splits: dict[str, datasets.Dataset] = {}
        self.collator = NerCollator(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)

    def _read(self, key: str) -> NerExamples:
        s = self.settings
        return apply_tag_scheme(read_examples(getattr(s, key), s.format, s.tag_column, key), s.tag_scheme)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        s = self.settings
        if s.tag_scheme not in TAG_SCHEMES:
            raise NerDataError(f"data.tag_scheme={s.tag_scheme!r} is not one of {', '.join(TAG_SCHEMES)}")
        train = self._read("train_file") if s.train_file else None
        if s.tag_names:
            self.tag_names = load_tag_names(s)
        elif train is not None:
            self.tag_names = build_tag_set(train.tags)
        else:
            raise NerDataError("set data.train_file (the tag set comes from it) or data.tag_names")
        if train is not None:
            self.examples["train"] = train.head(s.max_train_examples)
        for split, key in (("validation", "validation_file"), ("test", "test_file")):
            if getattr(s, key):
                self.examples[split] = self._read(key).head(s.max_eval_examples)
        for split, examples in self.examples.items():
            tag_ids = encode_tags(examples, self.tag_names, role="the training" if split == "train" else f"the {split}")
            self.splits[split] = tokenize_examples(examples, tag_ids, self.tokenizer, s.max_seq_length, s.label_all_subwords)
            windows = len(self.splits[split])
            if windows > len(examples):
                log.info("%s: %d sentences -> %d windows of <= %d tokens", split, len(examples), windows, s.max_seq_length)

    def config_updates(self) -> dict[str, Any]:
        """What the module must know from the data: the tag set (saved with the checkpoint)."""
        return {"data": {"tag_names": list(self.tag_names)}}

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def _loader(self, split: str, train: bool) -> DataLoader:
        if split not in self.splits:
            raise NerDataError(f"no {split} data: set data.{'train' if split == 'train' else split}_file")
        ds = self.splits[split]
        s = self.settings
        return make_loader(
            ds, train=train, batch_size=int(s.batch_size if train else s.eval_batch_size), collate_fn=self.collator,
            num_workers=int(s.num_workers), lengths=None if train else [len(ids) for ids in ds["input_ids"]],
            seed=int(self.cfg.get("seed", 0)), resume_at=self.resume_at,
        )

