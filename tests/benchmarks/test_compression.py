"""benchmarks/compression.py --quick runs end to end and writes a consistent table, its Pareto front and plot."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import preloaded_commands as preloaded
from tests.conftest import SST2_DEV, build_tiny_bert, prediction_accuracy, require

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compression.py"
VARIANTS = ["finetuned", "int8", "int8_onnx", "student", "distilled", "heads", "ffn", "pruned", "pruned_recovered",
            "pruned_int8_onnx", "pipeline"]
ONNX = {"int8_onnx", "pruned_int8_onnx", "pipeline"}


def _bench(encoder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--quick", "--tasks", "sst2", "--encoder", str(encoder), "--out", str(out),
           "--rounds", "1", "--batches", "2", "--sst2-override", "data.max_eval_examples=32", *extra]
    return preloaded.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The quick benchmark on a tiny BERT of 4 layers of 4 heads (so that pruning a quarter of the heads
    leaves every layer some), pruning --heads 0.25 --ffn 0.5 with recovery in 2 rounds."""
    require("onnxruntime")
    require("onnxscript")
    encoder = build_tiny_bert(tmp_path_factory.mktemp("bert4x4"), num_layers=4, heads=4)
    out = tmp_path_factory.mktemp("bench") / "out"
    proc = _bench(encoder, out, "--heads", "0.25", "--prune-rounds", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, encoder, proc.stdout


def _dominated(row, rows):
    return any(o["speedup_b1"] >= row["speedup_b1"] and o["score"] >= row["score"]
               and (o["speedup_b1"] > row["speedup_b1"] or o["score"] > row["score"]) for o in rows)


def test_the_quick_benchmark_writes_every_model_with_ratios(bench):
    out, _, _ = bench
    rows = json.loads((out / "compression.json").read_text())["tasks"]["sst2"]
    by_name = {r["model"]: r for r in rows}
    assert list(by_name) == VARIANTS
    base = by_name["finetuned"]
    assert base["size_ratio"] == base["speedup_b1"] == base["speedup_b32"] == 1.0
    # every other of the tiny encoder's 4 layers for the student and what is made from it
    assert [by_name[n]["layers"] for n in VARIANTS] == [4, 4, 4, 2, 2, 4, 4, 4, 4, 4, 2]
    assert {n for n, r in by_name.items() if r["runtime"] == "onnxruntime int8"} == ONNX
    assert {n for n, r in by_name.items() if r.get("int8_weights") == "per_channel"} == ONNX  # the export's default
    assert {n for n, r in by_name.items() if r["runtime"] == "torch"} == set(VARIANTS) - ONNX
    size = {n: r["size_mb"] for n, r in by_name.items()}
    assert max(size[n] for n in VARIANTS[1:]) < size["finetuned"]
    assert size["pruned"] < min(size["heads"], size["ffn"]) and size["pruned_recovered"] == pytest.approx(size["pruned"], rel=1e-2)
    assert size["pipeline"] < size["int8_onnx"] and size["pipeline"] < size["distilled"]
    assert size["pipeline"] < size["pruned_int8_onnx"] < size["int8_onnx"]
    for row in rows:
        # Each model's score is the accuracy of that model's own written predictions, and its eval metrics.
        evaluated = out / "sst2" / f"eval_{row['model']}"
        assert row["metric"] == "val_accuracy"
        assert row["score"] == pytest.approx(prediction_accuracy(evaluated / "val_SST-2.tsv"), rel=1e-6)
        assert row["metrics"] == json.loads((evaluated / "metrics.json").read_text())
        assert row["score_delta"] == row["score"] - base["score"]
        assert row["latency_ms_b1"] > 0 and row["throughput_b32"] > 0
        assert row["speedup_b32"] == base["latency_ms_b32"] / row["latency_ms_b32"]
        assert row["size_ratio"] == row["size_mb"] / base["size_mb"]
    # --sst2-override reaches the trainings and every evaluation (the quick default is 64).
    assert "max_eval_examples: 32" in (out / "sst2" / "finetuned" / "config.yaml").read_text()
    for name in by_name:
        assert len((out / "sst2" / f"eval_{name}" / "val_SST-2.tsv").read_text().splitlines()) == 1 + 32
    table = (out / "compression.md").read_text()
    for name in VARIANTS:
        assert f"| {name} |" in table and f"| `{name}` |" in table  # its row, and what it is
    assert "val_accuracy" in table
    # Where the time goes at batch 1: aten operators for torch variants, graph operators for int8 graphs.
    for r in rows:
        shares = r["profile_b1"]
        assert sum(p["share"] for p in shares) == pytest.approx(1.0) and all(p["share"] > 0 for p in shares)
        ops = {p["op"] for p in shares}
        if r["model"] in ONNX:  # onnxruntime's int8 matmul kernels (fused at load: MatMulIntegerToFloat, ...)
            assert any("MatMul" in op for op in ops) and not any("::" in op for op in ops)
        else:
            assert all(op.startswith(("aten::", "quantized::")) for op in ops - {"other"})
    assert "Where the time goes in sst2 at batch 1" in table and "| pipeline | " in table
    # The distilled student's run trained against the fine-tuned teacher.
    assert "teacher:" in (out / "sst2" / "distilled" / "config.yaml").read_text()
    assert str((out / "sst2" / "finetuned").resolve()) in (out / "sst2" / "distilled" / "config.yaml").read_text()


def test_pruned_variants_prune_what_they_say_and_recover_from_the_fine_tuned_teacher(bench):
    out, _, _ = bench
    by_name = {r["model"]: r for r in json.loads((out / "compression.json").read_text())["tasks"]["sst2"]}
    # 16 heads and 4 x 32 neurons; a quarter of the heads, half of the neurons.
    assert (by_name["heads"]["heads_kept"], by_name["heads"]["neurons_kept"]) == ("12/16", "128/128")
    assert (by_name["ffn"]["heads_kept"], by_name["ffn"]["neurons_kept"]) == ("16/16", "64/128")
    for name in ("pruned", "pruned_recovered", "pruned_int8_onnx"):
        assert (by_name[name]["heads_kept"], by_name[name]["neurons_kept"]) == ("12/16", "64/128")
    assert (by_name["pipeline"]["heads_kept"], by_name["pipeline"]["neurons_kept"]) == ("6/8", "32/64")  # of the student
    teacher = str((out / "sst2" / "finetuned").resolve())
    for name, folder, source in (("pruned_recovered", "pruned_recovered", "finetuned"),
                                 ("pipeline", "pipeline_pruned", "distilled")):
        rounds = by_name[name]["prune_rounds"]
        assert [r["round"] for r in rounds] == [1, 2] and by_name[name]["teacher"] == teacher
        report = json.loads((out / "sst2" / folder / "compression.json").read_text())
        assert report["source"] == str((out / "sst2" / source / "checkpoints" / "best.ckpt").resolve())
        for k in (1, 2):
            cfg = (out / "sst2" / folder / "rounds" / str(k) / "recovered" / "config.yaml").read_text()
            assert f"teacher: {teacher}" in cfg and "max_eval_examples: 32" in cfg and "alpha: 0.5" in cfg
    # The pipeline runs the int8 graph of its pruned and recovered model; int8_onnx that of the fine-tuned one.
    for name, folder, run in (("pipeline", "pipeline_onnx", "pipeline_pruned"), ("int8_onnx", "onnx", "finetuned"),
                              ("pruned_int8_onnx", "pruned_onnx", "pruned_recovered")):
        assert by_name[name]["source"] == str(out / "sst2" / folder / "model.int8.onnx")
        export = json.loads((out / "sst2" / folder / "export.json").read_text())
        assert Path(export["checkpoint"]).resolve() == (out / "sst2" / run / "checkpoints" / "best.ckpt").resolve()


def test_onnx_variants_are_scored_on_their_graphs_outputs(bench):
    from sesame.tasks.inference.onnx_runner import OnnxRunner
    from sesame.tasks.inference.predictor import Predictor

    out, _, _ = bench
    by_name = {r["model"]: r for r in json.loads((out / "compression.json").read_text())["tasks"]["sst2"]}
    texts = [row.split("\t")[0] for row in SST2_DEV.read_text(encoding="utf-8").splitlines()[1:33]]
    for name, folder in (("int8_onnx", "onnx"), ("pruned_int8_onnx", "pruned_onnx"), ("pipeline", "pipeline_onnx")):
        predictor = Predictor.from_runner(OnnxRunner.from_folder(out / "sst2" / folder, int8=True, threads=1))
        predicted = {o["id"]: o["label"] for o in predictor([{"id": i, "text": t} for i, t in enumerate(texts)])}
        written = [line.split("\t") for line in (out / "sst2" / f"eval_{name}" / "val_SST-2.tsv").read_text().splitlines()[1:]]
        assert predicted == {int(i): p for i, p in written}
    # Not the fp32 torch model's outputs: the int8 graph's loss differs from the fine-tuned model's.
    assert by_name["int8_onnx"]["metrics"]["val_loss"] != by_name["finetuned"]["metrics"]["val_loss"]


def test_the_pareto_front_table_and_plot(bench):
    out, _, stdout = bench
    rows = json.loads((out / "compression.json").read_text())["tasks"]["sst2"]
    front = {r["model"] for r in rows if r["pareto"]}
    assert front and front == {r["model"] for r in rows if not _dominated(r, rows)}
    md = (out / "compression.md").read_text()
    fastest_first = sorted(front, key=lambda n: next(r["speedup_b1"] for r in rows if r["model"] == n))
    assert f"Pareto front of sst2 (speed × at batch 1 against dev val_accuracy): {', '.join(fastest_first)}." in md
    for r in rows:
        assert f"| {r['model']} | {r['speedup_b1']:.2f} | {r['score']:.4f} | {'yes' if r['pareto'] else ''} |" in md
    assert "![sst2: dev metric against speed-up](pareto_sst2.png)" in md and "Pareto front (no other variant" in md
    assert (out / "pareto_sst2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Pareto front of sst2" in stdout


def test_a_given_run_is_the_teacher_and_variants_can_be_chosen(bench, tmp_path):
    out, encoder, _ = bench
    given = out / "sst2" / "finetuned"
    other = tmp_path / "out"
    proc = _bench(encoder, other, "--sst2-run", str(given), "--variants", "pruned_recovered,int8",
                  "--recover-override", "trainer.max_epochs=1", "--heads", "0.25")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((other / "compression.json").read_text())["tasks"]["sst2"]
    assert [r["model"] for r in rows] == ["finetuned", "int8", "pruned_recovered"]
    assert rows[0]["source"] == str(given) and not (other / "sst2" / "finetuned").exists()
    recovered = (other / "sst2" / "pruned_recovered" / "config.yaml").read_text()
    assert f"teacher: {given.resolve()}\n" in recovered
    assert rows[2]["prune_rounds"][0]["heads_fraction"] == 0.25  # one round by default
    # Other pruning arguments on the same --out are refused, naming what differs.
    proc = _bench(encoder, other, "--sst2-run", str(given), "--variants", "pruned_recovered", "--heads", "0.5")
    assert proc.returncode != 0 and "--heads 0.25 there, 0.5 here" in proc.stderr
    proc = _bench(encoder, other, "--variants", "pruned,bogus")
    assert proc.returncode == 2 and "unknown variant(s) ['bogus']" in proc.stderr


def test_a_killed_training_step_resumes_and_a_finished_one_is_reused(tmp_path, monkeypatch):
    """A student or fine-tuning killed mid-run continues from its checkpoint (resume=true) when the benchmark
    is run again; a fresh folder starts without resume, and a finished one is not trained again."""
    from sesame.tasks.runs import runner
    from tests.benchmarks import load_benchmark

    bench_module = load_benchmark("compression")
    trained = []
    monkeypatch.setattr(runner, "train", lambda cfg, folder: trained.append((folder, cfg.resume)))
    fresh, killed, finished = (tmp_path / name for name in ("fresh", "killed", "finished"))
    killed.mkdir()
    (killed / "config.yaml").write_text("seed: 1\n")
    finished.mkdir()
    (finished / "metrics.json").write_text("{}")
    for folder in (fresh, killed, finished):
        assert bench_module.train_run(["seed=3"], folder, fresh=False) == folder
    assert trained == [(fresh, None), (killed, True)]
