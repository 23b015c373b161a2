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
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from int8_onnx_folder import export_int8_onnx, export_weights  # noqa: E402

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
#: Every variant, in table order, and what it is.
VARIANTS: dict[str, str] = {
    "finetuned": "the encoder fine-tuned with the task head (fp32, torch): the baseline and every teacher",
    "int8": "sesame-compress quantize: torch dynamic int8 linear layers",
    "int8_onnx": "sesame-export --format onnx --int8 of the fine-tuned run, run by onnxruntime",
    "student": "sesame-compress drop-layers (--keep): the fine-tuned head copied, not trained further",
    "distilled": "that student trained with distill.teacher=<finetuned>",
    "gold_student": "that student trained on the gold labels only (control)",
    "heads": "sesame-compress prune --heads H: attention heads alone, no further training",
    "ffn": "sesame-compress prune --ffn F: feed-forward neurons alone, no further training",
    "pruned": "sesame-compress prune --heads H --ffn F, no further training",
    "pruned_recovered": "the same pruning, then recovery training distilled from <finetuned> (--prune-rounds rounds)",
    "pruned_int8_onnx": "pruned_recovered -> ONNX -> onnxruntime int8 (the pipeline without the layer drop)",
    "pipeline": "distilled student -> pruned + recovered (teacher <finetuned>) -> ONNX -> onnxruntime int8",
}
MODELS = tuple(VARIANTS)
#: Measured unless --variants says otherwise (gold_student: with --gold-student).
DEFAULT_VARIANTS = tuple(n for n in MODELS if n != "gold_student")


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
        # A training killed here resumes from its last checkpoint (mid-epoch ones need
        # checkpoint.every_n_train_steps; one killed before its first checkpoint starts over).
        resume = ["resume=true"] if (folder / "config.yaml").is_file() else []
        print(f"[train] {folder}: {' '.join(overrides)}{' (resumed)' if resume else ''}", flush=True)
        train(compose("config", [*overrides, *resume]), folder)
    return folder


@dataclass(frozen=True)
class Model:
    """A variant to measure: the sesame run folder (or .ckpt) it is, and for an onnxruntime variant the
    ``sesame-export --format onnx --int8`` folder of that run, whose ``model.int8.onnx`` is what runs."""

    run: Path
    onnx: Path | None = None


def recovery_overrides(args: argparse.Namespace, task: str, teacher: Path) -> list[str]:
    """The ``--recover`` overrides of a recovery training: the settings the students get (the task's, --<task>-override,
    --train-override, --distill-override: those that set a key; group choices such as ``trainer=debug`` cannot
    apply to a trained run's config and are left out), the distillation from ``teacher``, then --recover-override."""
    given = [*task_overrides(args, task), *args.train_override, *args.distill_override]
    plain = [o for o in given if "=" in o and "." in o.split("=", 1)[0] and not o.startswith(("+", "~"))]
    distill = [f"distill.teacher={Path(teacher).resolve()}", f"distill.alpha={args.alpha}",
               f"distill.temperature={args.temperature}", "distill.cache=true",
               f"distill.cache_dir={(args.out / 'teacher_logits').resolve()}"]
    return [*plain, *distill, *args.recover_override]


def prune_once(args: argparse.Namespace, source: Path, folder: Path, heads: float, ffn: float) -> Path:
    """``sesame-compress prune`` of ``source`` into ``folder`` (kept when it was pruned with these fractions)."""
    from sesame.tasks.compression.prune import prune

    if done(folder, "compression.json", args.fresh):
        report = json.loads((folder / "compression.json").read_text())
        if (report["heads_fraction"], report["ffn_fraction"]) != (heads, ffn):
            sys.exit(f"error: {folder} was pruned with --heads {report['heads_fraction']} --ffn {report['ffn_fraction']}, "
                     f"not {heads} / {ffn}. Fix: --fresh, or another --out")
        return folder
    print(f"[prune] {source} -> {folder} (--heads {heads} --ffn {ffn})", flush=True)
    prune(source, folder, heads=heads, ffn=ffn, batches=args.prune_batches)
    return folder


