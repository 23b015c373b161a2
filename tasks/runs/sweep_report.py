"""Gather the jobs of a ``--multirun`` sweep into one table and a chart, and their training curves.

Each job folder holds ``.hydra/overrides.yaml`` (what the job changed), ``config.yaml`` (whose
``task.main_metric`` is the metric to rank by), ``metrics.json`` and ``logs/metrics.csv`` (Lightning's
CSVLogger: one row per logging step, columns ``epoch``, ``step`` and one per logged value, e.g.
``train_loss`` every ``trainer.log_every_n_steps`` steps, ``val_*`` at each validation). Jobs that
differ only in ``seed`` are one variant: the table gives mean, standard deviation and the 95% Student-t
interval over seeds, and each variant's difference from a baseline with its tests over dev examples and
over seeds (``tasks/runs/sweep_comparisons.py``); the curves one line per variant, the mean over its seeds.
"""

from __future__ import annotations

import csv
import json
import math
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sesame.tasks.core.atomic_files import atomic_open, write_text_atomic
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.runs.significance import ASO_THRESHOLD, t_interval
from sesame.tasks.runs.sweep_comparisons import Comparisons, Outcome, check_options, compare, pick_baseline

#: Overrides that tell no variant apart: the seed, how a run shows or logs its progress, and how it was started
#: (``resume=true`` of the jobs that finished a sweep rerun into its folder).
IGNORED_OVERRIDES = ("seed", "trainer.enable_progress_bar", "hydra.", "logger", "resume", "overwrite")
#: What Hydra writes into a sweep folder when the sweep starts: the composed config and the command's overrides.
SWEEP_RECORD = "multirun.yaml"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


@dataclass
class Variant:
    """Jobs that differ only in ``seed``: ``values`` [seeds] of the metric, from the ``jobs`` (folder names)."""

    overrides: str  # the label: ``settings`` joined by spaces, or "(defaults)"
    values: list[float]
    jobs: list[str]
    settings: tuple[str, ...] = ()  # the overrides that tell this variant from the others (``fusion=last``)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0


def read_jobs(sweep_dir: str | Path) -> list[tuple[Path, list[str], dict[str, float]]]:
    sweep_dir = Path(sweep_dir)
    jobs = []
    for overrides_file in sorted(sweep_dir.glob("*/.hydra/overrides.yaml")):
        job = overrides_file.parent.parent
        metrics_file = job / "metrics.json"
        if not metrics_file.is_file():
            continue  # a job that failed or is still running
        overrides = yaml.safe_load(overrides_file.read_text()) or []
        jobs.append((job, overrides, json.loads(metrics_file.read_text())))
    if not jobs:
        raise MissingFileError(f"{sweep_dir}: no finished jobs (no */.hydra/overrides.yaml with a metrics.json)")
    return jobs


def job_main_metric(job: Path) -> str | None:
    """``task.main_metric`` of the config a job ran with (``config.yaml``), or None."""
    config = job / "config.yaml"
    if not config.is_file():
        return None
    return ((yaml.safe_load(config.read_text()) or {}).get("task") or {}).get("main_metric")


def main_metric(jobs: list[tuple[Path, list[str], dict[str, float]]], metric: str | None = None) -> str:
    """``metric`` if given, else the jobs' ``task.main_metric`` (all jobs of a sweep share it)."""
    keys = set().union(*(m.keys() for _, _, m in jobs))
    if metric:
        if metric not in keys:
            raise ConfigError(f"--metric {metric}: not in the jobs' metrics.json; they have {sorted(keys)}")
        return metric
    names = {job_main_metric(job) for job, _, _ in jobs} - {None}
    if len(names) == 1 and (name := names.pop()) in keys:
        return name
    raise ConfigError(f"no single task.main_metric in the jobs' config.yaml ({sorted(names) or 'none'}) among "
                     f"their metrics {sorted(keys)}; pass --metric")


def variant_settings(overrides: list[list[str]]) -> list[tuple[str, ...]]:
    """Each job's overrides, less those every job shares and the seed: what tells its variant apart."""
    shared = set.intersection(*(set(o) for o in overrides)) if len(overrides) > 1 else set()
    return [tuple(o for o in job if o not in shared and not o.lstrip("+~").startswith(IGNORED_OVERRIDES))
            for job in overrides]


