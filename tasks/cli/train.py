"""``sesame-train``: compose the Hydra config, fit, evaluate, write the run folder.

    sesame-train                                   # the default: MiniLM-L6 fine-tuned on an SST-2 slice
    sesame-train finetune=frozen pooling=mean      # any group or key can be overridden
    sesame-train --multirun fusion=last,second_to_last
    sesame-train --help                            # every group and its options
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from sesame.tasks.cli.ddp_sweeps import adjust_argv, share_sweep_dir
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.cli.optuna_sweep import register_sweeper
from sesame.tasks.cli.ray_sweep import register_launcher
from sesame.tasks.core.distributed import is_main_process
from sesame.tasks.cli.resolvers import register_resolvers
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.failed_start import no_folder_left_by_a_failed_start

register_resolvers()


@hydra.main(version_base="1.3", config_path="pkg://sesame.conf", config_name="config")
def _main(cfg: DictConfig) -> float | None:
    run_dir = HydraConfig.get().runtime.output_dir
    share_sweep_dir()
    hydra_cfg = HydraConfig.get()
    sweep = hydra_cfg.mode == RunMode.MULTIRUN
    # a sweep job's folder stays, failed or not: the sweep's report lists every job
    cleanup = no_folder_left_by_a_failed_start(run_dir) if not sweep else contextlib.nullcontext()
    with user_errors_are_messages(), cleanup:
        # The settings are read once, here, and passed down; a bad one is reported before torch is imported.
        settings = RunSettings.from_config(cfg)
        # Imported now, not at the top: torch, Lightning and transformers take seconds to import, and
        # --help, --cfg job and a bad setting never need them.
        from sesame.tasks.core.known_noise import library_progress_bars_off, lightning_lines_once
        from sesame.tasks.encoders.store import SHARED_ENCODERS
        from sesame.tasks.runs.runner import train

        from sesame.tasks.runs.run_lock import resumes_this_run, sweep_job_start

        lightning_lines_once()
        library_progress_bars_off()
        # A sweep's jobs store their frozen encoder weights once, in <sweep>/.encoders (tasks/encoders/store.py).
        shared = Path(hydra_cfg.sweep.dir) / SHARED_ENCODERS if sweep else None
        if sweep and resumes_this_run(settings.resume):
            # A sweep rerun into its folder with resume=true finishes it: finished jobs are skipped, the others resume.
            start = sweep_job_start(settings.resume, Path(run_dir))
            if start == "finished":
                print(f"job {hydra_cfg.job.num}: finished before ({Path(run_dir) / 'metrics.json'}); skipped")
                return finished_metrics(Path(run_dir)).get(settings.task.main_metric)
            if start == "fresh":
                settings = settings.updated({"resume": None})  # resume=true for a job that never started: it starts
        metrics = train(settings, run_dir, shared_encoders=shared)
    if is_main_process():
        print(f"run folder: {run_dir}")
    # The main metric is the job's return value: what Hydra's Optuna sweeper maximises.
    return metrics.get(settings.task.main_metric)


def finished_metrics(run_dir: Path) -> dict:
    """A finished job's ``metrics.json`` (empty if it cannot be read: the job's return value is then None)."""
    import json

    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def main() -> None:
    adjust_argv()  # a DDP rank > 0 of a sweep job follows rank 0's sweep (tasks/cli/ddp_sweeps.py)
    register_launcher()  # hydra/launcher=ray (tasks/cli/ray_sweep.py)
    register_sweeper()  # hydra/sweeper=pruning_optuna (tasks/cli/optuna_sweep.py)
    _main()


if __name__ == "__main__":
    main()
