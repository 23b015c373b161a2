"""``hydra/launcher=ray``: the jobs of a ``sesame-train --multirun`` as Ray tasks, on a local Ray or a Ray cluster.

The launcher class Hydra instantiates is ``hydra_plugins/sesame_ray_launcher/ray_launcher.py`` (Hydra takes
launchers only from the ``hydra_plugins`` package); everything it does is here. Each job is one Ray task
(``conf/hydra/launcher/ray.yaml``: ``num_cpus`` / ``num_gpus`` per job, torch threads, ``max_retries``), run by
Hydra's own ``run_job`` in the job's folder ``<sweep>/<job number>``, so its run folder and the sweep summary
are where the basic launcher writes them. Every node must see the sweep folder and the data at the same
paths (a shared file system).

Faults: a job whose worker or node dies is retried by Ray (``max_retries``) on a node that is left; the
retry resumes the job from its ``checkpoints/last.ckpt`` (started over where it has none). A job that still
does not finish (retries spent, or its own error) is listed when the sweep ends, with the one command that
finishes the sweep (``resume=true hydra.sweep.dir=<sweep>``: finished jobs are skipped), and the sweep
exits 1; the sweep summary lists it as missing.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from sesame.tasks.core.atomic_files import write_json_atomic
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings

log = logging.getLogger(__name__)

#: Each job's record of where it ran: one entry per attempt (the sweep launch, Ray's node id, host, pid).
ATTEMPTS_FILE = "ray_attempts.json"
#: Environment variables a job on another node gets from the sweep's command (offline switches, data and
#: cache folders); OMP_NUM_THREADS is left out: a job's threads are its ``torch_threads``.
FORWARDED_ENV = ("SESAME_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "MPLBACKEND")


@dataclass(frozen=True)
class RaySettings(Settings):
    """``hydra.launcher`` of ``conf/hydra/launcher/ray.yaml`` (its defaults are there)."""

    group = "hydra.launcher"
    address: str | None  # None: a Ray started for this sweep on this machine; "auto", "host:port", "ray://..."
    num_cpus: float  # per job
    num_gpus: float  # per job
    torch_threads: float  # per job: torch.set_num_threads (a fractional CPU still runs one thread)
    max_retries: int  # per job, for a worker or node that died (not for the job's own errors)
    local_object_store_mb: int  # object store of a Ray started for this sweep (jobs pass only their configs)

    def __post_init__(self) -> None:
        if self.num_cpus <= 0 or self.torch_threads <= 0 or self.max_retries < 0 or self.num_gpus < 0:
            raise ConfigError(f"hydra.launcher (ray): num_cpus > 0, num_gpus >= 0, torch_threads > 0 and max_retries "
                              f">= 0 are needed; got num_cpus={self.num_cpus}, num_gpus={self.num_gpus}, "
                              f"torch_threads={self.torch_threads}, max_retries={self.max_retries}")

    @property
    def threads(self) -> int:
        return max(1, int(self.torch_threads))


def register_launcher() -> None:
    """Make ``hydra/launcher=ray`` instantiable where Hydra's plugin scan cannot see the launcher's package (an
    editable install of sesame maps ``hydra_plugins.sesame_ray_launcher`` by an import hook, which the scan does
    not list). Cheap: no Ray import; Hydra scans its plugins at every start anyway."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.sesame_ray_launcher.ray_launcher import RayLauncher

    Plugins.instance().register(RayLauncher)


def import_ray() -> Any:
    # Ray folds lines that several workers print alike into one ("[repeated 2x across cluster]"): each job's own
    # lines (its metrics, a skipped job's note) are shown as printed, unless the user set it.
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        import ray
    except ImportError:
        raise ConfigError("hydra/launcher=ray needs Ray: pip install 'sesame[ray]'") from None
    return ray


