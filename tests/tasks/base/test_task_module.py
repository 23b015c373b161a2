"""The one evaluation path of ``tasks/base/task_module.py``: partial evaluations score only whole examples and
say how many, the sanity pass writes nothing, and metrics.json holds the metrics as computed (float64)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import runner
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.qa.metrics import squad_v1


def test_metrics_json_holds_float64_values_and_integer_counts(make_cfg, tmp_path):
    metrics = runner.train(RunSettings.from_config(make_cfg("data.max_train_examples=32", "data.max_eval_examples=100",
                                    "trainer.limit_val_batches=null")), tmp_path)
    written = json.loads((tmp_path / "metrics.json").read_text())
    with open(shipped_path("glue/sst2/dev.tsv"), encoding="utf-8") as f:
        gold = [row["label"] for row in csv.DictReader(f, delimiter="\t")][:100]
    with open(tmp_path / "val_SST-2.tsv", encoding="utf-8") as f:
        predicted = [row["prediction"] for row in csv.DictReader(f, delimiter="\t")]
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / 100  # k/100: not exact in float32
    assert written["val_accuracy"] == accuracy == metrics["val_accuracy"]
    assert written["val_examples_scored"] == written["val_examples_total"] == 100
    assert type(written["val_examples_scored"]) is int


def test_a_partial_qa_evaluation_scores_whole_questions_only(make_cfg, tmp_path):
    cfg = make_cfg("task=squad_v1", "data.max_train_examples=16", "data.max_eval_examples=40", "data.max_seq_length=368",
                   "data.doc_stride=128", "data.eval_batch_size=8", "trainer.limit_val_batches=3")
    # Which questions have all their windows among the 3 x 8 longest (evaluation is length-sorted)?
    data = runner.build_datamodule(RunSettings.from_config(cfg))
    data.setup("validate")
    question = data.eval_units("validation")
    first = set(np.argsort(-np.asarray(data.example_lengths("validation")), kind="stable")[:24].tolist())
    seen = {q for i, q in enumerate(question) if i in first}
    whole = {q for q in seen if all(i in first for i in np.flatnonzero(question == q))}
    assert 0 < len(whole) < len(seen)  # some questions were cut: the case under test

    runner.train(RunSettings.from_config(cfg), tmp_path)
    written = json.loads((tmp_path / "metrics.json").read_text())
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    ids = data.examples("validation")["id"]
    assert set(predictions) == {ids[q] for q in whole}
    assert (written["val_examples_scored"], written["val_examples_total"]) == (len(whole), 40)
    # The metric is the official one over exactly the scored questions.
    answers = data.examples("validation")["answers"]
    gold = {ids[q]: list(answers[q]["text"]) for q in whole}
    assert written["val_f1"] == pytest.approx(squad_v1(gold, predictions)["f1"], abs=1e-9)


def test_an_evaluation_with_no_whole_example_scores_nan_instead_of_crashing(make_cfg, tmp_path):
    metrics = runner.train(RunSettings.from_config(make_cfg("task=squad_v1", "data.max_train_examples=8", "data.max_eval_examples=40",
                                    "data.max_seq_length=128", "data.doc_stride=64", "data.eval_batch_size=8",
                                    "trainer.limit_val_batches=1")), tmp_path)
    assert metrics["val_examples_scored"] == 0 and metrics["val_f1"] is None


def test_a_partial_ner_evaluation_counts_sentences(make_cfg, tmp_path):
    runner.train(RunSettings.from_config(make_cfg("task=ner", "data.max_train_examples=16", "data.max_eval_examples=50",
                          "data.eval_batch_size=8", "trainer.limit_val_batches=2")), tmp_path)
    written = json.loads((tmp_path / "metrics.json").read_text())
    sentences = (tmp_path / "val_predictions.conll").read_text().strip().split("\n\n")
    assert written["val_examples_total"] == 50
    assert 0 < written["val_examples_scored"] == len(sentences) < 50


class FilesAtSanityEnd(L.Callback):
    def __init__(self, folder: Path) -> None:
        self.folder, self.seen = folder, None

    def on_sanity_check_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.seen = sorted(p.name for p in self.folder.iterdir() if p.suffix in (".json", ".tsv", ".conll"))


@pytest.mark.parametrize("task", ["glue", "squad_v1", "ner"])
def test_the_sanity_check_writes_no_predictions_and_logs_no_metrics(make_cfg, tmp_path, monkeypatch, task):
    probe = FilesAtSanityEnd(tmp_path)
    build = runner.build_trainer
    monkeypatch.setattr(runner, "build_trainer", lambda cfg, run_dir, monitor, extra=None, **kw: build(
        cfg, run_dir, monitor, [*(extra or []), probe], **kw))
    metrics = runner.train(RunSettings.from_config(make_cfg(f"task={task}", "data.max_train_examples=8", "data.max_eval_examples=8",
                                    "trainer.num_sanity_val_steps=1")), tmp_path)
    assert probe.seen == []  # the sanity pass ran (seen is set) and wrote nothing
    assert metrics["val_examples_scored"] == 8  # the real validation scored every example