def prune_and_recover(args: argparse.Namespace, task: str, source: Path, folder: Path, teacher: Path) -> Path:
    """``sesame-compress prune --rounds <--prune-rounds> --recover ...`` of ``source`` into ``folder``, the
    recovery distilled from ``teacher``: the last round's recovered run (a stopped schedule continues)."""
    from sesame.tasks.runs.prune_schedule import prune_schedule

    if args.fresh and folder.exists():
        shutil.rmtree(folder)
    recover = recovery_overrides(args, task, teacher)
    if not (folder / "compression.json").is_file():
        print(f"[prune+recover] {source} -> {folder} (--heads {args.heads} --ffn {args.ffn}, {args.prune_rounds} "
              f"round(s), --recover {' '.join(recover)})", flush=True)
    prune_schedule(source, folder, heads=args.heads, ffn=args.ffn, batches=args.prune_batches,
                   rounds=args.prune_rounds, recover=recover)
    return folder


def build_models(args: argparse.Namespace, task: str) -> dict[str, Model]:
    """Every variant of ``task`` (those of ``--variants``), making what is missing."""
    from sesame.tasks.compression.drop_layers import drop_layers
    from sesame.tasks.compression.quantize import quantize_checkpoint

    root = args.out / task
    base = task_overrides(args, task)
    train = [*base, *args.train_override]
    wanted = set(args.variants)
    given = getattr(args, f"{task}_run")
    finetuned = Path(given or train_run([*train, f"encoder.name_or_path={args.encoder}"], root / "finetuned", args.fresh))
    models = {"finetuned": Model(finetuned)}
    if "int8" in wanted:
        if not done(root / "int8", "compression.json", args.fresh):
            print(f"[quantize] {finetuned} -> {root / 'int8'}", flush=True)
            quantize_checkpoint(finetuned, root / "int8")
        models["int8"] = Model(root / "int8")
    if "int8_onnx" in wanted:
        models["int8_onnx"] = Model(finetuned, export_int8_onnx(finetuned, root / "onnx", args.fresh, args.int8_weights))
    if wanted & {"student", "distilled", "gold_student", "pipeline"}:
        if not done(root / "student", "compression.json", args.fresh):
            print(f"[drop-layers] {finetuned} -> {root / 'student'} (--keep {args.keep})", flush=True)
            drop_layers(finetuned, root / "student", keep=args.keep, num_keep=args.num_layers)
        if "student" in wanted:
            models["student"] = Model(root / "student")
    student = [*train, f"encoder.name_or_path={(root / 'student' / 'encoder').resolve()}", *args.distill_override]
    distill = [f"distill.teacher={finetuned.resolve()}", f"distill.alpha={args.alpha}",
               f"distill.temperature={args.temperature}", "distill.cache=true",
               f"distill.cache_dir={(args.out / 'teacher_logits').resolve()}"]
    if wanted & {"distilled", "pipeline"}:
        distilled = train_run([*student, *distill], root / "distilled", args.fresh)
        if "distilled" in wanted:
            models["distilled"] = Model(distilled)
    if "gold_student" in wanted:
        models["gold_student"] = Model(train_run(student, root / "gold_student", args.fresh))
    if "heads" in wanted:
        models["heads"] = Model(prune_once(args, finetuned, root / "heads", args.heads, 0.0))
    if "ffn" in wanted:
        models["ffn"] = Model(prune_once(args, finetuned, root / "ffn", 0.0, args.ffn))
    if "pruned" in wanted:
        models["pruned"] = Model(prune_once(args, finetuned, root / "pruned", args.heads, args.ffn))
    if wanted & {"pruned_recovered", "pruned_int8_onnx"}:
        recovered = prune_and_recover(args, task, finetuned, root / "pruned_recovered", finetuned)
        if "pruned_recovered" in wanted:
            models["pruned_recovered"] = Model(recovered)
        if "pruned_int8_onnx" in wanted:
            models["pruned_int8_onnx"] = Model(recovered, export_int8_onnx(recovered, root / "pruned_onnx", args.fresh, args.int8_weights))
    if "pipeline" in wanted:
        # The distilled student, pruned and recovered (distilled from the fine-tuned model), as onnxruntime int8.
        pipeline = prune_and_recover(args, task, root / "distilled", root / "pipeline_pruned", finetuned)
        models["pipeline"] = Model(pipeline, export_int8_onnx(pipeline, root / "pipeline_onnx", args.fresh, args.int8_weights))
    return models


