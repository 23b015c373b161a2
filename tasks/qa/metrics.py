"""SQuAD v1.1 and v2.0 metrics, following the official evaluation scripts.

v1.1 (``evaluate-v1.1.py``): exact match and token F1 after :func:`normalize_answer`, max over the
gold answers, averaged over *all* questions (a missing prediction scores 0), on a 0-100 scale.

v2.0 (``evaluate-v2.0.py``): gold answers that normalise to "" are dropped and a question without
answers has gold ``[""]``; F1 of two empty token lists is 1. A question whose no-answer
probability exceeds ``na_prob_thresh`` counts as predicting "". Reports the HasAns/NoAns breakdown
and ``best_exact``/``best_f1`` (with their thresholds) over the no-answer probabilities. Unlike the
official script, (1) a missing prediction scores 0 instead of crashing the breakdown, (2) the
best-threshold keys are always reported (with no-answer probabilities defaulting to 0, as HF
``evaluate``'s squad_v2 does), and (3) the overall exact score is named ``exact_match`` (like v1.1).
"""

from __future__ import annotations

import collections
import json
import logging
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.inputs.data_files import check_data_file

if TYPE_CHECKING:
    import datasets
    import evaluate

log = logging.getLogger(__name__)

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_match_score(prediction: str, ground_truth: str) -> int:
    """1 if the normalised strings are equal."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score_v1(prediction: str, ground_truth: str) -> float:
    """v1.1 token F1: 0 when nothing is shared (so an empty prediction scores 0)."""
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def f1_score_v2(prediction: str, ground_truth: str) -> float:
    """v2.0 token F1: if either side is empty, 1 when both are empty, else 0."""
    pred_toks, gold_toks = get_tokens(prediction), get_tokens(ground_truth)
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    return _overlap_f1(pred_toks, gold_toks)


def _overlap_f1(pred_toks: list[str], gold_toks: list[str]) -> float:
    """Harmonic mean of token precision and recall (bag of tokens); 0 when nothing is shared."""
    num_same = sum((collections.Counter(pred_toks) & collections.Counter(gold_toks)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def iter_questions(dataset: Sequence[Mapping[str, Any]]) -> Iterable[tuple[str, list[str]]]:
    """``(id, gold answer texts)`` for every question of a SQuAD ``data`` list (articles)."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield qa["id"], [a["text"] for a in qa.get("answers") or []]


