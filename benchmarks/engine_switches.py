"""sesame's engine switches against sesame's own default, on the same batches, interleaved in one run.

Each switch is timed against the arm it changes (its ``base``), trained from the same seed on the same
data in the same order, every arm in its own process, arms interleaved (ABBA over repetitions), one
torch thread:

- ``skip_unread_layers``: ``fusion=second_to_last`` with the layer above it skipped (``encoder.skip_unread_layers``,
  exact) against the same fusion running every layer;
- ``top_layer_at_summary``: the default (``pooling=pooler``: the top layer runs at [CLS] alone,
  ``encoder.top_layer_at_summary``, exact) against the same run with the whole top layer (the
  ``skip_unread_layers`` arms leave it whole, so that switch is measured alone);
- ``freeze_embeddings``: ``finetune.freeze_embeddings=true`` (the word-embedding matrix not trained) against
  the default: faster, but a different model, so its dev accuracy over seeds decides;
- ``sparse_embeddings``: ``finetune.sparse_embeddings=true`` (row-sparse word-embedding updates) against
  the default;
- ``precision_auto``: ``trainer.precision=auto`` (bf16-mixed on a CPU with bf16 instructions) against the
  default fp32;
- ``padding_free``: the default (``encoder.padding_free``: layers run on the real tokens alone) against the same
  randomly ordered batches with layers run on the padding (``padded``), and ``padding_free_grouped`` the same on
  length-grouped batches;
- ``low_precision_attention``: bf16 (``trainer.precision=bf16-mixed``) with the default
  ``encoder.low_precision_attention`` (attention dropout in bf16) against the same with torch SDPA's fp32 math path
  (``bf16_sdpa``);
- ``fast_dropout``: the default (``encoder.fast_dropout``: dropout masks from 16-bit slices of 64-bit draws) against
  torch's dropout (``exact_dropout``), and ``fast_dropout_bf16`` the same under bf16.

Each run trains ``--steps`` optimiser steps of MiniLM-L6 on the shipped SST-2 slice (2,000 sentences,
batches of 32) and then scores the whole SST-2 dev set (872 sentences), so a run gives both its step
time and a dev accuracy; repetition ``r`` trains with seed ``41 + r``. Ratios are switch / base of the
median step CPU time (< 1: faster) and of steps per second; medians over repetitions.

    python benchmarks/engine_switches.py --reps 2 --steps 62 --threads 1   # about 35 minutes: every arm
    python benchmarks/engine_switches.py --quick                           # pipeline check: tiny encoder, 3 steps
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: arm -> its overrides.
ARMS: dict[str, list[str]] = {
    "default": [],
    "sparse_embeddings": ["finetune.sparse_embeddings=true"],
    "precision_auto": ["trainer.precision=auto"],
    "second_to_last_all_layers": ["fusion=second_to_last", "encoder.skip_unread_layers=false",
                                  "encoder.top_layer_at_summary=false"],
    "second_to_last_skip": ["fusion=second_to_last", "encoder.skip_unread_layers=true",
                            "encoder.top_layer_at_summary=false"],
    "whole_top_layer": ["encoder.top_layer_at_summary=false"],
    "freeze_embeddings": ["finetune.freeze_embeddings=true"],
    "padded": ["encoder.padding_free=false"],
    "grouped": ["data.group_by_length=true"],
    "grouped_padded": ["data.group_by_length=true", "encoder.padding_free=false"],
    "bf16": ["trainer.precision=bf16-mixed"],
    "bf16_sdpa": ["trainer.precision=bf16-mixed", "encoder.low_precision_attention=false"],
    "exact_dropout": ["encoder.fast_dropout=false"],
    "bf16_exact_dropout": ["trainer.precision=bf16-mixed", "encoder.fast_dropout=false"],
}
#: switch -> (its arm, the arm it is compared with).
SWITCHES: dict[str, tuple[str, str]] = {
    "skip_unread_layers": ("second_to_last_skip", "second_to_last_all_layers"),
    "top_layer_at_summary": ("default", "whole_top_layer"),
    "freeze_embeddings": ("freeze_embeddings", "default"),
    "sparse_embeddings": ("sparse_embeddings", "default"),
    "precision_auto": ("precision_auto", "default"),
    "padding_free": ("default", "padded"),
    "padding_free_grouped": ("grouped", "grouped_padded"),
    "low_precision_attention": ("bf16", "bf16_sdpa"),
    "fast_dropout": ("default", "exact_dropout"),
    "fast_dropout_bf16": ("bf16", "bf16_exact_dropout"),
}
#: The ``$SESAME_DATA_DIR`` data each task reads (``--tasks`` as other benchmarks have it): none, the
#: shipped SST-2 slice is all it trains and scores on.
TASKS: dict[str, dict[str, list[str]]] = {"sst2_slice": {"files": []}}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, from: " + ", ".join(ARMS))
    parser.add_argument("--steps", type=int, default=62, help="optimiser steps per run (default 62: one epoch of the slice)")
    parser.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of the timing (default 3)")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions, one seed each (default 2)")
    parser.add_argument("--first-rep", type=int, default=1,
                        help="number of the first repetition (seed 41 + it; default 1): more seeds after an earlier run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--encoder", default="minilm_l6", help="encoder alias or folder (default minilm_l6)")
    parser.add_argument("--eval-examples", type=int, default=None, help="dev sentences scored (default: all 872)")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/engine_switches"), help="where results go")
    parser.add_argument("--quick", action="store_true", help="pipeline check: 3 steps, 1 rep, 32 dev sentences")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    args.tasks = list(TASKS)
    unknown = [a for a in args.arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    if args.quick:
        args.steps, args.warmup_steps, args.reps, args.eval_examples = 3, 1, 1, args.eval_examples or 32
    return args


def overrides_of(args: argparse.Namespace, arm: str, rep: int) -> list[str]:
    out = ["task=glue", "data=sst2_slice", f"encoder.name_or_path={args.encoder}", f"seed={41 + rep}",
           *ARMS[arm]]
    if args.eval_examples:
        out.append(f"data.max_eval_examples={args.eval_examples}")
    return out


def child(spec_file: Path) -> None:
    """One run: train one arm with the step timer of ``train_speed.py``, write ``result.json``."""
    spec = json.loads(spec_file.read_text())
    import torch

    torch.set_num_threads(int(spec["threads"]))
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    from train_speed import run_sesame

    run_dir = Path(spec["run_dir"])
    result = run_sesame(spec["overrides"], spec["steps"], spec["warmup"], run_dir / "run", precision_mirrored=False,
                        mirrored=False)
    from sesame.tasks.runs.precision import resolve_precision

    result["precision"] = str(resolve_precision(result["settings"]["precision"], "cpu"))  # what auto picked here
    (run_dir / "result.json").write_text(json.dumps(result, indent=1, default=str))


def run_child(args: argparse.Namespace, arm: str, rep: int) -> dict[str, Any]:
    import shutil

    run_dir = (args.out / f"rep{rep}_{arm}").resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = {"arm": arm, "rep": rep, "steps": args.steps, "warmup": args.warmup_steps, "threads": args.threads,
            "overrides": overrides_of(args, arm, rep), "run_dir": str(run_dir)}
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1))
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    with open(run_dir / "child.log", "w") as log:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(run_dir / "spec.json")],
                              stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{arm} (rep {rep}) failed (exit {done.returncode}):\n{(run_dir / 'child.log').read_text()[-4000:]}")
    result = json.loads((run_dir / "result.json").read_text())
    shutil.rmtree(run_dir / "run" / "checkpoints", ignore_errors=True)
    keep = ("step_median_s", "step_cpu_median_s", "step_mean_s", "loop_s_per_step", "tokens_per_step", "metric",
            "metric_value", "precision", "optimizer", "optimizer_flags", "peak_rss_train_mib", "steps_run")
    return {"arm": arm, "rep": rep, "seed": 41 + rep, **{k: result.get(k) for k in keep},
            "batch_fingerprint": hash(tuple(result.get("tokens_per_step") or ()))}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per switch: median over repetitions of switch / base (step CPU and wall medians; steps/s), the
    dev accuracies per seed, and whether both arms trained on the same batches (token counts per step)."""
    by = {(r["arm"], r["rep"]): r for r in results}
    reps = sorted({r["rep"] for r in results})
    out = {}
    for switch, (arm, base) in SWITCHES.items():
        pairs = [(by[(arm, rep)], by[(base, rep)]) for rep in reps if (arm, rep) in by and (base, rep) in by]
        if not pairs:
            continue
        cpu = [a["step_cpu_median_s"] / b["step_cpu_median_s"] for a, b in pairs]
        wall = [a["step_median_s"] / b["step_median_s"] for a, b in pairs]
        out[switch] = {
            "arm": arm, "base": base, "step_cpu_ratio_per_rep": cpu, "step_cpu_ratio": statistics.median(cpu),
            "step_wall_ratio_per_rep": wall, "steps_per_s_ratio": 1 / statistics.median(wall),
            "dev_accuracy": {str(a["seed"]): a["metric_value"] for a, _ in pairs},
            "base_dev_accuracy": {str(b["seed"]): b["metric_value"] for _, b in pairs},
            "same_batches": all(a["tokens_per_step"] == b["tokens_per_step"] for a, b in pairs),
            "precision": sorted({a["precision"] for a, _ in pairs}),
        }
    return out


