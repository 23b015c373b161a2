"""The GLUE / text-classification task's settings: ``cfg.data`` (GLUE and table files), ``cfg.pooling`` and
``cfg.head``. Plain data: importing them loads no Lightning."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings
from sesame.tasks.inputs.data_settings import DataSettings

@dataclass(frozen=True, kw_only=True)
class GlueDataSettings(DataSettings):
    """``cfg.data`` for ``task=glue`` (``conf/data/sst2_slice.yaml`` and the presets built on it)."""

    task_name: str
    validation_mismatched_file: str | None  # MNLI only
    label_names: tuple[str, ...] | None  # null: the GLUE task's own


@dataclass(frozen=True, kw_only=True)
class TableDataSettings(DataSettings):
    """``cfg.data`` for ``task=text_classification`` (``conf/data/table.yaml``)."""

    text_column: str
    text_pair_column: str | None
    label_column: str
    label_names: tuple[str, ...] | None  # null: the sorted label values of the training file
    regression: bool
    multi_label: bool  # each example has a set of labels (BCE loss, per-label thresholds)
    label_separator: str  # multi-label: joins an example's labels in a CSV/TSV column ("a|b")
    metrics: tuple[str, ...]  # the first is the main metric (task.main_metric)


@dataclass(frozen=True)
class PoolingSettings(Settings):
    """``cfg.pooling`` (``conf/pooling/*.yaml``): how token features become one vector (``heads/pooling.py``)."""

    group = "pooling"
    name: str


@dataclass(frozen=True)
class ClassifierHeadSettings(Settings):
    """``cfg.head`` of ``conf/task/glue.yaml`` and ``conf/task/text_classification.yaml``."""

    group = "head"
    dropout: float
    class_weights: tuple[float, ...] | str | None  # null | "balanced" | one weight per label, in label order
    label_smoothing: float  # in [0, 1)

    def __post_init__(self) -> None:
        if isinstance(self.class_weights, str) and self.class_weights != "balanced":
            raise ConfigError(f"head.class_weights={self.class_weights!r}: use null, balanced, or a list with one "
                              "weight per label, e.g. head.class_weights=[1.0,4.0]")
        if isinstance(self.class_weights, tuple):
            bad = [w for w in self.class_weights if not (math.isfinite(w) and w > 0)]
            if bad or not self.class_weights:
                raise ConfigError(f"head.class_weights={list(self.class_weights)}: each weight must be a positive number")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"head.label_smoothing={self.label_smoothing}: must be at least 0 and below 1 (0: off)")
