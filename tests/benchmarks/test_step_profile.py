"""benchmarks/step_profile.py: one training step broken into parts for sesame and the Trainer's model on the same batch
(tiny random BERT, shipped slices, one thread). Speed is never asserted: only that the accounting is whole and right."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import profile, record_function

from tests.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def sp():
    return load_benchmark("step_profile")


@pytest.fixture(scope="module")
def sides():
    return load_benchmark("step_sides")


@pytest.fixture(scope="module")
def sa():
    return load_benchmark("step_attribution")


@pytest.fixture(scope="module")
def gp():
    return load_benchmark("gemm_peak")



@pytest.fixture(scope="module")
def quick_report(sp, tmp_path_factory):
    out = tmp_path_factory.mktemp("step_profile")
    report = sp.main(["--quick", "--out", str(out)])
    return out, report


@pytest.fixture(scope="module")
def sst2(sides, tiny_bert_dir, tmp_path_factory):
    return sides.build_workload("sst2", str(tiny_bert_dir), True, 0, 4, tmp_path_factory.mktemp("trainer"))


def test_quick_mode_runs_end_to_end_and_every_profiled_step_adds_up(quick_report, sides):
    out, report = quick_report
    text = (out / "step_profile.md").read_text()
    assert text.splitlines()[2].startswith("Reproduce: `python benchmarks/step_profile.py --quick --out ")
    assert json.loads((out / "step_profile.json").read_text())["meta"]["threads"] == 1
    assert set(report["workloads"]) == {"sst2", "squad256"}
    for name, entry in report["workloads"].items():
        assert entry["batch"]["same_input_ids"]
        assert f"### {sides.WORKLOADS[name]['label']}" in text
        for precision in ("fp32", "bf16"):
            result = entry["precisions"][precision]
            for side in ("sesame", "trainer"):
                raw, summary = result["raw"][side], result["summary"][side]
                assert len(raw["step_s"]) == len(raw["profiles"]) == 2 and len(raw["loop_step_s"]) == 2
                for step in raw["profiles"]:
                    assert sum(step["parts_us"].values()) == pytest.approx(step["root_total_us"], abs=1e-3)
                    assert step["parts_us"]["gemm"] > 0 and step["parts_us"]["optimizer"] > 0
                assert sum(summary["parts_ms"].values()) == pytest.approx(summary["profiled_ms"])
                assert summary["all_in_ms"] == pytest.approx(
                    summary["step_ms"] + summary["loop_overhead_ms"] + summary["data_ms"])
                assert summary["flops"] == raw["flops"]["formula"] > 0
                assert summary["flops_per_s"]["bare"] == pytest.approx(summary["flops"] / (summary["step_ms"] / 1e3))
                assert summary["mfu_own_shapes"]["bare"] == pytest.approx(
                    summary["flops_per_s"]["bare"] / summary["own_shape_peak_flops_per_s"])
    squad = report["workloads"]["squad256"]["batch"]
    assert (squad["examples"], squad["padded_length"]) == (12, 256)
    assert report["workloads"]["sst2"]["batch"]["examples"] == 32


def test_every_event_of_a_profiled_step_lands_in_exactly_one_part(sa, sst2):
    with profile(record_shapes=True) as prof:
        with record_function(sa.ROOT):
            sst2.sesame.step(bf16=False)
    events = list(prof.events())
    creators = sa._creators(events)
    parts = {id(e): sa.part_of(e, creators) for e in events}
    assert set(parts.values()) <= set(sa.PARTS) and len(parts) == len(events)
    step = sa.attribute(events)
    assert step.events == len(events)
    assert step.total_us == pytest.approx(step.root_total_us, abs=1e-3)

    def parts_of(name: str) -> set[str]:
        return {parts[id(e)] for e in events if e.name == name}

    in_attention = {parts[id(e)] for e in events if e.name == "aten::bmm"
                    and any(a.name == "aten::scaled_dot_product_attention" for a in sa._chain(e))}
    assert in_attention <= {"attention"}
    assert parts_of("aten::addmm") == {"gemm"}  # the linear layers' forward (backward: aten::mm, below)
    assert parts_of("AddmmBackward0") == {"gemm"}
    assert parts_of("aten::embedding_dense_backward") == {"embedding"}
    assert parts_of("aten::native_layer_norm_backward") == {"layernorm"}
    assert parts_of("aten::gelu_backward") == {"gelu"}
    assert parts_of("aten::_fused_adamw_") == {"optimizer"}
    assert parts_of("aten::_foreach_norm") == {"clip"}
    assert parts_of("torch::autograd::AccumulateGrad") == {"autograd"}
    assert {parts[id(e)] for e in events if e.name == "BmmBackward0"} <= {"attention"}
    assert step.gemm_shapes and all(flops == calls * 2 * b * m * k * n
                                    for (b, m, k, n), (calls, flops) in step.gemm_shapes.items())


def test_the_bf16_attention_with_dropout_counts_as_attention_forward_and_backward(sa):
    from sesame.tasks.encoders.low_precision_attention import unfused_attention

    q, k, v = (torch.randn(2, 4, 16, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(2, 1, 16, 16, dtype=torch.bool)
    with profile() as prof:
        with record_function(sa.ROOT):
            with record_function(sa.FORWARD):
                out = unfused_attention(q, k, v, mask, 0.1, None)
            with record_function(sa.BACKWARD):
                out.float().sum().backward()
    events = list(prof.events())
    creators = sa._creators(events)
    parts = {e.name: sa.part_of(e, creators) for e in events
             if e.name in ("aten::matmul", "aten::_softmax", "aten::where", "aten::random_", "BmmBackward0",
                           "SoftmaxBackward0", "WhereBackward0")}
    assert {"aten::matmul", "aten::_softmax", "aten::random_", "BmmBackward0", "SoftmaxBackward0"} <= set(parts)
    assert set(parts.values()) == {"attention"}, parts


def test_a_linear_layers_flops_are_2mkn_forward_and_4mkn_backward(gp):
    m, k, n = 5, 7, 3
    layer, x = torch.nn.Linear(k, n), torch.randn(m, k, requires_grad=True)
    assert gp.count_flops(lambda: layer(x).sum().backward())["total"] == 2 * m * k * n + 4 * m * k * n
    assert gp.count_flops(lambda: layer(x.detach()).sum())["total"] == 2 * m * k * n


def test_the_counted_flops_of_a_bert_step_equal_the_formula(gp, sst2):
    side, mask = sst2.sesame, sst2.sesame.batch["attention_mask"]
    config = side.model.encoder.config
    # sesame's top layer runs at [CLS] alone (encoder.top_layer_at_summary); the Trainer's model runs it whole
    for bf16 in (False, True):
        counted = gp.count_flops(lambda: side.forward_backward(bf16))["total"]
        assert counted == gp.bert_step_flops(config, mask.shape[0], mask.shape[1], "sequence", 2, summary_top_layer=True)
    whole = gp.count_flops(lambda: sst2.trainer.forward_backward(False))["total"]
    assert whole == gp.bert_step_flops(config, mask.shape[0], mask.shape[1], "sequence", 2) > counted


def test_both_sides_see_the_same_batch_and_compute_the_same_fp32_loss_from_the_same_weights(sides, tiny_bert_dir, tmp_path):
    sst2 = sides.build_workload("sst2", str(tiny_bert_dir), True, 0, 4, tmp_path)  # fresh: no step taken yet
    assert torch.equal(sst2.sesame.batch["input_ids"], sst2.trainer.batch["input_ids"])
    assert torch.equal(sst2.sesame.batch["labels"], sst2.trainer.batch["labels"])
    check = sides.compare_outputs(sst2)
    assert check["loss_abs_diff"] < 1e-5 and check["outputs_max_abs_diff"] < 1e-5
    # the batch is a length-grouped one: its sentences pad to a common length with little padding
    assert sst2.batch_info["examples"] == 32 and sst2.batch_info["padded_length"] == sst2.batch_info["target_padded_length"]

    squad = sides.build_workload("squad256", str(tiny_bert_dir), True, 0, 4, tmp_path)
    assert squad.batch_info["same_input_ids"] and tuple(squad.sesame.batch["input_ids"].shape) == (12, 256)
    assert sides.compare_outputs(squad)["outputs_max_abs_diff"] < 1e-5  # the context logits; the losses differ by design
    # --pick median: the epoch's median-length batch instead of full windows
    median = sides.build_workload("squad256", str(tiny_bert_dir), True, 0, 4, tmp_path, pick="median")
    assert (median.batch_info["rule"], squad.batch_info["rule"]) == ("median", "full")
    assert median.batch_info["padded_length"] == median.batch_info["target_padded_length"] == \
        median.batch_info["median_padded_length"]


def test_pick_batch_takes_the_first_batch_nearest_the_target_length(sides):
    lengths = [5, 9, 9, 3, 4, 8, 2, 2]
    batches = [[0, 1], [2, 3], [4, 5], [6, 7], [0]]  # padded lengths 9, 9, 8, 2; the partial one is never picked
    assert sides.pick_batch(batches, lengths, 2, "median", 64)[0] == [0, 1]  # median of 2, 8, 9, 9 is 9
    assert sides.pick_batch(batches, lengths, 2, "full", 8)[0] == [4, 5]


def test_the_gemm_rate_is_its_flops_over_its_time_and_the_own_shape_peak_a_weighted_harmonic_mean(gp):
    rate = gp.gemm_rate((3, 8, 16, 4), torch.float32, min_seconds=0.0, min_calls=5)
    assert rate["flops_per_call"] == 2 * 3 * 8 * 16 * 4 and rate["calls"] >= 5
    assert rate["flops_per_s"] == pytest.approx(rate["calls"] * rate["flops_per_call"] / rate["seconds"])
    peak = gp.own_shape_peak({(1, 2, 2, 2): 300, (1, 4, 4, 4): 100}, {(1, 2, 2, 2): 100.0, (1, 4, 4, 4): 50.0})
    assert peak["floor_s"] == pytest.approx(3 + 2) and peak["peak_flops_per_s"] == pytest.approx(400 / 5)
    squares = gp.square_peaks([8, 16], torch.bfloat16, min_seconds=0.0)
    assert squares["peak_flops_per_s"] == max(r["flops_per_s"] for r in squares["rates"])
