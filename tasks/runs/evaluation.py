"""Evaluate a trained model: a sesame run folder or checkpoint, or a Hugging Face ``...For<Task>`` folder.

``model`` names what to evaluate (``conf/eval.yaml``; ``RunSettings.model``). The evaluation itself is the same
validate / test path a training run ends with (``tasks/base/task_module.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from sesame.tasks.saved.checkpoints import build_module, is_hf_model_folder, load_trained
from sesame.tasks.saved.int8 import QUANTIZED_TRAINER, is_quantized
from sesame.tasks.encoders.encoder import check_tokenizer_fits
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.known_noise import known_noise_silenced
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.runs.process_launch import check_launch
from sesame.tasks.runs.run_lock import holds_run_folder
from sesame.tasks.runs.runner import build_datamodule, build_trainer, settings_with_data, finish_run, flat_metrics
from sesame.tasks.saved.trained_overrides import TrainedOverrides, evaluation_data

log = logging.getLogger(__name__)


def load_for_evaluation(settings: RunSettings, overrides: Sequence[str] = ()) -> tuple[EncoderTaskModule | None, RunSettings]:
    """The module to evaluate (None for a Hugging Face folder: built once its data is read), and the
    settings its data must be read with.

    ``overrides`` are the command line's (Hydra's ``key=value`` strings): for a trained sesame model,
    its own config is the base and the ``encoder.*`` / ``head.*`` settings named there are applied
    over it; its data comes from this command, with the settings that define the model's outputs and
    inputs kept (``tasks/saved/trained_overrides.py``: ``TrainedOverrides``, ``evaluation_data``).
    """
    if settings.model is None:
        raise ConfigError("sesame-eval needs model=<run folder | .ckpt | Hugging Face model folder> "
                          "(the key was called checkpoint= before)")
    source = Path(settings.model).expanduser()
    if is_hf_model_folder(source):
        return None, settings.updated({"encoder": {"name_or_path": str(source)}})
    named = TrainedOverrides.of_command(settings.config, overrides, source)
    trained = load_trained(source, overrides=named)
    task = trained.settings.task.name
    if task != settings.task.name:
        raise ConfigError(f"{trained.checkpoint} was trained for task={task}, not task={settings.task.name}. "
                          f"Fix: pass task={task}")
    # The trained model's settings; this command's data files and trainer; never the training file.
    data, said = evaluation_data(trained.settings.data, settings.data, named)
    for line in said:
        log.info("%s", line)
    data = OmegaConf.merge(settings.config["data"], data)
    # The encoder (and its tokenizer) load from where the trained model's did.
    encoder = {**trained.cfg["encoder"], "name_or_path": trained.encoder_folder, "tokenizer": trained.tokenizer_source}
    evaluated = OmegaConf.merge(trained.cfg, {"data": data, "trainer": settings.config["trainer"], "encoder": encoder,
                                              "logger": settings.config.get("logger")})
    if is_quantized(trained.cfg):  # int8 kernels run on CPU
        evaluated = OmegaConf.merge(evaluated, {"trainer": QUANTIZED_TRAINER})
    return trained.module, RunSettings.from_config(evaluated)


@holds_run_folder
@known_noise_silenced()
def evaluate(settings: RunSettings, run_dir: Path, overrides: Sequence[str] = ()) -> dict[str, float]:
    """Validate / test the model ``model=`` names; write metrics and predictions into ``run_dir``.
    ``overrides``: the command line's, see :func:`load_for_evaluation`."""
    settings.trainer.check_lightning_arguments()
    check_launch(settings.trainer)  # a launch of another process count than num_nodes x devices
    module, settings = load_for_evaluation(settings, overrides)
    datamodule = build_datamodule(settings)
    datamodule.setup("validate")
    if module is None:  # a Hugging Face folder: the encoder loads from it, the head from its task weights
        settings = settings_with_data(settings, datamodule)
        module = build_module(settings)
        module.load_hf_head(settings.encoder.name_or_path)
    check_tokenizer_fits(datamodule.tokenizer, module.encoder.config, module.encoder.name_or_path)
    module.output_dir = run_dir
    trainer = build_trainer(settings, run_dir, monitor=None)
    metrics: dict[str, float] = {}
    if datamodule.has_split("validation"):
        metrics.update(flat_metrics(trainer.validate(module, datamodule=datamodule, verbose=False)))
    if datamodule.has_split("test"):
        metrics.update(flat_metrics(trainer.test(module, datamodule=datamodule, verbose=False)))
    finish_run(module, metrics, run_dir)
    return metrics
