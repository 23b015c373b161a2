"""Knowledge-distillation loss: the student matches the teacher's temperature-softened distributions.

``kl = T**2 * KL(softmax(t / T) || softmax(s / T))`` (Hinton et al., 2015; the ``T**2`` keeps the soft
gradients on the scale of the hard ones whatever ``T``), mixed with the task's own (gold) loss:
``alpha * gold + (1 - alpha) * kl``. The distribution is always over the last dimension:

- sentence classification: logits [B, C], one distribution per example;
- token tagging (NER): logits [B, T, C], one per token, with a [B, T] mask of the tokens that count;
- extractive QA: start and end logits [B, T] each, one distribution over positions per example and
  per pointer (a tuple of the two is averaged).

Positions a head has masked out with its large negative fill value (e.g. non-context tokens in
``heads/span_pointer.py`` ``SpanPointerHead``) are left out of both distributions. A single
output (regression, [B, 1]) has no distribution; it is matched by mean squared error instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from sesame.heads.masking import is_masked

Logits = Tensor | Sequence[Tensor]


def distillation_kl(student: Tensor, teacher: Tensor, temperature: float, mask: Tensor | None = None) -> Tensor:
    """Mean ``T**2 * KL(softmax(teacher / T) || softmax(student / T))`` over the rows that count.

    Args:
        student: [..., C] logits (the graph is kept: gradients flow into the student).
        teacher: [..., C] logits (detached here: the teacher never receives gradients).
        temperature: ``T > 0``; higher values soften both distributions.
        mask: [...] bool, the rows that count (e.g. NER word positions); None = every row. Rows
            whose every entry is masked out by the head count for nothing.

    Returns:
        Scalar float32 tensor; 0 when no row counts. For ``C == 1`` (regression) the mean squared
        error between student and teacher over the counted rows.
    """
    if student.shape != teacher.shape:
        raise ValueError(f"student logits {tuple(student.shape)} and teacher logits {tuple(teacher.shape)} differ in shape")
    if temperature <= 0:
        raise ValueError(f"distill.temperature={temperature} must be > 0")
    teacher = teacher.detach()
    rows = torch.ones(student.shape[:-1], dtype=torch.bool, device=student.device) if mask is None else mask.bool()
    if rows.shape != student.shape[:-1]:
        raise ValueError(f"mask {tuple(rows.shape)} does not match the logits' leading dims {tuple(student.shape[:-1])}")
    s, t = student.float(), teacher.float()
    if student.shape[-1] == 1:  # regression: no distribution to soften
        per_row = (s - t).squeeze(-1).pow(2)
        return _masked_mean(per_row, rows)
    valid = ~(is_masked(student) | is_masked(teacher))  # [..., C]
    rows = rows & valid.any(dim=-1)
    # A finite fill (not -inf) keeps log_softmax and its gradient free of inf - inf.
    fill = torch.finfo(torch.float32).min
    log_s = F.log_softmax((s / temperature).masked_fill(~valid, fill), dim=-1)
    log_t = F.log_softmax((t / temperature).masked_fill(~valid, fill), dim=-1)
    terms = torch.where(valid, log_t.exp() * (log_t - log_s), torch.zeros_like(log_s))
    return _masked_mean(terms.sum(dim=-1), rows) * temperature**2


def _masked_mean(values: Tensor, rows: Tensor) -> Tensor:
    rows = rows.to(values.dtype)
    return (values * rows).sum() / rows.sum().clamp(min=1.0)


class DistillationLoss(nn.Module):
    """``forward(gold_loss, student, teacher, mask=None) -> (loss, kl)``.

    Args:
        alpha: weight of the gold loss, in [0, 1]; ``1 - alpha`` weighs the distillation term
            (``alpha = 1`` is plain training, ``alpha = 0`` pure distillation).
        temperature: softmax temperature ``T > 0``.

    ``student`` / ``teacher`` are one logits tensor [..., C] or a tuple of them (QA: start and end
    logits [B, T]), matched pairwise and averaged; ``mask`` [...] selects the rows that count and
    applies to every tensor of the tuple. ``loss = alpha * gold_loss + (1 - alpha) * kl``.
    """

    def __init__(self, alpha: float = 0.5, temperature: float = 2.0) -> None:
        super().__init__()
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"distill.alpha={alpha} must be in [0, 1] (the weight of the gold loss)")
        if temperature <= 0:
            raise ValueError(f"distill.temperature={temperature} must be > 0")
        self.alpha = float(alpha)
        self.temperature = float(temperature)

    def kl(self, student: Logits, teacher: Logits, mask: Tensor | None = None) -> Tensor:
        """The distillation term alone (scalar): the mean of :func:`distillation_kl` over the outputs."""
        students, teachers = _as_tuple(student), _as_tuple(teacher)
        if len(students) != len(teachers):
            raise ValueError(f"the student gives {len(students)} logits tensors, the teacher {len(teachers)}")
        parts = [distillation_kl(s, t, self.temperature, mask) for s, t in zip(students, teachers)]
        return torch.stack(parts).mean()

    def forward(
        self, gold_loss: Tensor, student: Logits, teacher: Logits, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        kl = self.kl(student, teacher, mask)
        if self.alpha == 1.0:  # exactly the gold loss (and no NaN from a 0 * inf)
            return gold_loss, kl.detach()
        return self.alpha * gold_loss + (1.0 - self.alpha) * kl, kl.detach()


def _as_tuple(logits: Logits) -> tuple[Tensor, ...]:
    return (logits,) if isinstance(logits, Tensor) else tuple(logits)
