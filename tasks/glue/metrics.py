"""GLUE metrics, as the GLUE benchmark defines them (0-1 scale), and multi-label F1.

CoLA: Matthews correlation; SST-2, QNLI, RTE, WNLI, MNLI: accuracy; MRPC, QQP: F1 of the positive
class and accuracy; STS-B: Pearson and Spearman correlation. Multi-label tables
(``data.multi_label=true``): micro and macro F1 (torchmetrics) at per-label thresholds
(:func:`tune_thresholds`) and at 0.5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.glue.readers import encode_labels, encode_multi_labels, first_data_line, read_glue_tsv, read_table

# scipy and torchmetrics are imported where a metric needs them: the settings read METRICS' names at
# every start, predictions included, and the two cost about a second of import.


def accuracy(predictions: np.ndarray, references: np.ndarray) -> float:
    return float(np.mean(predictions == references))


def binary_f1(predictions: np.ndarray, references: np.ndarray, positive: int = 1) -> float:
    tp = float(np.sum((predictions == positive) & (references == positive)))
    fp = float(np.sum((predictions == positive) & (references != positive)))
    fn = float(np.sum((predictions != positive) & (references == positive)))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews_correlation(predictions: np.ndarray, references: np.ndarray) -> float:
    """Multi-class Matthews correlation (Gorodkin's R_K), 0 when undefined, as scikit-learn."""
    classes = np.union1d(predictions, references)
    confusion = np.zeros((classes.size, classes.size))
    np.add.at(confusion, (np.searchsorted(classes, references), np.searchsorted(classes, predictions)), 1)
    t, p = confusion.sum(axis=1), confusion.sum(axis=0)
    c, s = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((s**2 - p @ p) * (s**2 - t @ t))
    return 0.0 if denominator == 0 else float((c * s - t @ p) / denominator)


def pearson(predictions: np.ndarray, references: np.ndarray) -> float:
    from scipy import stats

    return float(stats.pearsonr(predictions, references)[0])


def spearmanr(predictions: np.ndarray, references: np.ndarray) -> float:
    from scipy import stats

    return float(stats.spearmanr(predictions, references)[0])


METRICS = {
    "accuracy": accuracy,
    "f1": binary_f1,
    "matthews_correlation": matthews_correlation,
    "pearson": pearson,
    "spearmanr": spearmanr,
}


def compute_metrics(names: Sequence[str], predictions: Sequence, references: Sequence) -> dict[str, float]:
    """``{name: value}`` for the named metrics; predictions are class ids or floats (regression)."""
    preds, refs = np.asarray(predictions), np.asarray(references)
    if preds.shape != refs.shape:
        raise ValueError(f"{preds.shape[0]} predictions for {refs.shape[0]} references")
    return {name: METRICS[name](preds, refs) for name in names}


# Multi-label ------------------------------------------------------------------------------------
def tune_thresholds(probabilities: np.ndarray, gold: np.ndarray, default: float = 0.5) -> np.ndarray:
    """Per label, the decision threshold that maximises that label's F1 on this data.

    Args:
        probabilities: [N, C] each example's probability of each label (float32: the thresholds are
            exact float32 values, so ``probabilities >= thresholds`` reproduces the chosen decisions).
        gold: [N, C] bool (or 0/1), the labels each example has.
        default: the threshold of a label no example has (its F1 is 0 whatever the threshold).

    Returns:
        [C] float32. A label is predicted where ``probability >= threshold``. Every cut between two
        distinct probabilities is tried (all of them at once, per label, from the sorted
        probabilities); of equally good cuts the highest wins, and the threshold sits halfway between
        the lowest probability predicted positive and the next lower one (0 below the lowest).
    """
    p = np.asarray(probabilities, dtype=np.float32)
    y = np.asarray(gold).astype(bool)
    n, c = p.shape
    order = np.argsort(-p, axis=0, kind="stable")
    ranked = np.take_along_axis(p, order, axis=0)  # [N, C], descending per label
    true_pos = np.cumsum(np.take_along_axis(y, order, axis=0), axis=0)  # [N, C]: positives among the top k
    positives = y.sum(axis=0)  # [C]
    predicted = np.arange(1, n + 1)[:, None]  # [N, 1]: k, the examples predicted positive
    f1 = 2.0 * true_pos / (predicted + positives)
    cut = np.ones_like(ranked, dtype=bool)  # a cut must not split equal probabilities
    cut[:-1] = ranked[:-1] != ranked[1:]
    best = np.where(cut, f1, -1.0).argmax(axis=0)  # [C]; argmax takes the first (highest) of ties
    columns = np.arange(c)
    lowest_in = ranked[best, columns].astype(np.float64)
    next_out = np.where(best + 1 < n, ranked[np.minimum(best + 1, n - 1), columns], 0.0).astype(np.float64)
    middle = ((lowest_in + next_out) / 2).astype(np.float32)
    # float32 rounding can land the midpoint on the lower neighbour: then cut at the lowest one kept.
    thresholds = np.where(middle > next_out, middle, lowest_in.astype(np.float32))
    return np.where(positives > 0, thresholds, np.float32(default)).astype(np.float32)


def multilabel_f1(predicted: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """``(micro F1, macro F1)`` of [N, C] 0/1 decisions against [N, C] 0/1 gold labels, with
    torchmetrics' ``MultilabelF1Score``; a label with neither gold nor predicted examples has F1 0
    (as scikit-learn's ``zero_division=0``) and counts in the macro mean."""
    import torch  # here, not at the top: the task's settings read METRICS, and a config check loads no torch
    from torchmetrics.classification import MultilabelF1Score

    preds = torch.as_tensor(np.asarray(predicted).astype(np.int64))
    target = torch.as_tensor(np.asarray(gold).astype(np.int64))
    num_labels = int(target.shape[1])
    return tuple(  # type: ignore[return-value]
        float(MultilabelF1Score(num_labels=num_labels, average=average, zero_division=0)(preds, target))
        for average in ("micro", "macro")
    )


def multilabel_metrics(probabilities: np.ndarray, gold: np.ndarray, thresholds: np.ndarray) -> dict[str, float]:
    """``f1_micro`` / ``f1_macro`` at ``thresholds`` [C] and ``f1_micro_at_0.5`` / ``f1_macro_at_0.5``
    (a label predicted where its probability is at least 0.5), for [N, C] probabilities and gold labels."""
    p = np.asarray(probabilities, dtype=np.float32)
    micro, macro = multilabel_f1(p >= np.asarray(thresholds, dtype=np.float32), gold)
    micro_half, macro_half = multilabel_f1(p >= np.float32(0.5), gold)
    return {"f1_micro": micro, "f1_macro": macro, "f1_micro_at_0.5": micro_half, "f1_macro_at_0.5": macro_half}


# Per example (sesame-report) ------------------------------------------------------------------------
def example_scores(run_dir: Path, data: Any, metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
    """A run's dev examples and ``metric`` recomputed on any resample of them (``sesame-report``'s paired
    bootstrap), from the prediction file the run wrote (``val_<TASK>.tsv``) and the gold labels of its
    data settings ``data`` (``GlueDataSettings`` / ``TableDataSettings``).

    ``metric``: ``val_<name>`` (or MNLI's ``val_mm_<name>``), ``<name>`` one of the task's metrics
    (accuracy, f1, matthews_correlation, pearson, spearmanr; multi-label f1_micro / f1_macro, at the
    run's tuned thresholds, which the file's decisions are). Returns ``(keys, score)``: ``keys`` [N] the
    examples' data rows (``index``), ``score(indices)`` the metric on the examples at ``indices`` [n]
    (positions in ``keys``, repeats allowed), by this module's functions. STS-B's file holds scores
    rounded to 3 decimals, so its correlations differ from ``metrics.json`` in the 4th or 5th decimal.
    """
    stage = "val_mm" if metric.startswith("val_mm_") else "val"
    name = metric.removeprefix(f"{stage}_")
    spec = data.task_spec()
    names = ("f1_micro", "f1_macro") if spec.multi_label else tuple(m for m in spec.metrics if m in METRICS)
    if not metric.startswith(f"{stage}_") or name not in names:
        raise ConfigError(f"{metric} cannot be recomputed example by example from the run's prediction file; "
                          f"these can: {', '.join(f'val_{m}' for m in names)}")
    path = run_dir / f"{stage}_{spec.submission_name}{'m' if stage == 'val_mm' else ''}.tsv"
    if not path.is_file():
        raise MissingFileError(f"{path}: no such prediction file (the run did not validate, or predates it)")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:] if line]
    index = [int(row[0]) for row in rows]
    written = [row[1] if len(row) > 1 else "" for row in rows]
    # The gold rows the run validated on: the dev file, or (data.holdout_fraction) its share of the training file.
    key = "train_file" if data.holdout_fraction and stage == "val" else \
        "validation_mismatched_file" if stage == "val_mm" else "validation_file"
    if getattr(data, "task_name", None) is not None:  # a GLUE TSV (task=glue)
        file = Path(getattr(data, key))
        gold_rows = read_glue_tsv(file, spec, require_labels=True, key=key)["label"]
    else:  # any table (task=text_classification)
        table, file = read_table(getattr(data, key), spec.text_a, spec.text_b, spec.label, key=key,
                                 labels_as_text=spec.multi_label)
        raw, line = list(table[spec.label]), first_data_line(file)
        gold_rows = (encode_multi_labels(raw, spec.labels or (), spec.label_separator, file, str(spec.label), line)
                     if spec.multi_label else encode_labels(raw, spec.labels, file, line, column=str(spec.label)))
    if max(index, default=-1) >= len(gold_rows):
        raise DataError(f"{path}: index {max(index)} but {file} has {len(gold_rows)} examples: it is not the file "
                        f"the run validated on (data.{key})")
    keys = [str(i) for i in index]
    if spec.multi_label:  # the file's decisions, at the thresholds the run tuned
        gold = np.asarray([gold_rows[i] for i in index]) > 0.5
        decided = np.zeros_like(gold)
        ids = {label: i for i, label in enumerate(spec.labels or ())}
        for row, labels in enumerate(written):
            decided[row, [ids[label] for label in labels.split(spec.label_separator) if label]] = True
        which = ("f1_micro", "f1_macro").index(name)
        return keys, lambda at: multilabel_f1(decided[at], gold[at])[which]
    if spec.is_regression:  # float64, as the module scores them
        predicted, gold = np.asarray(written, dtype=np.float64), np.asarray([gold_rows[i] for i in index], dtype=np.float64)
    else:  # label names -> the class ids the metrics count (f1: of class 1)
        predicted, gold = np.asarray(encode_labels(written, spec.labels, path, 2)), np.asarray([gold_rows[i] for i in index])
    return keys, lambda at: METRICS[name](predicted[at], gold[at])
