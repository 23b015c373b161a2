"""ECE against a plain per-bin loop, and temperature scaling recovering a known temperature."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from sesame.heads.calibration import TemperatureScaling, calibration_doubt, confidence_ece, expected_calibration_error


def ece_by_loop(confidence, correct, n_bins=15):
    total, n = 0.0, len(confidence)
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i, c in enumerate(confidence) if (lo < c <= hi) or (b == 0 and c == 0)]
        if members:
            acc = sum(correct[i] for i in members) / len(members)
            conf = sum(confidence[i] for i in members) / len(members)
            total += len(members) / n * abs(acc - conf)
    return total


def test_ece_equals_the_per_bin_definition():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0, 1, 500)
    confidence[:3] = [0.0, 1.0, 2 / 15]  # the bin edges
    correct = rng.uniform(0, 1, 500) < confidence ** 2
    got = confidence_ece(torch.tensor(confidence), torch.tensor(correct))
    assert got == pytest.approx(ece_by_loop(confidence.tolist(), correct.tolist()), abs=1e-12)
    assert got > 0.05  # over-confident by construction


def test_ece_of_class_probabilities_uses_the_top_class():
    probs = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    labels = torch.tensor([0, 0, 0, 1])
    # confidences 0.9 (right), 0.8 (wrong), 0.6 (right), 0.7 (right), each in a bin of its own
    want = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.6) + abs(1 - 0.7)) / 4
    assert expected_calibration_error(probs, labels) == pytest.approx(want)


def test_temperature_scaling_recovers_the_temperature_that_sharpened_the_logits():
    torch.manual_seed(0)
    true_logits = torch.randn(4000, 5) * 1.5
    labels = torch.distributions.Categorical(logits=true_logits).sample()
    overconfident = true_logits * 3.0
    scaling = TemperatureScaling()
    temperature = scaling.fit(overconfident, labels)
    assert temperature == pytest.approx(3.0, rel=0.08)
    assert float(scaling.temperature) == temperature
    calibrated = scaling(overconfident)
    assert F.cross_entropy(calibrated, labels) < F.cross_entropy(overconfident, labels)
    before = expected_calibration_error(overconfident.softmax(-1), labels)
    after = expected_calibration_error(calibrated.softmax(-1), labels)
    assert after < before / 2
    assert "temperature" in scaling.state_dict()  # saved with the model


def test_a_calibration_is_doubted_at_chance_or_at_an_absurd_temperature():
    torch.manual_seed(0)
    true_logits = torch.randn(2000, 3) * 2
    labels = torch.distributions.Categorical(logits=true_logits).sample()
    fitted = TemperatureScaling().fit(true_logits * 3, labels)
    assert calibration_doubt(true_logits * 3, labels, fitted) is None  # an informative model, a sane T
    constant = torch.zeros(2000, 3)
    constant[:, 1] = 1.0  # always one class: no better than the majority answer
    doubt = calibration_doubt(constant, labels, TemperatureScaling().fit(constant, labels))
    assert doubt is not None and "at chance" in doubt
    assert "outside [0.01, 100]" in calibration_doubt(true_logits, labels, 66011.0)
    assert "outside" in calibration_doubt(true_logits, labels, 0.001)
