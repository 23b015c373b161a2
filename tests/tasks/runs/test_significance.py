"""The tests sesame-report runs are calibrated and have power (tasks/runs/significance.py).

Calibration: over many comparisons of two variants drawn from one distribution, the share called
significant at 0.05 lies in [0.03, 0.07]. Power: at a stated effect, at least 0.8 of the comparisons
find it. Synthetic data, numpy only, fixed seeds: every number below is the same on every run.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sesame.tasks.runs.significance import (bootstrap_p, holm, paired_bootstrap, permutation_test, resample_indices,
                                            t_interval)
from tests.conftest import require

ALPHA = 0.05

#: Joint outcomes of two systems on one dev example: (both right, both wrong, only A right, only B right).
#: Null: both 80% accurate, disagreeing on 15% of the examples, each way equally often.
NULL_CELLS = (0.725, 0.125, 0.075, 0.075)
#: The effect: A 80%, B 85% accurate (5 points), disagreeing on 15% of the examples (5% A's way, 10% B's).
EFFECT_CELLS = (0.75, 0.10, 0.05, 0.10)


def paired_correctness(rng: np.random.Generator, n: int, cells: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """[n] 0/1 correctness of systems A and B on the same ``n`` examples, drawn from ``cells``."""
    kind = rng.choice(4, size=n, p=cells)
    return np.isin(kind, (0, 2)).astype(float), np.isin(kind, (0, 3)).astype(float)


def accuracy_of(correct: np.ndarray):
    """A variant's accuracy on resamples: [R, n] indices -> [R]."""
    return lambda at: correct[at].mean(axis=1)


def f1_of(predicted: np.ndarray, gold: np.ndarray):
    """A variant's F1 of class 1 on resamples ([R, n] -> [R]): not an average over examples."""
    def score(at: np.ndarray) -> np.ndarray:
        p, g = predicted[at], gold[at]
        tp = (p & g).sum(axis=1)
        return np.where(tp > 0, 2 * tp / np.maximum(p.sum(axis=1) + g.sum(axis=1), 1), 0.0)
    return score


def rejection_rate(p_values: list[float]) -> float:
    return float(np.mean(np.asarray(p_values) <= ALPHA))


# --- paired bootstrap over examples ----------------------------------------------------------------------

def test_the_paired_bootstrap_is_calibrated_on_accuracy():
    rng = np.random.default_rng(2024)
    p_values = []
    for i in range(1000):  # 1,000 comparisons of two systems that are equally good
        a, b = paired_correctness(rng, 200, NULL_CELLS)
        p_values.append(paired_bootstrap(accuracy_of(a), accuracy_of(b), 200, resamples=500, seed=i)[1])
    rate = rejection_rate(p_values)
    assert 0.03 <= rate <= 0.07, rate
    # p is uniform under the null, not just right at 0.05
    assert 0.07 <= rejection_rate([p / 2 for p in p_values]) <= 0.13  # p <= 0.10
    assert 0.45 <= float(np.mean(np.asarray(p_values) <= 0.5)) <= 0.55


def test_the_paired_bootstrap_is_calibrated_on_f1():
    """F1 is recomputed on each resample (no per-example average): still calibrated."""
    rng = np.random.default_rng(7)
    p_values = []
    for i in range(600):
        gold = rng.random(300) < 0.4
        a_right, b_right = paired_correctness(rng, 300, NULL_CELLS)
        predicted_a, predicted_b = gold == a_right.astype(bool), gold == b_right.astype(bool)
        p_values.append(paired_bootstrap(f1_of(predicted_a, gold), f1_of(predicted_b, gold), 300, resamples=500,
                                         seed=i)[1])
    rate = rejection_rate(p_values)
    assert 0.03 <= rate <= 0.07, rate


def test_the_paired_bootstrap_finds_5_accuracy_points_on_600_examples():
    """Stated effect: 80% -> 85% accuracy on 600 dev examples, the systems disagreeing on 15% of them
    (5% one way, 10% the other); power >= 0.8 (a normal approximation gives 0.89)."""
    rng = np.random.default_rng(11)
    found = []
    for i in range(300):
        a, b = paired_correctness(rng, 600, EFFECT_CELLS)
        difference, p = paired_bootstrap(accuracy_of(b), accuracy_of(a), 600, resamples=500, seed=i)
        found.append(p <= ALPHA and difference > 0)
    power = float(np.mean(found))
    assert power >= 0.8, power


def test_the_bootstrap_p_value_is_the_shifted_distributions():
    observed = 0.02
    resampled = np.array([0.0, 0.01, 0.02, 0.03, 0.04, 0.045, -0.001, 0.02])  # |δ* - δ| >= δ: 0.0, 0.04, 0.045, -0.001
    assert bootstrap_p(observed, resampled) == pytest.approx((1 + 4) / (8 + 1))
    assert bootstrap_p(-observed, -resampled) == bootstrap_p(observed, resampled)  # two-sided
    assert bootstrap_p(0.0, resampled) == 1.0
    assert bootstrap_p(observed, np.append(resampled, np.nan)) == bootstrap_p(observed, resampled)  # undefined: left out


