"""Which attention heads and feed-forward neurons a trained model needs least: masks and importance scores.

Masks (:class:`PruningMasks`): per layer a head mask ``[heads]`` and a neuron mask ``[neurons]``, applied
by forward hooks: each layer's self-attention output (the heads' context vectors side by side,
[B, T, heads * d]) is multiplied head by head, each layer's feed-forward activations (after the
non-linearity, [B, T, neurons]) neuron by neuron. They are all ones unless set, so the hooked model
computes exactly what the model computes; a mask zero where a head or neuron was removed computes
what the pruned model computes. Layers may differ in their sizes (a pruned model pruned again).

Importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?"): the masks require grad,
the task module's own training loss (its ``training_step``: gold loss, CRF likelihood, span loss as
the task trains) runs on training batches, and ``|dL/dmask|`` is summed over the batches (the absolute
value taken per batch). For a neuron this is ``|sum over tokens of activation * dL/dactivation|``, the
first-order Taylor (weight-times-gradient) score. :func:`normalised` divides each layer's scores by
their L2 norm (as Michel et al. do for heads; neurons the same way), and :func:`select` removes the
lowest scores ranked across all layers together.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch import nn

from sesame.tasks.base.task_module import EncoderTaskModule
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.encoders.pruning import PruneLayout, layer_stack, present


class PruningMasks:
    """Head and neuron masks on a Hugging Face encoder, applied while the object is in a ``with``.

    ``heads[l]`` [heads of layer l] and ``neurons[l]`` [neurons of layer l], in the dtype and on the
    device of the model's weights, ones by default; set ``requires_grad`` to take gradients."""

    def __init__(self, model: nn.Module, layout: PruneLayout, requires_grad: bool = False) -> None:
        self.model, self.layout = model, layout
        param = next(model.parameters())
        heads, neurons = present(model, layout)
        like = {"dtype": param.dtype, "device": param.device}
        self.heads = [torch.ones(n, **like, requires_grad=requires_grad) for n in heads]
        self.neurons = [torch.ones(n, **like, requires_grad=requires_grad) for n in neurons]
        self._hooks: list[Any] = []

    def __enter__(self) -> Self:
        for index, layer in enumerate(layer_stack(self.model, self.layout)):
            self._hooks.append(layer.get_submodule(self.layout.attention).register_forward_hook(self._head_hook(index)))
            self._hooks.append(layer.get_submodule(self.layout.intermediate).register_forward_hook(self._neuron_hook(index)))
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _head_hook(self, index: int) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> Any:
            context = output[0] if isinstance(output, tuple) else output  # [B, T, heads * d]
            mask = self.heads[index]
            masked = (context.unflatten(-1, (mask.shape[0], -1)) * mask[:, None]).flatten(-2)
            return (masked, *output[1:]) if isinstance(output, tuple) else masked
        return hook

    def _neuron_hook(self, index: int) -> Any:
        def hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
            return output * self.neurons[index]  # [B, T, neurons]
        return hook


@dataclass
class Importance:
    """Per layer, ``|dL/dmask|`` summed over ``batches`` training batches: ``heads[l]`` [heads],
    ``neurons[l]`` [neurons] (float64)."""

    heads: list[torch.Tensor]
    neurons: list[torch.Tensor]
    batches: int


@contextlib.contextmanager
def gradients_through_encoder(module: EncoderTaskModule) -> Iterator[None]:
    """While inside: the module in eval mode (no dropout: the scores do not depend on chance), its
    weights without gradients (only the masks need them), and a frozen-encoder run's forward keeping
    the encoder's graph (``EncoderTaskModule.hidden_states`` drops it when the encoder is frozen)."""
    was_training = module.training
    grads = {name: p.requires_grad for name, p in module.named_parameters()}
    cache, distiller = module.feature_cache, module.distiller
    module.eval()
    for p in module.parameters():
        p.requires_grad_(False)
    module.encoder_graph_always = True
    module.feature_cache, module.distiller = None, None
    try:
        with torch.enable_grad(), warnings.catch_warnings():
            # training_step logs its loss; with no trainer attached Lightning says it cannot, once per call
            warnings.filterwarnings("ignore", message=r".*self\.log\(\)` but the `self\.trainer` reference")
            yield
    finally:
        module.encoder_graph_always = False
        module.feature_cache, module.distiller = cache, distiller
        for name, p in module.named_parameters():
            p.requires_grad_(grads[name])
        module.train(was_training)


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def importance(module: EncoderTaskModule, batches: Iterable[Mapping[str, Any]], layout: PruneLayout) -> Importance:
    """|dL/dmask| of every head and neuron of ``module``'s encoder, summed over ``batches``; ``L`` is
    the module's own training loss (``training_step``)."""
    model = module.encoder.model
    device = next(model.parameters()).device
    masks = PruningMasks(model, layout, requires_grad=True)
    heads = [torch.zeros(m.shape, dtype=torch.float64) for m in masks.heads]
    neurons = [torch.zeros(m.shape, dtype=torch.float64) for m in masks.neurons]
    count = 0
    with gradients_through_encoder(module), masks:
        for index, batch in enumerate(batches):
            loss = module.training_step(to_device(batch, device), index)
            grads = torch.autograd.grad(loss, [*masks.heads, *masks.neurons])
            for total, grad in zip([*heads, *neurons], grads, strict=True):
                total += grad.detach().abs().double().cpu()
            count += 1
    if count == 0:
        raise ConfigError("no training batch to score heads and neurons on: the run's training data is empty")
    return Importance(heads, neurons, count)


def normalised(scores: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each layer's scores divided by their L2 norm (a layer whose scores are all zero stays zero)."""
    return [s / n if (n := s.norm()) > 0 else s.clone() for s in scores]


def select(scores: Sequence[torch.Tensor], fraction: float, what: str, flag: str, fix: str) -> list[list[int]]:
    """Per layer, the positions to keep after removing ``fraction * total`` (to the nearest) of the lowest
    ``scores`` ranked across all layers (ties: the lower layer, then the lower position, goes first).
    A :class:`ConfigError` naming the layer where that would remove every ``what`` of a layer."""
    ranked = sorted((float(value), layer, pos) for layer, s in enumerate(scores) for pos, value in enumerate(s.tolist()))
    count = int(fraction * len(ranked) + 0.5)  # to the nearest, halves up
    removed = {(layer, pos) for _, layer, pos in ranked[:count]}
    keep = [[pos for pos in range(len(s)) if (layer, pos) not in removed] for layer, s in enumerate(scores)]
    for layer, kept in enumerate(keep):
        if not kept:
            raise ConfigError(f"{flag} {fraction:g} removes {count} of {len(ranked)} {what}, among them every one of layer "
                              f"{layer} ({len(scores[layer])}). Fix: lower {flag}, or {fix}")
    return keep
