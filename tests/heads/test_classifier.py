"""SequenceClassifierHead: losses against torch's own functions, class weights, label smoothing,
multi-label thresholds, and the balanced weights against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sesame.heads.classifier import SequenceClassifierHead, balanced_class_weights
from torch.nn import functional as F


def _logits(batch: int, labels: int) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(batch, labels, requires_grad=True)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.35])
@pytest.mark.parametrize("weights", [None, [0.5, 2.0, 4.0]])
def test_single_label_loss_is_torch_cross_entropy(eps, weights):
    head = SequenceClassifierHead(8, 3, dropout=0.0, label_smoothing=eps, class_weights=weights)
    logits, labels = _logits(6, 3), torch.tensor([0, 2, 1, 2, 2, 0])
    expected = F.cross_entropy(logits, labels, weight=None if weights is None else torch.tensor(weights),
                               label_smoothing=eps)
    torch.testing.assert_close(head.loss(logits, labels), expected)
    if eps or weights:  # the setting changes the loss
        assert not torch.isclose(head.loss(logits, labels), F.cross_entropy(logits, labels))


def test_forward_shapes_and_regression():
    head = SequenceClassifierHead(8, 1, dropout=0.0)
    assert head.is_regression and head(torch.randn(4, 8)).shape == (4, 1)
    logits, target = torch.randn(4, 1), torch.tensor([0.5, 1.0, 2.0, 3.0])
    torch.testing.assert_close(head.loss(logits, target), F.mse_loss(logits.squeeze(-1), target))
    with pytest.raises(ValueError, match="not to regression"):
        SequenceClassifierHead(8, 1, class_weights=[2.0])
    with pytest.raises(ValueError, match="not to regression"):
        SequenceClassifierHead(8, 1, label_smoothing=0.1)


def test_class_weights_are_checked_and_not_saved():
    with pytest.raises(ValueError, match="3 class weights for 2 labels"):
        SequenceClassifierHead(8, 2, class_weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="positive"):
        SequenceClassifierHead(8, 2, class_weights=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        SequenceClassifierHead(8, 2, label_smoothing=1.0)
    head = SequenceClassifierHead(8, 2)
    head.set_class_weights([1.0, 3.0])
    assert head.class_weights.tolist() == [1.0, 3.0]
    assert "class_weights" not in head.state_dict()  # the trained model's config records them
    head.set_class_weights(None)
    assert head.class_weights is None


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_multi_label_loss_is_bce_with_pos_weight(eps):
    weights = torch.tensor([1.0, 3.0, 0.5, 2.0])
    head = SequenceClassifierHead(8, 4, dropout=0.0, multi_label=True, label_smoothing=eps, class_weights=weights)
    assert not head.is_regression
    logits = _logits(5, 4)
    targets = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 1, 0]], dtype=torch.float32)
    smoothed = targets * (1 - eps) + eps / 2
    expected = F.binary_cross_entropy_with_logits(logits, smoothed, pos_weight=weights)
    torch.testing.assert_close(head.loss(logits, targets), expected)
    # pos_weight scales the positive targets' terms only: by hand, without smoothing
    if eps == 0:
        log_p, log_not_p = F.logsigmoid(logits), F.logsigmoid(-logits)
        by_hand = -(weights * targets * log_p + (1 - targets) * log_not_p).mean()
        torch.testing.assert_close(head.loss(logits, targets), by_hand)


def test_multi_label_thresholds_are_a_saved_buffer_used_by_decide():
    head = SequenceClassifierHead(8, 3, multi_label=True)
    assert head.thresholds.tolist() == [0.5, 0.5, 0.5]
    assert "thresholds" in head.state_dict()
    head.thresholds.copy_(torch.tensor([0.2, 0.5, 0.9]))
    probs = torch.tensor([[0.2, 0.49, 0.95], [0.1, 0.5, 0.9]])
    assert head.decide(probs).tolist() == [[True, False, True], [False, True, True]]  # p >= threshold
    torch.testing.assert_close(head.probabilities(torch.zeros(1, 3)), torch.full((1, 3), 0.5))
    single = SequenceClassifierHead(8, 3)
    assert "thresholds" not in single.state_dict()  # single-label state dicts are as before
    with pytest.raises(ValueError, match="multi-label"):
        single.decide(probs)


def test_balanced_weights_are_scikit_learns():
    from sklearn.utils.class_weight import compute_class_weight

    generator = torch.Generator().manual_seed(0)
    labels = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), 500, replacement=True, generator=generator)
    counts = torch.bincount(labels, minlength=3)
    expected = compute_class_weight("balanced", classes=np.arange(3), y=labels.numpy())
    torch.testing.assert_close(balanced_class_weights(counts, 500), torch.as_tensor(expected))
    # multi-label: the positive weight negatives / positives of each label
    multi = balanced_class_weights(torch.tensor([10, 50, 99]), 100, multi_label=True)
    torch.testing.assert_close(multi, torch.tensor([9.0, 1.0, 1 / 99], dtype=torch.float64))
