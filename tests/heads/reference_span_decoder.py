"""Plain Python references for span decoding, and random windows to compare them on.

:func:`reference_top_spans` is the per-window ranking of ``heads/span_decode.py``
(``top_spans_per_window``); :func:`reference_decode` the per-question answers of
``tasks/qa/predictions.py`` (``decode_predictions``). Each is one loop over every allowed
(window, start, end), then a full sort: slow and obviously right, with the documented
tie-breaking and de-duplication. Shared by tests/heads/test_span_decode.py,
tests/tasks/qa/test_predictions.py (exactness) and benchmarks/qa_speed.py (speed), so all measure
against the same thing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

Candidate = tuple[str, float, float, float]  # (text, score, start_logit, end_logit)
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]  # one per token


def reference_decode(
    start: Sequence[Sequence[float]],
    end: Sequence[Sequence[float]],
    offsets: Sequence[Sequence[Sequence[int]]],
    ex_index: Sequence[int],
    contexts: Sequence[str],
    ids: Sequence[str],
    n_best: int,
    max_len: int,
    allow_null: bool,
    thresh: float,
) -> dict[str, tuple[str, str, list[Candidate], float | None, float | None]]:
    """``{id: (answer, best_span_text, nbest, null_score, null_score_diff)}``.

    Args are plain lists (``tensor.tolist()``): start/end logits [N][T], char offsets [N][T][2]
    (-1 outside the context), the question index of each window, and per question its context and
    id. A span (s, e) is allowed when both ends are context tokens and ``0 <= e - s < max_len``;
    candidates rank by (-score, char start, char end, window rank, s, e) and a character span is
    listed once. ``nbest`` holds the spans only (no null entry).
    """
    rows_of: dict[int, list[int]] = {}
    for row, ex in enumerate(ex_index):
        rows_of.setdefault(ex, []).append(row)
    out = {}
    for ex in sorted(rows_of):
        cands, null = [], None
        for rank, r in enumerate(rows_of[ex]):
            st, en, off = start[r], end[r], offsets[r]
            T = len(st)
            for s in range(T):
                if off[s][0] < 0:
                    continue
                for e in range(s, min(T, s + max_len)):  # the e >= s, e - s + 1 <= max_len band
                    if off[e][0] < 0:
                        continue
                    score = float(st[s]) + float(en[e])
                    cands.append(((-score, off[s][0], off[e][1], rank, s, e), float(st[s]), float(en[e])))
            ns = float(st[0]) + float(en[0])
            if null is None or ns < null:
                null = ns
        cands.sort(key=lambda c: c[0])
        nbest: list[Candidate] = []
        seen: set[tuple[int, int]] = set()
        for key, sl, el in cands:
            if (key[1], key[2]) in seen:
                continue
            seen.add((key[1], key[2]))
            nbest.append((contexts[ex][key[1] : key[2]], -key[0], sl, el))
            if len(nbest) == n_best:
                break
        best_text, best_score = nbest[0][0], nbest[0][1]
        answer = best_text
        diff = None
        if allow_null:
            diff = null - best_score
            if diff > thresh:
                answer = ""
        out[ids[ex]] = (answer, best_text, nbest, null if allow_null else None, diff)
    return out


def reference_top_spans(
    start: Sequence[float],
    end: Sequence[float],
    context: Sequence[bool],
    max_len: int,
    k: int,
    offsets: Sequence[Sequence[int]] | None = None,
) -> list[tuple[float, int, int]]:
    """The best ``k`` allowed spans ``(score, s, e)`` of one window, ranked by (-score, char start,
    char end, s, e) when ``offsets`` [T][2] are given, else by (-score, s, e)."""
    cands = []
    for s_tok in range(len(start)):
        for e_tok in range(s_tok, min(len(start), s_tok + max_len)):
            if context[s_tok] and context[e_tok]:
                score = float(start[s_tok]) + float(end[e_tok])
                chars = (offsets[s_tok][0], offsets[e_tok][1]) if offsets is not None else ()
                cands.append(((-score, *chars, s_tok, e_tok), score, s_tok, e_tok))
    cands.sort(key=lambda c: c[0])
    return [(score, s_tok, e_tok) for _, score, s_tok, e_tok in cands[:k]]


def words_with_offsets(words: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """``(context, [(char start, char end) of each word])`` for ``words`` joined by single spaces."""
    spans, pos = [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    return " ".join(words), spans


def random_windows(rng: random.Random, n_questions: int, integer: bool):
    """Random contexts of one word per token, split into overlapping windows with question + padding.

    Returns ``(start, end, offsets, ex_index, contexts, ids)``: [N, T] float32 logits (integer-valued
    when ``integer``, so ties are common), [N, T, 2] char offsets (-1 outside the context), the
    question of each window (rows of different questions may interleave), and per question its
    context and id.
    """
    contexts, ids, rows = [], [], []
    for q in range(n_questions):
        n_tok = rng.randint(1, 14)
        context, spans = words_with_offsets([rng.choice(WORDS) for _ in range(n_tok)])
        contexts.append(context)
        ids.append(f"q{q}")
        win, stride = rng.randint(2, 8), rng.randint(1, 3)
        lo = 0
        while True:
            chunk = spans[lo : lo + win]
            q_len = rng.randint(1, 3)
            # [CLS] question [SEP] context [SEP]
            rows.append((q, [(-1, -1)] * (q_len + 2) + chunk + [(-1, -1)]))
            if lo + win >= len(spans):
                break
            lo += max(1, win - stride)
    if rng.random() < 0.5:
        rng.shuffle(rows)  # interleaved questions; both decoders rank a question's windows by row order
    T = max(len(r[1]) for r in rows) + rng.randint(0, 3)  # extra padding
    offsets = [r[1] + [(-1, -1)] * (T - len(r[1])) for r in rows]
    if integer:
        start = [[float(rng.randint(-3, 3)) for _ in range(T)] for _ in rows]
        end = [[float(rng.randint(-3, 3)) for _ in range(T)] for _ in rows]
    else:
        start = [[rng.gauss(0, 2) for _ in range(T)] for _ in rows]
        end = [[rng.gauss(0, 2) for _ in range(T)] for _ in rows]
    # round-trip through float32 so both decoders see identical values
    start_t, end_t = torch.tensor(start, dtype=torch.float32), torch.tensor(end, dtype=torch.float32)
    ex_index = [r[0] for r in rows]
    return start_t, end_t, torch.tensor(offsets), ex_index, contexts, ids

