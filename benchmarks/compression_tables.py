"""benchmarks/compression.py's report: the per-task table, the Pareto table, the profile table, the variants'
legend and the Pareto plot (also redrawn by ``benchmarks/compression_report.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compression_variants import MODELS, VARIANTS


def markdown_table(task: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> str:
    metric = rows[0]["metric"]
    head = ["model", "runtime", "layers", "size MB", "size ×"]
    for b in batch_sizes:
        head += [f"b{b} ms", f"b{b} ex/s", f"b{b} speed ×"]
    head += [metric, "Δ", "Pareto"]
    lines = [f"### {task}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["runtime"], str(r["layers"]), f"{r['size_mb']:.3g}", f"{r['size_ratio']:.2f}"]
        for b in batch_sizes:
            cells += [f"{r[f'latency_ms_b{b}']:.1f}", f"{r[f'throughput_b{b}']:.1f}", f"{r[f'speedup_b{b}']:.2f}"]
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        delta = "" if r["score_delta"] is None or r["model"] == "finetuned" else f"{r['score_delta']:+.4f}"
        cells += [score, delta, "yes" if r["pareto"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pareto_table(task: str, rows: list[dict[str, Any]], batch_sizes: list[int]) -> str:
    """The variants by speed at the first batch size, and which are on the front (speed there against the metric)."""
    b = batch_sizes[0]
    metric = rows[0]["metric"]
    lines = [f"Pareto front of {task} (speed × at batch {b} against dev {metric}): "
             + ", ".join(r["model"] for r in sorted(rows, key=lambda r: r[f"speedup_b{b}"]) if r["pareto"]) + ".", "",
             f"| model | b{b} speed × | {metric} | on the front | beaten by |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (-r[f"speedup_b{b}"], r["model"])):
        beaten = [o["model"] for o in rows if o is not r and o["score"] is not None and r["score"] is not None
                  and o[f"speedup_b{b}"] >= r[f"speedup_b{b}"] and o["score"] >= r["score"]
                  and (o[f"speedup_b{b}"] > r[f"speedup_b{b}"] or o["score"] > r["score"])]
        score = "n/a" if r["score"] is None else f"{r['score']:.4f}"
        lines.append(f"| {r['model']} | {r[f'speedup_b{b}']:.2f} | {score} | {'yes' if r['pareto'] else ''} | "
                     f"{', '.join(beaten)} |")
    return "\n".join(lines)


def profile_table(task: str, rows: list[dict[str, Any]], batch_size: int) -> str:
    """Where each variant's time goes at ``batch_size``: its operator kinds by share of the profiled operator time
    (torch.profiler's self CPU time for torch variants, onnxruntime's node time for int8 graphs)."""
    key = f"profile_b{batch_size}"
    if not any(key in r for r in rows):
        return f"(no profile of {task} at batch {batch_size})"
    lines = [f"Where the time goes in {task} at batch {batch_size} (share of the profiled operator time):", "",
             "| model | operators |", "|---|---|"]
    for r in rows:
        if key in r:
            lines.append(f"| {r['model']} | " + ", ".join(f"{p['op']} {100 * p['share']:.0f}%" for p in r[key]) + " |")
    return "\n".join(lines)


def plot_pareto(task: str, rows: list[dict[str, Any]], batch_size: int, threads: int, quick: bool,
                path: Path, goal: tuple[float, float] | None = None) -> Path | None:
    """Speed-up at ``batch_size`` (x) against the dev metric (y), one labelled point per variant, the front
    joined, and ``goal`` (least speed-up, least metric) shaded where given; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.patches
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    speed = f"speedup_b{batch_size}"
    points = [r for r in rows if r["score"] is not None]
    metric = rows[0]["metric"].removeprefix("val_")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    # Labels staggered above and below in order of speed, so that close points stay readable.
    for i, r in enumerate(sorted(points, key=lambda r: r[speed])):
        on = r["pareto"]
        ax.scatter(r[speed], r["score"], s=60 if on else 40, zorder=3,
                   marker="s" if r["runtime"] != "torch" else "o",
                   color="tab:red" if on else "tab:grey", edgecolor="black" if on else "none")
        ax.annotate(r["model"], (r[speed], r["score"]), textcoords="offset points", fontsize=8,
                    xytext=(5, (8, -14, 20, -26)[i % 4]), arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
    front = sorted((r for r in points if r["pareto"]), key=lambda r: r[speed])
    ax.plot([r[speed] for r in front], [r["score"] for r in front], color="tab:red", linestyle="--", linewidth=1,
            zorder=2, label="Pareto front")
    ax.axvline(1.0, color="black", linewidth=0.5, alpha=0.5)
    if goal is not None:  # the region a variant must reach: at least this fast and this good
        right = max(goal[0], *(r[speed] for r in points)) * 1.5
        top = max(goal[1], *(r["score"] for r in points)) * 1.01
        ax.fill_between([goal[0], right], goal[1], top, color="tab:green", alpha=0.12, zorder=1)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.margins(y=0.2)
    ax.set_xlabel(f"CPU speed-up at batch {batch_size} over the fine-tuned fp32 model "
                  f"(× median latency, {threads} thread{'s' if threads != 1 else ''}; log scale)")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(f"{task}: dev {metric} against CPU speed-up at batch {batch_size}\n(one point per compression variant"
                 + ("; --quick: the numbers mean nothing)" if quick else ")"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(handles=[
        plt.Line2D([], [], marker="o", color="tab:grey", linestyle="", label="torch"),
        plt.Line2D([], [], marker="s", color="tab:grey", linestyle="", label="onnxruntime int8"),
        plt.Line2D([], [], marker="o", color="tab:red", markeredgecolor="black", linestyle="--", label="Pareto front"),
        *([matplotlib.patches.Patch(color="tab:green", alpha=0.12, label=f"goal: ≥ {goal[0]:g}x, ≥ {goal[1]:.4g}")]
          if goal is not None else []),
    ], fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def variants_legend(names: list[str]) -> str:
    return "\n".join(["| variant | what it is |", "|---|---|", *(f"| `{n}` | {VARIANTS[n]} |" for n in MODELS if n in names)])
