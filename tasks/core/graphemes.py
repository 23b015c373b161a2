"""Grapheme clusters: what a reader sees as one character, so that no word or answer ends inside one.

A cluster is a base character with what attaches to it: combining marks (``e`` + U+0301), a variation
selector (``❤`` + U+FE0F), a skin tone (``👍🏽``), an emoji zero-width-joiner sequence (``👨‍👩‍👧``), the
regional-indicator pair of a flag (``🇫🇷``). Clusters are Unicode's extended grapheme clusters (UAX #29)
as the ``regex`` package's ``\\X`` finds them (``regex`` comes with transformers), with one change:
white space always stands alone, so a combining mark after a space is a cluster of its own and never
pulls the space into a word or an answer.
"""

from __future__ import annotations

import numpy as np
import regex

#: One cluster per match (white space first, so it is never the base of a cluster).
CLUSTER = regex.compile(r"\s|\X")


def cluster_bounds(text: str) -> np.ndarray:
    """The cluster boundaries of ``text``: sorted char positions [C + 1], 0 and ``len(text)`` included."""
    ends = np.fromiter((m.end() for m in CLUSTER.finditer(text)), dtype=np.int64)
    return np.concatenate([np.zeros(1, dtype=np.int64), ends])


def whole_clusters(offsets: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Char spans ``offsets`` [..., 2] widened to whole clusters: each start moved back to the start of
    its cluster, each end on to the end of its cluster (``bounds`` from :func:`cluster_bounds`).

    A tokenizer that drops a combining mark or a variation selector ends the token before it
    (``cafe\\u0301`` -> ``cafe``); widened, the span keeps it. Spans already on boundaries are unchanged.
    """
    out = np.asarray(offsets, dtype=np.int64).copy()
    starts = np.clip(out[..., 0], bounds[0], bounds[-1])
    ends = np.clip(out[..., 1], bounds[0], bounds[-1])
    out[..., 0] = bounds[np.searchsorted(bounds, starts, side="right") - 1]
    out[..., 1] = bounds[np.searchsorted(bounds, ends, side="left")]
    return out
