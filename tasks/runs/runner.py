"""One training run: settings -> data -> module (+ feature cache, teacher) -> Lightning fit /
validate / test -> files in the run folder.

The console scripts compose the config and call :func:`train`; tests call it directly.
"""

from __future__ import annotations

import json
import logging
import math
import time
import warnings
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf
from transformers import PreTrainedTokenizerBase

from sesame.tasks.core.atomic_files import torch_save_atomic, write_json_atomic, write_text_atomic
from sesame.tasks.runs.heap import fix_mmap_threshold
from sesame.tasks.runs.onednn_cache import bound_primitive_cache
from sesame.tasks.runs.precision import resolve_precision
from sesame.tasks.runs.checkpoint_callbacks import (
    AtomicCheckpointIO,
    StopOnSigterm,
    TrainingResumeCallback,
    checkpoint_callback,
    periodic_checkpoint_callback,
    sigterm_stops_the_run,
)
from sesame.tasks.saved.checkpoint_files import load_checkpoint_file
from sesame.tasks.saved.checkpoints import build_module, load_initial_weights
from sesame.tasks.compression.distill import DistillationCallback, Distiller
from sesame.tasks.base.distill_settings import DistillSettings
from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.core.distributed import is_main_process
from sesame.tasks.runs.compilation import CompileEncoder
from sesame.tasks.runs.throughput import TrainingThroughput
from sesame.tasks.runs.early_stopping import early_stopping_callbacks
from sesame.tasks.runs.trial_pruning import trial_callbacks
from sesame.tasks.encoders.encoder import check_tokenizer_fits, load_tokenizer
from sesame.tasks.encoders.store import ENCODER_FOLDER, has_weights, save_encoder_folder
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inputs.cache_settings import CacheSettings
from sesame.tasks.inputs.feature_cache import build_or_open
from sesame.tasks.core.known_noise import known_noise_silenced
from sesame.tasks.base.logger_settings import LoggerSettings
from sesame.tasks.runs.loggers import build_loggers, job_overrides, log_comparison, progress_bar_callbacks
from sesame.tasks.base.run_settings import RunSettings, TrainerSettings, task_class
from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.runs.process_launch import check_launch, strategy_with_timeout
from sesame.tasks.runs.run_lock import holds_run_folder, resolve_resume
from sesame.tasks.runs.shared_run_folder import SharedRunFolder

log = logging.getLogger(__name__)


def build_datamodule(settings: RunSettings, tokenizer: PreTrainedTokenizerBase | None = None) -> SplitDataModule:
    """The data module ``task.datamodule`` names, on ``settings.data``, with ``settings.seed`` (``tokenizer``:
    the encoder's unless given)."""
    datamodule = task_class(settings.task, "datamodule")
    return datamodule(settings.data, tokenizer or load_tokenizer(settings.encoder), seed=settings.seed)


def settings_with_data(settings: RunSettings, datamodule: SplitDataModule) -> RunSettings:
    """The settings with what the data decides (label sets) merged in: what the module is built from."""
    return settings.updated(datamodule.config_updates())


