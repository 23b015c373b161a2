"""A sweep's variants against one baseline: which differences are real (``sesame-report``'s p columns).

Each variant (jobs differing only in ``seed``, ``tasks/runs/sweep_report.py``) is compared with the
baseline (the best variant, or the one ``--baseline KEY=VALUE`` picks) in two ways:

- over dev examples: a paired bootstrap (``tasks/runs/significance.py``). Each run's metric is recomputed
  on the same resamples of the dev examples by its task's own scorer, reached through the class
  ``task.module`` names in the run's ``config.yaml``: ``Module.example_scores(run_dir, settings, metric)
  -> (keys, score)``, ``keys`` [N] the run's dev examples (ids that pair them across runs) and
  ``score(indices)`` the metric on the examples at ``indices`` [n] (repeats allowed), read from the
  prediction files the run wrote. A variant's value on a resample is the mean over its seeds.
- over seeds: a permutation test of the runs' final metrics (``metrics.json``), or ASO (``deepsig``).

The p-values of each kind are Holm-corrected over the table's comparisons. A comparison a test cannot
make (one seed, no prediction files, a metric the task cannot recompute per example) gets a note saying
why, not an error.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import yaml

from sesame.tasks.core.errors import ConfigError, UserError
from sesame.tasks.runs.significance import (ASO_THRESHOLD, aso_epsilon, bootstrap_p, deepsig_aso, holm,
                                            permutation_test, resample_indices)


class Variant(Protocol):
    """A row of the sweep's table (``tasks/runs/sweep_report.py``'s ``Variant``, which imports this module)."""

    overrides: str  # its label
    values: list[float]  # [seeds] the metric of each of its runs (metrics.json)
    jobs: list[str]  # the runs' folder names in the sweep folder, in the order of ``values``
    settings: tuple[str, ...]  # the overrides that tell it from the other variants

    @property
    def mean(self) -> float: ...


SEED_TESTS = ("permutation", "aso")
#: A run whose per-example files give a metric this far from its metrics.json is named in the notes.
MISMATCH = 1e-4


@dataclass
class Outcome:
    """One test of a variant against the baseline: the raw p-value (ASO: ``epsilon``, its violation ratio),
    Holm's adjusted p-value, whether the difference holds at the table's α, and a note (why there is
    no test, or what limits it)."""

    p: float | None = None
    adjusted: float | None = None
    epsilon: float | None = None
    holds: bool = False
    note: str = ""


@dataclass
class Comparison:
    """A variant against the baseline: the difference of their means and the two tests' outcomes."""

    variant: Variant
    difference: float  # the variant's mean over seeds minus the baseline's (metrics.json)
    examples: Outcome = field(default_factory=Outcome)
    seeds: Outcome = field(default_factory=Outcome)


@dataclass
class Comparisons:
    """Every variant but the baseline, in table order, and how they were tested."""

    baseline: Variant
    chosen_by: str  # "the best variant" or "--baseline fusion=last"
    comparisons: list[Comparison]
    alpha: float
    resamples: int
    seed: int
    seed_test: str
    examples: int | None = None  # the dev examples the bootstrap resampled (None: no bootstrap)
    notes: list[str] = field(default_factory=list)

    def of(self, variant: Variant) -> Comparison | None:
        return next((c for c in self.comparisons if c.variant is variant), None)


# --- the baseline ----------------------------------------------------------------------------------------

def _key(setting: str) -> tuple[str, str]:
    key, _, value = setting.partition("=")
    return key.lstrip("+~"), value


def pick_baseline(rows: Sequence[Variant], wanted: Sequence[str] | None, shared: Sequence[str] = ()) -> tuple[Variant, str]:
    """The baseline variant and how it was chosen: the first row (the best) without ``wanted``, else the
    one variant whose settings hold every ``KEY=VALUE`` of ``wanted`` (``+`` / ``~`` prefixes ignored) or
    whose label is one of them. ``shared``: the overrides every job has (named when a key is one)."""
    if not wanted:
        return rows[0], "the best variant"
    chosen_by = "--baseline " + " --baseline ".join(wanted)
    by_label = [r for r in rows if r.overrides in wanted]
    if len(by_label) == 1:
        return by_label[0], chosen_by
    settings = [dict(_key(s) for s in r.settings) for r in rows]
    keys = sorted({k for s in settings for k in s})
    pairs = []
    for item in wanted:
        key, value = _key(item)
        if "=" not in item or not key:
            raise ConfigError(f"--baseline {item}: expected KEY=VALUE naming a variant's setting, e.g. "
                              f"--baseline {rows[-1].settings[0] if rows[-1].settings else 'fusion=last'}")
        if key not in keys:
            common = [s for s in shared if _key(s)[0] == key]
            why = f"every job has {common[0]}, so it tells no variant apart" if common else "no variant sets it"
            raise ConfigError(f"--baseline {item}: {why}; the variants differ in {', '.join(keys) or 'nothing'}")
        values = sorted({s[key] for s in settings if key in s})
        if value not in values:
            raise ConfigError(f"--baseline {item}: no variant has {key}={value}; {key} takes {', '.join(values)}")
        pairs.append((key, value))
    matches = [r for r, s in zip(rows, settings) if all(s.get(k) == v for k, v in pairs)]
    if not matches:
        raise ConfigError(f"{chosen_by}: no variant has all of these; the variants are: "
                          + "; ".join(r.overrides for r in rows))
    if len(matches) > 1:
        chosen = [dict(_key(s) for s in r.settings) for r in matches]
        other = next((k for k in keys if len({c.get(k) for c in chosen}) > 1), "KEY")
        raise ConfigError(f"{chosen_by}: {len(matches)} variants match ({'; '.join(r.overrides for r in matches)}); "
                          f"add a setting that tells them apart, e.g. --baseline {other}=...")
    return matches[0], chosen_by


