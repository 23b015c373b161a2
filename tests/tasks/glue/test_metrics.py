"""GLUE metrics against scikit-learn and scipy on random predictions."""

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from sesame.tasks.glue.metrics import compute_metrics


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("num_classes", [2, 3])
def test_classification_metrics_match_sklearn(seed, num_classes):
    rng = np.random.default_rng(seed)
    refs = rng.integers(0, num_classes, 200)
    preds = np.where(rng.random(200) < 0.6, refs, rng.integers(0, num_classes, 200))
    got = compute_metrics(("accuracy", "matthews_correlation"), preds, refs)
    assert got["accuracy"] == pytest.approx(accuracy_score(refs, preds))
    assert got["matthews_correlation"] == pytest.approx(matthews_corrcoef(refs, preds))
    if num_classes == 2:
        assert compute_metrics(("f1",), preds, refs)["f1"] == pytest.approx(f1_score(refs, preds))


def test_degenerate_cases_match_sklearn():
    refs = np.array([1, 1, 1, 0])
    for preds in (np.zeros(4, int), np.ones(4, int), refs):
        got = compute_metrics(("f1", "matthews_correlation"), preds, refs)
        assert got["f1"] == pytest.approx(f1_score(refs, preds, zero_division=0))
        assert got["matthews_correlation"] == pytest.approx(matthews_corrcoef(refs, preds))


@pytest.mark.parametrize("seed", range(3))
def test_correlations_match_scipy(seed):
    rng = np.random.default_rng(seed)
    refs = rng.uniform(0, 5, 100)
    preds = refs + rng.normal(0, 1, 100)
    got = compute_metrics(("pearson", "spearmanr"), preds, refs)
    assert got["pearson"] == pytest.approx(stats.pearsonr(preds, refs)[0])
    assert got["spearmanr"] == pytest.approx(stats.spearmanr(preds, refs)[0])


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="3 predictions for 2"):
        compute_metrics(("accuracy",), [0, 1, 1], [0, 1])
