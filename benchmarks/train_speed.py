"""Training speed: sesame against a minimal reference loop on the transformers ``Trainer``, same model, same data.

Both sides fully fine-tune the same encoder folder (default MiniLM-L6) in fp32 on exactly the same
training examples: the reference reads the windows / sentences that sesame's own data module built
(``dm.setup("fit")``, its train split), so tokenisation, windowing (SQuAD ``doc_stride``, NER
sentence windows) and labels are identical. The reference mirrors sesame's optimiser as configured
(``conf/finetune/full.yaml``, ``tasks/encoders/finetune.py`` ``build_optimizer``): AdamW with the encoder at
``finetune.encoder_lr`` and the head (and, for SST-2, the pooler) at ``finetune.head_lr``, weight
decay on all but biases and LayerNorm weights, linear warm-up over ``int(warmup_ratio * steps)``
steps then linear decay, gradient clipping at ``trainer.gradient_clip_val``, the same seed, batch
size and logging interval. The models are the same network: SST-2 runs sesame with
``pooling=pooler`` (BERT's pooler + dropout + linear, what ``AutoModelForSequenceClassification``
is); SQuAD uses ``AutoModelForQuestionAnswering``, WNUT-17 ``AutoModelForTokenClassification``.

Arms (``--arms``; the reference is ``hf``):
  sesame          sesame-train's own code (``tasks/runs/runner.py`` ``train``), with ``--sesame-override``s
  sesame_grouped  the same with ``data.group_by_length=true``
  sesame_grouped_padded  grouped, and batches padded to a multiple of 32 tokens (``data.pad_to_multiple_of=32``)
  sesame_bf16     ``sesame`` with ``trainer.precision=bf16-mixed``
  sesame_grouped_bf16  grouped and bf16, no pad multiple: the full-data study's ``sesame_grouped`` arm
  sesame_fast     grouped, padded to 32 and bf16: the full-data study's speed arm (what it costs, setting by setting)
  hf              Trainer, dynamic padding (pad to the batch's longest), and sesame's shuffle: the
                  two sides train on the very same batches, in the same order
  hf_max_length   Trainer, every batch padded to ``data.max_seq_length``, same batches
  hf_grouped      Trainer with ``train_sampling_strategy="group_by_length"`` (its LengthGroupedSampler),
                  dynamic padding (``--hf-group-by-length`` adds it)
  hf_fused        ``hf`` with ``optim=adamw_torch_fused`` (transformers' default optimiser on torch >= 2.8),
                  whatever sesame uses (``--hf-optim`` sets the other reference arms' optimiser)
  hf_fast         the Trainer at its best on a CPU: its own length grouping (``train_sampling_strategy=
                  "group_by_length"``, batches padded to their longest) and ``bf16=True, use_cpu=True``: the
                  switches that match sesame_fast's. Each run records what took effect (the training sampler's
                  class, the autocast state and dtype inside the model's forward) in ``switches``

Every training runs in its own subprocess (so peak RSS is per run), ``--steps`` optimiser steps, and
the arms of one task run back to back in interleaved repetitions (rep 1 in the listed order, rep 2
reversed, ...), so a change in machine load hits both sides alike. Per step, both sides time from
batch start to batch end (forward, loss, backward, clipping, optimiser and scheduler step): a
Lightning callback on sesame's side, a TrainerCallback on the reference's; the first
``--warmup-steps`` are left out. Reported per run: median and mean step time, the loop time per step
(wall time between the end of the last warm-up step and the end of the last step, which adds data
loading, collation and logging), tokens/s (real = non-pad tokens, and padded = tokens computed),
examples/s, the process's peak RSS at the end of training (``ru_maxrss``, before any evaluation), and
the dev metric of the final weights, scored for both sides by sesame's evaluation path
(``tasks/runs/evaluation.py`` ``evaluate``; the reference's model is saved as a Hugging Face folder and
read back like ``sesame-eval model=<folder>``), on ``data.max_eval_examples`` examples, in the first
``--eval-reps`` repetitions only. Ratios are arm / ``hf`` per repetition, then the median (and range)
over repetitions.

    python benchmarks/train_speed.py --quick                        # pipeline check: shipped slices, 3 steps
    python benchmarks/train_speed.py --tasks sst2,squad256,wnut17 --steps 30 --reps 2 --threads 1
    python benchmarks/train_speed.py --tasks squad256 --hf-group-by-length --arms sesame,sesame_grouped,hf
    python benchmarks/train_speed.py --tasks squad256,squad384 --skip squad256:hf_max_length --skip squad384:hf_max_length
    python benchmarks/train_speed.py --tasks squad384 --train-windows with_answer --batch-size 12
    python benchmarks/train_speed.py --sesame-override data.num_workers=1 --override data.max_train_examples=2000

Data comes from $SESAME_DATA_DIR (default ../shared/data; see its SOURCES.md): SST-2, CoLA and MRPC train/dev, the
SQuAD v1.1 train subset (first ``--squad-questions`` questions, default 1,000; dev = the official dev
set) and WNUT-17 (its test set is not read). Writes ``--out`` (default
outputs/benchmarks/train_speed/): ``train_speed.md`` (the tables), ``train_speed.json`` (every raw
number, versions, threads, settings) and one folder per run (run folders, child logs; checkpoints and
saved models are deleted unless ``--keep-models``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import compose, require_data_files

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

TASKS: dict[str, dict[str, Any]] = {
    "sst2": {
        "overrides": ["task=glue", "data=sst2", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["sst2/train.tsv", "sst2/dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "SST-2 (short sentences)",
    },
    "cola": {
        "overrides": ["task=glue", "data=cola", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["cola/in_domain_train.tsv", "cola/in_domain_dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "CoLA (very short sentences)",
    },
    "mrpc": {
        "overrides": ["task=glue", "data=mrpc", "pooling=pooler"],
        "quick": ["task=glue", "data=sst2_slice", "pooling=pooler"],
        "files": ["mrpc/train.tsv", "mrpc/dev.tsv"], "hf": "sequence", "batch_size": 32,
        "label": "MRPC (sentence pairs)",
    },
    "squad256": {
        "overrides": ["task=squad_v1", "data=squad_v1", "data.max_seq_length=256", "data.doc_stride=128"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=128"],
        "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"], "hf": "qa", "batch_size": 12,
        "label": "SQuAD v1.1, 256-token windows, stride 128", "squad": True,
    },
    "squad384": {
        "overrides": ["task=squad_v1", "data=squad_v1", "data.max_seq_length=384", "data.doc_stride=128"],
        "quick": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=384", "data.doc_stride=128"],
        "files": ["squad_v1.1/train-subset-44articles.json", "squad_v1.1/dev-v1.1.json"], "hf": "qa", "batch_size": 12,
        "label": "SQuAD v1.1, 384-token windows, stride 128", "squad": True,
    },
    "wnut17": {
        "overrides": ["task=ner", "data=wnut17", "data.test_file=null"],
        "quick": ["task=ner", "data=wnut17_slice"],
        "files": ["wnut17/wnut17train.conll", "wnut17/emerging.dev.conll"], "hf": "token", "batch_size": 32,
        "label": "WNUT-17 NER (tweets)",
    },
}
#: What sesame ships for speed, as the full-data study's sesame_fast arm trains with it: length-grouped
#: batches padded to a multiple of 32 tokens, bf16 autocast.
GROUPED = "data.group_by_length=true"
FAST_SETTINGS = [GROUPED, "data.pad_to_multiple_of=32", "trainer.precision=bf16-mixed"]
#: FAST_SETTINGS less the pad multiple: grouped batches padded to their longest, bf16 (the study's sesame_grouped)
GROUPED_BF16_SETTINGS = [s for s in FAST_SETTINGS if not s.startswith("data.pad_to_multiple_of=")]
#: arm -> how it trains. side: sesame | hf; padding: dynamic | max_length; order: sesame (the very
#: batches sesame trains on) | group_by_length (the Trainer's LengthGroupedSampler); optim: the
#: TrainingArguments optimiser (None: --hf-optim).
ARMS: dict[str, dict[str, Any]] = {
    "sesame": {"side": "sesame", "overrides": []},
    "sesame_grouped": {"side": "sesame", "overrides": [GROUPED]},
    "sesame_grouped_padded": {"side": "sesame", "overrides": [GROUPED, "data.pad_to_multiple_of=32"]},
    "sesame_bf16": {"side": "sesame", "overrides": ["trainer.precision=bf16-mixed"], "precision_mirrored": False},
    "sesame_grouped_bf16": {"side": "sesame", "overrides": GROUPED_BF16_SETTINGS, "precision_mirrored": False},
    # the full-data study's sesame_fast arm (benchmarks/full_data_study.py ARMS), less its validations
    "sesame_fast": {"side": "sesame", "overrides": FAST_SETTINGS, "precision_mirrored": False},
    "hf": {"side": "hf", "padding": "dynamic", "order": "sesame", "optim": None},
    "hf_max_length": {"side": "hf", "padding": "max_length", "order": "sesame", "optim": None},
    "hf_grouped": {"side": "hf", "padding": "dynamic", "order": "group_by_length", "optim": None},
    "hf_fused": {"side": "hf", "padding": "dynamic", "order": "sesame", "optim": "adamw_torch_fused"},
    # the Trainer with its own switches that match sesame_fast's (a fair speed baseline)
    "hf_fast": {"side": "hf", "padding": "dynamic", "order": "group_by_length", "optim": None, "bf16": True},
}
REFERENCE = "hf"


def length_grouped(arm: str) -> bool:
    """Whether ``arm`` trains on length-grouped batches (sesame's ``data.group_by_length``, the Trainer's sampler)."""
    return GROUPED in ARMS[arm].get("overrides", []) or ARMS[arm].get("order") == "group_by_length"


#: Inputs the Hugging Face models read, per kind of head.
HF_KEYS = {
    "sequence": ("input_ids", "attention_mask", "token_type_ids", "labels"),
    "qa": ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions"),
    "token": ("input_ids", "attention_mask", "token_type_ids", "labels"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--tasks", default="sst2,squad256,squad384,wnut17", help="comma-separated, from: " + ", ".join(TASKS))
    parser.add_argument("--arms", default="sesame,hf,hf_max_length",
                        help=f"comma-separated, from: {', '.join(ARMS)} (default: sesame,hf,hf_max_length; the "
                        f"reference for the ratios is {REFERENCE}, always run)")
    parser.add_argument("--skip", action="append", default=[], metavar="TASK:ARM",
                        help="leave one arm out for one task (repeatable), e.g. squad256:hf_max_length (SQuAD windows "
                        "mostly fill max_seq_length, so there it trains like hf)")
    parser.add_argument("--steps", type=int, default=30, help="optimiser steps per run (default 30)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of the timing (default 3)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (default 2)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="training batch size for every task (default: 12 for SQuAD, as in the issue; 32 for the GLUE tasks and WNUT-17)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads in every child (default: torch's). On a shared machine use 1")
    parser.add_argument("--train-windows", choices=("all", "with_answer"), default="all",
                        help="SQuAD training windows on both sides: all (those without the answer labelled [CLS], as "
                        "HF's run_qa and sesame's default do; default) or with_answer (only the windows that hold the answer)")
    parser.add_argument("--squad-questions", type=int, default=1000, help="SQuAD training questions (default 1,000)")
    parser.add_argument("--eval-examples", type=int, default=None,
                        help="data.max_eval_examples for the dev metric (default: 200 sentences for SST-2 and WNUT-17, "
                        "100 questions for SQuAD)")
    parser.add_argument("--eval-reps", type=int, default=1,
                        help="score the dev metric in the first N repetitions (default 1; later ones evaluate one "
                        "example, on both sides alike)")
    parser.add_argument("--encoder", default="minilm_l6", help="encoder alias or folder (default minilm_l6)")
    parser.add_argument("--hf-optim", default="auto",
                        help="TrainingArguments.optim of the reference arms (default auto: the torch AdamW "
                        "implementation sesame's build_optimizer picks, adamw_torch_fused when it uses the fused kernel, "
                        "else adamw_torch; transformers' own default is adamw_torch_fused)")
    parser.add_argument("--hf-group-by-length", action="store_true", help="add the hf_grouped arm")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for both sides (repeatable): data.* and the finetune / trainer settings "
                        "the reference mirrors, e.g. data.max_train_examples=2000")
    parser.add_argument("--sesame-override", action="append", default=[], metavar="KEY=VALUE",
                        help="Hydra override for the sesame arms only (repeatable), e.g. data.group_by_length=true")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/train_speed"), help="where results go")
    parser.add_argument("--keep-models", action="store_true", help="keep sesame checkpoints and the saved HF models")
    parser.add_argument("--quick", action="store_true",
                        help="pipeline check: shipped slices, 3 steps (1 warm-up), 1 repetition, 16 eval examples")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return args
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if args.hf_group_by_length and "hf_grouped" not in args.arms:
        args.arms.append("hf_grouped")
    if REFERENCE not in args.arms:
        args.arms.insert(1 if args.arms and ARMS.get(args.arms[0], {}).get("side") == "sesame" else 0, REFERENCE)
    for name, known, what in ((args.tasks, TASKS, "task"), (args.arms, ARMS, "arm")):
        unknown = [n for n in name if n not in known]
        if unknown:
            parser.error(f"unknown {what}(s) {unknown}; choose from {', '.join(known)}")
    bad = [s for s in args.skip if s.count(":") != 1 or s.split(":")[0] not in TASKS or s.split(":")[1] not in ARMS
           or s.split(":")[1] == REFERENCE]
    if bad:
        parser.error(f"--skip {bad}: use TASK:ARM with a known task and an arm other than {REFERENCE}")
    if args.quick:
        args.steps, args.warmup_steps, args.reps = min(args.steps, 3), 1, 1
        args.eval_examples = args.eval_examples or 16
        args.threads = args.threads or 1
    if not 0 <= args.warmup_steps < args.steps:
        parser.error(f"--warmup-steps {args.warmup_steps} must be below --steps {args.steps}")
    return args


# Configuration -----------------------------------------------------------------------------------
def data_overrides(args: argparse.Namespace, task: str, evaluate: bool) -> list[str]:
    """The overrides both sides compose with: task, data, encoder, batch size, evaluation size."""
    spec = TASKS[task]
    out = [*(spec["quick"] if args.quick else spec["overrides"]), f"encoder.name_or_path={args.encoder}",
           f"data.batch_size={args.batch_size or spec['batch_size']}"]
    if spec.get("squad"):
        if not args.quick:
            out.append(f"data.max_train_examples={args.squad_questions}")
        if getattr(args, "train_windows_available", True):
            out.append(f"data.train_windows={args.train_windows}")
    eval_examples = args.eval_examples or (100 if spec.get("squad") else 200)
    out.append(f"data.max_eval_examples={eval_examples if evaluate else 1}")
    return [*out, *args.override]


def trainer_overrides(base: Any, steps: int) -> list[str]:
    """Train ``steps`` optimiser steps, validate only after training (the runner does), quietly.
    ``+key=`` where conf/trainer/default.yaml has no such key (``max_steps`` is new there)."""
    def put(key: str, value: Any) -> str:
        return f"{'' if key in base.trainer else '+'}trainer.{key}={value}"

    return [put("max_steps", steps), "trainer.max_epochs=1000", put("check_val_every_n_epoch", 100000),
            "trainer.val_check_interval=1.0", "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false", "logger=csv"]


def settings_available(args: argparse.Namespace) -> dict[str, bool]:
    """Which optional data settings this sesame has (others are being added in parallel)."""
    found = {}
    squad = compose("config", ["task=squad_v1"])
    found["train_windows"] = "train_windows" in squad.data
    found["group_by_length"] = "group_by_length" in squad.data
    return found


def check_data(args: argparse.Namespace) -> None:
    require_data_files(TASKS, args.tasks, args.quick)


# What both sides record ----------------------------------------------------------------------------
def current_rss_mib() -> float | None:
    """The process's resident memory now (Linux ``/proc/self/statm``), else None."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class StepRecorder:
    """Per-step wall times, what each batch held, the learning rates, the optimiser's groups, RSS."""

    def __init__(self) -> None:
        self.step_seconds: list[float] = []
        self.step_cpu_seconds: list[float] = []  # CPU time of the process (all its threads) per step
        self.step_ends: list[float] = []
        self.examples: list[int] = []
        self.tokens: list[int] = []  # non-pad (attention_mask) tokens
        self.padded_tokens: list[int] = []  # tokens computed: batch x padded length
        self.lrs: list[list[float]] = []  # every param group's lr at the step's start
        self.groups: list[dict[str, Any]] = []
        self.train_start: float | None = None
        self.train_end: float | None = None
        self.rss_train_end_kib: int | None = None
        self._start = self._cpu_start = 0.0

    def begin_training(self, optimizer: Any, train_examples: int) -> None:
        self.train_start = time.perf_counter()
        self.rss_before_train = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, current_rss_mib())
        self.train_examples = train_examples
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the Trainer's
        self.groups = [{"lr": g.get("initial_lr", g["lr"]), "weight_decay": g["weight_decay"],
                        "tensors": len(g["params"]), "numel": sum(p.numel() for p in g["params"])}
                       for g in optimizer.param_groups]
        self.optimizer = f"{type(optimizer).__module__.split('.')[0]}.{type(optimizer).__name__}"
        self.optimizer_flags = {k: optimizer.defaults.get(k) for k in ("foreach", "fused", "eps", "betas")}
        self.optimizer_flags["betas"] = list(self.optimizer_flags["betas"] or [])

    def batch(self, batch: Any) -> None:
        mask = batch["attention_mask"]
        self.examples.append(int(mask.shape[0]))
        self.tokens.append(int(mask.sum()))
        self.padded_tokens.append(int(mask.numel()))

    def start(self, optimizer: Any) -> None:
        self.lrs.append([float(g["lr"]) for g in optimizer.param_groups])
        self._cpu_start = time.process_time()
        self._start = time.perf_counter()

    def end(self) -> None:
        now = time.perf_counter()
        self.step_cpu_seconds.append(time.process_time() - self._cpu_start)
        self.step_seconds.append(now - self._start)
        self.step_ends.append(now)

    def finish_training(self) -> None:
        self.train_end = time.perf_counter()
        self.rss_train_end_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.rss_now_train_end = current_rss_mib()

    def summary(self, warmup: int) -> dict[str, Any]:
        timed = self.step_seconds[warmup:]
        if not timed:
            raise RuntimeError(f"no timed steps: {len(self.step_seconds)} steps ran, {warmup} warm-up")
        loop_from = self.step_ends[warmup - 1] if warmup else self.train_start
        seconds = sum(timed)
        return {
            "steps_run": len(self.step_seconds), "warmup_steps": warmup, "step_seconds": self.step_seconds,
            "step_median_s": statistics.median(timed), "step_mean_s": statistics.fmean(timed),
            "step_cpu_seconds": self.step_cpu_seconds, "step_cpu_median_s": statistics.median(self.step_cpu_seconds[warmup:]),
            "loop_s_per_step": (self.step_ends[-1] - loop_from) / len(timed),
            "examples_per_step": self.examples, "tokens_per_step": self.tokens, "padded_tokens_per_step": self.padded_tokens,
            "tokens_per_s": sum(self.tokens[warmup:]) / seconds, "padded_tokens_per_s": sum(self.padded_tokens[warmup:]) / seconds,
            "examples_per_s": sum(self.examples[warmup:]) / seconds,
            # what grouped arms compare on: their batches differ, so per-step times do not
            "cpu_per_example_s": sum(self.step_cpu_seconds[warmup:]) / max(sum(self.examples[warmup:]), 1),
            "padding_share": 1 - sum(self.tokens) / max(sum(self.padded_tokens), 1),
            "train_examples": self.train_examples, "lrs": self.lrs, "param_groups": self.groups, "optimizer": self.optimizer, "optimizer_flags": self.optimizer_flags,
            "train_seconds": (self.train_end or 0) - (self.train_start or 0),
            "peak_rss_train_mib": (self.rss_train_end_kib or 0) / 1024,
            # where the memory goes: the peak and the resident size when training starts (data and model
            # built, optimiser made), and the resident size when it ends
            "peak_rss_before_train_mib": self.rss_before_train[0], "rss_train_start_mib": self.rss_before_train[1],
            "rss_train_end_mib": self.rss_now_train_end,
        }


