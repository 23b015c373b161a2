"""Structured pruning of an encoder: attention heads and feed-forward neurons removed from the weights.

transformers 5 no longer prunes (``prune_heads``, ``config.pruned_heads`` and ``head_mask`` are gone),
and its configs cannot say that layers differ in their number of heads or neurons. So sesame does the
structural change itself and records it in the encoder's ``config.json`` under :data:`PLAN_KEY`:

    "sesame_pruning": {"num_attention_heads": 12, "intermediate_size": 3072,
                       "layers": [{"heads": [0, 1, 3, ...], "neurons": 2048}, ...]}

per layer (bottom first) the heads it keeps, as indices of the unpruned layer's heads in their order,
and how many feed-forward neurons it keeps. ``num_attention_heads`` and ``intermediate_size`` of the
config stay the unpruned ones (the head size is ``hidden_size / num_attention_heads``). A folder with
the record loads through :func:`load_pruned` (``tasks/encoders/families.py`` ``load_encoder_model``):
the model is built from its config, shrunk to the recorded sizes, then given the folder's compact
weights, so ``encoder.name_or_path=<folder>``, a run folder's ``encoder/`` and every checkpoint of a
pruned model load as any other.

Where a family keeps the parts pruning changes is a :class:`PruneLayout` (``EncoderFamily.pruning``);
the families without one cannot be pruned.

A plain transformers folder cannot hold a pruned model's shapes: :func:`plain_config` and
:func:`full_shape_state` give the same network in the unpruned shapes, with the removed heads' and
neurons' weights zero (``sesame-export --format hf``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sesame.tasks.core.errors import DataError
from sesame.tasks.encoders.hf_weights import read_state_dict

#: The config entry recording what was pruned (see the module docstring).
PLAN_KEY = "sesame_pruning"
#: What a plain transformers folder of a pruned model holds (:func:`plain_config`, :func:`full_shape_state`).
PLAIN_SHAPES = ("plain transformers shapes: every layer with all its attention heads and the widest layer's number of "
                "feed-forward neurons, the removed heads' and neurons' weights zero (the pruned model's outputs, not "
                "its size)")


@dataclass(frozen=True)
class PruneLayout:
    """Where the modules pruning changes sit, as dotted names: the layer stack in the model, the rest
    inside one layer of it."""

    #: The ``nn.ModuleList`` of transformer layers, in the base model.
    stack: str = "encoder.layer"
    #: The self-attention module: its output is the heads' context vectors side by side [B, T, heads * d],
    #: and it has ``num_attention_heads``, ``attention_head_size`` and ``all_head_size``.
    attention: str = "attention.self"
    #: The head projections inside :attr:`attention`: each has one block of ``d`` output rows per head.
    projections: tuple[str, ...] = ("query", "key", "value")
    #: The linear layer reading the heads' context (one block of ``d`` input columns per head).
    attention_output: str = "attention.output.dense"
    #: The module whose output is the feed-forward activations [B, T, neurons] (after the non-linearity).
    intermediate: str = "intermediate"
    #: The linear layer making those activations (one output row per neuron).
    intermediate_dense: str = "intermediate.dense"
    #: The linear layer reading them (one input column per neuron).
    output_dense: str = "output.dense"


#: BERT and the families built like it (RoBERTa, XLM-RoBERTa, ELECTRA).
BERT_LAYOUT = PruneLayout()


@dataclass(frozen=True)
class PruningPlan:
    """What a pruned encoder keeps: per layer (bottom first) the kept heads, as indices of the
    unpruned layer's ``num_heads`` heads (ascending), and the number of kept neurons of its
    ``intermediate_size``."""

    num_heads: int
    intermediate_size: int
    heads: tuple[tuple[int, ...], ...]
    neurons: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.heads) != len(self.neurons):
            raise ValueError(f"{len(self.heads)} layers of heads but {len(self.neurons)} of neurons")
        for layer, kept in enumerate(self.heads):
            if not kept or list(kept) != sorted(set(kept)) or kept[0] < 0 or kept[-1] >= self.num_heads:
                raise ValueError(f"layer {layer}: kept heads {list(kept)} are not ascending indices of {self.num_heads} heads")
        for layer, count in enumerate(self.neurons):
            if not 0 < count <= self.intermediate_size:
                raise ValueError(f"layer {layer}: {count} kept neurons of {self.intermediate_size}")

    @classmethod
    def unpruned(cls, config: Any) -> PruningPlan:
        """The plan of a model that keeps everything."""
        heads, size = int(config.num_attention_heads), int(config.intermediate_size)
        layers = int(config.num_hidden_layers)
        return cls(heads, size, tuple(tuple(range(heads)) for _ in range(layers)), (size,) * layers)

    @classmethod
    def of_config(cls, config: Any) -> PruningPlan | None:
        """The plan recorded in ``config`` (None: not pruned); a :class:`DataError` for a record that
        does not describe this config's model."""
        record = getattr(config, PLAN_KEY, None)
        if record is None:
            return None
        try:
            plan = cls(int(record["num_attention_heads"]), int(record["intermediate_size"]),
                       tuple(tuple(int(h) for h in layer["heads"]) for layer in record["layers"]),
                       tuple(int(layer["neurons"]) for layer in record["layers"]))
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"config.json: {PLAN_KEY} is not a pruning record sesame wrote ({err})") from None
        expected = (int(config.num_attention_heads), int(config.intermediate_size), int(config.num_hidden_layers))
        if (plan.num_heads, plan.intermediate_size, plan.num_layers) != expected:
            raise DataError(
                f"config.json: {PLAN_KEY} describes {plan.num_layers} layers of {plan.num_heads} heads and "
                f"{plan.intermediate_size} neurons, but the config {expected[2]} layers of {expected[0]} heads and "
                f"{expected[1]} neurons: the record belongs to another model")
        return plan

    @property
    def num_layers(self) -> int:
        return len(self.heads)

    def summary(self) -> str:
        """``kept 9 of 12 attention heads (per layer 3, 2, 4), 60 of 96 feed-forward neurons (per layer ...)``."""
        heads = [len(h) for h in self.heads]
        return (f"kept {sum(heads)} of {self.num_heads * self.num_layers} attention heads (per layer "
                f"{', '.join(map(str, heads))}), {sum(self.neurons)} of {self.intermediate_size * self.num_layers} "
                f"feed-forward neurons (per layer {', '.join(map(str, self.neurons))})")

    def as_record(self) -> dict[str, Any]:
        """The ``config.json`` entry (plain JSON types)."""
        return {"num_attention_heads": self.num_heads, "intermediate_size": self.intermediate_size,
                "layers": [{"heads": list(h), "neurons": n} for h, n in zip(self.heads, self.neurons)]}

    def record(self, config: Any) -> None:
        """Write the plan into ``config`` (a plan that keeps everything is no record)."""
        if self == PruningPlan.unpruned(config):
            if hasattr(config, PLAN_KEY):
                delattr(config, PLAN_KEY)
            return
        setattr(config, PLAN_KEY, self.as_record())

    def then(self, keep_heads: Sequence[Sequence[int]], keep_neurons: Sequence[Sequence[int]]) -> PruningPlan:
        """This plan followed by keeping, per layer, the given positions among the heads and neurons it
        kept (pruning a pruned model)."""
        heads = tuple(tuple(self.heads[layer][i] for i in sorted(keep)) for layer, keep in enumerate(keep_heads))
        return PruningPlan(self.num_heads, self.intermediate_size, heads, tuple(len(k) for k in keep_neurons))

    def dropped(self, layers: Sequence[int]) -> PruningPlan:
        """The plan of the given layers only, in that order (``sesame-compress drop-layers``)."""
        return PruningPlan(self.num_heads, self.intermediate_size, tuple(self.heads[i] for i in layers),
                           tuple(self.neurons[i] for i in layers))