def build_trainer(
    settings: RunSettings, run_dir: Path, monitor: str | None, extra_callbacks: list | None = None,
) -> L.Trainer:
    """A ``lightning.Trainer`` with ``settings.trainer``'s Lightning arguments (all but sesame's own
    ``early_stopping`` and ``compile``), the run's checkpoints (best by ``monitor``, the task's main metric;
    None without validation data; also every ``checkpoint.every_n_train_steps``), early stopping on
    ``monitor`` when set, ``<run>/logs/metrics.csv`` plus the ``logger`` group's logger (a config without
    one, e.g. ``sesame-eval``'s: csv only), and a rich progress bar where it shows."""
    trainer = settings.trainer
    logger = settings.logger or LoggerSettings(name="csv")
    every_n_train_steps = settings.checkpoint.every_n_train_steps if settings.checkpoint is not None else None
    callbacks = [
        checkpoint_callback(run_dir, monitor), TrainingResumeCallback(), LastValidation(), TrainingThroughput(run_dir),
        *early_stopping_callbacks(trainer.early_stopping, monitor), *(extra_callbacks or []), StopOnSigterm(run_dir),
        *progress_bar_callbacks(trainer.get("enable_progress_bar") is not False),
        *([CompileEncoder()] if trainer.compile else []), SharedRunFolder(run_dir),
    ]
    if every_n_train_steps:
        callbacks.append(periodic_checkpoint_callback(run_dir, every_n_train_steps))
    kwargs = trainer.trainer_kwargs()
    if "strategy" in kwargs:  # ddp and its kin with trainer.ddp_timeout_s
        kwargs["strategy"] = strategy_with_timeout(trainer)
    if "precision" in kwargs:  # auto: bf16-mixed where the hardware has bf16 (tasks/runs/precision.py)
        kwargs["precision"] = resolve_precision(kwargs["precision"], kwargs.get("accelerator", "auto"))
    return L.Trainer(
        **kwargs,
        default_root_dir=str(run_dir),
        callbacks=callbacks,
        logger=build_loggers(logger, run_dir),
        plugins=[AtomicCheckpointIO()],
        # DDP ranks take their slices of one global order (tasks/inputs/batching.py): Lightning's sampler
        # wrapper would shuffle again and pad with repeats
        use_distributed_sampler=False,
    )


class LastValidation(Callback):
    """Makes ``fit`` validate its final step, and remembers its last validation: when it ran, at which
    step, and what it logged.

    Lightning validates at an epoch's end (or every ``val_check_interval``), so a run that reaches
    ``trainer.max_steps`` between two validations would end on weights nobody validated: no best.ckpt
    at all when that is before the first one, or a best.ckpt chosen without its final weights. Asking
    the trainer to stop at that step makes Lightning validate there (as it does for early stopping),
    and the checkpoint callback then picks best.ckpt among all validations, the final one included.
    """

    def __init__(self) -> None:
        self.started: float | None = None
        self.step: int | None = None
        self.metrics: dict[str, Any] = {}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        if 0 < trainer.max_steps <= trainer.global_step:
            trainer.should_stop = True  # the final step: Lightning validates before it stops

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.started = time.time()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.step = trainer.global_step
        self.metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith("val_")}

    def metrics_if_final_is_best(self, trainer: L.Trainer, best_path: str | None) -> dict[str, float] | None:
        """The last validation's metrics when it already evaluated the best checkpoint's weights: it ran
        after the last training step and ``best_path`` was written during it. Otherwise None (validate
        again). Rank 0 decides for all ranks, so they agree on whether a collective validate follows."""
        final = (
            self.step is not None and self.step == trainer.global_step and self.started is not None
            and bool(best_path) and Path(best_path).is_file() and Path(best_path).stat().st_mtime >= self.started
        )
        final = trainer.strategy.broadcast(final, src=0)
        return flat_metrics([self.metrics]) if final and self.metrics else None


def flat_metrics(results: list[dict[str, Any]]) -> dict[str, float]:
    """Lightning's per-dataloader result dicts -> one flat ``{name: float}`` (NaN -> None).

    Tasks name their metrics per evaluation set (``val_accuracy``, ``val_mm_accuracy``), so the
    dataloader suffix Lightning may add carries nothing and is dropped.
    """
    out: dict[str, float] = {}
    for result in results:
        for key, value in result.items():
            value = float(value)
            out[key.split("/dataloader_idx_")[0]] = value if math.isfinite(value) else None
    return out