# The sesame side -----------------------------------------------------------------------------------
def run_sesame(overrides: list[str], steps: int, warmup: int, run_dir: Path, precision_mirrored: bool = True) -> dict[str, Any]:
    """sesame's own training (``tasks/runs/runner.py`` ``train``) with a timing callback; its metrics.json.
    ``precision_mirrored=False``: an arm that times a precision the reference does not run (bf16)."""
    import lightning as L
    from sesame.tasks.runs import runner

    recorder = StepRecorder()

    class Timer(L.Callback):
        def on_train_start(self, trainer, module):
            recorder.begin_training(trainer.optimizers[0], len(trainer.datamodule.dataset("train")))
            recorder.attn = module.encoder.model.config._attn_implementation

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            recorder.batch(batch)
            recorder.start(trainer.optimizers[0])

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            recorder.end()

        def on_train_end(self, trainer, module):
            recorder.finish_training()

    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, extra_callbacks=None, **kw: build(
        cfg, run_dir, monitor, [*(extra_callbacks or []), Timer()], **kw)
    try:
        base = compose("config", overrides)
        cfg = compose("config", [*overrides, *trainer_overrides(base, steps)])
        check_mirrorable(cfg, precision=precision_mirrored)
        started = time.perf_counter()
        metrics = runner.train(cfg, run_dir)
        total = time.perf_counter() - started
    finally:
        runner.build_trainer = build
    main = str(cfg.task.main_metric)
    return {**recorder.summary(warmup), "metric": main, "metric_value": metrics.get(main), "metrics": metrics,
            "run_seconds": total, "attn_implementation": recorder.attn,
            "settings": settings_of(cfg)}


