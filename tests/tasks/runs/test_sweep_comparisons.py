"""sesame-report's comparisons: each variant against a baseline over dev examples (paired bootstrap on the
runs' prediction files) and over seeds (permutation test), Holm-corrected, marked at --alpha; and every
bad option ending in one error line, exit 2, nothing written.

The sweep is laid out exactly as ``sesame-train --multirun`` writes one (``<job>/.hydra/overrides.yaml``,
the resolved ``config.yaml``, ``metrics.json``, ``val_SST-2.tsv`` against the shipped SST-2 dev set),
with predictions drawn at known accuracies: ``pooling=mean`` 8 points above ``pooling=cls``, and
``pooling=max`` drawn like ``pooling=cls``.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from sesame.tasks.cli.report import main as report_main
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.sweep_comparisons import pick_baseline
from tests.conftest import require
from sesame.tasks.runs.sweep_report import Variant, read_jobs, variants, write_table_report
from tests.conftest import tsv_labels
from tests import preloaded_commands as preloaded

GOLD = np.asarray(tsv_labels(), dtype=int)  # the shipped SST-2 dev set: 872 sentences
ACCURACY = {"cls": 0.80, "mean": 0.88, "max": 0.80}


def write_job(folder, overrides, cfg_text, predictions):
    """One finished job: what sesame-train --multirun leaves in it (checkpoints aside)."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "config.yaml").write_text(cfg_text)
    accuracy = float(np.mean(predictions == GOLD))
    (folder / "metrics.json").write_text(json.dumps({"val_accuracy": accuracy, "val_loss": 0.5}))
    lines = ["index\tprediction"] + [f"{i}\t{p}" for i, p in enumerate(predictions.tolist())]
    (folder / "val_SST-2.tsv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def sweep(make_cfg, tmp_path_factory):
    """3 poolings x 5 seeds; each job's predictions right on each dev sentence with its pooling's accuracy."""
    root = tmp_path_factory.mktemp("comparisons") / "sweep"
    rng = np.random.default_rng(0)
    job = 0
    for pooling, accuracy in ACCURACY.items():
        cfg_text = OmegaConf.to_yaml(make_cfg("task=glue", f"pooling={pooling}"), resolve=True)
        for seed in range(1, 6):
            right = rng.random(GOLD.size) < accuracy
            write_job(root / str(job), ["data=sst2_slice", f"pooling={pooling}", f"seed={seed}"], cfg_text,
                      np.where(right, GOLD, 1 - GOLD))
            job += 1
    return root


def test_the_table_shows_intervals_p_values_and_holm_marks(sweep, tmp_path, capsys):
    report_main([str(sweep), "--baseline", "pooling=cls", "--out", str(tmp_path)])
    table = (tmp_path / "report.md").read_text()
    assert capsys.readouterr().out.startswith(table)
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
                                          if line.startswith("| pooling="))}
    assert table.splitlines()[0] == "| variant | val_accuracy | seeds | 95% CI | Δ vs baseline | p, dev examples | p, seeds |"
    assert list(rows)[0] == "pooling=mean" and set(rows) == {"pooling=mean", "pooling=max", "pooling=cls"}  # best first
    mean, cls = rows["pooling=mean"], rows["pooling=cls"]
    assert cls[4:] == ["baseline", "", ""]
    # 8 points on 872 examples and on 5 + 5 seeds: both tests hold after Holm (over 2 comparisons)
    assert mean[2] == "5" and mean[3].startswith("[0.8") and float(mean[4]) == pytest.approx(0.08, abs=0.02)
    assert mean[5] == "0.002 *" and mean[6] == "0.016 *"  # bootstrap: 2 x 1/1001; exact permutation: 2 x 2/252
    # pooling=max is drawn like the baseline: neither test holds
    maximum = rows["pooling=max"]
    assert "*" not in maximum[5] and "*" not in maximum[6] and float(maximum[5]) > 0.05
    assert "Baseline: pooling=cls (--baseline pooling=cls)" in table
    assert "paired bootstrap over the 872 dev examples, 1000 resamples (seed 0)" in table
    assert "Holm-adjusted over the table's 2 comparisons" in table and "holds at α = 0.05" in table
    assert "Note:" not in table  # every run's file gives its metrics.json value

    # the interval is Student's t over the 5 seeds
    jobs = read_jobs(sweep)
    values = next(r for r in variants(jobs, "val_accuracy") if r.overrides == "pooling=mean").values
    half = 2.776445 * np.std(values, ddof=1) / np.sqrt(5)
    assert mean[3] == f"[{np.mean(values) - half:.4f}, {np.mean(values) + half:.4f}]"

    lines = (tmp_path / "report.csv").read_text().splitlines()
    assert lines[0].endswith(",ci95_low,ci95_high,difference,p_examples,p_examples_holm,holds_examples,p_seeds,"
                             "p_seeds_holm,aso_epsilon,holds_seeds,baseline")
    by_variant = {line.split(",")[0].strip('"'): line.split(",") for line in lines[1:]}
    assert by_variant["pooling=mean"][-1] == "false" and by_variant["pooling=cls"][-1] == "true"
    header = lines[0].split(",")
    mean_csv = dict(zip(header, by_variant["pooling=mean"]))
    assert mean_csv["holds_examples"] == "true" and float(mean_csv["p_examples"]) == pytest.approx(1 / 1001)
    assert float(mean_csv["p_examples_holm"]) == pytest.approx(2 / 1001) and float(mean_csv["p_seeds"]) == pytest.approx(2 / 252)


