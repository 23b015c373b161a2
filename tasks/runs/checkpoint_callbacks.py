"""Training-time checkpoints: written atomically into ``<run>/checkpoints/``, periodically when
``checkpoint.every_n_train_steps`` is set, with the RNG and sampler state an exact resume needs.

Finding, reading and rebuilding a trained model from these files is ``tasks/saved/checkpoints.py``."""

from __future__ import annotations

import contextlib
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from sesame.tasks.core.atomic_files import torch_save_atomic
from sesame.tasks.saved.checkpoint_files import load_checkpoint_file
from sesame.tasks.core.distributed import gather_objects
from sesame.tasks.core.errors import RunStopped


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file in the same folder, fsync, then rename over the target; read
    back as data only, whatever ``weights_only`` Lightning passes (``tasks/saved/checkpoint_files.py``).

    Lightning writes the target file in place, so a process killed mid-write leaves a truncated
    ``last.ckpt``; a rename is atomic, so here the old checkpoint survives until the new one is whole.
    """

    def load_checkpoint(self, path: str | os.PathLike, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return load_checkpoint_file(path, map_location=map_location or "cpu")

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        torch_save_atomic(checkpoint, path)


class BestAndLastCheckpoint(ModelCheckpoint):
    """``best.ckpt`` by the monitored metric, and ``last.ckpt`` after every validation.

    Since Lightning 2.6, ``save_last=True`` rewrites ``last.ckpt`` only at a validation that also
    writes a top-k checkpoint: after a validation that did not improve, ``last.ckpt`` would stay at
    the last improvement and a killed run would redo every epoch since.

    Only ``last.ckpt`` (what ``resume`` reads) keeps the optimiser, scheduler, loop and callback state:
    ``best.ckpt`` is read for its weights only (evaluation, prediction, export), and AdamW's two moments
    would triple its size.
    """

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        if Path(filepath).name == self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION:
            super()._save_checkpoint(trainer, filepath)
            return
        weights_only, self.save_weights_only = self.save_weights_only, True
        try:
            super()._save_checkpoint(trainer, filepath)
        finally:
            self.save_weights_only = weights_only

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_not_saved(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_not_saved(trainer)

    def _save_last_if_not_saved(self, trainer: L.Trainer) -> None:
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def checkpoint_callback(run_dir: Path, monitor: str | None, mode: str = "max") -> ModelCheckpoint:
    """``checkpoints/best.ckpt`` by the task's main metric and ``checkpoints/last.ckpt`` for resuming."""
    return BestAndLastCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best",
        monitor=monitor,
        mode=mode,
        save_last=True,
        save_top_k=1,
        enable_version_counter=False,
    )


class TrainingResumeCallback(Callback):
    """Makes a run resumed from a mid-epoch checkpoint continue exactly where it stopped.

    Saves the global RNG states with each checkpoint and restores them before the first resumed
    batch (dropout masks match), and tells the datamodule how many batches of the epoch were done,
    so its resumable sampler skips them (see ``tasks/inputs/batching.py`` ``make_loader``).
    """

    def __init__(self) -> None:
        self._rng_to_restore: dict[str, Any] | None = None

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Plain types and tensors only: Lightning loads checkpoints with weights_only=True.
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {
            "torch": torch.random.get_rng_state(),
            "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
            "python": random.getstate(),
        }
        # Every rank builds the checkpoint (rank 0 writes it). Under DDP the ranks' streams part ways
        # (dropout over batches of other lengths draws other amounts): each rank's state is kept.
        states = gather_objects(state)
        checkpoint["sesame_rng"] = states[0]
        if len(states) > 1:
            checkpoint["sesame_rng_per_rank"] = states

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        per_rank = checkpoint.get("sesame_rng_per_rank")
        same_ranks = per_rank is not None and len(per_rank) == trainer.world_size
        self._rng_to_restore = per_rank[trainer.global_rank] if same_ranks else checkpoint.get("sesame_rng")
        progress = checkpoint.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
        # Batches whose training step ran: a checkpoint written in on_train_batch_end (the periodic
        # one) has processed that batch but not yet counted it completed; Lightning counts it done.
        # Under DDP every rank ran as many batches, each its slice of one global batch: the sampler
        # skips that many global batches (tasks/inputs/batching.py).
        done = int(progress.get("current", {}).get("processed", 0))
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


class PeriodicCheckpoint(ModelCheckpoint):
    """``checkpoints/last.ckpt`` every N optimiser steps, so a killed run loses at most N steps.

    Not after an epoch's last batch: Lightning resumes such a checkpoint in the next epoch and skips
    the validation that was due (the run would pick its best checkpoint from other evaluations). The
    end of an epoch is saved after its validation instead, by the main checkpoint callback.
    """

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any) -> None:
        if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return
        super().on_train_batch_end(trainer, pl_module, *args, **kwargs)


def periodic_checkpoint_callback(run_dir: Path, every_n_train_steps: int) -> ModelCheckpoint:
    """A :class:`PeriodicCheckpoint` writing ``checkpoints/last.ckpt`` every ``every_n_train_steps`` steps."""
    return PeriodicCheckpoint(
        dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=every_n_train_steps,
        enable_version_counter=False,
    )


def _stopped(run_dir: Path, saved_at: str) -> RunStopped:
    return RunStopped(
        f"SIGTERM received: the run in {run_dir} ended {saved_at}. Its metrics are not written yet. Continue it with "
        f"the same command plus hydra.run.dir={run_dir} resume=true",
        signal.SIGTERM,
    )


class StopOnSigterm(Callback):
    """SIGTERM (what a scheduler sends before it kills a job) ends the run at the next optimiser step
    with ``checkpoints/last.ckpt`` saved there, so ``resume=true`` continues exactly.

    Lightning's own handler records the signal (``trainer.received_sigterm``) but lets training run to
    the next validation and then exits with code 0. Not after an epoch's last batch (as
    :class:`PeriodicCheckpoint`): the epoch's validation comes first, and Lightning stops in it or after
    it; :func:`sigterm_stops_the_run` turns that stop into :class:`RunStopped` too.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        stepped = (batch_idx + 1) % trainer.accumulate_grad_batches == 0  # no accumulated gradient is lost
        if not stepped or trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
            return
        # Every DDP rank stops at the same step (any rank may have got the signal first).
        if trainer.strategy.reduce_boolean_decision(trainer.received_sigterm, all=False):
            # the full state (weights_only=False): resume needs it; said, so Lightning does not log its default
            trainer.save_checkpoint(self.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
            raise _stopped(self.run_dir, f"after step {trainer.global_step}, saved in checkpoints/last.ckpt")


@contextlib.contextmanager
def sigterm_stops_the_run(run_dir: Path) -> Iterator[None]:
    """Lightning's exit-0 ``SIGTERMException`` (raised in a validation or at an epoch's end) as :class:`RunStopped`."""
    try:
        yield
    except SIGTERMException:
        raise _stopped(run_dir, "during evaluation; checkpoints/last.ckpt holds its last checkpoint") from None
