"""Entity-level NER scores (conlleval semantics) and a CoNLL prediction writer.

An entity is a (type, first word, last word) span; a predicted entity counts only if the gold data
has exactly the same span with the same type. Precision, recall and F1 are micro-averaged over all
entities (``overall``) and computed per type.

Two ways of reading spans from BIO tags, chosen by ``mode``:

- ``"conlleval"`` (default; what the CoNLL shared-task script ``conlleval`` and
  ``seqeval.metrics.f1_score`` with its default mode compute): an ``I-X`` that does not continue a
  chunk of type ``X`` (after ``O``, at the start, or after ``B-Y``/``I-Y``) *starts* a new chunk.
- ``"strict"`` (``seqeval`` with ``mode="strict", scheme=IOB2``): only ``B-X`` starts a chunk; an
  ``I-X`` that does not continue an ``X`` chunk belongs to no entity.

In both, a chunk continues over ``I-X`` tags while the type stays ``X``. Data read by
``tasks/ner/tags.py`` is BIO2, where the two agree on the gold side; they differ only on
predictions with invalid transitions (possible with a softmax head, impossible with the constrained
CRF).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sesame.tasks.core.atomic_files import write_text_atomic
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError

MODES = ("conlleval", "strict")
_O, _B, _I = 0, 1, 2


@dataclass(frozen=True)
class Score:
    """Precision / recall / F1 (fractions in [0, 1]) with the counts they come from."""

    precision: float
    recall: float
    f1: float
    support: int  # gold entities
    predicted: int
    correct: int

    @classmethod
    def from_counts(cls, correct: int, predicted: int, gold: int) -> Score:
        # Zero denominators give 0, as seqeval (zero_division="warn") and conlleval do.
        precision = correct / predicted if predicted else 0.0
        recall = correct / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return cls(precision, recall, f1, gold, predicted, correct)


@dataclass(frozen=True)
class NerScores:
    """``overall`` micro-averaged scores and ``per_type`` scores (types sorted by name)."""

    overall: Score
    per_type: dict[str, Score] = field(default_factory=dict)

    def as_flat_dict(self, prefix: str = "") -> dict[str, float]:
        """``{prefix}f1``, ``{prefix}precision``, ``{prefix}recall`` and ``{prefix}{type}_f1`` etc."""
        out = {f"{prefix}precision": self.overall.precision, f"{prefix}recall": self.overall.recall, f"{prefix}f1": self.overall.f1}
        for name, score in self.per_type.items():
            out[f"{prefix}{name}_precision"] = score.precision
            out[f"{prefix}{name}_recall"] = score.recall
            out[f"{prefix}{name}_f1"] = score.f1
        return out


def _encode(sequences: Sequence[Sequence[str]], type_ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten sentences, with an ``O`` between them, into prefix codes and type ids (both [N]).

    ``type_ids`` is extended in place with unseen types; ``O`` has type -1.
    """
    prefixes: list[int] = []
    types: list[int] = []
    for sentence in sequences:
        for tag in sentence:
            if tag == "O":
                prefixes.append(_O)
                types.append(-1)
            elif len(tag) > 2 and tag[1] == "-" and tag[0] in "BI":
                prefixes.append(_B if tag[0] == "B" else _I)
                types.append(type_ids.setdefault(tag[2:], len(type_ids)))
            else:
                raise ValueError(f"tag {tag!r} is not BIO (expected 'O', 'B-TYPE' or 'I-TYPE')")
        prefixes.append(_O)  # sentence separator: no chunk crosses sentences
        types.append(-1)
    return np.asarray(prefixes, dtype=np.int8), np.asarray(types, dtype=np.int64)


def _spans(prefixes: np.ndarray, types: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entity spans of flattened tags: ``(types, starts, ends)``, each [E], ends inclusive."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {MODES}")
    inside = prefixes != _O
    prev_prefix = np.concatenate([[_O], prefixes[:-1]])
    prev_type = np.concatenate([[-1], types[:-1]])
    # A token continues the previous chunk iff it is I-X right after B-X or I-X.
    cont = (prefixes == _I) & (prev_prefix != _O) & (prev_type == types)
    starts = np.flatnonzero(inside & ~cont)
    next_cont = np.concatenate([cont[1:], [False]])
    ends = np.flatnonzero(inside & ~next_cont)  # chunks pair up with starts, in order
    span_types = types[starts]
    if mode == "strict":  # a chunk that begins with I-X is no entity
        keep = prefixes[starts] == _B
        starts, ends, span_types = starts[keep], ends[keep], span_types[keep]
    return span_types, starts, ends


