"""--multirun sweeps: every job folder holds the run files, and sesame-report tabulates them."""

import json
import shutil
import statistics
import sys

import pytest
import yaml

from sesame.tasks.cli.report import main as report_main
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.runs.sweep_report import (Variant, bar_figure, curve_figure, main_metric, read_curves, read_jobs, read_log,
                                       smooth, variants, write_table_report)
from tests.conftest import require
from tests import preloaded_commands as preloaded


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


def test_the_bar_chart_starts_at_0_labels_past_the_whiskers_and_says_what_it_shows():
    require("matplotlib")
    rows = [Variant("pooling=mean", [0.80, 0.84, 0.83], ["0", "1", "2"]), Variant("pooling=cls", [0.46, 0.60], ["3", "4"]),
            Variant("pooling=max", [-0.10, -0.02], ["5", "6"])]
    fig = bar_figure(rows, "val_matthews", title="glue/sweep")
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert low <= -0.10 and high >= 0.84  # nothing cut: every bar is drawn from 0
    assert [t.get_text() for t in ax.get_yticklabels()] == ["pooling=max", "pooling=cls", "pooling=mean"]  # best on top
    labels = {round(t.get_position()[1]): t for t in ax.texts}
    fig.canvas.draw()
    for y, row in enumerate(rows[::-1]):
        text = labels[y]
        assert text.get_text() == f"{row.mean:.3f} ± {row.std:.3f} (n={len(row.values)})"
        box = text.get_window_extent().transformed(ax.transData.inverted())
        if row.mean >= 0:  # the label starts past the whisker's end, never across it
            assert box.x0 > row.mean + row.std
        else:
            assert box.x1 < row.mean - row.std
        assert low <= box.x0 and box.x1 <= high  # and stays inside the axes
    assert ax.get_title() == "glue/sweep"
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "mean val_matthews over each variant's seeds" in caption and "±1 sample standard deviation" in caption
    assert "n = runs per variant" in caption and "start at 0" in caption

    one_seed = bar_figure([Variant("pooling=cls", [0.7], ["0"]), Variant("pooling=mean", [0.6], ["1"])], "val_accuracy")
    assert [t.get_text() for t in one_seed.axes[0].texts] == ["0.600", "0.700"]  # no spread to claim
    assert "one run per variant" in one_seed.texts[0].get_text()
    assert one_seed.axes[0].get_xlim()[0] == 0.0


def test_unfinished_jobs_are_left_out_and_an_empty_sweep_is_an_error(tmp_path):
    _job(tmp_path, 0, ["pooling=cls"], {"val_f1": 0.5})
    (tmp_path / "1" / ".hydra").mkdir(parents=True)
    (tmp_path / "1" / ".hydra" / "overrides.yaml").write_text("- pooling=mean\n")
    assert len(read_jobs(tmp_path)) == 1
    with pytest.raises(FileNotFoundError, match="no finished jobs"):
        read_jobs(tmp_path / "1")


