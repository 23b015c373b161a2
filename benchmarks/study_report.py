"""The full-data study's report (``full_data_study.py --report``, and the running one in <out>/report/): recipes,
goals, dev metrics, time to accuracy, cost and memory, the recipe sweep, the units still missing and the dev-curve
plots, with every finished run's record written beside it."""

from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path
from typing import Any

from study_goals import goal_lines
from study_records import attempts_cpu_cell, attempts_on_record, load_results, write_run_records
from study_time_to_target import SPEED_REF, mean_time_to_accuracy, reach, time_to_accuracy
from study_units import (
    ARMS,
    SWEEP_COMMON,
    SWEEP_GRID,
    SWEEP_SPEED,
    SWEEP_TASKS,
    TASKS,
    chosen_recipes,
    held_out_score,
    plan,
    sweep_grid,
    sweep_results,
    unit_dir,
    unit_state,
)


def mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4f} (n=1)"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f} (n={len(values)})"


def reach_cells(t: dict[str, Any]) -> str:
    """A time-to-accuracy row's cells from the metric on: target, arm's final, CPU minutes to reach and the
    Trainer's, the CPU and wall ratios, the whole-run CPU ratio."""
    to_target = t["arm_cpu_to_target"] / 60 if t["arm_cpu_to_target"] is not None else None
    refused = "two machines" if not t.get("same_machine", True) else None
    ratio = fmt(t["cpu_ratio"], ".2f") if t["cpu_ratio"] is not None else refused or "not reached"
    return (f"{t['metric'][4:]} | {fmt(t['target'])} | {fmt(t['arm_final'])} | {fmt(to_target, '.1f')} | "
            f"{t['ref_cpu'] / 60:.1f} | {ratio} | {fmt(t['wall_ratio'], '.2f')} | {fmt(t['total_cpu_ratio'], '.2f')}")


