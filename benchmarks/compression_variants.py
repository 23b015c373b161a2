"""The tasks and variants of benchmarks/compression.py, and how each variant is made: the fine-tuned run, int8,
the layer-dropped student and its distillation, pruning with and without recovery, the ONNX exports. A step
whose output is there already is reused (``--fresh`` redoes it)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from int8_onnx_folder import export_int8_onnx
from sesame.tasks.base.run_settings import RunSettings


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
        train(RunSettings.from_config(compose("config", [*overrides, *resume])), folder)
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
