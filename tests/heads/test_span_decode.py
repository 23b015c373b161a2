"""The vectorised per-window span search (heads/span_decode.py) against a plain loop over every (start, end)."""

from __future__ import annotations

import random

import pytest
import torch

from sesame.heads.span_decode import top_spans_per_window

from .reference_span_decoder import random_windows, reference_top_spans


@pytest.mark.parametrize("with_offsets", [True, False])
@pytest.mark.parametrize("integer", [True, False])
def test_top_spans_match_reference_loop(integer, with_offsets):
    rng = random.Random(4321 + integer * 7 + with_offsets)
    for trial in range(40):
        start, end, offsets, *_ = random_windows(rng, rng.randint(1, 5), integer)
        ctx = offsets[..., 0] >= 0
        k, max_len = rng.randint(1, 8), rng.randint(1, 5)
        top = top_spans_per_window(start, end, ctx, max_len, k, offsets if with_offsets else None)
        n, t = start.shape
        k_out = min(k, t * min(max_len, t))
        assert top.score.shape == top.start.shape == top.end.shape == (n, k_out)
        assert top.score.dtype == torch.float64 and top.start.dtype == torch.int64
        assert (top.char_start is None) == (not with_offsets)
        for row in range(n):
            ref = reference_top_spans(start[row].tolist(), end[row].tolist(), ctx[row].tolist(), max_len, k,
                                      offsets[row].tolist() if with_offsets else None)
            valid = top.valid[row]
            got = list(zip(top.score[row][valid].tolist(), top.start[row][valid].tolist(), top.end[row][valid].tolist()))
            assert got == ref
            assert top.start_logit[row][valid].tolist() == [start[row, s].item() for _, s, _ in ref]
            assert top.end_logit[row][valid].tolist() == [end[row, e].item() for _, _, e in ref]
            if with_offsets:
                assert top.char_start[row][valid].tolist() == [offsets[row, s, 0].item() for _, s, _ in ref]
                assert top.char_end[row][valid].tolist() == [offsets[row, e, 1].item() for _, _, e in ref]


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
