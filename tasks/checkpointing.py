"""Checkpoints that are never half-written, and the callback that keeps them in the run folder."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from sesame.tasks.atomic_files import atomic_open


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over the target.

    Lightning writes the target file in place, so a process killed mid-write leaves a truncated
    ``last.ckpt``; a rename is atomic, so here the old checkpoint survives until the new one is whole.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        with atomic_open(path, "wb") as handle:
            torch.save(checkpoint, handle)


def checkpoint_callback(run_dir: Path, monitor: str | None, mode: str = "max") -> ModelCheckpoint:
    """``checkpoints/best.ckpt`` by the task's main metric and ``checkpoints/last.ckpt`` for resuming."""
    return ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best",
        monitor=monitor,
        mode=mode,
        save_last=True,
        save_top_k=1,
        enable_version_counter=False,
    )


def resolve_resume(resume: Any, run_dir: Path) -> str | None:
    """``resume=true`` -> this run folder's last checkpoint; a folder -> its last checkpoint; a file -> it."""
    if resume in (None, False, "", "false", "False"):
        return None
    if resume is True or str(resume).lower() == "true":
        candidate = run_dir / "checkpoints" / "last.ckpt"
    else:
        candidate = Path(str(resume))
        if candidate.is_dir():
            candidate = candidate / "checkpoints" / "last.ckpt"
    if not candidate.is_file():
        raise FileNotFoundError(
            f"resume={resume!r}: no checkpoint at {candidate}. Pass a run folder that holds checkpoints/last.ckpt, "
            "a .ckpt file, or run in that folder with hydra.run.dir=<run folder> resume=true"
        )
    return str(candidate)


class TrainingResumeCallback(Callback):
    """Makes a run resumed from a mid-epoch checkpoint continue exactly where it stopped.

    Saves the global RNG states with each checkpoint and restores them before the first resumed
    batch (dropout masks match), and tells the datamodule how many batches of the epoch were done,
    so its resumable sampler skips them (see ``sesame.tasks.batching.make_loader``).
    """

    def __init__(self) -> None:
        self._rng_to_restore: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Plain types and tensors only: Lightning loads checkpoints with weights_only=True.
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        checkpoint["sesame_rng"] = {
            "torch": torch.random.get_rng_state(),
            "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
            "python": random.getstate(),
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get("sesame_rng")
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
        done = int(progress.get("current", {}).get("completed", 0))
        datamodule = trainer.datamodule
        if datamodule is not None and done and not progress.get("is_last_batch", False):
            datamodule.resume_at = (int(checkpoint["epoch"]), done)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self._rng_to_restore is not None:
            torch.random.set_rng_state(self._rng_to_restore["torch"])
            kind, keys, pos, has_gauss, cached = self._rng_to_restore["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
            random.setstate(self._rng_to_restore["python"])
            self._rng_to_restore = None


def periodic_checkpoint_callback(run_dir: Path, every_n_train_steps: int) -> ModelCheckpoint:
    """``checkpoints/last.ckpt`` every N optimiser steps, so a killed run loses at most N steps."""
    return ModelCheckpoint(
        dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=every_n_train_steps,
        enable_version_counter=False,
    )
