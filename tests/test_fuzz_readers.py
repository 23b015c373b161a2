"""Fuzzed data files: whatever bytes a user's file holds, every reader either reads it or raises a
``UserError`` (the one-line message of exit 2), never an internal error. Each case starts from a real
file of the task's format (a few lines of a shipped slice) and mutates it: characters deleted, replaced
or inserted (control characters, quotes, tabs, commas, braces, invalid UTF-8, other scripts), lines
duplicated, dropped or cut short. Derandomised, so CI sees the same cases every run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e '.[test]'")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from sesame.tasks.core.errors import UserError  # noqa: E402
from sesame.tasks.core.paths import shipped_path  # noqa: E402
from sesame.tasks.glue.readers import read_glue_tsv, read_table  # noqa: E402
from sesame.tasks.glue.specs import glue_spec  # noqa: E402
from sesame.tasks.multiple_choice.readers import read_choices  # noqa: E402
from sesame.tasks.ner.readers import read_examples  # noqa: E402
from sesame.tasks.qa.readers import read_squad  # noqa: E402

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: What gets inserted: the characters formats are made of, controls, other scripts, a broken UTF-8 byte.
PIECES = ["\t", ",", "\n", "\r", "\"", "'", "{", "}", "[", "]", ":", "\\", "\x00", "\x0b", "\u200b", "\u00e9",
          "\u4e2d", "\U0001f600", "-DOCSTART-", "B-", "I-", "O", "null", "-1", "1e999", "NaN", "\udcff"]


def _head(relative: str, lines: int) -> str:
    return "".join(Path(shipped_path(relative)).read_text(encoding="utf-8").splitlines(keepends=True)[:lines])


def _squad_head() -> str:
    data = json.loads(Path(shipped_path("squad_v1/dev.slice.json")).read_text(encoding="utf-8"))
    article = data["data"][0]
    small = {"version": data.get("version", "1.1"), "data": [{"title": article["title"], "paragraphs": article["paragraphs"][:1]}]}
    return json.dumps(small, ensure_ascii=False, indent=0)


@st.composite
def mutated(draw: st.DrawFn, text: str) -> bytes:
    """``text`` after 1-6 random edits, as bytes (sometimes not valid UTF-8)."""
    chars = list(text)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["delete", "replace", "insert", "duplicate_line", "drop_line", "cut"]))
        at = draw(st.integers(0, max(len(chars) - 1, 0)))
        piece = draw(st.sampled_from(PIECES) | st.text(min_size=1, max_size=3))
        if kind == "delete" and chars:
            del chars[at: at + draw(st.integers(1, 8))]
        elif kind == "replace" and chars:
            chars[at] = piece
        elif kind == "insert":
            chars.insert(at, piece)
        elif kind in ("duplicate_line", "drop_line"):
            lines = "".join(chars).splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines = lines[:i + 1] + lines[i:] if kind == "duplicate_line" else lines[:i] + lines[i + 1:]
                chars = list("".join(lines))
        elif kind == "cut":
            chars = chars[:at]
    return "".join(chars).encode("utf-8", errors="surrogateescape")


def _reads_or_refuses(read: Callable[[Path], object], path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        read(path)
    except UserError as err:
        assert str(err).strip() and "\n" not in str(err).strip().splitlines()[0]


SST2 = _head("glue/sst2/train.2k.tsv", 8)
WNUT = _head("wnut17/train.1k.conll", 40)
SWAG = _head("multiple_choice/train.csv", 6)
SQUAD = _squad_head()


@FUZZ
@given(data=mutated(SST2))
def test_glue_tsv(tmp_path_factory, data):
    _reads_or_refuses(lambda p: read_glue_tsv(p, glue_spec("sst2")), tmp_path_factory.mktemp("f") / "train.tsv", data)


@FUZZ
@given(data=mutated(SST2.replace("\t", ",")), suffix=st.sampled_from([".csv", ".tsv"]))
def test_text_classification_table(tmp_path_factory, data, suffix):
    _reads_or_refuses(lambda p: read_table(p, "sentence", None, "label"), tmp_path_factory.mktemp("f") / f"train{suffix}", data)


@FUZZ
@given(data=mutated("".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in
                            (line.rsplit("\t", 1) for line in SST2.splitlines()[1:]))))
def test_text_classification_json_lines(tmp_path_factory, data):
    _reads_or_refuses(lambda p: read_table(p, "text", None, "label"), tmp_path_factory.mktemp("f") / "train.jsonl", data)


@FUZZ
@given(data=mutated(WNUT))
def test_ner_conll(tmp_path_factory, data):
    _reads_or_refuses(lambda p: read_examples(p), tmp_path_factory.mktemp("f") / "train.conll", data)


@FUZZ
@given(data=mutated("".join(json.dumps({"tokens": s.split(), "tags": ["O"] * len(s.split())}) + "\n"
                            for s in ("Marie Curie lived in Paris", "hello world", "a b c"))))
def test_ner_json_lines(tmp_path_factory, data):
    _reads_or_refuses(lambda p: read_examples(p), tmp_path_factory.mktemp("f") / "train.jsonl", data)


@FUZZ
@given(data=mutated(SQUAD), impossible=st.booleans())
def test_squad_json(tmp_path_factory, data, impossible):
    _reads_or_refuses(lambda p: read_squad(p, allow_impossible=impossible), tmp_path_factory.mktemp("f") / "dev.json", data)


@FUZZ
@given(data=mutated(SWAG))
def test_multiple_choice_swag_csv(tmp_path_factory, data):
    _reads_or_refuses(read_choices, tmp_path_factory.mktemp("f") / "train.csv", data)


@FUZZ
@given(data=mutated(json.dumps({"context": "She opens the box.", "question": "Inside,", "endings": ["a cat.", "the sky."], "label": 0}) + "\n"))
def test_multiple_choice_json_lines(tmp_path_factory, data):
    _reads_or_refuses(read_choices, tmp_path_factory.mktemp("f") / "train.jsonl", data)
