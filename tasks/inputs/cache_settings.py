"""``cfg.cache``, typed: plain data (importing it loads no torch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class CacheSettings(Settings):
    """``cfg.cache`` (``conf/config.yaml``): whether and where frozen features are cached."""

    group = "cache"
    enabled: bool | str  # true | false | auto (on exactly when finetune=frozen)
    dir: str | None  # null: $SESAME_CACHE_DIR, else ~/.cache/sesame/features
    dtype: str  # float32 | float16

    def __post_init__(self) -> None:
        if self.enabled not in (True, False, "auto"):
            raise ConfigError(f"cache.enabled={self.enabled!r}: use true, false or auto")
        if self.dtype not in DTYPES:
            raise ConfigError(f"cache.dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")

    def applies(self, encoder_frozen: bool) -> bool:
        """Whether this run reads cached features; ``enabled=true`` with a trainable encoder is an error."""
        if self.enabled is True and not encoder_frozen:
            raise ConfigError("cache.enabled=true needs finetune=frozen: a trained encoder's features change every "
                              "step. Fix: set finetune=frozen, or cache.enabled=auto for sweeps over both")
        return bool(self.enabled) and encoder_frozen
