"""``trainer.early_stopping``: a run stops once the task's main metric stops improving, reports and
writes what its best checkpoint scores, and resumes (killed, or after it had stopped) as if never
interrupted."""

import csv
import json

import lightning as L
import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import runner
from sesame.tasks.runs.early_stopping import EarlyStoppingSettings, MainMetricEarlyStopping
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import build_trainer, train
from tests.conftest import count_validations

# 4 training batches an epoch, up to 4 epochs; one validation batch; a head learning rate that
# moves the weights (and val_loss) visibly from one epoch to the next.
STOPPING = ["finetune=full", "finetune.head_lr=1e-2", "data.max_train_examples=128", "data.max_eval_examples=128",
            "trainer.max_epochs=4", "trainer.early_stopping.patience=1"]


def _main_metric(monkeypatch, value):
    """val_accuracy is ``value(global_step)`` at every validation."""
    from sesame.tasks.glue.module import SentenceClassificationModule

    score = SentenceClassificationModule.score
    monkeypatch.setattr(SentenceClassificationModule, "score", lambda self, stage, rows: {
        **score(self, stage, rows), "accuracy": value(self.trainer.global_step)})


def _global_step(checkpoint):
    return torch.load(checkpoint, weights_only=True)["global_step"]


def _logged_val_losses(run):
    with open(run / "logs" / "metrics.csv", newline="") as handle:
        return [float(row["val_loss"]) for row in csv.DictReader(handle) if row["val_loss"]]


def test_a_run_stops_early_and_reports_its_best_checkpoint(make_cfg, tmp_path, monkeypatch):
    _main_metric(monkeypatch, lambda step: 0.5)  # never improves after the first validation
    calls = count_validations(monkeypatch)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg(*STOPPING)), run)
    # Epoch 1 sets the best; epoch 2 does not improve (patience 1): stop, of 4 epochs; then
    # validate best.ckpt (epoch 1) again, since the weights it stopped with are not the best.
    assert calls == [4, 8, 8]
    assert _global_step(run / "checkpoints" / "best.ckpt") == 4
    assert json.loads((run / "metrics.json").read_text()) == metrics

    # metrics.json and the prediction file are best.ckpt's (evaluating never early-stops, even when set) ...
    best = evaluate(RunSettings.from_config(make_cfg(f"++model={run}", "data.max_eval_examples=128", "trainer.early_stopping.patience=1")),
                    tmp_path / "best")
    for key in ("val_accuracy", "val_loss"):
        assert metrics[key] == pytest.approx(best[key], abs=1e-6)
    assert (run / "val_SST-2.tsv").read_text() == (tmp_path / "best" / "val_SST-2.tsv").read_text()
    # ... not those of the weights it stopped with (epoch 2's validation, in the CSV log).
    epoch_1, epoch_2, final = _logged_val_losses(run)
    assert final == pytest.approx(epoch_1, abs=1e-6) == pytest.approx(metrics["val_loss"], abs=1e-6)
    assert abs(epoch_2 - metrics["val_loss"]) > 1e-3

    # Resumed from checkpoints/last.ckpt after it stopped: the same result, and no training past the stop.
    (run / "metrics.json").unlink()
    calls.clear()
    assert train(RunSettings.from_config(make_cfg(*STOPPING, "resume=true")), run) == metrics
    assert max(calls) == 8 and calls[-1] == 8