def test_the_default_baseline_is_the_best_and_alpha_moves_the_marks(sweep, tmp_path):
    table, _ = write_table_report(sweep, tmp_path, alpha=0.001)
    assert "Baseline: pooling=mean (the best variant)" in table
    assert "| pooling=mean | " in table and "| baseline |" in table
    assert " *" not in table.split("\n\n")[0]  # at α = 0.001 neither 0.002 nor 0.016 holds
    assert "holds at α = 0.001" in table


def test_a_variant_with_one_seed_or_no_prediction_file_says_so(sweep, tmp_path):
    partial = tmp_path / "sweep"
    shutil.copytree(sweep, partial)
    for job in ("6", "7", "8", "9"):  # pooling=mean keeps one seed
        shutil.rmtree(partial / job)
    (partial / "10" / "val_SST-2.tsv").unlink()  # a pooling=max run without its predictions
    table, _ = write_table_report(partial, tmp_path / "out", baseline=["pooling=cls"])
    row = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| pooling=")}
    assert "| 1 | n/a (1 seed) |" in row["pooling=mean"] and "n/a (1 + 5 seeds)" in row["pooling=mean"]
    assert "n/a (no per-example scores: " in row["pooling=max"] and "val_SST-2.tsv: no such prediction file" in row["pooling=max"]
    assert "*" in row["pooling=mean"].split(" | ")[5]  # one seed still has 872 examples to test


def test_a_single_seed_sweep_has_the_example_test_alone(sweep, tmp_path):
    one_seed = tmp_path / "sweep"
    for job in ("0", "5", "10"):  # seed 1 of each pooling, as the layer study ran
        shutil.copytree(sweep / job, one_seed / job)
    table, _ = write_table_report(one_seed, tmp_path / "out", baseline=["pooling=cls"])
    assert table.splitlines()[0] == "| variant | val_accuracy | Δ vs baseline | p, dev examples |"
    assert "p, seeds" not in table and "95% CI" not in table


