"""--multirun sweeps: every job folder holds the run files, and sesame-report tabulates them."""

import json
import subprocess
import sys

import pytest
import yaml

from sesame.tasks.cli.report import main as report_main
from sesame.tasks.sweep_report import main_metric, read_jobs, variants
from tests.conftest import require


def _job(root, n, overrides, metrics, main_metric=None):
    (root / str(n) / ".hydra").mkdir(parents=True)
    (root / str(n) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (root / str(n) / "metrics.json").write_text(json.dumps(metrics))
    main_metric = main_metric or next(iter(metrics))
    (root / str(n) / "config.yaml").write_text(yaml.safe_dump({"task": {"main_metric": main_metric}}))


def _seed_sweep(root):
    for n, (pool, seed, acc) in enumerate([("cls", 1, 0.70), ("cls", 2, 0.74), ("mean", 1, 0.80), ("mean", 2, 0.84)]):
        _job(root, n, ["data=sst2", f"pooling={pool}", f"seed={seed}"], {"val_accuracy": acc, "val_loss": 1.0})


def test_seeds_fold_into_mean_and_std_sorted_best_first(tmp_path):
    _seed_sweep(tmp_path)
    jobs = read_jobs(tmp_path)
    metric = main_metric(jobs)
    rows = variants(jobs, metric)
    assert metric == "val_accuracy"
    assert [r.overrides for r in rows] == ["pooling=mean", "pooling=cls"]
    assert rows[0].mean == pytest.approx(0.82) and rows[0].std == pytest.approx(0.028284271)
    report_main([str(tmp_path)])
    assert "| pooling=mean | 0.8200 ± 0.0283 | 2 |" in (tmp_path / "report.md").read_text()


def test_the_report_draws_a_bar_chart_with_the_plot_extra(tmp_path):
    require("matplotlib")  # the `plot` extra; without it the report is the table alone
    _seed_sweep(tmp_path)
    report_main([str(tmp_path)])
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "report.png").stat().st_size > 1000


def test_unfinished_jobs_are_left_out_and_an_empty_sweep_is_an_error(tmp_path):
    _job(tmp_path, 0, ["pooling=cls"], {"val_f1": 0.5})
    (tmp_path / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text("- pooling=mean\n")
    assert len(read_jobs(tmp_path)) == 1
    with pytest.raises(FileNotFoundError, match="no finished jobs"):
        read_jobs(tmp_path / "1")


def test_a_real_multirun_writes_every_job_folder(tiny_bert_dir, tmp_path):
    sweep = tmp_path / "sweep"
    subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "pooling=cls,mean", "finetune=frozen",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.enable_progress_bar=false",
         "data.max_train_examples=64", "data.max_eval_examples=64", f"hydra.sweep.dir={sweep}"],
        check=True, capture_output=True, text=True,
    )
    for job in ("0", "1"):
        files = {p.name for p in (sweep / job).iterdir()}
        assert {"config.yaml", "metrics.json", "checkpoints", "val_SST-2.tsv"} <= files
    assert main_metric(read_jobs(sweep)) == "val_accuracy"  # task.main_metric of the jobs' config.yaml
    rows = variants(read_jobs(sweep), "val_accuracy")
    assert sorted(r.overrides for r in rows) == ["pooling=cls", "pooling=mean"]


def test_optuna_search_runs_trials_and_reports_the_best(tiny_bert_dir, tmp_path):
    require("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "optuna"
    subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "+experiment=optuna_sst2",
         "hydra.sweeper.n_trials=2", f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.max_epochs=1",
         "trainer.enable_progress_bar=false", "data.max_train_examples=32", "data.max_eval_examples=32",
         f"cache.dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"],
        check=True, capture_output=True, text=True,
    )
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = read_jobs(sweep)
    assert len(trials) == 2
    assert best["best_value"] == max(m["val_accuracy"] for _, _, m in trials)


@pytest.mark.parametrize("launcher", ["slurm", "local_parallel"])
def test_launcher_configs_compose(launcher, tmp_path):
    require("hydra_plugins.hydra_submitit_launcher")
    require("hydra_plugins.hydra_joblib_launcher")
    out = subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", f"hydra/launcher={launcher}", "--cfg", "hydra"],
        check=True, capture_output=True, text=True,
    )
    launcher_cfg = yaml.safe_load(out.stdout)["hydra"]["launcher"]
    assert launcher_cfg["_target_"].split(".")[-1] in ("SlurmLauncher", "JoblibLauncher")
