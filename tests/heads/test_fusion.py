import pytest
import torch

from sesame.heads.fusion import LayerFusion, ScalarMix


def _states(n: int = 7, b: int = 2, t: int = 5, h: int = 3) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(b, t, h) for _ in range(n))


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("last", lambda s: s[6]),
        ("second_to_last", lambda s: s[5]),
        ("embeddings", lambda s: s[0]),
        ("sum_last_4", lambda s: s[3] + s[4] + s[5] + s[6]),
        ("concat_last_4", lambda s: torch.cat([s[3], s[4], s[5], s[6]], dim=-1)),
    ],
)
def test_presets_pick_the_right_layers(mode, expected):
    states = _states()
    fusion = LayerFusion(7, 3, mode=mode)
    out = fusion(states)
    torch.testing.assert_close(out, expected(states))
    assert out.shape[-1] == fusion.output_size


def test_explicit_layers_with_each_combine():
    states = _states()
    torch.testing.assert_close(LayerFusion(7, 3, "layers", [1, -1], "mean")(states), (states[1] + states[6]) / 2)
    torch.testing.assert_close(LayerFusion(7, 3, "layers", [1, -1], "sum")(states), states[1] + states[6])
    concat = LayerFusion(7, 3, "layers", [0, 2, 4], "concat")
    assert concat.output_size == 9
    torch.testing.assert_close(concat(states), torch.cat([states[0], states[2], states[4]], -1))


def test_scalar_mix_starts_as_the_mean_and_learns():
    states = _states()
    fusion = LayerFusion(7, 3, mode="scalar_mix")
    torch.testing.assert_close(fusion(states), torch.stack(states).mean(0))
    target = states[2]
    opt = torch.optim.Adam(fusion.parameters(), lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        ((fusion(states) - target) ** 2).mean().backward()
        opt.step()
    weights = fusion.layer_weights()
    assert abs(sum(weights.values()) - 1) < 1e-5
    assert max(weights, key=weights.get) == 2


def test_scalar_mix_matches_a_plain_weighted_sum():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.5)
    states = _states(3)
    w = torch.softmax(torch.tensor([0.5, -1.0, 2.0]), 0)
    torch.testing.assert_close(mix(states), 1.5 * (w[0] * states[0] + w[1] * states[1] + w[2] * states[2]))


def test_layers_the_encoder_does_not_have_are_a_clear_error():
    with pytest.raises(ValueError, match="fusion=last"):
        LayerFusion(3, 8, mode="concat_last_4")
    with pytest.raises(ValueError, match="not one of"):
        LayerFusion(7, 8, mode="penultimate")
    with pytest.raises(ValueError, match="fusion.layers"):
        LayerFusion(7, 8, mode="layers", layers=[])
