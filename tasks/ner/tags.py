"""NER tags: IOB1 -> BIO2 conversion, the tag set (``data.tag_names`` or the training file) and tag ids.

Tags are converted to BIO2: ``tag_scheme=iob1`` converts, ``bio`` keeps the file as is, ``auto``
converts a file in which some ``I-X`` starts a chunk (IOB1, as CoNLL-2003's files are). The tag set
comes from the training data: ``O`` first, then ``B-X`` and ``I-X`` for every type ``X`` seen, sorted.
(Both prefixes of a seen type are always included, so a dev file with a multi-word entity of a type
that is only ever one word long in training is still readable.) A type not in the training data is
an error. Files are read (and each tag's syntax checked) by ``tasks/ner/readers.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np

from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.ner.readers import NerExamples

log = logging.getLogger(__name__)

TAG_SCHEMES = ("auto", "iob1", "bio")


def _chunk_starts_with_inside(tags: Sequence[str]) -> np.ndarray:
    """[n] bool: positions holding an ``I-X`` that does not continue an ``X`` chunk."""
    prev = ["O", *tags[:-1]]
    return np.array([t[0] == "I" and (p == "O" or p[2:] != t[2:]) for p, t in zip(prev, tags)], dtype=bool)


def is_iob1(sequences: Iterable[Sequence[str]]) -> bool:
    """True when some ``I-X`` starts a chunk (IOB1; never the case in valid BIO2)."""
    return any(_chunk_starts_with_inside(tags).any() for tags in sequences)


def iob1_to_bio2(tags: Sequence[str]) -> list[str]:
    """IOB1 -> BIO2: an ``I-X`` that starts a chunk becomes ``B-X``; valid BIO2 is unchanged."""
    starts = _chunk_starts_with_inside(tags)
    return [f"B-{t[2:]}" if s else t for t, s in zip(tags, starts)]


def apply_tag_scheme(examples: NerExamples, scheme: str) -> NerExamples:
    """Convert ``examples`` to BIO2 in place per ``scheme`` (auto | iob1 | bio); returns them."""
    if scheme not in TAG_SCHEMES:
        raise ConfigError(f"data.tag_scheme={scheme!r} is not one of {', '.join(TAG_SCHEMES)}")
    if scheme == "bio":
        return examples
    if scheme == "auto" and not is_iob1(examples.tags):
        return examples
    if scheme == "auto":
        log.info("%s: some I-X tags start a chunk, reading it as IOB1 and converting to BIO2", examples.path)
    examples.tags = [iob1_to_bio2(t) for t in examples.tags]
    return examples


def build_tag_set(sequences: Iterable[Sequence[str]]) -> list[str]:
    """``["O", "B-A", "B-B", ..., "I-A", "I-B", ...]``: both prefixes of every type seen, sorted."""
    types = sorted({t[2:] for tags in sequences for t in tags if t != "O"})
    return ["O", *sorted([f"B-{x}" for x in types] + [f"I-{x}" for x in types])]


def encode_tags(examples: NerExamples, tag_names: Sequence[str], role: str = "this") -> list[np.ndarray]:
    """Tag ids per sentence (int64 arrays); an unknown tag is an error naming its line."""
    index = {name: i for i, name in enumerate(tag_names)}
    out = []
    for i, tags in enumerate(examples.tags):
        try:
            out.append(np.array([index[t] for t in tags], dtype=np.int64))
        except KeyError:
            j = next(j for j, t in enumerate(tags) if t not in index)
            raise DataError(
                f"{examples.where(i, j)}: tag {tags[j]!r} in {role} file is not in the training data's tag set "
                f"{list(tag_names)}; every entity type must occur in data.train_file"
            ) from None
    return out