# Measurements -------------------------------------------------------------------------------------
def load(args: argparse.Namespace, task: str, source: Path) -> tuple[Any, Any]:
    """The model as sesame-eval loads it, and the config its data is read with."""
    from sesame.tasks.runs.evaluation import load_for_evaluation

    return load_for_evaluation(compose("eval", [*task_overrides(args, task), f"model={source}"]))


#: Evaluation batch of the onnxruntime variants' scoring (not of their timing).
ONNX_EVAL_BATCH = 16


def score(args: argparse.Namespace, task: str, name: str, model: Model, runner: Any = None) -> dict[str, float]:
    """Validation metrics through sesame-eval's own path (written to <out>/<task>/eval_<name>); an onnxruntime
    variant's outputs are its graph's (``runner``, an ``OnnxRunner``), put in place of the module's forward,
    so its predictions are decoded and scored by the same code as every other variant's."""
    from omegaconf import OmegaConf

    from sesame.tasks.runs import evaluation
    from sesame.tasks.saved.int8 import QUANTIZED_TRAINER

    folder = args.out / task / f"eval_{name}"
    graph = model.onnx / "model.int8.onnx" if model.onnx else None
    # an int8 graph exported again (another --int8-weights) after it was scored is scored again
    if done(folder, "metrics.json", args.fresh) and not (graph and graph.stat().st_mtime > (folder / "metrics.json").stat().st_mtime):
        return json.loads((folder / "metrics.json").read_text())
    print(f"[eval] {name}: {graph or model.run}", flush=True)
    cfg = compose("eval", [*task_overrides(args, task), f"model={model.run}"])
    if model.onnx is None:
        return evaluation.evaluate(cfg, folder)
    real = evaluation.load_for_evaluation

    def onnx_outputs(eval_cfg: Any, overrides: Any = ()) -> tuple[Any, Any]:
        module, data_cfg = real(eval_cfg, overrides)
        module.forward = runner  # the module's evaluation path, its outputs from onnxruntime (on CPU)
        # onnxruntime's CPU arena keeps its largest allocation: at the task's evaluation batch (SQuAD: 128 windows
        # of 384 tokens) one pruned graph's scoring grew to 10 GB and was killed; small batches keep it near 1 GB
        return module, OmegaConf.merge(data_cfg, {"trainer": QUANTIZED_TRAINER, "data": {"eval_batch_size": ONNX_EVAL_BATCH}})

    evaluation.load_for_evaluation = onnx_outputs
    try:
        return evaluation.evaluate(cfg, folder)
    finally:
        evaluation.load_for_evaluation = real


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


def op_shares(durations: dict[str, float], top: int = 8) -> list[dict[str, Any]]:
    """The ``top`` operator kinds by time, as shares of the total, and the rest as ``other``."""
    total = sum(durations.values()) or 1.0
    ranked = sorted(durations.items(), key=lambda kv: -kv[1])
    shares = [{"op": op, "share": d / total} for op, d in ranked[:top]]
    rest = sum(d for _, d in ranked[top:])
    return shares + ([{"op": "other", "share": rest / total}] if rest else [])


