"""Gather the jobs of a ``--multirun`` sweep into one table and a chart.

Each job folder holds ``.hydra/overrides.yaml`` (what the job changed), ``config.yaml`` (whose
``task.main_metric`` is the metric to rank by) and ``metrics.json``. Jobs that differ only in
``seed`` are one variant: the table gives mean and standard deviation over seeds.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from sesame.tasks.errors import ConfigError, MissingFileError

IGNORED_OVERRIDES = ("seed", "trainer.enable_progress_bar", "hydra.", "logger")


@dataclass
class Variant:
    overrides: str
    values: list[float]
    jobs: list[str]

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


def variants(jobs: list[tuple[Path, list[str], dict[str, float]]], metric: str) -> list[Variant]:
    """One row per distinct set of overrides (seed aside), best first."""
    shared = set.intersection(*(set(o) for _, o, _ in jobs)) if len(jobs) > 1 else set()
    groups: dict[str, Variant] = {}
    for job, overrides, metrics in jobs:
        kept = [o for o in overrides if o not in shared and not o.lstrip("+~").startswith(IGNORED_OVERRIDES)]
        key = " ".join(kept) or "(defaults)"
        value = metrics.get(metric)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        groups.setdefault(key, Variant(key, [], [])).values.append(float(value))
        groups[key].jobs.append(job.name)
    return sorted(groups.values(), key=lambda v: v.mean, reverse=True)


def markdown_table(rows: list[Variant], metric: str) -> str:
    seeds = max(len(r.values) for r in rows)
    head = f"| variant | {metric} |" + (" seeds |" if seeds > 1 else "")
    lines = [head, "|---|---|" + ("---|" if seeds > 1 else "")]
    for r in rows:
        value = f"{r.mean:.4f} ± {r.std:.4f}" if seeds > 1 else f"{r.mean:.4f}"
        lines.append(f"| {r.overrides} | {value} |" + (f" {len(r.values)} |" if seeds > 1 else ""))
    return "\n".join(lines) + "\n"


def csv_table(rows: list[Variant], metric: str) -> str:
    lines = [f"variant,{metric}_mean,{metric}_std,seeds,jobs"]
    lines += [f'"{r.overrides}",{r.mean:.6f},{r.std:.6f},{len(r.values)},{"|".join(r.jobs)}' for r in rows]
    return "\n".join(lines) + "\n"


def bar_chart(rows: list[Variant], metric: str, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    labels = [r.overrides for r in rows][::-1]
    ax.barh(labels, [r.mean for r in rows][::-1], xerr=[r.std for r in rows][::-1], color="#4C72B0")
    low = min(r.mean - r.std for r in rows)
    ax.set_xlim(max(0.0, low - 0.05 * abs(low) - 0.02), None)
    ax.set_xlabel(metric)
    for y, r in enumerate(rows[::-1]):
        ax.text(r.mean, y, f" {r.mean:.3f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