def check_mirrorable(cfg: Any, precision: bool = True) -> None:
    """The reference mirrors full fine-tuning in fp32 without gradient accumulation (``precision=False``:
    any precision, for an arm whose precision is the point and is reported as such)."""
    problems = []
    if cfg.finetune.mode != "full":
        problems.append(f"finetune.mode={cfg.finetune.mode}")
    if int(cfg.trainer.get("accumulate_grad_batches", 1)) != 1:
        problems.append(f"trainer.accumulate_grad_batches={cfg.trainer.accumulate_grad_batches}")
    if precision and str(cfg.trainer.precision) not in ("32-true", "32"):
        problems.append(f"trainer.precision={cfg.trainer.precision}")
    if cfg.get("fusion", {}).get("mode", "last") != "last":
        problems.append(f"fusion={cfg.fusion.mode}")
    if problems:
        raise SystemExit(f"the reference mirrors full fp32 fine-tuning of the last layer only, not {', '.join(problems)}")


def settings_of(cfg: Any) -> dict[str, Any]:
    """The settings both sides share, as the composed config has them."""
    f, t, d = cfg.finetune, cfg.trainer, cfg.data
    return {
        "encoder_lr": float(f.encoder_lr), "head_lr": float(f.head_lr), "weight_decay": float(f.weight_decay),
        "warmup_ratio": float(f.warmup_ratio), "adam_epsilon": float(f.adam_epsilon),
        "gradient_clip_val": None if t.gradient_clip_val is None else float(t.gradient_clip_val),
        "log_every_n_steps": int(t.log_every_n_steps), "seed": int(cfg.seed), "batch_size": int(d.batch_size),
        "max_seq_length": int(d.max_seq_length), "num_workers": int(d.num_workers),
        "train_windows": d.get("train_windows"), "group_by_length": d.get("group_by_length"),
        "max_train_examples": d.get("max_train_examples"), "max_eval_examples": d.get("max_eval_examples"),
        "pooling": cfg.get("pooling", {}).get("name"), "precision": str(t.precision),
    }


