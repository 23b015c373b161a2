"""Opt-in: sesame's QA answers equal the transformers 4.x ``pipeline("question-answering")``'s.

Runs a small version of benchmarks/qa_pipeline_parity.py. Needs an interpreter with transformers < 5
($SESAME_TF4_PYTHON, or the venv /work/venv-tf4; see benchmarks/README.md) and the real SQuAD v1.1
dev file; skipped without them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.tasks.qa.conftest import DEV_V1
from tests import preloaded_commands as preloaded

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "qa_pipeline_parity.py"


def _tf4_python() -> Path | None:
    candidate = Path(os.environ.get("SESAME_TF4_PYTHON") or "/work/venv-tf4")
    if candidate.is_dir():
        candidate = candidate / "bin" / "python"
    return candidate if candidate.is_file() else None


pytestmark = [
    pytest.mark.skipif(_tf4_python() is None, reason="no transformers 4.x interpreter ($SESAME_TF4_PYTHON or /work/venv-tf4)"),
    pytest.mark.skipif(not DEV_V1.is_file(), reason=f"real SQuAD v1.1 dev file not available: {DEV_V1}"),
]


def run_parity(tmp_path: Path, *args: str) -> list[dict]:
    out = tmp_path / "report.json"
    env = {**os.environ, "SESAME_TF4_PYTHON": str(_tf4_python())}
    proc = preloaded.run(
        [sys.executable, str(SCRIPT), "--data", str(DEV_V1), "--json-out", str(out), *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=1800,
    )
    assert out.is_file(), proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_one_window_answers_are_identical(tmp_path):
    reports = run_parity(tmp_path, "--models", "tiny,minilm", "--n-questions", "40", "--multi-window-questions", "0")
    assert [r["model"] for r in reports] == ["tiny", "minilm"]
    for r in reports:
        assert r["single"]["questions"] == 40
        assert r["single"]["agree"] == 40, r["single"]["differences"]


def test_multi_window_differences_are_the_pipelines_per_window_softmax(tmp_path):
    """Across windows the two legitimately differ; every difference must be reproduced by replaying the
    pipeline's rule (per-window softmax, equal texts summed) on sesame's logits."""
    report = run_parity(tmp_path, "--models", "tiny", "--n-questions", "0", "--multi-window-questions", "20")[0]
    multi = report["multi"]
    assert multi["questions"] == 20
    assert multi["agree"] + len(multi["differences"]) == 20
    for d in multi["differences"]:
        assert d["pipeline"] is not None and d["emulated_pipeline_reproduces"], d
        assert d["sesame_raw_score"] >= d["pipeline_answer_raw_score"] - 1e-6, d  # sesame picks the raw-logit best
