"""One run per run folder: a second run started into a folder that a live run is writing refuses,
instead of mixing one run's config with the other's checkpoints and predictions; a run started into
a folder that already holds a run (finished, or killed with a checkpoint) refuses unless told to
``resume`` or ``overwrite`` it. A refused run writes nothing there: Hydra's record of the job
(``.hydra/``, written by Hydra before any code of sesame's runs where ``hydra.output_subdir`` is set) is
written here, once the folder is held (:func:`write_hydra_record`). What ``resume`` points at is
:func:`resolve_resume`."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.atomic_files import remove_stale_temporaries, write_text_atomic
from sesame.tasks.core.distributed import is_main_process
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.saved.checkpoint_files import holds_resume_state
from sesame.tasks.saved.checkpoints import find_checkpoint
from sesame.tasks.runs.failed_start import HYDRA_RECORD

LOCK_NAME = ".sesame.lock"
#: What an earlier run leaves in its folder: a finished one its metrics, a killed one its checkpoints. Any of them marks
#: the folder as a run's, with or without its config.yaml (a copied or half-cleaned folder).
EARLIER_RUN = ("metrics.json", "checkpoints/last.ckpt", "checkpoints/best.ckpt")
T = TypeVar("T")
log = logging.getLogger(__name__)


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
    """``run(settings, run_dir, **kwargs)`` with ``run_dir`` created and held (:func:`run_folder_lock`) while
    it runs, after :func:`refuse_earlier_run` and with Hydra's record of the job written."""

    @functools.wraps(run)
    def held(settings: RunSettings, run_dir: str | Path, **kwargs: Any) -> T:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        with run_folder_lock(run_dir):
            if is_main_process():
                refuse_earlier_run(settings, run_dir)
                for stale in remove_stale_temporaries(run_dir):  # the folder is held: no writer of ours is alive
                    log.warning("removed %s, a file a killed run left half-written", stale)
                write_hydra_record(settings.config, run_dir)
            return run(settings, run_dir, **kwargs)

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


def resume_asked(resume: Any) -> bool:
    """Whether a ``resume`` setting asks to continue a run (``true``, a folder or a file; not null/false/"")."""
    return resume not in (None, False, "", "false", "False")


def resolve_resume(resume: Any, run_dir: Path) -> str | None:
    """``resume=true`` -> this run folder's last checkpoint; a folder -> its last checkpoint; a file -> it."""
    if not resume_asked(resume):
        return None
    this_run = resumes_this_run(resume)
    folder = run_dir if this_run else Path(str(resume))
    if this_run and (run_dir / "config.yaml").is_file() and not (run_dir / "checkpoints" / "last.ckpt").is_file():
        # A run here was killed before its first checkpoint: it has nothing to lose, so start it over.
        log.warning("resume=true: %s has no checkpoint yet; starting the run from the beginning", run_dir)
        return None
    try:
        found = find_checkpoint(folder, names=("last.ckpt",), key="resume")
    except MissingFileError:
        raise MissingFileError(
            f"resume={resume!r}: no checkpoint at {folder / 'checkpoints' / 'last.ckpt'}. Pass a run folder that holds "
            "checkpoints/last.ckpt, a .ckpt file, or run in that folder with hydra.run.dir=<run folder> resume=true"
        ) from None
    if not holds_resume_state(found):
        raise ConfigError(
            f"resume={resume!r}: {found} holds the model's weights only (best.ckpt keeps no optimiser or training-loop "
            f"state), so no run can continue from it. Fix: resume from the run's checkpoints/last.ckpt, or start a new "
            f"run from these weights with init_from={found}"
        )
    return str(found)


def resumes_this_run(resume: Any) -> bool:
    """Whether ``resume`` is ``true`` (continue the run in this folder), not a folder or a checkpoint file."""
    return resume is True or str(resume).lower() == "true"


def sweep_job_start(resume: Any, run_dir: Path) -> str:
    """How a ``--multirun`` job with ``resume=true`` starts, so rerunning a sweep into its folder finishes it:
    ``"finished"`` (its ``metrics.json`` is there: skip it), ``"resume"`` (a run there left a checkpoint or its
    config: :func:`resolve_resume` continues it, or restarts one killed before its first checkpoint) or
    ``"fresh"`` (the job never started, or ``resume`` is not ``true``: train it as set)."""
    if not resumes_this_run(resume):
        return "fresh"
    if (run_dir / "metrics.json").is_file():
        return "finished"
    if (run_dir / "config.yaml").is_file() or any((run_dir / name).is_file() for name in EARLIER_RUN):
        return "resume"
    return "fresh"


def refuse_earlier_run(settings: RunSettings, run_dir: Path) -> None:
    """A folder holding another run's results is not written over by accident: ``resume`` continues that
    run, ``overwrite=true`` replaces it (its results are deleted first, so none of them survives beside the
    new run's), and anything else is refused before anything is written."""
    found = [name for name in EARLIER_RUN if (run_dir / name).is_file()]
    if not found or resume_asked(settings.resume):
        return
    if not settings.overwrite:
        raise ConfigError(
            f"{run_dir} already holds a run ({', '.join(found)}); it is left as it is. Fix: resume=true to continue "
            "it, a new folder (hydra.run.dir=...), or overwrite=true to replace it"
        )
    for name in found:
        (run_dir / name).unlink()


def write_hydra_record(config: dict[str, Any], run_dir: Path) -> None:
    """``<run>/.hydra/{config,hydra,overrides}.yaml`` as Hydra writes them (the job's config, here resolved,
    Hydra's settings, the command-line overrides), when running under Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    folder = run_dir / HYDRA_RECORD
    write_text_atomic(folder / "config.yaml", OmegaConf.to_yaml(config))
    write_text_atomic(folder / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    write_text_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.overrides.task))
