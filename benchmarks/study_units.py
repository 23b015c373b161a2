"""The full-data study's units and their plan (benchmarks/full_data_study.py): the tasks and arms, the recipe
sweep, the quick check's stand-ins, where results go, and the (task, arm, seed) units in run order with each one's
overrides, folder and state."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from train_speed import FAST_SETTINGS, GROUPED_BF16_SETTINGS

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path(os.environ.get("SESAME_STUDY_DIR", REPO / "outputs" / "full_data_study"))
DEFAULT_REPORT = REPO / "docs" / "results" / "full_data_study.md"
#: Every finished run's record (``--report`` writes them); the README table is rendered from these.
RUN_RECORDS = DEFAULT_REPORT.parent / DEFAULT_REPORT.stem / "runs"


#: task -> its preset, Trainer head, data files (under $SESAME_DATA_DIR), seeds, mid-epoch checkpoint
#: cadence (optimiser steps, about 10 min of single-thread work; None: only after each epoch's
#: validation), and the quick check's stand-in (shipped slices).
TASKS: dict[str, dict[str, Any]] = {
    "rte": {"preset": "full_rte", "hf": "sequence", "seeds": 3, "ckpt_steps": None,
            "files": ["rte/train.tsv", "rte/dev.tsv"], "label": "RTE"},
    "mrpc": {"preset": "full_mrpc", "hf": "sequence", "seeds": 3, "ckpt_steps": None,
             "files": ["mrpc/train.tsv", "mrpc/dev.tsv"], "label": "MRPC"},
    "stsb": {"preset": "full_stsb", "hf": "sequence", "seeds": 3, "ckpt_steps": None,
             "files": ["stsb/train.tsv", "stsb/dev.tsv"], "label": "STS-B"},
    "cola": {"preset": "full_cola", "hf": "sequence", "seeds": 3, "ckpt_steps": None,
             "files": ["cola/in_domain_train.tsv", "cola/in_domain_dev.tsv"], "label": "CoLA"},
    "wnut17": {"preset": "full_wnut17", "hf": "token", "seeds": 3, "ckpt_steps": None,
               "files": ["wnut17/wnut17train.conll", "wnut17/emerging.dev.conll", "wnut17/emerging.test.annotated"],
               "label": "WNUT-17"},
    "conll2003": {"preset": "full_conll2003", "hf": "token", "seeds": 3, "ckpt_steps": 1200,
                  "files": ["conll2003/eng.train", "conll2003/eng.testa", "conll2003/eng.testb"], "label": "CoNLL-2003"},
    "sst2": {"preset": "full_sst2", "hf": "sequence", "seeds": 1, "ckpt_steps": 800,
             "files": ["sst2/train.tsv", "sst2/dev.tsv"], "label": "SST-2"},
    "squad_v1": {"preset": "full_squad_v1", "hf": "qa", "seeds": 1, "ckpt_steps": 150,
                 "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"], "label": "SQuAD v1.1"},
}
ORDER = list(TASKS)  # small first
ARMS: dict[str, dict[str, Any]] = {
    "sesame": {"side": "sesame", "overrides": [], "label": "sesame (preset defaults)"},
    "hf": {"side": "hf", "overrides": [], "label": "transformers Trainer"},
    # The Trainer with its own switches that match sesame_fast's, validated at sesame_fast's points: the baseline
    # every speed claim is measured against.
    "hf_fast": {"side": "hf", "overrides": [], "grouped": True, "bf16": True, "val_per_epoch": 2,
                "label": "the Trainer at its best: its own length grouping and bf16, validated every half epoch"},
    # What sesame ships for speed, on top of the same recipe: length-grouped batches (less padding)
    # padded to a multiple of 32 tokens (a few batch shapes: no retained-memory creep, see
    # docs/results/peak_rss_allocator.md), bf16 autocast (fast on CPUs with avx512_bf16 / AMX, as this
    # one), a validation every half epoch (time to accuracy resolved to half an epoch). Not mirrored by
    # the Trainer arm, by design.
    "sesame_fast": {"side": "sesame", "mirrored": False,
                    "overrides": [*FAST_SETTINGS, "trainer.val_check_interval=0.5"],
                    "label": "the `sesame` arm plus what sesame ships for speed (the Trainer has equivalents, "
                             "`group_by_length` and `bf16`, which its reference recipe leaves off)"},
    # sesame's speed preset (+experiment=cpu_speed: grouped, precision auto, sparse embeddings, fast dropout) on top
    # of the task's, validated at hf_fast's points
    "sesame_cpu_speed": {"side": "sesame", "mirrored": False, "presets": ["cpu_speed"],
                         "overrides": ["trainer.val_check_interval=0.5"],
                         "label": "sesame's speed preset `+experiment=cpu_speed` on the task's recipe, validated every half epoch"},
    # the GLUE preset (+experiment=glue_fast: cpu_speed plus the held-out sweep's recipe, mean pooling at 1e-4) on top of
    # the task's, validated at hf_fast's points; GLUE only (a recipe for sentence vectors)
    "sesame_glue_fast": {"side": "sesame", "mirrored": False, "presets": ["glue_fast"],
                         "overrides": ["trainer.val_check_interval=0.5"],
                         "label": "sesame's GLUE preset `+experiment=glue_fast` (the speed preset plus the held-out "
                                  "sweep's recipe: mean pooling, lr 1e-4) on the task's recipe, validated every half epoch"},
    # sesame_fast less the pad multiple (the sweep's SWEEP_SPEED): on short sentences padding grouped batches to 32
    # tokens costs more than bf16 saves (docs/results/fast_arm_ablation.md: CoLA 1.05x the Trainer's step with it,
    # grouping alone 0.57x)
    "sesame_grouped": {"side": "sesame", "mirrored": False,
                       "overrides": [*GROUPED_BF16_SETTINGS, "trainer.val_check_interval=0.5"],
                       "label": "`sesame_fast` without the pad multiple: length-grouped batches padded to their longest, bf16 "
                                "(for short sentences; on long pairs its many batch shapes cost memory, see the causes traced)"},
    # Tracing (not in the default --arms): the Trainer arm with its task layer initialised as sesame's heads
    # are (torch's default Linear init) instead of transformers' normal(0, 0.02) with zero bias
    "hf_torch_init": {"side": "hf", "overrides": [], "head_init": "torch",
                      "label": "transformers Trainer, task layer with torch's default init (sesame's)"},
    # its overrides: sesame_fast's plus the task's sweep winner (item 4; --sweep first)
    "sesame_best": {"side": "sesame", "mirrored": False, "overrides": None,
                    "label": "sesame's best recipe: the task's sweep winner (chosen on held-out training data) with sesame_fast's settings"},
}
#: Item 4, a better recipe: the candidates of one sweep per GLUE task, each trained once (seed 1) on 90% of
#: the training file and scored on the other 10% (data.holdout_fraction; the dev set is never read), on top
#: of SWEEP_SPEED (sesame_fast's settings of then) and the task's preset otherwise. The winner (best final held-out main
#: metric; ties go to the earlier candidate) becomes the `sesame_best` arm: trained on the whole training
#: file with every seed of the task, scored on dev like every other arm.
SWEEP_TASKS = ["rte", "mrpc", "stsb", "cola", "sst2"]
#: arms of a sentence-vector recipe, planned for the GLUE tasks alone
GLUE_ONLY_ARMS = ("sesame_best", "sesame_glue_fast")
SWEEP_COMMON = ["data.holdout_fraction=0.1", "data.holdout_seed=1"]
#: The sweep's speed settings (fixed when it started: sesame_fast's then, before data.pad_to_multiple_of).
SWEEP_SPEED = ["data.group_by_length=true", "trainer.precision=bf16-mixed", "trainer.val_check_interval=0.5"]
#: SST-2's candidates see its first 20,000 training sentences (18,000 to train, 2,000 held out): the whole
#: file x 8 candidates would cost more than the rest of the study; its `sesame_best` trains on all 67,349.
SWEEP_TASK_OVERRIDES = {"sst2": ["data.max_train_examples=20000"]}
LR = "finetune.encoder_lr={0} finetune.head_lr={0}"
SWEEP_GRID: dict[str, list[str]] = {
    "pooler_2e-5": [],  # the presets' own pooling and learning rate
    "cls_2e-5": ["pooling=cls"],
    "mean_2e-5": ["pooling=mean"],
    "pooler_5e-5": LR.format("5e-5").split(),
    "mean_5e-5": ["pooling=mean", *LR.format("5e-5").split()],
    "mean_1e-4": ["pooling=mean", *LR.format("1e-4").split()],
    "mean_scalar_mix_5e-5": ["pooling=mean", "fusion=scalar_mix", *LR.format("5e-5").split()],
    # conf/finetune/lora.yaml's own rates (the presets' 2e-5 would starve the adapters)
    "mean_lora": ["pooling=mean", "finetune=lora", "finetune.encoder_lr=5e-4", "finetune.head_lr=1e-3"],
}
SWEEP_ARM_PREFIX = "sweep-"

#: --quick: the shipped slices stand in for the tasks, a few steps over two epochs; the first attempt of
#: each unit is killed after QUICK_KILL_AT steps (a checkpoint every 2 steps), so resuming is exercised.
QUICK = {
    "sst2": ["data=sst2_slice", "data.max_train_examples=12", "data.batch_size=4", "data.max_eval_examples=40"],
    "wnut17": ["data=wnut17_slice", "data.max_train_examples=12", "data.batch_size=4", "data.max_eval_examples=40"],
    "squad_v1": ["data=squad_v1_slice", "data.max_train_examples=16", "data.batch_size=4", "data.max_eval_examples=20",
                 "data.max_seq_length=256"],
}
QUICK_COMMON = ["trainer.max_epochs=2"]
QUICK_KILL_AT = 4


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Units in run order: task by task (small first), seed by seed, the arms alternating who goes first;
    with --sweep, every candidate of every GLUE task once (seed 1)."""
    if args.sweep:
        return [{"task": task, "arm": SWEEP_ARM_PREFIX + candidate, "seed": 1}
                for task in args.tasks for candidate in sweep_grid(args)]
    units = []
    for task in args.tasks:
        seeds = args.seeds or TASKS[task]["seeds"]
        for seed in range(1, seeds + 1):
            arms = [a for a in args.arms if a not in GLUE_ONLY_ARMS or task in SWEEP_TASKS]
            arms = arms if seed % 2 == 1 else list(reversed(arms))
            units += [{"task": task, "arm": arm, "seed": seed} for arm in arms]
    return units