def variant_labels(overrides: list[list[str]]) -> list[str]:
    """The label of each job's variant: its :func:`variant_settings` joined by spaces, or "(defaults)"."""
    return [" ".join(settings) or "(defaults)" for settings in variant_settings(overrides)]


def variants(jobs: list[tuple[Path, list[str], dict[str, float]]], metric: str) -> list[Variant]:
    """One row per distinct set of overrides (seed aside), best first."""
    groups: dict[str, Variant] = {}
    settings = variant_settings([overrides for _, overrides, _ in jobs])
    for (job, _, metrics), differs in zip(jobs, settings):
        value = metrics.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        key = " ".join(differs) or "(defaults)"
        groups.setdefault(key, Variant(key, [], [], differs)).values.append(float(value))
        groups[key].jobs.append(job.name)
    return sorted(groups.values(), key=lambda v: v.mean, reverse=True)


def markdown_table(rows: list[Variant], metric: str, comparisons: Comparisons | None = None) -> str:
    """The table (best first): each variant's mean ± std over seeds, the seeds, and (with several seeds)
    the 95% t-interval of the mean; with ``comparisons``, each variant's difference from the baseline
    and the Holm-adjusted p-values of the tests (``*``: holds at their α), then lines saying how."""
    seeds = max(len(r.values) for r in rows)
    tests = comparisons is not None and bool(comparisons.comparisons)
    head = ["variant", metric] + (["seeds", "95% CI"] if seeds > 1 else [])
    if tests:
        head += ["Δ vs baseline", "p, dev examples"]
        if seeds > 1:
            head.append("ε_min, seeds (ASO)" if comparisons.seed_test == "aso" else "p, seeds")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.overrides, f"{r.mean:.4f} ± {r.std:.4f}" if seeds > 1 else f"{r.mean:.4f}"]
        if seeds > 1:
            interval = t_interval(r.values)
            cells += [str(len(r.values)), f"[{interval[0]:.4f}, {interval[1]:.4f}]" if interval else "n/a (1 seed)"]
        if tests:
            found = comparisons.of(r)
            if found is None:
                cells += ["baseline", ""] + ([""] if seeds > 1 else [])
            else:
                cells += [f"{found.difference:+.4f}", _cell(found.examples)] + ([_cell(found.seeds)] if seeds > 1 else [])
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    return table + ("\n" + "\n".join(_how(comparisons, metric, seeds > 1)) + "\n" if tests else "")


def _cell(test: Outcome) -> str:
    """A test's cell: Holm's adjusted p (or ASO's ε_min), ``*`` where the difference holds; else why not."""
    mark = " *" if test.holds else ""
    if test.epsilon is not None:
        return f"{test.epsilon:.3f}{mark}"
    if test.adjusted is None:
        return f"n/a ({test.note})" if test.note else "n/a"
    return ("<0.001" if test.adjusted < 0.001 else f"{test.adjusted:.3f}") + mark


def _how(c: Comparisons, metric: str, seeds: bool) -> list[str]:
    """The lines under the table: the baseline, what each column is, the notes."""
    lines = [f"Baseline: {c.baseline.overrides} ({c.chosen_by}). Δ: the variant's mean {metric} over its seeds minus "
             f"the baseline's." + (" 95% CI: Student t interval of the mean over seeds." if seeds else "")]
    if c.examples is not None:
        lines.append(f"p, dev examples: paired bootstrap over the {c.examples} dev examples, {c.resamples} resamples "
                     f"(seed {c.seed}); each run's {metric} recomputed on the same resamples from its prediction files by "
                     "its task's own scorer, a variant's value the mean over its seeds; two-sided p-value of the "
                     "shifted bootstrap distribution.")
    if seeds and c.seed_test == "aso":
        lines.append(f"ε_min, seeds: Almost Stochastic Order (deepsig) of the per-seed {metric}: the violation ratio of "
                     f"'the higher-scoring side is stochastically larger', at confidence {1 - c.alpha:g} Bonferroni-"
                     f"corrected over the comparisons; * where ε_min < {ASO_THRESHOLD} (not a p-value: no Holm).")
    elif seeds:
        lines.append(f"p, seeds: permutation test of the per-seed {metric} (two-sided, difference of means; exact when "
                     "the seeds allow at most 20,000 splits, else 10,000 random ones).")
    count = f"{len(c.comparisons)} comparison{'s' if len(c.comparisons) > 1 else ''}"
    lines.append(f"p-values are Holm-adjusted over the table's {count}, each column on its own; * : the difference "
                 f"holds at α = {c.alpha:g}.")
    return lines + [f"Note: {note}" for note in c.notes]


