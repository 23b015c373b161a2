"""The multiple-choice task's settings: ``cfg.data`` and ``cfg.head``. Plain data: importing them loads no Lightning."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.run_settings import HeadSettings
from sesame.tasks.inputs.data_settings import DataSettings


@dataclass(frozen=True, kw_only=True)
class MultipleChoiceDataSettings(DataSettings):
    """``cfg.data`` for ``task=multiple_choice`` (``conf/data/swag_sample.yaml``): SWAG CSV files or JSON lines
    (``tasks/multiple_choice/readers.py``), each choice tokenised as ``[context] [question + ending]``."""


@dataclass(frozen=True)
class ChoiceHeadSettings(HeadSettings):
    """``cfg.head`` of ``conf/task/multiple_choice.yaml``: the scorer of each (context, ending) pair."""

    weight_keys = ("dropout",)
    dropout: float  # on the pooled vector of each pair, before the linear scorer

    def __post_init__(self) -> None:
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"head.dropout={self.dropout}: must be at least 0 and below 1")
