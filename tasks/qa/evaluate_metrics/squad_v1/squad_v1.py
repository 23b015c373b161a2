"""SQuAD v1.1 metric (exact match, F1) for ``evaluate.load(<this folder>)``; computed by sesame.tasks.qa.metrics."""

import evaluate

from sesame.tasks.qa.metrics import evaluate_features, squad_v1

_DESCRIPTION = "Official SQuAD v1.1 exact match and token F1 (0-100), max over gold answers."
_CITATION = "Rajpurkar et al., SQuAD: 100,000+ Questions for Machine Comprehension of Text, EMNLP 2016."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of {"id": str, "prediction_text": str}.
    references: list of {"id": str, "answers": {"text": [str], "answer_start": [int]}}.
Returns:
    {"exact_match": float, "f1": float}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SquadV1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=evaluate_features(with_no_answer_probability=False),
        )

    def _compute(self, predictions, references):
        preds = {p["id"]: p["prediction_text"] for p in predictions}
        gold = {r["id"]: list(r["answers"]["text"]) for r in references}
        return squad_v1(gold, preds)