def _reachable(address: str, timeout: float = 5.0) -> str | None:
    """Why ``host:port`` (an optional ``ray://`` in front) takes no connection, or None when it does."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return "not a host:port address"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except OSError as err:
        return err.strerror or type(err).__name__


def connect(ray: Any, settings: RaySettings) -> bool:
    """Join the cluster at ``settings.address`` (or start a Ray on this machine); True when this call did so, so
    the caller ends the connection. A cluster that is not there is a ``ConfigError`` naming the address."""
    if ray.is_initialized():
        return False
    fix = ("Fix: start the cluster (ray start --head) and pass its address as hydra.launcher.address=<host>:<port>, "
           "or hydra.launcher.address=null for a Ray on this machine")
    if settings.address not in (None, "auto", "local"):
        why = _reachable(settings.address)
        if why is not None:
            raise ConfigError(f"hydra.launcher.address={settings.address}: no Ray cluster reachable there ({why}). {fix}")
    try:
        if settings.address in (None, "local"):
            ray.init(object_store_memory=settings.local_object_store_mb * 2**20, include_dashboard=False,
                     log_to_driver=True)
        else:
            ray.init(address=settings.address, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as err:
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        raise ConfigError(f"hydra.launcher.address={settings.address}: could not join a Ray cluster ({reason}). {fix}") from None
    return True


def refuse_multi_process_job(sweep_config: DictConfig, number: int) -> None:
    """A Ray task is one process: Lightning's DDP starts its other ranks by running the command line again,
    which in a Ray worker is Ray's own, so a job asking for several processes is refused before any starts."""
    trainer = sweep_config.get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    several = (isinstance(devices, int) and devices > 1) or (isinstance(devices, (list, tuple)) and len(devices) > 1) \
        or str(devices) == "-1" or (isinstance(nodes, int) and nodes > 1) or "ddp" in str(trainer.get("strategy", ""))
    if several:
        raise ConfigError(f"job {number}: trainer.devices={devices}, trainer.num_nodes={nodes}, trainer.strategy="
                          f"{trainer.get('strategy')}: hydra/launcher=ray runs each job as one process, and DDP starts "
                          "its other processes from the command line. Fix: one device per job (trainer.devices=1), "
                          "or hydra/launcher=slurm for DDP jobs")


# --- in the Ray task ---------------------------------------------------------------------------------------


