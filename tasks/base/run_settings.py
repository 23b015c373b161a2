"""The typed view of a whole run config: every block read once, by the class that owns it.

``RunSettings.from_config(cfg)`` is what training, evaluation, a trained model read back
(``tasks/saved/checkpoints.py`` ``TrainedModel.settings``), an ONNX export
(``tasks/inference/onnx_runner.py``), predictions and the model card all read a config through. The
task's own blocks (``cfg.data``, ``cfg.head``) are read by the classes its ``conf/task/*.yaml`` names
(``task.data_settings``, ``task.head_settings``), so nothing generic knows a task's keys. The
``trainer`` block is :class:`TrainerSettings`: sesame's own keys typed, every other key checked
against ``lightning.Trainer``'s arguments. Defaults live in ``conf/`` only: a trained config lacking a
key sesame added later gets it there (``tasks/saved/config_upgrade.py``) before it is read here.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from sesame.tasks.base.distill_settings import DistillSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings, checked_value, plain
from sesame.tasks.encoders.encoder_settings import EncoderSettings
from sesame.tasks.encoders.finetune_settings import FinetuneSettings
from sesame.tasks.inputs.cache_settings import CacheSettings
from sesame.tasks.inputs.data_settings import DataSettings
from sesame.tasks.base.checkpoint_settings import CheckpointSettings
from sesame.tasks.base.logger_settings import LoggerSettings
from sesame.tasks.base.optuna_settings import OptunaTrialSettings


@dataclass(frozen=True)
class TaskSettings(Settings):
    """``cfg.task`` (``conf/task/*.yaml``): the task's classes (the one place a task is registered: generic
    code reaches a task only through these names), and the metric that picks the best checkpoint
    (higher is better), which is also the job's return value in sweeps.

    A task with keys of its own in this block (``task=ner``: ``entity_metric``) names a subclass in
    ``task.settings``, which reads the whole block; the others name this class.
    """

    group = "task"
    name: str
    settings: str  # the class that reads this block: TaskSettings, or the task's subclass
    network: str  # the task's network, plain torch (tasks/base/task_network.py): what predicting builds
    module: str  # the Lightning module class: the network trained and evaluated
    datamodule: str  # the Lightning data module class
    predictor: str  # its base.predictor.TaskPredictor subclass (sesame-predict)
    export: str  # its base.export.TaskExport subclass (sesame-export, the model card)
    data_settings: str  # the settings class of cfg.data
    head_settings: str  # the settings class of cfg.head
    main_metric: str

    @classmethod
    def from_config(cls, block: Mapping[str, Any] | DictConfig | None) -> TaskSettings:
        """The block read by the class its ``settings`` key names (unknown and missing keys are errors there)."""
        raw = plain(block) if block is not None else {}
        chosen = cls
        if cls is TaskSettings and isinstance(raw, Mapping) and raw.get("settings"):
            try:
                chosen = get_class(str(raw["settings"]))
            except (ImportError, ValueError, AttributeError) as err:
                raise ConfigError(f"task.settings={raw['settings']!r} names no class that can be imported: {err}. "
                                  "Fix: name a TaskSettings class as package.module.Class") from None
            if not (isinstance(chosen, type) and issubclass(chosen, TaskSettings)):
                raise ConfigError(f"task.settings={raw['settings']!r} is not a TaskSettings class")
        return super(TaskSettings, chosen).from_config(raw)


@dataclass(frozen=True)
class FusionSettings(Settings):
    """``cfg.fusion`` (``conf/fusion/*.yaml``): which hidden states make the feature (``heads/fusion.py``)."""

    group = "fusion"
    mode: str
    layers: tuple[int, ...] | None = None  # fusion=layers only
    combine: str | None = None  # fusion=layers only: mean | sum | concat


@dataclass(frozen=True)
class HeadSettings(Settings):
    """The base of each task's ``cfg.head`` class (``task.head_settings``)."""

    group = "head"
    #: Head settings that belong to the trained weights (a CRF's transitions, the loss a head was
    #: trained with): a trained model's are never overridden (``tasks/saved/trained_overrides.py``).
    weight_keys: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class PoolingSettings(Settings):
    """``cfg.pooling`` (``conf/pooling/*.yaml``): how token features become one vector (``heads/pooling.py``),
    for every task whose head reads one vector per sequence (sentence classification, multiple choice)."""

    group = "pooling"
    name: str


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
class EarlyStoppingSettings(Settings):
    """``cfg.trainer.early_stopping`` (``conf/trainer/default.yaml``; ``tasks/runs/early_stopping.py``);
    not passed to ``lightning.Trainer``."""

    group = "trainer.early_stopping"
    patience: int | None  # validations without improvement before training stops; None: never stop early
    min_delta: float      # an improvement of the main metric by this much or less counts as none

    def __post_init__(self) -> None:
        if self.patience is not None and self.patience < 1:
            raise ConfigError(f"trainer.early_stopping.patience={self.patience}: use a positive number "
                              "(validations without improvement), or null to train all trainer.max_epochs")
        if self.min_delta < 0:
            raise ConfigError(f"trainer.early_stopping.min_delta={self.min_delta}: use 0 or a positive number")

    @property
    def enabled(self) -> bool:
        return self.patience is not None


#: Trainer arguments sesame sets itself, and why: a ``trainer.<key>`` for them is refused, not replaced.
OWN_TRAINER_ARGS = {
    "default_root_dir": "the run folder is hydra.run.dir",
    "callbacks": "sesame's checkpoints, resume and stopping callbacks",
    "logger": "the logger group (logger=csv|tensorboard|mlflow|wandb)",
    "plugins": "atomic, data-only checkpoint files",
    "use_distributed_sampler": "sesame's samplers shard themselves across DDP ranks (tasks/inputs/batching.py), "
                               "so Lightning's wrapper stays off",
}


def lightning_trainer_args() -> set[str]:
    """The keyword arguments of ``lightning.Trainer`` that a config may set (all but those sesame sets)."""
    import lightning as L  # only to read its signature

    return set(inspect.signature(L.Trainer.__init__).parameters) - {"self", *OWN_TRAINER_ARGS}


def check_trainer_keys(kwargs: Mapping[str, Any]) -> None:
    """Every ``trainer.*`` key (beside sesame's own, :class:`TrainerSettings`) must be a ``lightning.Trainer``
    argument sesame leaves to the config: a misspelt one names itself and its closest match, one that
    sesame sets says why, instead of failing inside Lightning or being silently replaced."""
    accepted = lightning_trainer_args()
    for key in kwargs:
        if key in OWN_TRAINER_ARGS:
            raise ConfigError(f"trainer.{key}: sesame sets it itself ({OWN_TRAINER_ARGS[key]}). Fix: drop the setting")
        if key not in accepted:
            close = difflib.get_close_matches(key, sorted(accepted), n=1)
            hint = f"did you mean trainer.{close[0]}? " if close else ""
            raise ConfigError(f"trainer.{key} is not a lightning.Trainer argument that sesame passes on. Fix: {hint}"
                              "see `sesame-train --cfg job` for the trainer block and Lightning's Trainer documentation")


@dataclass(frozen=True)
class TrainerSettings:
    """``cfg.trainer`` (``conf/trainer/*.yaml``): sesame's own keys, typed, and the arguments it passes to
    ``lightning.Trainer`` unchanged (``lightning``), each checked to be one of its arguments that sesame
    leaves to the config (:func:`check_trainer_keys`: a misspelt key is a :class:`ConfigError` naming
    the closest argument).

    A trainer block written before ``early_stopping`` / ``compile`` / ``ddp_timeout_s`` /
    ``malloc_mmap_threshold_mb`` / ``onednn_primitive_cache`` existed (an older run's) has them off: ``early_stopping``
    None, ``compile`` false, ``ddp_timeout_s`` None (Lightning's 30 minutes), the threshold glibc's own, the cache
    oneDNN's own.
    """

    group: ClassVar[str] = "trainer"
    #: sesame's own keys: read here, never passed to Lightning.
    OWN_KEYS: ClassVar[tuple[str, ...]] = ("early_stopping", "compile", "ddp_timeout_s", "malloc_mmap_threshold_mb",
                                           "onednn_primitive_cache")
    early_stopping: EarlyStoppingSettings | None  # tasks/runs/early_stopping.py
    compile: bool  # torch.compile the encoder (tasks/runs/compilation.py)
    ddp_timeout_s: float | None  # the process group's timeout (tasks/runs/process_launch.py)
    #: glibc's mmap threshold fixed at this many MiB for the run (tasks/runs/heap.py); None: glibc's own.
    malloc_mmap_threshold_mb: int | None
    #: oneDNN's primitive cache bounded at this many primitives for the run (tasks/runs/onednn_cache.py); None: oneDNN's.
    onednn_primitive_cache: int | None
    # every other key: lightning.Trainer's keyword arguments, as given (a plain dict, so settings pickle and
    # deep-copy with the modules holding them; read it through get / trainer_kwargs, never change it)
    lightning: dict[str, Any] = field(hash=False)

    @classmethod
    def from_config(cls, block: Mapping[str, Any] | DictConfig | None, *, check: bool = True) -> TrainerSettings:
        """``check=False``: the Lightning arguments are not checked here (that imports Lightning): a trained
        model's block, a record of how it trained, is never held to the installed Lightning, and a run's
        is checked by :meth:`check_lightning_arguments` before any work."""
        raw = plain(block) if block is not None else {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"trainer: expected a block of settings, got {raw!r}")
        kwargs = dict(raw)
        stopping = kwargs.pop("early_stopping", None)
        compile_encoder = bool(kwargs.pop("compile", False))
        timeout = kwargs.pop("ddp_timeout_s", None)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ConfigError(f"trainer.ddp_timeout_s={timeout!r}: expected a number of seconds > 0 (or null: "
                              "Lightning's 30 minutes)")
        threshold = kwargs.pop("malloc_mmap_threshold_mb", None)
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int)
                                      or not 1 <= threshold <= 32):
            raise ConfigError(f"trainer.malloc_mmap_threshold_mb={threshold!r}: expected a whole number of MiB "
                              "from 1 to 32 (glibc's range), or null")
        capacity = kwargs.pop("onednn_primitive_cache", None)
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0):
            raise ConfigError(f"trainer.onednn_primitive_cache={capacity!r}: expected a whole number of primitives >= 0 "
                              "(0 keeps none), or null (oneDNN's 1,024)")
        if check:
            check_trainer_keys(kwargs)
        return cls(
            early_stopping=EarlyStoppingSettings.from_config(stopping) if stopping is not None else None,
            compile=compile_encoder,
            ddp_timeout_s=float(timeout) if timeout is not None else None,
            malloc_mmap_threshold_mb=threshold,
            onednn_primitive_cache=capacity,
            lightning=kwargs,
        )

    def check_lightning_arguments(self) -> None:
        """Every Lightning argument of the block is one of ``lightning.Trainer``'s that sesame leaves to the
        config (:func:`check_trainer_keys`; imports Lightning)."""
        check_trainer_keys(self.lightning)

    def get(self, key: str, default: Any = None) -> Any:
        """A ``lightning.Trainer`` argument as the config gives it (``default`` where it is not set)."""
        return self.lightning.get(key, default)

    def trainer_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for ``lightning.Trainer`` (a copy)."""
        return dict(self.lightning)


@dataclass(frozen=True)
class RunSettings:
    """Every block of a run config, typed (see the module doc): built once, where a command starts, and
    passed down; nothing below reads the raw config again.

    ``data`` and ``head`` are instances of the classes the task names; ``seed``, ``calibrate``,
    ``resume`` and ``overwrite`` are the config's top-level keys (``conf/config.yaml``), ``model``
    ``sesame-eval``'s (``conf/eval.yaml``: what to evaluate; None in other configs, or not set).
    ``cache``, ``checkpoint``, ``distill`` and ``logger`` are None where the config has no such block
    (``sesame-eval``'s, a trained model's). ``config`` is the config itself as resolved plain data: the
    run's record (``config.yaml``, the checkpoints' ``hyper_parameters.cfg``), never read for settings.
    """

    task: TaskSettings
    encoder: EncoderSettings
    fusion: FusionSettings
    finetune: FinetuneSettings
    data: DataSettings
    head: Settings
    trainer: TrainerSettings
    seed: int
    calibrate: bool
    resume: bool | str | None  # true: this run folder's last checkpoint; a run folder or .ckpt; null: none
    init_from: str | None  # a run folder or .ckpt whose weights the model starts from (null: pretrained)
    overwrite: bool
    model: str | None = None  # sesame-eval only
    pooling: PoolingSettings | None = None  # cfg.pooling, where the config has the group
    cache: CacheSettings | None = None
    checkpoint: CheckpointSettings | None = None
    distill: DistillSettings | None = None
    logger: LoggerSettings | None = None
    optuna: OptunaTrialSettings | None = None  # the Optuna trial a pruning search's job is (None: not one)
    config: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    trained: bool = False  # read with of_trained: a record, not a run about to start

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | DictConfig) -> RunSettings:
        """The settings of a config about to run (training, evaluation). The Lightning arguments of its
        trainer block are checked by ``trainer.check_lightning_arguments()``, which imports Lightning:
        everything else is checked here, before torch is imported."""
        return cls._read(cfg, trained=False)

    @classmethod
    def of_trained(cls, cfg: Mapping[str, Any] | DictConfig) -> RunSettings:
        """The settings a trained model was built with (its checkpoint's or export's config): a record of
        how it trained, so its logger block is not read (its package need not be installed here)."""
        return cls._read(cfg, trained=True)

    def updated(self, updates: Mapping[str, Any] | DictConfig) -> RunSettings:
        """These settings with ``updates`` merged into the config (what the data decides: label sets;
        a trained model's overrides), read again the way these were."""
        if not updates:
            return self
        return self._read(OmegaConf.merge(self.config, updates), trained=self.trained)

    @classmethod
    def _read(cls, cfg: Mapping[str, Any] | DictConfig, *, trained: bool) -> RunSettings:
        config = plain_config(cfg)
        task = TaskSettings.from_config(config["task"])

        def optional(key: str, settings: type[Settings]) -> Any:
            return settings.from_config(config[key]) if config.get(key) is not None else None

        return cls(
            task=task,
            encoder=EncoderSettings.from_config(config["encoder"]),
            fusion=FusionSettings.from_config(config["fusion"]),
            finetune=FinetuneSettings.from_config(config["finetune"]),
            data=task_class(task, "data_settings").from_config(config["data"]),
            head=task_class(task, "head_settings").from_config(config["head"]),
            pooling=optional("pooling", PoolingSettings),
            trainer=TrainerSettings.from_config(config["trainer"], check=False),
            seed=checked_value(config["seed"], int, "seed"),
            calibrate=checked_value(config["calibrate"], bool, "calibrate"),
            resume=config["resume"],
            init_from=config["init_from"],
            overwrite=bool(config["overwrite"]),
            model=_model(config),
            cache=optional("cache", CacheSettings),
            checkpoint=optional("checkpoint", CheckpointSettings),
            distill=optional("distill", DistillSettings),
            logger=None if trained else optional("logger", LoggerSettings),
            optuna=None if trained else optional("optuna", OptunaTrialSettings),
            config=config,
            trained=trained,
        )


def plain_config(cfg: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """``cfg`` resolved, as plain data (a copy): what a run records and what its settings are read from."""
    return plain(cfg) if isinstance(cfg, DictConfig) else copy.deepcopy(dict(cfg))


def _model(cfg: Mapping[str, Any]) -> str | None:
    """``cfg.model`` (``sesame-eval``): None where the config has none or leaves it unset (``???``)."""
    value = cfg.get("model")
    return None if value is None or value == "???" else str(value)
