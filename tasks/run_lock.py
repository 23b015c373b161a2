"""One run per run folder: a second run started into a folder that a live run is writing refuses,
instead of mixing one run's config with the other's checkpoints and predictions."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sesame.tasks.distributed import is_main_process
from sesame.tasks.errors import ConfigError

LOCK_NAME = ".sesame.lock"
T = TypeVar("T")


def _holder_alive(holder: dict) -> bool:
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, so assume it runs
    try:
        os.kill(int(holder.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def holds_run_folder(run: Callable[..., T]) -> Callable[..., T]:
    """``run(cfg, run_dir, **kwargs)`` with ``run_dir`` created and held (:func:`run_folder_lock`) while it runs."""

    @functools.wraps(run)
    def held(cfg: Any, run_dir: str | Path, **kwargs: Any) -> T:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_folder_lock(run_dir):
            return run(cfg, run_dir, **kwargs)

    return held


@contextlib.contextmanager
def run_folder_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``<run_dir>/.sesame.lock`` while the run writes there. A lock left by a process that no
    longer exists (a killed run, about to be resumed) is taken over."""
    if not is_main_process():  # rank 0 holds the lock for all ranks
        yield
        return
    path = Path(run_dir) / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text() or "{}")
            except (OSError, ValueError):
                holder = {}
            if holder and _holder_alive(holder):
                raise ConfigError(
                    f"{run_dir} is in use by another run (pid {holder.get('pid')} on {holder.get('host')}). "
                    f"Fix: give this run its own folder (hydra.run.dir=...), or wait for that run to end; if it is "
                    f"dead (killed on another machine), delete {path}"
                ) from None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as handle:
            json.dump(me, handle)
        break
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