def _rows(heads: Sequence[int], head_size: int) -> torch.Tensor:
    """The output rows (input columns) of the given heads' blocks of ``head_size``."""
    return torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in heads])


def _keep_rows(linear: nn.Linear, rows: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[rows.to(linear.weight.device)].clone(),
                                 requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach()[rows.to(linear.bias.device)].clone(),
                                   requires_grad=linear.bias.requires_grad)
    linear.out_features = len(rows)


def _keep_columns(linear: nn.Linear, columns: torch.Tensor) -> None:
    linear.weight = nn.Parameter(linear.weight.detach()[:, columns.to(linear.weight.device)].clone(),
                                 requires_grad=linear.weight.requires_grad)
    linear.in_features = len(columns)


def layer_stack(model: nn.Module, layout: PruneLayout) -> nn.ModuleList:
    """The model's transformer layers (the base model: ``BertModel``, not a task model)."""
    return model.get_submodule(layout.stack)


def shrink_layer(layer: nn.Module, layout: PruneLayout, keep_heads: Sequence[int], keep_neurons: Sequence[int]) -> None:
    """Keep only the given heads and neurons of one layer (positions among its present ones), weights
    included, in place: the projections' rows and the output layers' columns of the rest are removed."""
    attention = layer.get_submodule(layout.attention)
    head_size = int(attention.attention_head_size)
    rows = _rows(sorted(keep_heads), head_size)
    for name in layout.projections:
        _keep_rows(attention.get_submodule(name), rows)
    _keep_columns(layer.get_submodule(layout.attention_output), rows)
    attention.num_attention_heads = len(keep_heads)
    attention.all_head_size = len(keep_heads) * head_size
    neurons = torch.as_tensor(sorted(keep_neurons), dtype=torch.long)
    _keep_rows(layer.get_submodule(layout.intermediate_dense), neurons)
    _keep_columns(layer.get_submodule(layout.output_dense), neurons)


