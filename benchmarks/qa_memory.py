"""Peak RSS of a whole shipped-slice QA run (``sesame-train task=squad_v1|squad_v2``), phase by phase.

Each run is its own fresh process (peak RSS is per process), one at a time, one torch thread. Inside
it, the run is ``sesame-train``'s own call (``tasks/runs/runner.py`` ``train``) with markers at the
phase boundaries: imports, tokenizer and data (validation then training windows), model, training
steps, each validation's forward passes and its decoding and scoring, and what follows ``fit``. At
each marker the process's peak RSS (VmHWM) is read and then reset to the current RSS
(``/proc/self/clear_refs``), so each phase reports its own peak; glibc's bytes in use
(``mallinfo2``) tell live memory from freed memory the heap keeps. The whole process's peak is
the highest phase peak; loader worker processes (none with ``data.num_workers=0``) are reported apart.

    python benchmarks/qa_memory.py                        # both runs: squad_v1 (20 steps), squad_v2 (5 steps)
    python benchmarks/qa_memory.py --tasks squad_v1 --source /path/to/older/checkout   # the same on other code
    python benchmarks/qa_memory.py --json results.json -- data.eval_batch_size=16        # extra overrides

``--source`` runs another checkout of sesame (e.g. ``git worktree add /tmp/before HEAD~1``) in the
same way: its ``heads/``, ``tasks/``, ``conf/`` and ``data/`` replace this one's in the child process.
Results: ``docs/results/qa_memory.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The runs measured: their sesame-train overrides, and what they read from $SESAME_DATA_DIR (nothing: the
#: shipped slices and the shipped encoder).
TASKS = {
    "squad_v1": {"overrides": ["task=squad_v1", "data=squad_v1_slice", "trainer.max_steps=20"], "files": []},
    "squad_v2": {"overrides": ["task=squad_v2", "data=squad_v2_slice", "trainer.max_steps=5"], "files": []},
}
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# The child: one run, with phase markers -------------------------------------------------------------
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _malloc_in_use_mib() -> float | None:
    """Bytes glibc has handed out and not taken back (heap + mmapped blocks), MiB; None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


class Phases:
    """Sequential phases: :meth:`mark` ends the current one (its peak and end RSS) and starts the next."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.name = "imports"
        self.started = time.perf_counter()
        self.start_rss = _status_kib("VmRSS")

    def mark(self, name: str) -> None:
        rss = _status_kib("VmRSS")
        self.rows.append({
            "phase": self.name, "start_mib": self.start_rss / 1024, "peak_mib": _status_kib("VmHWM") / 1024,
            "end_mib": rss / 1024, "malloc_in_use_end_mib": _malloc_in_use_mib(),
            "seconds": time.perf_counter() - self.started,
        })
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current RSS, so the next phase has its own peak
        self.name, self.started, self.start_rss = name, time.perf_counter(), _status_kib("VmRSS")


def _use_source(source: Path) -> None:
    """Point the editable install's finder at another checkout (before anything of sesame is imported)."""
    finder = next((m for name, m in sys.modules.items() if name.startswith("__editable___sesame")), None)
    if finder is None:
        raise SystemExit("--source needs sesame installed in editable mode (pip install -e .)")
    for key, path in list(finder.MAPPING.items()):
        finder.MAPPING[key] = str(source / Path(path).name)
    for key, paths in finder.NAMESPACES.items():
        finder.NAMESPACES[key] = [str(source / Path(p).relative_to(Path(p).parents[len(key.split(".")) - 2]))
                                  if key.startswith("sesame.") else p for p in paths]


