"""``encoder.fast_dropout``: the encoder's dropout draws its masks four elements per random draw: at the rate, scaled
as torch's dropout, repeatable under a seed, identity in evaluation, and nothing else about the model changes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.fast_dropout import SixteenBitDropout, sixteen_bit_dropout, use_fast_dropout
from tests.families.switch_equality import encoder_batch

SENTENCES = ["a fine film , and a long one at that", "dull", "the plot is thin and the jokes fall flat"]


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_sixteen_bit_dropout_drops_at_the_rate_and_scales_as_dropout_does_repeatably(p):
    ones = torch.ones(2000, 2000, dtype=torch.bfloat16)
    torch.manual_seed(3)
    dropped = sixteen_bit_dropout(ones, p)
    rate = (dropped == 0).double().mean().item()
    assert abs(rate - p) < 4 * (p * (1 - p) / ones.numel()) ** 0.5  # within 4 sigma of p
    kept = dropped[dropped != 0].float()
    assert torch.equal(kept, torch.full_like(kept, float(torch.tensor(1 / (1 - p), dtype=torch.bfloat16))))
    assert (dropped.float().mean() - 1).abs() < 0.01  # unbiased: E[dropout(x)] = x
    torch.manual_seed(3)
    assert torch.equal(sixteen_bit_dropout(ones, p), dropped)  # torch's generator: a seed repeats the mask
    assert not torch.equal(sixteen_bit_dropout(ones, p), dropped)
    assert torch.equal(sixteen_bit_dropout(ones, 1.0), torch.zeros_like(ones))


def test_an_encoder_with_fast_dropout_is_the_same_model_in_evaluation_and_drops_in_training(family_dir):
    encoder = Encoder(str(family_dir("bert"))).eval()
    inputs = encoder_batch(family_dir("bert"), SENTENCES)
    dropouts = [name for name, m in encoder.model.named_modules() if type(m) is nn.Dropout]
    keys = list(encoder.state_dict())
    with torch.no_grad():
        before = encoder(**inputs)[-1]
        assert use_fast_dropout(encoder.model) == len(dropouts) > 0
        assert all(isinstance(encoder.model.get_submodule(name), SixteenBitDropout) for name in dropouts)
        assert list(encoder.state_dict()) == keys
        assert torch.equal(encoder(**inputs)[-1], before)  # evaluation: no dropout at all
        encoder.train()
        torch.manual_seed(0)
        first = encoder(**inputs)[-1]
        torch.manual_seed(0)
        assert torch.equal(encoder(**inputs)[-1], first)  # a seed repeats the masks
        assert not torch.equal(first, before)


def test_recomputed_layers_draw_the_same_fast_dropout_masks(family_dir):
    encoder = Encoder(str(family_dir("bert")))  # training mode, dropout on
    use_fast_dropout(encoder.model)
    encoder.padding_free = True
    inputs = encoder_batch(family_dir("bert"), SENTENCES)

    def gradients() -> dict[str, torch.Tensor]:
        encoder.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        (encoder(**inputs, all_layers=False)[0] ** 2).sum().backward()
        return {k: p.grad.clone() for k, p in encoder.named_parameters() if p.grad is not None}

    plain = gradients()
    assert encoder.checkpoint_activations(True)
    recomputed = gradients()
    assert plain.keys() == recomputed.keys()
    for key in plain:
        torch.testing.assert_close(recomputed[key], plain[key], msg=key)


@pytest.mark.parametrize("overrides,on", [((), False), (("encoder.fast_dropout=true",), True),
                                          (("+experiment=cpu_speed",), True)])
def test_a_network_takes_fast_dropout_when_turned_on_or_in_the_cpu_speed_preset(family_cfg, overrides, on):
    from sesame.tasks.saved.checkpoints import build_module

    settings = RunSettings.from_config(family_cfg("bert", "glue", *overrides))
    network = build_module(settings, network_only=True)
    kinds = {type(m) for m in network.encoder.model.modules() if isinstance(m, nn.Dropout)}
    assert kinds == ({SixteenBitDropout} if on else {nn.Dropout})
    assert (network.fast_dropout_modules > 0) is on
    preset = "+experiment=cpu_speed" in overrides  # and the preset's other switches, each off by default
    assert (settings.data.group_by_length, settings.finetune.sparse_embeddings) == (preset, preset)
    assert (settings.trainer.lightning.get("precision") == "auto") is preset
    assert settings.trainer.onednn_primitive_cache == (512 if preset else None)


def test_a_zero_rate_drops_nothing():
    module = SixteenBitDropout(0.0).train()
    x = torch.randn(4, 5)
    assert torch.equal(module(x), x)
    assert torch.equal(sixteen_bit_dropout(x, 0.0), x)