def squad_v1(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """Official v1.1 scores.

    Args:
        gold: ``{question id: [gold answer texts]}`` (every question counts in the total).
        predictions: ``{question id: answer text}``.

    Returns:
        ``{"exact_match": 0-100, "f1": 0-100}``.
    """
    em = f1 = 0.0
    missing = 0
    for qid, answers in gold.items():
        if qid not in predictions:
            missing += 1
            continue
        pred = predictions[qid]
        em += max(exact_match_score(pred, a) for a in answers)
        f1 += max(f1_score_v1(pred, a) for a in answers)
    if missing:
        log.warning("%d of %d questions have no prediction and score 0", missing, len(gold))
    total = len(gold)
    if total == 0:
        raise ValueError("no questions to score")
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def raw_scores_v2(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question exact and F1 (0/1 scale) before any no-answer threshold; missing = 0."""
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        golds = [a for a in answers if normalize_answer(a)] or [""]
        if qid not in predictions:
            exact[qid] = f1[qid] = 0.0
            continue
        pred = predictions[qid]
        exact[qid] = float(max(exact_match_score(pred, a) for a in golds))
        f1[qid] = max(f1_score_v2(pred, a) for a in golds)
    return exact, f1


def apply_no_ans_threshold(
    scores: Mapping[str, float], na_probs: Mapping[str, float], has_ans: Mapping[str, bool], na_prob_thresh: float
) -> dict[str, float]:
    """Questions with ``na_prob > thresh`` count as predicting no answer."""
    return {
        qid: float(not has_ans[qid]) if na_probs.get(qid, 0.0) > na_prob_thresh else s for qid, s in scores.items()
    }


def find_best_thresh(
    predictions: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float], has_ans: Mapping[str, bool]
) -> tuple[float, float]:
    """Best score (0-100) over no-answer thresholds, and that threshold (official algorithm).

    Start from "answer nothing" (all NoAns right) and walk the questions by increasing na_prob,
    switching each to its prediction.
    """
    # A question without a prediction scores 0 at every threshold (the official script would count an
    # unanswerable one as right when nothing is predicted).
    cur = best = sum(1 for q, v in has_ans.items() if not v and q in predictions)
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores or qid not in predictions:
            continue
        if has_ans[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions.get(qid) else 0
        cur += diff
        if cur > best:
            best, best_thresh = cur, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def squad_v2(
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Official v2.0 scores.

    Args:
        gold: ``{question id: [gold answer texts]}``; an empty list = unanswerable.
        predictions: ``{question id: answer text}`` ("" = no answer).
        na_probs: ``{question id: no-answer probability / null odds}``; default 0 for all.
        na_prob_thresh: predict "" where ``na_prob > na_prob_thresh``.

    Returns:
        ``exact_match, f1, total, HasAns_exact, HasAns_f1, HasAns_total, NoAns_exact, NoAns_f1,
        NoAns_total`` (present only when such questions exist) and ``best_exact,
        best_exact_thresh, best_f1, best_f1_thresh``; scores on 0-100.
    """
    if not gold:
        raise ValueError("no questions to score")
    missing = sum(1 for qid in gold if qid not in predictions)
    if missing:
        log.warning("%d of %d questions have no prediction and score 0", missing, len(gold))
    if na_probs is None:
        na_probs = {qid: 0.0 for qid in predictions}
    has_ans = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw, f1_raw = raw_scores_v2(gold, predictions)
    exact = apply_no_ans_threshold(exact_raw, na_probs, has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, na_probs, has_ans, na_prob_thresh)
    for qid in gold:
        if qid not in predictions:  # missing scores 0, whatever its no-answer probability says
            exact[qid] = f1[qid] = 0.0

    def summary(qids: list[str]) -> dict[str, float]:
        return {
            "exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1[q] for q in qids) / len(qids),
            "total": len(qids),
        }

    overall = summary(list(gold))
    out: dict[str, float] = {"exact_match": overall["exact"], "f1": overall["f1"], "total": overall["total"]}
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, v in has_ans.items() if v is wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in summary(qids).items()})
    # Only questions with a prediction take part in the threshold search (as officially).
    probs = {q: p for q, p in na_probs.items() if q in gold}
    out["best_exact"], out["best_exact_thresh"] = find_best_thresh(predictions, exact_raw, probs, has_ans)
    out["best_f1"], out["best_f1_thresh"] = find_best_thresh(predictions, f1_raw, probs, has_ans)
    return out