def sweep_grid(args: argparse.Namespace) -> list[str]:
    """The candidates (--quick: the first two, to check the pipeline)."""
    return list(SWEEP_GRID)[:2] if args.quick else list(SWEEP_GRID)


def sweep_results(args: argparse.Namespace) -> dict[str, dict[str, dict[str, Any]]]:
    """task -> candidate -> the finished sweep unit's result."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted((args.base_out / "sweep").glob(f"units/*/{SWEEP_ARM_PREFIX}*/seed1/result.json")):
        result = json.loads(path.read_text())
        out.setdefault(result["task"], {})[result["arm"].removeprefix(SWEEP_ARM_PREFIX)] = result
    return out


def held_out_score(result: dict[str, Any]) -> float | None:
    return result["final"].get(result["main_metric"])


def chosen_recipes(args: argparse.Namespace, found: dict[str, dict[str, dict[str, Any]]] | None = None) -> dict[str, str]:
    """task -> the winning candidate, for the tasks whose every candidate finished (never a partial sweep);
    ``found``: :func:`sweep_results`, when the caller has read them already."""
    chosen, grid = {}, sweep_grid(args)
    for task, by_candidate in (sweep_results(args) if found is None else found).items():
        if all(c in by_candidate and held_out_score(by_candidate[c]) is not None for c in grid):
            chosen[task] = max(grid, key=lambda c: (held_out_score(by_candidate[c]), -grid.index(c)))
    return chosen


def arm_spec(args: argparse.Namespace, arm: str, task: str) -> dict[str, Any] | None:
    """An arm's side, Hydra overrides (added to the task's) and whether the Trainer arm mirrors it; None
    for sesame_best before the task's sweep has a winner."""
    fast = ARMS["sesame_fast"]["overrides"]
    if arm.startswith(SWEEP_ARM_PREFIX):
        extra = ["data.max_train_examples=40"] if args.quick else SWEEP_TASK_OVERRIDES.get(task, [])
        overrides = [*SWEEP_SPEED, *SWEEP_COMMON, *extra, *SWEEP_GRID[arm.removeprefix(SWEEP_ARM_PREFIX)]]
        return {"side": "sesame", "mirrored": False, "arm_overrides": overrides}
    if arm == "sesame_best":
        choice = chosen_recipes(args).get(task)
        if choice is None:
            return None
        return {"side": "sesame", "mirrored": False, "arm_overrides": [*fast, *SWEEP_GRID[choice]], "recipe": choice}
    return {"side": ARMS[arm]["side"], "mirrored": ARMS[arm].get("mirrored", True),
            "arm_overrides": list(ARMS[arm]["overrides"]), "head_init": ARMS[arm].get("head_init"),
            **{key: ARMS[arm][key] for key in ("grouped", "bf16", "val_per_epoch", "presets") if key in ARMS[arm]}}


def unit_dir(out: Path, unit: dict[str, Any]) -> Path:
    return out / "units" / unit["task"] / unit["arm"] / f"seed{unit['seed']}"


def unit_overrides(args: argparse.Namespace, task: str, seed: int, presets: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The Hydra overrides both arms compose the task's config with; ``presets``: an arm's own
    ``conf/experiment`` presets, composed after the task's."""
    experiments = [TASKS[task]["preset"], *presets]
    out = [f"+experiment={experiments[0] if len(experiments) == 1 else '[' + ','.join(experiments) + ']'}",
           f"seed={seed}", "trainer.enable_progress_bar=false",
           "trainer.enable_model_summary=false"]
    if args.quick:
        out += [*QUICK[task], *QUICK_COMMON]
    return [*out, *args.override, *args.per_task.get(task, [])]


def unit_state(folder: Path) -> str:
    if (folder / "result.json").is_file():
        return "done"
    if (folder / "progress.json").is_file():
        progress = json.loads((folder / "progress.json").read_text())
        return f"in progress ({len(progress.get('history', []))} validations)"
    if (folder / "failed.json").is_file():
        return "failed: " + json.loads((folder / "failed.json").read_text()).get("error", "?")[-200:]
    return "not started"
