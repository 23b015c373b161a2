"""GLUE metrics, as the GLUE benchmark defines them (0-1 scale).

CoLA: Matthews correlation; SST-2, QNLI, RTE, WNLI, MNLI: accuracy; MRPC, QQP: F1 of the positive
class and accuracy; STS-B: Pearson and Spearman correlation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats


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
    return float(stats.pearsonr(predictions, references)[0])


def spearmanr(predictions: np.ndarray, references: np.ndarray) -> float:
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
