"""Reading NER files (tasks/ner/readers.py): CoNLL columns and separators, JSON lines, format
detection, the tag check, and errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.ner.readers import check_tag, read_conll, read_examples
from sesame.tasks.ner.tags import build_tag_set, is_iob1
from sesame.tasks.core.paths import shipped_path

WNUT_TRAIN_SLICE = Path(shipped_path("wnut17/train.1k.conll"))


def test_read_conll_wnut_slice() -> None:
    ex = read_conll(WNUT_TRAIN_SLICE)
    assert len(ex) == 1000  # data/SOURCES.md: the first 1,000 sentences
    assert ex.tokens[0][:3] == ["@paulwalk", "It", "'s"]
    assert all(len(w) == len(t) for w, t in zip(ex.tokens, ex.tags))
    assert not is_iob1(ex.tags)
    names = build_tag_set(ex.tags)
    assert names[0] == "O" and names[1:] == sorted(names[1:])
    assert {n[2:] for n in names[1:]} == {"corporation", "creative-work", "group", "location", "person", "product"}


def test_read_conll_columns_docstart_and_whitespace_separators(tmp_path: Path, write_file) -> None:
    text = (
        "-DOCSTART- -X- -X- O\n\n"
        "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\n \n"  # a whitespace-only line ends a sentence
        "Peter NNP I-NP I-PER\nBlackburn NNP I-NP I-PER\n\n\n"
        "-DOCSTART- -X- -X- O\n"
        "BRUSSELS NNP I-NP I-LOC\n"
    )
    ex = read_conll(write_file("a.conll", text))
    assert ex.tokens == [["EU", "rejects"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert ex.tags == [["I-ORG", "O"], ["I-PER", "I-PER"], ["I-LOC"]]
    assert ex.lines == [3, 6, 11]
    assert ex.where(1, 1) == f"{tmp_path / 'a.conll'}:7"
    chunk = read_conll(write_file("b.conll", text), tag_column=2)
    assert chunk.tags[0] == ["I-NP", "I-VP"]


def test_tab_separated_tokens_may_contain_spaces(write_file) -> None:
    ex = read_conll(write_file("t.conll", "New York\tB-LOC\nis\tO\n"))
    assert ex.tokens == [["New York", "is"]] and ex.tags == [["B-LOC", "O"]]


def test_read_jsonl_and_format_detection(write_file) -> None:
    rows = [{"tokens": ["Paris", "is", "nice"], "tags": ["B-LOC", "O", "O"]}, {"tokens": ["Bob"], "tags": ["B-PER"]}]
    path = write_file("x.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    ex = read_examples(path)
    assert ex.tokens == [r["tokens"] for r in rows] and ex.tags == [r["tags"] for r in rows]
    assert ex.lines == [1, 2]
    # auto detects JSON lines from the first character too, whatever the extension
    ex2 = read_examples(write_file("x.txt", path.read_text()))
    assert ex2.tokens == ex.tokens
    with pytest.raises(ConfigError, match=r"data.format='csv' is not one of auto, conll, jsonl"):
        read_examples(path, fmt="csv")


def test_check_tag() -> None:
    for tag in ("O", "B-X", "I-creative-work"):
        check_tag(tag, "here", "hint")
    with pytest.raises(DataError, match=r"here: tag 'X' is not BIO.*; hint"):
        check_tag("X", "here", "hint")
    with pytest.raises(ConfigError, match=r"data.tag_names: empty tag"):
        check_tag("", "data.tag_names", "hint", error=ConfigError)


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
def test_bad_conll_errors_name_file_and_line(text: str, kwargs: dict, match: str, write_file) -> None:
    path = write_file("bad.conll", text)
    with pytest.raises(DataError, match=match) as info:
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
def test_bad_jsonl_errors(lines: list[str], match: str, write_file) -> None:
    path = write_file("bad.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=match) as info:
        read_examples(path)
    assert str(path) in str(info.value)


def test_missing_or_empty_file_names_the_setting(tmp_path: Path, write_file) -> None:
    with pytest.raises(MissingFileError, match="no such file.*data.validation_file"):
        read_examples(tmp_path / "nope.conll", key="validation_file")
    with pytest.raises(DataError, match=r"empty.*data.test_file"):
        read_examples(write_file("empty.conll", ""), key="test_file")
