"""Multiple-choice readers: SWAG's CSV and JSON lines, and bad lines named by file, line, field and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sesame.tasks.core.errors import DataError
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.multiple_choice.readers import ChoiceQuestion, read_choices

HEADER = "video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"


def test_the_shipped_swag_sample_reads_with_its_labels():
    questions = read_choices(shipped_path("multiple_choice/train.csv"))
    assert len(questions) == 32 and all(len(q.endings) == 4 and q.label in range(4) for q in questions)
    first = questions[0]
    assert first.context == "A woman pours batter into a hot pan." and first.question == "She"
    assert first.endings[first.label] == "flips the pancake once bubbles form."


def test_json_lines_allow_any_number_of_endings_and_an_unlabelled_test_file(tmp_path: Path):
    path = tmp_path / "arc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"context": "Which gas do plants take in?", "endings": ["oxygen", "carbon dioxide", "helium"], "label": 1},
        {"context": "The man broke his toe.", "question": "What was the cause?", "endings": ["He dropped a hammer on his foot.", "He got a hole in his sock."], "label": 0},
    ]) + "\n\n", encoding="utf-8")
    assert read_choices(path) == [
        ChoiceQuestion("Which gas do plants take in?", "", ("oxygen", "carbon dioxide", "helium"), 1),
        ChoiceQuestion("The man broke his toe.", "What was the cause?", ("He dropped a hammer on his foot.", "He got a hole in his sock."), 0),
    ]
    path.write_text(json.dumps({"context": "c", "endings": ["a", "b"]}) + "\n", encoding="utf-8")
    assert read_choices(path, key="test_file", require_labels=False)[0].label is None
    with pytest.raises(DataError, match=r"question 1 has no label, which data.train_file needs"):
        read_choices(path)


@pytest.mark.parametrize("line, message", [
    ("a,0,s,ctx,She,gold,one,two,three,four,4\n", r":2: label 4 but the question has 4 endings \(0-3\)"),
    ("a,0,s,ctx,She,gold,one,two,three,four,x\n", r":2: label 'x' is not an ending's index"),
    ("a,0,s,ctx,She,gold,one,,three,four,1\n", r":2: 'ending1' is empty"),
    ("a,0,s,,She,gold,one,two,three,four,1\n", r":2: 'sent1' is empty"),
    ("a,0,s,ctx,She,gold,one,two,three\n", r":2: 9 comma-separated fields, the header has 11"),
])
def test_a_bad_swag_line_names_the_file_line_and_field(tmp_path: Path, line: str, message: str):
    path = tmp_path / "train.csv"
    path.write_text(HEADER + line, encoding="utf-8")
    with pytest.raises(DataError, match=message) as err:
        read_choices(path)
    assert str(path) in str(err.value) and "Fix" in str(err.value)


def test_a_csv_without_swag_columns_is_refused_with_the_layout(tmp_path: Path):
    path = tmp_path / "train.csv"
    path.write_text("text,label\nhello,1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"lacks sent1, sent2: a SWAG CSV has sent1"):
        read_choices(path)


@pytest.mark.parametrize("record, message", [
    ({"context": "c", "endings": ["only one"], "label": 0}, r"'endings' must be a list of at least 2 strings"),
    ({"context": "c", "endings": "a b", "label": 0}, r"'endings' must be a list of at least 2 strings, got str"),
    ({"endings": ["a", "b"], "label": 0}, r"no 'context' field"),
    ({"context": "c", "endings": ["a", 3], "label": 0}, r"'endings\[1\]' must be a string, got int"),
    ({"context": "c", "endings": ["a", "b"], "label": True}, r"label True is not an ending's index"),
    ([1, 2], r"expected a JSON object, got list"),
])
def test_a_bad_json_line_names_the_file_line_and_field(tmp_path: Path, record, message: str):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"context": "fine", "endings": ["a", "b"], "label": 0}) + "\n" + json.dumps(record) + "\n",
                    encoding="utf-8")
    with pytest.raises(DataError, match=f":2: {message}"):
        read_choices(path)