def csv_table(rows: list[Variant], metric: str, comparisons: Comparisons | None = None) -> str:
    """One line per variant: mean, std, seeds, jobs, the 95% interval and the tests (empty where none)."""
    tested = (",ci95_low,ci95_high,difference,p_examples,p_examples_holm,holds_examples,p_seeds,p_seeds_holm,"
              "aso_epsilon,holds_seeds,baseline")
    lines = [f"variant,{metric}_mean,{metric}_std,seeds,jobs{tested}"]

    def number(value: float | None) -> str:
        return "" if value is None else repr(float(value))

    for r in rows:
        interval = t_interval(r.values) or (None, None)
        found = comparisons.of(r) if comparisons is not None else None
        tests = [""] * 8 if found is None else [
            number(found.difference), number(found.examples.p), number(found.examples.adjusted),
            str(found.examples.holds).lower(), number(found.seeds.p), number(found.seeds.adjusted),
            number(found.seeds.epsilon), str(found.seeds.holds).lower()]
        is_baseline = comparisons is not None and r is comparisons.baseline
        lines.append(f'"{r.overrides}",{r.mean:.6f},{r.std:.6f},{len(r.values)},{"|".join(r.jobs)},'
                     + ",".join([number(interval[0]), number(interval[1]), *tests, str(is_baseline).lower()]))
    return "\n".join(lines) + "\n"


def shared_overrides(jobs: list[tuple[Path, list[str], dict[str, float]]]) -> list[str]:
    """The overrides every job of the sweep has (``data=sst2``): they tell no variant apart."""
    return sorted(set.intersection(*(set(o) for _, o, _ in jobs))) if len(jobs) > 1 else []


def expected_jobs(sweep_dir: str | Path) -> list[list[str]] | None:
    """Every job's overrides in job order, as Hydra's basic sweeper expands the command recorded in the sweep's
    ``multirun.yaml`` (its ``hydra.sweeper.params`` and the command's overrides). None where that cannot be
    known: no record, another sweeper (Optuna picks its trials as it goes), or job folders not named by number."""
    record = Path(sweep_dir) / SWEEP_RECORD
    try:
        hydra_cfg = (yaml.safe_load(record.read_text()) or {}).get("hydra") or {}
    except (OSError, yaml.YAMLError):
        return None
    sweeper = hydra_cfg.get("sweeper") or {}
    if sweeper.get("_target_") != BASIC_SWEEPER or (hydra_cfg.get("sweep") or {}).get("subdir") != "${hydra.job.num}":
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    arguments = [f"{k}={v}" for k, v in (sweeper.get("params") or {}).items()]
    arguments += list((hydra_cfg.get("overrides") or {}).get("task") or [])
    try:
        parsed = OverridesParser.create().parse_overrides(arguments)
        return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    except (HydraException, ValueError):  # e.g. a glob(), which needs the config's groups to expand
        return None


@dataclass(frozen=True)
class MissingJob:
    """A job of the sweep without ``metrics.json``: its number, what tells it apart, and how far it got."""

    number: str
    label: str
    state: str


def missing_jobs(sweep_dir: str | Path) -> list[MissingJob]:
    """The jobs of a sweep that did not finish: every job the sweep's command made (:func:`expected_jobs`) that
    has no ``metrics.json``, or where the command's jobs cannot be known, every job folder without one."""
    sweep_dir = Path(sweep_dir)
    expected = expected_jobs(sweep_dir)
    if expected is None:
        folders = sorted((f.parent.parent for f in sweep_dir.glob("*/.hydra/overrides.yaml")), key=_job_order)
        jobs = [(f.name, yaml.safe_load((f / ".hydra" / "overrides.yaml").read_text()) or []) for f in folders]
    else:
        jobs = [(str(n), overrides) for n, overrides in enumerate(expected)]
    # what tells each job apart, its seed included (variant labels leave seeds out)
    shared = set.intersection(*(set(o) for _, o in jobs)) if len(jobs) > 1 else set()
    labels = [" ".join(o for o in overrides if o not in shared and not o.startswith("hydra.")) or "(defaults)"
              for _, overrides in jobs]
    missing = []
    for (name, _), label in zip(jobs, labels):
        folder = sweep_dir / name
        if (folder / "metrics.json").is_file():
            continue
        started = folder.is_dir() and any(folder.iterdir())
        missing.append(MissingJob(name, label, "started, did not finish (failed, lost, or still running)" if started
                                  else "never started"))
    return missing


