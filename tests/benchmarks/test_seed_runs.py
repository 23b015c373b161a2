"""benchmarks/train_batching.py's run-over-seeds machinery, which benchmarks/precision_training.py
shares: who trains when, what each run is told, and the table's ratios and dev-metric spread."""

from __future__ import annotations

import statistics

import pytest

from tests.benchmarks import load_benchmark as load


@pytest.fixture(scope="module")
def tb():
    return load("train_batching")


def fake_run(seconds: float, examples: int, padded: int, metric: float) -> dict:
    return {"throughput": {"padded_tokens": padded, "tokens": padded // 2, "seconds": seconds,
                           "examples_per_second": examples / seconds, "examples": examples, "steps": 10},
            "metrics": {"val_f1": metric, "val_accuracy": metric}}


def test_run_seeds_rotates_the_first_arm_and_passes_seed_and_extra(tb, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(tb, "run_one", lambda out, overrides, threads: calls.append((out, overrides, threads)) or out.name)
    arms = {"a": ["x=1"], "b": ["x=2"], "c": ["x=3"]}
    results = tb.run_seeds(tmp_path, arms, [7, 8, 9], 1, ["q=1"])
    # seed 7: a b c; seed 8: b c a; seed 9: c a b, so machine load does not always hit the same arm first
    assert [c[0].parent.name for c in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert calls[0] == (tmp_path / "a" / "seed7", ["x=1", "seed=7", "q=1"], 1)
    assert results == {"a": ["seed7", "seed8", "seed9"], "b": ["seed7", "seed8", "seed9"], "c": ["seed7", "seed8", "seed9"]}


def test_summarise_gives_ratios_to_the_first_arm_and_the_metric_in_points(tb):
    results = {"ref": [fake_run(100, 1000, 5000, 0.20), fake_run(120, 1000, 5000, 0.30)],
               "fast": [fake_run(50, 1000, 2500, 0.25), fake_run(60, 1000, 2500, 0.27)]}
    ref, fast = tb.summarise("squad", "val_f1", results)
    assert ref["seconds_ratio"] == 1 and fast["seconds_ratio"] == pytest.approx(55 / 110)
    assert fast["padded_tokens_ratio"] == pytest.approx(0.5)
    assert fast["examples_per_second_ratio"] == pytest.approx(statistics.fmean([20, 1000 / 60]) / statistics.fmean([10, 1000 / 120]))
    assert ref["metric_values"] == pytest.approx([20, 30]) and ref["metric_mean"] == pytest.approx(25)
    assert fast["metric_std"] == pytest.approx(statistics.stdev([25, 27]))
    assert "| squad | fast | 2 |" in tb.table([ref, fast])


def test_precision_training_arms_differ_only_in_precision(monkeypatch, tmp_path):
    pt = load("precision_training")
    seen = {}

    def run_seeds(out, arms, seeds, threads, extra):
        seen[out.name] = arms
        return {arm: [fake_run(10, 100, 1000, 0.5)] for arm in arms}

    monkeypatch.setattr(pt, "run_seeds", run_seeds)
    pt.main(["--quick", "--seeds", "1", "--out", str(tmp_path)])
    for task, arms in seen.items():
        fp32, bf16 = arms["fp32"], arms["bf16"]
        assert [o for o in fp32 if o not in bf16] == ["trainer.precision=32-true"]
        assert [o for o in bf16 if o not in fp32] == ["trainer.precision=bf16-mixed"]
    assert "data=sst2_slice" in seen["sst2"]["fp32"]  # --quick reads the shipped slice only
    assert (tmp_path / "precision_training.md").read_text().count("| sst2 |") == 2
