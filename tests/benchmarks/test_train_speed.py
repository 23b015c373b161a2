"""benchmarks/train_speed.py: sesame and the transformers Trainer reference train on the same batches
with the same optimiser and schedule (tiny random BERT, shipped slices, 2 steps, in-process)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def ts():
    return load_benchmark("train_speed")



def overrides(ts, tiny_bert_dir, task: str, train: int, *extra: str) -> list[str]:
    args = ts.parse_args(["--quick", "--encoder", str(tiny_bert_dir), "--eval-examples", "16",
                          "--override", f"data.max_train_examples={train}", *(f"--override={o}" for o in extra)])
    args.train_windows_available = True  # the setting is in this sesame's conf (checked below)
    return ts.data_overrides(args, task, evaluate=True)


def run(ts, tmp_path: Path, task: str, arm: str, ov: list[str]) -> dict:
    spec = ts.ARMS[arm]
    if spec["side"] == "sesame":
        return {"arm": arm, **ts.run_sesame([*ov, *spec["overrides"]], 2, 1, tmp_path / task / arm,
                                            precision_mirrored=spec.get("precision_mirrored", True))}
    return {"arm": arm, **ts.run_hf(ov, 2, 1, tmp_path / task / arm, ts.TASKS[task]["hf"], spec["padding"], spec["order"],
                                    spec["optim"] or "auto", bf16=spec.get("bf16", False))}


def assert_mirrored(sesame: dict, hf: dict) -> None:
    """Same examples, batches, optimiser groups and learning-rate schedule on both sides."""
    assert sesame["train_examples"] == hf["train_examples"]
    assert sesame["examples_per_step"] == hf["examples_per_step"]
    assert sesame["tokens_per_step"] == hf["tokens_per_step"]
    assert sesame["padded_tokens_per_step"] == hf["padded_tokens_per_step"]  # both pad to the batch's longest
    assert sesame["param_groups"] == hf["param_groups"]  # lr, weight decay, tensors and numel of every group
    assert len(sesame["lrs"]) == len(hf["lrs"]) == 2
    assert [lr for step in sesame["lrs"] for lr in step] == pytest.approx([lr for step in hf["lrs"] for lr in step])
    assert sesame["optimizer_flags"] == hf["optimizer_flags"]
    assert sesame["settings"] == hf["settings"]


def test_sst2_both_sides_train_on_the_same_batches_and_the_reference_is_scored_by_sesame(ts, tiny_bert_dir, tmp_path):
    ov = overrides(ts, tiny_bert_dir, "sst2", 48, "finetune.warmup_ratio=0.5")  # 1 of the 2 steps warms up
    assert "pooling=pooler" in ov  # sesame's network is then AutoModelForSequenceClassification's
    sesame, hf = run(ts, tmp_path, "sst2", "sesame", ov), run(ts, tmp_path, "sst2", "hf", ov)
    assert sesame["train_examples"] == 48 and sesame["examples_per_step"] == [32, 16]  # 48 = one batch of 32 + 16
    assert_mirrored(sesame, hf)
    # The pooler trains at head_lr on both sides: 2 groups at head_lr, with the pooler's 16x16 + 16 in them.
    assert [g["lr"] for g in hf["param_groups"]] == [5e-5, 5e-5, 1e-4, 1e-4]
    assert sum(g["numel"] for g in hf["param_groups"] if g["lr"] == 1e-4) == 16 * 16 + 16 + 16 * 2 + 2
    assert [step[0] for step in hf["lrs"]] == [0.0, 5e-5]  # warm-up from 0, then the peak lr
    assert all(t < p for t, p in zip(sesame["tokens_per_step"], sesame["padded_tokens_per_step"]))

    padded = run(ts, tmp_path, "sst2", "hf_max_length", ov)
    assert padded["tokens_per_step"] == sesame["tokens_per_step"]
    assert padded["padded_tokens_per_step"] == [32 * 64, 16 * 64]  # data.max_seq_length of SST-2
    # The Trainer's own length-grouped sampler draws other batches: the comparison above can fail.
    grouped = run(ts, tmp_path, "sst2", "hf_grouped", ov)
    assert grouped["tokens_per_step"] != sesame["tokens_per_step"]
    assert grouped["switches"]["sampler"] == "LengthGroupedSampler" and not grouped["switches"]["autocast"]
    # The Trainer at its best: its grouping and its bf16, as read inside the run
    best = run(ts, tmp_path, "sst2", "hf_fast", ov)
    assert best["switches"] == {"sampler": "LengthGroupedSampler", "autocast": True, "autocast_dtype": "bfloat16",
                                "linear_dtype": "bfloat16"}
    assert hf["switches"]["sampler"] == "ResumableShuffleSampler" and hf["switches"]["linear_dtype"] == "float32"
    # ... and its bf16 on the very batches sesame's length grouping makes: a step against a step
    grouped_sesame = run(ts, tmp_path, "sst2", "sesame_grouped_bf16", ov)
    same = run(ts, tmp_path, "sst2", "hf_fast_same_batches", ov)
    assert same["switches"]["sampler"] == "LengthGroupedShuffleSampler" and same["switches"]["linear_dtype"] == "bfloat16"
    assert same["tokens_per_step"] == grouped_sesame["tokens_per_step"] != sesame["tokens_per_step"]
    pair = [{**r, "task": "sst2", "rep": 1} for r in (grouped_sesame, same)]
    assert ts.same_batches(pair, "sesame_grouped_bf16", "hf_fast_same_batches") == {"sst2": True}

    metric, metrics = ts.evaluate_hf(ov, Path(hf["hf_model"]), tmp_path / "eval")
    assert metric == sesame["metric"] == "val_accuracy"
    assert metrics["val_examples_scored"] == 16 and 0 <= metrics[metric] <= 1
    assert len((tmp_path / "eval" / "val_SST-2.tsv").read_text().splitlines()) == 1 + 16

    results = [{**r, "task": "sst2", "rep": 1, "metric_value": r.get("metric_value")} for r in (sesame, hf, padded)]
    results[1]["metric_value"], results[1]["metric"] = metrics[metric], metric
    summary = ts.summarize(results)["sst2"]
    assert summary["hf"]["step_median_s_ratio"] == 1.0
    assert summary["sesame"]["step_median_s_ratio"] == sesame["step_median_s"] / hf["step_median_s"]
    assert summary["hf_max_length"]["padded_tokens_per_s"] > 0
    assert ts.same_batches(results) == {"sst2": True}
    results[1] = {**results[1], "tokens_per_step": results[1]["tokens_per_step"][::-1]}
    assert ts.same_batches(results) == {"sst2": False}


def test_squad_windows_without_the_answer_are_trained_on_both_sides(ts, tiny_bert_dir, tmp_path):
    ov = overrides(ts, tiny_bert_dir, "squad256", 24)
    assert "data.train_windows=all" in ov and "data.max_seq_length=256" in ov and "data.batch_size=12" in ov
    sesame, hf = run(ts, tmp_path, "squad256", "sesame", ov), run(ts, tmp_path, "squad256", "hf", ov)
    assert sesame["train_examples"] > 24  # 24 questions, more windows: the long contexts give several
    assert sesame["settings"]["train_windows"] == "all"
    assert_mirrored(sesame, hf)


def test_a_trainer_switch_that_did_not_take_effect_fails_the_run(ts, tiny_bert_dir):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_bert_dir).train()
    inputs = {"input_ids": torch.tensor([[2, 5, 3]])}
    seen = ts.TrainerSwitches(model)
    seen.sampler(torch.utils.data.RandomSampler(range(4)))
    model(**inputs)  # fp32: no autocast around the forward
    with pytest.raises(RuntimeError, match="bf16 was asked for"):
        seen.check(grouped=False, bf16=True)
    with pytest.raises(RuntimeError, match="length grouping was asked for"):
        seen.check(grouped=True, bf16=False)
    seen = ts.TrainerSwitches(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**inputs)
    assert seen.check(grouped=False, bf16=True)["linear_dtype"] == "bfloat16"
