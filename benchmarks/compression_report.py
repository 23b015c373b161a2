"""Publishes finished runs of benchmarks/compression.py: each task's rows, settings and Pareto plot into
docs/results/compression/, the full tables into docs/results/compression.md, and the compression table of the
documentation site's page docs/compression.md (PAGE; with its goals checked on it) between its markers.

    python benchmarks/compression_report.py outputs/compress/sst2 outputs/compress/squad   # publish both runs
    python benchmarks/compression_report.py            # render docs/compression.md's table again from the published runs
    python benchmarks/compression_report.py --check    # does the page hold what the published files render?

Each OUT is a ``--out`` folder of benchmarks/compression.py holding ``compression.json``; a task found in
several is taken from the last one given. Publishing never trains or times anything.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = REPO / "docs" / "results" / "compression"  # <task>.json (settings and rows), pareto_<task>.png
REPORT = REPO / "docs" / "results" / "compression.md"
#: The page of the documentation site that holds the table, between its markers.
PAGE = REPO / "docs" / "compression.md"
README_BEGIN, README_END = "<!-- compression:begin -->", "<!-- compression:end -->"
#: Where a run's --out folder is shown to be: the recorded one is a folder of the machine that ran it.
SHOWN_OUT = "outputs/benchmarks/compression"
LABELS = {"sst2": "SST-2", "squad_v1": "SQuAD v1.1"}
#: Points per unit of each task's main metric (SST-2 accuracy is a fraction, SQuAD F1 is in points).
POINTS = {"sst2": 100.0, "squad_v1": 1.0}
#: The compression goals: task -> (speed-up over the fine-tuned fp32 model at batch 1, largest metric loss in points).
GOALS = {"sst2": (8.0, 1.5), "squad_v1": (4.0, 3.0)}


#: A unit's run folder inside a full-data study's --out folder, wherever that folder was on the machine that ran it.
STUDY_RUN = re.compile(r"\S*/(units/\w+/\w+/seed\d+/run)\b")


def shown(text: str, task: str | None = None) -> str:
    """``text`` with a full-data study's run folders under ``$SESAME_STUDY_DIR`` and an absolute ``--out`` folder under
    SHOWN_OUT (``/<task>`` when the task is known): the recorded absolute paths are those of the machine that ran the
    study, which a reader does not have."""
    out = f"{SHOWN_OUT}/{task}" if task else SHOWN_OUT
    return re.sub(r"(--out[ =])/\S+", lambda m: m.group(1) + out, STUDY_RUN.sub(r"$SESAME_STUDY_DIR/\1", text))


def published(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """task -> {"settings": ..., "rows": ...} of the runs published in ``folder`` (RESULTS), in the order of LABELS."""
    folder = folder or RESULTS
    found = {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")} if folder.is_dir() else {}
    return {task: found[task] for task in LABELS if task in found}


def goal_line(task: str, rows: list[dict[str, Any]]) -> str:
    """Whether some variant is at least the goal's speed-up at batch 1 within the goal's metric loss, with the
    numbers: the fastest variant within the loss, and the fastest of all where that one misses."""
    speed, loss = GOALS[task]
    points = POINTS[task]
    kept = [r for r in rows[1:] if r["score_delta"] is not None and r["score_delta"] * points >= -loss]
    fastest = max(rows[1:], key=lambda r: r["speedup_b1"])
    best = max(kept, key=lambda r: r["speedup_b1"]) if kept else None
    head = f"Goal: ≥ {speed:g}x at batch 1 within {loss:g} points of the fine-tuned model: "
    if best is not None and best["speedup_b1"] >= speed:
        return head + (f"**met** by `{best['model']}` ({best['speedup_b1']:.2f}x, "
                       f"{best['score_delta'] * points:+.2f} points).")
    within = (f"the fastest variant within {loss:g} points is `{best['model']}` at {best['speedup_b1']:.2f}x "
              f"({best['score_delta'] * points:+.2f})" if best else f"no variant stays within {loss:g} points")
    return head + (f"**missed**: {within}; the fastest of all, `{fastest['model']}`, is {fastest['speedup_b1']:.2f}x at "
                   f"{fastest['score_delta'] * points:+.2f} points.")


def readme_section(runs: dict[str, dict[str, Any]]) -> str:
    """PAGE's compression results: per task, every variant's size, speed and metric, the Pareto front and the goal,
    rendered from the published runs (links relative to PAGE)."""
    from readme_section import link

    lines = []
    for task, run in runs.items():
        rows, points = run["rows"], POINTS[task]
        metric = rows[0]["metric"].removeprefix("val_")
        lines += [f"**{LABELS[task]}** (dev {metric}; teacher `{shown(rows[0]['source'])}`; plot: "
                  f"[`pareto_{task}.png`]({link(RESULTS / f'pareto_{task}.png', PAGE)})):", "",
                  f"| variant | layers | size × | speed × b1 | speed × b32 | {metric} | Δ points | Pareto front |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            delta = "" if r["model"] == "finetuned" or r["score_delta"] is None else f"{r['score_delta'] * points:+.2f}"
            score = "n/a" if r["score"] is None else f"{r['score'] * points:.2f}"
            lines.append(f"| {r['model']} | {r['layers']} | {r['size_ratio']:.2f} | {r['speedup_b1']:.2f} | "
                         f"{r['speedup_b32']:.2f} | {score} | {delta} | {'yes' if r['pareto'] else ''} |")
        lines += ["", goal_line(task, rows), "", f"Reproduce: `{shown(run['settings'].get('command', '(command not recorded)'), task)}`", ""]
    missing = [LABELS[t] for t in LABELS if t not in runs]
    if missing:
        lines += [f"Not published yet: {', '.join(missing)}.", ""]
    return "\n".join(lines).rstrip("\n")


def report_markdown(runs: dict[str, dict[str, Any]]) -> str:
    """docs/results/compression.md: per task the full table (latencies, throughputs), the Pareto table, the
    plot and the settings it was measured with."""
    from compression import MODELS, markdown_table, pareto_table, profile_table, variants_legend

    names = [n for n in MODELS if any(r["model"] == n for run in runs.values() for r in run["rows"])]
    parts = ["# Compression: pruning, distillation and int8 against the fine-tuned model (SST-2, SQuAD v1.1)", "",
             "Published by `python benchmarks/compression_report.py` from runs of `benchmarks/compression.py`; "
             "speed × = the fine-tuned fp32 model's median latency / the variant's, timed in one interleaved run per "
             "task; size = the saved state dict (torch) or the int8 ONNX file (onnxruntime).", "",
             variants_legend(names)]
    for task, run in runs.items():
        s = run["settings"]
        weights = s.get("int8_weights", "per_tensor")  # runs from before the setting were per tensor
        sizes = [int(k.removeprefix("latency_ms_b")) for k in run["rows"][0] if k.startswith("latency_ms_b")]
        parts += ["", f"## {LABELS[task]}", "",
                  f"Command: `{shown(s.get('command', '(not recorded)'), task)}`", "",
                  f"torch {s['torch']} (quantised engine `{s['quantized_engine']}`), {s['threads']} thread(s) for "
                  f"torch and onnxruntime, {s['rounds']} interleaved rounds; pruning --heads {s['heads']} --ffn "
                  f"{s['ffn']} in {s['prune_rounds']} round(s); student --keep {s['keep']}, distillation alpha "
                  f"{s['alpha']}, temperature {s['temperature']}; onnxruntime int8 weights "
                  f"{weights} (one scale per {'output column' if weights == 'per_channel' else 'matrix'}).", "",
                  goal_line(task, run["rows"]), "",
                  markdown_table(task, run["rows"], sizes), "", pareto_table(task, run["rows"], sizes), "",
                  f"![{task}: dev metric against speed-up](compression/pareto_{task}.png)", "",
                  profile_table(task, run["rows"], sizes[0])]
    return "\n".join(parts) + "\n"


def plot(task: str, settings: dict[str, Any], rows: list[dict[str, Any]]) -> Path | None:
    """The task's Pareto plot at batch 1, redrawn from its rows, with the goal's region shaded."""
    from compression import plot_pareto

    speed, loss = GOALS[task]
    base = rows[0]["score"]
    goal = (speed, base - loss / POINTS[task]) if base is not None else None
    return plot_pareto(task, rows, 1, settings["threads"], bool(settings.get("quick")), RESULTS / f"pareto_{task}.png", goal)


def publish(outs: list[Path]) -> dict[str, dict[str, Any]]:
    """Copy each task of the ``outs`` (settings, rows, plot) into RESULTS; the runs now published."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for out in outs:
        path = out / "compression.json"
        if not path.is_file():
            sys.exit(f"error: {path} does not exist. Fix: give a --out folder of a finished benchmarks/compression.py run")
        results = json.loads(path.read_text())
        if results["settings"].get("quick"):
            sys.exit(f"error: {path} is a --quick run (shipped slices, a few steps): its numbers mean nothing. "
                     "Fix: publish a real run")
        for task, rows in results["tasks"].items():
            (RESULTS / f"{task}.json").write_text(json.dumps({"settings": results["settings"], "rows": rows}, indent=2) + "\n")
            plot(task, results["settings"], rows)
            print(f"published {task} from {path}")
    return published()


def main(argv: list[str] | None = None) -> None:
    from readme_section import section_in, with_section

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outs", nargs="*", type=Path, help="--out folders of benchmarks/compression.py runs to publish")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {PAGE.relative_to(REPO)}'s section differs from the published runs")
    args = parser.parse_args(argv)
    runs = publish(args.outs) if args.outs else published()
    if not runs:
        sys.exit(f"error: nothing published in {RESULTS}. Fix: give the --out folders of finished runs")
    section, page = readme_section(runs), PAGE.read_text(encoding="utf-8")
    if args.check:
        same = section_in(page, README_BEGIN, README_END) == section
        print(f"{PAGE.relative_to(REPO)}: " + ("up to date" if same else "differs: rerun without --check"))
        sys.exit(0 if same else 1)
    REPORT.write_text(report_markdown(runs), encoding="utf-8")
    PAGE.write_text(with_section(page, README_BEGIN, README_END, section, "Compression results"), encoding="utf-8")
    print(f"wrote {REPORT.relative_to(REPO)} and the compression section of {PAGE.relative_to(REPO)}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