def test_resamples_are_fixed_by_their_seed_and_come_in_chunks():
    first = np.concatenate(list(resample_indices(50, 250, seed=3, chunk=100)))
    again = np.concatenate(list(resample_indices(50, 250, seed=3, chunk=100)))
    assert first.shape == (250, 50) and (first == again).all() and first.min() >= 0 and first.max() < 50
    assert [len(c) for c in resample_indices(50, 250, seed=3, chunk=100)] == [100, 100, 50]
    assert not (first == np.concatenate(list(resample_indices(50, 250, seed=4)))).all()


# --- permutation test over seeds --------------------------------------------------------------------------

@pytest.mark.parametrize("seeds", [5, 10], ids=["exact-5+5", "monte-carlo-10+10"])
def test_the_permutation_test_is_calibrated(seeds):
    rng = np.random.default_rng(seeds)
    results = [permutation_test(rng.normal(0.8, 0.01, seeds), rng.normal(0.8, 0.01, seeds), resamples=1000, seed=i)
               for i in range(2000)]
    assert all(r.exact == (seeds == 5) for r in results)  # C(10, 5) = 252 splits; C(20, 10) = 184,756
    rate = rejection_rate([r.p for r in results])
    assert 0.03 <= rate <= 0.07, rate


def test_the_permutation_test_finds_1_5_standard_deviations_with_10_seeds():
    """Stated effect: means 1.5 per-seed standard deviations apart (0.815 vs 0.800, sd 0.01), 10 seeds a
    side; power >= 0.8 (a two-sample t-test's is 0.89)."""
    rng = np.random.default_rng(5)
    found = [permutation_test(rng.normal(0.815, 0.01, 10), rng.normal(0.800, 0.01, 10), resamples=1000, seed=i).p
             <= ALPHA for i in range(300)]
    assert float(np.mean(found)) >= 0.8, float(np.mean(found))


def test_the_exact_permutation_test_counts_every_split():
    a, b = [0.71, 0.74, 0.78], [0.70, 0.69, 0.72, 0.66]
    pooled = a + b
    observed = abs(np.mean(a) - np.mean(b))
    splits = list(itertools.combinations(range(7), 3))
    hits = sum(abs(np.mean([pooled[i] for i in s]) - np.mean([pooled[i] for i in range(7) if i not in s])) >= observed - 1e-12
               for s in splits)
    result = permutation_test(a, b)
    assert result.exact and result.p == pytest.approx(hits / len(splits)) and result.smallest == pytest.approx(1 / 35)
    # Equal sides: a split and its mirror tie, so 3 + 3 seeds never go below 2/20 = 0.1.
    assert permutation_test([1.0, 1.1, 1.2], [0.0, 0.1, 0.2]).p == pytest.approx(0.1)
    assert permutation_test([1.0, 1.1, 1.2], [0.0, 0.1, 0.2]).smallest == pytest.approx(0.1)
    assert permutation_test([0.5, 0.5], [0.5, 0.5]).p == 1.0


# --- ASO (deepsig), Holm, t-interval ----------------------------------------------------------------------

def test_aso_calls_a_clear_difference():
    require("deepsig")  # the `report` extra
    from sesame.tasks.runs.significance import ASO_THRESHOLD, aso_epsilon

    rng = np.random.default_rng(0)
    assert aso_epsilon(rng.normal(0.85, 0.01, 5), rng.normal(0.80, 0.01, 5), seed=1) < ASO_THRESHOLD


def test_holm_adjusts_step_down_and_keeps_the_order():
    adjusted = holm([0.01, 0.04, None, 0.03, 0.005])
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 -> 0.06 (never below an earlier one)
    assert adjusted == pytest.approx([0.03, 0.06, None, 0.06, 0.02])
    assert adjusted[2] is None
    assert holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == [] and holm([None]) == [None]


def test_holm_keeps_the_familywise_error_at_alpha():
    """Five true null comparisons per table, 2,000 tables: the share of tables with any false
    difference after Holm stays at or below 0.05 (uncorrected: about 1 - 0.95^5 = 0.23)."""
    rng = np.random.default_rng(9)
    uniform = rng.random((2000, 5))
    any_false = np.mean([any(p <= ALPHA for p in holm(list(row))) for row in uniform])
    assert 0.03 <= any_false <= 0.06, any_false
    assert np.mean((uniform <= ALPHA).any(axis=1)) > 0.2


def test_the_t_interval_is_students():
    from scipy import stats

    values = [0.70, 0.74, 0.72]
    low, high = t_interval(values)
    half = stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert (low, high) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    assert high - low == pytest.approx(2 * 4.302653 * 0.02 / math.sqrt(3), rel=1e-6)
    assert t_interval([0.7]) is None
