"""MultipleChoiceModule.example_scores: accuracy recomputed question by question from val_predictions.jsonl
and the dev labels (what sesame-report's paired bootstrap resamples)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.multiple_choice.module import MultipleChoiceModule


def scores_of(run, metric="val_accuracy"):
    settings = RunSettings.of_trained(yaml.safe_load((run / "config.yaml").read_text()))
    return MultipleChoiceModule.example_scores(run, settings, metric)


def dev_labels(run) -> list[int]:
    """The label column of the run's SWAG-format dev CSV, read without sesame."""
    import csv

    path = yaml.safe_load((run / "config.yaml").read_text())["data"]["validation_file"]
    with open(path, newline="", encoding="utf-8") as handle:
        return [int(row["label"]) for row in csv.DictReader(handle)]


def test_all_questions_give_the_runs_accuracy_and_a_resample_those_questions(choice_run):
    keys, score = scores_of(choice_run)
    assert score(np.arange(len(keys))) == json.loads((choice_run / "metrics.json").read_text())["val_accuracy"]
    chosen = {row["index"]: row["prediction"] for row in map(json.loads, (choice_run / "val_predictions.jsonl").open())}
    labels = dev_labels(choice_run)
    at = np.random.default_rng(3).integers(0, len(keys), 50)
    assert score(at) == pytest.approx(np.mean([chosen[int(keys[i])] == labels[int(keys[i])] for i in at]))


def test_what_cannot_be_rescored_is_a_user_error(choice_run, tmp_path):
    with pytest.raises(ConfigError, match="val_loss cannot be recomputed .* val_accuracy can"):
        scores_of(choice_run, "val_loss")
    run = tmp_path / "run"
    shutil.copytree(choice_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    dev = tmp_path / "dev.csv"
    dev.write_text("\n".join(open(config["data"]["validation_file"]).read().splitlines()[:4]) + "\n")  # 3 questions
    config["data"]["validation_file"] = str(dev)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(DataError, match=r"question 15 but .*dev.csv has 3: it is not the file the run validated on"):
        scores_of(run)
