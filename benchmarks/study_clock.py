"""The training clock of a full-data study unit, in its child process: cumulative training wall and CPU seconds
over the unit's resumed segments, evaluation and checkpoint writes left out, with the per-validation history and a
fingerprint of every training batch."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from typing import Any


def cpu_seconds() -> float:
    """This process's CPU time (user + system, all threads; children not included)."""
    t = os.times()
    return t.user + t.system


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class TrainClock:
    """Cumulative training wall and CPU seconds over the segments of a unit (a resumed segment starts
    from the values its checkpoint stored), with evaluation and checkpoint writing left out: between
    ``pause()`` and ``resume()`` (evaluation) and inside ``excluded()`` (a checkpoint write) the clock
    stands still, and those seconds are counted apart. Also holds the per-validation history and a
    fingerprint of every training batch (examples, real tokens, sum of real token ids) per epoch."""

    MOD = (1 << 61) - 1

    def __init__(self) -> None:
        self.base = {"wall": 0.0, "cpu": 0.0}
        self.eval_total = {"wall": 0.0, "cpu": 0.0}
        self.save_total = {"wall": 0.0, "cpu": 0.0}
        self.history: list[dict[str, Any]] = []
        self.fingerprints: dict[str, list[int]] = {}  # epoch -> [hash, steps]
        self.restored_step = 0
        self.segment_start: tuple[float, float] | None = None
        self.excluded_wall = self.excluded_cpu = 0.0
        self.paused_at: tuple[float, float] | None = None
        self.peak_rss_before_eval: float | None = None

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), cpu_seconds()

    def state(self) -> dict[str, Any]:
        """What a checkpoint stores (plain types: checkpoints are read with torch's weights-only unpickler)."""
        wall, cpu = self.reading()
        return {"wall": wall, "cpu": cpu, "eval": dict(self.eval_total), "save": dict(self.save_total),
                "history": json.loads(json.dumps(self.history)), "fingerprints": json.loads(json.dumps(self.fingerprints))}

    def restore(self, state: dict[str, Any] | None, step: int) -> None:
        if not state:
            return
        self.base = {"wall": float(state["wall"]), "cpu": float(state["cpu"])}
        self.eval_total = {k: float(v) for k, v in state["eval"].items()}
        self.save_total = {k: float(v) for k, v in state["save"].items()}
        self.history = list(state["history"])
        self.fingerprints = {k: list(v) for k, v in state["fingerprints"].items()}
        self.restored_step = step

    def start_segment(self) -> None:
        self.segment_start = self.now()
        self.excluded_wall = self.excluded_cpu = 0.0
        self.paused_at = None

    def reading(self) -> tuple[float, float]:
        if self.segment_start is None:
            return self.base["wall"], self.base["cpu"]
        wall, cpu = self.paused_at or self.now()
        return (self.base["wall"] + wall - self.segment_start[0] - self.excluded_wall,
                self.base["cpu"] + cpu - self.segment_start[1] - self.excluded_cpu)

    def pause(self) -> None:
        if self.paused_at is None and self.segment_start is not None:
            self.paused_at = self.now()
            if self.peak_rss_before_eval is None:
                self.peak_rss_before_eval = peak_rss_mib()

    def resume(self) -> tuple[float, float]:
        """Restart after an evaluation; returns its (wall, cpu) seconds."""
        if self.paused_at is None:
            return 0.0, 0.0
        wall, cpu = self.now()
        spent = (wall - self.paused_at[0], cpu - self.paused_at[1])
        self.excluded_wall += spent[0]
        self.excluded_cpu += spent[1]
        self.eval_total["wall"] += spent[0]
        self.eval_total["cpu"] += spent[1]
        self.paused_at = None
        return spent

    @contextlib.contextmanager
    def excluded(self):
        """A checkpoint write: not training time (unless the clock already stands, in an evaluation)."""
        start = self.now()
        try:
            yield
        finally:
            if self.paused_at is None and self.segment_start is not None:
                wall, cpu = self.now()
                self.excluded_wall += wall - start[0]
                self.excluded_cpu += cpu - start[1]
                self.save_total["wall"] += wall - start[0]
                self.save_total["cpu"] += cpu - start[1]

    def batch(self, epoch: int, batch: Any) -> None:
        mask = batch["attention_mask"].bool()
        values = (int(mask.shape[0]), int(mask.sum()), int(batch["input_ids"][mask].sum()))
        h, n = self.fingerprints.get(str(epoch), [0, 0])
        for v in values:
            h = (h * 1_000_003 + v) % self.MOD
        self.fingerprints[str(epoch)] = [h, n + 1]

    def record(self, step: int, steps_per_epoch: int, metrics: dict[str, float], eval_spent: tuple[float, float],
               train_reading: tuple[float, float]) -> dict[str, Any]:
        entry = {"step": step, "epoch": round(step / steps_per_epoch, 4), "train_wall_s": train_reading[0],
                 "train_cpu_s": train_reading[1], "eval_wall_s": eval_spent[0], "eval_cpu_s": eval_spent[1],
                 "eval_wall_total_s": self.eval_total["wall"], "eval_cpu_total_s": self.eval_total["cpu"],
                 "peak_rss_mib": peak_rss_mib(), "metrics": metrics, "time": time.time()}
        self.history.append(entry)
        return entry
