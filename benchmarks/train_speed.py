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
  sesame_grouped_bf16_sdpa  the same with ``encoder.low_precision_attention=false``: attention dropout in torch
                  SDPA's fp32 math path, as the Trainer's model runs it
  sesame_grouped_bf16_exact_dropout  the same with ``encoder.fast_dropout=false``: torch's dropout on the hidden
                  states (one float drawn per element)
  sesame_grouped_bf16_sparse  the same with ``finetune.sparse_embeddings=true``: only the word-embedding rows a
                  batch reads get a gradient and an update
  sesame_cpu_speed  the preset ``+experiment=cpu_speed``: grouped, ``trainer.precision=auto`` (bf16 on a CPU with
                  bf16 instructions), ``finetune.sparse_embeddings=true``, ``encoder.fast_dropout=true``
  sesame_fast     grouped, padded to 32 and bf16: the full-data study's speed arm (what it costs, setting by setting)
  hf              Trainer, dynamic padding (pad to the batch's longest), and sesame's shuffle: the
                  two sides train on the very same batches, in the same order
  hf_max_length   Trainer, every batch padded to ``data.max_seq_length``, same batches
  hf_grouped      Trainer with ``train_sampling_strategy="group_by_length"`` (its LengthGroupedSampler),
                  dynamic padding (``--hf-group-by-length`` adds it)
  hf_fused        ``hf`` with ``optim=adamw_torch_fused`` (transformers' default optimiser on torch >= 2.8),
                  whatever sesame uses (``--hf-optim`` sets the other reference arms' optimiser)
  hf_fast_same_batches  ``hf_fast``'s bf16 on the very batches ``sesame_grouped_bf16`` trains on (sesame's length
                  grouping): the per-step comparison on the same examples
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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import compose, require_data_files  # noqa: E402

# The work is in four modules, one a job; what the full-data study and the tests import from this script
# (``from train_speed import ...``) stays importable from here.
from train_speed_arms import (  # noqa: E402, F401
    ARMS,
    FAST_SETTINGS,
    GROUPED_BF16_SETTINGS,
    OFFLINE,
    REFERENCE,
    TASKS,
    check_mirrorable,
    data_overrides,
    length_grouped,
    settings_of,
    trainer_overrides,
)
from sesame.tasks.base.run_settings import RunSettings  # noqa: E402
from train_speed_recorder import StepRecorder  # noqa: E402
from train_speed_tables import FAIR_REFERENCE, SAME_BATCHES_REFERENCE, markdown, same_batches, summarize  # noqa: E402
from train_speed_trainer import (  # noqa: E402, F401
    HF_KEYS,
    HFExamples,
    TrainerSwitches,
    evaluate_hf,
    hf_model,
    precision_arguments,
    reference_trainer_class,
    run_hf,
    sampling_argument,
    sesame_optim,
    sesame_optimizer,
)


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


def settings_available(args: argparse.Namespace) -> dict[str, bool]:
    """Which optional data settings this sesame has (others are being added in parallel)."""
    found = {}
    squad = compose("config", ["task=squad_v1"])
    found["train_windows"] = "train_windows" in squad.data
    found["group_by_length"] = "group_by_length" in squad.data
    return found


def check_data(args: argparse.Namespace) -> None:
    require_data_files(TASKS, args.tasks, args.quick)


# The sesame side -----------------------------------------------------------------------------------
def run_sesame(overrides: list[str], steps: int, warmup: int, run_dir: Path, precision_mirrored: bool = True,
               mirrored: bool = True) -> dict[str, Any]:
    """sesame's own training (``tasks/runs/runner.py`` ``train``) with a timing callback; its metrics.json.
    ``precision_mirrored=False``: an arm that times a precision the reference does not run (bf16);
    ``mirrored=False``: a run no Trainer side mirrors (sesame against itself: ``engine_switches.py``)."""
    import lightning as L
    from sesame.tasks.runs import runner

    recorder = StepRecorder()

    class Timer(L.Callback):
        def on_train_start(self, trainer, module):
            recorder.begin_training(trainer.optimizers[0], len(trainer.datamodule.dataset("train")))
            recorder.attn = module.encoder.model.config._attn_implementation
            recorder.precision = str(trainer.precision)  # what trainer.precision=auto resolved to

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
        if mirrored:
            check_mirrorable(cfg, precision=precision_mirrored)
        started = time.perf_counter()
        metrics = runner.train(RunSettings.from_config(cfg), run_dir)
        total = time.perf_counter() - started
    finally:
        runner.build_trainer = build
    main = str(cfg.task.main_metric)
    return {**recorder.summary(warmup), "metric": main, "metric_value": metrics.get(main), "metrics": metrics,
            "run_seconds": total, "attn_implementation": recorder.attn, "precision": recorder.precision,
            "settings": settings_of(cfg)}


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


# The parent: interleaved runs ----------------------------------------------------------------------
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
    if any(r["arm"] == SAME_BATCHES_REFERENCE for r in results):
        meta["same_batches_bf16"] = summarize(results, SAME_BATCHES_REFERENCE)
        meta["same_batches_bf16_checks"] = {
            arm: same_batches(results, arm, SAME_BATCHES_REFERENCE) for arm in dict.fromkeys(r["arm"] for r in results)
            if ARMS[arm]["side"] == "sesame" and length_grouped(arm)}
    text = markdown(args, summary, checks, meta)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "child"}
    (args.out / "train_speed.json").write_text(json.dumps(
        {"meta": meta, "settings": settings, "same_batches": checks, "summary": summary, "runs": results}, indent=1) + "\n")
    (args.out / "train_speed.md").write_text(text)
    print("\n" + text + f"\nwrote {args.out / 'train_speed.md'} and {args.out / 'train_speed.json'}")


if __name__ == "__main__":
    main()