# The reference: transformers' Trainer ---------------------------------------------------------------
class HFExamples:
    """sesame's encoded training examples, as the dicts of lists an HF collator pads."""

    def __init__(self, source: Any, keys: tuple[str, ...]) -> None:
        self.source, self.keys = source, keys

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.source[i]
        return {k: (row[k].tolist() if hasattr(row[k], "tolist") else row[k]) for k in self.keys if k in row}


def hf_model(kind: str, path: str, cfg: Any, datamodule: Any) -> Any:
    """The transformers model of the task: ``sequence`` (GLUE; no label names: a 1-output regression, STS-B),
    ``token`` (NER) or ``qa``."""
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    if kind == "qa":
        return AutoModelForQuestionAnswering.from_pretrained(path)
    if kind != "token" and not cfg.data.get("label_names"):
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, problem_type="regression")
    names = list(datamodule.tag_names) if kind == "token" else list(cfg.data.label_names)
    cls = AutoModelForTokenClassification if kind == "token" else AutoModelForSequenceClassification
    return cls.from_pretrained(path, num_labels=len(names), id2label=dict(enumerate(names)),
                               label2id={n: i for i, n in enumerate(names)})


def head_parameter(model: Any, name: str) -> bool:
    """Whether sesame would train this parameter at ``finetune.head_lr``: everything outside the
    encoder, and BERT's pooler, which ``pooling=pooler`` copies into sesame's head."""
    prefix = getattr(model, "base_model_prefix", "")
    return not name.startswith(prefix + ".") or name.startswith(f"{prefix}.pooler.")


