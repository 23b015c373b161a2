"""Read the weights of a Hugging Face model folder: all of them, or a ``...For<Task>`` folder's task head
into sesame's heads."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from sesame.tasks.core.errors import ConfigError, MissingFileError


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face model folder (``model.safetensors``, its shards, or ``pytorch_model.bin``)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        return load_file(str(folder / "model.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return {k: v for shard in shards for k, v in load_file(str(folder / shard)).items()}
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise MissingFileError(f"{folder}: no model.safetensors (or its shards) or pytorch_model.bin to read weights from")


def load_prefixed_weights(module: nn.Module, folder: str | Path, prefix: str) -> None:
    """Load ``<prefix>*`` tensors of the folder's checkpoint into ``module`` (all of them, strictly)."""
    state = {k[len(prefix) :]: v for k, v in read_state_dict(folder).items() if k.startswith(prefix)}
    if not state:
        raise ConfigError(
            f"{folder}: the checkpoint has no {prefix}* weights; is it a model with this task's head "
            "(e.g. ...ForSequenceClassification, ...ForQuestionAnswering)?"
        )
    module.load_state_dict(state, strict=True)
