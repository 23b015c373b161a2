"""Inference speed of one trained model five ways, on the same weights and the same real dev batches:
torch eager fp32, torch dynamic int8 (``sesame-compress quantize``), onnxruntime fp32 and onnxruntime
int8 (``sesame-export --format onnx --int8``) in sesame's sessions, and that int8 graph with all of
onnxruntime's fusions (sesame's sessions leave out the fused SkipLayerNormalization, ``UNFUSED``), at
batch 1 and 32, with 1 thread and all threads.

Tasks: SST-2 (the shipped dev set, 872 sentences) and SQuAD v1.1 (windows of the shipped 338-question
dev slice), with models trained on the shipped training slices (or given with --sst2-run /
--squad_v1-run), so the benchmark needs no other data. For each backend it reports the median
latency per batch and examples (windows) per second, as ratios to eager fp32 at the same batch size
and thread count, and the dev metric computed from that backend's own outputs (accuracy; SQuAD F1
with sesame's decoder and the official scoring rules). Timing is interleaved: each round times every
backend once on the same batches, rotating who goes first, so load changes hit all alike.

    python benchmarks/inference.py                         # trains both models first (~5 min on 2 cores)
    python benchmarks/inference.py --sst2-run outputs/glue/<run> --tasks sst2
    python benchmarks/inference.py --quick                 # pipeline check: tiny training, few batches

Writes ``--out`` (default ``outputs/benchmarks/inference``): ``inference.json`` and ``inference.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import QUICK_TRAINER, compose, time_models, timing_batches, train_run  # noqa: E402
from sesame.tasks.base.run_settings import RunSettings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TASKS: dict[str, dict[str, Any]] = {
    "sst2": {"overrides": ["task=glue", "data=sst2_slice"], "metric": "accuracy",
             "quick": ["data.max_train_examples=64", "data.max_eval_examples=64"]},
    "squad_v1": {"overrides": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=256", "data.doc_stride=96"],
                 "metric": "f1", "quick": ["data.max_train_examples=24", "data.max_eval_examples=16"]},
}
BACKENDS = ("torch_fp32", "torch_int8", "ort_fp32", "ort_int8", "ort_int8_all_fusions")

Backend = Callable[[dict], tuple]


def backends(run: Path, onnx_dir: Path, threads: int) -> dict[str, Backend]:
    """The ways to run the model of ``run``, each ``batch -> outputs`` (a tuple of tensors); the last is the int8
    graph with every onnxruntime fusion, sesame's left-out ones (``UNFUSED``) too."""
    from sesame.tasks.saved.checkpoints import load_trained
    from sesame.tasks.saved.int8 import quantize_module
    from sesame.tasks.export import as_tuple
    from sesame.tasks.inference.onnx_session import INT8_FILE, MODEL_FILE, new_session, run_session

    module = load_trained(run).module.eval()
    int8 = quantize_module(copy.deepcopy(module))
    fp32_session = new_session(onnx_dir / MODEL_FILE, threads=threads)
    int8_session = new_session(onnx_dir / INT8_FILE, threads=threads)
    fused_session = new_session(onnx_dir / INT8_FILE, threads=threads, all_fusions=True)
    return {
        "torch_fp32": lambda b: as_tuple(module(b)),
        "torch_int8": lambda b: as_tuple(int8(b)),
        "ort_fp32": lambda b: run_session(fp32_session, b),
        "ort_int8": lambda b: run_session(int8_session, b),
        "ort_int8_all_fusions": lambda b: run_session(fused_session, b),
    }


def dev_metric(task: str, run_fn: Backend, settings: Any) -> float:
    """The dev metric from one backend's outputs over the whole dev set (the evaluation loader's batches)."""
    import torch

    from sesame.tasks.runs.runner import build_datamodule

    datamodule = build_datamodule(settings)  # the RunSettings load_for_evaluation gives
    datamodule.setup("validate")
    if task == "sst2":
        right = total = 0
        with torch.inference_mode():
            for batch in datamodule.val_dataloader():
                right += int((run_fn(batch)[0].argmax(-1) == batch["labels"]).sum())
                total += len(batch["labels"])
        return right / total
    from sesame.tasks.qa.metrics import squad_v1
    from sesame.tasks.qa.predictions import decode_predictions

    rows: list[tuple[np.ndarray, ...]] = []
    with torch.inference_mode():
        for batch in datamodule.val_dataloader():
            start, end = run_fn(batch)
            for i in range(len(start)):
                rows.append((int(batch["feature_index"][i]), int(batch["example_index"][i]), start[i].numpy(),
                             end[i].numpy(), batch["offsets"][i].numpy()))
    rows.sort(key=lambda r: r[0])  # window order: the windows of a question in document order
    width = max(len(r[2]) for r in rows)
    starts = np.full((len(rows), width), -1e4, dtype=np.float32)
    ends, offsets = starts.copy(), np.full((len(rows), width, 2), -1, dtype=np.int64)
    for i, (_, _, s, e, o) in enumerate(rows):
        starts[i, : len(s)], ends[i, : len(e)], offsets[i, : len(o)] = s, e, o
    examples = datamodule.examples("validation")
    preds = decode_predictions(torch.from_numpy(starts), torch.from_numpy(ends), torch.from_numpy(offsets),
                               [r[1] for r in rows], list(examples["context"]), list(examples["id"]))
    gold = {qid: list(a["text"]) for qid, a in zip(examples["id"], examples["answers"])}
    return squad_v1(gold, {q: p.text for q, p in preds.items()})["f1"] / 100


