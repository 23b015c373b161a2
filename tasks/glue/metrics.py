"""GLUE metrics, as the GLUE benchmark defines them (0-1 scale), and multi-label F1.

CoLA: Matthews correlation; SST-2, QNLI, RTE, WNLI, MNLI: accuracy; MRPC, QQP: F1 of the positive
class and accuracy; STS-B: Pearson and Spearman correlation. Multi-label tables
(``data.multi_label=true``): micro and macro F1 (torchmetrics) at per-label thresholds
(:func:`tune_thresholds`) and at 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

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
