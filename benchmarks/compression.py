"""Compression benchmark: size, CPU speed and quality of a fine-tuned model against its compressed versions
(int8, a layer-dropped and distilled student, structured pruning with and without recovery, onnxruntime
int8, and all of them in one pipeline), measured side by side in one run.

For each task (SST-2 and SQuAD v1.1, real data from $SESAME_DATA_DIR, default ../shared/data):
  finetuned         fine-tune the encoder (or take --sst2-run / --squad_v1-run: the teacher of every
                    distillation below, so give full-data runs, e.g. from benchmarks/full_data_study.py),
  int8              sesame-compress quantize (torch dynamic int8 linear layers),
  int8_onnx         sesame-export --format onnx --int8 of the fine-tuned run, run by onnxruntime (OnnxRunner),
  student           sesame-compress drop-layers --keep every_other (3 of MiniLM-L6's layers), the
                    fine-tuned head copied, not trained further,
  distilled         that student encoder trained with distill.teacher=<finetuned run>,
 (gold_student,     with --gold-student: the same student trained on the gold labels only,)
  heads             sesame-compress prune --heads H (attention heads alone; no further training),
  ffn               sesame-compress prune --ffn F (feed-forward neurons alone),
  pruned            sesame-compress prune --heads H --ffn F (both),
  pruned_recovered  the same pruning followed by recovery training distilled from the fine-tuned run
                    (sesame-compress prune --rounds R --recover ...: R rounds of prune-then-recover),
  pruned_int8_onnx  that pruned and recovered model exported to ONNX, run by onnxruntime int8 (every step
                    but the layer drop: for tasks where the 3-layer student costs too much quality),
  pipeline          the distilled student, pruned and recovered (distilled from the fine-tuned run), exported
                    to ONNX and run by onnxruntime int8: every step at once.
H, F and R are --heads (default 0.4), --ffn (0.5) and --prune-rounds (1). A recovery training is the
fine-tuned run's config (its data, optimiser, epochs) with the pruned encoder and the key=value overrides
the students get (the task's, --<task>-override, --train-override, --distill-override), the distillation
settings (--alpha, --temperature, the teacher logits cached under <out>/teacher_logits), then
--recover-override (e.g. trainer.max_epochs=1).

Every model is scored through sesame-eval's own path (its main metric on the validation set; an
onnxruntime variant's outputs come from its graph, decoded and scored by the same code); its size is the
bytes of its saved state dict (the int8 ONNX file for onnxruntime variants); CPU latency and throughput
are timed at batch 1 and 32 on the same validation batches, in interleaved rounds (each round times every
model once, so load changes hit all of them alike; torch and onnxruntime get the same thread count),
medians reported, and speed given as ratios to the fine-tuned fp32 model.

Writes <out>/compression.json, <out>/compression.md (tables, the Pareto front of speed at batch 1
against the dev metric) and <out>/pareto_<task>.png, and prints the tables. Finished steps are reused
when the script is run again with the same --out (--fresh redoes them; a stopped recovery continues).

    python benchmarks/compression.py                                   # both tasks (hours on a CPU)
    python benchmarks/compression.py --tasks sst2 --sst2-run outputs/glue/<full-data run>
    python benchmarks/compression.py --heads 0.3 --ffn 0.4 --prune-rounds 3 --recover-override trainer.max_epochs=1
    python benchmarks/compression.py --variants finetuned,int8_onnx,pruned,pruned_recovered
    python benchmarks/compression.py --distill-override trainer.max_epochs=3 --gold-student
    python benchmarks/compression.py --squad_v1-override data.max_eval_examples=1000   # part of dev
    python benchmarks/compression.py --quick                           # shipped slices, a few batches
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The work is in three modules, one a job; what other scripts and the tests import from this script
# (``from compression import compose, ...``) stays importable from here.
from compression_measure import measure_task, time_models, timing_batches  # noqa: E402, F401
from compression_tables import markdown_table, pareto_table, plot_pareto, profile_table, variants_legend  # noqa: E402
from compression_variants import (  # noqa: E402, F401
    DEFAULT_VARIANTS,
    MODELS,
    QUICK_TRAINER,
    TASKS,
    VARIANTS,
    build_models,
    compose,
    require_data_files,
    train_run,
)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", default="sst2,squad_v1", help="comma-separated, from: " + ", ".join(TASKS))
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/compression"), help="where runs and results go")
    parser.add_argument("--encoder", default="minilm_l6", help="encoder to fine-tune (alias, folder or hub id)")
    for task in TASKS:
        parser.add_argument(f"--{task}-run", type=Path, default=None, dest=f"{task}_run",
                            help=f"an existing fine-tuned {task} run folder (or .ckpt) instead of fine-tuning")
        parser.add_argument(f"--{task}-override", action="append", default=[], metavar="KEY=VALUE",
                            dest=f"{task}_override",
                            help=f"Hydra override for every {task} training and evaluation (repeatable), "
                            "e.g. data.max_eval_examples=1000")
    parser.add_argument("--keep", default="every_other", help="drop-layers selection (every_other, bottom, top, 0,2,4)")
    parser.add_argument("--num-layers", type=int, default=None, help="with --keep bottom/top: layers to keep")
    parser.add_argument("--alpha", type=float, default=0.5, help="distill.alpha: weight of the gold loss")
    parser.add_argument("--temperature", type=float, default=2.0, help="distill.temperature")
    parser.add_argument("--train-override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for fine-tuning and for the students (repeatable), e.g. trainer.max_epochs=2")
    parser.add_argument("--distill-override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for the student and recovery trainings only (repeatable)")
    parser.add_argument("--gold-student", action="store_true", help="also train the student on gold labels only")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="comma-separated variants to measure (finetuned always), from: " + ", ".join(MODELS))
    parser.add_argument("--heads", type=float, default=0.4,
                        help="share of all attention heads pruning removes (heads, pruned, pruned_recovered, pruned_int8_onnx, pipeline; "
                        "default 0.4)")
    parser.add_argument("--ffn", type=float, default=0.5,
                        help="share of all feed-forward neurons pruning removes (ffn, pruned, pruned_recovered, pruned_int8_onnx, pipeline; "
                        "default 0.5)")
    parser.add_argument("--prune-batches", type=int, default=32, help="training batches pruning scores on (default 32)")
    parser.add_argument("--prune-rounds", type=int, default=1,
                        help="rounds of prune-then-recover of pruned_recovered and pipeline (default 1: prune once, "
                        "recover once)")
    parser.add_argument("--recover-override", action="append", default=[], metavar="KEY=VALUE",
                        help="override of every recovery training, after the others (repeatable), e.g. trainer.max_epochs=1")
    parser.add_argument("--int8-weights", choices=("per_channel", "per_tensor"), default="per_channel",
                        help="sesame-export --int8-weights of the onnxruntime variants (default per_channel)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for timing (default: torch's, one per core; 1 with --quick). On a "
                        "machine shared with other jobs use 1: threads that wait for descheduled peers time the load")
    parser.add_argument("--batch-sizes", default="1,32", help="batch sizes to time (default: 1,32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default: 5; pruning's rounds are --prune-rounds)")
    parser.add_argument("--batches", type=int, default=None,
                        help="batches timed per model, size and round (default: 20 at batch 1, 4 above)")
    parser.add_argument("--quick", action="store_true",
                        help="pipeline check: shipped data slices, trainer=debug (a few batches), short timing")
    parser.add_argument("--fresh", action="store_true", help="redo every step even if its output exists")
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    args.variants = ["finetuned", *(v.strip() for v in args.variants.split(",") if v.strip() and v.strip() != "finetuned")]
    if args.gold_student and "gold_student" not in args.variants:
        args.variants.append("gold_student")
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        parser.error(f"unknown variant(s) {bad}; choose from {', '.join(MODELS)}")
    for flag, value in (("--heads", args.heads), ("--ffn", args.ffn)):
        if not 0.0 < value < 1.0:
            parser.error(f"{flag} {value}: a share of them to remove, in (0, 1)")
    if args.prune_rounds < 1 or args.prune_batches < 1:
        parser.error("--prune-rounds and --prune-batches are at least 1")
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.threads = args.threads or 1
        args.prune_batches = min(args.prune_batches, 2)
    return args


def check_data(args: argparse.Namespace) -> None:
    require_data_files(TASKS, args.tasks, args.quick)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_data(args)
    import torch

    from sesame.tasks.cli.resolvers import register_resolvers
    from sesame.tasks.core.errors import UserError

    register_resolvers()
    args.out.mkdir(parents=True, exist_ok=True)
    threads = args.threads or torch.get_num_threads()
    results: dict[str, Any] = {"settings": {
        "command": " ".join(["python benchmarks/compression.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]),
        "encoder": args.encoder, "keep": args.keep, "alpha": args.alpha, "temperature": args.temperature,
        "heads": args.heads, "ffn": args.ffn, "prune_batches": args.prune_batches, "prune_rounds": args.prune_rounds,
        "int8_weights": args.int8_weights, "quick": args.quick, "threads": threads, "rounds": args.rounds, "variants": args.variants,
        "train_overrides": args.train_override, "distill_overrides": args.distill_override,
        "recover_overrides": args.recover_override,
        "task_overrides": {t: getattr(args, f"{t}_override") for t in args.tasks},
        "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine,
    }, "tasks": {}}
    sections = []
    for task in args.tasks:
        try:
            rows = measure_task(args, task, build_models(args, task))
        except UserError as err:
            sys.exit(f"error: {err}")
        results["tasks"][task] = rows
        table, front = markdown_table(task, rows, args.batch_sizes), pareto_table(task, rows, args.batch_sizes)
        figure = plot_pareto(task, rows, args.batch_sizes[0], threads, args.quick, args.out / f"pareto_{task}.png")
        caption = (f"![{task}: dev metric against speed-up]({figure.name})\n\n*{task}: each point is one variant, at "
                   f"its CPU speed-up at batch {args.batch_sizes[0]} over the fine-tuned fp32 model (x, log scale) and "
                   f"its dev {rows[0]['metric']} (y); squares run in onnxruntime int8, circles in torch; red points "
                   "joined by the dashed line are the Pareto front (no other variant is as fast and as accurate and "
                   "better in one).*" if figure else "(matplotlib is not installed: no Pareto plot.)")
        sections.append("\n\n".join([table, front, caption, profile_table(task, rows, args.batch_sizes[0])]))
        print("\n" + table + "\n\n" + front + "\n", flush=True)
        for r in rows[1:]:
            speed = ", ".join(f"batch {b}: {r[f'speedup_b{b}']:.2f}x" for b in args.batch_sizes)
            print(f"{task} {r['model']}: size {r['size_ratio']:.2f}x of fine-tuned, speed {speed}", flush=True)
    note = (f"CPU timing: {threads} threads (torch and onnxruntime alike), median seconds per batch over "
            f"{args.rounds} interleaved rounds; speed × = fine-tuned latency / model latency; size = saved state dict "
            "(torch) or the int8 ONNX file (onnxruntime); pruning: --heads "
            f"{args.heads} --ffn {args.ffn}, recovery in {args.prune_rounds} round(s)."
            + (" --quick: shipped slices and a few training steps; the numbers check the pipeline and mean nothing."
               if args.quick else ""))
    names = list(dict.fromkeys(r["model"] for rows in results["tasks"].values() for r in rows))
    (args.out / "compression.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "compression.md").write_text("## Compression\n\n" + note + "\n\n" + variants_legend(names) + "\n\n"
                                             + "\n\n".join(sections) + "\n")
    print(f"{note}\nwrote {args.out / 'compression.md'} and {args.out / 'compression.json'}")


if __name__ == "__main__":
    main()
