"""NER data: reading, tag schemes, sub-word alignment (vs a plain loop), windows, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from sesame.tasks.encoder import load_tokenizer
from sesame.tasks.ner.data import (
    IGNORE_INDEX,
    NerDataError,
    NerDataModule,
    apply_tag_scheme,
    build_tag_set,
    encode_tags,
    iob1_to_bio2,
    is_iob1,
    plan_windows,
    read_conll,
    read_examples,
    stitch_words,
    tokenize_examples,
)
from sesame.tasks.ner.metrics import get_entities
from sesame.tasks.paths import data_dir_path, shipped_path

WNUT_DEV_SLICE = Path(shipped_path("wnut17/dev.300.conll"))
WNUT_TRAIN_SLICE = Path(shipped_path("wnut17/train.1k.conll"))
WNUT_DEV_FULL = Path(data_dir_path("wnut17/emerging.dev.conll"))  # has words the tokenizer drops (U+FE0F)
CONLL2003_TRAIN = Path(data_dir_path("conll2003/eng.train"))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer({"name_or_path": "minilm_l6"})


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


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


# Reading -------------------------------------------------------------------------------------------
def test_read_conll_wnut_slice() -> None:
    ex = read_conll(WNUT_TRAIN_SLICE)
    assert len(ex) == 1000  # data/SOURCES.md: the first 1,000 sentences
    assert ex.tokens[0][:3] == ["@paulwalk", "It", "'s"]
    assert all(len(w) == len(t) for w, t in zip(ex.tokens, ex.tags))
    assert not is_iob1(ex.tags)
    names = build_tag_set(ex.tags)
    assert names[0] == "O" and names[1:] == sorted(names[1:])
    assert {n[2:] for n in names[1:]} == {"corporation", "creative-work", "group", "location", "person", "product"}


def test_read_conll_columns_docstart_and_whitespace_separators(tmp_path: Path) -> None:
    text = (
        "-DOCSTART- -X- -X- O\n\n"
        "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n \n"  # a whitespace-only line ends a sentence
        "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n\n\n"
        "-DOCSTART- -X- -X- O\n"
        "BRUSSELS NNP I-NP I-LOC\n"
    )
    ex = read_conll(_write(tmp_path, "a.conll", text))
    assert ex.tokens == [["EU", "rejects"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert ex.tags == [["I-ORG", "O"], ["I-PER", "I-PER"], ["I-LOC"]]
    assert ex.lines == [3, 6, 11]
    assert ex.where(1, 1) == f"{tmp_path / 'a.conll'}:7"
    chunk = read_conll(_write(tmp_path, "b.conll", text), tag_column=2)
    assert chunk.tags[0] == ["I-NP", "I-VP"]


def test_tab_separated_tokens_may_contain_spaces(tmp_path: Path) -> None:
    ex = read_conll(_write(tmp_path, "t.conll", "New York\tB-LOC\nis\tO\n"))
    assert ex.tokens == [["New York", "is"]] and ex.tags == [["B-LOC", "O"]]


def test_read_jsonl_and_format_detection(tmp_path: Path) -> None:
    rows = [{"tokens": ["Paris", "is", "nice"], "tags": ["B-LOC", "O", "O"]}, {"tokens": ["Bob"], "tags": ["B-PER"]}]
    path = _write(tmp_path, "x.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    ex = read_examples(path)
    assert ex.tokens == [r["tokens"] for r in rows] and ex.tags == [r["tags"] for r in rows]
    assert ex.lines == [1, 2]
    # auto detects JSON lines from the first character too, whatever the extension
    ex2 = read_examples(_write(tmp_path, "x.txt", path.read_text()))
    assert ex2.tokens == ex.tokens


# Tag schemes --------------------------------------------------------------------------------------
def test_iob1_to_bio2() -> None:
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG", "B-ORG", "I-ORG"]
    assert is_iob1([iob1])
    bio = iob1_to_bio2(iob1)
    assert bio == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "B-ORG", "I-ORG"]
    assert not is_iob1([bio])
    assert iob1_to_bio2(bio) == bio  # idempotent on BIO2
    # The conversion keeps the chunks conlleval reads.
    assert get_entities(iob1) == get_entities(bio)


def test_tag_scheme_settings(tmp_path: Path) -> None:
    path = _write(tmp_path, "iob1.conll", "EU\tI-ORG\nrejects\tO\n\nPeter\tI-PER\n")
    assert apply_tag_scheme(read_conll(path), "auto").tags == [["B-ORG", "O"], ["B-PER"]]
    assert apply_tag_scheme(read_conll(path), "iob1").tags == [["B-ORG", "O"], ["B-PER"]]
    assert apply_tag_scheme(read_conll(path), "bio").tags == [["I-ORG", "O"], ["I-PER"]]
    with pytest.raises(NerDataError, match="tag_scheme"):
        apply_tag_scheme(read_conll(path), "bioes")


@pytest.mark.skipif(not CONLL2003_TRAIN.is_file(), reason="CoNLL-2003 is not in $SESAME_DATA_DIR")
def test_conll2003_is_detected_as_iob1_and_converted() -> None:
    ex = read_conll(CONLL2003_TRAIN)
    assert len(ex) == 14041 and is_iob1(ex.tags)
    before = [get_entities(t) for t in ex.tags[:2000]]
    converted = apply_tag_scheme(ex, "auto")
    assert not is_iob1(converted.tags)
    assert [get_entities(t) for t in converted.tags[:2000]] == before
    assert build_tag_set(converted.tags) == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]


# Alignment ----------------------------------------------------------------------------------------
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


# Errors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "kwargs", "match"),
    [
        ("a\tO\nb\tO\tX\n", {}, r":2: 3 columns, but line 1 has 2"),
        ("a O\nb\n", {}, r":2: 1 columns, but line 1 has 2"),
        ("a\tO\nb\t\n", {}, r":2: empty tag"),
        ("a\tO\n\tB-X\n", {}, r":2: empty token"),
        ("EU NNP I-ORG\n", {"tag_column": 1}, r":1: tag 'NNP' is not BIO.*tag_column=1"),
        ("a\tO\n", {"tag_column": 5}, r":1: data.tag_column=5 does not name a tag column"),
        ("a\tPER\n", {}, r":1: tag 'PER' is not BIO"),
        ("onlyone\n", {}, r":1: one column"),
        ("\n-DOCSTART- O\n\n", {}, r"no sentences"),
    ],
)
def test_bad_conll_errors_name_file_and_line(tmp_path: Path, text: str, kwargs: dict, match: str) -> None:
    path = _write(tmp_path, "bad.conll", text)
    with pytest.raises(NerDataError, match=match) as info:
        read_conll(path, **kwargs)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (['{"tokens": ["a"], "tags": ["O"]}', '{"tokens": ["a", "b"], "tags": ["O"]}'], r":2: 2 tokens but 1 tags"),
        (['{"tokens": ["a"], "tags": ["O"]}', "", '{"tokens": ["a"], "tags": ["X"]}'], r":3 \(word 0\): tag 'X' is not BIO"),
        (['{"tokens": ["a"], "tags": ["O"]}', '{"tokens": ["a"], "tags": ["O"'], r":2: not valid JSON"),
        (['{"tokens": ["a"], "ner_tags": [0]}'], r"lack the \['tags'\].*tag strings"),
        (['{"tokens": [], "tags": []}'], r":1: empty sentence"),
    ],
)
def test_bad_jsonl_errors(tmp_path: Path, lines: list[str], match: str) -> None:
    path = _write(tmp_path, "bad.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(NerDataError, match=match) as info:
        read_examples(path)
    assert str(path) in str(info.value)


def test_missing_file_and_unknown_dev_tag(tmp_path: Path, tokenizer) -> None:
    with pytest.raises(NerDataError, match="no such file.*data.validation_file"):
        read_examples(tmp_path / "nope.conll", key="validation_file")
    train = _write(tmp_path, "train.conll", "Bob\tB-PER\nsays\tO\n")
    dev = _write(tmp_path, "dev.conll", "Hi\tO\n\nParis\tO\nrocks\tB-LOC\n")
    cfg = OmegaConf.create({"data": {"train_file": str(train), "validation_file": str(dev)}})
    with pytest.raises(NerDataError, match=r"dev.conll:4: tag 'B-LOC' in the validation file is not in the training"):
        NerDataModule(cfg, tokenizer).setup("fit")


# The data module ----------------------------------------------------------------------------------
def test_datamodule_on_shipped_wnut(tokenizer) -> None:
    cfg = OmegaConf.create(
        {
            "data": {
                "train_file": str(WNUT_TRAIN_SLICE),
                "validation_file": str(WNUT_DEV_SLICE),
                "max_seq_length": 24,
                "batch_size": 8,
                "eval_batch_size": 16,
                "max_train_examples": 50,
                "max_eval_examples": 40,
            }
        }
    )
    dm = NerDataModule(cfg, tokenizer)
    dm.setup("fit")
    assert dm.config_updates() == {"data": {"tag_names": dm.tag_names}}
    assert len(dm.tag_names) == 13 and dm.tag_names[0] == "O"
    assert len(dm.examples["train"]) == 50 and len(dm.examples["validation"]) == 40
    assert len(dm.splits["validation"]) >= 40  # some sentences need two windows at 24 tokens
    assert dm.has_split("train") and not dm.has_split("test")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape == batch["word_index"].shape
    assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].shape[1] <= 24
    pad = batch["attention_mask"] == 0
    assert (batch["labels"][pad] == IGNORE_INDEX).all() and (batch["word_index"][pad] == -1).all()
    assert (batch["input_ids"][pad] == tokenizer.pad_token_id).all()
    # Dynamic padding: the batch is as long as its longest row, not max_seq_length.
    assert batch["attention_mask"].sum(1).max() == batch["input_ids"].shape[1]
    with pytest.raises(NerDataError, match="no test data"):
        dm.test_dataloader()
    # The eval loader covers every word of every validation sentence once.
    ex, words, vals = [], [], []
    for b in dm.val_dataloader():
        sel = b["word_index"] >= 0
        ex.append(b["example_index"].unsqueeze(1).expand_as(sel)[sel].numpy())
        words.append(b["word_index"][sel].numpy())
        vals.append(b["labels"][sel].numpy())
    stitched = stitch_words(np.concatenate(ex), np.concatenate(words), np.concatenate(vals), [len(t) for t in dm.examples["validation"].tokens])
    gold = encode_tags(dm.examples["validation"], dm.tag_names)
    assert all(a.tolist() == b.tolist() for a, b in zip(stitched, gold))


def test_given_tag_names_take_precedence(tokenizer, tmp_path: Path) -> None:
    train = _write(tmp_path, "train.conll", "Bob\tB-PER\n")
    names = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    cfg = OmegaConf.create({"data": {"train_file": str(train), "tag_names": names}})
    dm = NerDataModule(cfg, tokenizer)
    dm.setup("fit")
    assert dm.tag_names == names
    assert dm.splits["train"][0]["labels"][1] == 2
