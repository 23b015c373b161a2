"""What the task conformance suite (tests/conformance/) needs to know of the tagging task that only it
knows: how its dev sentences become predictor inputs (their words), and the tags the evaluation's
``val_predictions.conll`` gives each word. ``conformance.yaml`` names it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sesame.tasks.ner.readers import read_examples
from tests.conftest import read_conll_predictions


def sentence_expectations(folder: Path, cfg: Mapping[str, Any]) -> list[tuple[dict, dict]]:
    """The evaluated dev sentences as words, each with the tags ``folder``'s prediction file gives them."""
    data = cfg["data"]
    dev = read_examples(data["validation_file"], data["format"], data["tag_column"], "validation_file")
    dev = dev.head(int(data["max_eval_examples"]))
    words, _, tags = read_conll_predictions(folder / "val_predictions.conll")
    assert words == dev.tokens
    return [({"tokens": w}, {"tokens": w, "tags": t}) for w, t in zip(words, tags, strict=True)]
