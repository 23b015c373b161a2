"""Does bf16 autocast change what training learns? fp32 against ``trainer.precision=bf16-mixed``,
whole training runs over several seeds, the dev metric at the end.

``benchmarks/precision_compile.py`` times single steps; this script trains. Each (task, precision, seed)
is a full ``sesame-train`` run in its own process (one epoch, the default encoder MiniLM-L6, full
fine-tuning), then the dev evaluation in the same precision. Seeds run one after the other, the
precision that goes first rotating, so machine load spreads over both. Reported per task: training
time and examples/s as bf16 / fp32, and the dev metric's mean and sd over seeds for each.

Tasks:

- ``sst2``: GLUE SST-2 from ``$SESAME_DATA_DIR`` (default ``../shared/data``), the first 4,000 training
  sentences (125 steps of 32), the whole dev set (872).
- ``squad``: the shipped SQuAD v1.1 slice (1,131 train questions, 338 dev), windows of 256 tokens,
  batch 12, every window trained (``data.train_windows=all``).

    python benchmarks/precision_training.py                          # both tasks, seeds 1,2,3
    python benchmarks/precision_training.py --tasks sst2 --seeds 1,2 --threads 1
    python benchmarks/precision_training.py --quick                  # pipeline check: a few steps
    SESAME_DATA_DIR=/data/copy python benchmarks/precision_training.py

bf16 is only fast on CPUs with bf16 instructions (``lscpu | grep bf16``: avx512_bf16 or amx_bf16);
elsewhere it still runs, slower. Writes ``--out`` (default ``outputs/benchmarks/precision_training``):
a run folder per (task, precision, seed), ``precision_training.json`` and ``precision_training.md``.
Finished runs are reused when the script runs again with the same ``--out``; ``--fresh`` redoes them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import require_data_files  # noqa: E402
from train_batching import QUICK, run_seeds, summarise, table  # noqa: E402

PRECISIONS = {"fp32": ["trainer.precision=32-true"], "bf16": ["trainer.precision=bf16-mixed"]}
#: task -> (main metric, overrides, data files it reads from $SESAME_DATA_DIR)
TASKS: dict[str, tuple[str, list[str], list[str]]] = {
    "sst2": ("val_accuracy", ["task=glue", "data=sst2", "data.max_train_examples=4000"],
             ["sst2/train.tsv", "sst2/dev.tsv"]),
    "squad": ("val_f1", ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=128",
                         "data.batch_size=12", "data.train_windows=all"], []),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Examples:\n" + "\n".join(
                                         line for line in __doc__.splitlines() if line.startswith("    python")),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="sst2,squad", help="comma-separated: " + ", ".join(TASKS))
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (default 1,2,3)")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of every run (default: torch's)")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/precision_training"))
    parser.add_argument("--quick", action="store_true", help="a few steps and dev examples: checks the pipeline")
    parser.add_argument("--fresh", action="store_true", help="retrain every run even if its folder is finished")
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    require_data_files({t: {"files": TASKS[t][2]} for t in tasks}, tasks, args.quick)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
    rows: list[dict] = []
    for task in tasks:
        metric, overrides, _ = TASKS[task]
        if args.quick:  # the shipped slices only
            overrides = ["data=sst2_slice" if o == "data=sst2" else o for o in overrides]
        arms = {name: [*overrides, *flag] for name, flag in PRECISIONS.items()}
        results = run_seeds(args.out / task, arms, seeds, args.threads, QUICK if args.quick else [])
        rows += summarise(task, metric, results)
    text = table(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "precision_training.json").write_text(json.dumps(
        {"rows": rows, "seeds": seeds, "quick": args.quick, "threads": args.threads,
         "tasks": {t: TASKS[t] for t in tasks}}, indent=2))
    (args.out / "precision_training.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