def sesame_optimizer(trainer: Any, head_lr: float) -> Any:
    """The optimiser sesame builds (``tasks/encoders/finetune.py`` ``build_optimizer``) for a transformers
    ``Trainer``'s model: the encoder at the Trainer's learning rate, the head (:func:`head_parameter`) at
    ``head_lr``, weight decay on the parameters the Trainer decays, its optimiser class and arguments."""
    decay = set(trainer.get_decay_parameter_names(trainer.model))
    named = [(n, p) for n, p in trainer.model.named_parameters() if p.requires_grad]
    groups = []
    for head, lr in ((False, trainer.args.learning_rate), (True, head_lr)):
        part = [(n, p) for n, p in named if head_parameter(trainer.model, n) == head]
        for decayed, wd in ((True, trainer.args.weight_decay), (False, 0.0)):
            params = [p for n, p in part if (n in decay) == decayed]
            if params:
                groups.append({"params": params, "lr": lr, "weight_decay": wd})
    optimizer_cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
    return optimizer_cls(groups, **kwargs)


def sesame_optim(cfg: Any) -> str:
    """The Trainer's name for the AdamW implementation sesame's ``build_optimizer`` builds (fused or not)."""
    from sesame.tasks.encoders.finetune import FinetuneSettings, build_optimizer
    from torch import nn

    optimizer, _ = build_optimizer(nn.Linear(2, 2), [], FinetuneSettings.from_config(cfg.finetune), 10)
    return "adamw_torch_fused" if optimizer.defaults.get("fused") else "adamw_torch"


