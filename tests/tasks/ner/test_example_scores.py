"""NerModule.example_scores: entity scores recomputed sentence by sentence from val_predictions.conll (what
sesame-report's paired bootstrap resamples): on all sentences they are metrics.json's, on a resample
(sentences repeated or left out) they are entity_scores' of those sentences."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.ner.metrics import entity_scores
from sesame.tasks.ner.module import NerModule
from sesame.tasks.runs.runner import train
from tests.conftest import read_conll_predictions

#: A few steps at a learning rate that makes the tiny encoder tag some entities (right and wrong).
RUN = ["task=ner", "data.max_eval_examples=40", "trainer.max_steps=30", "finetune.head_lr=0.05"]


def scores_of(run, metric):
    settings = RunSettings.of_trained(yaml.safe_load((run / "config.yaml").read_text()))
    return NerModule.example_scores(run, settings, metric)


@pytest.fixture(scope="module", params=["conlleval", "strict"])
def ner_run(make_cfg, tmp_path_factory, request):
    folder = tmp_path_factory.mktemp(f"ner_{request.param}")
    train(RunSettings.from_config(make_cfg(*RUN, f"task.entity_metric={request.param}")), folder)
    return folder, request.param


def test_all_sentences_give_the_runs_own_scores(ner_run):
    run, _ = ner_run
    recorded = json.loads((run / "metrics.json").read_text())
    assert recorded["val_f1"] > 0  # something to count
    for metric in ("val_f1", "val_precision", "val_recall", "val_person_f1", "val_location_recall"):
        keys, score = scores_of(run, metric)
        assert score(np.arange(len(keys))) == pytest.approx(recorded[metric], abs=1e-12), metric
    assert len(keys) == 40


def test_a_resample_scores_as_entity_scores_of_those_sentences(ner_run):
    run, mode = ner_run
    _, gold, predicted = read_conll_predictions(run / "val_predictions.conll")
    at = np.random.default_rng(1).integers(0, 40, 40)
    expected = entity_scores([gold[i] for i in at], [predicted[i] for i in at], mode=mode)
    assert scores_of(run, "val_f1")[1](at) == pytest.approx(expected.overall.f1, abs=1e-12)
    assert scores_of(run, "val_person_precision")[1](at) == pytest.approx(expected.per_type["person"].precision, abs=1e-12)


def test_what_cannot_be_rescored_is_a_user_error(ner_run, tmp_path):
    run, _ = ner_run
    with pytest.raises(ConfigError, match=r"val_loss cannot be recomputed sentence by sentence .* val_f1, val_precision"):
        scores_of(run, "val_loss")
    with pytest.raises(ConfigError, match=r"for the types \[.*'person'"):
        scores_of(run, "val_weapon_f1")
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "val_predictions.conll").write_text("EU B-ORG\n")
    with pytest.raises(DataError, match=r"val_predictions.conll:1: 2 space-separated fields, expected 3"):
        scores_of(copy, "val_f1")
    (copy / "val_predictions.conll").unlink()
    with pytest.raises(MissingFileError, match="no such prediction file"):
        scores_of(copy, "val_f1")
