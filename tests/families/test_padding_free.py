"""``encoder.padding_free``: BERT-style layers run on the real tokens alone, and every hidden state, output and
gradient at a real token is the padded model's."""

from __future__ import annotations

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.padding_free import PaddingFreeLayout, worth_packing
from tests.families.builders import FAMILY_SPECS
from tests.families.switch_equality import assert_switch_keeps_outputs_and_gradients, encoder_batch

PADDING_FREE_FAMILIES = ("bert", "roberta", "electra", "xlm-roberta")
# lengths far apart, so most of the padded batch is padding
SENTENCES = ["a fine film , and a long one at that , with a plot that goes on and on", "dull",
             "the plot is thin and the jokes fall flat"]


def test_attention_over_groups_of_like_length_is_each_sequences_own():
    torch.manual_seed(0)
    lengths = [5, 1, 17, 9, 9, 3, 12, 0, 7, 20, 2, 11, 6, 14, 4, 8, 10, 16, 13, 15]  # 3 groups, one empty row
    mask = (torch.arange(20)[None, :] < torch.tensor(lengths)[:, None]).long()
    layout = PaddingFreeLayout(mask)
    assert len(layout.groups) == 3
    heads, size = 2, 4
    query, key, value = (torch.randn(layout.tokens, heads * size, dtype=torch.float64) for _ in range(3))
    packed = layout.attend(query, key, value, size, dropout=0.0, scale=None)
    offset = 0
    for length in filter(None, lengths):  # each sequence alone, no padding at all
        q, k, v = (t[offset:offset + length].view(length, heads, size).transpose(0, 1) for t in (query, key, value))
        alone = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(length, -1)
        torch.testing.assert_close(packed[offset:offset + length], alone)
        offset += length
    assert offset == layout.tokens == sum(lengths)
    nothing = PaddingFreeLayout(torch.zeros(2, 3, dtype=torch.long))  # a batch of padding alone
    assert nothing.attend(*(torch.zeros(0, heads * size) for _ in range(3)), size, 0.0, None).shape == (0, heads * size)


def test_a_batch_of_like_lengths_is_one_attention_group_and_of_mixed_lengths_several():
    def groups(lengths: list[int]) -> list[int]:
        mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
        return [group[1].shape[0] for group in PaddingFreeLayout(mask).groups]

    assert groups([10, 11, 10, 12, 11, 10, 12, 12, 11, 10, 12, 11]) == [12]  # as length grouping makes them
    assert groups([3, 40, 5, 12, 7, 30, 4, 9, 22, 6, 15, 8]) == [8, 4]


def test_a_batch_with_little_padding_runs_the_padded_layers(family_dir):
    encoder = Encoder(str(family_dir("bert"))).eval()
    encoder.padding_free = True
    inputs = {k: v[:1].repeat(2, 1) for k, v in encoder_batch(family_dir("bert"), SENTENCES).items()}  # the longest sentence twice
    inputs["attention_mask"][1, -1] = 0  # one padding position of 2 T
    assert not worth_packing(inputs["attention_mask"])
    with torch.no_grad():
        assert encoder(**inputs)[-1][1, -1].abs().sum() > 0  # the padded layers computed the padding
        inputs["attention_mask"][1, 4:] = 0  # now most of the second row is padding
        assert worth_packing(inputs["attention_mask"])
        assert not encoder(**inputs)[-1][1, 4:].any()  # packed: padding never computed


def test_the_layout_packs_real_tokens_in_order_and_unpacks_them_with_zeros_at_padding():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    padded = torch.arange(12.0).view(3, 4, 1).expand(3, 4, 2)
    layout = PaddingFreeLayout(mask)
    packed = layout.pack(padded)
    assert packed[:, 0].tolist() == [0.0, 1.0, 2.0, 4.0, 8.0, 9.0]
    unpacked = layout.unpack(packed)
    torch.testing.assert_close(unpacked, padded * mask[..., None])