def finish_command(sweep_dir: str | Path) -> str | None:
    """The command that finishes a sweep in its folder: the sweep's own command (its ``multirun.yaml``) with
    ``resume=true hydra.sweep.dir=<sweep>``, which skips the finished jobs and resumes or starts the others.
    None without the record."""
    sweep_dir = Path(sweep_dir).absolute()
    try:
        overrides = ((yaml.safe_load((sweep_dir / SWEEP_RECORD).read_text()) or {}).get("hydra") or {}).get("overrides") or {}
    except (OSError, yaml.YAMLError):
        return None
    dropped = ("resume=", "overwrite=", "hydra.sweep.dir=", "hydra.mode=", "hydra.run.dir=")
    kept = [o for o in [*(overrides.get("hydra") or []), *(overrides.get("task") or [])] if not o.startswith(dropped)]
    return " ".join(["sesame-train --multirun", *(shlex.quote(o) for o in kept), "resume=true",
                     shlex.quote(f"hydra.sweep.dir={sweep_dir}")])


def missing_section(sweep_dir: str | Path) -> str:
    """The lines under a sweep's table naming each job without results and the command that finishes them; ""
    when every job finished."""
    missing = missing_jobs(sweep_dir)
    if not missing:
        return ""
    lines = [f"Missing: {len(missing)} job{'s' if len(missing) > 1 else ''} without metrics.json, not in the table:"]
    lines += [f"- job {m.number} ({m.label}): {m.state}" for m in missing]
    command = finish_command(sweep_dir)
    if command:
        lines.append(f"Finish the sweep (finished jobs are skipped): `{command}`")
    return "\n".join(lines) + "\n"


def write_table_report(sweep_dir: str | Path, out: str | Path | None = None, metric: str | None = None,
                       title: str | None = None, baseline: list[str] | None = None, alpha: float = 0.05,
                       resamples: int = 1000, seed: int = 0, seed_test: str = "permutation") -> tuple[str, list[Path]]:
    """The sweep's table: ``report.md``, ``report.csv`` and (with matplotlib) ``report.png`` in ``out``
    (default: the sweep folder), ranked by ``metric`` (default: the task's main metric), each variant
    compared with ``baseline`` (``KEY=VALUE`` settings that pick one; default: the best) over dev
    examples and over seeds (``tasks/runs/sweep_comparisons.py``; ``alpha``, ``resamples`` of the
    bootstrap, ``seed`` of the resamples, ``seed_test``). Every option is checked before anything is
    written. Returns the Markdown table and the files written (``sesame-report``, and the end of every
    ``--multirun``)."""
    out = Path(out if out is not None else sweep_dir)
    jobs = read_jobs(sweep_dir)
    metric = main_metric(jobs, metric)
    rows = variants(jobs, metric)
    if not rows:
        raise ConfigError(f"{sweep_dir}: no finished job reports {metric} in its metrics.json")
    check_options(alpha, resamples, seed_test)
    base, chosen_by = pick_baseline(rows, baseline, shared_overrides(jobs))
    comparisons = compare(sweep_dir, rows, base, chosen_by, metric, alpha, resamples, seed, seed_test) if len(rows) > 1 else None
    table = markdown_table(rows, metric, comparisons)
    gaps = missing_section(sweep_dir)
    table += "\n" + gaps if gaps else ""
    written = [write_text_atomic(out / "report.md", table),
               write_text_atomic(out / "report.csv", csv_table(rows, metric, comparisons))]
    chart = bar_chart(rows, metric, out / "report.png", title=title)
    return table, written + ([chart] if chart else [])


