"""Time to accuracy, the full-data study's speed measure: when a sesame arm's dev curve first reaches the Trainer's
final metric (seed against seed, and on curves averaged over seeds at matched validations), and its CPU and wall
ratios to the Trainer's, divided only where every unit ran on one machine."""

from __future__ import annotations

import statistics
from typing import Any

from study_records import one_machine


#: How far under a target a dev metric may read and still reach it: sesame's arm logs its metrics through Lightning in
#: float32, the Trainer arm's come from sesame's scorer in float64, so the same 774 of 872 sentences read 0.88761467
#: on one side and 0.8876146789 on the other. Far below one example of any dev set.
METRIC_TOLERANCE = 1e-6


def reach(history: list[dict[str, Any]], metric: str, target: float, key: str) -> float | None:
    """Training seconds (``key``) at the first validation whose ``metric`` reaches ``target``."""
    for entry in history:
        value = entry["metrics"].get(metric)
        if value is not None and value >= target - METRIC_TOLERANCE:
            return entry[key]
    return None


def time_to_accuracy(results: list[dict[str, Any]], arm: str = "sesame", ref: str = "hf") -> list[dict[str, Any]]:
    """Per task and seed where both arms finished: sesame's training CPU (and wall) seconds to reach the final
    dev metric of the Trainer's run with the same seed, over that run's CPU (wall) seconds (the report's paired
    detail; the goals use ``mean_time_to_accuracy``)."""
    by = {(r["task"], r["arm"], r["seed"]): r for r in results}
    rows = []
    for (task, a, seed), r in sorted(by.items()):
        if a != arm or (task, ref, seed) not in by:
            continue
        h = by[(task, ref, seed)]
        metric = r["main_metric"]
        target = h["final"].get(metric)
        cpu = reach(r["history"], metric, target, "train_cpu_s") if target is not None else None
        wall = reach(r["history"], metric, target, "train_wall_s") if target is not None else None
        same = one_machine([r, h])
        rows.append({"task": task, "arm": arm, "seed": seed, "metric": metric, "target": target, "arm_final": r["final"].get(metric),
                     "arm_cpu_to_target": cpu, "ref_cpu": h["train_cpu_s"], "arm_cpu": r["train_cpu_s"],
                     "cpu_ratio": cpu / h["train_cpu_s"] if cpu is not None and same else None,
                     "wall_ratio": wall / h["train_wall_s"] if wall is not None and same else None,
                     "total_cpu_ratio": r["train_cpu_s"] / h["train_cpu_s"] if same else None, "same_machine": same,
                     "same_batches": r.get("fingerprints") == h.get("fingerprints")})
    return rows


#: The reference of every speed ratio: the Trainer at its best (its own length grouping and bf16), not the ``hf`` arm
#: with its speed switches off.
SPEED_REF = "hf_fast"
#: Validations of two arms are matched points when their epochs differ by at most this much (Lightning validates a
#: half epoch at ``int(steps / 2)``, the Trainer arm at the same step; an epoch's end may read 0.9913 against 1.0).
MATCH_EPOCHS = 0.02


def mean_curve(runs: list[dict[str, Any]], metric: str) -> list[dict[str, float]]:
    """The runs' dev curve averaged over seeds: epoch, metric and training seconds at each validation (seeds share
    the schedule; the shortest history bounds it)."""
    length = min(len(r["history"]) for r in runs)
    return [{key: statistics.fmean(r["history"][i][key] for r in runs) for key in ("epoch", "train_cpu_s", "train_wall_s")}
            | {"metric": statistics.fmean(r["history"][i]["metrics"].get(metric, float("-inf")) for r in runs)}
            for i in range(length)]


def mean_time_to_accuracy(results: list[dict[str, Any]], arm: str, ref: str = SPEED_REF) -> list[dict[str, Any]]:
    """The rule the speed goal and the README use, per task where both arms have finished seeds: both arms' dev
    curves averaged over their seeds (``mean_curve``), the target the mean of ``ref``'s final dev metrics. Each arm's
    time is its mean CPU (wall) seconds at the first validation where its mean curve reaches the target, the arm
    counted only at validations ``ref`` also made (matched points: a half-epoch check of the arm that the Trainer did
    not make cannot decide). Ratio: the arm's time over ``ref``'s. Times divide only where every unit of the row ran on
    one machine (``one_machine``); elsewhere the ratios are None and ``same_machine`` False."""
    rows = []
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task and r["arm"] == arm and r["history"]]
        theirs = [r for r in results if r["task"] == task and r["arm"] == ref and r["history"]]
        if not mine or not theirs:
            continue
        metric = mine[0]["main_metric"]
        targets = [r["final"][metric] for r in theirs if r["final"].get(metric) is not None]
        if not targets:
            continue
        target = statistics.fmean(targets)
        curve, ref_curve = mean_curve(mine, metric), mean_curve(theirs, metric)
        matched = [i for i, point in enumerate(curve) if any(abs(point["epoch"] - q["epoch"]) <= MATCH_EPOCHS for q in ref_curve)]
        hit = next((i for i in matched if curve[i]["metric"] >= target - METRIC_TOLERANCE), None)
        ref_hit = next((q for q in ref_curve if q["metric"] >= target - METRIC_TOLERANCE), ref_curve[-1])
        same = one_machine(mine + theirs)
        divide = lambda key: curve[hit][key] / ref_hit[key] if hit is not None and same else None  # noqa: E731
        rows.append({"task": task, "arm": arm, "ref": ref, "metric": metric, "seeds": len(mine), "ref_seeds": len(theirs),
                     "target": target, "arm_final": curve[-1]["metric"],
                     "arm_cpu_to_target": curve[hit]["train_cpu_s"] if hit is not None else None,
                     "ref_cpu": ref_hit["train_cpu_s"], "reached": hit is not None,
                     "cpu_ratio": divide("train_cpu_s"), "wall_ratio": divide("train_wall_s"),
                     "total_cpu_ratio": (statistics.fmean(r["train_cpu_s"] for r in mine)
                                         / statistics.fmean(r["train_cpu_s"] for r in theirs)) if same else None,
                     "matched_points": len(matched), "same_machine": same})
    return rows


def goal_ratio(row: dict[str, Any]) -> float | None:
    """The CPU ratio the speed goal counts: only one measured with every unit on one machine."""
    return row["cpu_ratio"] if row["same_machine"] else None
