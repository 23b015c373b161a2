"""Checkpoints that are never half-written, and the callback that keeps them in the run folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over the target.

    Lightning writes the target file in place, so a process killed mid-write leaves a truncated
    ``last.ckpt``; a rename is atomic, so here the old checkpoint survives until the new one is whole.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


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