def run_hf(overrides: list[str], steps: int, warmup: int, run_dir: Path, kind: str, padding: str, order: str,
           optim: str, save: bool = True, bf16: bool = False) -> dict[str, Any]:
    """Train the Hugging Face model on sesame's training examples with the ``Trainer`` (``bf16``: its own CPU bf16
    autocast); save it (``save``) into ``<run_dir>/hf_model``, a folder sesame-eval reads."""
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

    cfg = compose("config", overrides)
    check_mirrorable(cfg)
    settings = settings_of(cfg)
    optim = sesame_optim(cfg) if optim == "auto" else optim
    started = time.perf_counter()
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    cfg = config_with_data(cfg, datamodule)
    tokenizer = datamodule.tokenizer
    examples = HFExamples(datamodule.dataset("train"), HF_KEYS[kind])
    set_seed(settings["seed"])
    model = hf_model(kind, resolve_name_or_path(str(cfg.encoder.name_or_path)), cfg, datamodule)
    pad = {"padding": "max_length", "max_length": settings["max_seq_length"]} if padding == "max_length" else {}
    collator = (DataCollatorForTokenClassification(tokenizer, **pad) if kind == "token"
                else DataCollatorWithPadding(tokenizer, **pad))
    recorder = StepRecorder()
    switches = TrainerSwitches(model)

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, **kw):
            recorder.begin_training(optimizer, len(examples))

        def on_step_begin(self, args, state, control, optimizer=None, **kw):
            recorder.start(optimizer)

        def on_step_end(self, args, state, control, **kw):
            recorder.end()

        def on_train_end(self, args, state, control, **kw):
            recorder.finish_training()

    class ReferenceTrainer(Trainer):
        """The Trainer, with sesame's two learning rates and (order=sesame) sesame's batches."""

        def create_optimizer(self, model: Any = None) -> Any:
            if self.optimizer is None:
                self.optimizer = sesame_optimizer(self, settings["head_lr"])
            return self.optimizer

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            if order == "sesame":  # the very shuffle sesame's train loader draws (tasks/inputs/batching.py)
                return switches.sampler(ResumableShuffleSampler(len(train_dataset or self.train_dataset), datamodule.seed))
            return switches.sampler(super()._get_train_sampler(train_dataset))

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            recorder.batch(inputs)
            return super().training_step(model, inputs, num_items_in_batch)

    args = TrainingArguments(
        output_dir=str(run_dir / "hf_trainer"), max_steps=steps, per_device_train_batch_size=settings["batch_size"],
        learning_rate=settings["encoder_lr"], weight_decay=settings["weight_decay"],
        adam_epsilon=settings["adam_epsilon"], lr_scheduler_type="linear",
        warmup_steps=int(settings["warmup_ratio"] * steps),  # sesame: int(warmup_ratio * total steps)
        max_grad_norm=settings["gradient_clip_val"] or 0.0, optim=optim, seed=settings["seed"],
        **sampling_argument(TrainingArguments, order == "group_by_length"), **precision_arguments(bf16),
        logging_strategy="steps", logging_steps=settings["log_every_n_steps"], save_strategy="no",
        eval_strategy="no", report_to="none", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=settings["num_workers"], dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = ReferenceTrainer(model=model, args=args, train_dataset=examples, data_collator=collator,
                               processing_class=tokenizer, callbacks=[Timer()])
    trainer.train()
    total = time.perf_counter() - started
    folder = run_dir / "hf_model"
    if save:
        trainer.save_model(str(folder))  # model + tokenizer: what sesame-eval model=<folder> reads
    return {**recorder.summary(warmup), "run_seconds": total, "hf_model": str(folder),
            "attn_implementation": model.config._attn_implementation, "settings": settings, "hf_optim": optim,
            "switches": switches.check(order == "group_by_length", bf16)}


def precision_arguments(bf16: bool) -> dict[str, Any]:
    """TrainingArguments for the Trainer's own bf16 autocast; on a machine without CUDA it needs ``use_cpu``."""
    import torch

    return {"bf16": True, "use_cpu": not torch.cuda.is_available()} if bf16 else {}


class TrainerSwitches:
    """What the Trainer's speed switches did, read from the run itself rather than from its arguments: the class of
    the sampler it trained with, and, inside the model's first training forward, the autocast state and dtype and
    the dtype a linear layer computed in. The hook sits on the first ``nn.Linear``, not on the model: accelerate puts
    autocast around the model's ``forward`` only, so a hook on the model itself would run outside it.
    ``check`` fails the run when a switch that was asked for did not take effect."""

    def __init__(self, model: Any) -> None:
        import torch

        self.seen: dict[str, Any] = {}
        linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        self.handle = linear.register_forward_hook(self.forward_hook)

    def sampler(self, sampler: Any) -> Any:
        self.seen["sampler"] = type(sampler).__name__
        return sampler

    def forward_hook(self, module: Any, inputs: Any, output: Any) -> None:
        import torch

        if not module.training or "autocast" in self.seen:
            return
        device = output.device.type
        self.seen["autocast"] = torch.is_autocast_enabled(device)
        self.seen["autocast_dtype"] = str(torch.get_autocast_dtype(device)).removeprefix("torch.")
        self.seen["linear_dtype"] = str(output.dtype).removeprefix("torch.")

    def check(self, grouped: bool, bf16: bool) -> dict[str, Any]:
        """The switches seen; raises when grouping or bf16 was asked for and did not happen."""
        self.handle.remove()
        print(f"[hf] switches in effect: sampler {self.seen.get('sampler')}, autocast {self.seen.get('autocast')} "
              f"({self.seen.get('autocast_dtype')}), a linear layer computed in {self.seen.get('linear_dtype')}", flush=True)
        if grouped and self.seen.get("sampler") != "LengthGroupedSampler":
            raise RuntimeError(f"length grouping was asked for, the Trainer sampled with {self.seen.get('sampler')}")
        if bf16 and not (self.seen.get("autocast") and self.seen.get("linear_dtype") == "bfloat16"):
            raise RuntimeError(f"bf16 was asked for, the forward ran with autocast {self.seen}")
        return dict(self.seen)


def sampling_argument(arguments: type, grouped: bool) -> dict[str, Any]:
    """Length-grouped sampling in this transformers' TrainingArguments (5.x: train_sampling_strategy)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(arguments)}
    if "train_sampling_strategy" in names:
        return {"train_sampling_strategy": "group_by_length" if grouped else "random"}
    return {"group_by_length": grouped}


def evaluate_hf(overrides: list[str], folder: Path, run_dir: Path) -> tuple[str, dict[str, Any]]:
    """Score a saved HF model with sesame's evaluation path (``sesame-eval model=<folder>``)."""
    from sesame.tasks.runs.evaluation import evaluate

    cfg = compose("eval", [*overrides, f"model={folder.resolve()}", "trainer.enable_progress_bar=false",
                           "trainer.enable_model_summary=false"])
    return str(cfg.task.main_metric), evaluate(cfg, run_dir)


def child(spec_file: Path) -> None:
    """One run (``--child``): set the threads, train one arm, evaluate, write ``result.json``."""
    spec = json.loads(spec_file.read_text())
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    run_dir = Path(spec["run_dir"])
    arm = ARMS[spec["arm"]]
    if arm["side"] == "sesame":
        result = run_sesame([*spec["overrides"], *arm["overrides"], *spec["sesame_overrides"]], spec["steps"],
                            spec["warmup"], run_dir / "sesame_run", precision_mirrored=arm.get("precision_mirrored", True))
        if not spec["evaluate"]:
            result["metric_value"] = None
    else:
        result = run_hf(spec["overrides"], spec["steps"], spec["warmup"], run_dir, TASKS[spec["task"]]["hf"],
                        arm["padding"], arm["order"], arm["optim"] or spec["hf_optim"], save=spec["evaluate"],
                        bf16=arm.get("bf16", False))
        result["metric"], result["metrics"], result["metric_value"] = None, {}, None
        if spec["evaluate"]:
            started = time.perf_counter()
            result["metric"], result["metrics"] = evaluate_hf(spec["overrides"], Path(result["hf_model"]), run_dir / "eval")
            result["metric_value"] = result["metrics"].get(result["metric"])
            result["eval_seconds"] = time.perf_counter() - started
    result.update(task=spec["task"], arm=spec["arm"], rep=spec["rep"], position=spec["position"],
                  threads=torch.get_num_threads(), peak_rss_end_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))


# The parent: interleaved runs, ratios, tables ------------------------------------------------------
def run_child(args: argparse.Namespace, task: str, arm: str, rep: int, position: int) -> dict[str, Any]:
    run_dir = (args.out / task / f"rep{rep}_{arm}").resolve()
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    evaluate = rep <= args.eval_reps
    spec = {"task": task, "arm": arm, "rep": rep, "position": position, "steps": args.steps, "warmup": args.warmup_steps,
            "threads": args.threads, "overrides": data_overrides(args, task, evaluate), "evaluate": evaluate,
            "sesame_overrides": list(args.sesame_override), "hf_optim": args.hf_optim, "run_dir": str(run_dir)}
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1))
    env = {**os.environ, **OFFLINE}
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    started = time.perf_counter()
    with open(run_dir / "child.log", "w") as log:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(run_dir / "spec.json")],
                              stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = (run_dir / "child.log").read_text()[-4000:]
        sys.exit(f"{task}/{arm} (rep {rep}) failed (exit {done.returncode}); {run_dir / 'child.log'}:\n{tail}")
    result = json.loads((run_dir / "result.json").read_text())
    result["child_wall_s"] = time.perf_counter() - started
    if not args.keep_models:
        for junk in (run_dir / "sesame_run" / "checkpoints", run_dir / "hf_model", run_dir / "hf_trainer"):
            shutil.rmtree(junk, ignore_errors=True)
    return result


