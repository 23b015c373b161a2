"""Compression benchmark: size, CPU speed and quality of a fine-tuned model against its int8 version,
a layer-dropped student, and that student after distillation, measured side by side in one run.

For each task (SST-2 and SQuAD v1.1, real data from $SESAME_DATA_DIR, default ../shared/data):
  1. finetuned  fine-tune the encoder (or take --sst2-run / --squad_v1-run),
  2. int8       sesame-compress quantize (dynamic int8 linear layers),
  3. student    sesame-compress drop-layers --keep every_other (3 of MiniLM-L6's layers), the
                fine-tuned head copied, not trained further,
  4. distilled  that student encoder trained with distill.teacher=<finetuned run>,
 (5. gold_student, with --gold-student: the same student trained on the gold labels only.)
Every model is scored through sesame-eval's own path (its main metric on the validation set); its
size is the bytes of its saved state dict; CPU latency and throughput are timed at batch 1 and 32 on
the same validation batches, in interleaved rounds (each round times every model once, so load
changes hit all of them alike), medians reported, and speed given as ratios to the fine-tuned model.

Writes <out>/compression.json and <out>/compression.md and prints the tables. Finished steps are
reused when the script is run again with the same --out (--fresh redoes them).

    python benchmarks/compression.py                                   # both tasks (hours on a CPU)
    python benchmarks/compression.py --tasks sst2 --sst2-run outputs/glue/<run>
    python benchmarks/compression.py --distill-override trainer.max_epochs=3 --gold-student
    python benchmarks/compression.py --squad_v1-override data.max_eval_examples=1000   # part of dev
    python benchmarks/compression.py --quick                           # shipped slices, a few batches
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TASKS: dict[str, dict[str, Any]] = {
    "sst2": {
        "overrides": ["task=glue", "data=sst2"],
        "quick": ["task=glue", "data=sst2_slice", "data.max_eval_examples=64"],
        "files": ["sst2/train.tsv", "sst2/dev.tsv"],
    },
    "squad_v1": {
        "overrides": ["task=squad_v1", "data=squad_v1"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_eval_examples=16"],
        "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"],
    },
}
QUICK_TRAINER = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]
MODELS = ("finetuned", "int8", "student", "distilled", "gold_student")


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
                        help="Hydra override for the student trainings only (repeatable)")
    parser.add_argument("--gold-student", action="store_true", help="also train the student on gold labels only")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads for timing (default: torch's, one per core; 1 with --quick). On a "
                        "machine shared with other jobs use 1: threads that wait for descheduled peers time the load")
    parser.add_argument("--batch-sizes", default="1,32", help="batch sizes to time (default: 1,32)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default: 5)")
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
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.threads = args.threads or 1
    return args


# Configs and steps --------------------------------------------------------------------------------
def compose(config_name: str, overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=overrides)


def task_overrides(args: argparse.Namespace, task: str) -> list[str]:
    spec = TASKS[task]
    base = [*spec["quick"], *QUICK_TRAINER] if args.quick else list(spec["overrides"])
    return [*base, *getattr(args, f"{task}_override")]


def require_data_files(tasks: dict, names: list[str], quick: bool) -> None:
    """Exit with the missing files of the ``names`` of ``tasks`` (each with its data ``files``) under
    ``$SESAME_DATA_DIR``; ``quick`` runs use the shipped slices only."""
    if quick:
        return
    from sesame.tasks.core.paths import data_dir_path

    missing = [data_dir_path(f) for t in names for f in tasks[t]["files"] if not Path(data_dir_path(f)).is_file()]
    if missing:
        sys.exit(f"error: missing data files {missing}; set SESAME_DATA_DIR (default ../shared/data) or use --quick")


def check_data(args: argparse.Namespace) -> None:
    require_data_files(TASKS, args.tasks, args.quick)


def done(folder: Path, marker: str, fresh: bool) -> bool:
    """Whether ``folder`` holds a finished step (its ``marker`` file); with ``fresh`` it is removed instead."""
    if fresh and folder.exists():
        shutil.rmtree(folder)
    return (folder / marker).is_file()


def train_run(overrides: list[str], folder: Path, fresh: bool) -> Path:
    from sesame.tasks.runs.runner import train

    if not done(folder, "metrics.json", fresh):
        print(f"[train] {folder}: {' '.join(overrides)}", flush=True)
        train(compose("config", overrides), folder)
    return folder


def build_models(args: argparse.Namespace, task: str) -> dict[str, Path]:
    """Every model's run folder (or checkpoint) for ``task``, making those that are missing."""
    from sesame.tasks.compression.drop_layers import drop_layers
    from sesame.tasks.compression.quantize import quantize_checkpoint

    root = args.out / task
    base = task_overrides(args, task)
    train = [*base, *args.train_override]
    given = getattr(args, f"{task}_run")
    finetuned = given or train_run([*train, f"encoder.name_or_path={args.encoder}"], root / "finetuned", args.fresh)
    models = {"finetuned": Path(finetuned)}
    if not done(root / "int8", "compression.json", args.fresh):
        print(f"[quantize] {finetuned} -> {root / 'int8'}", flush=True)
        quantize_checkpoint(finetuned, root / "int8")
    models["int8"] = root / "int8"
    if not done(root / "student", "compression.json", args.fresh):
        print(f"[drop-layers] {finetuned} -> {root / 'student'} (--keep {args.keep})", flush=True)
        drop_layers(finetuned, root / "student", keep=args.keep, num_keep=args.num_layers)
    models["student"] = root / "student"
    student = [*train, f"encoder.name_or_path={(root / 'student' / 'encoder').resolve()}", *args.distill_override]
    distill = [f"distill.teacher={Path(finetuned).resolve()}", f"distill.alpha={args.alpha}",
               f"distill.temperature={args.temperature}", "distill.cache=true",
               f"distill.cache_dir={(args.out / 'teacher_logits').resolve()}"]
    models["distilled"] = train_run([*student, *distill], root / "distilled", args.fresh)
    if args.gold_student:
        models["gold_student"] = train_run(student, root / "gold_student", args.fresh)
    return models