@pytest.mark.parametrize("args, message", [
    (["--baseline", "pooling=sum"], "--baseline pooling=sum: no variant has pooling=sum; pooling takes cls, max, mean"),
    (["--baseline", "fusion=last"], "--baseline fusion=last: no variant sets it; the variants differ in pooling"),
    (["--baseline", "data=sst2_slice"], "--baseline data=sst2_slice: every job has data=sst2_slice, so it tells no variant apart"),
    (["--baseline", "pooling"], "--baseline pooling: expected KEY=VALUE"),
    (["--alpha", "1.5"], "--alpha 1.5: a significance level lies between 0 and 1"),
    (["--alpha", "five"], "argument --alpha: invalid float value: 'five'"),
    (["--bootstrap", "10"], "--bootstrap 10: too few resamples"),
    (["--seed-test", "ttest"], "--seed-test ttest: use one of permutation, aso"),
    (["--metric", "val_f1"], "--metric val_f1: not in the jobs' metrics.json"),
])
def test_bad_options_end_in_one_line_and_write_nothing(sweep, tmp_path, capsys, args, message):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the table of before\n")
    with pytest.raises(SystemExit) as stop:
        report_main([str(sweep), "--out", str(out), *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err
    assert (out / "report.md").read_text() == "the table of before\n" and sorted(p.name for p in out.iterdir()) == ["report.md"]


@pytest.mark.parametrize("folder", ["missing", "a_file", "empty"])
def test_a_folder_that_is_not_a_sweep_is_one_line(tmp_path, capsys, folder):
    (tmp_path / "a_file").write_text("not a sweep\n")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as stop:
        report_main([str(tmp_path / folder), "--baseline", "pooling=cls"])
    assert stop.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no finished jobs (no */.hydra/overrides.yaml with a metrics.json)" in errors[0]


def test_aso_over_seeds_marks_by_its_violation_ratio(sweep, tmp_path):
    require("deepsig")  # the `report` extra, which make install installs
    table, _ = write_table_report(sweep, tmp_path, baseline=["pooling=cls"], seed_test="aso")
    assert "| ε_min, seeds (ASO) |" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("| pooling=mean"))
    assert row.endswith("| 0.000 * |")
    assert "Almost Stochastic Order (deepsig)" in table and "ε_min < 0.2" in table


def test_the_baseline_is_picked_by_its_settings():
    rows = [Variant("fusion=last pooling=cls", [0.8], ["0"], ("fusion=last", "pooling=cls")),
            Variant("fusion=last pooling=mean", [0.7], ["1"], ("fusion=last", "pooling=mean")),
            Variant("+layer_study=sum_last_4", [0.6], ["2"], ("+layer_study=sum_last_4",))]
    assert pick_baseline(rows, None) == (rows[0], "the best variant")
    assert pick_baseline(rows, ["fusion=last", "pooling=mean"])[0] is rows[1]
    assert pick_baseline(rows, ["layer_study=sum_last_4"])[0] is rows[2]  # Hydra's + and ~ are not part of the key
    assert pick_baseline(rows, ["+layer_study=sum_last_4"])[0] is rows[2]
    assert pick_baseline(rows, ["fusion=last pooling=mean"])[0] is rows[1]  # a whole label
    with pytest.raises(ConfigError, match=r"2 variants match .*e\.g\. --baseline pooling=\.\.\."):
        pick_baseline(rows, ["fusion=last"])
    with pytest.raises(ConfigError, match="no variant has all of these"):
        pick_baseline(rows, ["fusion=last", "layer_study=sum_last_4"])


def test_a_real_layer_study_sweep_is_compared_sentence_by_sentence(tiny_bert_dir, tmp_path):
    """The NER layer study's shape (conf/layer_study/, one seed a variant) on the WNUT-17 slice and the tiny
    encoder: the per-example column comes from each run's val_predictions.conll."""
    import sys

    sweep = tmp_path / "sweep"
    preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "task=ner",
         "+layer_study=last,second_to_last,full_last", f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug",
         "trainer.enable_progress_bar=false", "data.max_eval_examples=40", "finetune.head_lr=0.05",
         f"cache.dir={tmp_path / 'cache'}", "~hydra.callbacks.sweep_report", f"hydra.sweep.dir={sweep}"],
        check=True, capture_output=True, text=True,
    )
    table, _ = write_table_report(sweep, tmp_path / "out", baseline=["layer_study=last"])
    lines = table.splitlines()
    assert lines[0] == "| variant | val_f1 | Δ vs baseline | p, dev examples |"
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:5])}
    assert rows["+layer_study=last"][2] == "baseline"
    for variant in ("+layer_study=second_to_last", "+layer_study=full_last"):
        assert 0 < float(rows[variant][3].rstrip(" *")) <= 1
    assert "Baseline: +layer_study=last (--baseline layer_study=last)" in table
    assert "paired bootstrap over the 40 dev examples" in table and "Note:" not in table
