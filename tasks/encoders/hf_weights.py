"""Read the task-head weights of a Hugging Face ``...For<Task>`` folder into sesame's heads."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from sesame.tasks.core.errors import ConfigError, MissingFileError


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face model folder (``model.safetensors`` or ``pytorch_model.bin``)."""
    folder = Path(folder)
    safetensors_file = folder / "model.safetensors"
    if safetensors_file.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors_file))
    bin_file = folder / "pytorch_model.bin"
    if bin_file.is_file():
        return torch.load(bin_file, map_location="cpu", weights_only=True)
    raise MissingFileError(f"{folder}: no model.safetensors or pytorch_model.bin to read head weights from")


def load_prefixed_weights(module: nn.Module, folder: str | Path, prefix: str) -> None:
    """Load ``<prefix>*`` tensors of the folder's checkpoint into ``module`` (all of them, strictly)."""
    state = {k[len(prefix) :]: v for k, v in read_state_dict(folder).items() if k.startswith(prefix)}
    if not state:
        raise ConfigError(
            f"{folder}: the checkpoint has no {prefix}* weights; is it a model with this task's head "
            "(e.g. ...ForSequenceClassification, ...ForQuestionAnswering)?"
        )
    module.load_state_dict(state, strict=True)
