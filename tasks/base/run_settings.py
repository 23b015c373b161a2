"""The typed view of a whole run config: every block read once, by the class that owns it.

``RunSettings.from_config(cfg)`` is what training, evaluation, a trained model read back
(``tasks/saved/checkpoints.py`` ``TrainedModel.settings``), an ONNX export
(``tasks/inference/onnx_runner.py``), predictions and the model card all read a config through. The
task's own blocks (``cfg.data``, ``cfg.head``) are read by the classes its ``conf/task/*.yaml`` names
(``task.data_settings``, ``task.head_settings``), so nothing generic knows a task's keys. Defaults
live in ``conf/`` only: a trained config lacking a key sesame added later gets it there
(``tasks/saved/config_upgrade.py``) before it is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings
from sesame.tasks.encoders.encoder import EncoderSettings
from sesame.tasks.encoders.finetune import FinetuneSettings
from sesame.tasks.inputs.data_settings import DataSettings


@dataclass(frozen=True)
class TaskSettings(Settings):
    """``cfg.task`` (``conf/task/*.yaml``): the task's classes (the one place a task is registered: generic
    code reaches a task only through these names), and the metric that picks the best checkpoint
    (higher is better), which is also the job's return value in sweeps."""

    group = "task"
    name: str
    module: str  # the Lightning module class
    datamodule: str  # the Lightning data module class
    predictor: str  # its base.predictor.TaskPredictor subclass (sesame-predict)
    export: str  # its base.export.TaskExport subclass (sesame-export, the model card)
    data_settings: str  # the settings class of cfg.data
    head_settings: str  # the settings class of cfg.head
    main_metric: str
    entity_metric: str | None = None  # task=ner only: conlleval | strict


@dataclass(frozen=True)
class FusionSettings(Settings):
    """``cfg.fusion`` (``conf/fusion/*.yaml``): which hidden states make the feature (``heads/fusion.py``)."""

    group = "fusion"
    mode: str
    layers: tuple[int, ...] | None = None  # fusion=layers only
    combine: str | None = None  # fusion=layers only: mean | sum | concat


def task_class(task: TaskSettings, role: str) -> type:
    """The class ``task.<role>`` names (``module``, ``datamodule``, ``predictor``, ``export``,
    ``data_settings``, ``head_settings``)."""
    path = getattr(task, role)
    try:
        return get_class(path)
    except (ImportError, ValueError, AttributeError) as err:
        raise ConfigError(f"task.{role}={path!r} (task={task.name}) names no class that can be imported: {err}. "
                          f"Fix: name a class as package.module.Class (see conf/task/{task.name}.yaml)") from None


@dataclass(frozen=True)
class RunSettings:
    """Every block of a run config, typed (see the module doc).

    ``data`` and ``head`` are instances of the classes the task names; ``seed`` and ``calibrate`` are
    the config's top-level keys.
    """

    task: TaskSettings
    encoder: EncoderSettings
    fusion: FusionSettings
    finetune: FinetuneSettings
    data: DataSettings
    head: Settings
    seed: int
    calibrate: bool

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | DictConfig) -> RunSettings:
        task = TaskSettings.from_config(cfg["task"])
        return cls(
            task=task,
            encoder=EncoderSettings.from_config(cfg["encoder"]),
            fusion=FusionSettings.from_config(cfg["fusion"]),
            finetune=FinetuneSettings.from_config(cfg["finetune"]),
            data=task_class(task, "data_settings").from_config(cfg["data"]),
            head=task_class(task, "head_settings").from_config(cfg["head"]),
            seed=int(cfg["seed"]),
            calibrate=bool(cfg["calibrate"]),
        )
