"""What the task conformance suite (tests/conformance/) needs to know of the question-answering tasks
that only they know: how their dev questions become predictor inputs, and what the evaluation's files
say of each (``predictions.json``: the answer; SQuAD 2.0's ``null_odds.json``: the null score
difference). ``conformance.yaml`` names it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sesame.tasks.qa.readers import read_squad


def question_expectations(folder: Path, cfg: Mapping[str, Any]) -> list[tuple[dict, dict]]:
    """The evaluated dev questions, each with its answer (and null score difference) as ``folder``'s files give them."""
    data = cfg["data"]
    rows, _ = read_squad(data["validation_file"], allow_impossible=bool(data["version_2_with_negative"]))
    answers = json.loads((folder / "predictions.json").read_text(encoding="utf-8"))
    odds_file = folder / "null_odds.json"
    odds = json.loads(odds_file.read_text(encoding="utf-8")) if odds_file.is_file() else None
    pairs = []
    for row in rows.select(range(min(len(rows), int(data["max_eval_examples"])))):
        expected = {"answer": answers[row["id"]]}
        if odds is not None:
            expected["null_score_diff"] = float(odds[row["id"]])
        pairs.append(({"question": row["question"], "context": row["context"]}, expected))
    assert len(pairs) == len(answers)
    return pairs
