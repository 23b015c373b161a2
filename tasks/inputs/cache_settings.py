"""``cfg.cache``, typed: plain data (importing it loads no torch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

DTYPES = {"float32": np.float32, "float16": np.float16}
LAYER_CHOICES = ("fusion", "all")


@dataclass(frozen=True)
class CacheSettings(Settings):
    """``cfg.cache`` (``conf/config.yaml``): whether and where frozen features are cached, and which layers."""

    group = "cache"
    enabled: bool | str  # true | false | auto (on exactly when finetune=frozen)
    dir: str | None  # null: $SESAME_CACHE_DIR, else ~/.cache/sesame/features
    dtype: str  # float32 | float16
    layers: str  # fusion: only the hidden states the fusion reads | all: every hidden state

    def __post_init__(self) -> None:
        if self.enabled not in (True, False, "auto"):
            raise ConfigError(f"cache.enabled={self.enabled!r}: use true, false or auto")
        if self.dtype not in DTYPES:
            raise ConfigError(f"cache.dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.layers not in LAYER_CHOICES:
            raise ConfigError(f"cache.layers={self.layers!r}: use fusion (store the hidden states the fusion reads) "
                              "or all (every hidden state, one entry for a sweep over fusion)")

    def applies(self, encoder_frozen: bool) -> bool:
        """Whether this run reads cached features; ``enabled=true`` with a trainable encoder is an error."""
        if self.enabled is True and not encoder_frozen:
            raise ConfigError("cache.enabled=true needs finetune=frozen: a trained encoder's features change every "
                              "step. Fix: set finetune=frozen, or cache.enabled=auto for sweeps over both")
        return bool(self.enabled) and encoder_frozen

    def stored_layers(self, fusion_reads: Sequence[int], num_hidden_states: int) -> tuple[int, ...]:
        """The hidden-state indices an entry built for this run holds (``fusion_reads``: absolute indices)."""
        return tuple(range(num_hidden_states)) if self.layers == "all" else tuple(sorted(set(fusion_reads)))