def measure(task: str, run: Path, onnx_dir: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    cfg = compose("eval", [*TASKS[task]["overrides"], *(TASKS[task]["quick"] if args.quick else []), f"model={run}"])
    from sesame.tasks.runs.evaluation import load_for_evaluation

    _, data_settings = load_for_evaluation(RunSettings.from_config(cfg))
    all_threads = torch.get_num_threads()
    rows = []
    for threads in sorted({1, all_threads}):
        torch.set_num_threads(threads)
        fns = backends(run, onnx_dir, threads)
        metrics = {name: dev_metric(task, fn, data_settings) for name, fn in fns.items()} if threads == all_threads else {}
        for batch_size in args.batch_sizes:
            count = 3 if args.quick else (args.batches_b1 if batch_size == 1 else args.batches_b32)
            batches = timing_batches(data_settings, batch_size, count)
            print(f"[time] {task}: batch {batch_size}, {threads} thread(s), {count} batches x {args.rounds} rounds", flush=True)
            seconds = time_models(fns, batches, args.rounds)
            base = statistics.median(seconds["torch_fp32"])
            for name in BACKENDS:
                median = statistics.median(seconds[name])
                rows.append({"task": task, "backend": name, "threads": threads, "batch_size": batch_size,
                             "latency_ms": 1000 * median, "examples_per_s": batch_size / median,
                             "speedup_vs_torch_fp32": base / median, "metric": TASKS[task]["metric"],
                             "dev_metric": metrics.get(name)})
    torch.set_num_threads(all_threads)
    for row in rows:  # the metric was measured once per backend (all threads, whole dev set)
        row["dev_metric"] = next(r["dev_metric"] for r in rows if r["backend"] == row["backend"] and r["dev_metric"] is not None)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = []
    for task in dict.fromkeys(r["task"] for r in rows):
        base = {r["backend"]: r["dev_metric"] for r in rows if r["task"] == task}
        lines += [f"**{task}** (dev {rows[0]['metric'] if task == 'sst2' else 'F1'} per backend: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in base.items()) + ")", "",
                  "| backend | threads | batch | latency ms | examples/s | speed vs torch fp32 | dev metric | vs fp32 (points) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["task"] == task):
            delta = 100 * (r["dev_metric"] - base["torch_fp32"])
            lines.append(f"| {r['backend']} | {r['threads']} | {r['batch_size']} | {r['latency_ms']:.1f} | "
                         f"{r['examples_per_s']:.1f} | {r['speedup_vs_torch_fp32']:.2f}x | {r['dev_metric']:.4f} | {delta:+.2f} |")
        lines.append("")
    return "\n".join(lines)


def add_model_arguments(parser: argparse.ArgumentParser, out: Path, rounds: int) -> None:
    """The arguments this benchmark shares with benchmarks/export_attention.py: tasks and their runs, the
    encoder a run is trained with, the timed batches and rounds, the output folder."""
    parser.add_argument("--tasks", type=lambda s: s.split(","), default=list(TASKS))
    parser.add_argument("--sst2-run", type=Path, help="a trained SST-2 run folder (else one is trained)")
    parser.add_argument("--squad_v1-run", type=Path, help="a trained SQuAD run folder (else one is trained)")
    parser.add_argument("--encoder", default="minilm_l6")
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    parser.add_argument("--batches-b1", type=int, default=48, help="timed batches of 1 per round")
    parser.add_argument("--batches-b32", type=int, default=4, help="timed batches of 32 per round")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--fresh", action="store_true", help="redo the training and the export")
    parser.add_argument("--quick", action="store_true")


def task_run(args: argparse.Namespace, task: str, folder: Path) -> Path:
    """The run measured for ``task``: --<task>-run, else one trained on the shipped slice into ``folder`` (a
    finished one there is kept unless --fresh)."""
    given = getattr(args, f"{task}_run")
    if given:
        return Path(given)
    overrides = [*TASKS[task]["overrides"], f"encoder.name_or_path={args.encoder}"]
    if args.quick:
        overrides += [*TASKS[task]["quick"], *QUICK_TRAINER]
    return train_run(overrides, folder, args.fresh)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, Path("outputs/benchmarks/inference"), rounds=3)
    parser.add_argument("--int8-weights", choices=("per_channel", "per_tensor"), default="per_channel",
                        help="sesame-export --int8-weights of the onnxruntime int8 backend (the README's table: per_tensor)")
    args = parser.parse_args(argv)
    from int8_onnx_folder import export_int8_onnx
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    rows = []
    for task in args.tasks:
        run = task_run(args, task, args.out / task / "run")
        onnx_dir = export_int8_onnx(run, args.out / task / "onnx", args.fresh, args.int8_weights)
        rows += measure(task, run, onnx_dir, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "inference.json").write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    text = markdown(rows)
    (args.out / "inference.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
