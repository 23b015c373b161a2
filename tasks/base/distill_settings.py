"""``cfg.distill``, typed: plain data (importing it loads no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings


@dataclass(frozen=True)
class DistillSettings(Settings):
    """``cfg.distill`` (``conf/config.yaml``); ``teacher: null`` is plain training."""

    group = "distill"
    teacher: str | None  # a run folder or .ckpt of the same task and tokenizer
    alpha: float  # weight of the gold loss
    temperature: float
    cache: bool  # keep the teacher's logits per example on disk
    cache_dir: str | None  # null: $SESAME_CACHE_DIR/teacher_logits

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"distill.alpha={self.alpha}: the weight of the gold loss lies in [0, 1]")
        if self.temperature <= 0:
            raise ConfigError(f"distill.temperature={self.temperature}: use a positive temperature")
