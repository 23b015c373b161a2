"""The NER task's settings: ``cfg.data`` and ``cfg.head`` (tagger, CRF). Plain data: importing them loads no Lightning."""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.base.run_settings import HeadSettings, TaskSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inputs.data_settings import DataSettings
from sesame.tasks.ner.readers import FORMATS
from sesame.tasks.ner.tags import TAG_SCHEMES

@dataclass(frozen=True, kw_only=True)
class NerDataSettings(DataSettings):
    """``cfg.data`` for ``task=ner``; the keys and their values are in ``conf/data/wnut17_slice.yaml``."""

    output_keys = ("tag_names",)
    tokenisation_keys = ("max_seq_length", "label_all_subwords")

    format: str
    tag_column: int
    tag_scheme: str
    label_all_subwords: bool
    tag_names: tuple[str, ...] | None  # null: from the training data (filled in for the checkpoint)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.format not in FORMATS:
            raise ConfigError(f"data.format={self.format!r} is not one of {', '.join(FORMATS)}")
        if self.tag_scheme not in TAG_SCHEMES:
            raise ConfigError(f"data.tag_scheme={self.tag_scheme!r} is not one of {', '.join(TAG_SCHEMES)}")


@dataclass(frozen=True)
class TaggerHeadSettings(HeadSettings):
    """``cfg.head`` of ``conf/task/ner.yaml`` (``heads/tagger.py``, ``heads/crf.py``)."""

    weight_keys = ("dropout", "crf", "constrain_bio")

    dropout: float
    crf: bool  # linear-chain CRF over words, Viterbi decoding
    constrain_bio: bool  # with crf: decoding never emits O -> I-X or B-X -> I-Y


@dataclass(frozen=True)
class NerTaskSettings(TaskSettings):
    """``cfg.task`` of ``conf/task/ner.yaml``: the generic task keys and how entities are read from tags."""

    entity_metric: str  # conlleval | strict (tasks/ner/metrics.py MODES)
