"""``encoder.skip_unread_layers``: the layers above the highest hidden state the fusion reads never run,
and what is read is the same as in the whole forward pass, in every family of the matrix (families
whose stack cannot stop early run it whole)."""

from __future__ import annotations

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import Encoder, load_tokenizer
from tests.families.builders import FAMILY_SPECS

FAMILIES = list(FAMILY_SPECS)
SENTENCES = ["a fine film , and a long one at that", "dull"]


def _inputs(folder) -> dict[str, torch.Tensor]:
    batch = load_tokenizer(str(folder))(SENTENCES, padding=True, return_tensors="pt")
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


def _calls_per_layer(encoder: Encoder) -> tuple[list[int], list[torch.utils.hooks.RemovableHandle]]:
    layers = encoder._layer_stack()[2]
    calls = [0] * len(layers)
    handles = []
    for index, layer in enumerate(layers):
        def count(*_: object, index: int = index) -> None:
            calls[index] += 1
        handles.append(layer.register_forward_hook(count))
    return calls, handles


@pytest.mark.parametrize("name", FAMILIES)
def test_layers_above_the_highest_read_never_run_and_the_read_states_are_equal(family_dir, name):
    encoder = Encoder(str(family_dir(name))).eval()
    inputs = _inputs(family_dir(name))
    num_layers = encoder.num_hidden_states - 1
    with torch.no_grad():
        every = encoder(**inputs)
    for highest in (0, num_layers - 1):  # fusion=embeddings, fusion=second_to_last
        run = encoder.layers_to_run(highest)
        if encoder.family.cannot_stop_early:
            assert run is None
            continue
        assert run == (highest if highest or encoder.family.runs_without_layers else 1)
        calls, handles = _calls_per_layer(encoder)
        with torch.no_grad():
            some = encoder(**inputs, num_layers=run)
            (alone,) = encoder(**inputs, all_layers=False, num_layers=run)
        for handle in handles:
            handle.remove()
        assert calls == [2] * run + [0] * (num_layers - run)
        assert len(some) == run + 1
        for index, state in enumerate(some):
            assert torch.equal(state, every[index]), f"{name}: hidden state {index} differs"
        assert torch.equal(alone, every[run])
        assert len(encoder._layer_stack()[2]) == num_layers  # the stack is whole again


@pytest.mark.parametrize("name", FAMILIES)
def test_a_network_reading_the_second_to_last_layer_gives_the_same_outputs(family_dir, family_cfg, name):
    from sesame.tasks.saved.checkpoints import build_module

    network = build_module(RunSettings.from_config(family_cfg(name, "glue", "fusion=second_to_last", "pooling=mean")), network_only=True).eval()
    expected = None if network.encoder.family.cannot_stop_early else network.encoder.num_hidden_states - 2
    assert network.encoder_layers_run == expected
    inputs = _inputs(family_dir(name))
    with torch.no_grad():
        skipped = network(inputs)
        network.encoder_layers_run = None
        whole = network(inputs)
    assert torch.equal(skipped, whole)


def test_a_whole_pass_after_a_cut_one_returns_every_hidden_state(family_dir):
    # transformers 5 installs its hidden-state hooks at the first pass: one on a cut stack must not leave the
    # layers above without theirs
    encoder = Encoder(str(family_dir("bert"))).eval()
    inputs = _inputs(family_dir("bert"))
    with torch.no_grad():
        cut = encoder(**inputs, num_layers=1)
        whole = encoder(**inputs)
    assert len(cut) == 2 and len(whole) == encoder.num_hidden_states
    assert torch.equal(whole[1], cut[1])
