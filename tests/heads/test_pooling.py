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


@pytest.mark.parametrize("name", sorted(POOLINGS))
def test_output_size_is_what_forward_gives(name):
    feats, mask, _ = _padded_batch()
    pool = build_pooling(name, 4)
    assert pool(feats, mask).shape == (3, pool.output_size)


def test_unknown_pooling():
    with pytest.raises(ValueError, match="cls, mean"):
        build_pooling("attention", 4)