def order_of(arms: list[str], rep: int) -> list[str]:
    """Rep 1 in the given order, rep 2 reversed, and so on (ABBA), so neither side always goes first."""
    return list(arms) if rep % 2 == 1 else list(reversed(arms))


RATIO_KEYS = ("step_median_s", "step_mean_s", "step_cpu_median_s", "loop_s_per_step", "tokens_per_s", "padded_tokens_per_s",
              "examples_per_s", "peak_rss_train_mib", "cpu_per_example_s")
#: The Trainer at its best: the reference of the fair table (``fair_ratios``), where it ran.
FAIR_REFERENCE = "hf_fast"


def summarize(results: list[dict[str, Any]], reference: str = REFERENCE) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task and arm: the median over repetitions of each number, and its ratio to ``reference``
    (per repetition, then median / min / max over repetitions)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for task in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task]
        ref = {r["rep"]: r for r in rows if r["arm"] == reference}
        out[task] = {}
        for arm in dict.fromkeys(r["arm"] for r in rows):
            runs = [r for r in rows if r["arm"] == arm]
            entry: dict[str, Any] = {"reps": len(runs)}
            for key in RATIO_KEYS:
                entry[key] = statistics.median(r[key] for r in runs)
                ratios = [r[key] / ref[r["rep"]][key] for r in runs if r["rep"] in ref and ref[r["rep"]][key]]
                if ratios:
                    entry[f"{key}_ratio"] = statistics.median(ratios)
                    entry[f"{key}_ratio_range"] = [min(ratios), max(ratios)]
            scored = [r for r in runs if r.get("metric_value") is not None]
            entry["metric"] = next((r["metric"] for r in scored), None)
            entry["metric_value"] = scored[0]["metric_value"] if scored else None
            entry["padding_share"] = runs[0]["padding_share"]
            entry["switches"] = runs[0].get("switches")
            entry["tokens_per_step"] = statistics.fmean(runs[0]["tokens_per_step"])
            entry["padded_tokens_per_step"] = statistics.fmean(runs[0]["padded_tokens_per_step"])
            out[task][arm] = entry
    return out


def same_batches(results: list[dict[str, Any]]) -> dict[str, bool | None]:
    """Per task: whether ``sesame`` and ``hf`` had the same number of training examples and trained on
    batches of identical size and real tokens, step by step, in every repetition (None: one of the two
    arms was not run)."""
    checks = {}
    for task in dict.fromkeys(r["task"] for r in results):
        rows = {(r["arm"], r["rep"]): r for r in results if r["task"] == task}
        pairs = [(rows[("sesame", rep)], rows[(REFERENCE, rep)]) for (arm, rep) in rows if arm == "sesame" and (REFERENCE, rep) in rows]
        checks[task] = None if not pairs else all(
            s["train_examples"] == h["train_examples"] and s["examples_per_step"] == h["examples_per_step"] and s["tokens_per_step"] == h["tokens_per_step"] for s, h in pairs)
    return checks


def metric_pair(entry: dict[str, Any], ref: dict[str, Any]) -> str:
    """"val_accuracy 0.8100 / 0.8000": an arm's dev metric beside its reference's, or n/a where either was not scored."""
    if entry["metric_value"] is None or ref.get("metric_value") is None:
        return "n/a"
    return f"{entry['metric']} {entry['metric_value']:.4f} / {ref['metric_value']:.4f}"


def fmt_ratio(entry: dict[str, Any], key: str) -> str:
    if f"{key}_ratio" not in entry:
        return "n/a"
    lo, hi = entry[f"{key}_ratio_range"]
    spread = f" ({lo:.2f}–{hi:.2f})" if entry["reps"] > 1 else ""
    return f"{entry[f'{key}_ratio']:.2f}{spread}"


