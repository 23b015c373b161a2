"""sesame-score: JSON output equal to the metric functions, and clear failures."""

from __future__ import annotations

import json
import sys

import pytest

from sesame.tasks.cli.score import main
from sesame.tasks.qa.metrics import gold_from_dataset, squad_v1, squad_v2
from tests import preloaded_commands as preloaded


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_v1_scores(capsys, write_json, real_dev_v1):
    gold = gold_from_dataset(real_dev_v1)
    preds = {q: (a[0] if i % 3 else "wrong") for i, (q, a) in enumerate(gold.items())}
    code, out, _ = run(capsys, "squad_v1", write_json(preds, "p.json"), write_json(real_dev_v1, "d.json"))
    assert code == 0
    result = json.loads(out)
    assert result == pytest.approx(squad_v1(gold, preds)) and set(result) == {"exact_match", "f1"}
    assert 50 < result["exact_match"] < 80


def test_v2_scores_with_null_odds(capsys, write_json, real_dev_v2):
    gold = gold_from_dataset(real_dev_v2)
    preds = {q: (a[0] if a else "") if i % 4 else "x" for i, (q, a) in enumerate(gold.items())}
    odds = {q: float(i % 5) - 2 for i, q in enumerate(gold)}
    args = ["squad_v2", write_json(preds, "p.json"), write_json(real_dev_v2, "d.json"),
            "--na-prob-file", write_json(odds, "odds.json"), "--na-prob-thresh", "1.5"]
    code, out, _ = run(capsys, *args)
    result = json.loads(out)
    assert code == 0 and result == pytest.approx(squad_v2(gold, preds, odds, 1.5))
    for key in ("HasAns_exact", "NoAns_f1", "best_f1", "best_f1_thresh", "best_exact_thresh"):
        assert key in result


def _latin1(path):
    """A gold file saved as Latin-1 with a non-ASCII title: not UTF-8."""
    path.write_bytes('{"version": "1.1", "data": [{"title": "Caf\u00e9", "paragraphs": []}]}'.encode("latin-1"))
    return path


def _answer_text(dataset, value):
    data = json.loads(json.dumps(dataset))
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] = value
    return data


def test_missing_predictions_score_zero_at_every_threshold(capsys, write_json):
    gold = {"data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "a", "question": "?", "answers": [{"text": "France", "answer_start": 12}]},
        {"id": "n1", "question": "?", "answers": [], "is_impossible": True},
        {"id": "n2", "question": "?", "answers": [], "is_impossible": True}]}]}]}
    preds, odds = {"a": "France"}, {"a": 0.1}  # the two unanswerable questions have no prediction
    code, out, err = run(capsys, "squad_v2", write_json(preds, "p.json"), write_json(gold, "d.json"),
                         "--na-prob-file", write_json(odds, "n.json"))
    result = json.loads(out)
    # one of three right, whatever the threshold: a missing answer is never counted as "no answer"
    assert result["exact_match"] == result["best_exact"] == pytest.approx(100 / 3)
    assert result["best_f1"] == pytest.approx(100 / 3) and result["NoAns_exact"] == 0.0


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda w, d: ["squad_v1", "/missing/p.json", w(d, "d.json")], "predictions file not found"),
        (lambda w, d: ["squad_v1", w("{oops", "p.json"), w(d, "d.json")], "not valid JSON"),
        (lambda w, d: ["squad_v1", w(["a"], "p.json"), w(d, "d.json")], "must hold a JSON object"),
        (lambda w, d: ["squad_v1", w({"q": 3}, "p.json"), w(d, "d.json")], "wrong type"),
        (lambda w, d: ["squad_v1", w({}, "p.json"), w({"x": 1}, "d.json")], "not SQuAD format"),
        (lambda w, d: ["squad_v1", w({}, "p.json"), w(d, "d.json"), "--na-prob-file", w({}, "n.json")], "only applies to squad_v2"),
        (lambda w, d: ["squad_v1", w({}, "p.json"), w(d, "d.json").parent], "is a directory"),
        (lambda w, d: ["squad_v1", w({}, "p.json"), _latin1(w(d, "d.json"))], "not UTF-8"),
        (lambda w, d: ["squad_v1", w({}, "p.json"), w(_answer_text(d, 7), "d.json")], "not a string"),
    ],
)
def test_bad_input_exits_2_with_message(capsys, write_json, real_dev_v1, setup, message):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in setup(write_json, real_dev_v1)])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def _gold(answers_of_b: dict) -> dict:
    """A two-question gold file: "a" answered, "b" with the fields ``answers_of_b``."""
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Paris is in France.", "qas": [
        {"id": "a", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]},
        {"id": "b", "question": "What is Paris?", **answers_of_b}]}]}]}


@pytest.mark.parametrize("version, fields, shown", [
    ("squad_v1", {"answers": None}, "'answers' is null"),
    ("squad_v1", {"answers": []}, "'answers' is []"),
    ("squad_v1", {}, "'answers' is missing"),
    ("squad_v1", {"answers": [], "is_impossible": True}, "'answers' is []"),  # v1 has no unanswerable questions
    ("squad_v2", {"answers": None}, "'answers' is null"),
    ("squad_v2", {}, "'answers' is missing"),
])
def test_a_question_without_gold_answers_is_named(capsys, write_json, version, fields, shown):
    with pytest.raises(SystemExit) as info:
        main([version, str(write_json({"a": "France", "b": "a city"}, "p.json")), str(gold := write_json(_gold(fields), "d.json"))])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"dataset file {gold}: question 'b' has no gold answers: {shown}" in err and "Fix:" in err


@pytest.mark.parametrize("fields", [{"answers": [], "is_impossible": True}, {"answers": None, "is_impossible": True},
                                    {"is_impossible": True}, {"answers": []}])
def test_unanswerable_v2_questions_score(capsys, write_json, fields):
    code, out, _ = run(capsys, "squad_v2", write_json({"a": "France", "b": ""}, "p.json"), write_json(_gold(fields), "d.json"))
    result = json.loads(out)
    assert code == 0 and result["exact_match"] == 100.0 and result["NoAns_total"] == 1


def test_help_and_entry_point():
    out = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.score", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for text in ("squad_v1", "--na-prob-file", "--na-prob-thresh", "PREDICTIONS.json", "best_f1_thresh"):
        assert text in out.stdout
    bad = preloaded.run([sys.executable, "-m", "sesame.tasks.cli.score", "squad_v9", "p", "d"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
