"""The ``logger`` group: each logger writes its files under the run folder, offline, next to the
``logs/metrics.csv`` every run writes; bad settings and missing packages are ConfigErrors."""

import csv
import importlib.util
import json

from pathlib import Path

import pytest
from omegaconf import open_dict

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import loggers
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.logger_settings import LoggerSettings
from sesame.tasks.runs.runner import build_trainer, train
from tests.conftest import require


def _csv_metrics(run):
    """The ``val_accuracy`` values of ``<run>/logs/metrics.csv`` (sesame-report reads this file)."""
    with open(run / "logs" / "metrics.csv", newline="") as handle:
        return [float(row["val_accuracy"]) for row in csv.DictReader(handle) if row.get("val_accuracy")]


def test_tensorboard_writes_event_files_next_to_the_csv_log(make_cfg, tmp_path):
    require("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    metrics = train(RunSettings.from_config(make_cfg("logger=tensorboard")), tmp_path)
    assert _csv_metrics(tmp_path) == pytest.approx([metrics["val_accuracy"]])
    events = list((tmp_path / "logs").glob("events.out.tfevents.*"))
    assert events
    scalars = EventAccumulator(str(tmp_path / "logs")).Reload()
    assert [e.value for e in scalars.Scalars("val_accuracy")] == pytest.approx([metrics["val_accuracy"]])
    assert "hp_metric" not in scalars.Tags()["scalars"]


def test_mlflow_logs_into_a_file_store_in_the_run_folder(make_cfg, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg("logger=mlflow", "logger.experiment_name=tests")), run)
    assert _csv_metrics(run) == pytest.approx([metrics["val_accuracy"]])
    client = MlflowClient((run / "mlruns").as_uri())
    [logged] = client.search_runs([client.get_experiment_by_name("tests").experiment_id])
    assert logged.info.run_name == f"{tmp_path.name}/run"  # the run folder and the one above
    assert logged.info.status == "FINISHED"
    assert logged.data.metrics["val_accuracy"] == pytest.approx(metrics["val_accuracy"])
    assert logged.data.params["cfg/logger/name"] == "mlflow"
    assert list((run / "mlruns").glob("*/*/metrics/val_accuracy"))


def test_wandb_writes_an_offline_run_into_the_run_folder(make_cfg, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "online")  # the logger is offline whatever the environment says
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = train(RunSettings.from_config(make_cfg("logger=wandb")), tmp_path / "first")
    second = train(RunSettings.from_config(make_cfg("logger=wandb", "seed=3")), tmp_path / "second")
    wandb.finish()  # the last run of a process ends with it (or with the next run's start)
    for run, metrics in ((tmp_path / "first", first), (tmp_path / "second", second)):
        assert _csv_metrics(run) == pytest.approx([metrics["val_accuracy"]])
        # One W&B run per sesame run, each in its own folder.
        [folder] = (run / "wandb").glob("offline-run-*")
        [records] = folder.glob("run-*.wandb")
        assert b"val_accuracy" in records.read_bytes()


def test_csv_is_the_default_and_writes_only_the_csv_log(make_cfg, tmp_path):
    cfg = make_cfg()
    assert cfg.logger.name == "csv"
    trainer = build_trainer(RunSettings.from_config(cfg), tmp_path, "val_accuracy")
    assert [type(logger).__name__ for logger in trainer.loggers] == ["CSVLogger"]
    assert Path(trainer.logger.log_dir) == tmp_path / "logs"


def test_a_config_without_a_logger_block_logs_to_csv(make_cfg, tmp_path):
    """E.g. sesame-eval on a run trained before the logger group: its config has no ``logger``."""
    cfg = make_cfg()
    with open_dict(cfg):
        del cfg["logger"]
    assert [type(logger).__name__ for logger in build_trainer(RunSettings.from_config(cfg), tmp_path, None).loggers] == ["CSVLogger"]


def test_each_installed_logger_comes_after_the_csv_one(make_cfg, tmp_path):
    names = {"tensorboard": "TensorBoardLogger", "mlflow": "MLFlowLogger"}
    for name, cls in names.items():
        if importlib.util.find_spec(name) is None:
            continue
        trainer = build_trainer(RunSettings.from_config(make_cfg(f"logger={name}")), tmp_path / name, "val_accuracy")
        assert [type(logger).__name__ for logger in trainer.loggers] == ["CSVLogger", cls]