def present(model: nn.Module, layout: PruneLayout) -> tuple[list[int], list[int]]:
    """``(heads, neurons)`` each layer of ``model`` has now."""
    layers = layer_stack(model, layout)
    heads = [int(layer.get_submodule(layout.attention).num_attention_heads) for layer in layers]
    neurons = [int(layer.get_submodule(layout.intermediate_dense).out_features) for layer in layers]
    return heads, neurons


def prune_model(model: nn.Module, layout: PruneLayout, keep_heads: Sequence[Sequence[int]],
                keep_neurons: Sequence[Sequence[int]]) -> PruningPlan:
    """Keep, per layer, the given positions among the model's present heads and neurons (weights
    included); record the resulting plan in ``model.config`` and return it."""
    config = model.config
    before = PruningPlan.of_config(config) or PruningPlan.unpruned(config)
    plan = before.then(keep_heads, keep_neurons)
    for layer, heads, neurons in zip(layer_stack(model, layout), keep_heads, keep_neurons, strict=True):
        shrink_layer(layer, layout, heads, neurons)
    plan.record(config)
    return plan


def apply_plan(model: nn.Module, plan: PruningPlan, layout: PruneLayout) -> nn.Module:
    """Give a model built from its config (unpruned shapes) the plan's shapes; its weights are to be
    loaded next (those it has now are dropped or kept arbitrarily)."""
    for layer, heads, neurons in zip(layer_stack(model, layout), plan.heads, plan.neurons, strict=True):
        shrink_layer(layer, layout, range(len(heads)), range(neurons))
    return model