def markdown(args: argparse.Namespace, summary: dict[str, Any], checks: dict[str, bool | None],
             meta: dict[str, Any]) -> str:
    lines = [
        "## Training speed: sesame vs the transformers Trainer", "",
        (f"{args.steps} optimiser steps per run ({args.warmup_steps} warm-up steps not timed), {args.reps} interleaved "
         f"repetitions, {meta['threads']} CPU thread(s) per run, each run in its own process; fp32, full fine-tuning "
         f"of `{args.encoder}`. Reference = `hf` (Trainer, dynamic padding, the same batches as sesame in the same "
         "order). Ratios are arm / reference per repetition, median over repetitions (range in brackets): "
         "for times and memory below 1 is better, for throughput above 1 is better. Step CPU = the median CPU "
         "time of the process per step: on a machine shared with other jobs it moves much less with their load "
         "than wall time does."), "",
        "### Ratios to the reference", "",
        "| task | arm | step median × | step mean × | step CPU × | loop/step × | real tok/s × | examples/s × | peak RSS × | dev metric (arm / ref) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, arms in summary.items():
        ref = arms.get(REFERENCE, {})
        for arm, e in arms.items():
            if arm == REFERENCE:
                continue
            metric = metric_pair(e, ref)
            lines.append(f"| {task} | {arm} | {fmt_ratio(e, 'step_median_s')} | {fmt_ratio(e, 'step_mean_s')} | "
                         f"{fmt_ratio(e, 'step_cpu_median_s')} | {fmt_ratio(e, 'loop_s_per_step')} | {fmt_ratio(e, 'tokens_per_s')} | "
                         f"{fmt_ratio(e, 'examples_per_s')} | {fmt_ratio(e, 'peak_rss_train_mib')} | {metric} |")
    lines += fair_table(summary, meta.get("fair"))
    lines += ["", "### Absolute numbers (median over repetitions)", "",
              ("| task | arm | step median s | step mean s | step CPU s | loop s/step | real tok/step | padded tok/step | "
               "padding | real tok/s | padded tok/s | examples/s | peak RSS MiB | dev metric |"),
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, arms in summary.items():
        for arm, e in arms.items():
            metric = "n/a" if e["metric_value"] is None else f"{e['metric_value']:.4f}"
            lines.append(f"| {task} | {arm} | {e['step_median_s']:.3f} | {e['step_mean_s']:.3f} | {e['step_cpu_median_s']:.3f} | "
                         f"{e['loop_s_per_step']:.3f} | "
                         f"{e['tokens_per_step']:.0f} | {e['padded_tokens_per_step']:.0f} | {e['padding_share']:.0%} | "
                         f"{e['tokens_per_s']:.0f} | {e['padded_tokens_per_s']:.0f} | {e['examples_per_s']:.1f} | "
                         f"{e['peak_rss_train_mib']:.0f} | {metric} |")
    same = ", ".join(f"{t}: {'n/a' if ok is None else 'yes' if ok else 'NO'}" for t, ok in checks.items())
    optimisers = "; ".join(f"{arm} {o}" for arm, o in meta["optimizers"].items())
    lines += [
        "",
        f"Same batches on both sides (examples and real tokens per step, sesame vs hf, every repetition): {same}.",
        *([("Length-grouped arms train on other batches than hf (that is their point): compare their tokens/s "
            "and examples/s, not their step times.")] if any(map(length_grouped, args.arms)) else []),
        (f"SQuAD training windows: {meta['train_windows']}. Sesame-only overrides: "
         f"{' '.join(args.sesame_override) or 'none'}; overrides for both: {' '.join(args.override) or 'none'}. "
         f"Optimisers: {optimisers}."),
        ("Peak RSS = `ru_maxrss` of the run's own process at the end of training (before evaluation); it "
         "includes the interpreter, torch, the data and the model. Dev metric: the final weights scored by "
         f"sesame's evaluation path on data.max_eval_examples examples (first {args.eval_reps} repetition(s)); "
         "with this few steps it is a sanity check, not a comparison."),
        (f"torch {meta['torch']}, transformers {meta['transformers']}, lightning {meta['lightning']}, "
         f"python {meta['python']}; wall time {meta['wall_s'] / 60:.1f} min."),
    ]
    return "\n".join(lines) + "\n"


def fair_table(summary: dict[str, Any], fair: dict[str, Any] | None) -> list[str]:
    """The sesame arms against the Trainer at its best (``FAIR_REFERENCE``: its own length grouping and bf16), with
    the switches its runs showed in effect; nothing where that arm did not run."""
    if not fair:
        return []
    lines = ["", f"### Against the Trainer at its best (`{FAIR_REFERENCE}`)", "",
             ("Both sides length-group their batches (each its own way), so their batches differ: CPU per training "
              "example is the figure to read, with peak RSS and the tokens each computed."), "",
             "| task | arm | CPU per example × | examples/s × | padded tokens/step × | peak RSS × | dev metric (arm / ref) |",
             "|---|---|---|---|---|---|---|"]
    for task, arms in fair.items():
        ref = arms.get(FAIR_REFERENCE)
        if ref is None:
            continue
        for arm, e in arms.items():
            if ARMS[arm]["side"] != "sesame":
                continue
            metric = metric_pair(e, ref)
            lines.append(f"| {task} | {arm} | {fmt_ratio(e, 'cpu_per_example_s')} | {fmt_ratio(e, 'examples_per_s')} | "
                         f"{e['padded_tokens_per_step'] / ref['padded_tokens_per_step']:.2f} | "
                         f"{fmt_ratio(e, 'peak_rss_train_mib')} | {metric} |")
    seen = "; ".join(f"{task}: {', '.join(f'{k} {v}' for k, v in (arms[FAIR_REFERENCE].get('switches') or {}).items())}"
                     for task, arms in fair.items() if FAIR_REFERENCE in arms)
    return [*lines, "", f"Switches in effect in `{FAIR_REFERENCE}`'s runs (read inside the run): {seen}."]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    check_data(args)
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    available = settings_available(args)
    args.train_windows_available = available["train_windows"]
    train_windows = args.train_windows if available["train_windows"] else \
        "with_answer (data.train_windows is not in this sesame; its built-in v1 behaviour, on both sides)"
    if not available["train_windows"]:
        print(f"note: {train_windows}", flush=True)
    needs_grouping = [a for a in args.arms if ARMS[a]["side"] == "sesame" and length_grouped(a)]
    if needs_grouping and not available["group_by_length"]:
        sys.exit(f"error: the {', '.join(needs_grouping)} arm(s) need data.group_by_length, which this sesame does not have")
    import lightning
    import torch
    import transformers

    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    for task in args.tasks:
        for rep in range(1, args.reps + 1):
            arms = [a for a in args.arms if f"{task}:{a}" not in args.skip]
            for position, arm in enumerate(order_of(arms, rep)):
                result = run_child(args, task, arm, rep, position)
                results.append(result)
                print(f"[{task} rep {rep}] {arm:15s} step median {result['step_median_s']:.3f} s (CPU "
                      f"{result['step_cpu_median_s']:.3f} s), mean "
                      f"{result['step_mean_s']:.3f} s, loop {result['loop_s_per_step']:.3f} s/step, "
                      f"{result['tokens_per_s']:.0f} real tok/s, peak RSS {result['peak_rss_train_mib']:.0f} MiB, "
                      f"metric {result.get('metric_value')}, run {result['child_wall_s']:.0f} s", flush=True)
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "lightning": lightning.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
            "threads": results[0]["threads"] if results else args.threads, "train_windows": train_windows,
            "optimizers": {r["arm"]: f"`{r['optimizer']}` (fused={r['optimizer_flags']['fused']}, foreach="
                           f"{r['optimizer_flags']['foreach']}{', optim=' + r['hf_optim'] if 'hf_optim' in r else ''})"
                           for r in results},
            "wall_s": time.perf_counter() - started, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    summary, checks = summarize(results), same_batches(results)
    if any(r["arm"] == FAIR_REFERENCE for r in results):
        meta["fair"] = summarize(results, FAIR_REFERENCE)
    text = markdown(args, summary, checks, meta)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "child"}
    (args.out / "train_speed.json").write_text(json.dumps(
        {"meta": meta, "settings": settings, "same_batches": checks, "summary": summary, "runs": results}, indent=1) + "\n")
    (args.out / "train_speed.md").write_text(text)
    print("\n" + text + f"\nwrote {args.out / 'train_speed.md'} and {args.out / 'train_speed.json'}")


if __name__ == "__main__":
    main()