def gold_from_dataset(dataset: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """``{id: [answer texts]}`` from a SQuAD JSON object (``{"data": [...]}``) or its ``data`` list."""
    data = dataset["data"] if isinstance(dataset, Mapping) else dataset
    return dict(iter_questions(data))


def compute(
    version: str,
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Dispatch on ``version`` ("squad_v1" / "squad_v2", also "v1"/"v2"/"1.1"/"2.0")."""
    v = normalize_version(version)
    if v == "squad_v1":
        return squad_v1(gold, predictions)
    return squad_v2(gold, predictions, na_probs, na_prob_thresh)


def question_scores(
    version: str,
    gold: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> tuple[dict[str, float], dict[str, float]]:
    """``(exact, f1)``: each question's exact match and F1 (0/1 scale) as :func:`compute` counts them, so
    that its ``exact_match`` / ``f1`` are 100 x their means over ``gold``'s questions (a missing prediction
    scores 0). v1.1: the max over the gold answers; v2.0: :func:`raw_scores_v2`, then the no-answer
    threshold (:func:`apply_no_ans_threshold`)."""
    if normalize_version(version) == "squad_v1":
        exact = {q: float(max(exact_match_score(predictions[q], a) for a in answers)) if q in predictions else 0.0
                 for q, answers in gold.items()}
        f1 = {q: max(f1_score_v1(predictions[q], a) for a in answers) if q in predictions else 0.0
              for q, answers in gold.items()}
        return exact, f1
    has_ans = {qid: bool(answers) for qid, answers in gold.items()}
    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}
    exact_raw, f1_raw = raw_scores_v2(gold, predictions)
    exact = apply_no_ans_threshold(exact_raw, probs, has_ans, na_prob_thresh)
    f1 = apply_no_ans_threshold(f1_raw, probs, has_ans, na_prob_thresh)
    for qid in gold:
        if qid not in predictions:
            exact[qid] = f1[qid] = 0.0
    return exact, f1


def example_scores(run_dir: Path, data: Any, head: Any, metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
    """A run's dev questions and ``metric`` (``val_exact_match`` or ``val_f1``, 0-100) recomputed on any
    resample of them (``sesame-report``'s paired bootstrap): the answers the run wrote
    (``predictions.json``; v2 also ``null_odds.json`` against ``head.null_score_diff_threshold``, as the
    module scores them), the gold answers of ``data.validation_file``. Returns ``(keys, score)``: ``keys``
    [N] the question ids, ``score(indices)`` the metric over the questions at ``indices`` [n] (positions in
    ``keys``, repeats allowed): 100 x the mean of :func:`question_scores`."""
    if metric not in ("val_exact_match", "val_f1"):
        raise ConfigError(f"{metric} cannot be recomputed question by question from the run's predictions.json; "
                          "these can: val_exact_match, val_f1")
    version = "squad_v2" if data.version_2_with_negative else "squad_v1"
    files = {"predictions": run_dir / "predictions.json", "null_odds": run_dir / "null_odds.json"}
    for role, path in files.items():
        if (role == "predictions" or version == "squad_v2") and not path.is_file():
            raise MissingFileError(f"{path}: no such file (the run did not validate, or predates it)")
    predictions = json.loads(files["predictions"].read_text(encoding="utf-8"))
    dev = check_data_file(data.validation_file, "validation_file")
    every = gold_from_dataset(json.loads(dev.read_text(encoding="utf-8")))
    unknown = [qid for qid in predictions if qid not in every]
    if unknown:
        raise DataError(f"{files['predictions']}: {len(unknown)} question(s) ({unknown[0]}, ...) are not in {dev}: it is "
                        "not the file the run validated on (data.validation_file)")
    gold = {qid: every[qid] for qid in predictions}  # the questions the run decoded, as the module scores them
    na_probs = json.loads(files["null_odds"].read_text(encoding="utf-8")) if version == "squad_v2" else None
    exact, f1 = question_scores(version, gold, predictions, na_probs, head.null_score_diff_threshold)
    keys = list(gold)
    values = 100.0 * np.asarray([(f1 if metric == "val_f1" else exact)[qid] for qid in keys], dtype=np.float64)
    return keys, lambda at: float(values[at].mean())


def normalize_version(version: str) -> str:
    aliases = {"squad_v1": "squad_v1", "v1": "squad_v1", "1.1": "squad_v1", "v1.1": "squad_v1", "squad": "squad_v1",
               "squad_v2": "squad_v2", "v2": "squad_v2", "2.0": "squad_v2", "v2.0": "squad_v2"}
    try:
        return aliases[str(version).lower()]
    except KeyError:
        raise ValueError(f"unknown SQuAD version {version!r}; use 'squad_v1' or 'squad_v2'") from None


def evaluate_features(with_no_answer_probability: bool) -> datasets.Features:
    """The inputs of the ``evaluate`` metric modules in ``tasks/qa/evaluate_metrics/`` (v2 adds the
    no-answer probability), in the shape of Hugging Face's own ``squad`` / ``squad_v2`` metrics."""
    import datasets  # deferred, as in load_metric

    prediction = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
    if with_no_answer_probability:
        prediction["no_answer_probability"] = datasets.Value("float64")
    answers = datasets.features.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})
    return datasets.Features({"predictions": prediction, "references": {"id": datasets.Value("string"), "answers": answers}})


def load_metric(version: str) -> evaluate.EvaluationModule:
    """The local ``evaluate`` metric module for ``version`` (loaded offline from this package)."""
    from pathlib import Path

    import evaluate  # deferred: importing evaluate is slow and only this helper needs it

    folder = Path(__file__).parent / "evaluate_metrics" / normalize_version(version)
    return evaluate.load(str(folder))