# Loading a pruned folder ---------------------------------------------------------------------------
def load_pruned(path: str, config: Any, plan: PruningPlan, layout: PruneLayout, load_weights: bool,
                **kwargs: Any) -> tuple[nn.Module, dict[str, Any]]:
    """``(model, loading info)`` of a pruned encoder folder: built from ``config``, given the plan's
    shapes, then (``load_weights``) the folder's weights, in eval mode as ``from_pretrained`` leaves a
    model. Without a ``dtype`` the model takes the stored weights' floating dtype."""
    from transformers import AutoModel

    model = apply_plan(AutoModel.from_config(config, **kwargs), plan, layout)
    if not load_weights:
        return model, {}
    state = read_state_dict(path)
    floating = next((t.dtype for t in state.values() if t.is_floating_point()), None)
    if "dtype" not in kwargs and floating is not None:
        model.to(floating)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shapes that are not the recorded plan's
        first = str(err).strip().splitlines()[-1].strip()
        raise DataError(f"{path}: the weights do not have the shapes its config.json's {PLAN_KEY} records ({first})") from None
    if unexpected:
        raise DataError(f"{path}: weights the pruned {type(model).__name__} has no place for: {', '.join(unexpected[:5])}")
    return model.eval(), {"missing_keys": set(missing), "unexpected_keys": set()}


# The same network in unpruned shapes (a plain transformers folder) ----------------------------------
def plain_config(config: Any, plan: PruningPlan) -> Any:
    """A copy of ``config`` that plain transformers builds a network from, able to hold the pruned
    one: no pruning record, and ``intermediate_size`` the largest kept number of neurons of a layer."""
    plain = copy.deepcopy(config)
    if hasattr(plain, PLAN_KEY):
        delattr(plain, PLAN_KEY)
    plain.intermediate_size = max(plan.neurons)
    return plain


def full_shape_state(state: Mapping[str, torch.Tensor], plan: PruningPlan, layout: PruneLayout,
                     head_size: int, prefix: str = "") -> dict[str, torch.Tensor]:
    """``state`` (a pruned model's, its keys under ``prefix``) in the shapes of :func:`plain_config`'s
    model: each kept head's projection rows and output columns at the head's own index, zeros for the
    removed heads; each layer's kept neurons first, then zero rows and columns up to the widest layer.
    The removed parts' contributions are exactly zero, so the network computes what the pruned one does."""
    out = dict(state)
    width = max(plan.neurons)
    for index, (heads, neurons) in enumerate(zip(plan.heads, plan.neurons)):
        base = f"{prefix}{layout.stack}.{index}."
        rows = _rows(heads, head_size)
        full = plan.num_heads * head_size
        for name in layout.projections:
            for part in ("weight", "bias"):
                key = f"{base}{layout.attention}.{name}.{part}"
                if key in out:
                    value = out[key]
                    grown = value.new_zeros((full, *value.shape[1:]))
                    grown[rows] = value
                    out[key] = grown
        key = f"{base}{layout.attention_output}.weight"
        grown = out[key].new_zeros((out[key].shape[0], full))
        grown[:, rows] = out[key]
        out[key] = grown
        for part in ("weight", "bias"):
            key = f"{base}{layout.intermediate_dense}.{part}"
            if key in out:
                value = out[key]
                grown = value.new_zeros((width, *value.shape[1:]))
                grown[:neurons] = value
                out[key] = grown
        key = f"{base}{layout.output_dense}.weight"
        grown = out[key].new_zeros((out[key].shape[0], width))
        grown[:, :neurons] = out[key]
        out[key] = grown
    return out


def head_size(model: nn.Module, layout: PruneLayout) -> int:
    """The size ``d`` of one attention head's block."""
    return int(layer_stack(model, layout)[0].get_submodule(layout.attention).attention_head_size)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def unsupported_message(model_type: str, supported: Sequence[str], setting: str) -> str:
    """Why ``setting`` cannot prune a family, and which families it can."""
    return (f"{setting}: structured pruning does not know where the {model_type or 'unknown'} family keeps its attention "
            f"heads and feed-forward neurons; it supports {', '.join(supported)}")

