"""DistillationLoss against hand-computed references; gradients reach only the student."""

import math

import pytest
import torch

from sesame.heads.distillation import DistillationLoss, distillation_kl
from sesame.heads.span_pointer import masked_value


def _kl_reference(student, teacher, T):
    """sum_c p_t(c) * (log p_t(c) - log p_s(c)) * T^2 for one row of plain Python floats."""
    def softmax(xs):
        m = max(xs)
        e = [math.exp((x - m) / T) for x in xs]
        z = sum(e)
        return [v / z for v in e]

    p_s, p_t = softmax(student), softmax(teacher)
    return sum(t * (math.log(t) - math.log(s)) for s, t in zip(p_s, p_t)) * T * T


def test_kl_matches_a_hand_computed_reference():
    student = torch.tensor([[1.0, -0.5, 2.0], [0.3, 0.1, -1.2]])
    teacher = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 3.0]])
    want = (_kl_reference([1.0, -0.5, 2.0], [2.0, 0.5, -1.0], 2.0) + _kl_reference([0.3, 0.1, -1.2], [0.0, 0.0, 3.0], 2.0)) / 2
    got = distillation_kl(student, teacher, temperature=2.0)
    assert got.item() == pytest.approx(want, rel=1e-5)
    # Same as torch's own KL with the T^2 factor.
    torch_kl = torch.nn.functional.kl_div(
        torch.log_softmax(student / 2, -1), torch.log_softmax(teacher / 2, -1), log_target=True, reduction="batchmean"
    ) * 4
    assert got.item() == pytest.approx(torch_kl.item(), rel=1e-5)
    assert distillation_kl(teacher, teacher, 3.0).item() == pytest.approx(0.0, abs=1e-6)


def test_the_mix_weights_gold_and_kl_and_alpha_one_is_the_gold_loss():
    student, teacher, gold = torch.randn(4, 3), torch.randn(4, 3), torch.tensor(0.7)
    loss, kl = DistillationLoss(alpha=0.25, temperature=1.5)(gold, student, teacher)
    want_kl = sum(_kl_reference(s.tolist(), t.tolist(), 1.5) for s, t in zip(student, teacher)) / 4
    assert kl.item() == pytest.approx(want_kl, rel=1e-5)
    assert loss.item() == pytest.approx(0.25 * 0.7 + 0.75 * want_kl, rel=1e-5)
    only_gold, _ = DistillationLoss(alpha=1.0)(gold, student, teacher)
    assert only_gold is gold


def test_gradient_flows_to_the_student_only():
    student = torch.randn(3, 5, requires_grad=True)
    teacher = torch.randn(3, 5, requires_grad=True)
    loss, _ = DistillationLoss(alpha=0.0, temperature=2.0)(torch.tensor(0.0), student, teacher)
    loss.backward()
    # d/ds of T^2 * mean_rows KL(p_t || p_s) with p = softmax(logits / T) is T * (p_s - p_t) / rows.
    p_s, p_t = torch.softmax(student.detach() / 2.0, -1), torch.softmax(teacher.detach() / 2.0, -1)
    torch.testing.assert_close(student.grad, 2.0 * (p_s - p_t) / 3)
    assert teacher.grad is None


def test_qa_positions_masked_by_the_head_are_left_out_and_start_end_are_averaged():
    fill = masked_value(torch.float32)
    # Position 0 and 4 are outside the context in both models (as SpanPointerHead leaves them).
    s_start = torch.tensor([[fill, 1.0, 0.0, -1.0, fill]])
    t_start = torch.tensor([[fill, 0.0, 2.0, 0.5, fill]])
    s_end, t_end = s_start.flip(-1), t_start.flip(-1)
    want_start = _kl_reference([1.0, 0.0, -1.0], [0.0, 2.0, 0.5], 2.0)
    want_end = _kl_reference([-1.0, 0.0, 1.0], [0.5, 2.0, 0.0], 2.0)
    kl = DistillationLoss(temperature=2.0).kl((s_start, s_end), (t_start, t_end))
    assert kl.item() == pytest.approx((want_start + want_end) / 2, rel=1e-5)
    # A masked position with different junk values changes nothing.
    s_start2 = s_start.clone()
    s_start2[0, 0] = fill * 0.9
    assert DistillationLoss(temperature=2.0).kl((s_start2, s_end), (t_start, t_end)).item() == pytest.approx(kl.item())
    # Gradients are finite and zero at masked positions.
    s = s_start.clone().requires_grad_(True)
    distillation_kl(s, t_start, 2.0).backward()
    # Zero at the masked positions; over the others the gradient of the three-way distributions, T * (p_s - p_t).
    inside = torch.tensor([1.0, 0.0, -1.0]), torch.tensor([0.0, 2.0, 0.5])
    want = torch.zeros(1, 5)
    want[0, 1:4] = 2.0 * (torch.softmax(inside[0] / 2.0, -1) - torch.softmax(inside[1] / 2.0, -1))
    torch.testing.assert_close(s.grad, want)


def test_ner_rows_outside_the_mask_do_not_count():
    student, teacher = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    mask = torch.tensor([[True, False, True, False], [False, False, False, True]])
    want = sum(_kl_reference(student[b, t].tolist(), teacher[b, t].tolist(), 2.0) for b, t in [(0, 0), (0, 2), (1, 3)]) / 3
    assert distillation_kl(student, teacher, 2.0, mask).item() == pytest.approx(want, rel=1e-5)
    # Garbage outside the mask is ignored.
    noisy = student.clone()
    noisy[~mask] = 100.0
    assert distillation_kl(noisy, teacher, 2.0, mask).item() == pytest.approx(want, rel=1e-5)
    assert distillation_kl(student, teacher, 2.0, torch.zeros(2, 4, dtype=torch.bool)).item() == 0.0


def test_regression_is_matched_by_squared_error():
    student, teacher = torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [3.0]])
    assert distillation_kl(student, teacher, 4.0).item() == pytest.approx((0.25 + 1.0) / 2)


def test_bad_settings_and_shapes_are_errors():
    with pytest.raises(ValueError, match="alpha"):
        DistillationLoss(alpha=1.5)
    with pytest.raises(ValueError, match="temperature"):
        DistillationLoss(temperature=0.0)
    with pytest.raises(ValueError, match="shape"):
        distillation_kl(torch.randn(2, 3), torch.randn(2, 4), 1.0)
