"""What the task conformance suite (tests/conformance/) needs to know of the sentence-classification
tasks that only they know: how their dev examples become predictor inputs, and what the evaluation's
prediction file (``val_<name>.tsv``: ``index<TAB>label``) says of each (``conformance.yaml`` names it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import build_datamodule


def sentence_expectations(folder: Path, cfg: Mapping[str, Any]) -> list[tuple[dict, dict]]:
    """The evaluated dev sentences (pairs) as the task's data module reads them, each with the label
    ``folder``'s prediction file gives it."""
    datamodule = build_datamodule(RunSettings.from_config(OmegaConf.create(dict(cfg))))
    assert datamodule.spec.labels is not None and not datamodule.spec.multi_label, "single-label runs only"
    rows = datamodule._read("validation_file", require_labels=False)  # the reader evaluation used
    (written,) = folder.glob("val_*.tsv")
    labels = dict(line.split("\t") for line in written.read_text(encoding="utf-8").splitlines()[1:])
    pairs = []
    for row in rows.select(range(min(len(rows), int(cfg["data"]["max_eval_examples"])))):
        text = {"text": row["text_a"], **({"text_pair": row["text_b"]} if "text_b" in row else {})}
        pairs.append((text, {"label": labels[str(row["index"])]}))
    assert len(pairs) == len(labels)
    return pairs
