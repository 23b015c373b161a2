"""benchmarks/train_speed.py's results: per task and arm the medians over repetitions and the ratios to the
reference, whether both sides trained on the same batches, and the markdown tables."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from train_speed_arms import ARMS, REFERENCE, length_grouped


RATIO_KEYS = ("step_median_s", "step_mean_s", "step_cpu_median_s", "loop_s_per_step", "tokens_per_s", "padded_tokens_per_s",
              "examples_per_s", "peak_rss_train_mib", "cpu_per_example_s")
#: The Trainer at its best: the reference of the fair table (``fair_ratios``), where it ran.
FAIR_REFERENCE = "hf_fast"
#: The Trainer's bf16 on sesame's own grouped batches: a step against a step on the same examples.
SAME_BATCHES_REFERENCE = "hf_fast_same_batches"


def summarize(results: list[dict[str, Any]], reference: str = REFERENCE) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task and arm: the median over repetitions of each number, and its ratio to ``reference``
    (per repetition, then median / min / max over repetitions)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for task in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task]
        ref = {r["rep"]: r for r in rows if r["arm"] == reference}
        out[task] = {}
        for arm in dict.fromkeys(r["arm"] for r in rows):
            runs = [r for r in rows if r["arm"] == arm]
            entry: dict[str, Any] = {"reps": len(runs)}
            for key in RATIO_KEYS:
                entry[key] = statistics.median(r[key] for r in runs)
                ratios = [r[key] / ref[r["rep"]][key] for r in runs if r["rep"] in ref and ref[r["rep"]][key]]
                if ratios:
                    entry[f"{key}_ratio"] = statistics.median(ratios)
                    entry[f"{key}_ratio_range"] = [min(ratios), max(ratios)]
            scored = [r for r in runs if r.get("metric_value") is not None]
            entry["metric"] = next((r["metric"] for r in scored), None)
            entry["metric_value"] = scored[0]["metric_value"] if scored else None
            entry["padding_share"] = runs[0]["padding_share"]
            entry["switches"] = runs[0].get("switches")
            entry["tokens_per_step"] = statistics.fmean(runs[0]["tokens_per_step"])
            entry["padded_tokens_per_step"] = statistics.fmean(runs[0]["padded_tokens_per_step"])
            out[task][arm] = entry
    return out


def same_batches(results: list[dict[str, Any]], arm_name: str = "sesame", reference: str = REFERENCE) -> dict[str, bool | None]:
    """Per task: whether ``arm_name`` and ``reference`` had the same number of training examples and trained on
    batches of identical size and real tokens, step by step, in every repetition (None: one of the two
    arms was not run)."""
    checks = {}
    for task in dict.fromkeys(r["task"] for r in results):
        rows = {(r["arm"], r["rep"]): r for r in results if r["task"] == task}
        pairs = [(rows[(arm_name, rep)], rows[(reference, rep)]) for (arm, rep) in rows
                 if arm == arm_name and (reference, rep) in rows]
        checks[task] = None if not pairs else all(
            s["train_examples"] == h["train_examples"] and s["examples_per_step"] == h["examples_per_step"] and s["tokens_per_step"] == h["tokens_per_step"] for s, h in pairs)
    return checks


def metric_pair(entry: dict[str, Any], ref: dict[str, Any]) -> str:
    """"val_accuracy 0.8100 / 0.8000": an arm's dev metric beside its reference's, or n/a where either was not scored."""
    if entry["metric_value"] is None or ref.get("metric_value") is None:
        return "n/a"
    return f"{entry['metric']} {entry['metric_value']:.4f} / {ref['metric_value']:.4f}"


def fmt_ratio(entry: dict[str, Any], key: str) -> str:
    if f"{key}_ratio" not in entry:
        return "n/a"
    lo, hi = entry[f"{key}_ratio_range"]
    spread = f" ({lo:.2f}–{hi:.2f})" if entry["reps"] > 1 else ""
    return f"{entry[f'{key}_ratio']:.2f}{spread}"


def markdown(args: argparse.Namespace, summary: dict[str, Any], checks: dict[str, bool | None],
             meta: dict[str, Any]) -> str:
    lines = [
        "## Training speed: sesame vs the transformers Trainer", "",
        (f"{args.steps} optimiser steps per run ({args.warmup_steps} warm-up steps not timed), {args.reps} interleaved "
         f"repetitions, {meta['threads']} CPU thread(s) per run, each run in its own process; fp32, full fine-tuning "
         f"of `{args.encoder}`. Reference = `hf` (Trainer, dynamic padding, the same batches as sesame in the same "
         "order). Ratios are arm / reference per repetition, median over repetitions (range in brackets): "
         "for times and memory below 1 is better, for throughput above 1 is better. Step CPU = the median CPU "
         "time of the process per step: on a machine shared with other jobs it moves much less with their load "
         "than wall time does."), "",
        "### Ratios to the reference", "",
        "| task | arm | step median × | step mean × | step CPU × | loop/step × | real tok/s × | examples/s × | peak RSS × | dev metric (arm / ref) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, arms in summary.items():
        ref = arms.get(REFERENCE, {})
        for arm, e in arms.items():
            if arm == REFERENCE:
                continue
            metric = metric_pair(e, ref)
            lines.append(f"| {task} | {arm} | {fmt_ratio(e, 'step_median_s')} | {fmt_ratio(e, 'step_mean_s')} | "
                         f"{fmt_ratio(e, 'step_cpu_median_s')} | {fmt_ratio(e, 'loop_s_per_step')} | {fmt_ratio(e, 'tokens_per_s')} | "
                         f"{fmt_ratio(e, 'examples_per_s')} | {fmt_ratio(e, 'peak_rss_train_mib')} | {metric} |")
    lines += fair_table(summary, meta.get("fair"))
    lines += same_batches_table(meta.get("same_batches_bf16"), meta.get("same_batches_bf16_checks") or {})
    lines += ["", "### Absolute numbers (median over repetitions)", "",
              ("| task | arm | step median s | step mean s | step CPU s | loop s/step | real tok/step | padded tok/step | "
               "padding | real tok/s | padded tok/s | examples/s | peak RSS MiB | dev metric |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, arms in summary.items():
        for arm, e in arms.items():
            metric = "n/a" if e["metric_value"] is None else f"{e['metric_value']:.4f}"
            lines.append(f"| {task} | {arm} | {e['step_median_s']:.3f} | {e['step_mean_s']:.3f} | {e['step_cpu_median_s']:.3f} | "
                         f"{e['loop_s_per_step']:.3f} | "
                         f"{e['tokens_per_step']:.0f} | {e['padded_tokens_per_step']:.0f} | {e['padding_share']:.0%} | "
                         f"{e['tokens_per_s']:.0f} | {e['padded_tokens_per_s']:.0f} | {e['examples_per_s']:.1f} | "
                         f"{e['peak_rss_train_mib']:.0f} | {metric} |")
    same = ", ".join(f"{t}: {'n/a' if ok is None else 'yes' if ok else 'NO'}" for t, ok in checks.items())
    optimisers = "; ".join(f"{arm} {o}" for arm, o in meta["optimizers"].items())
    lines += [
        "",
        f"Same batches on both sides (examples and real tokens per step, sesame vs hf, every repetition): {same}.",
        *([("Length-grouped arms train on other batches than hf (that is their point): compare their tokens/s "
            "and examples/s, not their step times.")] if any(map(length_grouped, args.arms)) else []),
        (f"SQuAD training windows: {meta['train_windows']}. Sesame-only overrides: "
         f"{' '.join(args.sesame_override) or 'none'}; overrides for both: {' '.join(args.override) or 'none'}. "
         f"Optimisers: {optimisers}."),
        ("Peak RSS = `ru_maxrss` of the run's own process at the end of training (before evaluation); it "
         "includes the interpreter, torch, the data and the model. Dev metric: the final weights scored by "
         f"sesame's evaluation path on data.max_eval_examples examples (first {args.eval_reps} repetition(s)); "
         "with this few steps it is a sanity check, not a comparison."),
        (f"torch {meta['torch']}, transformers {meta['transformers']}, lightning {meta['lightning']}, "
         f"python {meta['python']}; wall time {meta['wall_s'] / 60:.1f} min."),
    ]
    return "\n".join(lines) + "\n"


def same_batches_table(against: dict[str, Any] | None, checks: dict[str, dict[str, bool | None]]) -> list[str]:
    """The length-grouped sesame arms (``checks``: arm -> task -> same batches) against the Trainer's bf16 on
    sesame's grouped batches (``SAME_BATCHES_REFERENCE``): step against step; nothing where it did not run."""
    if not against:
        return []
    lines = ["", f"### Step on the same examples (`{SAME_BATCHES_REFERENCE}`: the Trainer's bf16 on sesame's grouped batches)",
             "", "| task | arm | step CPU × | step median × | peak RSS × | same batches |", "|---|---|---|---|---|---|"]
    for task, arms in against.items():
        for arm, per_task in checks.items():
            e = arms.get(arm)
            if e is None or SAME_BATCHES_REFERENCE not in arms:
                continue
            same = {True: "yes", False: "**no**", None: "n/a"}[per_task.get(task)]
            lines.append(f"| {task} | {arm} | {fmt_ratio(e, 'step_cpu_median_s')} | {fmt_ratio(e, 'step_median_s')} | "
                         f"{fmt_ratio(e, 'peak_rss_train_mib')} | {same} |")
    return lines