def markdown(args: argparse.Namespace, summary: dict[str, Any], results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = ["## Engine switches against sesame's default", "",
             f"Reproduce: `{meta['command']}`", "",
             f"{args.reps} interleaved repetition(s) (seeds {', '.join(str(41 + r) for r in range(args.first_rep, args.first_rep + args.reps))}), "
             f"{args.steps} steps each ({args.warmup_steps} left out of the timing), {meta['threads']} torch thread(s), "
             f"encoder `{args.encoder}`, SST-2 slice, batch 32; torch {meta['torch']}, CPU bf16 flags: "
             f"{', '.join(meta['cpu_bf16_flags']) or 'none'}. The machine was shared with other jobs: "
             "read the CPU-time ratios. Ratio = switch / base (< 1: the switch is faster).", "",
             "| switch | compared with | step CPU × base (median) | per repetition | steps/s × base | dev accuracy, switch (per seed) | dev accuracy, base | same batches |",
             "|---|---|---|---|---|---|---|---|"]
    for switch, s in summary.items():
        acc = ", ".join(f"{v:.4f}" if v is not None else "n/a" for v in s["dev_accuracy"].values())
        base_acc = ", ".join(f"{v:.4f}" if v is not None else "n/a" for v in s["base_dev_accuracy"].values())
        lines.append(f"| `{switch}` | `{s['base']}` | {s['step_cpu_ratio']:.3f} | "
                     f"{', '.join(f'{x:.3f}' for x in s['step_cpu_ratio_per_rep'])} | {s['steps_per_s_ratio']:.3f} | "
                     f"{acc} | {base_acc} | {'yes' if s['same_batches'] else 'no'} |")
    lines += ["", "| arm | rep | step CPU median s | step wall median s | precision | dev accuracy |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['arm']} | {r['rep']} | {r['step_cpu_median_s']:.3f} | {r['step_median_s']:.3f} | "
                     f"{r['precision']} | {r['metric_value']} |")
    return "\n".join(lines) + f"\n\nWall time {meta['wall_s'] / 60:.1f} min.\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    if args.quick and args.encoder == "minilm_l6":
        sys.exit("--quick needs --encoder <a tiny encoder folder> (tests/conftest.py build_tiny_bert makes one)")
    import torch

    from sesame.tasks.runs.precision import CPU_BF16_FLAGS, cpu_flags

    args.out.mkdir(parents=True, exist_ok=True)
    started, results = time.perf_counter(), []
    for rep in range(args.first_rep, args.first_rep + args.reps):
        for arm in (args.arms if rep % 2 else list(reversed(args.arms))):  # ABBA
            result = run_child(args, arm, rep)
            results.append(result)
            print(f"[rep {rep}] {arm:26s} step CPU {result['step_cpu_median_s']:.3f} s, wall {result['step_median_s']:.3f} s, "
                  f"{result['precision']}, dev {result['metric_value']}", flush=True)
    meta = {"torch": torch.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "threads": args.threads, "cpu_bf16_flags": sorted(set(CPU_BF16_FLAGS) & cpu_flags()),
            "load_average_end": os.getloadavg(), "wall_s": time.perf_counter() - started,
            "command": " ".join(["python benchmarks/engine_switches.py", *(argv if argv is not None else sys.argv[1:])])}
    summary = summarize(results)
    text = markdown(args, summary, results, meta)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "child"}
    (args.out / "engine_switches.json").write_text(json.dumps(
        {"meta": meta, "settings": settings, "summary": summary, "runs": results}, indent=1) + "\n")
    (args.out / "engine_switches.md").write_text(text)
    print("\n" + text + f"\nwrote {args.out / 'engine_switches.md'} and {args.out / 'engine_switches.json'}")


if __name__ == "__main__":
    main()
