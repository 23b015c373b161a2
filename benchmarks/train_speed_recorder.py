"""What both sides of benchmarks/train_speed.py record while they train: per-step wall and CPU times, what each
batch held, the learning rates, the optimiser's groups, and memory."""

from __future__ import annotations

import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any


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
        self.attn: str | None = None  # the model's attention implementation (sesame side)
        self.precision: str | None = None  # the precision Lightning trained in (sesame side)
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
