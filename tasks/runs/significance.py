"""Which differences between a sweep's variants are real: the tests ``sesame-report`` runs (plain numpy).

- :func:`paired_bootstrap` / :func:`bootstrap_p`: over dev examples. Both variants are scored on the same
  resampled example indices, the metric recomputed on each resample (any metric: accuracy, F1, Matthews
  correlation, entity F1, ...). The p-value is the two-sided *shifted-distribution* test (Berg-Kirkpatrick
  et al. 2012; Efron & Tibshirani 1993, §16.4): the bootstrap differences, centred on the observed one,
  stand for the differences the null hypothesis (no difference) would give, so
  ``p = (1 + #{b: |δ*_b - δ| >= |δ|}) / (B + 1)``. Not Koehn's (2004) "share of resamples whose sign
  flips": that is a one-sided share, and read as a two-sided p-value it rejects about twice as often as
  it should.
- :func:`permutation_test`: over seeds, the runs' final metrics, two-sided on the difference of means;
  exact (every split of the pooled values) when there are few splits, else Monte-Carlo with a fixed seed.
- :func:`aso_epsilon`: over seeds, Almost Stochastic Order (Dror et al. 2019) by the ``deepsig`` package
  (the ``report`` extra), which gives a violation ratio ``ε_min``, not a p-value.
- :func:`holm`: Holm's step-down correction of the p-values of one table.
- :func:`t_interval`: the 95% Student-t confidence interval of a mean over seeds.

``tests/tasks/runs/test_significance.py`` checks the calibration (rejection rate at 0.05 over many
comparisons without a difference) and the power at stated effect sizes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from sesame.tasks.core.errors import ConfigError

#: The violation ratio below which ASO declares one variant better (Ulmer et al. 2022 found 0.5 rejects
#: too often; deepsig's documentation recommends 0.2).
ASO_THRESHOLD = 0.2

#: Resamples drawn at once: [chunk, N] int64 indices (a 10,000-question dev set: 80 MB at 1,000).
CHUNK = 100


# --- over examples ------------------------------------------------------------------------------------

def resample_indices(n: int, resamples: int, seed: int, chunk: int = CHUNK) -> Iterator[np.ndarray]:
    """``resamples`` bootstrap resamples of ``n`` examples, as [c, n] int64 index arrays (c <= ``chunk``,
    rows drawn with replacement), the same for a given ``(n, resamples, seed)`` however they are used."""
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, chunk):
        yield rng.integers(0, n, size=(min(chunk, resamples - start), n))


def bootstrap_p(observed: float, resampled: np.ndarray) -> float:
    """Two-sided p-value of an observed difference ``δ`` from its bootstrap differences ``δ*`` ([B]):
    ``(1 + #{|δ*_b - δ| >= |δ|}) / (B + 1)`` (the shifted-distribution method; 1 when ``δ`` is 0).
    Resamples where the metric is undefined (NaN: a correlation of constant values) are left out."""
    if not math.isfinite(observed):
        raise ValueError(f"the observed difference is {observed}")
    resampled = np.asarray(resampled, dtype=np.float64)
    resampled = resampled[np.isfinite(resampled)]
    if observed == 0.0:
        return 1.0
    # A relative tolerance, so that a resample equal to 0 or 2δ up to rounding counts as reaching it.
    reach = np.abs(resampled - observed) >= abs(observed) * (1 - 1e-12)
    return float((1 + np.count_nonzero(reach)) / (resampled.size + 1))


def paired_bootstrap(score_a: Callable[[np.ndarray], np.ndarray], score_b: Callable[[np.ndarray], np.ndarray],
                     n: int, resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """``(δ, p)``: the difference ``score_a - score_b`` on all ``n`` examples and its paired bootstrap p-value.

    Args:
        score_a, score_b: a variant's metric on example resamples: [R, n] int indices (repeats allowed)
            -> [R] values; both are given the same resamples.
        n: examples (the same examples, in the same order, for both).
        resamples: B, the bootstrap resamples.
        seed: of the resamples.
    """
    if n < 1:
        raise ValueError("no examples to resample")
    full = np.arange(n)[None, :]
    observed = float(score_a(full)[0] - score_b(full)[0])
    differences = np.concatenate([np.asarray(score_a(idx)) - np.asarray(score_b(idx))
                                  for idx in resample_indices(n, resamples, seed)])
    return observed, bootstrap_p(observed, differences)


# --- over seeds ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PermutationResult:
    """A permutation test's two-sided p-value; ``exact``: every split was counted (else Monte-Carlo);
    ``smallest``: the smallest p-value these sample sizes can give at all."""

    p: float
    exact: bool
    smallest: float


def permutation_test(a: Sequence[float], b: Sequence[float], max_exact: int = 20_000, resamples: int = 10_000,
                     seed: int = 0) -> PermutationResult:
    """Two-sided permutation test of ``mean(a) - mean(b)`` (each at least one value).

    The pooled values are split into groups of ``len(a)`` and ``len(b)`` in every way (exact, when there
    are at most ``max_exact`` splits; else ``resamples`` random splits drawn with ``seed``, and
    ``p = (1 + hits) / (resamples + 1)``); p is the share of splits whose difference is at least as far
    from 0 as the observed one.
    """
    x = np.concatenate([np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)])
    k, n = len(a), len(a) + len(b)
    if k < 1 or n - k < 1:
        raise ValueError("a permutation test needs at least one value on each side")
    observed = abs(x[:k].mean() - x[k:].mean())
    splits = math.comb(n, k)
    total = x.sum()
    tolerance = 1e-12 * max(1.0, float(np.abs(x).max()))  # equal differences computed in another order

    def reaches(firsts: np.ndarray) -> np.ndarray:  # [S, k] values of the first group -> [S] bool
        first = firsts.sum(axis=1)
        return np.abs(first / k - (total - first) / (n - k)) >= observed - tolerance

    if splits <= max_exact:
        groups = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(n), k)), dtype=np.int64,
                             count=splits * k).reshape(splits, k)
        hits = int(np.count_nonzero(reaches(x[groups])))
        # Equal group sizes: a split and its mirror give the same |difference|, so at least 2 reach it.
        smallest = (2 if k == n - k else 1) / splits
        return PermutationResult(hits / splits, True, smallest)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, 1000):
        count = min(1000, resamples - start)
        order = rng.permuted(np.broadcast_to(np.arange(n), (count, n)), axis=1)
        hits += int(np.count_nonzero(reaches(x[order[:, :k]])))
    return PermutationResult((1 + hits) / (resamples + 1), False, 1 / (resamples + 1))


def aso_epsilon(better: Sequence[float], worse: Sequence[float], alpha: float = 0.05, comparisons: int = 1,
                seed: int = 0) -> float:
    """ASO's violation ratio ``ε_min`` of "``better`` is stochastically larger than ``worse``" (deepsig's
    ``aso``, confidence ``1 - alpha``, Bonferroni over ``comparisons``); below :data:`ASO_THRESHOLD` it holds."""
    aso = deepsig_aso()
    return float(aso(list(map(float, better)), list(map(float, worse)), confidence_level=1 - alpha,
                     num_comparisons=comparisons, num_jobs=1, show_progress=False, seed=seed))


def deepsig_aso() -> Callable[..., float]:
    """deepsig's ``aso``, or a ``ConfigError`` saying how to install it."""
    try:
        from deepsig import aso
    except ImportError:
        raise ConfigError("--seed-test aso needs the deepsig package, which is not installed. Fix: "
                          "pip install 'sesame[report]' (or pip install deepsig), or use --seed-test permutation") from None
    return aso


# --- one table ----------------------------------------------------------------------------------------

def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values (None stays None and is not counted): the i-th smallest of m becomes
    ``max over j <= i of min(1, (m - j + 1) p_(j))``; a difference holds at α when its adjusted p <= α,
    which keeps the chance of any false difference in the table at most α."""
    present = [(p, i) for i, p in enumerate(p_values) if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    m = len(present)
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The Student-t confidence interval of the mean of ``values`` (None for fewer than 2)."""
    from scipy import stats

    if len(values) < 2:
        return None
    x = np.asarray(values, dtype=np.float64)
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()) - half, float(x.mean()) + half