def plot(results: list[dict[str, Any]], folder: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    colours = {"sesame": "tab:blue", "hf": "tab:orange", "sesame_fast": "tab:green", "sesame_grouped": "tab:purple",
               "hf_fast": "tab:red", "sesame_cpu_speed": "tab:brown"}
    for task in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task]
        metric = rows[0]["main_metric"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, key, label in ((axes[0], "train_cpu_s", "training CPU time (min, user+sys)"),
                               (axes[1], "train_wall_s", "training wall time (min)")):
            for r in rows:
                xs = [0.0] + [e[key] / 60 for e in r["history"]]
                ys = [None] + [e["metrics"].get(metric) for e in r["history"]]
                ax.plot(xs[1:], ys[1:], marker="o", color=colours.get(r["arm"], "grey"), alpha=0.8,
                        label=f"{r['arm']} seed {r['seed']}", linestyle="-" if r["seed"] == 1 else "--" if r["seed"] == 2 else ":")
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(f"dev {metric.removeprefix('val_')} (after each epoch)")
        axes[1].legend(fontsize=7)
        fig.suptitle(f"{TASKS.get(task, {}).get('label', task)}: dev metric against training time (evaluation excluded)")
        fig.tight_layout()
        path = folder / f"{task}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def fmt(value: Any, spec: str = ".4f") -> str:
    return "—" if value is None else format(value, spec)


def sweep_section(args: argparse.Namespace) -> list[str]:
    """Item 4: every candidate's held-out score per GLUE task, and the winner (the sesame_best arm's recipe)."""
    found = sweep_results(args)
    if not found:
        return []
    grid, chosen = sweep_grid(args), chosen_recipes(args, found)
    tasks = [t for t in SWEEP_TASKS if t in found]
    lines = ["## Recipe sweep (held-out 10% of the training file; dev never read)", "",
             ("One training run (seed 1) per candidate on 90% of the training file, scored on the other 10% "
              f"(`{' '.join(SWEEP_COMMON)}`), with `{' '.join(SWEEP_SPEED)}` and the task's preset otherwise. "
              "The winner (best final held-out metric) is the `sesame_best` arm above: trained on the whole "
              "training file, scored on dev. SST-2's candidates saw its first 20,000 sentences. Cells: held-out "
              "main metric after the last epoch (training CPU minutes)."), "",
             "| candidate | overrides | " + " | ".join(tasks) + " |", "|---|---|" + "---|" * len(tasks)]
    for c in grid:
        cells = []
        for t in tasks:
            r = found[t].get(c)
            score = held_out_score(r) if r else None
            cell = "—" if score is None else f"{score:.4f} ({r['train_cpu_s'] / 60:.1f})"
            cells.append(f"**{cell}**" if chosen.get(t) == c else cell)
        lines.append(f"| {c} | `{' '.join(SWEEP_GRID[c]) or '(preset)'}` | " + " | ".join(cells) + " |")
    metrics = {t: next(iter(found[t].values()))["main_metric"].removeprefix("val_") for t in tasks}
    lines += ["", "Metrics: " + ", ".join(f"{t} {m}" for t, m in metrics.items()) + ". Winners in bold"
              + ("" if len(chosen) == len(tasks) else "; a task without one has candidates still running") + ".", ""]
    return lines + held_out_time_section(found, grid, tasks, chosen)


def held_out_time_section(found: dict[str, dict[str, dict[str, Any]]], grid: list[str], tasks: list[str],
                          chosen: dict[str, str]) -> list[str]:
    """Item 4's other half, time to accuracy on held-out data: per candidate and task, the first validation at which
    the held-out curve reaches the final held-out metric of the task's own recipe (the grid's first candidate);
    ``chosen``: each task's winner on the final held-out metric (:func:`chosen_recipes`)."""
    base = grid[0]
    targets = {t: held_out_score(found[t][base]) for t in tasks if base in found[t]}
    tasks = [t for t in tasks if targets.get(t) is not None]
    if not tasks:
        return []
    firsts: dict[str, dict[str, float]] = {t: {} for t in tasks}
    lines = ["Time to accuracy on the same held-out data: the epoch (training CPU minutes) at each candidate's first "
             f"validation that reaches `{base}`'s final held-out metric (the task's own recipe); — never. Epochs "
             "compare across candidates whatever machine ran them. The GLUE preset `glue_fast` takes, of the candidates "
             "that reach it on every task, the one with the best final held-out metric on the most tasks.", "",
             "| candidate | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for c in grid:
        cells = []
        for t in tasks:
            r = found[t].get(c)
            epoch = reach(r["history"], r["main_metric"], targets[t], "epoch") if r else None
            if epoch is None:
                cells.append("—")
                continue
            firsts[t][c] = epoch
            cells.append(f"{epoch:.1f} ({reach(r['history'], r['main_metric'], targets[t], 'train_cpu_s') / 60:.1f})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    first = {c: sum(bool(firsts[t]) and firsts[t].get(c) == min(firsts[t].values()) for t in tasks) for c in grid}
    everywhere = [c for c in grid if all(c in firsts[t] for t in tasks)]
    best = {c: sum(chosen.get(t) == c for t in tasks) for c in everywhere}
    pick = max(everywhere, key=lambda c: (best[c], -grid.index(c))) if everywhere else None
    lines += ["", "First to the target (ties shared): " + ", ".join(f"{c} {n} of {len(tasks)}" for c, n in first.items() if n)
              + ". Reach it on every task: " + (", ".join(f"{c} (best final on {best[c]})" for c in everywhere) or "none")
              + (f". Chosen: **{pick}**." if pick else "."), ""]
    return lines


def write_report(args: argparse.Namespace, path: Path) -> Path:
    results = load_results(args.base_out)
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    figures = plot(results, path.parent / path.stem)
    write_run_records(args, path.parent / path.stem / "runs")
    lines = [
        "# Full-data study: sesame against the transformers Trainer", "",
        f"Written {datetime.datetime.now().isoformat(timespec='minutes')} by `python benchmarks/full_data_study.py "
        f"--report --out <study folder>` from {len(results)} finished units"
        + (" (**--quick pipeline check: shipped slices, a few steps; the numbers mean nothing**)" if args.quick else "") + ".",
        "",
        ("Each unit is one full training run (task, arm, seed) in its own process on one torch thread (2 shared CPU cores, "
         "`nice -n 19`), validated after every epoch. Arms: `sesame` = `sesame-train +experiment=full_<task>` as shipped; "
         "`hf` = transformers' `Trainer` with `AutoModelFor...` on sesame's own training examples and batches (same "
         "tokenisation, shuffle, seed, epochs, batch size, learning rate, warm-up, weight decay, clipping, AdamW), "
         "each epoch's model scored by sesame's evaluation path (the same scorer). Training time excludes evaluation "
         "and checkpoint writing (counted apart); CPU = process user+sys. Dev metrics are of the final epoch "
         "(and of the best dev epoch, which both arms keep: sesame's best.ckpt, the Trainer arm's best saved epoch); NER "
         "test F1 is the best dev epoch's. ± is the sample standard deviation over seeds. Every finished run's record "
         f"(settings, overrides, seed, commit, versions, per-validation metrics and times, cost, sesame's composed config): "
         f"`{path.stem}/runs/<task>_<arm>_seed<k>.json`."),
        "",
    ]
    extra = [a for a in dict.fromkeys(r["arm"] for r in results) if a in ARMS and a not in ("sesame", "hf")]
    if extra:
        lines += ["Other arms: " + "; ".join(
            f"`{a}` = {ARMS[a]['label']}" + (f": {' '.join(f'`{o}`' for o in ARMS[a]['overrides'])}" if ARMS[a]["overrides"] else "")
            for a in extra) + ".", ""]
    if not results:
        lines += ["No unit has finished yet.", ""]
    if results:
        lines += ["## Recipes (from the finished units' settings)", "",
                  "| task | epochs | batch | lr (encoder / head) | max length | warm-up | weight decay | clip |",
                  "|---|---|---|---|---|---|---|---|"]
        for task in dict.fromkeys(r["task"] for r in results):
            r = next(x for x in results if x["task"] == task)
            s = r["settings"]
            epochs = round(r["history"][-1]["epoch"], 1) if r["history"] else 0  # a mid-epoch last step reads 2.9995
            lines.append(f"| {r['task']} | {epochs:g} | {s['batch_size']} | {s['encoder_lr']:g} / {s['head_lr']:g} | "
                             f"{s['max_seq_length']} | {s['warmup_ratio']:g} of steps | {s['weight_decay']:g} | {s['gradient_clip_val']} |")
        lines.append("")
    tasks = list(dict.fromkeys(r["task"] for r in results))
    arms = list(dict.fromkeys(r["arm"] for r in results))
    if results:
        lines += ["## Goals", "", *goal_lines(results), ""]
        lines += ["## Dev (and test) metrics, mean ± std over seeds", "",
                  "| task | metric | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
        for task in tasks:
            rows = [r for r in results if r["task"] == task]
            keys = ["val_" + k for k in ("accuracy", "f1", "matthews_correlation", "pearson", "spearmanr", "exact_match")]
            present = [k for k in keys if any(k in r["final"] for r in rows)]
            for key in present:
                cells = [mean_std([r["final"].get(key) for r in rows if r["arm"] == a]) for a in arms]
                lines.append(f"| {task} | dev {key[4:]}, final epoch | " + " | ".join(cells) + " |")
            main = rows[0]["main_metric"]
            cells = [mean_std([r["best"].get(main) for r in rows if r["arm"] == a]) for a in arms]
            lines.append(f"| {task} | dev {main[4:]}, best epoch | " + " | ".join(cells) + " |")
            if any("test_f1" in r["best"] for r in rows):
                cells = [mean_std([r["best"].get("test_f1") for r in rows if r["arm"] == a]) for a in arms]
                lines.append(f"| {task} | test f1 (best dev epoch) | " + " | ".join(cells) + " |")
        lines.append("")
        sesame_arms = [a for a in arms if ARMS.get(a, {}).get("side") == "sesame"]
        means = [t for a in sesame_arms for t in mean_time_to_accuracy(results, a)]
        if means:
            lines += ["## Time to accuracy", "",
                      ("The rule the goals use: a sesame arm's dev curve averaged over its finished seeds (metric and "
                       "training CPU time at each validation) against the mean of the final dev metrics of the Trainer at "
                       "its best (`hf_fast`); each arm's mean CPU time at the first validation where its mean curve "
                       "reaches that target, the sesame arm counted only at validations the Trainer also made (matched "
                       "points), over the Trainer's. Below 1: sesame got there sooner. `total` = the arm's whole run over "
                       "the Trainer's. Times divide only where every unit of the row ran on one machine (one boot, one "
                       "processor fingerprint); elsewhere the ratio says `two machines`."), "",
                      "| task | arm | seeds (Trainer) | metric | Trainer mean final | arm mean final | arm CPU to reach (min) | "
                      "Trainer CPU to reach (min) | ratio CPU | ratio wall | total CPU ratio | matched points | one machine |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for t in means:
                lines.append(f"| {t['task']} | {t['arm']} | {t['seeds']} ({t['ref_seeds']}) | {reach_cells(t)} | "
                             f"{t['matched_points']} | {'yes' if t['same_machine'] else '**no**'} |")
            lines.append("")
        seen = [f"{r['task']} seed {r['seed']}: sampler `{r['switches'].get('sampler')}`, autocast "
                f"{r['switches'].get('autocast_dtype') if r['switches'].get('autocast') else 'off'}, linear layers in "
                f"{r['switches'].get('linear_dtype')}" for r in results if r["arm"] == SPEED_REF and r.get("switches")]
        if seen:
            lines += [f"Switches in effect in the `{SPEED_REF}` units, read inside each run: " + "; ".join(seen) + ".", ""]
        paired = [t for a in sesame_arms for t in time_to_accuracy(results, a)]
        if paired:
            lines += ["### Paired seeds (detail)", "",
                      ("Seed k of a sesame arm against seed k of the Trainer: its first validation at or above that "
                       "seed's final dev metric. Meaningful where the arms saw the same batches (fingerprints: the "
                       "per-epoch examples, real tokens and sum of token ids of every training batch agree); "
                       "`sesame_fast` groups batches by length, so its pairs are only a spread, not a comparison. CPU ratios of "
                       "pairs that ran on two machines do not compare either (the table above says which arms did)."), "",
                      "| task | arm | seed | metric | Trainer final | arm final | arm CPU to reach (min) | Trainer CPU (min) | "
                      "ratio CPU | ratio wall | total CPU ratio | same batches |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for t in paired:
                lines.append(f"| {t['task']} | {t['arm']} | {t['seed']} | {reach_cells(t)} | {'yes' if t['same_batches'] else 'NO'} |")
            lines.append("")
        lines += ["## Cost and memory per unit (mean over seeds)", "",
                  ("Training wall / CPU: summed over a unit's segments, evaluation and checkpoint writes excluded. "
                   "Eval: all per-epoch dev evaluations. Peak RSS: the largest `ru_maxrss` of the unit's processes "
                   "(training and its in-process evaluations; the Trainer arm also loads each epoch's saved model for "
                   "scoring); 'before eval' = the peak before the first evaluation, i.e. training alone. All attempts: "
                   "every process of the unit, setup, evaluation and lost work included."), "",
                  "| task | arm | n | train wall min | train CPU min | eval wall min | steps/epoch | peak RSS MiB (before eval) | "
                  "peak RSS MiB (all) | attempts | all attempts CPU min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for task in tasks:
            for arm in arms:
                rows = [r for r in results if r["task"] == task and r["arm"] == arm]
                if not rows:
                    continue
                avg = lambda k: statistics.fmean(r[k] for r in rows if r.get(k) is not None)  # noqa: E731
                before = [r["peak_rss_before_eval_mib"] for r in rows if r.get("peak_rss_before_eval_mib")]
                lines.append(
                    f"| {task} | {arm} | {len(rows)} | {avg('train_wall_s') / 60:.1f} | {avg('train_cpu_s') / 60:.1f} | "
                    f"{avg('eval_wall_s') / 60:.1f} | {rows[0]['steps_per_epoch']} | "
                    f"{statistics.fmean(before) if before else float('nan'):.0f} | {avg('peak_rss_mib'):.0f} | "
                    f"{sum(len(r['attempts']) for r in rows)} | {attempts_cpu_cell(rows)} |")
        lines.append("")
        if any(not attempts_on_record(r) for r in results):
            lines += [("≥: a unit of that row resumed from a checkpoint whose earlier attempts ran in another out "
                       "folder, so only its later attempts are on record (their CPU is below its training CPU)."), ""]
    study = argparse.Namespace(**{**vars(args), "sweep": False})
    missing = [(u, unit_state(unit_dir(args.base_out, u))) for u in plan(study)
               if not (unit_dir(args.base_out, u) / "result.json").is_file()]
    lines += sweep_section(args)
    lines += ["## Units still missing", ""]
    lines += [f"- {u['task']} / {u['arm']} / seed {u['seed']}: {state}" for u, state in missing] or ["None."]
    lines.append("")
    if figures:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.parent.name}/{p.name})" for p in figures] + [""]
    elif results:
        lines += ["(matplotlib is not installed: no plots.)", ""]
    if results:
        v, c = results[-1]["versions"], results[-1]["commit"]
        lines += [f"torch {v['torch']}, transformers {v['transformers']}, lightning {v['lightning']}, python {v['python']}; "
                  f"commit {c['commit'][:10]} ({c['branch']}{', dirty' if c['dirty'] else ''}); data from `$SESAME_DATA_DIR`.", ""]
    path.write_text("\n".join(lines))
    return path