# Measurements -------------------------------------------------------------------------------------
def load(args: argparse.Namespace, task: str, source: Path) -> tuple[Any, Any]:
    """The model as sesame-eval loads it, and the config its data is read with."""
    from sesame.tasks.runs.evaluation import load_for_evaluation

    return load_for_evaluation(compose("eval", [*task_overrides(args, task), f"model={source}"]))


def score(args: argparse.Namespace, task: str, name: str, source: Path) -> dict[str, float]:
    """Validation metrics through sesame-eval's own path (written to <out>/<task>/eval_<name>)."""
    from sesame.tasks.runs.evaluation import evaluate

    folder = args.out / task / f"eval_{name}"
    if done(folder, "metrics.json", args.fresh):
        return json.loads((folder / "metrics.json").read_text())
    print(f"[eval] {name}: {source}", flush=True)
    return evaluate(compose("eval", [*task_overrides(args, task), f"model={source}"]), folder)


def timing_batches(datamodule_cfg: Any, batch_size: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` batches of ``batch_size`` random validation examples, collated as evaluation does."""
    import torch

    from sesame.tasks.runs.runner import build_datamodule

    datamodule = build_datamodule(datamodule_cfg)
    datamodule.setup("validate")
    loader = datamodule.val_dataloader()
    dataset = loader.dataset
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
    needed = batch_size * count
    order = (order * (needed // len(order) + 1))[:needed]  # a small set repeats
    return [loader.collate_fn([dataset[i] for i in order[j : j + batch_size]]) for j in range(0, needed, batch_size)]


def time_models(modules: dict[str, Any], batches: list[dict], rounds: int) -> dict[str, list[float]]:
    """Seconds per batch for every model, over ``rounds`` interleaved rounds (after one warm-up pass)."""
    import torch

    names = list(modules)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    with torch.inference_mode():
        for name in names:
            for batch in batches[:2]:
                modules[name](batch)
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotate who goes first
                for batch in batches:
                    start = time.perf_counter()
                    modules[name](batch)
                    seconds[name].append(time.perf_counter() - start)
    return seconds


def measure_task(args: argparse.Namespace, task: str, models: dict[str, Path]) -> list[dict[str, Any]]:
    import torch

    from sesame.tasks.saved.checkpoints import state_dict_bytes

    rows: dict[str, dict[str, Any]] = {}
    modules: dict[str, Any] = {}
    data_cfg = None
    for name, source in models.items():
        metrics = score(args, task, name, source)
        module, cfg = load(args, task, source)
        module = module.cpu().eval()
        data_cfg = data_cfg or cfg
        modules[name] = module
        metric = module.main_metric or next(k for k in metrics if k.startswith("val_"))
        rows[name] = {
            "model": name, "source": str(source), "layers": module.encoder.num_hidden_states - 1,
            "size_mb": state_dict_bytes(module) / 1e6, "metric": metric, "score": metrics.get(metric), "metrics": metrics,
        }
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads or threads)  # for the timing only; training keeps torch's default
    try:
        for batch_size in args.batch_sizes:
            count = args.batches or (20 if batch_size == 1 else 4)
            if args.quick:
                count = min(count, 3)
            batches = timing_batches(data_cfg, batch_size, count)
            print(f"[time] {task}: batch {batch_size}, {len(batches)} batches x {args.rounds} rounds, "
                  f"{torch.get_num_threads()} threads", flush=True)
            for name, secs in time_models(modules, batches, args.rounds).items():
                rows[name][f"latency_ms_b{batch_size}"] = 1000 * statistics.median(secs)
                rows[name][f"throughput_b{batch_size}"] = batch_size / statistics.median(secs)
    finally:
        torch.set_num_threads(threads)
    base = rows["finetuned"]
    for row in rows.values():
        row["size_ratio"] = row["size_mb"] / base["size_mb"]
        for batch_size in args.batch_sizes:
            row[f"speedup_b{batch_size}"] = base[f"latency_ms_b{batch_size}"] / row[f"latency_ms_b{batch_size}"]
        row["score_delta"] = None if row["score"] is None or base["score"] is None else row["score"] - base["score"]
    return [rows[n] for n in MODELS if n in rows]


# Report -------------------------------------------------------------------------------------------
def markdown_table(task: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> str:
    metric = rows[0]["metric"]
    head = ["model", "layers", "size MB", "size ×"]
    for b in batch_sizes:
        head += [f"b{b} ms", f"b{b} ex/s", f"b{b} speed ×"]
    head += [metric, "Δ"]
    lines = [f"### {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], str(r["layers"]), f"{r['size_mb']:.3g}", f"{r['size_ratio']:.2f}"]
        for b in batch_sizes:
            cells += [f"{r[f'latency_ms_b{b}']:.1f}", f"{r[f'throughput_b{b}']:.1f}", f"{r[f'speedup_b{b}']:.2f}"]
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        delta = "" if r["score_delta"] is None or r["model"] == "finetuned" else f"{r['score_delta']:+.4f}"
        cells += [score, delta]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_data(args)
    import torch

    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"settings": {
        "encoder": args.encoder, "keep": args.keep, "alpha": args.alpha, "temperature": args.temperature,
        "quick": args.quick, "threads": args.threads or torch.get_num_threads(), "rounds": args.rounds,
        "train_overrides": args.train_override, "distill_overrides": args.distill_override,
        "task_overrides": {t: getattr(args, f"{t}_override") for t in args.tasks},
        "torch": torch.__version__, "quantized_engine": torch.backends.quantized.engine,
    }, "tasks": {}}
    tables = []
    for task in args.tasks:
        rows = measure_task(args, task, build_models(args, task))
        results["tasks"][task] = rows
        tables.append(markdown_table(task, rows, args.batch_sizes))
        print("\n" + tables[-1] + "\n", flush=True)
        for r in rows[1:]:
            speed = ", ".join(f"batch {b}: {r[f'speedup_b{b}']:.2f}x" for b in args.batch_sizes)
            print(f"{task} {r['model']}: size {r['size_ratio']:.2f}x of fine-tuned, speed {speed}", flush=True)
    note = (f"CPU timing: {results['settings']['threads']} threads, median seconds per batch over "
            f"{args.rounds} interleaved rounds; speed × = fine-tuned latency / model latency; size = saved state dict.")
    (args.out / "compression.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "compression.md").write_text("## Compression\n\n" + note + "\n\n" + "\n\n".join(tables) + "\n")
    print(f"{note}\nwrote {args.out / 'compression.md'} and {args.out / 'compression.json'}")


if __name__ == "__main__":
    main()