def _job_folder(sweep_config: DictConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(sweep_config)  # hydra.sweep.subdir reads hydra.job.num
    return Path(str(sweep_config.hydra.sweep.dir)) / str(OmegaConf.select(sweep_config, "hydra.sweep.subdir"))


def read_attempts(job_dir: Path) -> list[dict[str, Any]]:
    """The attempts recorded in ``<job>/ray_attempts.json`` (none when the file is missing or unreadable)."""
    import json

    try:
        return list(json.loads((job_dir / ATTEMPTS_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return []


def _drop_lock_of_a_lost_attempt(job_dir: Path, earlier: list[dict[str, Any]]) -> None:
    """The run-folder lock an earlier attempt of this job held when Ray lost it: Ray retries only once that
    attempt's worker or node is gone, so the lock is stale even where its host is another machine (which the
    lock cannot check itself)."""
    import json

    from sesame.tasks.runs.run_lock import LOCK_NAME

    lock = job_dir / LOCK_NAME
    try:
        holder = json.loads(lock.read_text() or "{}")
    except (OSError, ValueError):
        return
    if any(holder.get("host") == a.get("host") and holder.get("pid") == a.get("pid") for a in earlier):
        lock.unlink(missing_ok=True)
        log.warning("removed %s, held by the lost attempt (pid %s on %s)", lock, holder.get("pid"), holder.get("host"))


def run_sweep_job(hydra_context: Any, task_function: Any, sweep_config: DictConfig, singleton_state: Any,
                  launch: str, env: dict[str, str], torch_threads: int) -> Any:
    """One sweep job in a Ray worker: Hydra's ``run_job`` in the job's folder, after recording this attempt (node,
    host, pid) in ``<job>/ray_attempts.json``. A retry of a lost attempt of the same ``launch`` resumes the job
    (``resume=true``). Returns Hydra's ``JobReturn``; a job that ended by ``sys.exit`` (a user error: its one line
    is in the job's output) returns a failed one with that exit code."""
    import ray
    import torch
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals

    from sesame.tasks.runs.run_lock import resume_asked

    os.environ.update(env)
    Singleton.set_state(singleton_state)
    setup_globals()
    torch.set_num_threads(torch_threads)
    cwd = str(OmegaConf.select(sweep_config, "hydra.runtime.cwd") or "")
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)  # the sweep command's folder, where its relative paths point (each node must have it)
    job_dir = _job_folder(sweep_config)
    job_dir.mkdir(parents=True, exist_ok=True)
    attempts = read_attempts(job_dir)
    earlier = [a for a in attempts if a.get("launch") == launch]
    node = ray.get_runtime_context().get_node_id()
    attempts.append({"launch": launch, "attempt": len(earlier), "node_id": node, "host": socket.gethostname(),
                     "pid": os.getpid()})
    write_json_atomic(job_dir / ATTEMPTS_FILE, attempts)
    if earlier:
        _drop_lock_of_a_lost_attempt(job_dir, earlier)
        if not resume_asked(sweep_config.get("resume")):  # a resume the job was given stays as given
            with open_dict(sweep_config):
                sweep_config.resume = True  # continue from the lost attempt's last.ckpt (or start over without one)
        print(f"job {sweep_config.hydra.job.num}: attempt {len(earlier) + 1} on node {node}, resuming", file=sys.stderr)
    try:
        return run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    except SystemExit as stop:
        ret = JobReturn(overrides=list(sweep_config.hydra.overrides.task), working_dir=str(job_dir),
                        task_name=str(sweep_config.hydra.job.name))
        ret.status = JobStatus.FAILED
        ret._return_value = JobFailed(f"ended with exit code {stop.code} (its error is in its output above)")
        return ret


class JobFailed(Exception):
    """A sweep job that ended without finishing: why, in one line."""


# --- the sweep's driver ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    number: int
    overrides: list[str]  # those that tell the job apart
    ret: Any | None  # Hydra's JobReturn; None for a job Ray lost
    lost: str = ""  # why Ray gave the job up

    @property
    def failure(self) -> str | None:
        from hydra.core.utils import JobStatus

        if self.ret is None:
            return self.lost
        if self.ret.status == JobStatus.FAILED:
            err = self.ret._return_value
            return str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        return None


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Every job of ``job_overrides`` as a Ray task, at once; their ``JobReturn`` s in order once all have ended.
    A job that did not finish is listed with the command that finishes the sweep, and the sweep ends with
    exit code 1 (after the sweep's callbacks, its summary among them, have run)."""
    from hydra.core.utils import configure_log, setup_globals

    from sesame.tasks.cli.errors import user_errors_are_messages

    config, context = launcher.config, launcher.hydra_context
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    configs = [context.config_loader.load_sweep_config(config, list(overrides)) for overrides in job_overrides]
    with user_errors_are_messages():  # every setting is checked before a Ray starts or is joined
        settings = RaySettings.from_config(launcher.kwargs)
        for number, sweep_config in enumerate(configs, initial_job_idx):
            refuse_multi_process_job(sweep_config, number)
        ray = import_ray()
        started = connect(ray, settings)
    try:
        return run_on_ray(ray, launcher, settings, configs, job_overrides, initial_job_idx)
    finally:
        if started:
            ray.shutdown()


def run_on_ray(ray: Any, launcher: Any, settings: RaySettings, configs: list[DictConfig],
               job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """The jobs (``configs``, Hydra's composed config of each) submitted at once, then awaited in order."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import filter_overrides

    config, context = launcher.config, launcher.hydra_context
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    log.info("Ray launcher: %d jobs on %s, sweep folder %s", len(job_overrides), settings.address or "a local Ray",
             sweep_dir)
    job = ray.remote(run_sweep_job).options(num_cpus=settings.num_cpus, num_gpus=settings.num_gpus,
                                           max_retries=settings.max_retries)
    shared = {"context": ray.put(context), "state": ray.put(Singleton.get_state())}
    launch_id = uuid.uuid4().hex[:12]
    env = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    futures = []
    for (number, overrides), sweep_config in zip(enumerate(job_overrides, initial_job_idx), configs):
        log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"ray_{launch_id}_{number}"
            sweep_config.hydra.job.num = number
            sweep_config.hydra.sweep.dir = str(sweep_dir)  # the same folder whatever a node's working folder
        futures.append(job.remote(shared["context"], launcher.task_function, sweep_config, shared["state"],
                                  launch_id, env, settings.threads))
    # a job is named by what tells it apart from the others (seed=2), not by every override of the sweep
    shared = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    outcomes = []
    for (number, overrides), future in zip(enumerate(job_overrides, initial_job_idx), futures):
        label = [o for o in overrides if o not in shared]
        try:
            outcomes.append(Outcome(number, label, ray.get(future)))
        except ray.exceptions.RayError as err:
            reason = str(err).strip().splitlines()[0].split(". ")[0][:200] if str(err).strip() else ""
            outcomes.append(Outcome(number, label, None,
                                    f"lost by Ray after {settings.max_retries} retries ({type(err).__name__}: {reason})"))
    failed = [o for o in outcomes if o.failure is not None]
    if failed:
        end_with_failures(launcher, failed, len(outcomes), sweep_dir)
    return [o.ret for o in outcomes]


def end_with_failures(launcher: Any, failed: list[Outcome], total: int, sweep_dir: Path) -> None:
    """The sweep's callbacks (its summary, which lists the missing jobs), then one line per job that did not
    finish and the command that finishes them; exit code 1."""
    from sesame.tasks.runs.sweep_report import finish_command

    launcher.hydra_context.callbacks.on_multirun_end(config=launcher.config)
    for outcome in failed:
        print(f"job {outcome.number} ({' '.join(outcome.overrides) or 'defaults'}) did not finish: {outcome.failure}",
              file=sys.stderr)
    command = finish_command(sweep_dir) or f"sesame-train --multirun <the same overrides> resume=true hydra.sweep.dir={sweep_dir}"
    print(f"error: {len(failed)} of {total} jobs of the sweep did not finish (listed above). Fix: once their cause is "
          f"gone, finish the sweep (finished jobs are skipped) with: {command}", file=sys.stderr)
    sys.exit(1)
