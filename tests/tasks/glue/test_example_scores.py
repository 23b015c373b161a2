"""SentenceClassificationModule.example_scores: a run's metric recomputed example by example from its
val_<TASK>.tsv and the gold labels (what sesame-report's paired bootstrap resamples): on all examples it
is metrics.json's value, on a resample it is scikit-learn's / scipy's on those rows."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.glue.module import SentenceClassificationModule
from sesame.tasks.runs.runner import train
from tests.conftest import SST2_DEV, tsv_labels

SST2_TRAIN = SST2_DEV.parent / "train.2k.tsv"
MULTILABEL = SST2_DEV.parents[3] / "tests" / "fixtures" / "multilabel"


def scores_of(run, metric):
    settings = RunSettings.of_trained(yaml.safe_load((run / "config.yaml").read_text()))
    return SentenceClassificationModule.example_scores(run, settings, metric)


def written(run, name):
    """``{index: prediction}`` of a run's prediction file, read without sesame."""
    rows = [line.split("\t") for line in (run / name).read_text().splitlines()[1:]]
    return {int(r[0]): r[1] if len(r) > 1 else "" for r in rows}


@pytest.fixture(scope="module")
def runs(make_cfg, tmp_path_factory):
    root = tmp_path_factory.mktemp("example_scores")
    stsb = root / "stsb.tsv"
    rows = [f"{i}\tg\tf\t2012\t{i}\tn\tn\ta man is {w}\ta man {w}\t{i % 5}.0"
            for i, w in enumerate(["running", "eating", "here", "away", "home", "up"] * 5)]
    stsb.write_text("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
                    + "\n".join(rows) + "\n")
    configs = {
        "sst2": ["data.max_eval_examples=100"],
        "table": ["task=text_classification", f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}",
                  "data.text_column=sentence", "data.label_column=label", "data.label_names=null",
                  "data.metrics=[f1,matthews_correlation,accuracy]", "data.max_eval_examples=100",
                  "finetune.head_lr=0.05"],
        "holdout": ["data.holdout_fraction=0.05"],
        "stsb": ["data=stsb", f"data.train_file={stsb}", f"data.validation_file={stsb}", "finetune=full",
                 "finetune.encoder_lr=0.01", "finetune.head_lr=0.05"],
        "multilabel": ["task=text_classification", f"data.train_file={MULTILABEL / 'train.tsv'}",
                       f"data.validation_file={MULTILABEL / 'dev.tsv'}", "data.label_column=labels",
                       "data.multi_label=true", "data.metrics=[f1_micro,f1_macro]", "finetune.head_lr=0.05"],
    }
    for name, overrides in configs.items():
        train(RunSettings.from_config(make_cfg(*overrides)), root / name)
    return root


@pytest.mark.parametrize("name, metrics", [
    ("sst2", ["val_accuracy"]), ("table", ["val_f1", "val_matthews_correlation", "val_accuracy"]),
    ("holdout", ["val_accuracy"]), ("multilabel", ["val_f1_micro", "val_f1_macro"]),
])
def test_all_examples_give_the_runs_own_metric(runs, name, metrics):
    recorded = json.loads((runs / name / "metrics.json").read_text())
    for metric in metrics:
        keys, score = scores_of(runs / name, metric)
        assert score(np.arange(len(keys))) == pytest.approx(recorded[metric], abs=1e-12), metric
    expected = {"sst2": 100, "table": 100, "holdout": 100, "multilabel": 60}[name]  # 5% of the 2,000 training rows
    assert len(keys) == expected


def test_a_resample_is_scored_as_scikit_learn_scores_those_rows(runs):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    gold = tsv_labels()
    predictions = written(runs / "table", "val_predictions.tsv")
    at = np.random.default_rng(0).integers(0, 100, 100)  # repeats: some examples twice, some not at all
    keys, _ = scores_of(runs / "table", "val_f1")
    rows = [int(keys[i]) for i in at]
    y_true, y_pred = [gold[i] for i in rows], [predictions[i] for i in rows]
    for metric, reference in (("val_f1", f1_score(y_true, y_pred, pos_label="1")),
                              ("val_matthews_correlation", matthews_corrcoef(y_true, y_pred)),
                              ("val_accuracy", accuracy_score(y_true, y_pred))):
        assert scores_of(runs / "table", metric)[1](at) == pytest.approx(reference, abs=1e-12), metric


def test_held_out_examples_are_scored_against_the_training_file(runs):
    keys, score = scores_of(runs / "holdout", "val_accuracy")
    train_labels = tsv_labels(SST2_TRAIN)
    predictions = written(runs / "holdout", "val_SST-2.tsv")
    assert max(int(k) for k in keys) > 872  # rows of the training file, not the dev file
    at = np.arange(0, len(keys), 2)
    assert score(at) == pytest.approx(np.mean([predictions[int(keys[i])] == train_labels[int(keys[i])] for i in at]))


def test_regression_is_scored_on_the_files_three_decimals(runs):
    from scipy import stats

    keys, score = scores_of(runs / "stsb", "val_pearson")
    predictions = written(runs / "stsb", "val_STS-B.tsv")
    gold = [float(i % 5) for i in range(30)]
    x = [float(predictions[int(k)]) for k in keys]
    assert score(np.arange(30)) == pytest.approx(stats.pearsonr(x, [gold[int(k)] for k in keys])[0], abs=1e-12)
    recorded = json.loads((runs / "stsb" / "metrics.json").read_text())["val_pearson"]
    assert score(np.arange(30)) == pytest.approx(recorded, abs=1e-3)  # rounding to 3 decimals moves it a little


def test_what_cannot_be_rescored_is_a_user_error(runs, tmp_path):
    with pytest.raises(ConfigError, match="val_ece cannot be recomputed example by example .* these can: val_accuracy"):
        scores_of(runs / "sst2", "val_ece")
    with pytest.raises(ConfigError, match="these can: val_f1_micro, val_f1_macro"):
        scores_of(runs / "multilabel", "val_f1_micro_at_0.5")
    run = tmp_path / "run"
    shutil.copytree(runs / "sst2", run)
    (run / "val_SST-2.tsv").unlink()
    with pytest.raises(MissingFileError, match="val_SST-2.tsv: no such prediction file"):
        scores_of(run, "val_accuracy")
    shutil.copy(runs / "sst2" / "val_SST-2.tsv", run)
    short = tmp_path / "dev.tsv"
    short.write_text("\n".join(SST2_DEV.read_text().splitlines()[:11]) + "\n")  # 10 of the 872 sentences
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"]["validation_file"] = str(short)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(DataError, match=r"index 99 but .*dev.tsv has 10 examples: it is not the file the run validated on"):
        scores_of(run, "val_accuracy")
