"""``cfg.finetune``, typed: plain data (importing it loads no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

FINETUNE_MODES = ("frozen", "full", "top_k", "bitfit", "lora")


@dataclass(frozen=True)
class FinetuneSettings(Settings):
    """``cfg.finetune`` (``conf/finetune/*.yaml``)."""

    group = "finetune"
    mode: str
    top_k: int
    encoder_lr: float
    head_lr: float
    weight_decay: float
    warmup_ratio: float
    adam_epsilon: float
    #: Train the word embeddings row-sparsely: only the rows a batch reads get a gradient and an AdamW
    #: update (``tasks/encoders/sparse_rows.py``; lazy for the rows it does not read).
    sparse_embeddings: bool = False
    #: Leave the word-embedding matrix [V, H] as pretrained under ``mode=full`` (half of MiniLM-L6's weights):
    #: no gradient, no AdamW step for it. Position and segment embeddings and the embedding norm still train.
    freeze_embeddings: bool = False
    # finetune=lora only (conf/finetune/lora.yaml)
    lora_rank: int | None = None
    lora_alpha: float | None = None
    lora_dropout: float | None = None
    lora_target_modules: tuple[str, ...] | None = None  # null: the encoder family's attention projections

    def __post_init__(self) -> None:
        if self.mode not in FINETUNE_MODES:
            raise ConfigError(f"finetune.mode={self.mode!r} is not one of {', '.join(FINETUNE_MODES)}")
        if self.mode == "lora":
            for key in ("lora_rank", "lora_alpha", "lora_dropout"):
                if getattr(self, key) is None:
                    raise ConfigError(f"finetune.mode=lora needs finetune.{key} (see conf/finetune/lora.yaml)")
            if self.lora_rank < 1 or not 0 <= self.lora_dropout < 1:
                raise ConfigError(f"finetune.lora_rank={self.lora_rank} must be >= 1 and finetune.lora_dropout="
                                  f"{self.lora_dropout} in [0, 1)")
        if self.mode == "top_k" and self.top_k < 1:
            raise ConfigError("finetune.mode=top_k needs finetune.top_k >= 1 (how many top layers train)")
        positive = ["head_lr", "adam_epsilon"] + ([] if self.mode == "frozen" else ["encoder_lr"])
        for key in positive:
            if not getattr(self, key) > 0:
                raise ConfigError(f"finetune.{key}={getattr(self, key)}: must be positive"
                                  + (" (the encoder trains with finetune.mode=" + self.mode + ")" if key == "encoder_lr" else ""))
        if self.freeze_embeddings and self.sparse_embeddings:
            raise ConfigError("finetune.freeze_embeddings=true and finetune.sparse_embeddings=true: a frozen word "
                              "embedding has no rows to update. Fix: set one of them to false")
        if self.weight_decay < 0:
            raise ConfigError(f"finetune.weight_decay={self.weight_decay}: must be 0 or more")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"finetune.warmup_ratio={self.warmup_ratio}: the share of steps spent warming up, in [0, 1)")
