"""Confidence calibration: expected calibration error and temperature scaling (Guo et al., 2017).

Shapes: ``N`` examples, ``C`` classes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def confidence_ece(confidence: Tensor, correct: Tensor, n_bins: int = 15) -> float:
    """Expected calibration error of ``confidence`` [N] (in [0, 1]) against ``correct`` [N] (bool).

    ``sum_b |B_b| / N * |accuracy(B_b) - mean confidence(B_b)|`` over ``n_bins`` equal-width bins
    ``(i / n_bins, (i + 1) / n_bins]`` (a confidence of exactly 0 falls in the first bin).
    """
    confidence = confidence.double().flatten()
    correct = correct.double().flatten()
    n = confidence.numel()
    if n == 0:
        return float("nan")
    bins = (torch.ceil(confidence * n_bins).long() - 1).clamp(0, n_bins - 1)
    conf_sum = torch.bincount(bins, weights=confidence, minlength=n_bins)
    acc_sum = torch.bincount(bins, weights=correct, minlength=n_bins)
    return float((acc_sum - conf_sum).abs().sum() / n)


def expected_calibration_error(probs: Tensor, labels: Tensor, n_bins: int = 15) -> float:
    """ECE of class probabilities ``probs`` [N, C] against gold class ids ``labels`` [N]: the
    confidence is the top probability, correct when its class is the gold one."""
    confidence, predicted = probs.max(dim=-1)
    return confidence_ece(confidence, predicted == labels, n_bins)


class TemperatureScaling(nn.Module):
    """``forward(logits [..., C]) -> logits / T``; ``T`` is a saved buffer, 1 (no change) until :meth:`fit`."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("temperature", torch.ones(()))

    def forward(self, logits: Tensor) -> Tensor:
        return logits / self.temperature.to(logits.dtype)

    def fit(self, logits: Tensor, labels: Tensor, max_iter: int = 100) -> float:
        """Set ``T`` to minimise the negative log-likelihood of ``labels`` [N] under ``softmax(logits [N, C] / T)``
        (L-BFGS over ``log T``, so ``T`` stays positive). Returns ``T``."""
        logits, labels = logits.detach().double(), labels.detach().long()
        log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.LBFGS([log_t], lr=0.1, max_iter=max_iter, line_search_fn="strong_wolfe")

        def closure() -> Tensor:
            optimizer.zero_grad()
            loss = F.cross_entropy(logits / log_t.exp(), labels)
            loss.backward()
            return loss

        with torch.enable_grad():
            optimizer.step(closure)
        self.temperature.fill_(float(log_t.detach().exp()))
        return float(self.temperature)


#: Temperatures outside this range say the fit found nothing to calibrate (a model at chance, a dev set
#: it predicts perfectly or of one class): ``T`` runs off towards 0 or infinity.
SANE_TEMPERATURES = (0.01, 100.0)


def calibration_doubt(logits: Tensor, labels: Tensor, temperature: float) -> str | None:
    """Why a temperature fitted on ``logits`` [N, C] (before scaling) and ``labels`` [N] means nothing, or None.

    It does when the model is no better than always answering the dev set's most frequent class (its
    probabilities carry no information to rescale), or when ``temperature`` is outside
    :data:`SANE_TEMPERATURES`."""
    labels = labels.long()
    accuracy = float((logits.argmax(dim=-1) == labels).double().mean())
    majority = float(torch.bincount(labels).max()) / labels.numel()
    reasons = []
    if accuracy <= majority:
        reasons.append(f"the model is at chance on the dev set (accuracy {accuracy:.4f}, no better than always "
                       f"answering its most frequent class: {majority:.4f})")
    low, high = SANE_TEMPERATURES
    if not low <= temperature <= high:
        reasons.append(f"the fitted temperature {temperature:.6g} is outside [{low:g}, {high:g}]")
    if not reasons:
        return None
    return "calibration is meaningless: " + "; ".join(reasons) + ". The temperature is saved and applied as fitted"