@pytest.mark.parametrize("override, message", [
    ("logger.name=neptune", "logger=neptune: unknown logger"),
    ("+logger.project=x", "logger.project is not a setting of logger=csv"),
    ("+logger.offline=false", "unknown setting logger.offline"),
])
def test_bad_logger_settings_are_config_errors(make_cfg, tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        build_trainer(RunSettings.from_config(make_cfg(override)), tmp_path, "val_accuracy")


@pytest.mark.parametrize("name", ["tensorboard", "mlflow", "wandb"])
def test_a_missing_package_names_the_extra_to_install(monkeypatch, name):
    real = importlib.util.find_spec
    monkeypatch.setattr(loggers.importlib.util, "find_spec", lambda module: None if module == name else real(module))
    block = {"name": name, "experiment_name": "x"} if name == "mlflow" else {"name": name}
    if name == "wandb":
        block["project"] = "x"
    with pytest.raises(ConfigError, match=rf"logger={name} needs the {name} package. Fix: pip install 'sesame\[{name}\]'"):
        LoggerSettings.from_config(block)


def test_the_logger_presets_are_valid_where_their_packages_are_installed(make_cfg):
    for name in ("csv", "tensorboard", "mlflow", "wandb"):
        if name == "csv" or importlib.util.find_spec(name) is not None:
            assert LoggerSettings.from_config(make_cfg(f"logger={name}").logger).name == name


def test_the_progress_bar_is_rich_when_shown_and_absent_when_off(make_cfg, tmp_path):
    from lightning.pytorch.callbacks import RichProgressBar

    shown = build_trainer(RunSettings.from_config(make_cfg("trainer.enable_progress_bar=true")), tmp_path / "a", "val_accuracy")
    assert isinstance(shown.progress_bar_callback, RichProgressBar)
    hidden = build_trainer(RunSettings.from_config(make_cfg()), tmp_path / "b", "val_accuracy")
    assert hidden.progress_bar_callback is None


def test_a_run_with_the_rich_progress_bar_trains(make_cfg, tmp_path):
    metrics = train(RunSettings.from_config(make_cfg("trainer.enable_progress_bar=true")), tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics


def test_learning_rates_and_gradient_norm_go_to_every_logger(make_cfg, tmp_path):
    require("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(RunSettings.from_config(make_cfg("logger=tensorboard", "finetune.warmup_ratio=0.5")), tmp_path)  # trainer=debug: 4 steps, a log each
    with open(tmp_path / "logs" / "metrics.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("grad_norm")]
    assert len(rows) == 4
    encoder_lr = [float(row["lr_encoder"]) for row in rows]
    peak = encoder_lr.index(max(encoder_lr))
    assert encoder_lr[0] < encoder_lr[peak] > encoder_lr[-1] and 0 < peak < 3  # linear warm-up, then decay
    assert float(rows[peak]["lr_head"]) > encoder_lr[peak]  # each group's own rate (finetune.head_lr)
    assert all(float(row["grad_norm"]) > 0 for row in rows)
    tags = EventAccumulator(str(tmp_path / "logs")).Reload().Tags()["scalars"]
    assert {"lr_encoder", "lr_head", "grad_norm"} <= set(tags)


def test_tensorboard_hparams_dashboard_gets_the_overrides_and_final_metrics(make_cfg, tmp_path):
    """A sweep's jobs as one table: each run's overrides as hyperparameters, its metrics.json numbers as metrics."""
    require("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    metrics = train(RunSettings.from_config(make_cfg("logger=tensorboard", "pooling=mean")), tmp_path, hparams={"pooling": "mean", "seed": 42})
    events = EventAccumulator(str(tmp_path / "logs")).Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["pooling"].string_value == "mean" and start.hparams["seed"].string_value == "42"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert "hparams/val_accuracy" in {m.name.tag for m in experiment.metric_infos}
    [logged] = events.Scalars("hparams/val_accuracy")
    assert logged.value == pytest.approx(metrics["val_accuracy"])


def test_mlflow_run_table_gets_the_overrides_and_final_metrics(make_cfg, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg("logger=mlflow", "logger.experiment_name=sweep")), run, hparams={"fusion": "last"})
    client = MlflowClient((run / "mlruns").as_uri())
    [logged] = client.search_runs([client.get_experiment_by_name("sweep").experiment_id])
    assert logged.data.params["hparams/fusion"] == "last"
    assert logged.data.metrics["hparams/val_accuracy"] == pytest.approx(metrics["val_accuracy"])
    assert logged.data.metrics["hparams/train_steps"] == metrics["train_steps"]


def test_a_run_outside_a_hydra_job_has_no_overrides():
    assert loggers.job_overrides() == {}
