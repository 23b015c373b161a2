"""What the task conformance suite (tests/conformance/) needs to know of the multiple-choice task that
only it knows: how its dev questions become predictor inputs, and the choice and probabilities the
evaluation's ``val_predictions.jsonl`` gives each. ``conformance.yaml`` names it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sesame.tasks.multiple_choice.readers import read_choices


def question_expectations(folder: Path, cfg: Mapping[str, Any]) -> list[tuple[dict, dict]]:
    """The evaluated dev questions, each with the choice and probabilities ``folder``'s prediction file gives it."""
    data = cfg["data"]
    questions = read_choices(data["validation_file"], key="validation_file")[: int(data["max_eval_examples"])]
    lines = (folder / "val_predictions.jsonl").read_text(encoding="utf-8").splitlines()
    written = {row["index"]: row for row in map(json.loads, lines)}
    assert sorted(written) == list(range(len(questions)))
    return [({"context": q.context, "question": q.question, "endings": list(q.endings)},
             {"choice": written[i]["prediction"], "probabilities": written[i]["probabilities"]})
            for i, q in enumerate(questions)]
