"""benchmarks/compression.py --quick runs end to end and writes a consistent table."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import prediction_accuracy

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compression.py"


def test_the_quick_benchmark_writes_every_model_with_ratios(tiny_bert_dir, tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, str(SCRIPT), "--quick", "--tasks", "sst2", "--encoder", str(tiny_bert_dir), "--out", str(out),
           "--rounds", "1", "--batches", "2", "--sst2-override", "data.max_eval_examples=32"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((out / "compression.json").read_text())["tasks"]["sst2"]
    by_name = {r["model"]: r for r in rows}
    assert list(by_name) == ["finetuned", "int8", "student", "distilled"]
    base = by_name["finetuned"]
    assert base["size_ratio"] == base["speedup_b1"] == base["speedup_b32"] == 1.0
    assert [by_name[n]["layers"] for n in by_name] == [4, 4, 2, 2]  # every other of the tiny encoder's 4
    assert by_name["int8"]["size_mb"] < base["size_mb"] and by_name["student"]["size_mb"] < base["size_mb"]
    for row in rows:
        # Each model's score is the accuracy of that model's own written predictions, and its eval metrics.
        evaluated = out / "sst2" / f"eval_{row['model']}"
        assert row["metric"] == "val_accuracy"
        assert row["score"] == pytest.approx(prediction_accuracy(evaluated / "val_SST-2.tsv"), rel=1e-6)
        assert row["metrics"] == json.loads((evaluated / "metrics.json").read_text())
        assert row["score_delta"] == row["score"] - base["score"]
        assert row["latency_ms_b1"] > 0 and row["throughput_b32"] > 0
        assert row["speedup_b32"] == base["latency_ms_b32"] / row["latency_ms_b32"]
    # --sst2-override reaches the trainings and every evaluation (the quick default is 64).
    assert "max_eval_examples: 32" in (out / "sst2" / "finetuned" / "config.yaml").read_text()
    for name in by_name:
        assert len((out / "sst2" / f"eval_{name}" / "val_SST-2.tsv").read_text().splitlines()) == 1 + 32
    table = (out / "compression.md").read_text()
    assert "| int8 |" in table and "| distilled |" in table and "val_accuracy" in table
    # The distilled student's run trained against the fine-tuned teacher.
    assert "teacher:" in (out / "sst2" / "distilled" / "config.yaml").read_text()
    assert str((out / "sst2" / "finetuned").resolve()) in (out / "sst2" / "distilled" / "config.yaml").read_text()
