"""Multiple choice trained and evaluated: the metrics are the prediction file's, evaluation of the saved
model gives them again, the network's scores do not depend on the batch's padding (tokens or endings),
and the frozen feature cache and distillation work on groups of sequences."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sesame.tasks.core.paths import shipped_path
from sesame.tasks.multiple_choice.data import choice_collator, encode_questions
from sesame.tasks.multiple_choice.readers import ChoiceQuestion, read_choices
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import load_trained
from tests.tasks.multiple_choice.conftest import RUN


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
        assert row["prediction"] == int(np.argmax(row["probabilities"]))
    assert len({tuple(r["probabilities"]) for r in written.values()}) > 1  # trained, not uniform


def test_evaluating_the_saved_model_gives_the_training_metrics(choice_run, make_cfg, tmp_path):
    again = evaluate(make_cfg(f"++model={choice_run}", "task=multiple_choice"), tmp_path)
    trained = json.loads((choice_run / "metrics.json").read_text())
    assert again["val_accuracy"] == pytest.approx(trained["val_accuracy"])
    assert again["val_loss"] == pytest.approx(trained["val_loss"], rel=1e-5)
    assert _predictions(tmp_path / "val_predictions.jsonl") == _predictions(choice_run / "val_predictions.jsonl")


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


def test_a_frozen_run_with_the_feature_cache_equals_one_without(make_cfg, tmp_path):
    frozen = [*RUN, "finetune=frozen", "fusion=scalar_mix", f"cache.dir={tmp_path / 'cache'}"]
    plain = train(make_cfg(*frozen), tmp_path / "plain")
    cached = train(make_cfg(*frozen, "cache.enabled=true"), tmp_path / "cached")
    assert cached == pytest.approx(plain, rel=1e-5)
    assert any((tmp_path / "cache").iterdir())


def test_a_student_distils_from_a_multiple_choice_teacher(choice_run, make_cfg, tmp_path):
    metrics = train(make_cfg(*RUN, f"distill.teacher={choice_run}", "distill.alpha=0.5", "distill.cache=true",
                             f"distill.cache_dir={tmp_path / 'logits'}"), tmp_path / "student")
    assert 0.0 <= metrics["val_accuracy"] <= 1.0
    logged = (tmp_path / "student" / "logs" / "metrics.csv").read_text()
    assert "train_distill_kl" in logged
    assert list((tmp_path / "logits").glob("*.npz"))  # the teacher's [B, G] logits kept per question
