"""The SQuAD tasks' settings: ``cfg.data`` and ``cfg.head`` (span decoding). Plain data: importing them loads no Lightning."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.run_settings import HeadSettings
from sesame.tasks.inputs.data_settings import DataSettings

#: ``data.on_bad_example``: stop at a malformed question (error) or leave it out with a warning (skip).
BAD_EXAMPLE_MODES = ("error", "skip")


def check_bad_example_mode(on_bad_example: str) -> None:
    """:class:`ConfigError` unless ``on_bad_example`` is one of :data:`BAD_EXAMPLE_MODES`."""
    if on_bad_example not in BAD_EXAMPLE_MODES:
        raise ConfigError(f"data.on_bad_example must be one of {BAD_EXAMPLE_MODES}, got {on_bad_example!r}")


#: ``data.train_windows``: of an answerable question's training windows, keep only those that hold the
#: answer, or all of them (those without it labelled [CLS], as BERT's original recipe and HF's run_qa do).
TRAIN_WINDOWS = ("with_answer", "all")


@dataclass(frozen=True, kw_only=True)
class SquadDataSettings(DataSettings):
    """``cfg.data`` of the SQuAD tasks; the keys of ``conf/data/squad_v1_slice.yaml``, described there.
    """

    tokenisation_keys = ("max_seq_length", "doc_stride")

    version_2_with_negative: bool
    doc_stride: int
    on_bad_example: str
    drop_train_overlap: bool
    train_windows: str  # with_answer | all

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bad_example_mode(self.on_bad_example)
        if self.train_windows not in TRAIN_WINDOWS:
            raise ConfigError(f"data.train_windows={self.train_windows!r} is not one of {', '.join(TRAIN_WINDOWS)}")

    @classmethod
    def before_the_setting(cls, saved: Mapping[str, Any]) -> dict[str, Any]:
        """SQuAD v1 trained only on the windows that hold the answer until ``data.train_windows`` came (and
        its head then masks [CLS]; the n-best probabilities depend on it)."""
        return {} if saved.get("version_2_with_negative") else {"train_windows": "with_answer"}

    @property
    def trains_null(self) -> bool:
        """Whether some training windows point at [CLS]: v2's unanswerable questions, or windows
        without the answer kept by ``train_windows=all``."""
        return self.version_2_with_negative or self.train_windows == "all"


@dataclass(frozen=True)
class SpanHeadSettings(HeadSettings):
    """``cfg.head`` of ``conf/task/squad_v1.yaml`` / ``squad_v2.yaml``: how spans are decoded."""

    n_best_size: int  # spans kept per question (nbest_predictions.json)
    max_answer_length: int  # longest answer, in tokens
    null_score_diff_threshold: float  # v2: answer "" when null score - best span score exceeds it