def bar_figure(rows: list[Variant], metric: str, title: str | None = None):
    """A horizontal bar per variant, best at the top: the bar is the mean of ``metric`` over the
    variant's seeds, the whiskers ±1 sample standard deviation (drawn where a variant has several
    seeds), the value axis starts at 0 (so bar lengths compare), and each bar is labelled
    ``mean ± std (n=seeds)`` beyond its whisker's end. A caption under the axes says all that.
    None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = rows[::-1]  # barh draws bottom-up: best at the top
    several = any(len(r.values) > 1 for r in rows)
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 2.2))
    ax.barh([r.overrides for r in rows], [r.mean for r in rows], color="#4C72B0",
            xerr=[r.std for r in rows] if several else None, capsize=3, error_kw={"elinewidth": 1, "ecolor": "black"})
    ends = [(r.mean - r.std, r.mean + r.std) for r in rows]
    low, high = min(0.0, *(lo for lo, _ in ends)), max(0.0, *(hi for _, hi in ends))
    pad = 0.02 * (high - low or 1.0)
    for y, r in enumerate(rows):
        label = f"{r.mean:.3f} ± {r.std:.3f} (n={len(r.values)})" if several else f"{r.mean:.3f}"
        right = r.mean >= 0  # the label goes past the whisker's end, on the bar's side of 0
        ax.text(r.mean + r.std + pad if right else r.mean - r.std - pad, y, label, va="center",
                ha="left" if right else "right", fontsize=8)
    # Room for the labels (about a third of the data's span) on the side the bars grow to.
    room = 0.35 * (high - low or 1.0)
    ax.set_xlim(low - (room if low < 0 else 0.0), high + (room if high > 0 else 0.0))
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel(metric)
    ax.set_title(title or f"{metric} per variant")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    if several:
        caption = (f"Bars: mean {metric} over each variant's seeds (n = runs per variant); whiskers: ±1 sample "
                   "standard deviation over those runs (none for n=1). Bars start at 0 (the axis is not cut).")
    else:
        caption = f"Bars: {metric} of one run per variant (one seed each, so no spread to show). Bars start at 0 (the axis is not cut)."
    fig.text(0.01, 0.01, caption, fontsize=7.5, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def bar_chart(rows: list[Variant], metric: str, path: Path, title: str | None = None) -> Path | None:
    """:func:`bar_figure` written to ``path`` as PNG; None (nothing written) without matplotlib."""
    fig = bar_figure(rows, metric, title)
    return None if fig is None else save_figure(fig, path)


# --- training curves -------------------------------------------------------------------------------------

#: Where Lightning's CSVLogger writes a run's logged values (``tasks/runs/loggers.py``: ``csv_logger``).
CSV_LOG = Path("logs") / "metrics.csv"


@dataclass
class Curve:
    """One variant's curve: ``values[i]`` at optimiser step ``steps[i]``, the mean over its ``jobs``
    (with ``low`` / ``high`` the smallest and largest job's value), at the steps every one of them logged."""

    label: str
    steps: list[int]
    values: list[float]
    jobs: list[str]
    low: list[float] = field(default_factory=list)
    high: list[float] = field(default_factory=list)


def _job_order(folder: Path) -> tuple[int, str]:
    return (int(folder.name), "") if folder.name.isdigit() else (1 << 62, folder.name)


def read_log(job: str | Path, metric: str) -> dict[int, float]:
    """``{step: value}`` of ``metric`` in a run's ``logs/metrics.csv``, as Lightning wrote it.

    ``step`` is the optimiser steps taken before the logged batch (0 for the first). Rows without a
    value for ``metric`` (another value logged at that step) are skipped; several rows of one step
    (gradient accumulation) are averaged. A resumed run's log starts at the step it resumed from:
    Lightning's CSV logger starts the file afresh.
    """
    path = Path(job) / CSV_LOG
    if not path.is_file():
        raise MissingFileError(f"{job}: no {CSV_LOG} (the job failed before training started, or its run "
                               "predates the CSV log)")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if metric not in (reader.fieldnames or []):
            logged = [c for c in reader.fieldnames or [] if c not in ("epoch", "step")]
            raise ConfigError(f"{path}: no column {metric!r}; it logged {logged}")
        rows: dict[int, list[float]] = {}
        for row in reader:
            if row.get(metric) not in (None, ""):
                rows.setdefault(int(float(row["step"])), []).append(float(row[metric]))
    return {step: statistics.fmean(values) for step, values in sorted(rows.items())}


def logged_columns(sweep_dir: str | Path) -> list[str]:
    """The values the jobs of a sweep logged in their ``logs/metrics.csv`` (every column but ``epoch`` and
    ``step``, in the order the jobs' logs first name them): what ``--curves`` can draw."""
    sweep_dir = Path(sweep_dir)
    logs = [f.parent.parent / CSV_LOG for f in sweep_dir.glob("*/.hydra/overrides.yaml")]
    columns: dict[str, None] = {}
    for path in sorted((p for p in logs if p.is_file()), key=lambda p: _job_order(p.parent.parent)):
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        columns.update((c, None) for c in header if c not in ("epoch", "step"))
    if not columns:
        raise MissingFileError(f"{sweep_dir}: no job has a {CSV_LOG} yet; pass a --multirun folder whose jobs have started")
    return list(columns)


def read_curves(sweep_dir: str | Path, metric: str = "train_loss") -> tuple[list[Curve], list[str]]:
    """One :class:`Curve` of ``metric`` per variant of a sweep (jobs that differ only in ``seed`` are
    one variant: their mean), in job order, and a note for each job left out (no CSV log, or the
    metric not in it). Jobs still running are drawn as far as their log goes. Raises when no job
    has a curve."""
    sweep_dir = Path(sweep_dir)
    folders = sorted((f.parent.parent for f in sweep_dir.glob("*/.hydra/overrides.yaml")), key=_job_order)
    if not folders:
        raise MissingFileError(f"{sweep_dir}: no jobs (no */.hydra/overrides.yaml); pass a --multirun folder")
    overrides = [yaml.safe_load((f / ".hydra" / "overrides.yaml").read_text()) or [] for f in folders]
    groups: dict[str, list[tuple[str, dict[int, float]]]] = {}
    skipped: list[str] = []
    for folder, label in zip(folders, variant_labels(overrides)):
        try:
            log = read_log(folder, metric)
        except (MissingFileError, ConfigError) as err:
            skipped.append(f"job {folder.name} ({label}) left out: {err}")
            continue
        if not log:
            skipped.append(f"job {folder.name} ({label}) left out: {folder / CSV_LOG} holds no {metric} value yet")
            continue
        groups.setdefault(label, []).append((folder.name, log))
    if not groups:
        raise MissingFileError(f"{sweep_dir}: no job has a {metric} curve in {CSV_LOG}:\n  " + "\n  ".join(skipped))
    curves = []
    for label, logs in groups.items():
        steps = sorted(set.intersection(*(set(log) for _, log in logs)))
        series = [[log[s] for _, log in logs] for s in steps]
        curves.append(Curve(label, steps, [statistics.fmean(v) for v in series], [name for name, _ in logs],
                            [min(v) for v in series], [max(v) for v in series]))
    return curves, skipped


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average: each value is the mean of itself and the ``window - 1`` before it
    (fewer at the start)."""
    if window < 1:
        raise ConfigError(f"--smooth {window}: the window is a number of logged points, at least 1")
    return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def curves_csv(curves: list[Curve], metric: str) -> str:
    """The drawn values, one row per (variant, step): mean, min and max over the variant's jobs."""
    lines = [f"variant,step,{metric}_mean,{metric}_min,{metric}_max,jobs"]
    for c in curves:
        lines += [f'"{c.label}",{s},{v!r},{lo!r},{hi!r},{"|".join(c.jobs)}'
                  for s, v, lo, hi in zip(c.steps, c.values, c.low, c.high)]
    return "\n".join(lines) + "\n"


def curve_figure(curves: list[Curve], metric: str, window: int = 1, title: str | None = None):
    """A matplotlib figure with one line per curve (labelled by its variant). With ``window`` > 1 the
    line is the :func:`smooth` ed curve and the raw values are drawn faintly behind it; a variant of
    several seeds gets a band from the smallest to the largest seed's value. None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, c in enumerate(curves):
        color = f"C{i % 10}"
        seeds = f" (mean of {len(c.jobs)} seeds)" if len(c.jobs) > 1 else ""
        if len(c.jobs) > 1:
            ax.fill_between(c.steps, c.low, c.high, color=color, alpha=0.15, linewidth=0)
        if window > 1:
            ax.plot(c.steps, c.values, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(c.steps, smooth(c.values, window), color=color, linewidth=1.8, label=c.label + seeds)
        else:
            ax.plot(c.steps, c.values, color=color, linewidth=1.4, label=c.label + seeds)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel(metric + (f" (moving average of {window} logged points)" if window > 1 else ""))
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
    return path
