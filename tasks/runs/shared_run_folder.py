"""Every process of a run writes and reads one run folder: rank 0 writes it, and every rank reads the
checkpoints rank 0 saved (the best one evaluated after training, ``last.ckpt`` on resume). Processes on
several nodes must therefore be given the same ``hydra.run.dir`` (the default one holds the start time,
which differs between nodes started a second apart) on a file system every node sees. A run that breaks
this is refused when its processes first meet, on every rank alike, instead of failing on the other nodes
when they first read a checkpoint."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import lightning as L

from sesame.tasks.core.distributed import gather_objects
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.run_lock import LOCK_NAME

#: How long a rank looks for rank 0's lock file before calling the folder unshared: a network file system
#: may show a new file to other machines a few seconds late.
VISIBLE_WITHIN_S = 10.0


def _lock_seen(run_dir: Path, wait_s: float) -> dict | None:
    """The run folder's lock holder as this process sees it (None: no lock file there)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return json.loads((run_dir / LOCK_NAME).read_text() or "{}")
        except (OSError, ValueError):
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.5)


class SharedRunFolder(L.Callback):
    """At setup, with every rank's process group up: each rank reads the run folder's lock (rank 0 holds it,
    ``tasks/runs/run_lock.py``); all ranks refuse the run unless every one sees rank 0's."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size == 1:
            return
        seen: dict[str, Any] = {"host": socket.gethostname(), "dir": str(self.run_dir.resolve()),
                                "lock": _lock_seen(self.run_dir, VISIBLE_WITHIN_S if trainer.global_rank else 0)}
        ranks = gather_objects(seen)
        holder = ranks[0]["lock"]
        apart = [f"rank {r} ({s['host']}: {s['dir']})" for r, s in enumerate(ranks) if not holder or s["lock"] != holder]
        if apart:
            raise ConfigError(
                f"the run's processes do not share one run folder: rank 0 writes {ranks[0]['dir']} on {ranks[0]['host']}, "
                f"which {', '.join(apart)} cannot see. Fix: give every node the same hydra.run.dir=<folder> (or, in a "
                "sweep, hydra.sweep.dir) on a file system that every node mounts at that path")
