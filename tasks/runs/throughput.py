"""What a training run processed and how fast: ``<run>/train_throughput.json``.

Per training step (batch start to batch end: forward, backward, clipping, optimiser step; validation
excluded) it counts examples, real tokens (``attention_mask``) and tokens processed (the padded batch,
``input_ids.numel()``), so padding and batching choices (``data.group_by_length``) show as numbers.
A resumed run counts the steps it ran itself.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from sesame.tasks.core.atomic_files import write_json_atomic

THROUGHPUT_FILE = "train_throughput.json"


class TrainingThroughput(Callback):
    """Times every training step and counts what it processed; writes :data:`THROUGHPUT_FILE` at the end of fit."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.step_seconds: list[float] = []
        self.examples = self.tokens = self.padded_tokens = 0
        self._started: float | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._started is None:
            return
        self.step_seconds.append(time.perf_counter() - self._started)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        self.examples += int(ids.shape[0])
        self.tokens += int(mask.sum())
        self.padded_tokens += int(ids.numel())

    def summary(self) -> dict[str, float | int]:
        seconds = sum(self.step_seconds)
        return {
            "steps": len(self.step_seconds), "seconds": seconds,
            "median_step_seconds": statistics.median(self.step_seconds) if self.step_seconds else 0.0,
            "examples": self.examples, "tokens": self.tokens, "padded_tokens": self.padded_tokens,
            "padding_fraction": 1 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0,
            "examples_per_second": self.examples / seconds if seconds else 0.0,
            "tokens_per_second": self.tokens / seconds if seconds else 0.0,
        }

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            write_json_atomic(self.run_dir / THROUGHPUT_FILE, self.summary())