def profile_torch(module: Any, batches: list[dict]) -> list[dict[str, Any]]:
    """Where a torch model's time goes on ``batches``: torch.profiler's self CPU time per aten operator."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches:
            module(batch)
    return op_shares({e.key: e.self_cpu_time_total for e in prof.key_averages() if e.self_cpu_time_total > 0})


def profile_onnx(folder: Path, batches: list[dict], threads: int) -> list[dict[str, Any]]:
    """Where an int8 graph's time goes on ``batches``: onnxruntime's own profile, node time per operator kind."""
    import tempfile

    from sesame.tasks.inference.onnx_session import INT8_FILE, new_session, session_feed

    with tempfile.TemporaryDirectory() as scratch:
        session = new_session(folder / INT8_FILE, threads=threads, profile_prefix=Path(scratch) / "profile")
        for batch in batches:
            session.run(None, session_feed(session, batch))
        events = json.loads(Path(session.end_profiling()).read_text())
    durations: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            op = event["args"]["op_name"]
            durations[op] = durations.get(op, 0.0) + event["dur"]
    return op_shares(durations)


def onnx_bytes(folder: Path) -> int:
    """Bytes of the int8 graph (with its external data, if any)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("model.int8.onnx"))


def measure_task(args: argparse.Namespace, task: str, models: dict[str, Model]) -> list[dict[str, Any]]:
    import torch

    from sesame.tasks.inference.onnx_runner import OnnxRunner
    from sesame.tasks.saved.checkpoints import state_dict_bytes

    threads = torch.get_num_threads()
    timing_threads = args.threads or threads
    rows: dict[str, dict[str, Any]] = {}
    callables: dict[str, Any] = {}
    data_cfg = None
    for name, model in models.items():
        module, cfg = load(args, task, model.run)
        module = module.cpu().eval()
        data_cfg = data_cfg or cfg
        layers = module.encoder.num_hidden_states - 1
        if model.onnx is None:
            size, runtime, callables[name] = state_dict_bytes(module), "torch", module
        else:
            runner = OnnxRunner.from_folder(model.onnx, int8=True, threads=timing_threads)
            size, runtime, callables[name] = onnx_bytes(model.onnx), "onnxruntime int8", runner
        metrics = score(args, task, name, model, callables[name] if model.onnx else None)
        metric = module.main_metric or next(k for k in metrics if k.startswith("val_"))
        rows[name] = {
            "model": name, "what": VARIANTS[name], "runtime": runtime,
            "source": str(model.onnx / "model.int8.onnx" if model.onnx else model.run), "layers": layers,
            "size_mb": size / 1e6, "metric": metric, "score": metrics.get(metric), "metrics": metrics,
        }
        rows[name].update(pruning_facts(model))
        if model.onnx is not None:
            rows[name]["int8_weights"] = export_weights(model.onnx)
            del module
    torch.set_num_threads(timing_threads)  # for the timing only; training keeps torch's default
    try:
        for batch_size in args.batch_sizes:
            count = args.batches or (20 if batch_size == 1 else 4)
            if args.quick:
                count = min(count, 3)
            batches = timing_batches(data_cfg, batch_size, count)
            print(f"[time] {task}: batch {batch_size}, {len(batches)} batches x {args.rounds} rounds, "
                  f"{torch.get_num_threads()} threads", flush=True)
            for name, secs in time_models(callables, batches, args.rounds).items():
                rows[name][f"latency_ms_b{batch_size}"] = 1000 * statistics.median(secs)
                rows[name][f"throughput_b{batch_size}"] = batch_size / statistics.median(secs)
            if batch_size == args.batch_sizes[0]:  # where the time goes, at the batch size of the Pareto front
                for name, model in models.items():
                    rows[name][f"profile_b{batch_size}"] = (
                        profile_onnx(model.onnx, batches, torch.get_num_threads()) if model.onnx
                        else profile_torch(callables[name], batches))
    finally:
        torch.set_num_threads(threads)
    base = rows["finetuned"]
    for row in rows.values():
        row["size_ratio"] = row["size_mb"] / base["size_mb"]
        for batch_size in args.batch_sizes:
            row[f"speedup_b{batch_size}"] = base[f"latency_ms_b{batch_size}"] / row[f"latency_ms_b{batch_size}"]
        row["score_delta"] = None if row["score"] is None or base["score"] is None else row["score"] - base["score"]
    ordered = [rows[n] for n in MODELS if n in rows]
    front = pareto_front(ordered, f"speedup_b{args.batch_sizes[0]}")
    for row in ordered:
        row["pareto"] = row["model"] in front
    return ordered