def attach_feature_cache(settings: CacheSettings, module: EncoderTaskModule, datamodule: SplitDataModule,
                         progress: bool) -> None:
    """When the cache applies, compute the frozen encoder's features once (or reuse them) for every split: the
    hidden states the fusion reads (``cache.layers=fusion``) or every one (``all``)."""
    if not settings.applies(module.encoder_frozen):
        return
    loaders = [
        getattr(datamodule, f"{name}_dataloader")()
        for name, split in (("train", "train"), ("val", "validation"), ("test", "test"))
        if datamodule.has_split(split)
    ]
    layers = settings.stored_layers(module.fusion.indices, module.encoder.num_hidden_states)
    module.feature_cache = build_or_open(module.encoder, loaders, settings.dir, settings.dtype, progress=progress,
                                         layers=layers)
    log.info("frozen features from %s (hidden states %s)", module.feature_cache.folder, list(layers))


def save_run_encoder(module: EncoderTaskModule, tokenizer: Any, run_dir: Path, shared: Path | None = None) -> None:
    """``<run>/encoder/``: the encoder's config and tokenizer, and the weights the run never trains
    (which its checkpoints then leave out; ``tasks/encoders/store.py``), hard-linked from the sweep's
    store ``shared`` when given. Written once per run folder."""
    folder = run_dir / ENCODER_FOLDER
    with_weights = bool(module.stored_once_keys())
    if (folder / "config.json").is_file() and (has_weights(folder) or not with_weights):
        return  # a resumed run: written when it started
    save_encoder_folder(module.encoder.model, tokenizer, folder, with_weights=with_weights, shared=shared)


def check_validation_interval(trainer: TrainerSettings, datamodule: SplitDataModule) -> None:
    """``trainer.val_check_interval=N`` (batches) must fit in an epoch's training batches, which Lightning
    checks only once fit has started, as an internal-looking ValueError."""
    interval = trainer.get("val_check_interval")
    if not isinstance(interval, int) or isinstance(interval, bool) or trainer.get("check_val_every_n_epoch", 1) is None:
        return
    batches = len(datamodule.train_dataloader())
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, int) and not isinstance(limit, bool):
        batches = min(batches, limit)
    elif isinstance(limit, float):
        batches = int(batches * limit)
    if interval > batches:
        raise ConfigError(
            f"trainer.val_check_interval={interval} exceeds the {batches} training batches of an epoch. Fix: a smaller "
            "number, a fraction of an epoch (e.g. 0.25), or +trainer.check_val_every_n_epoch=null to count batches "
            "across epochs")


def check_trains(trainer: TrainerSettings) -> None:
    """A training run must train: ``trainer.max_epochs=0`` (without ``max_steps``) would only validate."""
    epochs, steps = trainer.get("max_epochs"), trainer.get("max_steps")
    if epochs is not None and epochs < 1 and not (steps is not None and steps > 0):
        raise ConfigError(f"trainer.max_epochs={epochs}: training needs at least 1 epoch (or trainer.max_steps > 0). "
                          "To evaluate a trained model without training, use sesame-eval")


def attach_distiller(settings: DistillSettings, module: EncoderTaskModule) -> list[Callback]:
    """With ``distill.teacher`` set, load the frozen teacher into ``module.distiller`` (a bad teacher fails
    before any training) and return the callback that saves its logit cache; else nothing."""
    if not settings.teacher:
        return []
    module.distiller = Distiller(settings, module)
    return [DistillationCallback(module.distiller)]


