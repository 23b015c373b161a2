"""SpanPointerHead against transformers' own BertForQuestionAnswering."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForQuestionAnswering

from sesame.heads.span_pointer import SpanPointerHead, masked_value


@pytest.fixture(scope="module")
def qa_model():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    return BertForQuestionAnswering(config).eval()


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 120, (3, 12), generator=g)
    attention_mask = torch.ones(3, 12, dtype=torch.long)
    attention_mask[1, 9:] = 0
    token_type_ids = torch.zeros(3, 12, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    context_mask = token_type_ids.bool() & attention_mask.bool()
    context_mask[:, -1] = False  # final [SEP]
    return input_ids, attention_mask, token_type_ids, context_mask


def load_head(model, allow_null: bool) -> SpanPointerHead:
    head = SpanPointerHead(model.config.hidden_size, allow_null=allow_null)
    head.load_state_dict({k: v for k, v in model.state_dict().items() if k.startswith("qa_outputs.")})
    return head


@pytest.mark.parametrize("allow_null", [False, True])
def test_same_logits_as_transformers(qa_model, inputs, allow_null):
    input_ids, attention_mask, token_type_ids, context_mask = inputs
    with torch.no_grad():
        out = qa_model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                       output_hidden_states=True)
        start, end = load_head(qa_model, allow_null)(out.hidden_states[-1], context_mask)
    assert start.shape == end.shape == input_ids.shape
    assert torch.allclose(start[context_mask], out.start_logits[context_mask], atol=1e-6)
    assert torch.allclose(end[context_mask], out.end_logits[context_mask], atol=1e-6)
    masked = ~context_mask
    if allow_null:
        assert torch.allclose(start[:, 0], out.start_logits[:, 0], atol=1e-6)
        masked[:, 0] = False
    assert (start[masked] == masked_value(torch.float32)).all() and (end[masked] == masked_value(torch.float32)).all()


def test_loss_matches_transformers_when_nothing_is_masked(qa_model, inputs):
    input_ids, attention_mask, token_type_ids, _ = inputs
    positions = torch.tensor([6, 0, 11]), torch.tensor([7, 0, 11])
    with torch.no_grad():
        out = qa_model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                       start_positions=positions[0], end_positions=positions[1], output_hidden_states=True)
        head = load_head(qa_model, allow_null=True)
        start, end = head(out.hidden_states[-1], torch.ones_like(input_ids, dtype=torch.bool))
        loss = head.loss(start, end, *positions)
    assert torch.allclose(loss, out.loss, atol=1e-6)


def test_loss_is_mean_of_cross_entropies_and_ignores_index():
    start = torch.randn(4, 6)
    end = torch.randn(4, 6)
    sp, ep = torch.tensor([1, 2, -100, 5]), torch.tensor([1, 3, -100, 5])
    loss = SpanPointerHead.loss(start, end, sp, ep)
    keep = sp != -100
    expected = (F.cross_entropy(start[keep], sp[keep]) + F.cross_entropy(end[keep], ep[keep])) / 2
    assert torch.allclose(loss, expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_masked_sums_stay_finite_and_gradients_skip_masked(dtype):
    head = SpanPointerHead(8, allow_null=True).to(dtype)
    feats = torch.randn(2, 5, 8, dtype=dtype, requires_grad=True)
    ctx = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)
    start, end = head(feats, ctx)
    assert torch.isfinite(start + end).all()  # two masked logits do not overflow to -inf
    loss = head.loss(start, end, torch.tensor([2, 0]), torch.tensor([3, 4]))
    loss.backward()
    assert torch.isfinite(loss)
    assert (feats.grad[0, 1] == 0).all() and (feats.grad[0, 4] == 0).all()  # masked: no gradient
    assert feats.grad[0, 0].abs().sum() > 0  # [CLS] is the v2 null target
