"""What benchmarks/compression.py measures of each variant: its dev metric through sesame-eval's own path, its
size, its CPU latency and throughput in interleaved timing rounds, where its time goes (profiles), and the
Pareto front of speed against the metric."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from compression_variants import MODELS, VARIANTS, Model, compose, done, task_overrides
from int8_onnx_folder import export_weights
from sesame.tasks.base.run_settings import RunSettings


def load(args: argparse.Namespace, task: str, source: Path) -> tuple[Any, Any]:
    """The model as sesame-eval loads it, and the config its data is read with."""
    from sesame.tasks.runs.evaluation import load_for_evaluation

    return load_for_evaluation(RunSettings.from_config(compose("eval", [*task_overrides(args, task), f"model={source}"])))


#: Evaluation batch of the onnxruntime variants' scoring (not of their timing).
ONNX_EVAL_BATCH = 16


def score(args: argparse.Namespace, task: str, name: str, model: Model, runner: Any = None) -> dict[str, float]:
    """Validation metrics through sesame-eval's own path (written to <out>/<task>/eval_<name>); an onnxruntime
    variant's outputs are its graph's (``runner``, an ``OnnxRunner``), put in place of the module's forward,
    so its predictions are decoded and scored by the same code as every other variant's."""
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
        return evaluation.evaluate(RunSettings.from_config(cfg), folder)
    real = evaluation.load_for_evaluation

    def onnx_outputs(eval_settings: Any, overrides: Any = ()) -> tuple[Any, Any]:
        module, data_settings = real(eval_settings, overrides)
        module.forward = runner  # the module's evaluation path, its outputs from onnxruntime (on CPU)
        # onnxruntime's CPU arena keeps its largest allocation: at the task's evaluation batch (SQuAD: 128 windows
        # of 384 tokens) one pruned graph's scoring grew to 10 GB and was killed; small batches keep it near 1 GB
        return module, data_settings.updated({"trainer": QUANTIZED_TRAINER, "data": {"eval_batch_size": ONNX_EVAL_BATCH}})

    evaluation.load_for_evaluation = onnx_outputs
    try:
        return evaluation.evaluate(RunSettings.from_config(cfg), folder)
    finally:
        evaluation.load_for_evaluation = real


def timing_batches(data_settings: Any, batch_size: int, count: int, seed: int = 0) -> list[dict]:
    """``count`` batches of ``batch_size`` random validation examples, collated as evaluation does."""
    import torch

    from sesame.tasks.runs.runner import build_datamodule

    datamodule = build_datamodule(data_settings)  # the RunSettings load_for_evaluation gives
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
    data_settings = None
    for name, model in models.items():
        module, settings = load(args, task, model.run)
        module = module.cpu().eval()
        data_settings = data_settings or settings
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
            batches = timing_batches(data_settings, batch_size, count)
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
