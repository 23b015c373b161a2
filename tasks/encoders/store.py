"""The encoder folder of a run: what makes a run folder usable with nothing else present.

``<run>/encoder/`` holds the encoder's ``config.json`` and its tokenizer files, always; and, when the
run does not train every encoder weight (``finetune.mode`` frozen, top_k, bitfit or lora), the
pretrained weights once (``model.safetensors``). Those frozen weights are then left out of every checkpoint: a
checkpoint records only their names and a sha256 digest of their values, which is checked when they
are filled back in, so a checkpoint never silently runs on other weights than it was trained on.

The jobs of a sweep (``sesame-train --multirun``) mostly store the same pretrained weights: there they
are written once per sweep, content-addressed (``<sweep>/.encoders/<sha256 of the weight files>/``), and
each job's ``encoder/`` holds hard links to them (a copy where the file system has none). A hard link
is an ordinary file: ``cp -r`` / ``rsync -a`` of one job folder copies the weights themselves, so the
copy stands alone; and every load still checks the checkpoint's digest of the values it fills in.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from sesame.tasks.core.shared_writes import (discard_folder, publish_folder, remove_dead_writers_leftovers,
                                             staging_folder)
from sesame.tasks.encoders.finetune import plain_state_dict

log = logging.getLogger(__name__)

#: The run-folder entry holding the encoder's config, tokenizer and (frozen runs) weights.
ENCODER_FOLDER = "encoder"
#: The folder of a sweep holding each distinct set of frozen encoder weights once, by digest.
SHARED_ENCODERS = ".encoders"
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
                        with_weights: bool, shared: str | Path | None = None) -> Path:
    """Write the encoder's config and tokenizer into ``folder`` (and its weights when ``with_weights``:
    hard-linked from the content-addressed store ``shared`` when given, see :func:`store_weights`).

    ``model`` is the Hugging Face model (``Encoder.model``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if with_weights and shared is not None:
        model.config.save_pretrained(folder)
        entry = store_weights(model, Path(shared))
        for source in sorted(entry.iterdir()):
            link_or_copy(source, folder / source.name)
    elif with_weights:  # as the plain pretrained model (finetune=lora injects adapters into it)
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


def store_weights(model: nn.Module, store: Path) -> Path:
    """``<store>/<sha256>/``: the weight files ``save_pretrained`` writes for ``model``, named by the sha256
    of their names and bytes; written once. Jobs of a sweep write it at once (``tasks/core/shared_writes.py``):
    each stages under a name holding its pid and renames into place, the first copy wins, and staging
    folders of killed jobs are removed by the next. An entry whose files no longer hash to its name (a
    damaged disk) is named in a warning and replaced by this job's copy."""
    remove_dead_writers_leftovers(store)
    staging = staging_folder(store, "weights")
    try:
        model.save_pretrained(staging, state_dict=plain_state_dict(model))
        (staging / "config.json").unlink()  # each job keeps its own config; the store holds weights only
        entry = store / folder_digest(staging)
        if entry.is_dir() and folder_digest(entry) != entry.name:
            log.warning("encoder store entry %s is damaged (its files no longer hash to its name); replacing it", entry)
            discard_folder(entry)
        if not entry.is_dir():
            publish_folder(staging, entry)  # False: a concurrent job's identical copy came first
        return entry
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def folder_digest(folder: Path) -> str:
    """sha256 over the names and bytes of the files of ``folder``, in name order."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (no second copy on disk); a copy where the two are on
    different file systems or hard links are not supported."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # the run folder's own writer: removed if it is killed
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copy2(source, tmp)
    os.replace(tmp, target)  # atomic: a resumed job's earlier link or copy is replaced whole