def pruning_facts(model: Model) -> dict[str, Any]:
    """A pruned variant's heads and neurons kept (of the model it pruned) and, after recovery, its rounds."""
    path = model.run / "compression.json"
    report = json.loads(path.read_text()) if path.is_file() else {}
    if report.get("method") != "structured_pruning":
        return {}
    facts = {"heads_kept": f"{report['heads']['after']}/{report['heads']['before']}",
             "neurons_kept": f"{report['neurons']['after']}/{report['neurons']['before']}"}
    if isinstance(report.get("rounds"), list):
        facts["prune_rounds"] = [{"round": r["round"], "heads_fraction": r["heads_fraction"],
                                  "ffn_fraction": r["ffn_fraction"], "heads_after": r["heads"]["after"],
                                  "neurons_after": r["neurons"]["after"], "recovered_score": r.get("recovered_score")}
                                 for r in report["rounds"]]
        facts["teacher"] = report.get("teacher")
    return facts


def pareto_front(rows: list[dict[str, Any]], speed: str) -> set[str]:
    """The variants no other variant beats: none is at least as fast (``speed``) and as good (``score``),
    and better in one of them."""
    scored = [r for r in rows if r["score"] is not None]
    return {r["model"] for r in scored
            if not any(o[speed] >= r[speed] and o["score"] >= r["score"] and (o[speed] > r[speed] or o["score"] > r["score"])
                       for o in scored)}