def fair_table(summary: dict[str, Any], fair: dict[str, Any] | None) -> list[str]:
    """The sesame arms against the Trainer at its best (``FAIR_REFERENCE``: its own length grouping and bf16), with
    the switches its runs showed in effect; nothing where that arm did not run."""
    if not fair:
        return []
    lines = ["", f"### Against the Trainer at its best (`{FAIR_REFERENCE}`)", "",
             ("Both sides length-group their batches (each its own way), so their batches differ: CPU per training "
              "example is the figure to read, with peak RSS and the tokens each computed."), "",
             "| task | arm | CPU per example × | examples/s × | padded tokens/step × | peak RSS × | dev metric (arm / ref) |",
             "|---|---|---|---|---|---|---|"]
    for task, arms in fair.items():
        ref = arms.get(FAIR_REFERENCE)
        if ref is None:
            continue
        for arm, e in arms.items():
            if ARMS[arm]["side"] != "sesame":
                continue
            metric = metric_pair(e, ref)
            lines.append(f"| {task} | {arm} | {fmt_ratio(e, 'cpu_per_example_s')} | {fmt_ratio(e, 'examples_per_s')} | "
                         f"{e['padded_tokens_per_step'] / ref['padded_tokens_per_step']:.2f} | "
                         f"{fmt_ratio(e, 'peak_rss_train_mib')} | {metric} |")
    seen = "; ".join(f"{task}: {', '.join(f'{k} {v}' for k, v in (arms[FAIR_REFERENCE].get('switches') or {}).items())}"
                     for task, arms in fair.items() if FAIR_REFERENCE in arms)
    return [*lines, "", f"Switches in effect in `{FAIR_REFERENCE}`'s runs (read inside the run): {seen}."]
