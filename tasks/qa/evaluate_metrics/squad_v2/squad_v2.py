"""SQuAD v2.0 metric (HasAns/NoAns, best thresholds) for ``evaluate.load(<this folder>)``; computed by sesame.tasks.qa.metrics."""

import evaluate

from sesame.tasks.qa.metrics import evaluate_features, squad_v2

_DESCRIPTION = "Official SQuAD v2.0 scores (0-100) with the HasAns/NoAns breakdown and best no-answer thresholds."
_CITATION = "Rajpurkar, Jia and Liang, Know What You Don't Know: Unanswerable Questions for SQuAD, ACL 2018."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": str, "prediction_text": str, "no_answer_probability": float}.
    references: list of {"id": str, "answers": {"text": [str], "answer_start": [int]}} (empty = unanswerable).
    no_answer_threshold: predict "" where no_answer_probability exceeds it (default 1.0).
Returns:
    {"exact_match", "f1", "total", "HasAns_*", "NoAns_*", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SquadV2(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=evaluate_features(with_no_answer_probability=True),
        )

    def _compute(self, predictions, references, no_answer_threshold=1.0):
        preds = {p["id"]: p["prediction_text"] for p in predictions}
        na_probs = {p["id"]: p["no_answer_probability"] for p in predictions}
        gold = {r["id"]: list(r["answers"]["text"]) for r in references}
        return squad_v2(gold, preds, na_probs, no_answer_threshold)
