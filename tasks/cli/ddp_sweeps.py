"""The command line of a DDP rank > 0: its own log file, and in a ``--multirun`` rank 0's sweep without writing over it.

Lightning starts DDP ranks > 0 on a node as copies of the command line, ``--multirun`` and all; torchrun, SLURM
and the command typed on each node of a multi-node run start them the same way. So each rank runs the same
sweep in lockstep with rank 0 (it must: every job pairs the same processes). Left alone, a rank's copy of the
sweep makes its own sweep folder (another timestamp: another run folder, so the ranks disagree on checkpoint
paths) or writes over rank 0's ``multirun.yaml``, and a rank on another node logs into rank 0's
``<job name>.log`` (Lightning renames only the copies it starts, by their local rank, the same on every node).
Here each rank > 0 logs into ``train_ddp_process_<rank>.log``, keeps its sweep bookkeeping in
``<sweep>/.ddp_rank_<rank>/`` and runs each job in rank 0's job folder (``<sweep>/<job number>``), where only
rank 0 writes (config, checkpoints, metrics, predictions). The sweep folder is the one rank 0 tells the ranks it
starts, or else (ranks started by another launcher, or on another node) the command line's ``hydra.sweep.dir``,
which must then be given, the same on every node, as ``hydra.run.dir`` must for a single run
(``tasks/runs/shared_run_folder.py`` checks it).
"""

from __future__ import annotations

import os
import sys

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from sesame.tasks.core.distributed import is_main_process, process_rank_name

SWEEP_DIR_ENV = "SESAME_DDP_SWEEP_DIR"
SWEEP_DIR_KEY = "hydra.sweep.dir="


def share_sweep_dir() -> None:
    """In a sweep job on rank 0: tell the DDP ranks it will start where the sweep lives."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN and is_main_process():
        os.environ[SWEEP_DIR_ENV] = os.path.abspath(str(hydra_cfg.sweep.dir))


def follow_rank_zero_sweep(argv: list[str]) -> list[str]:
    """The command line of a DDP rank > 0: its own job log, and in a sweep rank 0's sweep and job folders."""
    if is_main_process():
        return argv
    rank = process_rank_name()
    # appended last: it wins over the name Lightning gives the copies it starts (by local rank, on every node)
    extra = [f"hydra.job.name=train_ddp_process_{rank}"]
    if {"--multirun", "-m"} & set(argv[1:]):
        # the first hydra.sweep.dir is the user's; later ones are what this function appended in a parent rank
        given = next((a[len(SWEEP_DIR_KEY):] for a in argv[1:] if a.startswith(SWEEP_DIR_KEY)), None)
        sweep = os.environ.get(SWEEP_DIR_ENV) or (given.strip("\"'") if given else None)
        if sweep:
            extra += [f'hydra.sweep.dir="{sweep}/.ddp_rank_{rank}"', "hydra.sweep.subdir=../${hydra.job.num}"]
    return [*argv, *extra]


def adjust_argv() -> None:
    sys.argv = follow_rank_zero_sweep(sys.argv)
