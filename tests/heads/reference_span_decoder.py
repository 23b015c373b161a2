"""A plain Python reference for :func:`sesame.heads.span_decode.decode_predictions`.

One loop over every allowed (window, start, end), then a full sort of a question's candidates: slow
and obviously right, with the decoder's documented tie-breaking and de-duplication. Shared by
tests/heads/test_span_decode.py (exactness) and benchmarks/qa_speed.py (speed), so both measure
against the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence

Candidate = tuple[str, float, float, float]  # (text, score, start_logit, end_logit)


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
