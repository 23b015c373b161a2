"""SQuAD reading and validation (tasks/qa/readers.py), on tmp files and real dev questions."""

from __future__ import annotations

import logging

import pytest

from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.qa.readers import read_squad

from .conftest import CTX, qa, squad_obj


def good_v1():
    return squad_obj((CTX, [qa("q1", "When did she win physics?", CTX, "1903"), qa("q2", "Who?", CTX, "Marie Curie", "Curie")]))


def test_reads_v1_rows(write_json):
    ds, report = read_squad(write_json(good_v1()), allow_impossible=False)
    assert ds.column_names == ["id", "title", "context", "question", "answers"]
    assert ds["id"] == ["q1", "q2"] and report.kept == 2 and report.skipped == 0
    assert ds[1]["answers"] == {"text": ["Marie Curie", "Curie"], "answer_start": [0, 6]}


def test_reads_real_v2_with_unanswerable(write_json, real_dev_v2):
    ds, _ = read_squad(write_json(real_dev_v2), allow_impossible=True)
    n_questions = sum(len(p["qas"]) for p in real_dev_v2["data"][0]["paragraphs"])
    assert len(ds) == n_questions
    impossible = [not a["text"] for a in ds["answers"]]
    assert 0 < sum(impossible) < len(ds)
    with pytest.raises(DataError, match="no answers; SQuAD v1.1 needs at least one"):
        read_squad(write_json(real_dev_v2), allow_impossible=False)


def bad_cases():
    wrong_start = squad_obj((CTX, [{"id": "q1", "question": "When?", "answers": [{"text": "1903", "answer_start": 3}]}]))
    str_start = squad_obj((CTX, [{"id": "q1", "question": "When?", "answers": [{"text": "1903", "answer_start": "46"}]},
                                 qa("q2", "Who?", CTX, "Curie")]))
    return {
        "malformed": ('{"data": [ {"title": "x", ', r"not valid JSON: .* line 1, column"),
        "no_data": ({"version": "1.1"}, r"missing top-level field 'data'"),
        "wrong_start": (wrong_start, r"'q1'.*answer_start=3 points at .*Fix: set answer_start to 46"),
        "absent_text": (squad_obj((CTX, [qa("q1", "?", CTX, "1903")]))
                        | {"data": [{"title": "T", "paragraphs": [{"context": CTX, "qas": [
                            {"id": "q1", "question": "?", "answers": [{"text": "1904", "answer_start": 46}]}]}]}]},
                        r"does not occur in the context"),
        "string_start": (str_start, r"'q1'.*answer_start must be an integer, got '46'"),
        "empty_context": (squad_obj(("  ", [qa("q1", "?", "x", "x")])), r"empty context"),
        "missing_context": ({"data": [{"title": "T", "paragraphs": [{"qas": [qa("q1", "?", "x", "x")]}]}]},
                            r"missing field 'context'"),
        "missing_question": (squad_obj((CTX, [{"id": "q1", "answers": [{"text": "1903", "answer_start": 46}]}])),
                             r"'q1'.*missing or empty field 'question'"),
        "missing_answers": (squad_obj((CTX, [{"id": "q1", "question": "?"}])), r"'q1'.*missing field 'answers'"),
        "missing_id": (squad_obj((CTX, [{"question": "?", "answers": []}])), r"missing field 'id'"),
        "duplicate_id": (squad_obj((CTX, [qa("q1", "?", CTX, "1903"), qa("q1", "?", CTX, "1911")])), r"'q1'.*duplicate id"),
        "impossible_with_answers": (squad_obj((CTX, [qa("q1", "?", CTX, "1903", impossible=True)])),
                                    r"is_impossible is true but 'answers' is not empty"),
    }


@pytest.mark.parametrize("case", sorted(bad_cases()))
def test_bad_input_is_a_clear_error(write_json, case):
    obj, pattern = bad_cases()[case]
    path = write_json(obj, f"{case}.json")
    with pytest.raises(DataError, match=pattern) as info:
        read_squad(path, allow_impossible=True)
    assert str(path) in str(info.value)


def test_missing_file():
    with pytest.raises(MissingFileError, match="no such file"):
        read_squad("/nonexistent/dev.json", allow_impossible=False)


def test_skip_mode_counts_and_logs(write_json, caplog):
    obj = squad_obj(
        (CTX, [qa("ok1", "?", CTX, "1903"),
               {"id": "bad1", "question": "?", "answers": [{"text": "1903", "answer_start": 0}]},
               {"id": "bad2", "question": "", "answers": [{"text": "1903", "answer_start": 46}]}]),
        ("", [qa("bad3", "?", "x", "x"), qa("bad4", "?", "x", "x")]),
    )
    with caplog.at_level(logging.WARNING):
        ds, report = read_squad(write_json(obj), allow_impossible=False, on_bad_example="skip")
    assert ds["id"] == ["ok1"]
    assert (report.kept, report.skipped, len(report.problems)) == (1, 4, 3)
    assert "skipped 4 question(s)" in caplog.text and "bad1" in caplog.text
    with pytest.raises(ConfigError, match="on_bad_example"):
        read_squad(write_json(obj), allow_impossible=False, on_bad_example="ignore")
