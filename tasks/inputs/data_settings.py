"""What every task's ``cfg.data`` has (its files and how its batches are made): the base of each task's
data settings class (``tasks/<task>/settings.py``). Plain data: importing it loads no Lightning."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, ClassVar

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings


@dataclass(frozen=True, kw_only=True)
class DataSettings(Settings):
    """What every task's ``cfg.data`` has: its files and how its batches are made. Each task's
    settings class (``tasks/<task>/data.py``) adds its own keys."""

    group: ClassVar[str] = "data"
    #: Settings that define a trained model's outputs (its label or tag set, its kind of task): kept
    #: as trained whatever data the model is evaluated on (``tasks/saved/trained_overrides.py``).
    output_keys: ClassVar[tuple[str, ...]] = ()
    #: Settings that decide how the model's inputs are tokenised: the trained model's own on other
    #: data, unless the command names them.
    tokenisation_keys: ClassVar[tuple[str, ...]] = ("max_seq_length",)
    train_file: str | None
    validation_file: str | None
    test_file: str | None
    max_seq_length: int  # tokens per example or window
    batch_size: int
    eval_batch_size: int
    max_train_examples: int | None  # the first N (null = all)
    max_eval_examples: int | None
    num_workers: int
    group_by_length: bool  # training batches of similar length, shuffled batch by batch
    pad_to_multiple_of: int | None  # batches padded to a multiple of this many tokens (null: to the longest)
    max_tokens: int | None  # training batches of up to this many padded tokens, not batch_size examples (null: off)

    def __post_init__(self) -> None:
        for key in ("max_seq_length", "batch_size", "eval_batch_size"):
            if getattr(self, key) < 1:
                raise ConfigError(f"data.{key}={getattr(self, key)}: must be at least 1")
        for key in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ConfigError(f"data.{key}={value}: use a positive number, or null for all examples")
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise ConfigError(f"data.pad_to_multiple_of={self.pad_to_multiple_of}: use a positive number of tokens "
                              "(e.g. 32), or null to pad each batch to its longest example")
        if self.max_tokens is not None and self.max_tokens < self.max_seq_length:
            raise ConfigError(f"data.max_tokens={self.max_tokens} is below data.max_seq_length={self.max_seq_length}: "
                              f"the longest example would not fit in a batch. Fix: data.max_tokens={self.max_seq_length} "
                              "or more (e.g. batch_size x max_seq_length), or null for batches of data.batch_size examples")
        if self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers}: use 0 (load in the main process) or more")

    @classmethod
    def before_the_setting(cls, saved: Mapping[str, Any]) -> dict[str, Any]:
        """``{key: value}`` for data settings whose default changed after they were added: what a run
        saved before the key existed did (``saved``: its ``cfg.data`` over today's defaults), used instead of today's default
        when its checkpoint is read (``tasks/saved/config_upgrade.py``). None by default."""
        return {}
