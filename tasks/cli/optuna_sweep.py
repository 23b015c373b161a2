"""``hydra/sweeper=pruning_optuna``: an Optuna search whose jobs report every validation and stop when pruned.

Hydra's Optuna sweeper asks Optuna for each trial's parameters, runs the trial as a Hydra job and tells Optuna
the job's return value; its jobs never see their trial, so nothing can prune them. This sweeper keeps
everything of it (``hydra.sweeper.params``, ``sampler``, ``direction``, ``n_trials``, ``n_jobs``,
``max_failure_rate``) and adds:

* ``pruner``: ``median``, ``successive_halving``, ``hyperband`` or ``none``, or a block with ``name`` and that
  pruner's settings (``tasks/runs/trial_ledger.py``'s ``PrunerSpec``);
* a trial ledger (``storage``: a file; null: ``<sweep>/optuna_trials.json``) every job reads and writes under a
  lock, so jobs side by side (``hydra/launcher=local_parallel``, ``n_jobs`` > 1) share it;
* each job gets ``optuna.ledger=<ledger> optuna.trial=<number>`` and reports to it
  (``tasks/runs/trial_pruning.py``); a job the pruner stops is told to Optuna as pruned;
* job folders are numbered by trial (``<sweep>/<trial number>``), and ``n_trials`` is the study's total:
  rerunning the command with the same ledger (``hydra.sweep.dir=<sweep>``, or the same ``storage``)
  continues the study with the trials it lacks. A trial left running by a search that was killed is
  marked failed and its number is not reused.

``optimization_results.yaml`` (as Hydra's Optuna sweeper writes it) also counts the pruned trials.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.trial_ledger import (DEFAULT_LEDGER, PrunerSpec, TrialLedger, import_optuna, record_of, replay,
                                             trial_record)

log = logging.getLogger(__name__)

#: hydra.sweeper keys this sweeper reads itself; the others are Hydra's Optuna sweeper's.
OWN_KEYS = ("pruner", "lock_timeout_s")


def register_sweeper() -> None:
    """Make ``hydra/sweeper=pruning_optuna`` instantiable where Hydra's plugin scan cannot see the sweeper's
    package (an editable install of sesame). Cheap: no Optuna import."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.sesame_optuna_sweeper.pruning_sweeper import PruningOptunaSweeper

    Plugins.instance().register(PruningOptunaSweeper)


def ledger_path(storage: Any, sweep_dir: str) -> Path:
    """The ledger file ``hydra.sweeper.storage`` names (null: the sweep folder's)."""
    if storage is None:
        return Path(sweep_dir) / DEFAULT_LEDGER
    text = str(storage)
    if "://" in text:
        raise ConfigError(f"hydra.sweeper.storage={text!r}: a pruning search keeps its trials in a ledger file, "
                          "not a database URL (Optuna 2.10's SQL storage needs SQLAlchemy 1.x). "
                          "Fix: give a file path, or null for <sweep>/optuna_trials.json")
    return Path(text)


def sweep(sweeper: Any, arguments: list[str]) -> None:
    """Run the search (``sweeper``: the plugin instance; ``arguments``: the command line's sweep overrides)."""
    from sesame.tasks.cli.errors import user_errors_are_messages

    with user_errors_are_messages():  # every setting is checked before the first job starts
        _sweep(sweeper, arguments)


