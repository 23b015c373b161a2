"""``encoder.low_precision_attention``: training attention with dropout under bf16 autocast runs in bf16, equal to
torch's SDPA (its fp32 math path) within bf16 rounding, with the same dropout mask; everything else is SDPA itself."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders import low_precision_attention
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.fast_dropout import dropout_keep_mask
from sesame.tasks.encoders.low_precision_attention import ATTENTION_NAME, dot_product_attention, unfused_attention
from tests.families.switch_equality import encoder_batch

SENTENCES = ["a fine film , and a long one at that , with a plot that goes on and on", "dull",
             "the plot is thin and the jokes fall flat", "a film"]


def attention_inputs(dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    query, key, value = (torch.randn(3, 2, 7, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 4:] = False
    mask[2] = False  # a row with nothing to look at (multiple choice's padding rows)
    return query, key, value, mask


def run(attention, *inputs: torch.Tensor, seed: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(seed)
    output = attention(*inputs)
    (output.float() * torch.linspace(-1, 1, output.shape[-1])).sum().backward()
    grads = tuple(t.grad.float().clone() for t in inputs[:3])
    for t in inputs[:3]:
        t.grad = None
    return output.detach().float(), *grads


def test_bf16_dropout_attention_is_the_exact_attention_with_its_dropout_mask_within_bf16_rounding():
    query, key, value, mask = attention_inputs(torch.bfloat16)
    ours = lambda *t: unfused_attention(*t[:3], t[3], 0.3, None)  # noqa: E731

    def exact(*t: torch.Tensor) -> torch.Tensor:  # float64, with the mask the seed gives
        q, k, v = (x.double() for x in t[:3])
        scores = (q @ k.transpose(-2, -1) / 8 ** 0.5).masked_fill(~t[3], float("-inf"))
        keep, scale = dropout_keep_mask(scores.shape, 0.3, scores.device)
        return (torch.softmax(scores, -1) * keep * scale) @ v

    reference, other_seed, unfused = (run(f, query, key, value, mask, seed=s)
                                      for f, s in ((exact, 1), (exact, 2), (ours, 1)))
    for index, (got, want, elsewhere) in enumerate(zip(unfused, reference, other_seed)):
        got, want, elsewhere = got[:2], want[:2], elsewhere[:2]  # the padding row: finite, read by nothing
        assert (got - want).abs().max() <= 0.03 * want.abs().max(), f"tensor {index}"
        # the same mask: far closer than another draw of it
        assert (got - want).abs().max() < 0.2 * (elsewhere - want).abs().max(), f"tensor {index}"
    assert all(torch.isfinite(t).all() for t in unfused)


@pytest.mark.parametrize("dtype,dropout", [(torch.float32, 0.3), (torch.bfloat16, 0.0)])
def test_fp32_and_attention_without_dropout_are_sdpa_itself(dtype, dropout):
    query, key, value, mask = attention_inputs(dtype)
    mask[2] = True
    sdpa = lambda *t: F.scaled_dot_product_attention(*t[:3], attn_mask=t[3], dropout_p=dropout)  # noqa: E731
    ours = lambda *t: dot_product_attention(*t[:3], t[3], dropout, None, low_precision=True)  # noqa: E731
    for got, want in zip(run(ours, query, key, value, mask, seed=1), run(sdpa, query, key, value, mask, seed=1)):
        assert torch.equal(got, want)


@pytest.fixture
def counted_unfused(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the unfused attention ran (one entry per call), with torch's dropout (the same masks as SDPA's
    for the same seed), so an encoder's outputs compare with SDPA's."""
    calls: list[int] = []
    monkeypatch.setattr(low_precision_attention, "dropout_keep_mask",
                        lambda shape, p, device: (torch.empty(shape, device=device).bernoulli_(1 - p).bool(), 1 / (1 - p)))

    def counting(*args, **kwargs):
        calls.append(1)
        return unfused_attention(*args, **kwargs)

    monkeypatch.setattr(low_precision_attention, "unfused_attention", counting)
    return calls


@pytest.mark.parametrize("path", ["padded", "padding_free", "top_layer_at_summary"])
def test_an_encoders_bf16_training_outputs_are_sdpas_within_bf16_rounding(family_dir, counted_unfused, path):
    encoder = Encoder(str(family_dir("bert"))).train()
    encoder.padding_free = path != "padded"
    inputs = encoder_batch(family_dir("bert"), SENTENCES)
    real = inputs["attention_mask"].bool()
    layers = encoder.num_hidden_states - 1

    def forward(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            states = encoder(**inputs, summary_only=path == "top_layer_at_summary")
        return states[-1].float() if path == "top_layer_at_summary" else states[-1][real].float()

    sdpa, sdpa_elsewhere = forward(1), forward(2)
    assert encoder.model.config._attn_implementation == "sdpa" and not counted_unfused
    assert encoder.use_low_precision_attention(True)
    assert encoder.model.config._attn_implementation == ATTENTION_NAME
    ours = forward(1)
    assert len(counted_unfused) == layers  # every layer's attention, whichever path runs it
    assert (ours - sdpa).abs().max() <= 0.05 * sdpa.abs().max()
    assert (ours - sdpa).abs().max() < 0.2 * (sdpa_elsewhere - sdpa).abs().max()  # the same dropout masks
    encoder.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        encoder(**inputs)
    assert len(counted_unfused) == layers  # evaluation draws no dropout: SDPA's fused kernel


def test_the_switch_needs_sdpa_and_is_never_saved(family_dir, tmp_path):
    eager = Encoder(str(family_dir("bert")), attn_implementation="eager")
    assert not eager.use_low_precision_attention(True)
    assert eager.model.config._attn_implementation == "eager"
    encoder = Encoder(str(family_dir("bert")))
    assert not encoder.use_low_precision_attention(False)
    assert encoder.use_low_precision_attention(True)
    encoder.model.save_pretrained(tmp_path)
    assert ATTENTION_NAME not in json.dumps(json.loads((tmp_path / "config.json").read_text()))


@pytest.mark.parametrize("overrides,on", [((), True), (("encoder.low_precision_attention=false",), False),
                                          (("encoder.attn_implementation=sdpa",), False)])
def test_a_network_takes_the_switch_unless_turned_off_or_an_attention_is_named(family_cfg, overrides, on):
    from sesame.tasks.saved.checkpoints import build_module

    network = build_module(RunSettings.from_config(family_cfg("bert", "glue", *overrides)), network_only=True)
    assert network.low_precision_attention is on
    assert (network.encoder.model.config._attn_implementation == ATTENTION_NAME) is on