@holds_run_folder
@known_noise_silenced()
def train(settings: RunSettings, run_dir: Path, shared_encoders: Path | None = None,
          hparams: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Fit, validate (best checkpoint) and test; write config, metrics and predictions into ``run_dir``.

    ``shared_encoders``: a sweep's store of frozen encoder weights (``<sweep>/.encoders``), which the
    run's ``encoder/`` then hard-links instead of holding its own copy. ``hparams``: what this run varies
    (a sweep job's overrides; default: the Hydra job's), logged with the final metrics for the loggers'
    comparison views (``tasks/runs/loggers.py`` ``log_comparison``)."""
    # Every block was checked when the settings were read, the Lightning arguments now: all before any
    # data is read or weights are loaded.
    settings.trainer.check_lightning_arguments()
    check_launch(settings.trainer)  # a launch of another process count than num_nodes x devices
    for block in ("cache", "checkpoint", "distill"):
        if getattr(settings, block) is None:
            raise ConfigError(f"sesame-train needs the {block} block of conf/config.yaml; this config has none")
    stopping = settings.trainer.early_stopping
    resume_from = resolve_resume(settings.resume, run_dir)
    check_trains(settings.trainer)
    if not settings.data.validation_file:  # settings that need the dev set, refused before any work
        if stopping is not None and stopping.enabled:
            raise ConfigError("trainer.early_stopping.patience is set but the run has no validation data to stop on. "
                              "Fix: set data.validation_file, or trainer.early_stopping.patience=null")
        if settings.calibrate:
            raise ConfigError("calibrate=true fits a temperature on the dev set: set data.validation_file")
    L.seed_everything(settings.seed, workers=True, verbose=False)
    fix_mmap_threshold(settings.trainer.malloc_mmap_threshold_mb)  # before the run allocates its tensors
    bound_primitive_cache(settings.trainer.onednn_primitive_cache)  # before oneDNN builds its first primitive
    datamodule = build_datamodule(settings)
    datamodule.setup("fit")
    if not datamodule.has_split("train"):
        raise ConfigError("sesame-train needs data.train_file; to evaluate a trained model use sesame-eval")
    settings = settings_with_data(settings, datamodule)
    if is_main_process():  # the other DDP ranks run this too: one writer
        write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(settings.config))
    module = build_module(settings)
    if settings.init_from and resume_from is None:  # a resumed run's own checkpoint has its weights
        log.info("init_from: starting from the weights of %s", load_initial_weights(module, settings.init_from))
    refusal = module.calibration_refusal() if settings.calibrate else None
    if refusal:  # refused before any training
        raise ConfigError(f"{refusal}. Fix: drop calibrate=true")
    check_tokenizer_fits(datamodule.tokenizer, module.encoder.config, module.encoder.name_or_path)
    module.output_dir = run_dir
    if is_main_process():
        save_run_encoder(module, datamodule.tokenizer, run_dir, shared_encoders)
    attach_feature_cache(settings.cache, module, datamodule, progress=bool(settings.trainer.get("enable_progress_bar", True)))
    callbacks = attach_distiller(settings.distill, module)
    has_validation = datamodule.has_split("validation")
    if has_validation:
        check_validation_interval(settings.trainer, datamodule)
    # a pruning search's job reports each validation to its Optuna trial (tasks/runs/trial_pruning.py)
    trial = trial_callbacks(settings.optuna, module.main_metric if has_validation else None, run_dir)
    trainer = build_trainer(settings, run_dir, module.main_metric if has_validation else None, [*callbacks, *trial])
    with sigterm_stops_the_run(run_dir):
        metrics = fit_and_evaluate(settings, trainer, module, datamodule, resume_from)
    for reporter in trial:
        metrics.update(reporter.final_metrics())
    finish_run(module, metrics, run_dir)
    if is_main_process():
        log_comparison(trainer.loggers, job_overrides() if hparams is None else hparams, metrics)
    return metrics


def fit_and_evaluate(settings: RunSettings, trainer: L.Trainer, module: EncoderTaskModule,
                     datamodule: SplitDataModule, resume_from: str | None) -> dict[str, float]:
    """Fit (resuming from ``resume_from``), then the best checkpoint's dev metrics (validated again unless the
    last validation already saw its weights), calibration and test metrics."""
    has_validation = datamodule.has_split("validation")
    with warnings.catch_warnings():
        # The train loaders resume mid-epoch through TrainingResumeCallback (an exact resume is tested),
        # not through Lightning's stateful-loader interface, whose absence Lightning warns about.
        warnings.filterwarnings("ignore", message=".*dataloader is not resumable")
        if not module.unintended_eval_modules():
            # Lightning warns of every module in eval mode when training starts; these are the frozen
            # encoder parts the finetune mode keeps there (dropout off) on purpose.
            warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode at the start of training")
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)

    metrics: dict[str, Any] = {}
    eval_ckpt = best_checkpoint(trainer)
    last = next(c for c in trainer.callbacks if isinstance(c, LastValidation))
    if has_validation and last.step != trainer.global_step:
        log.warning("the final weights (step %d) were never validated (trainer.check_val_every_n_epoch?): "
                    "checkpoints/best.ckpt is the best of the validated steps", trainer.global_step)
    if has_validation:
        # A run whose best checkpoint is its final state (one epoch, or improving to the end) was
        # just validated on exactly these weights: its metrics and prediction files stand.
        final = last.metrics_if_final_is_best(trainer, eval_ckpt)
        if final is None:
            final = flat_metrics(trainer.validate(module, datamodule=datamodule, ckpt_path=eval_ckpt, verbose=False))
        else:
            log.info("best checkpoint = final weights, validated at step %d: not validating again", last.step)
        metrics.update(final)
    metrics.update(training_extent(trainer, eval_ckpt))
    if settings.calibrate:
        metrics.update(calibrate_best(module, eval_ckpt))
    if datamodule.has_split("test"):
        metrics.update(flat_metrics(trainer.test(module, datamodule=datamodule, ckpt_path=eval_ckpt, verbose=False)))
    return metrics


def best_checkpoint(trainer: L.Trainer) -> str:
    """``checkpoints/best.ckpt`` after ``fit``: the checkpoint callback's, or (a run that never validated,
    e.g. ``trainer.check_val_every_n_epoch`` beyond its epochs) the final weights saved there now, so
    every run leaves the best.ckpt that evaluation, prediction and export read."""
    callback = trainer.checkpoint_callback
    best = callback.best_model_path if callback else ""
    if best and Path(best).is_file():
        return best
    path = str(Path(trainer.default_root_dir) / "checkpoints" / "best.ckpt")
    trainer.save_checkpoint(path, weights_only=True)  # every rank calls it; rank 0 writes
    return path


def training_extent(trainer: L.Trainer, best: str) -> dict[str, int | None]:
    """How far the run trained, for ``metrics.json`` and the model card: ``train_steps`` (optimiser steps
    run), ``train_steps_per_epoch`` (None where the loader has no length) and ``best_step`` (the step of
    best.ckpt's weights, which the val / test metrics describe)."""
    batches = trainer.num_training_batches
    per_epoch = math.ceil(batches / trainer.accumulate_grad_batches) if math.isfinite(batches) else None
    return {"train_steps": int(trainer.global_step), "train_steps_per_epoch": per_epoch,
            "best_step": int(load_checkpoint_file(best).get("global_step", -1))}


def calibrate_best(module: EncoderTaskModule, best: str) -> dict[str, Any]:
    """``calibrate=true``: fit the module's temperature on the dev logits of its last validation (the
    best checkpoint's) and write it into ``best.ckpt``, which evaluation, prediction and export read."""
    result = module.calibrate()
    if is_main_process():
        checkpoint = load_checkpoint_file(best)
        checkpoint["state_dict"].update({k: v.detach().clone() for k, v in module.calibrated_state().items()})
        torch_save_atomic(checkpoint, best)
    return result


def finish_run(module: EncoderTaskModule, metrics: dict[str, float], run_dir: Path) -> None:
    """Write ``metrics.json``: the evaluations' metrics as the module computed them (float64 values and
    integer example counts; Lightning keeps float32 copies), losses as Lightning averaged them, and
    what the module learned (e.g. scalar-mix weights)."""
    metrics.update(module.evaluated)
    metrics.update(module.final_metrics())
    if is_main_process():  # every DDP rank holds the same metrics: one writer
        write_json_atomic(run_dir / "metrics.json", metrics)
        print(json.dumps(metrics, indent=2, sort_keys=True))
