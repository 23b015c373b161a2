"""What tracing the encoder's eager attention (``sesame-export --attention eager``, the default) buys over
tracing the attention the model runs with in torch (``--attention model``: SDPA, sesame's export before).

Both exports of the same trained run, in onnxruntime fp32 and int8 (sesame's sessions), on the same real
dev batches: the median latency per batch at batch 1 and 32, one thread, timed interleaved (each round
times every graph once, rotating who goes first, so load changes hit all alike), reported as the ratio
model-attention / eager; the largest output difference between the two graphs on those batches; and the
operators that differ (the SDPA trace keeps torch's guard for fully masked rows: IsNaN + Where per layer).

Tasks and models as ``benchmarks/inference.py``: SST-2 (shipped dev set) and SQuAD v1.1 windows of 256
tokens (shipped dev slice), with models trained on the shipped training slices (reused from
``outputs/benchmarks/inference`` when that benchmark ran; or given with --sst2-run / --squad_v1-run).

    python benchmarks/export_attention.py                  # trains both models if needed (~5 min on 2 cores)
    python benchmarks/export_attention.py --quick          # pipeline check: tiny training, few batches

Writes ``--out`` (default ``outputs/benchmarks/export_attention``): ``export_attention.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compression import compose, time_models, timing_batches  # noqa: E402
from inference import TASKS, add_model_arguments, task_run  # noqa: E402
from int8_onnx_folder import export_int8_onnx  # noqa: E402
from sesame.tasks.base.run_settings import RunSettings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
TRACES = ("model", "eager")  # the reference first: ratios are model / eager


def op_counts(path: Path) -> collections.Counter:
    import onnx

    return collections.Counter(node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node)


def measure(task: str, run: Path, root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    import numpy as np
    import torch

    from sesame.tasks.inference.onnx_session import INT8_FILE, MODEL_FILE, new_session, run_session
    from sesame.tasks.runs.evaluation import load_for_evaluation

    folders = {t: export_int8_onnx(run, root / f"onnx_{t}", args.fresh, attention=t) for t in TRACES}
    cfg = compose("eval", [*TASKS[task]["overrides"], *(TASKS[task]["quick"] if args.quick else []), f"model={run}"])
    _, data_settings = load_for_evaluation(RunSettings.from_config(cfg))
    torch.set_num_threads(1)
    traced = {t: json.loads((folders[t] / "export.json").read_text())["attention"] for t in TRACES}
    rows = []
    for graph in (MODEL_FILE, INT8_FILE):
        ops = {t: op_counts(folders[t] / graph) for t in TRACES}
        differing = {op: [ops[t][op] for t in TRACES] for op in sorted(set(ops["model"]) | set(ops["eager"]))
                     if ops["model"][op] != ops["eager"][op]}
        sessions = {t: new_session(folders[t] / graph, threads=1) for t in TRACES}
        fns = {t: (lambda s: lambda b: run_session(s, b))(sessions[t]) for t in TRACES}
        for batch_size in args.batch_sizes:
            count = 3 if args.quick else (args.batches_b1 if batch_size == 1 else args.batches_b32)
            batches = timing_batches(data_settings, batch_size, count)
            diff = 0.0
            for batch in batches:
                for a, b in zip(fns["model"](batch), fns["eager"](batch), strict=True):
                    a, b = a.float().numpy(), b.float().numpy()
                    finite = np.isfinite(a) & np.isfinite(b)
                    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
                        diff = float("inf")
                    elif finite.any():
                        diff = max(diff, float(np.abs(a[finite] - b[finite]).max()))
            print(f"[time] {task} {graph}: batch {batch_size}, {count} batches x {args.rounds} rounds", flush=True)
            seconds = time_models(fns, batches, args.rounds)
            ms = {t: 1000 * statistics.median(seconds[t]) for t in TRACES}
            rows.append({"task": task, "graph": graph, "batch_size": batch_size, "threads": 1,
                         "latency_ms_model_attention": ms["model"], "latency_ms_eager": ms["eager"],
                         "speedup_eager": ms["model"] / ms["eager"], "max_abs_diff": diff,
                         "ops_differing_model_eager": differing,
                         "attention_traced": traced})
    return rows


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = ["| task | graph | batch | ms, model's attention | ms, eager | speed-up | max abs diff | operators (model's, eager) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ops = ", ".join(f"{op} {a}/{b}" for op, (a, b) in r["ops_differing_model_eager"].items()) or "same"
        lines.append(f"| {r['task']} | {r['graph']} | {r['batch_size']} | {r['latency_ms_model_attention']:.2f} | "
                     f"{r['latency_ms_eager']:.2f} | {r['speedup_eager']:.2f}x | {r['max_abs_diff']:.2g} | {ops} |")
    traced = rows[0]["attention_traced"] if rows else {}
    lines += ["", f"Traced: `--attention model` = {traced.get('model')}, `--attention eager` = {traced.get('eager')}; "
              f"1 thread, {args.rounds} interleaved rounds, medians per batch."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, Path("outputs/benchmarks/export_attention"), rounds=5)
    parser.add_argument("--runs-from", type=Path, default=Path("outputs/benchmarks/inference"),
                        help="where benchmarks/inference.py trained its models (<dir>/<task>/run), reused if there")
    args = parser.parse_args(argv)
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    rows = []
    for task in args.tasks:
        shared = args.runs_from / task / "run"
        if not args.quick and not getattr(args, f"{task}_run") and (shared / "metrics.json").is_file():
            setattr(args, f"{task}_run", shared)
        rows += measure(task, task_run(args, task, args.out / task / "run"), args.out / task, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "export_attention.json").write_text(json.dumps({"rows": rows, "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))
    text = markdown(rows, args)
    (args.out / "export_attention.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