def _sweep(sweeper: Any, arguments: list[str]) -> None:
    optuna = import_optuna()
    from hydra.core.plugins import Plugins
    from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides

    kwargs = dict(sweeper.kwargs)
    spec = PrunerSpec.from_config(OmegaConf.to_container(kwargs.pop("pruner"), resolve=True)
                                  if OmegaConf.is_config(kwargs.get("pruner")) else kwargs.pop("pruner", "none"))
    lock_timeout_s = float(kwargs.pop("lock_timeout_s", 60))
    # Hydra's Optuna sweeper reads the search space, sampler and the rest; its own loop is replaced by the one below
    impl = OptunaSweeperImpl(**kwargs)
    impl.setup(hydra_context=sweeper.hydra_context, task_function=sweeper.task_function, config=sweeper.config)
    impl._process_searchspace_config()
    space, fixed = create_params_from_overrides([*impl._parse_sweeper_params_config(), *arguments])
    for name in fixed:
        space.pop(name, None)
    if isinstance(impl.sampler, functools.partial) and impl.sampler.func is optuna.samplers.GridSampler:
        # hydra/sweeper/sampler=grid: the grid is the search space, and no more trials than it holds
        grid = {name: impl._to_grid_sampler_choices(dist) for name, dist in space.items()}
        impl.sampler = impl.sampler(grid)
        impl.n_trials = min(impl.n_trials, math.prod(len(values) for values in grid.values()))
    directions = impl._get_directions()
    if len(directions) != 1:
        raise ConfigError(f"hydra.sweeper.direction={directions}: a pruning search optimises one metric")
    if impl.n_jobs < 1 or impl.n_trials < 0:
        raise ConfigError(f"hydra.sweeper: n_jobs >= 1 and n_trials >= 0 are needed; got n_jobs={impl.n_jobs}, "
                          f"n_trials={impl.n_trials}")
    path = ledger_path(impl.storage, impl.sweep_dir)
    ledger = TrialLedger(path, lock_timeout_s)
    header = {"study": impl.study_name or "sesame", "direction": directions[0], "pruner": spec.to_dict()}
    with ledger.open(create=header) as content:
        if content["direction"] != directions[0]:
            raise ConfigError(f"{path}: its study {content['direction']}s, this search would {directions[0]}: "
                              "Fix: the same hydra.sweeper.direction, or another storage")
        content["pruner"] = spec.to_dict()  # a continued search may change its pruner
        for record in content["trials"]:
            if record["state"] == "RUNNING":
                log.warning("trial %d was left running by a search that ended: marked failed", record["number"])
                record["state"] = "FAIL"
        pruner = spec.build()
        study = replay(content, pruner=pruner, sampler=impl.sampler)
    done = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in study.trials)
    if study.trials:
        log.info("continuing study %s (%s): %d trials, %d finished", header["study"], path, len(study.trials), done)
        if hasattr(impl.sampler, "reseed_rng"):  # a seeded sampler would otherwise draw its first trials again
            impl.sampler.reseed_rng()
    log.info("Study %s, ledger %s, sampler %s, pruner %s", header["study"], path, type(impl.sampler).__name__,
             spec.name)
    to_go = impl.n_trials - done
    while to_go > 0:
        batch = [study.ask() for _ in range(min(to_go, impl.n_jobs))]
        overrides = [(*o, f"optuna.ledger={path}", f"optuna.trial={t.number}", f"optuna.lock_timeout_s={lock_timeout_s}")
                     for o, t in zip(impl._configure_trials(batch, space, fixed), batch)]
        with ledger.open() as content:
            content["trials"].extend(record_of(t) for t in batch)
        cpu_before = _cpu_s()
        returns = impl.launcher.launch(overrides, initial_job_idx=batch[0].number)
        failures = tell(study, ledger, batch, returns, batch_cpu_s=_cpu_s() - cpu_before)
        if failures / len(returns) > impl.max_failure_rate:
            log.error("%d of %d trials failed (max_failure_rate=%s)", failures, len(returns), impl.max_failure_rate)
            for ret in returns:
                ret.return_value  # raises the failed job's own error, as Hydra's Optuna sweeper does
        to_go -= len(batch)
    write_results(study, Path(impl.sweep_dir))


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children: with Hydra's basic launcher the jobs run here."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def tell(study: Any, ledger: TrialLedger, batch: list[Any], returns: list[Any], batch_cpu_s: float) -> int:
    """Tell Optuna (and the ledger) how each trial of a batch ended; the number that failed. Each record also
    gets ``batch_cpu_s``, the sweep process's CPU seconds over its batch: with the basic launcher and
    ``n_jobs=1``, the trial's own cost (jobs run by another launcher's workers are not in it)."""
    import optuna
    from hydra.core.utils import JobStatus

    State = optuna.trial.TrialState
    failures = 0
    with ledger.open() as content:
        for trial, ret in zip(batch, returns):
            record = trial_record(content, trial.number)
            for step, value in record["intermediate"].items():  # what the job reported, for the sampler
                study._storage.set_trial_intermediate_value(trial._trial_id, int(step), value)
            for key, value in record["system_attrs"].items():
                study._storage.set_trial_system_attr(trial._trial_id, key, value)
            value = _float(ret.return_value) if ret.status == JobStatus.COMPLETED else None
            if record["pruned_at"] is not None:
                _tell(study, trial, state=State.PRUNED)
            elif value is not None:
                _tell(study, trial, value)
            else:
                failures += 1
                _tell(study, trial, state=State.FAIL)
            frozen = study._storage.get_trial(trial._trial_id)
            record["state"] = frozen.state.name
            record["value"] = frozen.value
            record["batch_cpu_s"] = round(batch_cpu_s, 3)
    return failures


def _tell(study: Any, trial: Any, value: float | None = None, state: Any = None) -> None:
    """``study.tell``; the grid sampler's ``Study.stop`` when its grid is done, which Optuna allows only inside
    ``study.optimize``, is let pass (the trial is told by then), as Hydra's Optuna sweeper does."""
    try:
        study.tell(trial, value, state=state) if state is not None else study.tell(trial, value)
    except RuntimeError as err:
        if "Study.stop" not in str(err):
            raise


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def write_results(study: Any, sweep_dir: Path) -> None:
    """``<sweep>/optimization_results.yaml``: the best trial (as Hydra's Optuna sweeper writes it) and counts."""
    import optuna

    counts = {state.name.lower(): sum(t.state == state for t in study.trials) for state in
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)}
    results: dict[str, Any] = {"name": "optuna", "trials": counts}
    try:
        best = study.best_trial
        results.update(best_params=best.params, best_value=best.value, best_trial=best.number)
        log.info("Best parameters: %s; best value: %s (trial %d)", best.params, best.value, best.number)
    except ValueError:  # no trial completed
        log.warning("no trial completed")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
