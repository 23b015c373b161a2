"""Full-data study: sesame against the transformers Trainer on every task's full data.

Each unit is one (task, arm, seed): a full training run of the task's recipe
(``conf/experiment/full_<task>.yaml``, what ``sesame-train +experiment=full_<task>`` runs) with a
dev evaluation after every epoch, in its own child process (one torch thread), so its peak RSS is its
own. Arms:
  sesame       sesame-train's own code (tasks/runs/runner.py ``train``) on the preset: the plain default
  hf           transformers' Trainer with AutoModelFor{SequenceClassification,TokenClassification,
               QuestionAnswering} on the very examples and batches sesame trains on (it reads sesame's
               data module; same tokenisation length, shuffle, seed, epochs, batch size, learning
               rate, warm-up, weight decay, clipping, AdamW implementation; benchmarks/train_speed.py).
               After each epoch the model is saved and scored by sesame's evaluation path
               (tasks/runs/evaluation.py, as `sesame-eval model=<folder>`), the scorer of sesame's arm.
  sesame_fast  (optional, not in the default --arms) sesame with what it ships for speed:
               data.group_by_length=true data.pad_to_multiple_of=32 trainer.precision=bf16-mixed,
               validated every half epoch
  sesame_grouped  (optional) sesame_fast without data.pad_to_multiple_of (grouped batches padded to their
               longest): the cheaper choice on short sentences (docs/results/fast_arm_ablation.md)
  hf_fast      (optional) the Trainer at its best on a CPU, the fair baseline of the speed arms: the hf arm plus its
               own length grouping (train_sampling_strategy="group_by_length") and bf16=True with use_cpu=True,
               validated every half epoch at the points sesame_fast validates; what took effect (sampler class,
               autocast dtype) is read inside the run and kept in its result (``switches``)
  sesame_best  (optional; GLUE) sesame_fast plus the task's winner of the recipe sweep (--sweep: pooling,
               fusion, full/LoRA, learning rate; 8 candidates chosen on a held-out 10% of the training
               file, never on dev), trained on the whole training file
Dev metric after each epoch, cumulative training wall and CPU seconds (process user+sys) at it, final
and best-epoch dev metrics, test metrics (NER, of the best dev epoch on both arms), peak RSS (per
child process: ru_maxrss), versions and the commit go to <out>/units/<task>/<arm>/seed<k>/result.json.
Training time EXCLUDES evaluation and checkpoint writing (both timed and reported separately); it
includes data loading, forward, backward, clipping, optimiser and scheduler steps, and logging.

Resumable: rerun the same command and finished units (result.json) are skipped; an interrupted
sesame unit resumes from its run folder's checkpoints/last.ckpt (`resume=true`; last.ckpt is written
after every validation and every --ckpt-steps steps of the big tasks), an interrupted Trainer unit
from its newest checkpoint-<step>/ (resume_from_checkpoint). The training clock and the per-epoch
history are stored inside each checkpoint, so time is summed over the segments that count (work
lost after the last checkpoint of a killed segment is not counted; every attempt's own wall / CPU is
in attempts.json). SIGTERM to the study stops the running unit at its next step with a checkpoint.
On a machine that never ran them, the committed run records (docs/results/full_data_study/runs) are put
back into <out> as finished units first, so a fresh clone resumes the study where the commit left it
(unfinished units' checkpoints live only in <out>: they resume on the machine that wrote them).
Units run small-first, the arms interleaved per seed (seed 1: sesame then hf, seed 2: hf then sesame,
...): RTE, MRPC, STS-B, CoLA, WNUT-17 (3 seeds), CoNLL-2003 (3), SST-2 (1), SQuAD v1.1 (1).

    python benchmarks/full_data_study.py --plan                    # the units and their state
    nohup nice -n 19 python benchmarks/full_data_study.py > study.log 2>&1 &   # the study
    python benchmarks/full_data_study.py --tasks rte --seeds 1     # one small real unit per arm
    python benchmarks/full_data_study.py --arms sesame_fast        # the speed arm
    python benchmarks/full_data_study.py --sweep                   # the recipe sweep, into <out>/sweep
    python benchmarks/full_data_study.py --arms sesame_best        # its winners on the full data
    python benchmarks/full_data_study.py --report                  # docs/results/full_data_study.md + PNGs
    python benchmarks/full_data_study.py --quick                   # pipeline check on shipped slices (~5 min)

Data: every file is read from $SESAME_DATA_DIR (default ../shared/data relative to the working
directory, i.e. run from the repository root; see its SOURCES.md for the layout). To use a copy
elsewhere: SESAME_DATA_DIR=/data/glue_and_co python benchmarks/full_data_study.py ... (the path is
made absolute and passed to every child). Results go to --out (default outputs/full_data_study in the
repository, or $SESAME_STUDY_DIR).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import functools
import hashlib
import json
import math
import os
import platform
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from compression import compose  # noqa: E402
from readme_section import section_in, with_section  # noqa: E402
from train_speed import ARMS as SPEED_ARMS  # noqa: E402
from train_speed import (  # noqa: E402
    FAST_SETTINGS,
    GROUPED_BF16_SETTINGS,
    HF_KEYS,
    OFFLINE,
    HFExamples,
    TrainerSwitches,
    check_mirrorable,
    evaluate_hf,
    hf_model,
    precision_arguments,
    sampling_argument,
    sesame_optim,
    sesame_optimizer,
    settings_of,
)

DEFAULT_OUT = Path(os.environ.get("SESAME_STUDY_DIR", REPO / "outputs" / "full_data_study"))
DEFAULT_REPORT = REPO / "docs" / "results" / "full_data_study.md"
#: Every finished run's record (``--report`` writes them); the README table is rendered from these.
RUN_RECORDS = DEFAULT_REPORT.parent / DEFAULT_REPORT.stem / "runs"
README = REPO / "README.md"
README_BEGIN, README_END = "<!-- full-data-study:begin -->", "<!-- full-data-study:end -->"
#: Published dev-set figures of other small encoders, for context only (different models and recipes).
PUBLISHED: dict[str, str] = {
    "rte": "MiniLM-L6 68.8ᵃ, DistilBERT 59.9ᵇ",
    "mrpc": "MiniLM-L6 88.9ᵃ ᶜ, DistilBERT 87.5ᵇ ᶜ",
    "stsb": "DistilBERT 86.9ᵇ ᶜ",
    "cola": "MiniLM-L6 47.5ᵃ, DistilBERT 51.3ᵇ",
    "sst2": "MiniLM-L6 91.5ᵃ, DistilBERT 91.3ᵇ",
    "squad_v1": "DistilBERT 85.8 F1 (77.7 EM)ᵈ",
    "conll2003": "none found",
    "wnut17": "none found",
}
PUBLISHED_NOTES = [
    "sesame's encoder here is sentence-transformers' all-MiniLM-L6-v2: a sentence-embedding model (nreimers' "
    "MiniLM-L6-H384, the every-other-layer cut of MiniLM-L12-H384, trained further on 1B sentence pairs for "
    "embeddings; its model card, huggingface.co/sentence-transformers/all-MiniLM-L6-v2), not the distilled MiniLM "
    "or DistilBERT those papers fine-tune; their figures are context, not a target.",
    "ᵃ MiniLM-L6xH384 (22M parameters, distilled task-agnostically from a UniLMv2 base model), dev set: "
    "microsoft/unilm, `minilm/README.md`, table \"Fine-tuning on NLU tasks\" (Wang et al., 2020, arXiv:2002.10957).",
    "ᵇ DistilBERT (66M, 6 layers of 768), dev set, median of 5 runs: Sanh et al., 2019, arXiv:1910.01108, Table 1.",
    "ᶜ the source does not say which of the task's metrics (MRPC accuracy or F1; STS-B Pearson or Spearman).",
    "ᵈ same paper, Table 2 (SQuAD v1.1 dev).",
]

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
EXIT_STOPPED = 75  # a child stopped by SIGTERM, with a checkpoint to resume from


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"results folder, outside the repository (default {DEFAULT_OUT}; $SESAME_STUDY_DIR)")
    parser.add_argument("--tasks", default=",".join(ORDER), help="comma-separated, run in this order (default: all, "
                        "small first): " + ", ".join(ORDER))
    parser.add_argument("--arms", default="sesame,hf", help=f"comma-separated from {', '.join(ARMS)} (default sesame,hf)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds 1..N for every task (default: 3, and 1 for SST-2 and SQuAD)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child (default 1)")
    parser.add_argument("--retries", type=int, default=1,
                        help="times an interrupted or failed unit is resumed in this invocation (default 1)")
    parser.add_argument("--max-units", type=int, default=None, help="stop after running this many units")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for both arms (repeatable), e.g. data.max_seq_length=256; it becomes "
                        "part of the units' settings (use a fresh --out)")
    parser.add_argument("--task-override", action="append", default=[], metavar="TASK:KEY=VALUE",
                        help="Hydra override for one task, both arms, e.g. squad_v1:data.max_seq_length=256")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep each finished unit's resume state (last.ckpt, Trainer checkpoints); best weights are kept anyway")
    parser.add_argument("--rerun-unfingerprinted", action="store_true",
                        help="rerun the planned units whose finished result carries no machine fingerprint (recorded "
                        "before attempts did), so that their CPU seconds can be divided by the other arms' of this "
                        "machine; the old result is kept beside it as result.unfingerprinted.json")
    parser.add_argument("--plan", action="store_true", help="list the units and their state, run nothing")
    parser.add_argument("--report", action="store_true", help="only write the report from the finished units")
    parser.add_argument("--report-file", type=Path, default=None,
                        help=f"report markdown (default {DEFAULT_REPORT.relative_to(REPO)} for --report, "
                        "<out>/report/full_data_study.md while running); PNGs go to a folder beside it")
    parser.add_argument("--quick", action="store_true",
                        help="pipeline check: shipped SST-2 / WNUT-17 / SQuAD slices, 3 steps x 2 epochs, both arms, "
                        "one seed, each unit killed once mid-epoch and resumed, then the report; into <out>/quick (fresh)")
    parser.add_argument("--sweep", action="store_true",
                        help="item 4: the recipe sweep instead (SWEEP_GRID: 8 candidates per GLUE task, seed 1, trained on "
                        "90%% of the training file and scored on the other 10%%) into <out>/sweep; its winners are the "
                        "sesame_best arm (--arms sesame_best)")
    parser.add_argument("--readme", action="store_true",
                        help=f"write the README's summary table from the committed run records ({RUN_RECORDS.relative_to(REPO)}; "
                        "--report writes them); `--readme --check` exits 1 when the README's table is not that")
    parser.add_argument("--check", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    for names, known, what in ((args.tasks, TASKS, "task"), (args.arms, ARMS, "arm")):
        bad = [n for n in names if n not in known]
        if bad:
            parser.error(f"unknown {what}(s) {bad}; choose from {', '.join(known)}")
    if args.quick:
        args.tasks = [t for t in args.tasks if t in QUICK] if args.tasks != ORDER else list(QUICK)
        args.seeds = 1
        args.out = args.out / "quick"
    args.base_out = args.out.expanduser().resolve()  # the study's folder: its units feed the report
    if args.sweep:
        args.tasks = [t for t in args.tasks if t in SWEEP_TASKS]
        if not args.tasks:
            parser.error(f"--sweep: the sweep is for the GLUE tasks {', '.join(SWEEP_TASKS)}")
        args.out = args.out / "sweep"
    per_task: dict[str, list[str]] = {}
    for item in args.task_override:
        task, _, override = item.partition(":")
        if task not in TASKS or "=" not in override:
            parser.error(f"--task-override {item!r}: use TASK:KEY=VALUE with a task from {', '.join(TASKS)}")
        per_task.setdefault(task, []).append(override)
    args.per_task = per_task
    args.out = args.out.expanduser().resolve()
    return args


# The plan ------------------------------------------------------------------------------------------
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
            arms = [a for a in args.arms if a != "sesame_best" or task in SWEEP_TASKS]
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
            **{key: ARMS[arm][key] for key in ("grouped", "bf16", "val_per_epoch") if key in ARMS[arm]}}


def unit_dir(out: Path, unit: dict[str, Any]) -> Path:
    return out / "units" / unit["task"] / unit["arm"] / f"seed{unit['seed']}"


def unit_overrides(args: argparse.Namespace, task: str, seed: int) -> list[str]:
    """The Hydra overrides both arms compose the task's config with."""
    out = [f"+experiment={TASKS[task]['preset']}", f"seed={seed}", "trainer.enable_progress_bar=false",
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


# Shared by both arms in the child: the training clock ----------------------------------------------
def cpu_seconds() -> float:
    """This process's CPU time (user + system, all threads; children not included)."""
    t = os.times()
    return t.user + t.system


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TrainClock:
    """Cumulative training wall and CPU seconds over the segments of a unit (a resumed segment starts
    from the values its checkpoint stored), with evaluation and checkpoint writing left out: between
    ``pause()`` and ``resume()`` (evaluation) and inside ``excluded()`` (a checkpoint write) the clock
    stands still, and those seconds are counted apart. Also holds the per-validation history and a
    fingerprint of every training batch (examples, real tokens, sum of real token ids) per epoch."""

    MOD = (1 << 61) - 1

    def __init__(self) -> None:
        self.base = {"wall": 0.0, "cpu": 0.0}
        self.eval_total = {"wall": 0.0, "cpu": 0.0}
        self.save_total = {"wall": 0.0, "cpu": 0.0}
        self.history: list[dict[str, Any]] = []
        self.fingerprints: dict[str, list[int]] = {}  # epoch -> [hash, steps]
        self.restored_step = 0
        self.segment_start: tuple[float, float] | None = None
        self.excluded_wall = self.excluded_cpu = 0.0
        self.paused_at: tuple[float, float] | None = None
        self.peak_rss_before_eval: float | None = None

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), cpu_seconds()

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores (plain types: checkpoints are read with torch's weights-only unpickler)."""
        wall, cpu = self.reading()
        return {"wall": wall, "cpu": cpu, "eval": dict(self.eval_total), "save": dict(self.save_total),
                "history": json.loads(json.dumps(self.history)), "fingerprints": json.loads(json.dumps(self.fingerprints))}

    def restore(self, state: dict[str, Any] | None, step: int) -> None:
        if not state:
            return
        self.base = {"wall": float(state["wall"]), "cpu": float(state["cpu"])}
        self.eval_total = {k: float(v) for k, v in state["eval"].items()}
        self.save_total = {k: float(v) for k, v in state["save"].items()}
        self.history = list(state["history"])
        self.fingerprints = {k: list(v) for k, v in state["fingerprints"].items()}
        self.restored_step = step

    def start_segment(self) -> None:
        self.segment_start = self.now()
        self.excluded_wall = self.excluded_cpu = 0.0
        self.paused_at = None

    def reading(self) -> tuple[float, float]:
        if self.segment_start is None:
            return self.base["wall"], self.base["cpu"]
        wall, cpu = self.paused_at or self.now()
        return (self.base["wall"] + wall - self.segment_start[0] - self.excluded_wall,
                self.base["cpu"] + cpu - self.segment_start[1] - self.excluded_cpu)

    def pause(self) -> None:
        if self.paused_at is None and self.segment_start is not None:
            self.paused_at = self.now()
            if self.peak_rss_before_eval is None:
                self.peak_rss_before_eval = peak_rss_mib()

    def resume(self) -> tuple[float, float]:
        """Restart after an evaluation; returns its (wall, cpu) seconds."""
        if self.paused_at is None:
            return 0.0, 0.0
        wall, cpu = self.now()
        spent = (wall - self.paused_at[0], cpu - self.paused_at[1])
        self.excluded_wall += spent[0]
        self.excluded_cpu += spent[1]
        self.eval_total["wall"] += spent[0]
        self.eval_total["cpu"] += spent[1]
        self.paused_at = None
        return spent

    @contextlib.contextmanager
    def excluded(self):
        """A checkpoint write: not training time (unless the clock already stands, in an evaluation)."""
        start = self.now()
        try:
            yield
        finally:
            if self.paused_at is None and self.segment_start is not None:
                wall, cpu = self.now()
                self.excluded_wall += wall - start[0]
                self.excluded_cpu += cpu - start[1]
                self.save_total["wall"] += wall - start[0]
                self.save_total["cpu"] += cpu - start[1]

    def batch(self, epoch: int, batch: Any) -> None:
        mask = batch["attention_mask"].bool()
        values = (int(mask.shape[0]), int(mask.sum()), int(batch["input_ids"][mask].sum()))
        h, n = self.fingerprints.get(str(epoch), [0, 0])
        for v in values:
            h = (h * 1_000_003 + v) % self.MOD
        self.fingerprints[str(epoch)] = [h, n + 1]

    def record(self, step: int, steps_per_epoch: int, metrics: dict[str, float], eval_spent: tuple[float, float],
               train_reading: tuple[float, float]) -> dict[str, Any]:
        entry = {"step": step, "epoch": round(step / steps_per_epoch, 4), "train_wall_s": train_reading[0],
                 "train_cpu_s": train_reading[1], "eval_wall_s": eval_spent[0], "eval_cpu_s": eval_spent[1],
                 "eval_wall_total_s": self.eval_total["wall"], "eval_cpu_total_s": self.eval_total["cpu"],
                 "peak_rss_mib": peak_rss_mib(), "metrics": metrics, "time": time.time()}
        self.history.append(entry)
        return entry


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def kill_now_if(spec: dict[str, Any], step: int) -> None:
    """--quick: the first attempt of a unit dies (SIGKILL, no clean-up) once it reaches the given step."""
    at = spec.get("kill_at_step")
    if at and spec["attempt"] == 1 and step >= at:
        print(f"[quick] killing this attempt at step {step} to exercise resuming", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def main_metric_of(cfg: Any) -> str:
    return str(cfg.task.main_metric)


def versions() -> dict[str, str]:
    import lightning
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "lightning": lightning.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "host": socket.gethostname()}


# The sesame arm ---------------------------------------------------------------------------------------
def child_sesame(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    import lightning as L
    from sesame.tasks.runs import runner
    from sesame.tasks.runs.checkpoint_callbacks import AtomicCheckpointIO

    clock = TrainClock()
    run_dir = folder / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    overrides = [*spec["overrides"], *spec["arm_overrides"]]
    if spec.get("ckpt_steps"):
        overrides.append(f"checkpoint.every_n_train_steps={spec['ckpt_steps']}")
    resuming = last.is_file()
    if resuming:
        overrides.append("resume=true")
    elif run_dir.exists():
        overrides.append("overwrite=true")
    info: dict[str, Any] = {}

    class Study(L.Callback):
        def on_train_start(self, trainer, module):
            info["steps_per_epoch"] = int(trainer.num_training_batches)
            info["train_examples"] = len(trainer.datamodule.dataset("train"))
            info["restored_step"] = int(trainer.global_step)
            clock.start_segment()

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            kill_now_if(spec, trainer.global_step)
            clock.batch(trainer.current_epoch, batch)

        def on_validation_start(self, trainer, module):
            if trainer.state.fn == "fit" and not trainer.sanity_checking:
                clock.pause()

        def on_validation_end(self, trainer, module):
            if trainer.state.fn != "fit" or trainer.sanity_checking:
                return
            reading = clock.reading()
            spent = clock.resume()
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
            entry = clock.record(int(trainer.global_step), info["steps_per_epoch"], metrics, spent, reading)
            print(f"[validation] step {entry['step']} epoch {entry['epoch']}: {info['main']} "
                  f"{metrics.get(info['main'])}, train {reading[0]:.0f} s wall / {reading[1]:.0f} s CPU", flush=True)
            write_json(folder / "progress.json", {"history": clock.history, "time": time.time()})

        def on_save_checkpoint(self, trainer, module, checkpoint):
            checkpoint["study_clock"] = clock.state()

        def on_load_checkpoint(self, trainer, module, checkpoint):
            clock.restore(checkpoint.get("study_clock"), int(checkpoint.get("global_step", 0)))

        def on_train_end(self, trainer, module):
            info["train_reading"] = clock.reading()

    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, extra_callbacks=None, **kw: build(
        cfg, run_dir, monitor, [*(extra_callbacks or []), Study()], **kw)
    save = AtomicCheckpointIO.save_checkpoint

    def timed_save(self, checkpoint, path, storage_options=None):
        with clock.excluded():
            return save(self, checkpoint, path, storage_options)

    AtomicCheckpointIO.save_checkpoint = timed_save
    try:
        cfg = compose("config", overrides)
        if spec["mirrored"]:
            check_mirrorable(cfg)
        info["main"] = main_metric_of(cfg)
        print(f"[sesame] {'resuming from ' + str(last) if resuming else 'starting'}: {' '.join(overrides)}", flush=True)
        metrics = runner.train(cfg, run_dir)
    finally:
        runner.build_trainer = build
        AtomicCheckpointIO.save_checkpoint = save
    wall, cpu = info.get("train_reading", clock.reading())
    return {"settings": settings_of(cfg), "main_metric": main_metric_of(cfg), "overrides": overrides,
            "best": metrics, "best_step": metrics.get("best_step"), "train_wall_s": wall, "train_cpu_s": cpu,
            "eval_wall_s": clock.eval_total["wall"], "eval_cpu_s": clock.eval_total["cpu"],
            "save_wall_s": clock.save_total["wall"], "save_cpu_s": clock.save_total["cpu"],
            "history": clock.history, "fingerprints": clock.fingerprints,
            "steps_per_epoch": info.get("steps_per_epoch"), "train_examples": info.get("train_examples"),
            "restored_step": info.get("restored_step", 0), "peak_rss_before_eval_mib": clock.peak_rss_before_eval,
            "run_dir": str(run_dir)}


# The Trainer arm --------------------------------------------------------------------------------------
def rng_state() -> tuple[Any, ...]:
    import numpy as np
    import torch

    return torch.random.get_rng_state(), np.random.get_state(), random.getstate()


def set_rng_state(state: tuple[Any, ...]) -> None:
    import numpy as np
    import torch

    torch.random.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


def hf_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """The Trainer's checkpoint-<step> folders that are complete (hold the study clock), oldest first;
    incomplete ones (killed while being written) are removed."""
    found = []
    for path in output_dir.glob("checkpoint-*"):
        if (path / "study_clock.json").is_file():
            found.append((int(path.name.split("-")[1]), path))
        else:
            shutil.rmtree(path, ignore_errors=True)
    return sorted(found)


def init_task_layer_as_sesame(model: Any, kind: str) -> None:
    """The transformers model's task layer re-initialised as sesame's heads are (torch's default Linear
    init), in place of transformers' normal(0, 0.02) weights and zero biases (the hf_torch_init arm)."""
    import torch

    task_layer = model.qa_outputs if kind == "qa" else model.classifier
    for layer in (m for m in task_layer.modules() if isinstance(m, torch.nn.Linear)):
        layer.reset_parameters()


def child_hf(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    import torch
    from sesame.tasks.inputs.batching import ResumableShuffleSampler
    from sesame.tasks.encoders.encoder import resolve_name_or_path
    from sesame.tasks.runs.runner import build_datamodule, config_with_data
    from transformers import (
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainerCallback,
        TrainingArguments,
        set_seed,
    )

    kind = spec["hf"]
    overrides = list(spec["overrides"])
    cfg = compose("config", overrides)
    check_mirrorable(cfg)
    settings = settings_of(cfg)
    main = main_metric_of(cfg)
    epochs = int(cfg.trainer.max_epochs)
    optim = sesame_optim(cfg)
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    cfg = config_with_data(cfg, datamodule)
    tokenizer = datamodule.tokenizer
    examples = HFExamples(datamodule.dataset("train"), HF_KEYS[kind])
    steps_per_epoch = math.ceil(len(examples) / settings["batch_size"])
    total_steps = steps_per_epoch * epochs
    set_seed(settings["seed"])
    model = hf_model(kind, resolve_name_or_path(str(cfg.encoder.name_or_path)), cfg, datamodule)
    if spec.get("head_init") == "torch":
        init_task_layer_as_sesame(model, kind)
    grouped, bf16 = bool(spec.get("grouped")), bool(spec.get("bf16"))
    validate_at = validation_steps(steps_per_epoch, int(spec.get("val_per_epoch") or 1))
    switches = TrainerSwitches(model)
    collator = DataCollatorForTokenClassification(tokenizer) if kind == "token" else DataCollatorWithPadding(tokenizer)
    output_dir = folder / "hf"
    best_dir, epoch_dir = folder / "hf_best", folder / "hf_epoch_model"
    clock = TrainClock()
    done = hf_checkpoints(output_dir) if output_dir.is_dir() else []
    resume_from = None
    if done:
        step, resume_from = done[-1]
        clock.restore(json.loads((resume_from / "study_clock.json").read_text()), step)
    best = json.loads((best_dir / "study_best.json").read_text()) if (best_dir / "study_best.json").is_file() else None
    if best and best["step"] > clock.restored_step:  # a best model the resumed history does not hold
        shutil.rmtree(best_dir, ignore_errors=True)
        best = None
    dev_overrides = [*overrides, "data.test_file=null"]
    stopping = {"sigterm": False}
    signal.signal(signal.SIGTERM, lambda *_: stopping.update(sigterm=True))

    def evaluate_epoch(trained: Any, step: int) -> None:
        nonlocal best
        clock.pause()
        reading = clock.reading()
        state = rng_state()
        shutil.rmtree(epoch_dir, ignore_errors=True)
        trained.save_pretrained(str(epoch_dir))
        tokenizer.save_pretrained(str(epoch_dir))
        eval_dir = folder / "hf_eval" / f"step{step}"
        shutil.rmtree(eval_dir, ignore_errors=True)
        _, metrics = evaluate_hf(dev_overrides, epoch_dir, eval_dir)
        set_rng_state(state)
        trained.train()
        value = metrics.get(main)
        if value is not None and (best is None or value > best["value"]):
            shutil.rmtree(best_dir, ignore_errors=True)
            epoch_dir.rename(best_dir)
            best = {"step": step, "value": value}
            write_json(best_dir / "study_best.json", best)
        else:
            shutil.rmtree(epoch_dir, ignore_errors=True)
        spent = clock.resume()
        metrics = {k: float(v) for k, v in metrics.items() if k.startswith("val_") and isinstance(v, (int, float))}
        clock.record(step, steps_per_epoch, metrics, spent, reading)
        print(f"[validation] step {step} epoch {step / steps_per_epoch:.2f}: {main} {value}, train "
              f"{reading[0]:.0f} s wall / {reading[1]:.0f} s CPU, eval {spent[0]:.0f} s", flush=True)
        write_json(folder / "progress.json", {"history": clock.history, "time": time.time()})

    class Study(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.start_segment()

        def on_step_begin(self, args, state, control, **kw):
            kill_now_if(spec, state.global_step)

        def on_step_end(self, args, state, control, model=None, **kw):
            if stopping["sigterm"]:
                control.should_save = True
                control.should_training_stop = True
            elif state.global_step % steps_per_epoch in validate_at:  # mid-epoch validations (val_per_epoch > 1)
                evaluate_epoch(model, state.global_step)
                control.should_save = True

        def on_epoch_end(self, args, state, control, model=None, **kw):
            if stopping["sigterm"] or state.global_step % steps_per_epoch:
                return
            evaluate_epoch(model, state.global_step)
            control.should_save = True  # last checkpoint after every validation, as sesame's last.ckpt

    class ReferenceTrainer(Trainer):
        """The Trainer with sesame's learning-rate groups and sesame's batches (benchmarks/train_speed.py)."""

        def create_optimizer(self, model: Any = None) -> Any:
            if self.optimizer is None:
                self.optimizer = sesame_optimizer(self, settings["head_lr"])
            return self.optimizer

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            if grouped:  # the Trainer's own LengthGroupedSampler
                return switches.sampler(super()._get_train_sampler(train_dataset))
            return switches.sampler(ResumableShuffleSampler(len(train_dataset or self.train_dataset), datamodule.seed))

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            clock.batch(self.state.global_step // steps_per_epoch, inputs)
            return super().training_step(model, inputs, num_items_in_batch)

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            with clock.excluded():
                super()._save_checkpoint(model, trial)
                path = output_dir / f"checkpoint-{self.state.global_step}"
                write_json(path / "study_clock.json", clock.state())
                for step, old in hf_checkpoints(output_dir):
                    if old != path:
                        shutil.rmtree(old, ignore_errors=True)

    args = TrainingArguments(
        output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=settings["batch_size"],
        learning_rate=settings["encoder_lr"], weight_decay=settings["weight_decay"], adam_epsilon=settings["adam_epsilon"],
        lr_scheduler_type="linear", warmup_steps=int(settings["warmup_ratio"] * total_steps),
        max_grad_norm=settings["gradient_clip_val"] or 0.0, optim=optim, seed=settings["seed"],
        **sampling_argument(TrainingArguments, grouped), **precision_arguments(bf16),
        logging_strategy="steps", logging_steps=settings["log_every_n_steps"],
        save_strategy="steps" if spec.get("ckpt_steps") else "no", save_steps=spec.get("ckpt_steps") or 500,
        eval_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=settings["num_workers"], dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = ReferenceTrainer(model=model, args=args, train_dataset=examples, data_collator=collator,
                               processing_class=tokenizer, callbacks=[Study()])
    print(f"[hf] {'resuming from ' + str(resume_from) if resume_from else 'starting'}: {' '.join(overrides)}; "
          f"{len(examples)} examples, {steps_per_epoch} steps/epoch, optim {optim}", flush=True)
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    if stopping["sigterm"]:
        print("[hf] stopped by SIGTERM with a checkpoint; rerun to resume", flush=True)
        sys.exit(EXIT_STOPPED)
    wall, cpu = clock.reading()
    seen = switches.check(grouped, bf16)
    # The best dev epoch's model, scored again with the test set where the task has one (as sesame's best.ckpt).
    best_metrics: dict[str, Any] = {}
    if best is not None:
        test_file = cfg.data.get("test_file")
        if test_file:
            eval_dir = folder / "hf_eval" / "best"
            shutil.rmtree(eval_dir, ignore_errors=True)
            _, best_metrics = evaluate_hf(overrides, best_dir, eval_dir)
        else:
            best_metrics = next(e["metrics"] for e in clock.history if e["step"] == best["step"])
        best_metrics = {**best_metrics, "best_step": best["step"]}
    return {"settings": {**settings, "epochs": epochs}, "main_metric": main, "overrides": overrides, "hf_optim": optim,
            "best": best_metrics, "best_step": best["step"] if best else None, "train_wall_s": wall, "train_cpu_s": cpu,
            "eval_wall_s": clock.eval_total["wall"], "eval_cpu_s": clock.eval_total["cpu"],
            "save_wall_s": clock.save_total["wall"], "save_cpu_s": clock.save_total["cpu"],
            "history": clock.history, "fingerprints": clock.fingerprints, "steps_per_epoch": steps_per_epoch,
            "train_examples": len(examples), "restored_step": clock.restored_step,
            "peak_rss_before_eval_mib": clock.peak_rss_before_eval, "model": type(model).__name__, "switches": seen}


def validation_steps(steps_per_epoch: int, per_epoch: int) -> set[int]:
    """The mid-epoch steps (``global_step % steps_per_epoch``) of ``per_epoch`` validations an epoch, at the points
    Lightning's ``val_check_interval=1/per_epoch`` puts sesame's (every ``int(steps_per_epoch / per_epoch)`` batches);
    the epoch's end is validated apart."""
    every = int(steps_per_epoch / per_epoch)
    return {k * every for k in range(1, per_epoch)} - {0} if every else set()


def child(spec_file: Path) -> None:
    """One segment of one unit (``--child``): train (resuming where it can), evaluate, write result.json."""
    spec = json.loads(spec_file.read_text())
    folder = spec_file.parent
    import logging

    import torch

    # sesame's own log lines into child.log, as sesame-train's train.log has them: the data's counts
    # (questions -> windows, sentences -> windows, held-out examples), warnings about the files
    logging.basicConfig(level=logging.WARNING, format="[%(levelname)s %(name)s] %(message)s")
    logging.getLogger("sesame").setLevel(logging.INFO)
    torch.set_num_threads(int(spec["threads"]))
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    started = time.time()
    from sesame.tasks.core.errors import RunStopped

    try:
        result = child_sesame(spec, folder) if spec["side"] == "sesame" else child_hf(spec, folder)
    except RunStopped as stopped:  # SIGTERM: the run saved its checkpoint; the parent resumes it later
        print(f"[sesame] {stopped}", flush=True)
        sys.exit(EXIT_STOPPED)
    history = result["history"]
    result.update(
        task=spec["task"], arm=spec["arm"], seed=spec["seed"], preset=TASKS[spec["task"]]["preset"],
        final={"step": history[-1]["step"], **history[-1]["metrics"]} if history else {},
        peak_rss_segment_mib=peak_rss_mib(), threads=torch.get_num_threads(), versions=versions(),
        commit=spec["commit"], data_dir=spec["data_dir"], segment_seconds=time.time() - started,
        finished=datetime.datetime.now().isoformat(timespec="seconds"), quick=spec.get("quick", False),
    )
    write_json(folder / "result.child.json", result)


# The parent --------------------------------------------------------------------------------------------
def git_commit() -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(REPO), *a], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


class Stop:
    """SIGTERM / SIGINT to the study: pass it to the running child (which checkpoints and exits), then stop."""

    def __init__(self) -> None:
        self.requested = False
        self.child: subprocess.Popen | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.handle)

    def handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        print(f"[study] signal {signum}: stopping the running unit at its next step (checkpointed)", flush=True)
        if self.child and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)


def run_attempt(args: argparse.Namespace, unit: dict[str, Any], folder: Path, attempt: int, stop: Stop,
                meta: dict[str, Any], arm: dict[str, Any]) -> dict[str, Any]:
    task = unit["task"]
    spec = {**unit, **arm, "hf": TASKS[task]["hf"], "overrides": unit_overrides(args, task, unit["seed"]),
            "ckpt_steps": 2 if args.quick else TASKS[task]["ckpt_steps"], "threads": args.threads,
            "attempt": attempt, "kill_at_step": QUICK_KILL_AT if args.quick else None, "quick": args.quick,
            "commit": meta["commit"], "data_dir": meta["data_dir"]}
    write_json(folder / "spec.json", spec)
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "SESAME_DATA_DIR": meta["data_dir"], "PYTHONUNBUFFERED": "1"}
    started = time.time()
    with open(folder / "child.log", "a") as log:
        log.write(f"\n===== attempt {attempt} {datetime.datetime.now().isoformat(timespec='seconds')} =====\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", str(folder / "spec.json")],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
        stop.child = proc
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        stop.child = None
    record = {"attempt": attempt, "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
              "boot": boot_time(), "machine": machine_fingerprint(),
              "wall_s": time.time() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
              "peak_rss_mib": usage.ru_maxrss / 1024, "returncode": proc.returncode}
    attempts = json.loads((folder / "attempts.json").read_text()) if (folder / "attempts.json").is_file() else []
    write_json(folder / "attempts.json", [*attempts, record])
    return record


def boot_time() -> str | None:
    """When this machine booted (minute resolution; None off Linux): which machine an attempt ran on. CPU seconds
    of the same work differed by 1.59x between two machines this study ran on (``TRACED_CAUSES``)."""
    try:
        up = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return datetime.datetime.fromtimestamp(time.time() - up).isoformat(timespec="minutes")


def machine_fingerprint() -> str | None:
    """The processor an attempt ran on: its model, core count and a digest of its feature flags (None off Linux).
    CPU seconds are divided only between attempts with one fingerprint and one boot (``machines_of``)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = " ".join(sorted(fields.get("flags", "").split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{fields.get('model name', platform.processor() or '?')}, {os.cpu_count()} cores, flags {digest}"


#: Boots of the machines that ran attempts recorded before attempts carried their ``boot``: such an attempt ran on
#: the latest of these that precedes it (the 2026-12-04T19:18 boot was a fresh machine; the units before it ran on
#: an earlier one).
KNOWN_BOOTS = ("2026-12-04T19:18",)


#: What ``machines_of`` says of an attempt recorded before attempts carried their ``machine_fingerprint``.
NO_FINGERPRINT = "no fingerprint"


def machines_of(result: dict[str, Any]) -> set[str]:
    """The machines a unit's attempts ran on, each as "<boot> · <processor fingerprint>"; the boot is "unknown" for
    an attempt without a start time, and the fingerprint ``NO_FINGERPRINT`` for one recorded before attempts
    carried it."""
    machines = set()
    for attempt in result.get("attempts") or [{}]:
        started = attempt.get("started")
        if attempt.get("boot") or not started:
            boot = attempt.get("boot") or "unknown"
        else:
            before = [b for b in KNOWN_BOOTS if b <= started[:16]]
            boot = before[-1] if before else f"before {KNOWN_BOOTS[0]}"
        machines.add(f"{boot} · {attempt.get('machine') or NO_FINGERPRINT}")
    return machines


def one_machine(results: list[dict[str, Any]]) -> bool:
    """Whether every attempt of ``results`` ran on one machine (one boot, one processor fingerprint): the only case in
    which their CPU seconds divide into a ratio."""
    machines = set().union(*(machines_of(r) for r in results)) if results else set()
    return len(machines) == 1 and not any(m.endswith(NO_FINGERPRINT) or m.startswith("unknown") for m in machines)


def attempts_on_record(result: dict[str, Any]) -> bool:
    """Whether a unit's attempts cover its whole training (not so when it resumed from another folder's checkpoint)."""
    return result["all_attempts_cpu_s"] >= result["train_cpu_s"]


def attempts_cpu_cell(rows: list[dict[str, Any]]) -> str:
    """Mean CPU minutes of every attempt of the rows' units; '≥' where some attempts are not on record."""
    mean = statistics.fmean(r["all_attempts_cpu_s"] for r in rows) / 60
    return f"{'' if all(attempts_on_record(r) for r in rows) else '≥ '}{mean:.1f}"


def finish_unit(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Merge the child's result with every attempt's cost; drop resume state unless kept."""
    result = json.loads((folder / "result.child.json").read_text())
    attempts = json.loads((folder / "attempts.json").read_text())
    result["attempts"] = attempts
    result["peak_rss_mib"] = max(a["peak_rss_mib"] for a in attempts)
    result["all_attempts_wall_s"] = sum(a["wall_s"] for a in attempts)
    result["all_attempts_cpu_s"] = sum(a["cpu_s"] for a in attempts)
    write_json(folder / "result.json", result)
    (folder / "result.child.json").unlink()
    (folder / "failed.json").unlink(missing_ok=True)
    if not args.keep_checkpoints:
        (folder / "run" / "checkpoints" / "last.ckpt").unlink(missing_ok=True)
        for path in (folder / "hf").glob("checkpoint-*") if (folder / "hf").is_dir() else []:
            shutil.rmtree(path, ignore_errors=True)
    return result


def describe(result: dict[str, Any]) -> str:
    main = result["main_metric"]
    value = result["final"].get(main)
    return (f"{main} {value:.4f} (final epoch), train {result['train_wall_s'] / 60:.1f} min wall / "
            f"{result['train_cpu_s'] / 60:.1f} min CPU, eval {result['eval_wall_s'] / 60:.1f} min, peak RSS "
            f"{result['peak_rss_mib']:.0f} MiB, {len(result['attempts'])} attempt(s)") if value is not None else "no metric"


def run_study(args: argparse.Namespace) -> None:
    from sesame.tasks.core.paths import data_dir_path

    data_dir = str(Path(data_dir_path()).resolve())
    if not args.quick:
        missing = [f"{data_dir}/{f}" for t in args.tasks for f in TASKS[t]["files"] if not Path(data_dir, f).is_file()]
        if missing:
            sys.exit(f"error: missing data files {missing}; set SESAME_DATA_DIR (now {data_dir}) or use --quick")
    if args.quick:  # a fresh check: this invocation's units start from nothing
        for unit in plan(args):
            shutil.rmtree(unit_dir(args.out, unit), ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    lock_file = open(args.out / ".study.lock", "w")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"error: another study process is running in {args.out} (see its RUNNING.md / study.log)")
    lock_file.write(f"{os.getpid()}\n")
    lock_file.flush()
    meta = {"commit": git_commit(), "data_dir": data_dir}
    units = plan(args)
    if args.rerun_unfingerprinted:
        for unit in units:
            result_file = unit_dir(args.out, unit) / "result.json"
            if result_file.is_file() and all(m.endswith(NO_FINGERPRINT) for m in machines_of(json.loads(result_file.read_text()))):
                result_file.rename(result_file.with_name("result.unfingerprinted.json"))
    stop = Stop()
    ran = 0
    print(f"[study] {len(units)} units into {args.out}; data {data_dir}; commit {meta['commit']}", flush=True)
    for i, unit in enumerate(units, 1):
        folder = unit_dir(args.out, unit)
        name = f"{unit['task']}/{unit['arm']}/seed{unit['seed']}"
        if (folder / "result.json").is_file():
            print(f"[study] {i}/{len(units)} {name}: done, skipped", flush=True)
            continue
        if stop.requested or (args.max_units is not None and ran >= args.max_units):
            break
        arm = arm_spec(args, unit["arm"], unit["task"])
        if arm is None:
            print(f"[study] {i}/{len(units)} {name}: skipped, the {unit['task']} sweep has no winner yet "
                  f"(run --sweep first; {args.base_out / 'sweep'})", flush=True)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        ran += 1
        print(f"[study] {i}/{len(units)} {name}: {unit_state(folder)} -> running", flush=True)
        for attempt in range(1, args.retries + 2):
            previous = json.loads((folder / "attempts.json").read_text()) if (folder / "attempts.json").is_file() else []
            record = run_attempt(args, unit, folder, len(previous) + 1, stop, meta, arm)
            if record["returncode"] == 0 and (folder / "result.child.json").is_file():
                result = finish_unit(args, folder)
                print(f"[study] {name}: {describe(result)}", flush=True)
                break
            print(f"[study] {name}: attempt exited {record['returncode']} after {record['wall_s']:.0f} s "
                  f"({folder / 'child.log'})", flush=True)
            if stop.requested:
                break
        else:
            tail = (folder / "child.log").read_text()[-3000:]
            write_json(folder / "failed.json", {"error": tail.strip().splitlines()[-1] if tail.strip() else "?",
                                                "log_tail": tail, "time": time.time()})
            print(f"[study] {name}: FAILED, moving on; {folder / 'child.log'}:\n{tail[-1500:]}", flush=True)
        if stop.requested:
            print("[study] stopped on request; rerun the same command to resume", flush=True)
            break
        safe_report(args)
    safe_report(args)
    print(f"[study] finished this invocation: {ran} unit(s) run", flush=True)


def safe_report(args: argparse.Namespace) -> None:
    """The running report (<out>/report/): a failure to write it never stops the study."""
    try:
        write_report(args, args.report_file or args.base_out / "report" / "full_data_study.md")
    except Exception as error:  # noqa: BLE001
        print(f"[study] could not write the report: {error!r}", flush=True)


# The report -------------------------------------------------------------------------------------------
def load_results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("units/*/*/seed*/result.json"))]


def mean_std(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.4f} (n=1)"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f} (n={len(values)})"


#: How far under a target a dev metric may read and still reach it: sesame's arm logs its metrics through Lightning in
#: float32, the Trainer arm's come from sesame's scorer in float64, so the same 774 of 872 sentences read 0.88761467
#: on one side and 0.8876146789 on the other. Far below one example of any dev set.
METRIC_TOLERANCE = 1e-6


def reach(history: list[dict[str, Any]], metric: str, target: float, key: str) -> float | None:
    """Training seconds (``key``) at the first validation whose ``metric`` reaches ``target``."""
    for entry in history:
        value = entry["metrics"].get(metric)
        if value is not None and value >= target - METRIC_TOLERANCE:
            return entry[key]
    return None


def time_to_accuracy(results: list[dict[str, Any]], arm: str = "sesame", ref: str = "hf") -> list[dict[str, Any]]:
    """Per task and seed where both arms finished: sesame's training CPU (and wall) seconds to reach the final
    dev metric of the Trainer's run with the same seed, over that run's CPU (wall) seconds (the report's paired
    detail; the goals use ``mean_time_to_accuracy``)."""
    by = {(r["task"], r["arm"], r["seed"]): r for r in results}
    rows = []
    for (task, a, seed), r in sorted(by.items()):
        if a != arm or (task, ref, seed) not in by:
            continue
        h = by[(task, ref, seed)]
        metric = r["main_metric"]
        target = h["final"].get(metric)
        cpu = reach(r["history"], metric, target, "train_cpu_s") if target is not None else None
        wall = reach(r["history"], metric, target, "train_wall_s") if target is not None else None
        same = one_machine([r, h])
        rows.append({"task": task, "arm": arm, "seed": seed, "metric": metric, "target": target, "arm_final": r["final"].get(metric),
                     "arm_cpu_to_target": cpu, "ref_cpu": h["train_cpu_s"], "arm_cpu": r["train_cpu_s"],
                     "cpu_ratio": cpu / h["train_cpu_s"] if cpu is not None and same else None,
                     "wall_ratio": wall / h["train_wall_s"] if wall is not None and same else None,
                     "total_cpu_ratio": r["train_cpu_s"] / h["train_cpu_s"] if same else None, "same_machine": same,
                     "same_batches": r.get("fingerprints") == h.get("fingerprints")})
    return rows


#: The reference of every speed ratio: the Trainer at its best (its own length grouping and bf16), not the ``hf`` arm
#: with its speed switches off.
SPEED_REF = "hf_fast"
#: Validations of two arms are matched points when their epochs differ by at most this much (Lightning validates a
#: half epoch at ``int(steps / 2)``, the Trainer arm at the same step; an epoch's end may read 0.9913 against 1.0).
MATCH_EPOCHS = 0.02


def mean_curve(runs: list[dict[str, Any]], metric: str) -> list[dict[str, float]]:
    """The runs' dev curve averaged over seeds: epoch, metric and training seconds at each validation (seeds share
    the schedule; the shortest history bounds it)."""
    length = min(len(r["history"]) for r in runs)
    return [{key: statistics.fmean(r["history"][i][key] for r in runs) for key in ("epoch", "train_cpu_s", "train_wall_s")}
            | {"metric": statistics.fmean(r["history"][i]["metrics"].get(metric, float("-inf")) for r in runs)}
            for i in range(length)]


def mean_time_to_accuracy(results: list[dict[str, Any]], arm: str, ref: str = SPEED_REF) -> list[dict[str, Any]]:
    """The rule the speed goal and the README use, per task where both arms have finished seeds: both arms' dev
    curves averaged over their seeds (``mean_curve``), the target the mean of ``ref``'s final dev metrics. Each arm's
    time is its mean CPU (wall) seconds at the first validation where its mean curve reaches the target, the arm
    counted only at validations ``ref`` also made (matched points: a half-epoch check of the arm that the Trainer did
    not make cannot decide). Ratio: the arm's time over ``ref``'s. Times divide only where every unit of the row ran on
    one machine (``one_machine``); elsewhere the ratios are None and ``same_machine`` False."""
    rows = []
    for task in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task and r["arm"] == arm and r["history"]]
        theirs = [r for r in results if r["task"] == task and r["arm"] == ref and r["history"]]
        if not mine or not theirs:
            continue
        metric = mine[0]["main_metric"]
        targets = [r["final"][metric] for r in theirs if r["final"].get(metric) is not None]
        if not targets:
            continue
        target = statistics.fmean(targets)
        curve, ref_curve = mean_curve(mine, metric), mean_curve(theirs, metric)
        matched = [i for i, point in enumerate(curve) if any(abs(point["epoch"] - q["epoch"]) <= MATCH_EPOCHS for q in ref_curve)]
        hit = next((i for i in matched if curve[i]["metric"] >= target - METRIC_TOLERANCE), None)
        ref_hit = next((q for q in ref_curve if q["metric"] >= target - METRIC_TOLERANCE), ref_curve[-1])
        same = one_machine(mine + theirs)
        divide = lambda key: curve[hit][key] / ref_hit[key] if hit is not None and same else None  # noqa: E731
        rows.append({"task": task, "arm": arm, "ref": ref, "metric": metric, "seeds": len(mine), "ref_seeds": len(theirs),
                     "target": target, "arm_final": curve[-1]["metric"],
                     "arm_cpu_to_target": curve[hit]["train_cpu_s"] if hit is not None else None,
                     "ref_cpu": ref_hit["train_cpu_s"], "reached": hit is not None,
                     "cpu_ratio": divide("train_cpu_s"), "wall_ratio": divide("train_wall_s"),
                     "total_cpu_ratio": (statistics.fmean(r["train_cpu_s"] for r in mine)
                                         / statistics.fmean(r["train_cpu_s"] for r in theirs)) if same else None,
                     "matched_points": len(matched), "same_machine": same})
    return rows


def goal_ratio(row: dict[str, Any]) -> float | None:
    """The CPU ratio the speed goal counts: only one measured with every unit on one machine."""
    return row["cpu_ratio"] if row["same_machine"] else None


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
               "hf_fast": "tab:red"}
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


def write_run_records(args: argparse.Namespace, folder: Path) -> None:
    """One JSON per finished unit (study and sweep) beside the report: its result (settings, overrides, seed,
    commit, versions, per-validation metrics and times, cost) plus, for sesame's arms, the composed config
    the run saved, so each run can be rerun exactly (the preset + overrides at that commit)."""
    import yaml

    shutil.rmtree(folder, ignore_errors=True)  # generated: a unit removed from the study leaves no stale record
    for result_file in sorted([*args.base_out.glob("units/*/*/seed*/result.json"),
                               *args.base_out.glob("sweep/units/*/*/seed*/result.json")]):
        record = json.loads(result_file.read_text())
        config = result_file.parent / "run" / "config.yaml"
        if config.is_file():
            record["config"] = yaml.safe_load(config.read_text())
        sweep = "sweep/" if record["arm"].startswith(SWEEP_ARM_PREFIX) else ""
        target = folder / f"{sweep}{record['task']}_{record['arm']}_seed{record['seed']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_json(target, record)


def restore_from_records(args: argparse.Namespace, folder: Path = RUN_RECORDS) -> list[Path]:
    """Put the committed run records back as finished units of ``args.base_out`` (study and sweep) where that
    folder has no result for them: a fresh machine or clone then resumes the study where the commit left it
    (finished units are skipped, sesame_best finds its sweep winner) and ``--report`` keeps every committed
    run. Trained weights are not in the records; a restored unit is never retrained. Returns the units written."""
    import yaml

    written = []
    for record_file in sorted([*folder.glob("*.json"), *folder.glob("sweep/*.json")]):
        record = json.loads(record_file.read_text())
        base = args.base_out / "sweep" if record["arm"].startswith(SWEEP_ARM_PREFIX) else args.base_out
        unit = unit_dir(base, record)
        if (unit / "result.json").is_file():
            continue
        config = record.pop("config", None)
        if config is not None:  # what write_run_records reads back into the record
            (unit / "run").mkdir(parents=True, exist_ok=True)
            (unit / "run" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        unit.mkdir(parents=True, exist_ok=True)
        write_json(unit / "result.json", record)
        written.append(unit)
    return written


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
    return lines


def load_records(folder: Path = RUN_RECORDS) -> list[dict[str, Any]]:
    """The committed run records of the study's arms (the sweep's are in ``sweep/``)."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


