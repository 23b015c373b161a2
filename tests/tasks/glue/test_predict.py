"""ClassificationPredictor: the labels and regression scores evaluation wrote, from raw texts and pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sesame.tasks.core.errors import DataError
from sesame.tasks.inference.predictor import Predictor
from tests.tasks.inference.test_predictor import sst2_texts, trained_run


@pytest.fixture(scope="module")
def sst2_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("sst2", make_cfg, tmp_path_factory)


@pytest.fixture(scope="module")
def stsb_run(make_cfg, tmp_path_factory) -> Path:
    return trained_run("stsb", make_cfg, tmp_path_factory)


def _written(path: Path) -> dict[int, str]:
    """``{index: prediction}`` of a GLUE prediction file (``index<TAB>prediction``)."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return {int(index): prediction for index, prediction in rows}


def test_sst2_labels_equal_the_evaluation_file(sst2_run):
    written = _written(sst2_run / "val_SST-2.tsv")
    assert sorted(written) == list(range(40))
    outputs = Predictor.from_run(sst2_run)([{"id": i, "text": t} for i, t in enumerate(sst2_texts(40))])
    assert {o["id"]: o["label"] for o in outputs} == written
    for o in outputs:
        probs = o["probabilities"]
        assert list(probs) == ["0", "1"] and sum(probs.values()) == pytest.approx(1.0)
        assert o["label"] == max(probs, key=probs.get)
    assert len({round(o["probabilities"]["1"], 6) for o in outputs}) > 10  # each text its own probabilities


def test_stsb_pair_scores_equal_the_evaluation_file(stsb_run):
    rows = [line.split("\t") for line in (stsb_run.parent / "stsb.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    inputs = [{"id": int(r[0]), "text": r[7], "text_pair": r[8]} for r in rows]
    outputs = Predictor.from_run(stsb_run)(inputs)
    assert all(set(o) == {"id", "score"} for o in outputs)
    assert {o["id"]: f"{o['score']:.3f}" for o in outputs} == _written(stsb_run / "val_STS-B.tsv")
    assert len({o["score"] for o in outputs}) > 5
    # The pair is the model's second segment: dropping it changes the input, so it is required.
    with pytest.raises(DataError, match=r"record 1: no 'text_pair' field\. Fix: .*\"text_pair\""):
        Predictor.from_run(stsb_run)([{"text": "a man is running"}])
    with pytest.raises(DataError, match=r"record 1: 'text_pair' is empty or only white space\. Fix: .*\"text_pair\""):
        Predictor.from_run(stsb_run)([{"text": "a man is running", "text_pair": " "}])


def test_multi_label_sets_equal_the_evaluation_file(make_cfg, tmp_path_factory):
    run = trained_run("multilabel", make_cfg, tmp_path_factory)
    data = OmegaConf.load(run / "config.yaml").data
    texts = [line.split("\t")[0] for line in Path(data.validation_file).read_text(encoding="utf-8").splitlines()[1:]]
    outputs = Predictor.from_run(run)([{"text": t} for t in texts])
    written = _written(run / "val_predictions.tsv")
    assert {i: "|".join(o["labels"]) for i, o in enumerate(outputs)} == written
    assert len(set(written.values())) > 1
    thresholds = json.loads((run / "val_thresholds.json").read_text(encoding="utf-8"))
    for o in outputs:  # independent sigmoid probabilities, each label decided by its saved threshold
        assert list(o["probabilities"]) == list(thresholds)
        assert o["labels"] == [n for n, p in o["probabilities"].items() if p >= thresholds[n]]


def test_a_single_text_model_refuses_a_pair(sst2_run):
    with pytest.raises(DataError, match="trained on single texts.*'text_pair'"):
        Predictor.from_run(sst2_run)([{"text": "good", "text_pair": "bad"}])
