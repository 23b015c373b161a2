"""Grapheme clusters (tasks/core/graphemes.py): boundaries of accents, emoji sequences, flags and CJK, and
char spans widened onto them."""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from sesame.tasks.core.graphemes import cluster_bounds, whole_clusters


def _clusters(text: str) -> list[str]:
    bounds = cluster_bounds(text).tolist()
    return [text[s:e] for s, e in pairwise(bounds)]


def test_a_cluster_is_a_base_with_what_attaches_to_it():
    assert _clusters("cafe\u0301") == ["c", "a", "f", "e\u0301"]  # combining accent
    assert _clusters("👨\u200d👩\u200d👧🇫🇷🇩🇪") == ["👨\u200d👩\u200d👧", "🇫🇷", "🇩🇪"]  # ZWJ family, two flags
    assert _clusters("❤\ufe0f👍🏽") == ["❤\ufe0f", "👍🏽"]  # variation selector, skin tone
    assert _clusters("北京 שָׁלוֹם") == ["北", "京", " ", "שָׁ", "ל", "וֹ", "ם"]  # Hebrew points stay on their letter
    assert _clusters("a \u0301\r\n") == ["a", " ", "\u0301", "\r", "\n"]  # white space always stands alone
    assert cluster_bounds("").tolist() == [0] and cluster_bounds("ab").tolist() == [0, 1, 2]


def test_spans_are_widened_to_whole_clusters():
    text = "cafe\u0301 👨\u200d👩\u200d👧!"
    bounds = cluster_bounds(text)
    spans = np.array([[0, 4], [6, 7], [8, 11], [11, 12], [0, 0]])  # "cafe", "👨", "👩\u200d👧", "!", empty
    assert whole_clusters(spans, bounds).tolist() == [[0, 5], [6, 11], [6, 11], [11, 12], [0, 0]]
    assert whole_clusters(spans[None], bounds).shape == (1, 5, 2)  # any leading shape
