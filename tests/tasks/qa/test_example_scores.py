"""SquadModule.example_scores: exact match and F1 recomputed question by question from predictions.json
(v2: and null_odds.json) against the dev file (what sesame-report's paired bootstrap resamples): on all
questions they are metrics.json's, on a resample the official scores of those questions."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.qa.metrics import compute, gold_from_dataset
from sesame.tasks.qa.module import SquadModule
from sesame.tasks.runs.runner import train


def scores_of(run, metric):
    settings = RunSettings.of_trained(yaml.safe_load((run / "config.yaml").read_text()))
    return SquadModule.example_scores(run, settings, metric)


@pytest.fixture(scope="module", params=["squad_v1", "squad_v2"])
def qa_run(make_cfg, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp(request.param)
    train(RunSettings.from_config(make_cfg(f"task={request.param}", "data.max_eval_examples=30")), folder)
    return folder, request.param


def test_all_questions_give_the_runs_own_scores(qa_run):
    run, _ = qa_run
    recorded = json.loads((run / "metrics.json").read_text())
    for metric in ("val_exact_match", "val_f1"):
        keys, score = scores_of(run, metric)
        assert score(np.arange(len(keys))) == pytest.approx(recorded[metric], abs=1e-9), metric
    assert keys == list(json.loads((run / "predictions.json").read_text()))


def test_a_resample_is_scored_as_the_official_script_scores_those_questions(qa_run):
    run, version = qa_run
    config = yaml.safe_load((run / "config.yaml").read_text())
    gold = gold_from_dataset(json.loads(open(config["data"]["validation_file"]).read()))
    predictions = json.loads((run / "predictions.json").read_text())
    odds = json.loads((run / "null_odds.json").read_text()) if version == "squad_v2" else None
    keys, score = scores_of(run, "val_f1")
    at = np.random.default_rng(2).integers(0, len(keys), len(keys))
    # the resample as its own dev set: a question drawn twice is two questions
    ids = [f"{k}#{n}" for n, k in enumerate(keys[i] for i in at)]
    official = compute(version, {q: gold[q.split("#")[0]] for q in ids}, {q: predictions[q.split("#")[0]] for q in ids},
                       {q: odds[q.split("#")[0]] for q in ids} if odds else None,
                       config["head"]["null_score_diff_threshold"])
    assert score(at) == pytest.approx(official["f1"], abs=1e-9)


def test_what_cannot_be_rescored_is_a_user_error(qa_run, tmp_path):
    run, version = qa_run
    with pytest.raises(ConfigError, match="val_ece cannot be recomputed question by question .* val_exact_match, val_f1"):
        scores_of(run, "val_ece")
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    predictions = json.loads((copy / "predictions.json").read_text())
    (copy / "predictions.json").write_text(json.dumps({**predictions, "not-a-question": "x"}))
    with pytest.raises(DataError, match=r"1 question\(s\) \(not-a-question, ...\) are not in .*: it is not the file"):
        scores_of(copy, "val_f1")
    (copy / ("null_odds.json" if version == "squad_v2" else "predictions.json")).unlink()
    with pytest.raises(MissingFileError, match="no such file"):
        scores_of(copy, "val_f1")