def get_entities(tags: Sequence[str], mode: str = "conlleval") -> list[tuple[str, int, int]]:
    """Entities of one tag sequence as ``(type, start, end)`` (end inclusive), in order."""
    type_ids: dict[str, int] = {}
    prefixes, types = _encode([tags], type_ids)
    names = list(type_ids)
    span_types, starts, ends = _spans(prefixes, types, mode)
    return [(names[t], int(s), int(e)) for t, s, e in zip(span_types, starts, ends)]


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], mode: str = "conlleval"
) -> NerScores:
    """Entity-level scores of ``predicted`` against ``gold`` (lists of per-word tag sequences)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
    type_ids: dict[str, int] = {}
    gold_spans = _spans(*_encode(gold, type_ids), mode)
    pred_spans = _spans(*_encode(predicted, type_ids), mode)
    num_types = len(type_ids)

    # One integer per (type, start, end); positions index the same flattened sequence on both sides.
    width = int(max(gold_spans[2].max(initial=0), pred_spans[2].max(initial=0))) + 1
    n_types = max(num_types, 1)

    def keys(span_types: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return (starts.astype(np.int64) * width + ends) * n_types + span_types

    correct_types = np.intersect1d(keys(*gold_spans), keys(*pred_spans)) % n_types

    gold_count = np.bincount(gold_spans[0], minlength=num_types)
    pred_count = np.bincount(pred_spans[0], minlength=num_types)
    correct_count = np.bincount(correct_types, minlength=num_types)
    names = list(type_ids)
    per_type = {
        names[t]: Score.from_counts(int(correct_count[t]), int(pred_count[t]), int(gold_count[t]))
        for t in sorted(range(num_types), key=names.__getitem__)
    }
    overall = Score.from_counts(int(correct_count.sum()), int(pred_count.sum()), int(gold_count.sum()))
    return NerScores(overall, per_type)


def format_report(scores: NerScores, digits: int = 4) -> str:
    """A plain-text table (type, precision, recall, F1, support), like seqeval's report."""
    rows = [(name, s) for name, s in scores.per_type.items()] + [("overall", scores.overall)]
    width = max([len(name) for name, _ in rows] + [8])
    lines = [f"{'':<{width}}  precision     recall         f1    support"]
    for name, s in rows:
        lines.append(f"{name:<{width}}  {s.precision:>9.{digits}f}  {s.recall:>9.{digits}f}  {s.f1:>9.{digits}f}  {s.support:>9d}")
    return "\n".join(lines) + "\n"


def format_conll_predictions(
    tokens: Sequence[Sequence[str]],
    gold: Sequence[Sequence[str]],
    predicted: Sequence[Sequence[str]],
    delimiter: str = " ",
) -> str:
    """CoNLL text with one ``token gold predicted`` line per word and a blank line after each sentence.

    The default space delimiter is what the ``conlleval`` script reads. Whitespace inside a token
    (possible in JSON-lines input) is replaced by ``_`` so every line keeps exactly three columns.
    """
    if not (len(tokens) == len(gold) == len(predicted)):
        raise ValueError(f"{len(tokens)} token, {len(gold)} gold and {len(predicted)} predicted sentences")
    out: list[str] = []
    for i, (words, g, p) in enumerate(zip(tokens, gold, predicted)):
        if not (len(words) == len(g) == len(p)):
            raise ValueError(f"sentence {i}: {len(words)} tokens, {len(g)} gold and {len(p)} predicted tags")
        for word, gold_tag, pred_tag in zip(words, g, p):
            word = "_".join(word.split()) or "_"
            out.append(f"{word}{delimiter}{gold_tag}{delimiter}{pred_tag}\n")
        out.append("\n")
    return "".join(out)


def write_conll_predictions(
    path: str | os.PathLike,
    tokens: Sequence[Sequence[str]],
    gold: Sequence[Sequence[str]],
    predicted: Sequence[Sequence[str]],
    delimiter: str = " ",
) -> Path:
    """Write :func:`format_conll_predictions` to ``path`` atomically; returns the path."""
    return write_text_atomic(path, format_conll_predictions(tokens, gold, predicted, delimiter))



def example_scores(run_dir: Path, mode: str, metric: str) -> tuple[list[str], Callable[[np.ndarray], float]]:
    """A run's dev sentences and ``metric`` recomputed on any resample of them (``sesame-report``'s paired
    bootstrap), from the run's ``val_predictions.conll`` (``word gold predicted``, which holds the gold tags).

    ``metric``: ``val_f1`` / ``val_precision`` / ``val_recall``, or a type's ``val_<type>_f1`` etc., read
    with ``mode`` (``task.entity_metric``). No entity crosses a sentence, so the entity counts of a
    resample are the sums of its sentences' (each from :func:`entity_scores`), and the scores come from
    them as :class:`Score` makes them. Returns ``(keys, score)``: ``keys`` [N] the sentences' numbers,
    ``score(indices)`` the metric over the sentences at ``indices`` [n] (repeats allowed).
    """
    path = run_dir / "val_predictions.conll"
    if not path.is_file():
        raise MissingFileError(f"{path}: no such prediction file (the run did not validate, or predates it)")
    gold: list[list[str]] = [[]]
    predicted: list[list[str]] = [[]]
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            if gold[-1]:
                gold.append([]), predicted.append([])
            continue
        fields = line.split(" ")
        if len(fields) != 3:
            raise DataError(f"{path}:{number}: {len(fields)} space-separated fields, expected 3 (word gold predicted)")
        gold[-1].append(fields[1]), predicted[-1].append(fields[2])
    if not gold[-1]:
        gold.pop(), predicted.pop()
    sentences = [entity_scores([g], [p], mode=mode) for g, p in zip(gold, predicted)]
    types = sorted({t for s in sentences for t in s.per_type})
    stat, _, entity_type = metric.removeprefix("val_")[::-1].partition("_")
    stat, entity_type = stat[::-1], entity_type[::-1]
    if not metric.startswith("val_") or stat not in ("f1", "precision", "recall") or entity_type not in ("", *types):
        raise ConfigError(f"{metric} cannot be recomputed sentence by sentence from {path.name}; these can: val_f1, "
                          f"val_precision, val_recall and val_<type>_f1 etc. for the types {types}")

    def counts(score: Score) -> tuple[int, int, int]:
        return score.correct, score.predicted, score.support

    absent = Score.from_counts(0, 0, 0)
    table = np.asarray([counts(s.per_type.get(entity_type, absent) if entity_type else s.overall) for s in sentences],
                       dtype=np.int64).reshape(-1, 3)  # [N, 3]: correct, predicted, gold entities
    return [str(i) for i in range(len(sentences))], lambda at: getattr(Score.from_counts(*table[at].sum(axis=0).tolist()), stat)
