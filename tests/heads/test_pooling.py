import pytest
import torch

from sesame.heads.pooling import POOLINGS, build_pooling


def _padded_batch():
    torch.manual_seed(0)
    lengths = [5, 2, 3]
    feats = torch.randn(3, 5, 4)
    mask = torch.zeros(3, 5, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        feats[i, n:] = 100.0  # padding that would dominate mean and max if counted
    return feats, mask, lengths


def test_mean_and_max_ignore_padding():
    feats, mask, lengths = _padded_batch()
    mean = build_pooling("mean", 4)(feats, mask)
    mx = build_pooling("max", 4)(feats, mask)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(mean[i], feats[i, :n].mean(0))
        torch.testing.assert_close(mx[i], feats[i, :n].max(0).values)


def test_cls_and_cls_mean():
    feats, mask, lengths = _padded_batch()
    torch.testing.assert_close(build_pooling("cls", 4)(feats, mask), feats[:, 0])
    both = build_pooling("cls_mean", 4)
    out = both(feats, mask)
    assert out.shape == (3, 8) and both.output_size == 8
    torch.testing.assert_close(out[1, 4:], feats[1, :2].mean(0))


def test_the_summary_token_can_be_the_last_real_one():
    """XLNet's <cls> ends each (right-padded) row: cls, cls_mean and pooler read it there."""
    feats, mask, lengths = _padded_batch()
    last = feats[torch.arange(3), torch.tensor(lengths) - 1]
    torch.testing.assert_close(build_pooling("cls", 4, "last")(feats, mask), last)
    torch.testing.assert_close(build_pooling("cls_mean", 4, "last")(feats, mask)[:, :4], last)
    pooler = build_pooling("pooler", 4, "last")
    torch.testing.assert_close(pooler(feats, mask), torch.tanh(pooler.dense(last)))
    with pytest.raises(ValueError, match="summary_token"):
        build_pooling("cls", 4, "middle")


def test_the_pooler_loads_from_a_bare_linear_layer():
    """ALBERT's pooler is a Linear (its tanh is ``pooler_activation``); BERT's holds one as ``dense``."""
    pooler, dense = build_pooling("pooler", 4), torch.nn.Linear(4, 4)
    pooler.load_from(dense)
    torch.testing.assert_close(pooler.dense.weight, dense.weight)
    with pytest.raises(ValueError, match="no dense layer"):
        pooler.load_from(torch.nn.Tanh())


@pytest.mark.parametrize("name", sorted(POOLINGS))
def test_output_size_is_what_forward_gives(name):
    feats, mask, _ = _padded_batch()
    pool = build_pooling(name, 4)
    assert pool(feats, mask).shape == (3, pool.output_size)


def test_unknown_pooling():
    with pytest.raises(ValueError, match="cls, mean"):
        build_pooling("attention", 4)
