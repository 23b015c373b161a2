"""A command that fails before its run starts leaves no folder behind.

Hydra makes a job's folder before the job's code runs; a command refused there (bad settings, missing data,
a rerun refused) takes it away again. Plain Python (no torch), so a console script can wrap its whole
start, the reading of its settings included, and a config error still prints at once.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

from sesame.tasks.core.distributed import is_main_process

HYDRA_RECORD = ".hydra"
log = logging.getLogger(__name__)


def holds_nothing_of_a_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds only what Hydra puts in a job's folder before any code of sesame's writes there: its
    job log (``<command>.log``) and its ``.hydra/`` record; nothing of a run (config, metrics, checkpoints, a lock)."""
    return run_dir.is_dir() and all((entry.is_file() and entry.suffix == ".log") or entry.name == HYDRA_RECORD
                                    for entry in run_dir.iterdir())


@contextlib.contextmanager
def no_folder_left_by_a_failed_start(run_dir: str | Path) -> Iterator[None]:
    """A command that fails before it writes anything of its own into the folder Hydra made for it (bad settings,
    missing data, a refused rerun into a new folder) takes that folder away again, so failed commands leave no
    empty ``outputs/<task>/<time>/`` behind. A folder holding anything of a run is left as it is."""
    try:
        yield
    except BaseException:
        folder = Path(run_dir)
        if is_main_process() and holds_nothing_of_a_run(folder):
            shutil.rmtree(folder, ignore_errors=True)
            log.info("removed %s: the command failed before writing anything there", folder)
        raise