# Report -------------------------------------------------------------------------------------------
def markdown_table(task: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> str:
    metric = rows[0]["metric"]
    head = ["model", "runtime", "layers", "size MB", "size ×"]
    for b in batch_sizes:
        head += [f"b{b} ms", f"b{b} ex/s", f"b{b} speed ×"]
    head += [metric, "Δ", "Pareto"]
    lines = [f"### {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["runtime"], str(r["layers"]), f"{r['size_mb']:.3g}", f"{r['size_ratio']:.2f}"]
        for b in batch_sizes:
            cells += [f"{r[f'latency_ms_b{b}']:.1f}", f"{r[f'throughput_b{b}']:.1f}", f"{r[f'speedup_b{b}']:.2f}"]
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        delta = "" if r["score_delta"] is None or r["model"] == "finetuned" else f"{r['score_delta']:+.4f}"
        cells += [score, delta, "yes" if r["pareto"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pareto_table(task: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> str:
    """The variants by speed at the first batch size, and which are on the front (speed there against the metric)."""
    b = batch_sizes[0]
    metric = rows[0]["metric"]
    lines = [f"Pareto front of {task} (speed × at batch {b} against dev {metric}): "
             + ", ".join(r["model"] for r in sorted(rows, key=lambda r: r[f"speedup_b{b}"]) if r["pareto"]) + ".", "",
             f"| model | b{b} speed × | {metric} | on the front | beaten by |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (-r[f"speedup_b{b}"], r["model"])):
        beaten = [o["model"] for o in rows if o is not r and o["score"] is not None and r["score"] is not None
                  and o[f"speedup_b{b}"] >= r[f"speedup_b{b}"] and o["score"] >= r["score"]
                  and (o[f"speedup_b{b}"] > r[f"speedup_b{b}"] or o["score"] > r["score"])]
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        lines.append(f"| {r['model']} | {r[f'speedup_b{b}']:.2f} | {score} | {'yes' if r['pareto'] else ''} | "
                     f"{', '.join(beaten)} |")
    return "\n".join(lines)


def profile_table(task: str, rows: list[dict[str, Any]], batch_size: int) -> str:
    """Where each variant's time goes at ``batch_size``: its operator kinds by share of the profiled operator time
    (torch.profiler's self CPU time for torch variants, onnxruntime's node time for int8 graphs)."""
    key = f"profile_b{batch_size}"
    if not any(key in r for r in rows):
        return f"(no profile of {task} at batch {batch_size})"
    lines = [f"Where the time goes in {task} at batch {batch_size} (share of the profiled operator time):", "",
             "| model | operators |", "|---|---|"]
    for r in rows:
        if key in r:
            lines.append(f"| {r['model']} | " + ", ".join(f"{p['op']} {100 * p['share']:.0f}%" for p in r[key]) + " |")
    return "\n".join(lines)


def plot_pareto(task: str, rows: list[dict[str, Any]], batch_size: int, threads: int, quick: bool,
                path: Path, goal: tuple[float, float] | None = None) -> Path | None:
    """Speed-up at ``batch_size`` (x) against the dev metric (y), one labelled point per variant, the front
    joined, and ``goal`` (least speed-up, least metric) shaded where given; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.patches
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    speed = f"speedup_b{batch_size}"
    points = [r for r in rows if r["score"] is not None]
    metric = rows[0]["metric"].removeprefix("val_")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    # Labels staggered above and below in order of speed, so that close points stay readable.
    for i, r in enumerate(sorted(points, key=lambda r: r[speed])):
        on = r["pareto"]
        ax.scatter(r[speed], r["score"], s=60 if on else 40, zorder=3,
                   marker="s" if r["runtime"] != "torch" else "o",
                   color="tab:red" if on else "tab:grey", edgecolor="black" if on else "none")
        ax.annotate(r["model"], (r[speed], r["score"]), textcoords="offset points", fontsize=8,
                    xytext=(5, (8, -14, 20, -26)[i % 4]), arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
    front = sorted((r for r in points if r["pareto"]), key=lambda r: r[speed])
    ax.plot([r[speed] for r in front], [r["score"] for r in front], color="tab:red", linestyle="--", linewidth=1,
            zorder=2, label="Pareto front")
    ax.axvline(1.0, color="black", linewidth=0.5, alpha=0.5)
    if goal is not None:  # the region a variant must reach: at least this fast and this good
        right = max(goal[0], *(r[speed] for r in points)) * 1.5
        top = max(goal[1], *(r["score"] for r in points)) * 1.01
        ax.fill_between([goal[0], right], goal[1], top, color="tab:green", alpha=0.12, zorder=1)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.margins(y=0.2)
    ax.set_xlabel(f"CPU speed-up at batch {batch_size} over the fine-tuned fp32 model "
                  f"(× median latency, {threads} thread{'s' if threads != 1 else ''}; log scale)")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(f"{task}: dev {metric} against CPU speed-up at batch {batch_size}\n(one point per compression variant"
                 + ("; --quick: the numbers mean nothing)" if quick else ")"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(handles=[
        plt.Line2D([], [], marker="o", color="tab:grey", linestyle="", label="torch"),
        plt.Line2D([], [], marker="s", color="tab:grey", linestyle="", label="onnxruntime int8"),
        plt.Line2D([], [], marker="o", color="tab:red", markeredgecolor="black", linestyle="--", label="Pareto front"),
        *([matplotlib.patches.Patch(color="tab:green", alpha=0.12, label=f"goal: ≥ {goal[0]:g}x, ≥ {goal[1]:.4g}")]
          if goal is not None else []),
    ], fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def variants_legend(names: list[str]) -> str:
    return "\n".join(["| variant | what it is |", "|---|---|", *(f"| `{n}` | {VARIANTS[n]} |" for n in MODELS if n in names)])


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
