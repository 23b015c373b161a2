"""Multiple-choice scores: accuracy over questions, and the prediction file's lines."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.multiple_choice.readers import read_choices


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


def example_scores(run_dir: Path, validation_file: str | None, metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
    """A run's dev questions and ``val_accuracy`` recomputed on any resample of them (``sesame-report``'s
    paired bootstrap): the endings the run chose (``val_predictions.jsonl``) against the labels of
    ``validation_file``. Returns ``(keys, score)``: ``keys`` [N] the questions' indices, ``score(indices)``
    :func:`choice_accuracy` of the questions at ``indices`` [n] (positions in ``keys``, repeats allowed)."""
    if metric != "val_accuracy":
        raise ConfigError(f"{metric} cannot be recomputed question by question from val_predictions.jsonl; "
                          "val_accuracy can")
    path = run_dir / "val_predictions.jsonl"
    if not path.is_file():
        raise MissingFileError(f"{path}: no such prediction file (the run did not validate, or predates it)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = read_choices(validation_file, key="validation_file", require_labels=True)
    index = [int(row["index"]) for row in rows]
    if max(index, default=-1) >= len(questions):
        raise DataError(f"{path}: question {max(index)} but {validation_file} has {len(questions)}: it is not the file "
                        "the run validated on (data.validation_file)")
    predicted = np.asarray([int(row["prediction"]) for row in rows])
    gold = np.asarray([questions[i].label for i in index])
    return [str(i) for i in index], lambda at: choice_accuracy(predicted[at], gold[at])
