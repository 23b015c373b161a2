"""QA evaluation does not depend on the order its windows run in. sesame evaluates windows length-sorted (and trains
length-grouped with ``data.group_by_length``); transformers 5.25's Trainer, asked to group by length, also reorders
its evaluation windows, which run_qa's post-processing does not expect (its in-run SQuAD F1 collapses). sesame's
predictions carry their window index, so the same weights must answer the same in any order."""

from __future__ import annotations

import json

import numpy as np

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.inputs import batching
from sesame.tasks.runs import runner
from sesame.tasks.runs.evaluation import evaluate


class FileOrder(batching.LengthSortedSampler):
    """The windows in their file order (what the Trainer's reference post-processing assumes)."""

    def __init__(self, lengths, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(lengths, rank, world_size)
        self.order = sorted(self.order)


class Reversed(batching.LengthSortedSampler):
    """Shortest windows first."""

    def __init__(self, lengths, rank: int = 0, world_size: int = 1) -> None:
        super().__init__(lengths, rank, world_size)
        self.order = self.order[::-1]


def test_grouped_training_then_qa_evaluation_answers_the_same_in_any_window_order(make_cfg, tmp_path, monkeypatch):
    overrides = ["task=squad_v1", "data.max_train_examples=16", "data.max_eval_examples=30", "data.max_seq_length=96",
                 "data.doc_stride=48", "data.eval_batch_size=4", "data.group_by_length=true", "data.pad_to_multiple_of=8",
                 "trainer.limit_val_batches=null"]
    cfg = make_cfg(*overrides)
    data = runner.build_datamodule(RunSettings.from_config(cfg))
    data.setup("validate")
    lengths = np.asarray(data.example_lengths("validation"))
    assert len(set(lengths.tolist())) > 1 and len(lengths) > 30  # windows of several lengths, several per question
    assert list(batching.LengthSortedSampler(lengths)) != sorted(range(len(lengths)))  # sorted differs from file order

    runner.train(RunSettings.from_config(cfg), tmp_path / "run")
    sorted_predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    scores = {}
    for name, sampler in (("file order", FileOrder), ("shortest first", Reversed)):
        monkeypatch.setattr(batching, "LengthSortedSampler", sampler)
        scores[name] = evaluate(RunSettings.from_config(make_cfg(*overrides, f"++model={tmp_path / 'run'}")), tmp_path / name)
        assert json.loads((tmp_path / name / "predictions.json").read_text()) == sorted_predictions, name
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(sorted_predictions) == 30
    for metrics in scores.values():
        assert metrics["val_f1"] == written["val_f1"] and metrics["val_exact_match"] == written["val_exact_match"]
