"""Answers of SQuAD questions from their windows' logits: strings, n-best lists and null scores.

The top spans of each window come from ``heads/span_decode.py`` (tensors); here the windows of one
question are merged, ranked by raw ``start + end`` logit score (as BERT's ``run_squad`` and HF
``run_qa`` do; logits are not normalised per window), and turned into text with the char offsets.

Tie-breaking (total order, the same in every step, which makes the output deterministic):
    1. higher score,
    2. earlier character start in the context,
    3. earlier character end (shorter span),
    4. earlier window (order of the input rows),
    5. earlier start token, then earlier end token.
A character span found in several (overlapping) windows is listed once, with its best-ranked
occurrence. Exactness caveat: the per-window top-k assumes distinct token spans of one window map
to distinct character spans, true for tokenizers with strictly increasing offsets (WordPiece,
SentencePiece); with byte-level BPE splitting one character into several tokens a window may
contribute fewer than ``n_best_size`` distinct spans.

SQuAD v2: the null score of a window is ``start[0] + end[0]`` ([CLS]); a question's null score is
the minimum over its windows (HF ``run_qa``), and ``null_score_diff = null - best span score``. The
answer is ``""`` when ``null_score_diff > null_score_diff_threshold``. The null entry ("" with char
offsets -1) is listed in the n-best among the spans by score, after spans of equal score; the
probabilities are a softmax over the listed scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from sesame.heads.span_decode import top_spans_per_window


@dataclass
class QuestionPrediction:
    """Decoded answer of one question.

    ``text`` is the final answer ("" when SQuAD v2 predicts no answer); ``best_span_text`` the best
    non-null span whatever the null score. ``nbest`` is ranked by score, each entry
    ``{text, start_logit, end_logit, score, probability, char_start, char_end}`` (probability =
    softmax over the listed scores; the v2 null entry has ``text == ""`` and char offsets -1).
    """

    id: str
    text: str
    best_span_text: str
    best_score: float
    nbest: list[dict] = field(default_factory=list)
    null_score: float | None = None
    null_score_diff: float | None = None

    @property
    def confidence(self) -> float:
        """The n-best probability of the final answer (of the null entry when it is ""); 0 if unlisted."""
        return next((e["probability"] for e in self.nbest if e["text"] == self.text), 0.0)


def _softmax(scores: Sequence[float]) -> list[float]:
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        return []
    x = np.exp(x - x.max())
    return (x / x.sum()).tolist()


def decode_predictions(
    start_logits: Tensor,
    end_logits: Tensor,
    offsets: Tensor,
    example_index: Tensor | Sequence[int],
    contexts: Sequence[str],
    example_ids: Sequence[str],
    *,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    allow_null: bool = False,
    null_score_diff_threshold: float = 0.0,
    context_mask: Tensor | None = None,
    chunk_size: int = 256,
) -> dict[str, QuestionPrediction]:
    """Decode the answers of all questions from their windows' logits.

    Args:
        start_logits, end_logits: [N, T] logits of N windows (padded to a common T).
        offsets: [N, T, 2] int char offsets of each token in its example's context, -1 on
            non-context and padding positions.
        example_index: [N] index into ``contexts``/``example_ids`` of each window's question.
            Windows of one question are taken in row order (= document order when rows are in
            feature order); the rows of different questions may interleave.
        contexts, example_ids: per question (length E).
        n_best_size: spans kept per question (and per window before merging).
        max_answer_length: longest span, in tokens.
        allow_null: SQuAD v2 null handling (position 0 is the null pointer).
        null_score_diff_threshold: answer "" when ``null_score_diff`` exceeds it (v2 only).
        context_mask: [N, T] bool; defaults to ``offsets[..., 0] >= 0``.
        chunk_size: windows scored at once (bounds memory to chunk_size x T x L floats).

    Returns:
        ``{example_id: QuestionPrediction}`` for every question with at least one window.
    """
    if start_logits.shape != end_logits.shape or start_logits.dim() != 2:
        raise ValueError(f"start/end logits must both be [N, T]; got {tuple(start_logits.shape)} and {tuple(end_logits.shape)}")
    if offsets.shape[:2] != start_logits.shape:
        raise ValueError(f"offsets must be [N, T, 2] matching the logits; got {tuple(offsets.shape)}")
    if context_mask is None:
        context_mask = offsets[..., 0] >= 0
    ex_index = torch.as_tensor(example_index).long().tolist()
    n = start_logits.shape[0]
    if len(ex_index) != n:
        raise ValueError(f"example_index has {len(ex_index)} entries for {n} windows")

    # Per-window top-k spans (vectorised, chunked), then plain lists for the small merge loop.
    scores, starts, ends, s_logits, e_logits, c_starts, c_ends = [], [], [], [], [], [], []
    for lo in range(0, n, chunk_size):
        sl = slice(lo, lo + chunk_size)
        top = top_spans_per_window(
            start_logits[sl], end_logits[sl], context_mask[sl], max_answer_length, n_best_size, offsets[sl]
        )
        scores += top.score.tolist()
        starts += top.start.tolist()
        ends += top.end.tolist()
        s_logits += top.start_logit.tolist()
        e_logits += top.end_logit.tolist()
        c_starts += top.char_start.tolist()
        c_ends += top.char_end.tolist()
    if allow_null:
        null_start = start_logits[:, 0].double().tolist()
        null_end = end_logits[:, 0].double().tolist()

    windows_of: dict[int, list[int]] = {}
    for row, ex in enumerate(ex_index):
        windows_of.setdefault(ex, []).append(row)

    results: dict[str, QuestionPrediction] = {}
    for ex, rows in windows_of.items():
        context = contexts[ex]
        cands = []  # (sort key, char span, start_logit, end_logit)
        null = None  # (score, start_logit, end_logit) of the min-null window
        for rank, row in enumerate(rows):
            for j, score in enumerate(scores[row]):
                if score == float("-inf"):
                    break  # rows are sorted: the rest are invalid too
                s, e = starts[row][j], ends[row][j]
                cs, ce = c_starts[row][j], c_ends[row][j]
                cands.append(((-score, cs, ce, rank, s, e), (cs, ce), s_logits[row][j], e_logits[row][j]))
            if allow_null:
                ns = null_start[row] + null_end[row]
                if null is None or ns < null[0]:  # strict: earliest window wins ties
                    null = (ns, null_start[row], null_end[row])
        cands.sort(key=lambda c: c[0])

        nbest: list[dict] = []
        seen: set[tuple[int, int]] = set()
        for key, span, sl_, el_ in cands:
            if span in seen:
                continue
            seen.add(span)
            nbest.append(
                {"text": context[span[0] : span[1]], "start_logit": sl_, "end_logit": el_, "score": -key[0],
                 "char_start": span[0], "char_end": span[1]}
            )
            if len(nbest) == n_best_size:
                break
        best_text = nbest[0]["text"] if nbest else ""
        best_score = nbest[0]["score"] if nbest else float("-inf")

        null_score = null_diff = None
        answer = best_text
        if allow_null and null is not None:
            null_score = null[0]
            null_diff = null_score - best_score if nbest else math.inf
            if null_diff > null_score_diff_threshold:
                answer = ""
            null_entry = {"text": "", "start_logit": null[1], "end_logit": null[2], "score": null_score,
                          "char_start": -1, "char_end": -1}
            # Listed among the spans by score; after spans of equal score.
            pos = next((i for i, c in enumerate(nbest) if c["score"] < null_score), len(nbest))
            nbest.insert(pos, null_entry)
        for entry, p in zip(nbest, _softmax([c["score"] for c in nbest])):
            entry["probability"] = p

        results[example_ids[ex]] = QuestionPrediction(
            id=example_ids[ex], text=answer, best_span_text=best_text, best_score=best_score,
            nbest=nbest, null_score=null_score, null_score_diff=null_diff,
        )
    return results
