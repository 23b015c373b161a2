"""Sub-word windows (tasks/ner/windows.py): alignment vs a plain loop, windows of whole words, stitching."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sesame.heads.masking import IGNORE_INDEX
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.ner.readers import read_conll
from sesame.tasks.ner.tags import build_tag_set, encode_tags
from sesame.tasks.ner.windows import WindowTokenizer, plan_windows, stitch_words, tokenize_examples
from sesame.tasks.core.paths import data_dir_path, shipped_path

WNUT_DEV_SLICE = Path(shipped_path("wnut17/dev.300.conll"))
WNUT_TRAIN_SLICE = Path(shipped_path("wnut17/train.1k.conll"))
WNUT_DEV_FULL = Path(data_dir_path("wnut17/emerging.dev.conll"))  # has words the tokenizer drops (U+FE0F)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


def _reference_features(tokenizer, words: list[str], tag_ids: list[int], label_all: bool) -> dict[str, list[int]]:
    """The textbook per-token loop (one window, no truncation)."""
    # A word the tokenizer drops entirely is replaced by the unknown token (checked word by word here).
    words = [w if tokenizer.tokenize(w) else tokenizer.unk_token for w in words]
    enc = tokenizer(words, is_split_into_words=True)
    labels, word_index, prev = [], [], None
    for wid in enc.word_ids():
        if wid is None:
            labels.append(IGNORE_INDEX)
            word_index.append(-1)
        elif wid != prev:
            labels.append(tag_ids[wid])
            word_index.append(wid)
        else:
            labels.append(tag_ids[wid] if label_all else IGNORE_INDEX)
            word_index.append(-1)
        prev = wid
    return {"input_ids": enc["input_ids"], "labels": labels, "word_index": word_index}


@pytest.mark.parametrize("label_all", [False, True])
def test_alignment_matches_a_plain_loop_on_real_wnut(tokenizer, label_all: bool) -> None:
    ex = read_conll(WNUT_DEV_SLICE)
    if WNUT_DEV_FULL.is_file():  # add the sentences with dropped characters (U+FE0F)
        full = read_conll(WNUT_DEV_FULL)
        extra = [i for i, words in enumerate(full.tokens) if any(not tokenizer.tokenize(w) for w in words)]
        assert extra, "expected sentences with words the tokenizer drops"
        ex.tokens += [full.tokens[i] for i in extra]
        ex.tags += [full.tags[i] for i in extra]
        ex.lines += [full.lines[i] for i in extra]
    names = build_tag_set(ex.tags)
    tag_ids = encode_tags(ex, names)
    ds = tokenize_examples(ex, tag_ids, tokenizer, max_seq_length=512, label_all_subwords=label_all)
    assert len(ds) == len(ex)  # no sentence needed a second window at 512
    for i in range(len(ex)):
        ref = _reference_features(tokenizer, ex.tokens[i], tag_ids[i].tolist(), label_all)
        row = ds[i]
        assert row["example_index"] == i
        assert row["input_ids"] == ref["input_ids"], i
        assert row["labels"] == ref["labels"], i
        assert row["word_index"] == ref["word_index"], i
        # every word has exactly one prediction slot
        assert sorted(w for w in row["word_index"] if w >= 0) == list(range(len(ex.tokens[i])))


def test_long_sentence_windows_lose_no_word(tokenizer) -> None:
    ex = read_conll(WNUT_TRAIN_SLICE)
    # One 400-word "sentence" from real text, plus a short one, plus one with a word longer than a window.
    long_words = [w for s in ex.tokens[:40] for w in s][:400]
    long_tags = [t for s in ex.tags[:40] for t in s][:400]
    giant = "supercalifragilisticexpialidocious" * 2
    ex.tokens, ex.tags, ex.lines = [long_words, ["hi", "there"], ["a", giant, "b"]], [long_tags, ["O", "O"], ["O", "B-person", "O"]], [1, 2, 3]
    names = build_tag_set(ex.tags)
    tag_ids = encode_tags(ex, names)
    max_len = 16
    ds = tokenize_examples(ex, tag_ids, tokenizer, max_seq_length=max_len)
    assert len(tokenizer.tokenize(giant)) > max_len  # the giant word really is cut
    rows = [ds[i] for i in range(len(ds))]
    assert all(len(r["input_ids"]) <= max_len for r in rows)
    assert sum(r["example_index"] == 0 for r in rows) >= 400 // (max_len - 2)  # really windowed
    # Read one "prediction" per word back: the label at the first sub-token must be the word's tag.
    ex_idx = np.concatenate([np.full(sum(w >= 0 for w in r["word_index"]), r["example_index"]) for r in rows])
    word_idx = np.concatenate([[w for w in r["word_index"] if w >= 0] for r in rows])
    values = np.concatenate([[l for l, w in zip(r["labels"], r["word_index"]) if w >= 0] for r in rows])
    stitched = stitch_words(ex_idx, word_idx, values, [len(t) for t in ex.tokens])
    for got, want in zip(stitched, tag_ids):
        assert got.tolist() == want.tolist()
    # Each window holds a consecutive run of whole words and is exactly their tokenisation.
    truncated = []
    for r in rows:
        idx = [w for w in r["word_index"] if w >= 0]
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        words = ex.tokens[r["example_index"]][idx[0] : idx[0] + len(idx)]
        full = tokenizer(words, is_split_into_words=True)["input_ids"]
        if len(full) > max_len:  # only a single word longer than a window is cut, keeping its first pieces
            assert len(words) == 1 and len(r["input_ids"]) == max_len and r["input_ids"][:-1] == full[: max_len - 1]
            truncated.append(words[0])
        else:
            assert r["input_ids"] == full
    assert giant in truncated


def test_max_seq_length_outside_the_encoder_is_a_config_error(tokenizer) -> None:
    with pytest.raises(ConfigError, match=r"data.max_seq_length=2 leaves no room"):
        WindowTokenizer(tokenizer, 2)
    with pytest.raises(ConfigError, match=r"data.max_seq_length=100000 exceeds the encoder's 512 positions"):
        WindowTokenizer(tokenizer, 100_000)


def test_plan_windows() -> None:
    counts = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    windows = plan_windows(counts, budget=8)
    assert windows[0][0] == 0 and windows[-1][1] == len(counts)
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))
    for start, end in windows:
        assert counts[start:end].sum() <= 8 or end - start == 1
    assert windows == [(0, 3), (3, 5), (5, 6), (6, 8)]
    assert plan_windows(np.array([2, 2]), budget=10) == [(0, 2)]


def test_stitch_words_rejects_missing_or_repeated_words() -> None:
    with pytest.raises(ValueError, match="1 missing"):
        stitch_words(np.array([0, 0]), np.array([0, 1]), np.array([5, 6]), [3])
    with pytest.raises(ValueError, match="repeated"):
        stitch_words(np.array([0, 0, 0]), np.array([0, 1, 1]), np.array([5, 6, 7]), [2])
    out = stitch_words(np.array([1, 0, 1]), np.array([1, 0, 0]), np.array([7, 5, 6]), [1, 2])
    assert [o.tolist() for o in out] == [[5], [6, 7]]