#: Tasks whose scorer reports its metrics in points (0-100), not as fractions.
POINTS_ALREADY = frozenset({"squad_v1"})


def in_points(task: str, value: float) -> float:
    """A dev metric of ``task`` in points: sesame's GLUE and NER scorers give fractions, the official SQuAD rules
    (and so sesame's QA scorer) give points already."""
    return value if task in POINTS_ALREADY else 100 * value


def points(values: list[float]) -> str:
    """Mean ± std (n) of a metric already in points."""
    if not values:
        return "running"
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.fmean(values):.2f}{spread} ({len(values)})"


def arm_points(records: list[dict[str, Any]], task: str, arm: str,
               pick: Callable[[dict[str, Any]], float | None]) -> list[float]:
    """``pick`` of every run of ``task`` / ``arm`` that has it, in points (``in_points``)."""
    values = (pick(r) for r in records if r["task"] == task and r["arm"] == arm)
    return [in_points(task, v) for v in values if v is not None]


def final_metrics(records: list[dict[str, Any]], task: str, arm: str) -> list[float]:
    """The final dev main metric of every finished seed of ``task`` / ``arm``, in points."""
    return arm_points(records, task, arm, lambda r: r["final"].get(r["main_metric"]))


def readme_table(records: list[dict[str, Any]]) -> str:
    """The README's summary of the study, rendered from the run records (``--readme`` writes it)."""
    tta = speed_arm_reaches(records)
    final = functools.partial(final_metrics, records)
    lines = [
        "| task | dev metric | sesame default | Trainer | Trainer at its best | sesame best recipe | CPU time to the "
        "best Trainer's final metric (fastest sesame arm whose metric holds, one machine) | published, other small encoders |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for task in ORDER:
        main = next((r["main_metric"] for r in records if r["task"] == task), None)
        metric = main.removeprefix("val_").replace("matthews_correlation", "MCC") if main else "—"
        best = points(final(task, "sesame_best")) if task in SWEEP_TASKS else "(no sweep)"
        at_best = points(final(task, SPEED_REF)) if final(task, SPEED_REF) else "not run"
        lines.append(f"| {TASKS[task]['label']} | {metric} | {points(final(task, 'sesame'))} | {points(final(task, 'hf'))} | "
                     f"{at_best} | {best} | {speed_column(records, task, tta)} | {PUBLISHED[task]} |")
    return "\n".join([*README_INTRO, "", *lines, "", *ner_test_lines(records), *[note + "  " for note in PUBLISHED_NOTES[:-1]],
                      PUBLISHED_NOTES[-1], "", *goal_lines(records), "", *rebuild_lines(records)])


def speed_column(records: list[dict[str, Any]], task: str, tta: dict[str, list[dict[str, Any]]]) -> str:
    """The speed cell of a task: the fastest held arm's ratio to the Trainer at its best, or why there is none."""
    if not final_metrics(records, task, SPEED_REF):
        return "not measured against the Trainer at its best"
    rows = [row for arm in SPEED_GOAL_ARMS for row in tta[arm] if row["task"] == task]
    fastest = fastest_held_arm(records, task, tta)
    if fastest is not None:
        return speed_cell(fastest)
    if rows and not any(row["same_machine"] for row in rows):
        return "not comparable: the arms ran on different machines"
    return "not reached with the metric held" if rows else "running"


def ner_test_lines(records: list[dict[str, Any]]) -> list[str]:
    """The NER tasks' test F1 under the table (the best dev epoch's model, as the report gives it); none before any
    NER run has a test score."""
    test_f1 = {task: {arm: arm_points(records, task, arm, lambda r: r["best"].get("test_f1")) for arm in ("sesame", "hf")}
               for task in ORDER}
    cells = [f"{TASKS[task]['label']} sesame {points(f1['sesame'])}, Trainer {points(f1['hf'])}"
             for task, f1 in test_f1.items() if f1["sesame"] or f1["hf"]]
    return [f"Test F1 of the NER tasks (the best dev epoch's model): {'; '.join(cells)}.", ""] if cells else []


#: What the README's section says before its table (part of the rendered section, so it cannot drift from it).
README_INTRO = [
    "Every task trained on its whole training set with the default encoder (all-MiniLM-L6-v2), scored on the "
    "official dev set (NER also on test), side by side with transformers' `Trainer` (`AutoModelFor...` on sesame's "
    "own examples and batches, with the same seeds, epochs, learning rate, batch size, warm-up, weight decay and "
    "clipping, scored by sesame's scorer). One preset per task holds the recipe, run_glue / run_ner / run_qa style: "
    "3 epochs GLUE and NER, 2 SQuAD, SQuAD at 384 tokens with stride 128. One run is "
    "`sesame-train +experiment=full_<task> seed=<k>`; the study runs unit by unit, each resumable where it stopped "
    "(`--help` lists the options; `benchmarks/README.md` says more):",
    "",
    "```bash",
    "python benchmarks/full_data_study.py --tasks rte --arms sesame,hf --out /tmp/study   # needs $SESAME_DATA_DIR/rte",
    "```",
    "",
    "`--report --out <folder>` writes the full report, `docs/results/full_data_study.md` (per-epoch dev curves "
    "against CPU time, costs, memory, the recipe sweeps chosen on held-out training data), and each run's record "
    "under `docs/results/full_data_study/runs/` (config, seed, commit, versions, per-validation metrics and times); "
    "`--readme` writes this section from those records. Figures are points, mean ± std over seeds (their count in "
    "brackets). `Trainer` trains as transformers' reference scripts do (fp32, randomly ordered batches); `Trainer at "
    "its best` (`hf_fast`) turns on its own length grouping and bf16, the switches that match sesame's speed arms. "
    "The CPU ratio is sesame's CPU time until its dev curve first reaches the final metric of the Trainer at its best, "
    "over that Trainer's CPU time to the same point, both arms validated at the same points and run on one machine.",
]


#: The study's goals. The speed goal counts the arms sesame ships on the preset's recipe (not the sweep's winner,
#: whose choice cost a sweep): the fastest of them whose dev metric holds, against the Trainer at its best.
SPEED_GOAL_ARMS = ("sesame", "sesame_fast", "sesame_grouped")
SPEED_GOAL_RATIO, SPEED_GOAL_TASKS, BEST_GOAL_POINTS = 0.7, 5, 1.0


def holds(mine: list[float], ref: list[float]) -> tuple[float, float]:
    """(mean of ``mine`` − mean of ``ref``, the shortfall allowed) in points: one std of ``ref``, at most 1 point
    (1 point where ``ref`` has a single seed and no std)."""
    allowed = min(statistics.stdev(ref), 1.0) if len(ref) > 1 else 1.0
    return statistics.fmean(mine) - statistics.fmean(ref), allowed


def metric_holds(records: list[dict[str, Any]], task: str, arm: str, ref_arm: str = "hf") -> bool:
    """Whether ``arm``'s final dev metric on ``task`` holds against ``ref_arm``'s (goal 1's rule, see ``holds``)."""
    mine, ref = final_metrics(records, task, arm), final_metrics(records, task, ref_arm)
    if not mine or not ref:
        return False
    gap, allowed = holds(mine, ref)
    return gap >= -allowed


def speed_arm_reaches(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per speed-goal arm, its rows of ``mean_time_to_accuracy`` against the Trainer at its best."""
    return {arm: mean_time_to_accuracy(records, arm) for arm in SPEED_GOAL_ARMS}


def fastest_held_arm(records: list[dict[str, Any]], task: str,
                     tta: dict[str, list[dict[str, Any]]]) -> tuple[float, str] | None:
    """Goal 2's cell: (CPU ratio, arm) of the speed-goal arm that reaches the best Trainer's final metric soonest
    (``goal_ratio``: one machine) among those whose own final metric holds against it; None when none does (yet)."""
    speeds = [(goal_ratio(row), arm) for arm in SPEED_GOAL_ARMS for row in tta[arm]
              if row["task"] == task and goal_ratio(row) is not None and metric_holds(records, task, arm, SPEED_REF)]
    return min(speeds) if speeds else None


def speed_cell(fastest: tuple[float, str]) -> str:
    """"0.96x `sesame_fast`": goal 2's figure for a task."""
    return f"{fastest[0]:.2f}x `{fastest[1]}`"


def training_rss(records: list[dict[str, Any]], task: str, arm: str, ref_arm: str = "hf") -> tuple[float, float] | None:
    """(``arm``'s, the Trainer's) peak RSS in MiB while training (up to the first validation), the highest seed of
    each; None while either has no run. The whole-run peak would favour sesame: the Trainer arm's scoring loads
    each epoch's saved model."""
    def peak(name: str) -> float | None:
        values = [r["peak_rss_before_eval_mib"] for r in records
                  if r["task"] == task and r["arm"] == name and r.get("peak_rss_before_eval_mib")]
        return max(values) if values else None

    mine, ref = peak(arm), peak(ref_arm)
    return (mine, ref) if mine and ref else None


def rss_cell(peaks: tuple[float, float]) -> str:
    """"1.04x (+84 MiB)": a training peak against the Trainer's."""
    return f"{peaks[0] / peaks[1]:.2f}x ({peaks[0] - peaks[1]:+.0f} MiB)"


def goal_lines(records: list[dict[str, Any]]) -> list[str]:
    """The study's three goals checked on the run records, with the numbers: a table per task and one verdict
    per goal (met, missed, or pending while units it needs are running or were never measured)."""
    final = functools.partial(final_metrics, records)
    tta = speed_arm_reaches(records)
    rows, quality, fast, best, memory = [], {}, {}, {}, {}
    for task in ORDER:
        complete = lambda arm: len(final(task, arm)) >= TASKS[task]["seeds"]  # noqa: E731
        running = "" if complete("sesame") and complete("hf") else " (running)"
        first = "running"
        if final(task, "sesame") and final(task, "hf"):
            gap, allowed = holds(final(task, "sesame"), final(task, "hf"))
            first = f"{gap:+.2f} (≥ -{allowed:.2f}: {'yes' if gap >= -allowed else '**no**'}){running}"
            if not running:
                quality[task] = gap >= -allowed
        fastest = fastest_held_arm(records, task, tta)
        timed = [row for arm in SPEED_GOAL_ARMS for row in tta[arm] if row["task"] == task and row["same_machine"]]
        # settled: every seed of the best Trainer and of each arm timed beside it on one machine
        settled = complete(SPEED_REF) and bool(timed) and all(row["seeds"] >= TASKS[task]["seeds"] for row in timed)
        second = speed_cell(fastest) if fastest else speed_column(records, task, tta)
        if fastest and fastest[0] <= SPEED_GOAL_RATIO and settled:
            fast[task] = True
        elif settled:
            fast[task] = False
        elif final(task, SPEED_REF) and timed:
            second += " (running)"
        third = "—"
        if task in SWEEP_TASKS:
            third = "running"
            if final(task, "sesame_best") and final(task, "hf"):
                gap = statistics.fmean(final(task, "sesame_best")) - statistics.fmean(final(task, "hf"))
                done = complete("sesame_best") and complete("hf")
                third = f"{gap:+.2f}" + ("" if done else " (running)")
                if done:
                    best[task] = gap
        rss = training_rss(records, task, "sesame")
        fourth = rss_cell(rss) if rss else "running"
        fast_rss = training_rss(records, task, fastest[1], SPEED_REF) if fastest else None
        if rss and fast_rss:
            fourth += f"; {fastest[1]} {rss_cell(fast_rss)} the best Trainer's"
        if rss and not running:
            memory[TASKS[task]["label"]] = rss
        rows.append(f"| {TASKS[task]['label']} | {first} | {second} | {third} | {fourth} |")

    def verdict(done: int, needed: int, met: bool | None) -> str:
        return ("pending" if met is None else "**met**" if met else "**missed**") + f" ({done} of {needed} tasks settled)"

    n = len(ORDER)
    passed = sum(quality.values())
    goal1 = False if passed < len(quality) else (True if len(quality) == n else None)
    reached = sum(fast.values())
    goal2 = True if reached >= SPEED_GOAL_TASKS else (False if reached + n - len(fast) < SPEED_GOAL_TASKS else None)
    mean_best = statistics.fmean(best.values()) if best else None
    goal3 = (mean_best >= BEST_GOAL_POINTS) if len(best) == len(SWEEP_TASKS) else None
    failed = [TASKS[t]["label"] for t, ok in quality.items() if not ok]
    above = [f"{t} {rss_cell(peaks)}" for t, peaks in memory.items() if peaks[0] > peaks[1]]
    lighter = (f"on {len(memory) - len(above)} of {len(memory)} settled tasks" + (f"; above on {', '.join(above)}" if above else "")
               if memory else "pending")
    return [
        "Goals, checked on these run records (points; the allowed shortfall is the Trainer's std, at most 1 point). "
        "The speed column is measured against the Trainer at its best (`hf_fast`: its own length grouping and bf16, "
        "validated every half epoch as `sesame_fast` is): the fastest of the " + ", ".join(f"`{a}`" for a in SPEED_GOAL_ARMS)
        + " arms whose dev metric holds against it by the same rule, its mean CPU time at the first validation where "
        "its dev curve averaged over its seeds reaches the mean of that Trainer's final metrics, over that Trainer's mean "
        "CPU time to the same point; only validations both made count, and only units run on one machine (one boot, one "
        "processor fingerprint) are divided:", "",
        "| task | sesame default − Trainer | CPU time to the best Trainer's final metric | best recipe − Trainer "
        "| peak RSS while training / the Trainer's |",
        "|---|---|---|---|---|", *rows, "",
        f"1. sesame default ≥ the Trainer within the allowed shortfall on every task: {verdict(len(quality), n, goal1)}"
        + (f"; not on {', '.join(failed)}" if failed else "") + ".",
        f"2. ≤ {SPEED_GOAL_RATIO}x the best Trainer's CPU time on ≥ {SPEED_GOAL_TASKS} of {n} tasks: "
        f"{verdict(len(fast), n, goal2)}; on {reached}" + (" so far" if len(fast) < n else "")
        + (f" ({', '.join(TASKS[t]['label'] for t, ok in fast.items() if ok)})" if reached else "") + ".",
        f"3. best recipe ≥ {BEST_GOAL_POINTS:g} point over the Trainer, averaged over the {len(SWEEP_TASKS)} GLUE tasks: "
        f"{verdict(len(best), len(SWEEP_TASKS), goal3)}"
        + (f"; {mean_best:+.2f}" + (" over the finished ones" if len(best) < len(SWEEP_TASKS) else "")
           if mean_best is not None else "") + ".",
        "", f"Memory: sesame default's peak RSS while training (up to the first validation, the highest seed) "
        f"≤ the Trainer's: {lighter}.",
        "", "Causes traced:", "", *(f"- {cause}" for cause in TRACED_CAUSES),
    ]


#: What a missed or slow cell was traced to (profile or ablation, with the document that shows it).
TRACED_CAUSES = [
    ("Two machines: the study's units ran on a machine booted before 2026-12-04T19:18 and on a fresh one since, and the "
     "same work costs 1.59x the CPU on the second. The Trainer's CoLA seed 1, rerun there on the same batches, "
     "reproduced the committed run's dev metrics to 1e-7 in 509.6 CPU s against 320.2 s; the load beside a unit moves "
     "step CPU by 3% (`docs/results/full_data_study/machines/README.md`). So a CPU ratio between units of two machines "
     "is not a speed: attempts now record their machine (boot and processor fingerprint), and the speed column "
     "divides only the times of units that ran on one machine."),
    ("The Trainer's own speed switches: the first speed column compared `sesame_fast` (length-grouped batches, bf16) "
     "with the `hf` arm, whose grouping and bf16 were off, and read 0.30x (SQuAD) to 0.69x (WNUT-17). The Trainer has "
     "both switches (`train_sampling_strategy=\"group_by_length\"`, `bf16=True` with `use_cpu=True`); turned on "
     "(`hf_fast`) on MRPC it took 3.3 CPU minutes against `sesame_fast`'s 4.4 from outside. Those ratios measured "
     "switches, not sesame, and are withdrawn: the column now divides by `hf_fast`."),
    ("sesame's bf16 arms slower than the Trainer's bf16: under `bf16-mixed` sesame fell back to the per-tensor AdamW "
     "(Lightning refuses to clip a fused optimiser's gradients, for fp16's GradScaler; bf16 has none), a fixed ~0.12 s "
     "per one-thread step, 1.5x the Trainer at its best per SST-2 example; bf16 now keeps the fused kernel "
     "(`docs/results/bf16_fused_adamw.md`). And the "
     "pad multiple of 32 doubles the tokens of short grouped batches (SST-2: 2.00x the Trainer's): `sesame_grouped` "
     "(grouped, bf16, no pad multiple) is the arm that matches `hf_fast`."),
    ("CoLA, `sesame_fast` slower than the plain arm (7.7-7.8 against 5.4-5.5 CPU minutes): padding each length-grouped "
     "batch to a multiple of 32 tokens. CoLA's sentences are about 11 tokens: grouped batches are 2% padding, padded "
     "to 32 they are 64%. Per training step against the Trainer: grouping alone 0.57x, grouped and padded 1.46x, bf16 "
     "alone 0.78x, all three (the arm) 1.05x; on SST-2 0.30x, 0.85x, 0.69x and 0.56x "
     "(`docs/results/fast_arm_ablation.md`, from `benchmarks/train_speed.py`)."),
    ("RTE, `sesame_grouped` (the fast arm without the pad multiple) is no speed arm for long pairs: 5.0-5.3 CPU minutes "
     "against `sesame_fast`'s 3.6-3.9, and a peak RSS of 3242-3379 MiB, 1.18-1.23x the Trainer's 2728-2752 (`sesame_fast` "
     "2269-2388): grouped batches padded to their own longest come in many shapes, and the allocator keeps memory for "
     "each (`docs/results/peak_rss_allocator.md`). The pad multiple pays on long inputs; on CoLA's short sentences "
     "(above) it does not."),
    ("SST-2, the best recipe under the Trainer (-0.34) while it led the sweep by 1.8 points: the sweep's held-out "
     "split is 59% text that its training part holds (1179 of 2000 rows are phrases of training sentences; 2 of the "
     "872 dev sentences occur in any training example), yet the winner `mean_1e-4` leads also on the other 821 rows "
     "(0.9111 against the preset's `pooler_2e-5` 0.8952), so the overlap did not pick it. On dev every SST-2 arm "
     "lands within 5 of 872 sentences (sesame 777, sesame_best 779, the Trainer and sesame_fast 782), one seed each "
     "(`docs/results/sst2_holdout_overlap.md`, from `benchmarks/holdout_overlap.py`)."),
    ("Memory, sesame default above the Trainer while training on MRPC (+84 MiB), STS-B (+132 MiB) and CoLA (+1 MiB): "
     "glibc's heap, not sesame. One epoch of MRPC on the same batches, twice per arm: sesame 2260 and 2326 MiB, the Trainer 2287 and "
     "2205 (the same work moves 66-82 MiB between processes); with `MALLOC_MMAP_THRESHOLD_=65536` 1703 against 1710, "
     "and sesame starts training 11 MiB lower (`docs/results/peak_rss_allocator.md`)."),
]


#: Overrides of the study's bookkeeping, not of the model: left out of the rebuild commands.
BOOKKEEPING = ("trainer.enable_progress_bar=", "trainer.enable_model_summary=", "checkpoint.every_n_train_steps=", "resume=")


def rebuild_lines(records: list[dict[str, Any]]) -> list[str]:
    """The command that rebuilds each task's best sesame model (the run of any sesame arm with the highest final
    dev metric): the models stay out of git, their recipes do not."""
    lines = ["The best sesame run per task (highest final dev metric of any sesame arm); its model is not in git, "
             "this rebuilds it (`SESAME_DATA_DIR` pointing at the data, default `../shared/data`):", "", "```bash"]
    for task in ORDER:
        runs = [r for r in records if r["task"] == task and r["arm"].startswith("sesame")
                and r["final"].get(r["main_metric"]) is not None]
        if runs:
            r = max(runs, key=lambda x: x["final"][x["main_metric"]])
            overrides = [o for o in r["overrides"] if not o.startswith(BOOKKEEPING)]
            metric = r["main_metric"].removeprefix("val_")
            folder = TASKS[task]["files"][0].split("/")[0]  # the README's command check wants it named
            lines.append(f"sesame-train {' '.join(overrides)} hydra.run.dir=outputs/full/{task}   "
                         f"# needs $SESAME_DATA_DIR/{folder}; {r['arm']}, {metric} "
                         f"{in_points(task, r['final'][r['main_metric']]):.2f}")
    return [*lines, "```"]


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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    if not args.quick and not args.readme:  # a committed run is a finished unit, also on a machine that never ran it
        restored = restore_from_records(args)
        if restored:
            print(f"[study] restored {len(restored)} finished unit(s) into {args.base_out} from {RUN_RECORDS.relative_to(REPO)}",
                  flush=True)
    if args.plan:
        for i, unit in enumerate(plan(args), 1):
            print(f"{i:3d} {unit['task']:10s} {unit['arm']:12s} seed {unit['seed']}: {unit_state(unit_dir(args.out, unit))}")
        return
    if args.readme:
        table, readme = readme_table(load_records()), README.read_text(encoding="utf-8")
        if args.check:
            same = section_in(readme, README_BEGIN, README_END) == table
            print("README table is up to date" if same else "README table differs: run --readme")
            sys.exit(0 if same else 1)
        README.write_text(with_section(readme, README_BEGIN, README_END, table, "Full-data results"), encoding="utf-8")
        print(f"wrote the study's table into {README}")
        return
    if args.report:
        path = write_report(args, args.report_file or (args.base_out / "report" / "full_data_study.md" if args.quick else DEFAULT_REPORT))
        print(f"wrote {path}")
        return
    run_study(args)
    if args.quick:
        units = plan(args)
        results = [json.loads((unit_dir(args.out, u) / "result.json").read_text()) for u in units
                   if (unit_dir(args.out, u) / "result.json").is_file()]
        expected = len(units)
        problems = [f"{len(results)} of {expected} units finished"] if len(results) != expected else []
        for r in results:
            if len(r["attempts"]) < 2:
                problems.append(f"{r['task']}/{r['arm']}: was not resumed ({len(r['attempts'])} attempt)")
            if not r["history"] or r["final"].get(r["main_metric"]) is None:
                problems.append(f"{r['task']}/{r['arm']}: no dev metric")
        for t in time_to_accuracy(results):
            if not t["same_batches"]:
                problems.append(f"{t['task']}: the arms trained on different batches")
        print(f"[quick] report: {args.base_out / 'report' / 'full_data_study.md'}")
        if problems:
            sys.exit("[quick] FAILED: " + "; ".join(problems))
        mirrored = [a for a in args.arms if ARMS[a]["side"] == "sesame" and ARMS[a].get("mirrored", True)]
        print(f"[quick] passed: {len(results)} units, each killed once mid-run and resumed"
              + (f"; {', '.join(mirrored)} and hf trained on the same batches" if mirrored and "hf" in args.arms and not args.sweep else ""))


if __name__ == "__main__":
    main()
