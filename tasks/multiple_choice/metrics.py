"""Multiple-choice scores: accuracy over questions, and the prediction file's lines."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np


def choice_accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """The share of questions whose predicted ending ([N] ids) is the gold one ([N] ids)."""
    if len(predictions) == 0:
        raise ValueError("no questions to score")
    return float(np.mean(np.asarray(predictions) == np.asarray(labels)))


def prediction_lines(indices: Sequence[int], predictions: Sequence[int], probabilities: Sequence[Sequence[float]]) -> str:
    """JSON lines ``{"index": i, "prediction": ending id, "probabilities": [...]}`` in question order."""
    rows = sorted(zip(indices, predictions, probabilities))
    return "".join(json.dumps({"index": int(i), "prediction": int(p), "probabilities": [round(float(x), 6) for x in probs]})
                   + "\n" for i, p, probs in rows)
