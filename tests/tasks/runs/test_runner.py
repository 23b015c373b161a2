"""sesame-train's run: files in the run folder, determinism, and the real default encoder end to end."""

import json

import pytest
import torch

from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import train
from tests.conftest import count_validations, prediction_accuracy, tsv_labels


def test_a_run_writes_config_metrics_checkpoints_and_predictions(make_cfg, tmp_path):
    metrics = train(RunSettings.from_config(make_cfg()), tmp_path)
    assert set(metrics) >= {"val_accuracy", "val_loss"}
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert (tmp_path / "config.yaml").read_text().count("name_or_path") == 1
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file() and (tmp_path / "checkpoints" / "best.ckpt").is_file()
    lines = (tmp_path / "val_SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and {line.split("\t")[1] for line in lines[1:]} <= {"0", "1"}
    # limit_val_batches=2 at eval_batch_size 128: every evaluated sentence predicted exactly once
    indices = [int(line.split("\t")[0]) for line in lines[1:]]
    assert len(indices) == len(set(indices)) == 256


def test_the_same_config_twice_gives_the_same_metrics(make_cfg, tmp_path):
    cfg = make_cfg("seed=7", "finetune=full")
    assert train(RunSettings.from_config(cfg), tmp_path / "a") == train(RunSettings.from_config(cfg), tmp_path / "b")


def test_a_checkpoint_rebuilds_its_module(make_cfg, tmp_path):
    from sesame.tasks.glue.module import SentenceClassificationModule

    train(RunSettings.from_config(make_cfg()), tmp_path)
    module = load_trained(tmp_path / "checkpoints" / "best.ckpt").module
    assert isinstance(module, SentenceClassificationModule)
    state = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    torch.testing.assert_close(module.head.classifier.weight, state["head.classifier.weight"])
    assert module.label_names == ["0", "1"]


@pytest.mark.parametrize("fusion", ["second_to_last", "concat_last_4", "scalar_mix"])
@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_fusion_and_pooling_compose_from_the_command_line(make_cfg, tmp_path, fusion, pooling):
    from sesame.heads.pooling import MaxPooling, MeanPooling
    from sesame.tasks.glue.module import SentenceClassificationModule

    metrics = train(RunSettings.from_config(make_cfg(f"fusion={fusion}", f"pooling={pooling}", "finetune=frozen")), tmp_path)
    # The reported accuracy is the accuracy of the written predictions against the dev labels.
    assert metrics["val_accuracy"] == pytest.approx(prediction_accuracy(tmp_path / "val_SST-2.tsv"), rel=1e-6)
    # The trained model is built with what the command line chose.
    module = load_trained(tmp_path / "checkpoints" / "best.ckpt").module
    assert isinstance(module, SentenceClassificationModule)
    assert module.fusion.mode == fusion
    assert type(module.pooling) is {"mean": MeanPooling, "max": MaxPooling}[pooling]
    assert module.feature_size == (4 * 16 if fusion == "concat_last_4" else 16)  # the tiny encoder's hidden size


def test_the_real_default_encoder_end_to_end(make_cfg, tmp_path):
    """The shipped MiniLM weights, a handful of real SST-2 sentences, one optimiser step per batch."""
    from sesame.tasks.runs.evaluation import evaluate

    cfg = make_cfg(
        "data.max_train_examples=16", "data.max_eval_examples=32", "data.batch_size=8",
        "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", tiny=False,
    )
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(cfg), run)
    assert cfg.encoder.name_or_path == "minilm_l6"
    assert len((run / "val_SST-2.tsv").read_text().splitlines()) == 33
    assert metrics["val_accuracy"] == pytest.approx(prediction_accuracy(run / "val_SST-2.tsv"), rel=1e-6)
    # sesame-eval reloads the real encoder from the checkpoint and scores it the same.
    scored = evaluate(RunSettings.from_config(make_cfg("data.max_eval_examples=32", f"++model={run}", tiny=False)), tmp_path / "eval")
    assert scored["val_accuracy"] == metrics["val_accuracy"]
    assert scored["val_loss"] == pytest.approx(metrics["val_loss"], abs=1e-6)


def test_a_tiny_encoder_learns_sst2_above_the_majority_class(make_cfg, tmp_path):
    """Two epochs over the shipped 2,000-sentence SST-2 slice (a few seconds): the tiny random encoder
    beats always predicting the dev set's majority class (50.9 %) by a margin (60-62 % with seeds 1-6 and 42)."""
    cfg = make_cfg(
        "trainer.max_epochs=2", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null",
        "data.max_seq_length=32", "pooling=mean", "finetune.head_lr=3e-2", "finetune.encoder_lr=3e-3",
        "finetune.warmup_ratio=0",
    )
    metrics = train(RunSettings.from_config(cfg), tmp_path)
    labels = tsv_labels()
    majority = max(labels.count(label) for label in set(labels)) / len(labels)
    assert len((tmp_path / "val_SST-2.tsv").read_text().splitlines()) == 1 + len(labels) == 1 + 872
    assert metrics["val_accuracy"] > majority + 0.05


