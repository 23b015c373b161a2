"""``--multirun`` with ``trainer.strategy=ddp``: the other ranks follow the sweep without writing over it.

Lightning starts DDP ranks > 0 as copies of the command line, ``--multirun`` and all, so each rank runs
the same sweep in lockstep with rank 0 (it must: rank 0 starts them once and every later job pairs
with them). Left alone, a rank's copy of the sweep makes its own sweep folder (another timestamp:
another run folder, so the ranks disagree on checkpoint paths) or writes over rank 0's
``multirun.yaml``. Here rank 0 tells its ranks its sweep folder; each rank keeps its sweep bookkeeping
in ``<sweep>/.ddp_rank_<r>/`` and runs each job in rank 0's job folder (``<sweep>/<job number>``),
where only rank 0 writes (config, checkpoints, metrics, predictions).
"""

from __future__ import annotations

import os
import sys

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from sesame.tasks.core.distributed import is_main_process

SWEEP_DIR_ENV = "SESAME_DDP_SWEEP_DIR"


def share_sweep_dir() -> None:
    """In a sweep job on rank 0: tell the DDP ranks it will start where the sweep lives."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and is_main_process():
        os.environ[SWEEP_DIR_ENV] = os.path.abspath(str(hydra_cfg.sweep.dir))


def follow_rank_zero_sweep(argv: list[str]) -> list[str]:
    """The command line of a DDP rank > 0 started from a sweep: rank 0's sweep and job folders."""
    sweep = os.environ.get(SWEEP_DIR_ENV)
    if is_main_process() or not sweep or not {"--multirun", "-m"} & set(argv[1:]):
        return argv
    rank = os.environ.get("LOCAL_RANK", "0")
    return [*argv, f'hydra.sweep.dir="{sweep}/.ddp_rank_{rank}"', "hydra.sweep.subdir=../${hydra.job.num}"]


def adjust_argv() -> None:
    sys.argv = follow_rank_zero_sweep(sys.argv)
