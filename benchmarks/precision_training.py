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

import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import require_data_files  # noqa: E402
from train_batching import QUICK, run_seeds, seed_study_parser, summarise, tasks_and_seeds, write_study  # noqa: E402

PRECISIONS = {"fp32": ["trainer.precision=32-true"], "bf16": ["trainer.precision=bf16-mixed"]}
#: task -> its main metric, its overrides, and the data files it reads from $SESAME_DATA_DIR
TASKS: dict[str, dict[str, Any]] = {
    "sst2": {"metric": "val_accuracy", "overrides": ["task=glue", "data=sst2", "data.max_train_examples=4000"],
             "files": ["sst2/train.tsv", "sst2/dev.tsv"]},
    "squad": {"metric": "val_f1", "overrides": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256",
                                                "data.doc_stride=128", "data.batch_size=12", "data.train_windows=all"],
              "files": []},
}


def main(argv: list[str] | None = None) -> None:
    parser = seed_study_parser(__doc__, "sst2,squad", list(TASKS), Path("outputs/benchmarks/precision_training"))
    args = parser.parse_args(argv)
    tasks, seeds = tasks_and_seeds(parser, args, list(TASKS))
    require_data_files(TASKS, tasks, args.quick)
    if args.fresh:
        shutil.rmtree(args.out, ignore_errors=True)
    rows: list[dict] = []
    for task in tasks:
        overrides = TASKS[task]["overrides"]
        if args.quick:  # the shipped slices only
            overrides = ["data=sst2_slice" if o == "data=sst2" else o for o in overrides]
        arms = {name: [*overrides, *flag] for name, flag in PRECISIONS.items()}
        results = run_seeds(args.out / task, arms, seeds, args.threads, QUICK if args.quick else [])
        rows += summarise(task, TASKS[task]["metric"], results)
    write_study(args.out, "precision_training", rows,
                {"seeds": seeds, "quick": args.quick, "threads": args.threads, "tasks": {t: TASKS[t] for t in tasks}})


if __name__ == "__main__":
    main()