# --- per-example scores ------------------------------------------------------------------------------------

Scorer = tuple[list[str], Callable[[np.ndarray], float]]


def run_example_scores(job: Path, metric: str) -> Scorer:
    """``(keys, score)`` of one run folder, from its task's ``Module.example_scores`` (``tasks/base/task_module.py``);
    a ``UserError`` saying why where the run or its task cannot give them."""
    # Here, not at the top: the settings import torch and transformers, which sesame-report --help and a
    # sweep of one variant never need.
    from sesame.tasks.base.run_settings import RunSettings, task_class
    from sesame.tasks.saved.config_upgrade import with_added_settings

    config = job / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"{config}: no such file, so the run's task is unknown")
    raw = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    try:
        settings = RunSettings.of_trained(raw)
    except ConfigError:  # a run saved before a setting existed: today's default for it
        settings = RunSettings.of_trained(with_added_settings(raw))
    return task_class(settings.task, "module").example_scores(job, settings, metric)


def _paired(scorers: Sequence[Scorer], keys: list[str]) -> list[Callable[[np.ndarray], float]] | str:
    """Each scorer reading the examples in the order of ``keys``; or why they cannot (other examples)."""
    position = {k: i for i, k in enumerate(keys)}
    paired = []
    for own, score in scorers:
        if len(own) != len(keys) or any(k not in position for k in own):
            return (f"its runs scored other dev examples than the baseline's ({len(own)} against {len(keys)}; "
                    "data.max_eval_examples or the dev file differ)")
        order = np.empty(len(keys), dtype=np.int64)
        order[[position[k] for k in own]] = np.arange(len(own))  # the run's position of each key
        paired.append(lambda at, score=score, order=order: score(order[at]))
    return paired


def _paired_runs(sweep_dir: Path, result: Comparisons, metric: str) -> tuple[int, dict[str, list[Callable]]] | None:
    """``(N, {variant label: one scorer per run})``, every scorer reading the baseline's N dev examples in
    the same order; a variant whose runs cannot (no files, other examples) gets a note instead, and
    None (every comparison noted) where the baseline's own runs cannot."""
    rows = [result.baseline] + [c.variant for c in result.comparisons]
    scorers: dict[str, list[Scorer] | str] = {}
    for row in rows:
        try:
            scorers[row.overrides] = [run_example_scores(sweep_dir / job, metric) for job in row.jobs]
        except UserError as err:
            scorers[row.overrides] = f"no per-example scores: {err}"
    base = scorers[result.baseline.overrides]
    keys = base[0][0] if not isinstance(base, str) else []
    paired: dict[str, list[Callable]] = {}
    for row in rows:
        found = scorers[row.overrides]
        found = found if isinstance(found, str) else _paired(found, keys)
        if not isinstance(found, str):
            paired[row.overrides] = found
        elif row is result.baseline:
            result.notes.append(f"p, dev examples: none, for the baseline ({found})")
            for c in result.comparisons:
                c.examples.note = "none for the baseline"
            return None
        else:
            result.of(row).examples.note = found
    return len(keys), paired


