"""Multiple choice trained and evaluated: the metrics are the prediction file's and the network's scores do
not depend on the batch's padding (tokens or endings). Evaluation of the saved model, the frozen feature
cache and distillation are every task's checks (tests/conformance/)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sesame.tasks.core.paths import shipped_path
from sesame.tasks.multiple_choice.data import choice_collator, encode_questions
from sesame.tasks.multiple_choice.readers import ChoiceQuestion, read_choices
from sesame.tasks.saved.checkpoints import load_trained


def _predictions(path: Path) -> dict[int, dict]:
    return {r["index"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def test_the_logged_accuracy_is_the_prediction_files(choice_run):
    metrics = json.loads((choice_run / "metrics.json").read_text())
    written = _predictions(choice_run / "val_predictions.jsonl")
    gold = [q.label for q in read_choices(shipped_path("multiple_choice/dev.csv"))]
    assert sorted(written) == list(range(16)) and metrics["val_examples_scored"] == 16
    assert metrics["val_accuracy"] == pytest.approx(np.mean([written[i]["prediction"] == g for i, g in enumerate(gold)]))
    for row in written.values():
        assert len(row["probabilities"]) == 4 and sum(row["probabilities"]) == pytest.approx(1.0, abs=1e-5)
        # the most probable ending (the file rounds probabilities, so near-uniform ones can tie there)
        assert row["probabilities"][row["prediction"]] == max(row["probabilities"])
    assert len({tuple(r["probabilities"]) for r in written.values()}) > 1  # trained, not uniform


def test_scores_do_not_depend_on_padding_of_tokens_or_endings(choice_run):
    trained = load_trained(choice_run)
    module, tokenizer = trained.module.eval(), trained.tokenizer()
    short = ChoiceQuestion("He turns the key.", "", ("It starts.", "It sings."), None)
    long = ChoiceQuestion("A very long context sentence that goes on and on about nothing at all.", "Then",
                          ("one ending", "another much longer ending with many more words", "a third", "a fourth"), None)
    collate = choice_collator(tokenizer)
    alone = collate(encode_questions(tokenizer, [short], 64))
    padded = collate(encode_questions(tokenizer, [short, long], 64))
    assert padded["input_ids"].shape[1:] == (4, padded["input_ids"].shape[2]) and padded["input_ids"].shape[2] > alone["input_ids"].shape[2]
    with torch.no_grad():
        one, both = module(alone), module(padded)
    torch.testing.assert_close(both[0, :2], one[0], rtol=1e-5, atol=1e-5)
    assert (both[0, 2:] < -1e30).all() and both[0].softmax(-1)[2:].sum() == 0  # endings it does not have

