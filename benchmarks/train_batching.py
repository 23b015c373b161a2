"""How training batches are made, measured: length-grouped vs random batches, and which SQuAD windows
to train on, each over several seeds in one interleaved run.

Arms (each a full ``sesame-train`` run of one epoch in its own process, then the dev evaluation):

- ``squad``: the shipped SQuAD v1.1 slice (1,131 train questions, 338 dev), windows of 256 tokens,
  batch 12. ``with_answer`` (training windows without the answer left out), ``all`` (kept, labelled
  [CLS], as BERT's recipe and Hugging Face's ``run_qa.py`` do) and ``all_grouped`` (``all`` with
  ``data.group_by_length=true``).
- ``wnut17``: full WNUT-17 (3,394 train tweets; dev 1,009) from ``$SESAME_DATA_DIR``: ``random`` and
  ``grouped`` batches.
- ``sst2``: the first 8,000 sentences of SST-2's training file from ``$SESAME_DATA_DIR``, the whole dev set
  (872): ``grouped`` batches of 32 sentences against token-budget batches (``data.max_tokens``) of up to 448
  padded tokens (``max_tokens_448``: about as many steps; these sentences average 13 tokens) and 1,024
  (``max_tokens_1024``: fewer, fuller steps).

Per run it reads ``train_throughput.json`` (step times, examples, real and padded tokens of the
training steps; validation excluded) and ``metrics.json``; it reports per arm the mean over seeds
and, against the task's first arm, the ratios of tokens processed, epoch time and examples/s, plus
the dev metric's mean and standard deviation. Seeds run one after the other with the arms in
rotating order, so a change in machine load spreads over all arms.

    python benchmarks/train_batching.py                               # both tasks, seeds 1,2,3
    python benchmarks/train_batching.py --tasks wnut17 --seeds 1,2
    python benchmarks/train_batching.py --quick                       # pipeline check: a few steps
    python benchmarks/train_batching.py --count-only                  # tokens per epoch only, no training
    SESAME_DATA_DIR=/data/copy python benchmarks/train_batching.py    # WNUT-17 from elsewhere

Writes ``--out`` (default ``outputs/benchmarks/train_batching``): one run folder per (task, arm,
seed), ``train_batching.json`` (every number) and ``train_batching.md`` (the table). A finished run
is reused when the script runs again with the same ``--out``; ``--fresh`` redoes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from sesame.tasks.base.run_settings import RunSettings

SQUAD = ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=128", "data.batch_size=12"]
WNUT = ["task=ner", "data=wnut17"]
SST2 = ["data=sst2", "data.max_train_examples=8000"]
#: task -> (main metric, {arm: overrides}); the first arm is the reference of the ratios.
TASKS: dict[str, tuple[str, dict[str, list[str]]]] = {
    "squad": ("val_f1", {
        "with_answer": [*SQUAD, "data.train_windows=with_answer"],
        "all": [*SQUAD, "data.train_windows=all"],
        "all_grouped": [*SQUAD, "data.train_windows=all", "data.group_by_length=true"],
    }),
    "wnut17": ("val_f1", {"random": WNUT, "grouped": [*WNUT, "data.group_by_length=true"]}),
    "sst2": ("val_accuracy", {"grouped": [*SST2, "data.group_by_length=true"],
                              "max_tokens_448": [*SST2, "data.max_tokens=448"],
                              "max_tokens_1024": [*SST2, "data.max_tokens=1024"]}),
}
QUICK = ["trainer.limit_train_batches=3", "data.max_eval_examples=20"]


def run_one(out: Path, overrides: list[str], threads: int | None) -> dict:
    """Train one arm in a fresh process (or reuse a finished run folder); its throughput and metrics."""
    if not (out / "metrics.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        command = [sys.executable, "-m", "sesame.tasks.cli.train", *overrides, f"hydra.run.dir={out}",
                   "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"run failed: {' '.join(command)}\n{done.stderr[-3000:]}")
        print(f"  {out.relative_to(out.parents[2])}: {time.perf_counter() - started:.0f} s", flush=True)
    return {"throughput": json.loads((out / "train_throughput.json").read_text()),
            "metrics": json.loads((out / "metrics.json").read_text())}


def run_seeds(out: Path, arms: dict[str, list[str]], seeds: list[int], threads: int | None,
              extra: list[str] = ()) -> dict[str, list[dict]]:
    """Every arm once per seed, into ``out/<arm>/seed<N>``; the arm that goes first rotates from seed to
    seed, so a change of machine load spreads over the arms. {arm: [run per seed]}."""
    names = list(arms)
    results: dict[str, list[dict]] = {arm: [] for arm in names}
    for i, seed in enumerate(seeds):
        for arm in names[i % len(names):] + names[: i % len(names)]:
            results[arm].append(run_one(out / arm / f"seed{seed}", [*arms[arm], f"seed={seed}", *extra], threads))
    return results


def count_tokens(overrides: list[str], seed: int) -> dict:
    """What one training epoch of an arm processes, without training: its training examples
    through the run's own loader (sampler and collator), real and padded tokens."""
    from hydra import compose, initialize_config_module

    from sesame.tasks.cli.resolvers import register_resolvers
    from sesame.tasks.runs.runner import build_datamodule

    register_resolvers()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, f"seed={seed}"])
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("fit")
    counts = {"examples": 0, "steps": 0, "tokens": 0, "padded_tokens": 0}
    for batch in datamodule.train_dataloader():
        counts["examples"] += int(batch["input_ids"].shape[0])
        counts["steps"] += 1
        counts["tokens"] += int(batch["attention_mask"].sum())
        counts["padded_tokens"] += int(batch["input_ids"].numel())
    return counts


