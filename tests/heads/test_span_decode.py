"""The vectorised span decoder against a plain Python loop over every (window, start, end)."""

from __future__ import annotations

import random

import pytest
import torch

from sesame.heads.span_decode import decode_predictions, top_spans_per_window

from .reference_span_decoder import reference_decode

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]


def make_case(rng: random.Random, n_questions: int, integer: bool):
    """Random contexts of one word per token, split into overlapping windows with question + padding."""
    contexts, ids, rows = [], [], []
    for q in range(n_questions):
        n_tok = rng.randint(1, 14)
        words = [rng.choice(WORDS) for _ in range(n_tok)]
        spans, pos = [], 0
        for w in words:
            spans.append((pos, pos + len(w)))
            pos += len(w) + 1
        contexts.append(" ".join(words))
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


def assert_same(got, ref, allow_null):
    assert set(got) == set(ref)
    for qid, (answer, best_text, nbest, null, diff) in ref.items():
        pred = got[qid]
        assert pred.text == answer, qid
        assert pred.best_span_text == best_text
        spans = [c for c in pred.nbest if c["char_start"] >= 0]
        assert [(c["text"], c["score"], c["start_logit"], c["end_logit"]) for c in spans] == nbest
        assert sum(c["probability"] for c in pred.nbest) == pytest.approx(1.0)
        if allow_null:
            assert pred.null_score == null
            assert pred.null_score_diff == pytest.approx(diff)
            assert sum(c["text"] == "" and c["char_start"] == -1 for c in pred.nbest) == 1
        else:
            assert pred.null_score is None and len(spans) == len(pred.nbest)


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("allow_null", [False, True])
def test_matches_reference_loop(integer, allow_null):
    rng = random.Random(1234 + integer * 7 + allow_null)
    for trial in range(60):
        start, end, offsets, ex_index, contexts, ids = make_case(rng, rng.randint(1, 5), integer)
        n_best, max_len = rng.randint(1, 6), rng.randint(1, 5)
        thresh = float(rng.choice([-2, 0, 1.5]))
        got = decode_predictions(
            start, end, offsets, ex_index, contexts, ids, n_best_size=n_best, max_answer_length=max_len,
            allow_null=allow_null, null_score_diff_threshold=thresh, chunk_size=rng.randint(1, 4),
        )
        ref = reference_decode(
            start.tolist(), end.tolist(), offsets.tolist(), ex_index, contexts, ids, n_best, max_len, allow_null, thresh
        )
        assert_same(got, ref, allow_null)


def test_all_equal_logits_prefers_earliest_shortest_span():
    # One question, two overlapping windows, every logit equal: the tie-break decides everything.
    context = "aa bb cc"
    offsets = torch.tensor([[[-1, -1], [0, 2], [3, 5], [-1, -1]], [[-1, -1], [3, 5], [6, 8], [-1, -1]]])
    zeros = torch.zeros(2, 4)
    pred = decode_predictions(zeros, zeros, offsets, [0, 0], [context], ["q"], n_best_size=10, max_answer_length=3)["q"]
    assert [c["text"] for c in pred.nbest] == ["aa", "aa bb", "bb", "bb cc", "cc"]  # deduplicated
    assert pred.text == "aa"
    assert all(c["probability"] == pytest.approx(0.2) for c in pred.nbest)


def test_span_cannot_cross_window_edge():
    # High start at the last context token of window 0, high end at the first of window 1: the
    # decoder must not join them; the answer lies within one window.
    context = "w0 w1 w2 w3"
    offsets = torch.tensor([
        [[-1, -1], [0, 2], [3, 5], [-1, -1]],
        [[-1, -1], [6, 8], [9, 11], [-1, -1]],
    ])
    start = torch.tensor([[0.0, 0.0, 9.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    pred = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], max_answer_length=4)["q"]
    assert pred.text == "w1"  # 9 + 0 beats 1 + 2; never "w1 w2 w3"
    assert all(c["text"] != "w1 w2 w3" for c in pred.nbest)


def test_best_window_wins_and_null_is_min_over_windows():
    context = "one two three"
    offsets = torch.tensor([
        [[-1, -1], [0, 3], [4, 7], [-1, -1]],
        [[-1, -1], [4, 7], [8, 13], [-1, -1]],
    ])
    start = torch.tensor([[5.0, 1.0, 0.0, -9.0], [1.0, 0.0, 3.0, -9.0]])
    end = torch.tensor([[5.0, 1.0, 0.0, -9.0], [2.0, 0.0, 3.0, -9.0]])
    preds = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], allow_null=True, max_answer_length=5)
    pred = preds["q"]
    assert pred.best_span_text == "three" and pred.best_score == 6.0  # window 1 beats window 0's best (2.0)
    assert pred.null_score == 3.0  # min(10, 3)
    assert pred.null_score_diff == -3.0
    assert pred.text == "three"
    strict = decode_predictions(start, end, offsets, [0, 0], [context], ["q"], allow_null=True,
                                null_score_diff_threshold=-4.0)["q"]
    assert strict.text == "" and strict.best_span_text == "three"


def test_top_spans_band_respects_max_length_and_context():
    start = torch.tensor([[0.0, 5.0, 1.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 0.0, 0.0, 0.0, 7.0]])
    ctx = torch.tensor([[False, True, True, True, False]])
    top = top_spans_per_window(start, end, ctx, max_answer_length=2, n_best_size=50)
    valid = top.valid[0]
    pairs = list(zip(top.start[0][valid].tolist(), top.end[0][valid].tolist()))
    assert sorted(pairs) == [(1, 1), (1, 2), (2, 2), (2, 3), (3, 3)]
    assert pairs[0] in {(1, 1), (1, 2)} and top.score[0, 0].item() == 5.0
    assert top.score.shape == (1, 10)  # K capped at T * L


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="offsets"):
        decode_predictions(torch.zeros(2, 4), torch.zeros(2, 4), torch.zeros(2, 5, 2), [0, 0], ["c"], ["q"])
