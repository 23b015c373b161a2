"""MultipleChoicePredictor: the choices evaluation wrote, from raw questions; bad inputs named."""

from __future__ import annotations

import json

import pytest

from sesame.tasks.core.errors import DataError
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.inference.predictor import Predictor
from sesame.tasks.multiple_choice.readers import read_choices


def test_predictions_equal_the_evaluation_file(choice_run):
    questions = read_choices(shipped_path("multiple_choice/dev.csv"))
    inputs = [{"id": i, "context": q.context, "question": q.question, "endings": list(q.endings)} for i, q in enumerate(questions)]
    outputs = Predictor.from_run(choice_run, batch_size=5)(inputs)
    written = {r["index"]: r for r in map(json.loads, (choice_run / "val_predictions.jsonl").read_text().splitlines())}
    for o in outputs:
        row = written[o["id"]]
        assert o["choice"] == row["prediction"] and o["ending"] == questions[o["id"]].endings[o["choice"]]
        assert o["probabilities"] == pytest.approx(row["probabilities"], abs=1e-5)


def test_questions_with_different_numbers_of_endings_in_one_batch(choice_run):
    outputs = Predictor.from_run(choice_run)([
        {"context": "He turns the key.", "endings": ["It starts.", "It sings."]},
        {"context": "She opens the box.", "question": "Inside, she finds", "endings": ["a cat.", "the sky.", "a hat."]},
    ])
    assert [len(o["probabilities"]) for o in outputs] == [2, 3]
    assert all(sum(o["probabilities"]) == pytest.approx(1.0) for o in outputs)


@pytest.mark.parametrize("record, message", [
    ({"context": "c", "endings": ["a"]}, r"input record 1: 'endings' must be a list of at least 2 strings"),
    ({"endings": ["a", "b"]}, r"input record 1: no 'context' field"),
    ({"context": "c", "endings": ["a", ""]}, r"input record 1: 'endings\[1\]' is empty"),
])
def test_a_bad_input_is_named(choice_run, record, message):
    with pytest.raises(DataError, match=message):
        Predictor.from_run(choice_run)([record])
