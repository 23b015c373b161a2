"""``cfg.checkpoint``, typed: plain data (importing it loads no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings


@dataclass(frozen=True)
class CheckpointSettings(Settings):
    """``cfg.checkpoint`` (``conf/config.yaml``): extra checkpoints during training."""

    group = "checkpoint"
    every_n_train_steps: int | None  # also write checkpoints/last.ckpt every N optimiser steps

    def __post_init__(self) -> None:
        if self.every_n_train_steps is not None and self.every_n_train_steps < 1:
            raise ConfigError(f"checkpoint.every_n_train_steps={self.every_n_train_steps}: use a positive number, or null")
