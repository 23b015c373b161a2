"""The GLUE / text-classification task's settings: ``cfg.data`` (GLUE and table files), ``cfg.pooling`` and
``cfg.head``. Plain data: importing them loads no Lightning."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.run_settings import HeadSettings
from sesame.tasks.glue.metrics import METRICS
from sesame.tasks.glue.specs import MULTILABEL_METRICS, REGRESSION_METRICS, GlueTaskSpec, glue_spec
from sesame.tasks.inputs.data_settings import DataSettings
from sesame.tasks.inputs.holdout import check_holdout_fraction


@dataclass(frozen=True, kw_only=True)
class SentenceDataSettings(DataSettings):
    """What both sentence-task data settings have beyond every task's: a held-out share of the training
    file to validate on instead of the dev file (``tasks/inputs/holdout.py``)."""

    holdout_fraction: float | None  # null: validate on data.validation_file
    holdout_seed: int  # which examples are held out (the same for every job of a sweep)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_holdout_fraction(self.holdout_fraction)


@dataclass(frozen=True, kw_only=True)
class GlueDataSettings(SentenceDataSettings):
    """``cfg.data`` for ``task=glue`` (``conf/data/sst2_slice.yaml`` and the presets built on it)."""

    output_keys = ("label_names",)

    task_name: str
    validation_mismatched_file: str | None  # MNLI only
    label_names: tuple[str, ...] | None  # null: the GLUE task's own

    def task_spec(self) -> GlueTaskSpec:
        """How this data defines the task: its labels (or regression), text columns and metrics."""
        spec = glue_spec(self.task_name)
        if self.label_names and spec.labels is not None:
            spec = replace(spec, labels=tuple(str(n) for n in self.label_names))
        return spec


@dataclass(frozen=True, kw_only=True)
class TableDataSettings(SentenceDataSettings):
    """``cfg.data`` for ``task=text_classification`` (``conf/data/table.yaml``)."""

    output_keys = ("label_names", "multi_label", "label_separator", "regression", "metrics")

    text_column: str
    text_pair_column: str | None
    label_column: str
    label_names: tuple[str, ...] | None  # null: the sorted label values of the training file
    regression: bool
    multi_label: bool  # each example has a set of labels (BCE loss, per-label thresholds)
    label_separator: str  # multi-label: joins an example's labels in a CSV/TSV column ("a|b")
    metrics: tuple[str, ...]  # the first is the main metric (task.main_metric)

    def task_spec(self) -> GlueTaskSpec:
        """How this data defines the task: its labels (or regression), text columns and metrics."""
        metrics = tuple(self.metrics)
        if not metrics:
            raise ConfigError("data.metrics is empty: list the metrics to report, the main one first")
        if self.regression and self.multi_label:
            raise ConfigError("data.regression=true and data.multi_label=true: a task is one or the other. "
                              "Fix: set one of them to false")
        if self.multi_label and not self.label_separator:
            raise ConfigError("data.label_separator is empty: name the text that joins an example's labels, e.g. '|'")
        if self.regression:
            kind, allowed = "data.regression=true", REGRESSION_METRICS
            fix = f"set data.metrics=[{','.join(REGRESSION_METRICS)}]"
        elif self.multi_label:
            kind, allowed = "data.multi_label=true", MULTILABEL_METRICS
            fix = "set data.metrics=[f1_micro,f1_macro] (the first is the main metric; all four are reported)"
        else:
            kind, allowed = "single-label classification", tuple(sorted(METRICS.keys() - set(REGRESSION_METRICS)))
            fix = "use accuracy / f1 / matthews_correlation, or set data.regression=true or data.multi_label=true"
        wrong = [m for m in metrics if m not in allowed]
        if wrong:
            raise ConfigError(f"data.metrics={list(metrics)}: {wrong} cannot score {kind}, which reports "
                              f"{'/'.join(allowed)}. Fix: {fix}")
        return GlueTaskSpec(
            text_a=self.text_column,
            text_b=self.text_pair_column,
            label=self.label_column,
            labels=None if self.regression else tuple(str(n) for n in self.label_names or ()),
            metrics=metrics,
            submission_name="predictions",
            multi_label=self.multi_label,
            label_separator=self.label_separator,
        )


@dataclass(frozen=True)
class ClassifierHeadSettings(HeadSettings):
    """``cfg.head`` of ``conf/task/glue.yaml`` and ``conf/task/text_classification.yaml``."""

    weight_keys = ("dropout", "class_weights", "label_smoothing")
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
