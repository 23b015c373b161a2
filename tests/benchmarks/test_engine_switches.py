"""benchmarks/engine_switches.py: each switch is compared with the arm it changes, per repetition, and the
ratios are switch / base (tiny random BERT, shipped slice, 2 steps, in-process)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def es():
    return load_benchmark("engine_switches")


def _run(arm: str, rep: int, cpu: float, tokens: list[int], accuracy: float) -> dict:
    return {"arm": arm, "rep": rep, "seed": 41 + rep, "step_cpu_median_s": cpu, "step_median_s": cpu * 2,
            "tokens_per_step": tokens, "metric_value": accuracy, "precision": "32-true"}


def test_ratios_are_switch_over_its_base_per_repetition(es):
    results = [_run("default", 1, 1.0, [5, 6], 0.8), _run("sparse_embeddings", 1, 0.8, [5, 6], 0.81),
               _run("default", 2, 2.0, [7], 0.79), _run("sparse_embeddings", 2, 1.0, [7], 0.78)]
    summary = es.summarize(results)
    assert set(summary) == {"sparse_embeddings"}
    s = summary["sparse_embeddings"]
    assert s["step_cpu_ratio_per_rep"] == pytest.approx([0.8, 0.5])
    assert s["step_cpu_ratio"] == pytest.approx(0.65)
    assert s["steps_per_s_ratio"] == pytest.approx(1 / 0.65)
    assert s["dev_accuracy"] == {"42": 0.81, "43": 0.78} and s["same_batches"]
    results[1]["tokens_per_step"] = [5, 7]
    assert not es.summarize(results)["sparse_embeddings"]["same_batches"]


def test_every_switch_arm_runs_on_the_tiny_encoder(es, tiny_bert_dir, tmp_path):
    """Each arm trains through sesame's runner (2 steps) with the switch in its config."""
    from train_speed import run_sesame

    args = es.parse_args(["--quick", "--encoder", str(tiny_bert_dir), "--eval-examples", "8"])
    for arm in es.ARMS:
        result = run_sesame(es.overrides_of(args, arm, 1), 2, 1, tmp_path / arm, precision_mirrored=False,
                            mirrored=False)
        assert result["steps_run"] == 2 and result["metric_value"] is not None
        if arm == "sparse_embeddings":
            assert result["optimizer"].endswith("AdamWWithSparseRows")
