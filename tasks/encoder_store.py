"""The encoder folder of a run: what makes a run folder usable with nothing else present.

``<run>/encoder/`` holds the encoder's ``config.json`` and its tokenizer files, always; and, when the
run does not train every encoder weight (``finetune.mode`` frozen, top_k, bitfit or lora), the
pretrained weights once (``model.safetensors``). Those frozen weights are then left out of every checkpoint: a
checkpoint records only their names and a sha256 digest of their values, which is checked when they
are filled back in, so a checkpoint never silently runs on other weights than it was trained on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from sesame.tasks.finetune import plain_state_dict

#: The run-folder entry holding the encoder's config, tokenizer and (frozen runs) weights.
ENCODER_FOLDER = "encoder"
#: The checkpoint key recording the frozen encoder weights left out of its state dict.
FROZEN_KEY = "sesame_frozen_encoder"


def weights_digest(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over names, dtypes, shapes and bytes of ``named`` tensors, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(named, key=lambda item: item[0]):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def save_encoder_folder(model: nn.Module, tokenizer: PreTrainedTokenizerBase, folder: str | Path,
                        with_weights: bool) -> Path:
    """Write the encoder's config and tokenizer into ``folder`` (and its weights when ``with_weights``).

    ``model`` is the Hugging Face model (``Encoder.model``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if with_weights:  # as the plain pretrained model (finetune=lora injects adapters into it)
        model.save_pretrained(folder, state_dict=plain_state_dict(model))
    else:
        model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def encoder_folder_of(checkpoint_path: str | Path) -> Path | None:
    """The ``encoder/`` folder of the run a checkpoint belongs to (``<run>/checkpoints/x.ckpt``), if any."""
    folder = Path(checkpoint_path).resolve().parent.parent / ENCODER_FOLDER
    return folder if (folder / "config.json").is_file() else None


def has_weights(folder: str | Path) -> bool:
    folder = Path(folder)
    return any((folder / name).is_file() for name in ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json"))