def _example_tests(sweep_dir: Path, result: Comparisons, metric: str) -> None:
    """Fill ``examples`` of every comparison: the paired bootstrap (each variant the mean of its runs on
    the same resamples), Holm-corrected."""
    found = _paired_runs(sweep_dir, result, metric)
    if found is None:
        return
    result.examples, paired = found
    everything = np.arange(result.examples)
    full: dict[str, float] = {}
    for row in [result.baseline] + [c.variant for c in result.comparisons]:
        runs = [score(everything) for score in paired.get(row.overrides, [])]
        for job, recorded, again in zip(row.jobs, row.values, runs):  # files of another evaluation than metrics.json's
            if abs(again - recorded) > MISMATCH * max(1.0, abs(recorded)):
                result.notes.append(f"job {job} ({row.overrides}): its prediction files give {metric} {again:.6g}, its "
                                    f"metrics.json {recorded:.6g}; the per-example test uses the files")
        if runs:
            full[row.overrides] = float(np.mean(runs))
    resampled: dict[str, list[np.ndarray]] = {label: [] for label in paired}
    for chunk in resample_indices(result.examples, result.resamples, result.seed):  # [c, N] each
        for label, runs in paired.items():
            resampled[label].append(np.mean([[score(at) for at in chunk] for score in runs], axis=0))
    star = {label: np.concatenate(parts) for label, parts in resampled.items()}  # [B] each
    base = result.baseline.overrides
    for c in result.comparisons:
        label = c.variant.overrides
        if label not in star:
            continue
        if not np.isfinite(full[label] - full[base]):  # e.g. a correlation of constant predictions
            c.examples.note = f"{metric} is undefined on the prediction files"
            continue
        c.examples.p = bootstrap_p(full[label] - full[base], star[label] - star[base])
    _holm(result, [c.examples for c in result.comparisons])


def _seed_tests(result: Comparisons) -> None:
    """Fill ``seeds`` of every comparison: the permutation test (Holm-corrected), or ASO."""
    base = result.baseline.values
    tested = []
    for c in result.comparisons:
        if len(c.variant.values) < 2 or len(base) < 2:
            c.seeds.note = f"{len(c.variant.values)} + {len(base)} seeds"
        else:
            tested.append(c)
    if result.seed_test == "permutation":
        smallest = []
        for c in tested:
            found = permutation_test(c.variant.values, base, seed=result.seed)
            c.seeds.p = found.p
            smallest.append(found.smallest)
        _holm(result, [c.seeds for c in result.comparisons])
        # Holm multiplies the smallest p-value by the number of tests: with few seeds none can hold.
        if tested and min(smallest) * len(tested) > result.alpha:
            holm_says = f", which Holm's correction multiplies by {len(tested)}" if len(tested) > 1 else ""
            result.notes.append(f"p, seeds: with these seeds no difference can hold at α = {result.alpha:g}: the "
                                f"permutation test's smallest p-value is {min(smallest):.3g}{holm_says}; more seeds can "
                                "(5 a side: 0.008)")
        return
    for c in tested:  # ASO: is the higher-scoring side stochastically larger? Bonferroni inside deepsig.
        higher, lower = (c.variant.values, base) if statistics.fmean(c.variant.values) >= statistics.fmean(base) \
            else (base, c.variant.values)
        c.seeds.epsilon = aso_epsilon(higher, lower, alpha=result.alpha, comparisons=len(tested), seed=result.seed)
        c.seeds.holds = c.seeds.epsilon < ASO_THRESHOLD


def _holm(result: Comparisons, tests: list[Outcome]) -> None:
    for test, adjusted in zip(tests, holm([t.p for t in tests])):
        test.adjusted = adjusted
        test.holds = adjusted is not None and adjusted <= result.alpha


def check_options(alpha: float, resamples: int, seed_test: str) -> None:
    """``ConfigError`` for options no test can run with (before anything is read or written)."""
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha {alpha}: a significance level lies between 0 and 1, e.g. --alpha 0.05")
    if resamples < 100:
        raise ConfigError(f"--bootstrap {resamples}: too few resamples for a p-value (the smallest is 1/(N+1)); "
                          "use at least 100, e.g. --bootstrap 1000")
    if seed_test not in SEED_TESTS:
        raise ConfigError(f"--seed-test {seed_test}: use one of {', '.join(SEED_TESTS)}")
    if seed_test == "aso":
        deepsig_aso()  # installed, or the error saying how to install it


def compare(sweep_dir: str | Path, rows: Sequence[Variant], baseline: Variant, chosen_by: str, metric: str,
            alpha: float = 0.05, resamples: int = 1000, seed: int = 0, seed_test: str = "permutation") -> Comparisons:
    """Every variant of ``rows`` but ``baseline`` against it, over dev examples and over seeds."""
    check_options(alpha, resamples, seed_test)
    result = Comparisons(baseline, chosen_by, [Comparison(r, r.mean - baseline.mean) for r in rows if r is not baseline],
                         alpha, resamples, seed, seed_test)
    if result.comparisons:
        _example_tests(Path(sweep_dir), result, metric)
        _seed_tests(result)
    return result
