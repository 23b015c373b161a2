"""frozen / bitfit / lora / top_k / full on the same data and the same number of steps, in one run.

For each task (the shipped SST-2 and SQuAD v1.1 slices, so no other data is needed) and each
``finetune`` mode, a fresh process trains the default encoder (MiniLM-L6) for ``--steps`` optimiser
steps with that mode's preset learning rates (``conf/finetune/<mode>.yaml``), then evaluates on the
dev slice. Reported: the dev metric, trainable parameters (encoder + fusion + head), the median
training-step time, peak resident memory of the process, and the size of the best checkpoint, with
step time and memory as ratios to ``full``. The feature cache is off (it applies to ``frozen`` only,
never to lora / bitfit / top_k, whose encoders change or run with adapters).

    python benchmarks/finetune_modes.py                       # both tasks, all modes
    python benchmarks/finetune_modes.py --tasks sst2 --steps 60 --modes frozen,lora,full
    python benchmarks/finetune_modes.py --quick               # pipeline check: a few steps

Writes ``--out`` (default ``outputs/benchmarks/finetune_modes``): ``finetune_modes.json``,
``finetune_modes.md`` and ``finetune_modes.png`` (copy them to docs/results/ to publish).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from sesame.tasks.base.run_settings import RunSettings

MODES = ("frozen", "bitfit", "lora", "top_k", "full")
TASKS = {
    # task -> (overrides, main metric, metric label)
    "sst2": (["task=glue", "data=sst2_slice"], "val_accuracy", "SST-2 dev accuracy"),
    "squad_v1": (["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=96",
                  "data.batch_size=16"], "val_f1", "SQuAD v1.1 dev-slice F1"),
}


def child(task: str, mode: str, steps: int, run_dir: str, extra: list[str]) -> dict:
    import lightning as L
    import torch
    from hydra import compose, initialize_config_module

    from sesame.tasks.runs import runner
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    step_times: list[float] = []
    trainable: list[int] = []

    class StepTimer(L.Callback):
        def on_train_batch_start(self, trainer, module, *args):  # noqa: ANN001
            self.start = time.perf_counter()
            if not trainable:
                trainable.append(sum(p.numel() for p in module.parameters() if p.requires_grad))

        def on_train_batch_end(self, trainer, module, *args):  # noqa: ANN001
            step_times.append(time.perf_counter() - self.start)

    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, callbacks=None, **kw: build(
        cfg, run_dir, monitor, [*(callbacks or []), StepTimer()], **kw)
    overrides = [*TASKS[task][0], f"finetune={mode}", f"trainer.max_steps={steps}", "trainer.max_epochs=100",
                 "trainer.val_check_interval=null", "+trainer.check_val_every_n_epoch=100",
                 "trainer.enable_progress_bar=false", *extra]
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    torch.manual_seed(0)
    metrics = runner.train(RunSettings.from_config(cfg), Path(run_dir))
    folder = Path(run_dir) / "checkpoints"  # one validation, at the end: best.ckpt only if it was written
    best = folder / "best.ckpt" if (folder / "best.ckpt").is_file() else folder / "last.ckpt"
    return {
        "task": task, "mode": mode, "steps": len(step_times), "metric": metrics[TASKS[task][1]],
        "trainable_params": trainable[0], "step_seconds": statistics.median(step_times[1:] or step_times),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "checkpoint_mib": best.stat().st_size / 2**20 if best.is_file() else None,
    }


def table(results: list[dict]) -> str:
    lines = []
    for task in dict.fromkeys(r["task"] for r in results):
        rows = [r for r in results if r["task"] == task]
        full = next((r for r in rows if r["mode"] == "full"), rows[-1])
        lines += [f"**{TASKS[task][2]}** ({rows[0]['steps']} steps each)", "",
                  "| finetune | dev metric | trainable params | step s | step vs full | peak RSS MiB | RSS vs full | checkpoint MiB |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['mode']} | {r['metric']:.4f} | {r['trainable_params']:,} | {r['step_seconds']:.3f} | "
                         f"{r['step_seconds'] / full['step_seconds']:.2f} | {r['peak_rss_mib']:.0f} | "
                         f"{r['peak_rss_mib'] / full['peak_rss_mib']:.2f} | {r['checkpoint_mib']:.2f} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in results))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in results if r["task"] == task]
        for r in rows:
            ax.scatter(r["trainable_params"], r["metric"], s=40)
            ax.annotate(r["mode"], (r["trainable_params"], r["metric"]), textcoords="offset points", xytext=(5, 4))
        ax.set_xscale("log")
        ax.set_xlabel("trainable parameters (log)")
        ax.set_ylabel(TASKS[task][2])
        ax.set_title(f"{task}: {rows[0]['steps']} steps, MiniLM-L6")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="sst2,squad_v1")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=120, help="optimiser steps per run (same for every mode)")
    parser.add_argument("--override", action="append", default=[], help="extra Hydra override for every run")
    parser.add_argument("--out", default="outputs/benchmarks/finetune_modes")
    parser.add_argument("--quick", action="store_true", help="a few steps on a few examples: checks the pipeline")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        task, mode, run_dir = args.child
        print(json.dumps(child(task, mode, args.steps, run_dir, args.override)))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps, extra = args.steps, list(args.override)
    if args.quick:
        steps, extra = 3, [*extra, "data.max_eval_examples=32", "data.max_train_examples=64"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    results = []
    for task in args.tasks.split(","):
        for mode in args.modes.split(","):
            run_dir = out / task / mode
            cmd = [sys.executable, __file__, "--child", task, mode, str(run_dir), "--steps", str(steps),
                   *(f"--override={o}" for o in extra)]
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                sys.exit(f"{task}/{mode} failed:\n{done.stderr[-3000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    (out / "finetune_modes.json").write_text(json.dumps({"steps": steps, "overrides": extra, "results": results}, indent=2))
    text = table(results)
    (out / "finetune_modes.md").write_text(text + "\n")
    plot(results, out / "finetune_modes.png")
    print(text)


if __name__ == "__main__":
    main()