def child(overrides: list[str], run_dir: Path, out: Path, source: Path | None) -> None:
    phases = Phases()
    if source is not None:
        _use_source(source)
    import torch
    torch.set_num_threads(1)
    from hydra import compose, initialize_config_module
    from lightning.pytorch.callbacks import Callback

    import sesame.tasks.runs.runner as runner
    from sesame.tasks.base.run_settings import RunSettings
    from sesame.tasks.cli.resolvers import register_resolvers
    from sesame.tasks.core.known_noise import library_progress_bars_off
    from sesame.tasks.qa.data import SquadDataModule
    from sesame.tasks.qa.module import SquadModule

    register_resolvers()
    library_progress_bars_off()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            *overrides, "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"])
    settings = RunSettings.from_config(cfg)
    phases.mark("tokenizer")

    def wrap(owner: Any, name: str, before: Any, after: str | None = None) -> None:
        original = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            phases.mark(before(*args, **kwargs) if callable(before) else before)
            try:
                return original(*args, **kwargs)
            finally:
                if after:
                    phases.mark(after)
        setattr(owner, name, wrapped)

    wrap(SquadDataModule, "_build", lambda self, split: f"data: {split} windows")
    wrap(runner, "build_module", "model", after="trainer setup")
    wrap(SquadModule, "score", "validation: decode + score", after="validation: end")

    class Markers(Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            phases.mark("training steps")

        def on_validation_start(self, trainer: Any, module: Any) -> None:
            phases.mark("validation: forward")

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            phases.mark("training steps" if trainer.state.fn.value == "fit" else "after validation")

        def on_train_end(self, trainer: Any, module: Any) -> None:
            phases.mark("after fit: checkpoint, metrics")

    build_trainer = runner.build_trainer

    def with_markers(settings: Any, run_dir: Path, monitor: str | None, extra_callbacks: list | None = None) -> Any:
        return build_trainer(settings, run_dir, monitor, [*(extra_callbacks or []), Markers()])

    runner.build_trainer = with_markers
    metrics = runner.train(settings, run_dir, hparams={})
    phases.mark("end")
    # ru_maxrss would miss the earlier phases: resetting VmHWM resets it too. The process's peak is the
    # highest phase peak; worker processes (data.num_workers > 0) report their own.
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    main = settings.task.main_metric
    out.write_text(json.dumps({
        "peak_rss_mib": max(r["peak_mib"] for r in phases.rows), "children_peak_rss_mib": children,
        "phases": phases.rows, "overrides": overrides,
        "metrics": {k: v for k, v in metrics.items() if k in (main, "val_exact_match", "val_exact", "val_f1")},
    }, indent=1))


# The parent: one fresh process per run, one at a time -------------------------------------------------
def run_one(name: str, extra: list[str], source: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="qa_memory_") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, __file__, "--child", "--out", str(out), "--run-dir", str(Path(tmp) / "run")]
        if source is not None:
            cmd += ["--source", str(source)]
        # the code as it is runs with the low-memory preset (conf/experiment/low_memory.yaml; the default keeps the
        # speed); older code (--source), from before the preset, as it was
        preset = ["+experiment=low_memory"] if source is None else []
        cmd += ["--", *TASKS[name]["overrides"], *preset, *extra]
        env = {**os.environ, **ENV}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(out.read_text())


def print_report(name: str, result: dict[str, Any]) -> None:
    print(f"\n{name}: peak RSS {result['peak_rss_mib']:.0f} MiB ({result['peak_rss_mib'] / 1024:.2f} GiB); "
          f"metrics {result['metrics']}")
    print(f"| phase | RSS at start MiB | peak MiB | RSS at end MiB | malloc in use at end MiB | s |")
    print("|---|---|---|---|---|---|")
    for r in result["phases"]:
        used = "–" if r["malloc_in_use_end_mib"] is None else f"{r['malloc_in_use_end_mib']:.0f}"
        print(f"| {r['phase']} | {r['start_mib']:.0f} | {r['peak_mib']:.0f} | {r['end_mib']:.0f} | {used} | {r['seconds']:.1f} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="squad_v1,squad_v2", type=lambda v: v.split(","),
                        help="comma-separated: " + ", ".join(TASKS))
    parser.add_argument("--source", type=Path, help="another sesame checkout to measure (editable install only)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra sesame-train overrides for every run")
    args = parser.parse_args(argv)
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        parser.error(f"unknown --tasks {', '.join(unknown)}; known: {', '.join(TASKS)}")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.overrides, args.run_dir, args.out, args.source)
        return
    results = {}
    for name in args.tasks:
        results[name] = run_one(name, args.overrides, args.source.resolve() if args.source else None)
        print_report(name, results[name])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