def test_a_run_resumed_after_it_stopped_trains_no_more(make_cfg, tmp_path, monkeypatch):
    # Every validation is a new best for the checkpoint (best.ckpt = last.ckpt = the final weights),
    # but below min_delta, so none for early stopping: the checkpoint records the stop.
    _main_metric(monkeypatch, lambda step: 0.5 + step / 1000)
    calls = count_validations(monkeypatch)
    metrics = train(RunSettings.from_config(make_cfg(*STOPPING, "trainer.early_stopping.min_delta=0.01")), tmp_path)
    assert calls == [4, 8]  # the final validation was of best.ckpt: not validated again
    assert _global_step(tmp_path / "checkpoints" / "best.ckpt") == _global_step(tmp_path / "checkpoints" / "last.ckpt") == 8

    # As when killed during its final evaluation: resumed, it only evaluates best.ckpt.
    (tmp_path / "metrics.json").unlink()
    calls.clear()
    assert train(RunSettings.from_config(make_cfg(*STOPPING, "trainer.early_stopping.min_delta=0.01", "resume=true")), tmp_path) == metrics
    assert calls == [8]
    # Resumed with more patience, it trains on until that runs out too (one more epoch below min_delta).
    calls.clear()
    resumed = train(RunSettings.from_config(make_cfg(*STOPPING, "trainer.early_stopping.min_delta=0.01", "trainer.early_stopping.patience=2",
                             "resume=true")), tmp_path)
    assert calls == [12] and resumed["val_accuracy"] == pytest.approx(0.512)


class Crash(L.Callback):
    """Kills the run (an exception) when the second epoch starts: last.ckpt holds epoch 1."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 1:
            raise RuntimeError("killed")


def test_a_killed_run_resumes_counting_where_it_stopped(make_cfg, tmp_path, monkeypatch):
    _main_metric(monkeypatch, lambda step: 0.5)
    calls = count_validations(monkeypatch)
    straight = train(RunSettings.from_config(make_cfg(*STOPPING)), tmp_path / "straight")
    build = runner.build_trainer
    monkeypatch.setattr(runner, "build_trainer", lambda cfg, run_dir, monitor, extra=None, **kw: build(
        cfg, run_dir, monitor, [*(extra or []), Crash()], **kw))
    with pytest.raises(RuntimeError, match="killed"):
        train(RunSettings.from_config(make_cfg(*STOPPING)), tmp_path / "killed")
    monkeypatch.setattr(runner, "build_trainer", build)
    calls.clear()
    # The checkpoint's early-stopping state (best 0.5 at epoch 1) is restored: epoch 2 does not
    # improve and the run stops there, as the uninterrupted one did (a fresh state would go on).
    assert train(RunSettings.from_config(make_cfg(*STOPPING, "resume=true")), tmp_path / "killed") == straight
    assert calls == [8, 8]


def test_early_stopping_without_validation_data_is_a_config_error(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="trainer.early_stopping.patience is set but the run has no validation data"):
        train(RunSettings.from_config(make_cfg("data.validation_file=null", "trainer.early_stopping.patience=1")), tmp_path)
    assert not (tmp_path / "checkpoints").exists()


def test_early_stopping_is_off_by_default_and_not_a_lightning_argument(make_cfg, tmp_path):
    assert build_trainer(RunSettings.from_config(make_cfg()), tmp_path, "val_accuracy").early_stopping_callback is None
    trainer = build_trainer(RunSettings.from_config(make_cfg("trainer.early_stopping.patience=3", "trainer.early_stopping.min_delta=0.01")),
                            tmp_path, "val_f1")
    stopping = trainer.early_stopping_callback
    assert isinstance(stopping, MainMetricEarlyStopping)
    assert (stopping.monitor, stopping.mode, stopping.patience, stopping.min_delta) == ("val_f1", "max", 3, 0.01)


@pytest.mark.parametrize("override, message", [
    ("+trainer.early_stopping.pateince=2", "unknown setting trainer.early_stopping.pateince"),
    ("trainer.early_stopping.patience=0", "patience=0: use a positive number"),
    ("trainer.early_stopping.min_delta=-0.1", "min_delta=-0.1: use 0 or a positive number"),
    ("trainer.early_stopping.patience=two", "trainer.early_stopping.patience='two': expected an integer"),
])
def test_bad_early_stopping_settings_are_config_errors(make_cfg, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        build_trainer(RunSettings.from_config(make_cfg(override)), tmp_path, "val_accuracy")


def test_the_settings_need_both_keys():
    with pytest.raises(ConfigError, match="missing setting trainer.early_stopping.min_delta"):
        EarlyStoppingSettings.from_config({"patience": 2})
