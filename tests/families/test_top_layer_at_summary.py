"""``encoder.top_layer_at_summary``: with a head that reads the [CLS] vector alone, the top layer read runs at
[CLS] only (BERT-style families) and the network's outputs and gradients are those of the whole layer."""

from __future__ import annotations

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.summary_layer import runs_at_summary
from tests.families.builders import FAMILY_SPECS
from tests.families.switch_equality import assert_switch_keeps_outputs_and_gradients, encoder_batch

FAMILIES = list(FAMILY_SPECS)
SUMMARY_LAYER_FAMILIES = ("bert", "roberta", "electra", "xlm-roberta")
SENTENCES = ["a fine film , and a long one at that", "dull", "the plot is thin and the jokes fall flat"]


def test_the_bert_style_families_are_the_ones_that_run_at_summary():
    assert set(SUMMARY_LAYER_FAMILIES) <= set(FAMILY_SPECS)  # each is tested below


@pytest.mark.parametrize("name", FAMILIES)
def test_summary_only_states_are_the_whole_passes_at_cls_and_the_top_layer_never_runs_whole(family_dir, name):
    encoder = Encoder(str(family_dir(name))).eval()
    inputs = encoder_batch(family_dir(name), SENTENCES)
    num_layers = encoder.num_hidden_states - 1
    if encoder.family.cannot_stop_early or encoder.family.shared_layers:
        tops = [num_layers]
    else:
        tops = [num_layers, num_layers - 1]  # fusion=last; second_to_last with the layer above skipped
    with torch.no_grad():
        every = encoder(**inputs)
    for top in tops:
        layer_calls = []
        handles = [layer.register_forward_hook(lambda *_, i=i: layer_calls.append(i))
                   for i, layer in enumerate(encoder._layer_stack()[2])] if not encoder.family.shared_layers else []
        with torch.no_grad():
            states = encoder(**inputs, num_layers=None if top == num_layers else top, summary_only=True)
            (alone,) = encoder(**inputs, all_layers=False, num_layers=None if top == num_layers else top,
                               summary_only=True)
        for handle in handles:
            handle.remove()
        assert len(states) == top + 1
        for index, state in enumerate(states):
            assert state.shape == (len(SENTENCES), 1, every[index].shape[-1])
            torch.testing.assert_close(state, every[index][:, :1], atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(alone, every[top][:, :1], atol=2e-6, rtol=1e-5)
        if name in SUMMARY_LAYER_FAMILIES:
            assert encoder.runs_top_layer_at_summary(top)
            assert top - 1 not in layer_calls  # the top layer ran at [CLS] alone, never as the whole layer
        else:
            assert not encoder.runs_top_layer_at_summary(top)


@pytest.mark.parametrize("name", SUMMARY_LAYER_FAMILIES)
@pytest.mark.parametrize("pooling,fusion", [("pooler", "last"), ("cls", "second_to_last"), ("cls", "sum_last_4"),
                                            ("pooler", "scalar_mix")])
def test_a_network_reading_cls_gives_the_whole_layers_outputs_and_gradients(family_dir, family_cfg, name, pooling, fusion):
    from sesame.tasks.saved.checkpoints import build_module

    pooling = "cls" if name == "electra" else pooling  # ELECTRA has no pooler
    fusion = "layers" if fusion == "sum_last_4" else fusion  # the tiny encoders have 2 layers
    extra = ["fusion.layers=[-2,-1]", "fusion.combine=sum"] if fusion == "layers" else []
    settings = RunSettings.from_config(family_cfg(name, "glue", f"pooling={pooling}", f"fusion={fusion}", *extra))
    network = build_module(settings, network_only=True).eval()  # dropout off: both paths compute the same thing
    assert network.reads_summary_only
    inputs = encoder_batch(family_dir(name), SENTENCES)

    assert_switch_keeps_outputs_and_gradients(network, inputs, lambda: setattr(network, "reads_summary_only", False))


def test_heads_that_read_other_tokens_or_a_switch_turned_off_get_every_token(family_cfg):
    from sesame.tasks.saved.checkpoints import build_module

    def reads_summary(*overrides: str) -> bool:
        return build_module(RunSettings.from_config(family_cfg("bert", "glue", *overrides)),
                            network_only=True).reads_summary_only

    assert reads_summary("pooling=cls")
    assert not reads_summary("pooling=mean")
    assert not reads_summary("pooling=cls_mean")
    assert not reads_summary("pooling=cls", "encoder.top_layer_at_summary=false")
    assert not build_module(RunSettings.from_config(family_cfg("bert", "ner")), network_only=True).reads_summary_only


def test_a_hook_on_the_self_attention_makes_the_layer_run_whole(family_dir):
    encoder = Encoder(str(family_dir("bert"))).eval()
    layer = encoder._layer_stack()[2][-1]
    assert runs_at_summary(layer)
    handle = layer.attention.self.register_forward_hook(lambda *_: None)  # as pruning's head masks are applied
    try:
        assert not runs_at_summary(layer) and not encoder.runs_top_layer_at_summary(encoder.num_hidden_states - 1)
    finally:
        handle.remove()
