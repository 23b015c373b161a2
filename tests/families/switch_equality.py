"""An engine switch that must not change what a network computes: its outputs and gradients with the switch on
equal those with it off (eval mode, so dropout draws nothing), on a batch of sentences of unequal lengths."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from sesame.tasks.encoders.encoder import ENCODER_INPUT_KEYS, load_tokenizer


def encoder_batch(folder: Path, sentences: Sequence[str]) -> dict[str, torch.Tensor]:
    """``sentences`` tokenized by the tokenizer in ``folder`` and padded to the longest: the encoder's inputs."""
    batch = load_tokenizer(str(folder))(list(sentences), padding=True, return_tensors="pt")
    return {k: v for k, v in batch.items() if k in ENCODER_INPUT_KEYS}


def outputs_and_gradients(network: torch.nn.Module, inputs: Mapping[str, torch.Tensor],
                          read: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """What ``read`` keeps of ``network(inputs)``, and every parameter's gradient of its sum of squares."""
    network.zero_grad(set_to_none=True)
    logits = read(network(inputs))
    (logits.float() ** 2).sum().backward()
    return logits.detach(), {k: p.grad.clone() for k, p in network.named_parameters() if p.grad is not None}


def assert_switch_keeps_outputs_and_gradients(network: torch.nn.Module, inputs: Mapping[str, torch.Tensor],
                                              switch_off: Callable[[], None],
                                              read: Callable[[torch.Tensor], torch.Tensor] = lambda x: x) -> None:
    """``network`` as it is, then after ``switch_off()``: the same outputs (what ``read`` keeps) and gradients."""
    on_logits, on_grads = outputs_and_gradients(network, inputs, read)
    switch_off()
    off_logits, off_grads = outputs_and_gradients(network, inputs, read)
    torch.testing.assert_close(on_logits, off_logits, atol=2e-6, rtol=1e-5)
    assert on_grads.keys() == off_grads.keys()
    for key in off_grads:
        torch.testing.assert_close(on_grads[key], off_grads[key], atol=1e-5, rtol=1e-4, msg=key)