@pytest.mark.parametrize("name", list(FAMILY_SPECS))
def test_hidden_states_at_real_tokens_are_the_padded_models(family_dir, name):
    encoder = Encoder(str(family_dir(name))).eval()
    inputs = encoder_batch(family_dir(name), SENTENCES)
    real = inputs["attention_mask"].bool()
    assert (~real).sum() > real.sum() / 2  # a batch with much padding
    num_layers = encoder.num_hidden_states - 1
    with torch.no_grad():
        padded = encoder(**inputs)
        encoder.padding_free = True
        assert encoder.runs_padding_free() == (name in PADDING_FREE_FAMILIES)
        free = encoder(**inputs)
        (last,) = encoder(**inputs, all_layers=False)
        below = encoder(**inputs, num_layers=None if encoder.family.cannot_stop_early else num_layers - 1)
    assert len(free) == len(padded)
    for index, (state, reference) in enumerate(zip(free, padded)):
        torch.testing.assert_close(state[real], reference[real], atol=2e-6, rtol=1e-5, msg=f"hidden state {index}")
    torch.testing.assert_close(last[real], padded[-1][real], atol=2e-6, rtol=1e-5)
    assert len(below) == len(padded) - (0 if encoder.family.cannot_stop_early else 1)
    torch.testing.assert_close(below[-1][real], padded[len(below) - 1][real], atol=2e-6, rtol=1e-5)
    if name in PADDING_FREE_FAMILIES:
        assert not free[-1][~real].any()  # padding is never computed: zeros


@pytest.mark.parametrize("name", PADDING_FREE_FAMILIES)
@pytest.mark.parametrize("task,overrides", [("glue", ("pooling=mean", "fusion=scalar_mix")),
                                            ("glue", ("pooling=cls", "fusion=last")),
                                            ("ner", ("fusion=second_to_last",))])
def test_a_network_gives_the_padded_models_outputs_and_gradients(family_dir, family_cfg, name, task, overrides):
    from sesame.tasks.saved.checkpoints import build_module

    settings = RunSettings.from_config(family_cfg(name, task, *overrides, "encoder.padding_free=true"))
    network = build_module(settings, network_only=True).eval()  # dropout off: both paths compute the same thing
    assert network.encoder.runs_padding_free()
    inputs = encoder_batch(family_dir(name), SENTENCES)
    real = inputs["attention_mask"].bool()
    read = (lambda logits: logits[real]) if task == "ner" else (lambda logits: logits)  # a tagger's, at real tokens
    assert_switch_keeps_outputs_and_gradients(network, inputs, lambda: setattr(network.encoder, "padding_free", False),
                                              read)


def test_recomputed_layers_give_the_same_gradients(family_dir):
    encoder = Encoder(str(family_dir("bert")))
    for module in encoder.modules():  # training mode without dropout: the recompute is the one difference
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    encoder.padding_free = True
    inputs = encoder_batch(family_dir("bert"), SENTENCES)

    def gradients() -> dict[str, torch.Tensor]:
        encoder.zero_grad(set_to_none=True)
        (encoder(**inputs, all_layers=False)[0] ** 2).sum().backward()
        return {k: p.grad.clone() for k, p in encoder.named_parameters() if p.grad is not None}

    plain = gradients()
    assert encoder.checkpoint_activations(True) and encoder.recomputes_layers
    recomputed = gradients()
    assert plain.keys() == recomputed.keys()
    for key in plain:
        torch.testing.assert_close(recomputed[key], plain[key], msg=key)


@pytest.mark.parametrize("hooked", ["layer", "layer.attention", "layer.attention.self"])  # the last: pruning's masks
def test_a_hook_on_a_layer_or_its_attention_makes_the_stack_run_padded(family_dir, hooked):
    encoder = Encoder(str(family_dir("bert"))).eval()
    encoder.padding_free = True
    assert encoder.runs_padding_free()
    layer = encoder._layer_stack()[2][0]
    handle = layer.get_submodule(hooked.removeprefix("layer").lstrip(".")).register_forward_hook(lambda *_: None)
    try:
        assert not encoder.runs_padding_free()
    finally:
        handle.remove()
    assert encoder.runs_padding_free()


def test_a_row_of_padding_alone_leaves_every_output_and_gradient_finite(family_dir):
    # multiple choice pads a group shorter than the batch's widest with rows that are all padding
    encoder = Encoder(str(family_dir("bert"))).eval()
    inputs = encoder_batch(family_dir("bert"), SENTENCES)
    inputs["attention_mask"][1] = 0
    real = inputs["attention_mask"].bool()
    padded = encoder(**inputs)[-1]
    encoder.padding_free = True
    free = encoder(**inputs)[-1]
    torch.testing.assert_close(free[real], padded[real], atol=2e-6, rtol=1e-5)
    (free[real] ** 2).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)
    assert torch.isfinite(free).all() and not free[1].any()
