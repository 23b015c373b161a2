"""What each GLUE task's TSV holds and how it is scored (``data.task_name``)."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError

#: The metrics of a regression task (STS-B, or data.regression=true).
REGRESSION_METRICS = ("pearson", "spearmanr")
#: The metrics of a multi-label task (data.multi_label=true): micro / macro F1 over the labels at the
#: per-label thresholds tuned on the dev set, and at 0.5 for every label.
MULTILABEL_METRICS = ("f1_micro", "f1_macro", "f1_micro_at_0.5", "f1_macro_at_0.5")


@dataclass(frozen=True)
class GlueTaskSpec:
    """Columns are header names, or 0-based indices for files without a header (CoLA)."""

    text_a: str | int
    text_b: str | int | None
    label: str | int
    labels: tuple[str, ...] | None  # None: regression (float target)
    metrics: tuple[str, ...]  # the first is the task's main metric
    submission_name: str  # GLUE leaderboard file name
    has_header: bool = True
    label_range: tuple[float, float] | None = None  # regression: the scores a file may hold
    multi_label: bool = False  # each example has a set of labels (data.multi_label, tables only)
    label_separator: str = "|"  # multi-label: joins the labels of one example in a text column

    @property
    def is_regression(self) -> bool:
        return self.labels is None


GLUE_TASKS: dict[str, GlueTaskSpec] = {
    "cola": GlueTaskSpec(3, None, 1, ("0", "1"), ("matthews_correlation",), "CoLA", has_header=False),
    "sst2": GlueTaskSpec("sentence", None, "label", ("0", "1"), ("accuracy",), "SST-2"),
    "mrpc": GlueTaskSpec("#1 String", "#2 String", "Quality", ("0", "1"), ("f1", "accuracy"), "MRPC"),
    "qqp": GlueTaskSpec("question1", "question2", "is_duplicate", ("0", "1"), ("f1", "accuracy"), "QQP"),
    "stsb": GlueTaskSpec("sentence1", "sentence2", "score", None, ("pearson", "spearmanr"), "STS-B", label_range=(0.0, 5.0)),
    "mnli": GlueTaskSpec(
        "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral"), ("accuracy",), "MNLI-m"
    ),
    "qnli": GlueTaskSpec("question", "sentence", "label", ("entailment", "not_entailment"), ("accuracy",), "QNLI"),
    "rte": GlueTaskSpec("sentence1", "sentence2", "label", ("entailment", "not_entailment"), ("accuracy",), "RTE"),
    "wnli": GlueTaskSpec("sentence1", "sentence2", "label", ("0", "1"), ("accuracy",), "WNLI"),
}


def glue_spec(task_name: str) -> GlueTaskSpec:
    if task_name not in GLUE_TASKS:
        raise ConfigError(f"data.task_name={task_name!r} is not a GLUE task; use one of {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[task_name]


def glue_main_metric(task_name: str) -> str:
    """The metric GLUE ranks a task by (its first): what ``task.main_metric`` of ``conf/task/glue.yaml`` reads."""
    return glue_spec(task_name).metrics[0]
