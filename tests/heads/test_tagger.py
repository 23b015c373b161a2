"""TokenTaggerHead: shapes, loss semantics, CRF wiring and compaction."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from sesame.heads.tagger import IGNORE_INDEX, TokenTaggerHead, compact

TAGS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


def test_logits_shape_and_cross_entropy_ignores_minus_100() -> None:
    torch.manual_seed(0)
    head = TokenTaggerHead(8, len(TAGS), dropout=0.0)
    features = torch.randn(2, 6, 8)
    logits = head(features)
    assert logits.shape == (2, 6, len(TAGS))
    labels = torch.tensor([[-100, 1, 3, -100, 0, -100], [-100, 2, 4, 4, -100, -100]])
    keep = labels != IGNORE_INDEX
    expected = F.cross_entropy(logits[keep], labels[keep])
    torch.testing.assert_close(head.loss(logits, labels), expected)
    # Changing logits where the label is -100 must not change the loss.
    changed = logits.detach().clone()
    changed[~keep] += 100.0
    torch.testing.assert_close(head.loss(changed, labels), expected.detach())
    decoded = head.decode(logits, keep)
    assert (decoded[~keep] == IGNORE_INDEX).all()
    assert torch.equal(decoded[keep], logits.argmax(-1)[keep])


def test_dropout_only_in_training() -> None:
    head = TokenTaggerHead(8, 3, dropout=0.5)
    features = torch.randn(4, 5, 8)
    head.eval()
    assert torch.equal(head(features), head(features))
    head.train()
    torch.manual_seed(0)
    assert not torch.equal(head(features), head(features))


def test_compact_packs_selected_positions_in_order() -> None:
    values = torch.arange(2 * 5).view(2, 5, 1).float()
    mask = torch.tensor([[False, True, False, True, True], [True, False, False, False, False]])
    packed, packed_mask, index = compact(values, mask)
    assert packed_mask.tolist() == [[True, True, True], [True, False, False]]
    assert index.tolist() == [[1, 3, 4], [0, 0, 0]]
    assert packed[0, :, 0].tolist() == [1.0, 3.0, 4.0]
    assert packed[1, 0, 0].item() == 5.0


def test_crf_head_runs_over_the_masked_positions_only() -> None:
    torch.manual_seed(1)
    head = TokenTaggerHead(4, len(TAGS), dropout=0.0, crf=True, tag_names=TAGS)
    logits = torch.randn(2, 7, len(TAGS))
    labels = torch.tensor([[-100, 1, 3, -100, 0, 2, -100], [-100, 0, 0, -100, -100, -100, -100]])
    mask = labels != IGNORE_INDEX
    loss = head.loss(logits, labels)
    # Same as the CRF on the hand-packed word sequences.
    emissions = torch.zeros(2, 4, len(TAGS))
    emissions[0] = logits[0, [1, 2, 4, 5]]
    emissions[1, :2] = logits[1, [1, 2]]
    tags = torch.tensor([[1, 3, 0, 2], [0, 0, 0, 0]])
    packed_mask = torch.tensor([[True] * 4, [True, True, False, False]])
    assert head.crf is not None
    torch.testing.assert_close(loss, head.crf(emissions, tags, packed_mask))
    decoded = head.decode(logits, mask)
    best = head.crf.decode(emissions, packed_mask)
    assert decoded[0, [1, 2, 4, 5]].tolist() == best[0].tolist()
    assert decoded[1, [1, 2]].tolist() == best[1, :2].tolist()
    assert (decoded[~mask] == IGNORE_INDEX).all()
    loss.backward()


def test_crf_head_argument_errors() -> None:
    with pytest.raises(ValueError, match="tag_names"):
        TokenTaggerHead(4, 3, crf=True)
    with pytest.raises(ValueError, match="tag names"):
        TokenTaggerHead(4, 3, tag_names=["O", "B-X"])
    head = TokenTaggerHead(4, len(TAGS), crf=True, tag_names=TAGS)
    labels = torch.tensor([[0, -100]])
    with pytest.raises(ValueError, match="-100"):
        head.loss(torch.randn(1, 2, len(TAGS)), labels, mask=torch.tensor([[True, True]]))