def test_a_best_checkpoint_equal_to_the_final_weights_is_not_validated_twice(make_cfg, tmp_path, monkeypatch):
    calls = count_validations(monkeypatch)
    metrics = train(RunSettings.from_config(make_cfg("finetune=full")), tmp_path / "run")
    assert len(calls) == 1  # one epoch: fit's own validation is the final one
    _assert_metrics_of_best_checkpoint(make_cfg, tmp_path / "run", metrics)


def test_a_best_checkpoint_older_than_the_final_weights_is_validated_again(make_cfg, tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import ModelCheckpoint

    calls = count_validations(monkeypatch)
    # Keep the first epoch's checkpoint as the best whatever the second scores.
    monkeypatch.setattr(ModelCheckpoint, "check_monitor_top_k", lambda self, trainer, current=None: not self.best_k_models)
    metrics = train(RunSettings.from_config(make_cfg("finetune=full", "trainer.max_epochs=2")), tmp_path / "run")
    assert len(calls) == 3 and calls[-1] == calls[-2]  # two epochs, then the best (first) checkpoint again
    _assert_metrics_of_best_checkpoint(make_cfg, tmp_path / "run", metrics)


def _assert_metrics_of_best_checkpoint(make_cfg, run_dir, metrics):
    from sesame.tasks.runs.evaluation import evaluate

    scored = evaluate(RunSettings.from_config(make_cfg(f"++model={run_dir / 'checkpoints' / 'best.ckpt'}")), run_dir.parent / "eval")
    for key in ("val_accuracy", "val_loss"):
        assert metrics[key] == pytest.approx(scored[key], abs=1e-6)


@pytest.mark.parametrize("max_steps, validated_at", [(3, [3]), (6, [4, 6])])
def test_a_run_ending_between_validations_validates_its_final_step_and_saves_best(
        make_cfg, tmp_path, monkeypatch, max_steps, validated_at):
    """trainer.max_steps before an epoch's end (4 batches here): the final weights are validated too, so
    best.ckpt is chosen among every validation (here each one scores higher than the one before, so the
    final step is the best) and metrics.json describes it."""
    from sesame.tasks.runs.evaluation import evaluate
    from sesame.tasks.glue.module import SentenceClassificationModule

    score = SentenceClassificationModule.score
    monkeypatch.setattr(SentenceClassificationModule, "score", lambda self, stage, rows: {
        **score(self, stage, rows), "accuracy": self.trainer.global_step / 100})
    calls = count_validations(monkeypatch)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg("finetune=full", f"trainer.max_steps={max_steps}", "trainer.max_epochs=3")), run)
    assert calls == validated_at  # the final validation saw the best weights: not validated again
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["global_step"] == max_steps
    assert metrics["val_accuracy"] == pytest.approx(max_steps / 100)
    scored = evaluate(RunSettings.from_config(make_cfg(f"++model={run}")), tmp_path / "eval")
    assert metrics["val_loss"] == pytest.approx(scored["val_loss"], abs=1e-6)


def test_a_run_whose_final_step_is_never_validated_says_so_and_still_saves_best(make_cfg, tmp_path, caplog):
    import logging

    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING):  # 1 epoch, validation every 2nd: fit never validates
        metrics = train(RunSettings.from_config(make_cfg("+trainer.check_val_every_n_epoch=2")), run)
    assert any("were never validated" in r.getMessage() for r in caplog.records)
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["global_step"] == 4 == metrics["best_step"]
    assert "optimizer_states" not in torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert "val_accuracy" in metrics  # the final weights, validated after fit


def test_step_based_evaluation_and_checkpoints(make_cfg, tmp_path, monkeypatch):
    """README "Training options": validate (and so update best.ckpt / last.ckpt) every N optimiser steps,
    and write last.ckpt every M steps, the example's settings."""
    import csv

    calls = count_validations(monkeypatch)
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg("trainer.val_check_interval=2", "checkpoint.every_n_train_steps=2")), run)  # trainer=debug: 4 steps
    assert calls[:2] == [2, 4]  # fit's validations (then the best checkpoint's, when it is not the final weights)
    with open(run / "logs" / "metrics.csv", newline="") as handle:
        assert [int(r["step"]) for r in csv.DictReader(handle) if r.get("val_accuracy")][:2] == [1, 3]
    assert {p.name for p in (run / "checkpoints").iterdir()} >= {"best.ckpt", "last.ckpt"}
