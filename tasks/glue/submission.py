"""GLUE submission files: ``index<TAB>prediction`` with label names (scores for STS-B)."""

from __future__ import annotations

from collections.abc import Sequence


def submission_tsv(indices: Sequence[int], predictions: Sequence[float], label_names: Sequence[str] | None) -> str:
    lines = ["index\tprediction"]
    for index, pred in zip(indices, predictions):
        value = f"{pred:.3f}" if label_names is None else label_names[int(pred)]
        lines.append(f"{index}\t{value}")
    return "\n".join(lines) + "\n"