def count_only(tasks: list[str], seeds: list[int]) -> str:
    lines = ["| task | arm | training examples | steps | real tokens | tokens processed (padded) | × first arm |",
             "|---|---|---|---|---|---|---|"]
    for task in tasks:
        reference = None
        for arm, overrides in TASKS[task][1].items():
            runs = [count_tokens(overrides, seed) for seed in seeds]
            mean = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
            reference = reference or mean
            lines.append(f"| {task} | {arm} | {mean['examples']:.0f} | {mean['steps']:.0f} | {mean['tokens']:,.0f} "
                         f"| {mean['padded_tokens']:,.0f} | {mean['padded_tokens'] / reference['padded_tokens']:.2f} |")
    return "\n".join(lines)


def summarise(task: str, metric: str, results: dict[str, list[dict]]) -> list[dict]:
    """Per arm (in ``results``' order, the first the reference of the ratios): means over seeds of the
    training throughput, and the dev metric's mean and sd (in points: fractions are scaled by 100)."""
    rows = []
    reference = None
    for arm, runs in results.items():
        mean = {k: statistics.fmean(r["throughput"][k] for r in runs)
                for k in ("padded_tokens", "tokens", "seconds", "examples_per_second", "examples", "steps")}
        scores = [r["metrics"][metric] * (100 if r["metrics"][metric] <= 1 else 1) for r in runs]
        row = {"task": task, "arm": arm, "seeds": len(runs), **mean,
               "metric": metric, "metric_mean": statistics.fmean(scores),
               "metric_std": statistics.stdev(scores) if len(scores) > 1 else 0.0, "metric_values": scores}
        reference = reference or row
        row["padded_tokens_ratio"] = row["padded_tokens"] / reference["padded_tokens"]
        row["seconds_ratio"] = row["seconds"] / reference["seconds"]
        row["examples_per_second_ratio"] = row["examples_per_second"] / reference["examples_per_second"]
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| task | arm | seeds | training examples | tokens processed (padded) | × first arm | training time (s) "
             "| × first arm | examples/s × first arm | dev metric (mean ± sd) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['arm']} | {r['seeds']} | {r['examples']:.0f} | {r['padded_tokens']:,.0f} "
            f"| {r['padded_tokens_ratio']:.2f} | {r['seconds']:.0f} | {r['seconds_ratio']:.2f} "
            f"| {r['examples_per_second_ratio']:.2f} | {r['metric_mean']:.2f} ± {r['metric_std']:.2f} ({r['metric']}) |")
    return "\n".join(lines)


def seed_study_parser(doc: str, default_tasks: str, known_tasks: list[str], default_out: Path) -> argparse.ArgumentParser:
    """The options of a study over seeds (this script's and ``precision_training.py``'s); the description
    and the examples come from the script's docstring ``doc``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     epilog="Examples:\n" + "\n".join(
                                         line for line in doc.splitlines() if line.startswith("    python")),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=default_tasks, help="comma-separated: " + ", ".join(known_tasks))
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of every run (default: torch's)")
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--quick", action="store_true", help="a few steps and dev examples: checks the pipeline")
    parser.add_argument("--fresh", action="store_true", help="retrain every run even if its folder is finished")
    return parser


def tasks_and_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace, known_tasks: list[str]) -> tuple[list[str], list[int]]:
    """``--tasks`` (each one of ``known_tasks``, else a usage error) and ``--seeds`` as lists."""
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(known_tasks))
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(known_tasks)}")
    return tasks, [int(s) for s in args.seeds.split(",")]


def write_study(out: Path, name: str, rows: list[dict], meta: dict) -> None:
    """``out/<name>.json`` (the rows and ``meta``) and ``out/<name>.md`` (their table), which it prints."""
    text = table(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"rows": rows, **meta}, indent=2))
    (out / f"{name}.md").write_text(text + "\n")
    print(text)


def main(argv: list[str] | None = None) -> None:
    parser = seed_study_parser(__doc__, "squad,wnut17", list(TASKS), Path("outputs/benchmarks/train_batching"))
    parser.add_argument("--count-only", action="store_true",
                        help="no training: count each arm's training examples and tokens over one epoch (seconds)")
    args = parser.parse_args(argv)
    tasks, seeds = tasks_and_seeds(parser, args, list(TASKS))
    if args.count_only:
        text = count_only(tasks, seeds)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "train_batching_tokens.md").write_text(text + "\n")
        print(text)
        return
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
    rows: list[dict] = []
    for task in tasks:
        results = run_seeds(args.out / task, TASKS[task][1], seeds, args.threads, QUICK if args.quick else [])
        rows += summarise(task, TASKS[task][0], results)
    write_study(args.out, "train_batching", rows,
                {"seeds": seeds, "quick": args.quick, "threads": args.threads, "tasks": {t: TASKS[t] for t in tasks}})


if __name__ == "__main__":
    main()