def test_a_real_multirun_writes_every_job_folder_and_ends_with_the_sweep_summary(tiny_bert_dir, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    done = preloaded.run(
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
    # The sweep's summary (conf/config.yaml: hydra.callbacks.sweep_report), printed and written when it ends
    table = (sweep / "report.md").read_text()
    assert "| pooling=cls |" in table and "| pooling=mean |" in table and {"report.csv"} <= {p.name for p in sweep.iterdir()}
    assert done.stdout.rstrip().endswith(f"wrote {sweep / 'report.md'}, {sweep / 'report.csv'}" +
                                         (f", {sweep / 'report.png'}" if (sweep / "report.png").exists() else ""))
    assert table in done.stdout
    # Lightning's known noise is not on stderr (tasks/core/known_noise.py); its own lines are printed once each, by Hydra's log
    for noise in ("litlogger", "LeafSpec", "in eval mode", "INFO: GPU available"):
        assert noise not in done.stderr, noise
    assert done.stdout.count("GPU available: False") == 2  # once per job
    # --curves without a metric lists what the jobs logged
    report_main([str(sweep), "--curves"])
    listed = capsys.readouterr().out.split()
    assert {"train_loss", "lr_head", "grad_norm", "val_accuracy", "val_loss"} <= set(listed)
    assert "epoch" not in listed and "step" not in listed and not (sweep / "curves_train_loss.csv").exists()


def test_optuna_search_runs_trials_and_reports_the_best(tiny_bert_dir, tmp_path):
    require("hydra_plugins.hydra_optuna_sweeper")
    sweep = tmp_path / "optuna"
    preloaded.run(
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
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", f"hydra/launcher={launcher}", "--cfg", "hydra"],
        check=True, capture_output=True, text=True,
    )
    launcher_cfg = yaml.safe_load(out.stdout)["hydra"]["launcher"]
    assert launcher_cfg["_target_"].split(".")[-1] in ("SlurmLauncher", "JoblibLauncher")


# --- training curves (sesame-report --curves) --------------------------------------------------------------


def _csv_column(job, column="train_loss"):
    """``{step: value}`` of a column of a job's logs/metrics.csv, read with the csv module alone."""
    import csv

    with (job / "logs" / "metrics.csv").open(newline="") as handle:
        return {int(row["step"]): float(row[column]) for row in csv.DictReader(handle) if row[column]}


def _by_overrides(sweep):
    """``{(init, seed): job folder}`` of the init sweep."""
    jobs = {}
    for job in sweep.iterdir():
        if (job / ".hydra" / "overrides.yaml").is_file():
            o = dict(x.split("=", 1) for x in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
            jobs[o["encoder.init"], o["seed"]] = job
    return jobs


@pytest.fixture(scope="module")
def init_sweep(tiny_bert_dir, tmp_path_factory):
    """A real tiny multirun: two inits x two seeds, train_loss logged at every step."""
    sweep = tmp_path_factory.mktemp("curves") / "sweep"
    preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "encoder.init=pretrained,random", "seed=1,2",
         "finetune=frozen", f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.log_every_n_steps=1",
         "trainer.enable_progress_bar=false", "data.max_train_examples=128", "data.max_eval_examples=32",
         f"hydra.sweep.dir={sweep}"],
        check=True, capture_output=True, text=True,
    )
    return sweep


def test_curves_are_the_csv_logs_mean_over_seeds_one_line_per_variant(init_sweep):
    jobs = _by_overrides(init_sweep)
    curves, skipped = read_curves(init_sweep, "train_loss")
    assert not skipped
    assert [c.label for c in curves] == ["encoder.init=pretrained", "encoder.init=random"]  # seed is not a variant
    for curve in curves:
        init = curve.label.split("=")[1]
        logs = [_csv_column(jobs[init, seed]) for seed in ("1", "2")]
        assert logs[0] != logs[1]  # the seeds trained differently: the mean is a real mean
        assert sorted(curve.jobs) == sorted(jobs[init, s].name for s in ("1", "2"))
        assert curve.steps == sorted(logs[0]) == [0, 1, 2, 3]
        assert curve.values == [statistics.fmean([logs[0][s], logs[1][s]]) for s in curve.steps]
        assert curve.low == [min(logs[0][s], logs[1][s]) for s in curve.steps]
        assert curve.high == [max(logs[0][s], logs[1][s]) for s in curve.steps]


def test_the_real_sweep_is_compared_from_the_files_its_runs_wrote(init_sweep, tmp_path):
    """A real tiny multirun through the comparisons: each run's val_SST-2.tsv rescored by the GLUE
    task's metrics gives its metrics.json value (no note says otherwise), and both tests run."""
    table, _ = write_table_report(init_sweep, tmp_path, baseline=["encoder.init=pretrained"])
    lines = table.splitlines()
    assert lines[0] == "| variant | val_accuracy | seeds | 95% CI | Δ vs baseline | p, dev examples | p, seeds |"
    random = next([c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| encoder.init=random"))
    assert random[2] == "2" and random[3].startswith("[") and float(random[5].rstrip(" *")) > 0  # a p-value, not n/a
    assert float(random[6]) >= 1 / 3  # 2 + 2 seeds: the exact permutation test's smallest p is 2/6
    assert "paired bootstrap over the 32 dev examples" in table  # data.max_eval_examples=32
    assert "its prediction files give" not in table and "no per-example scores" not in table
    assert "with these seeds no difference can hold at α = 0.05" in table


def test_the_plotted_lines_are_the_logged_values(init_sweep, tmp_path):
    require("matplotlib")
    jobs = _by_overrides(init_sweep)
    one_seed = tmp_path / "one_seed"  # the seed-1 jobs alone: each line is one job's log, as written
    for init in ("pretrained", "random"):
        shutil.copytree(jobs[init, "1"], one_seed / jobs[init, "1"].name)
    curves, _ = read_curves(one_seed, "train_loss")
    lines = curve_figure(curves, "train_loss").axes[0].lines
    assert [line.get_label() for line in lines] == ["encoder.init=pretrained", "encoder.init=random"]
    for line, init in zip(lines, ("pretrained", "random")):
        logged = _csv_column(jobs[init, "1"])
        assert list(line.get_xdata()) == sorted(logged)
        assert list(line.get_ydata()) == [logged[s] for s in sorted(logged)]

    # Seeds folded: the line is their mean; smoothed: the moving average, the raw mean faint behind it.
    curves, _ = read_curves(init_sweep, "train_loss")
    lines = curve_figure(curves, "train_loss", window=3).axes[0].lines
    raw, smoothed = lines[0], lines[1]
    assert smoothed.get_label() == "encoder.init=pretrained (mean of 2 seeds)"
    assert list(raw.get_ydata()) == curves[0].values
    assert list(smoothed.get_ydata()) == smooth(curves[0].values, 3)
    assert smooth([1.0, 2.0, 3.0, 4.0], 3) == [1.0, 1.5, 2.0, 3.0]


def test_sesame_report_curves_writes_png_and_csv(init_sweep, tmp_path, capsys):
    require("matplotlib")
    report_main([str(init_sweep), "--curves", "train_loss", "val_loss", "--smooth", "2", "--out", str(tmp_path)])
    for name in ("curves_train_loss.png", "curves_val_loss.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "report.md").is_file()  # the table as well
    rows = (tmp_path / "curves_train_loss.csv").read_text().splitlines()
    assert rows[0] == "variant,step,train_loss_mean,train_loss_min,train_loss_max,jobs"
    curves, _ = read_curves(init_sweep, "train_loss")
    assert [float(r.split(",")[2]) for r in rows[1:]] == curves[0].values + curves[1].values
    assert "train_loss encoder.init=random (2 jobs): 4 points, steps 0-3" in capsys.readouterr().out


def test_jobs_without_a_csv_log_are_named_and_left_out(init_sweep, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(init_sweep, sweep)
    jobs = _by_overrides(sweep)
    (jobs["random", "2"] / "logs" / "metrics.csv").unlink()
    curves, skipped = read_curves(sweep, "train_loss")
    assert [len(c.jobs) for c in curves] == [2, 1]  # random: seed 1 alone
    assert curves[1].values == [v for _, v in sorted(_csv_column(jobs["random", "1"]).items())]
    assert len(skipped) == 1 and f"job {jobs['random', '2'].name} (encoder.init=random) left out" in skipped[0]
    assert "no logs/metrics.csv" in skipped[0]

    with pytest.raises(ConfigError, match=r"no column 'train_los'; it logged \[.*'train_loss', 'val_accuracy'"):
        read_log(jobs["random", "1"], "train_los")
    for job in jobs.values():
        (job / "logs" / "metrics.csv").unlink(missing_ok=True)
    with pytest.raises(MissingFileError, match="no job has a train_loss curve"):
        read_curves(sweep, "train_loss")
    with pytest.raises(SystemExit) as exit_:
        report_main([str(sweep), "--curves", "train_loss", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "no job has a train_loss curve" in err and "no logs/metrics.csv" in err
    with pytest.raises(SystemExit):  # a window of 0 points is refused by the parser
        report_main([str(sweep), "--curves", "train_loss", "--smooth", "0"])


def test_the_sweep_summary_is_a_hydra_callback_that_can_be_turned_off():
    from hydra import compose, initialize_config_module
    from hydra.utils import get_class

    from sesame.tasks.cli.sweep_summary import SweepSummary

    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        on = compose(config_name="config", return_hydra_config=True)
        off = compose(config_name="config", overrides=["~hydra.callbacks.sweep_report"], return_hydra_config=True)
    assert get_class(on.hydra.callbacks.sweep_report._target_) is SweepSummary
    assert dict(off.hydra.callbacks) == {}
