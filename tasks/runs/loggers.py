"""Where a run's training curves go (``logger=`` in ``conf/logger/``), and its progress bar.

Every run writes ``<run>/logs/metrics.csv`` (``sesame-report`` reads it); ``logger=tensorboard``,
``logger=mlflow`` and ``logger=wandb`` log the same values a second time, into files under the run
folder, without any server or network:

* ``tensorboard``: event files in ``<run>/logs/`` (``tensorboard --logdir outputs``);
* ``mlflow``: a local file store, ``<run>/mlruns/`` unless ``logger.tracking_uri`` names another;
* ``wandb``: an offline run in ``<run>/wandb/offline-run-*`` (upload later with ``wandb sync``).

Each is an optional extra of pyproject.toml (``pip install 'sesame[tensorboard]'``).
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger, Logger

from sesame.tasks.base.logger_settings import LoggerSettings


def csv_logger(run_dir: Path) -> CSVLogger:
    """``<run>/logs/metrics.csv``: written by every run."""
    return CSVLogger(save_dir=str(run_dir), name="logs", version="")


def run_name(run_dir: Path) -> str:
    """A run's name in MLflow / W&B: its folder and the one above (``glue/2026-05-01_12-00-00``,
    or for --multirun ``2026-05-01_12-00-00/3``)."""
    return "/".join(Path(run_dir).resolve().parts[-2:])


def build_loggers(settings: LoggerSettings, run_dir: Path) -> list[Logger]:
    """The CSV logger, then the one ``settings`` names (if not csv)."""
    loggers: list[Logger] = [csv_logger(run_dir)]
    if settings.name == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger

        # Next to metrics.csv; no placeholder hp_metric.
        loggers.append(TensorBoardLogger(save_dir=str(run_dir), name="logs", version="", default_hp_metric=False))
    elif settings.name == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger

        uri = settings.tracking_uri or (Path(run_dir).resolve() / "mlruns").as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance mode and refuses it unless asked for.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        loggers.append(MLFlowLogger(experiment_name=settings.experiment_name, run_name=run_name(run_dir),
                                    tracking_uri=uri))
    elif settings.name == "wandb":
        import wandb
        from lightning.pytorch.loggers import WandbLogger

        os.environ["WANDB_MODE"] = "offline"  # never the network, whatever the user's wandb settings say
        if wandb.run is not None:
            # A run of this process before (a --multirun job, a training before its evaluation): Lightning
            # would log into it; each sesame run is one W&B run.
            wandb.finish()
        loggers.append(WandbLogger(offline=True, save_dir=str(run_dir), project=settings.project,
                                   name=run_name(run_dir)))
    return loggers


#: Where a run's hyperparameters and final metrics go in each comparison view: TensorBoard's HParams
#: dashboard and MLflow's run table show a sweep as one table of these.
HPARAMS_PREFIX = "hparams/"


def job_overrides() -> dict[str, str]:
    """The job's command-line overrides (``fusion=last``: what a sweep varies), key -> value as typed;
    none outside a Hydra job (a run started from Python)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return {}
    pairs = (item.split("=", 1) for item in HydraConfig.get().overrides.task if "=" in item)
    return {key.lstrip("+~"): value for key, value in pairs}


def log_comparison(loggers: Sequence[Logger], hparams: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
    """Log a finished run's ``hparams`` (its overrides) with its final ``metrics`` (the numbers of
    ``metrics.json``) where each logger's comparison view reads them: TensorBoard's HParams plugin (one
    session, the metrics as ``hparams/<name>`` scalars), MLflow params ``hparams/<key>`` and metrics
    ``hparams/<name>``, W&B's config and run summary. The CSV log has ``metrics.json`` beside it."""
    final = {f"{HPARAMS_PREFIX}{k}": float(v) for k, v in sorted(metrics.items())
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}
    params = {k: str(v) for k, v in sorted(hparams.items())}
    for logger in loggers:
        name = type(logger).__name__
        if name == "TensorBoardLogger":
            logger.log_hyperparams(params or {"run": Path(logger.log_dir).parent.name}, metrics=final)
        elif name == "MLFlowLogger":
            logger.log_hyperparams({f"{HPARAMS_PREFIX}{k}": v for k, v in params.items()})
            logger.log_metrics(final)
        elif name == "WandbLogger":
            logger.experiment.config.update(params, allow_val_change=True)
            logger.experiment.summary.update(final)
        logger.save()


def progress_bar_callbacks(enabled: bool) -> list[Callback]:
    """Lightning's ``RichProgressBar`` where ``rich`` is installed and the bar is on; else none (Lightning's
    default bar, or none with ``trainer.enable_progress_bar=false``)."""
    if not enabled or importlib.util.find_spec("rich") is None:
        return []
    from lightning.pytorch.callbacks import RichProgressBar

    return [RichProgressBar()]
