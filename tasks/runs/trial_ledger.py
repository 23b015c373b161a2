"""The trial ledger of a pruning Optuna search: one JSON file every job of the search reads and writes.

Optuna 2.10 (the one Hydra's Optuna sweeper allows) keeps a shared study in an SQL database, which it reaches
through SQLAlchemy 1.x only; so a pruning search keeps its trials in this file instead
(``<sweep>/optuna_trials.json`` by default, ``hydra.sweeper.storage``). It holds the study's name, direction
and pruner, and each trial's number, state, parameters, value, intermediate values (one per validation) and
the pruner's own records (``system_attrs``: successive halving's rungs). Every read-modify-write holds an
exclusive ``flock`` on ``<ledger>.lock``, so the sweeper and jobs running side by side (joblib, other
machines on a shared file system with working locks) never lose each other's writes; the file itself is
replaced atomically.

To decide, a job replays the ledger into an in-memory Optuna study (:func:`replay`) and asks the pruner,
exactly as ``trial.should_prune()`` would on a shared storage.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sesame.tasks.core.atomic_files import write_json_atomic
from sesame.tasks.core.errors import ConfigError

#: The ``format`` key of a ledger file: anything else is not one.
LEDGER_FORMAT = "sesame-optuna-trials/1"
#: The ledger's file name in the sweep folder when ``hydra.sweeper.storage`` is null.
DEFAULT_LEDGER = "optuna_trials.json"

#: ``optuna.pruner`` names and the keys each takes (its other keys are Optuna's defaults).
PRUNERS = {
    "none": (),
    "median": ("n_startup_trials", "n_warmup_steps"),
    "successive_halving": ("min_resource", "reduction_factor"),
    "hyperband": ("min_resource", "reduction_factor"),
}


@dataclass(frozen=True)
class PrunerSpec:
    """Which pruner a search uses and its settings (``hydra.sweeper.pruner``; recorded in the ledger)."""

    name: str
    n_startup_trials: int = 5  # median: trials that finish before any is pruned
    n_warmup_steps: int = 0  # median: validations of each trial before it can be pruned
    min_resource: int | str = 1  # successive halving / hyperband: validations before the first rung
    reduction_factor: int = 3  # successive halving / hyperband: 1/reduction_factor of the trials go on at a rung

    @classmethod
    def from_config(cls, block: Any) -> PrunerSpec:
        """From ``hydra.sweeper.pruner``: a name, or a block with ``name`` and that pruner's keys."""
        raw = dict(block) if isinstance(block, dict) or hasattr(block, "items") else {"name": block}
        name = str(raw.pop("name", None))
        if name not in PRUNERS:
            raise ConfigError(f"hydra.sweeper.pruner={name!r} is not a pruner: use one of {', '.join(PRUNERS)}")
        unknown = sorted(set(raw) - set(PRUNERS[name]))
        if unknown:
            raise ConfigError(f"hydra.sweeper.pruner: {', '.join(unknown)} is not a setting of the {name} pruner "
                              f"(its settings: {', '.join(PRUNERS[name]) or 'none'})")
        return cls(name=name, **raw)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **{key: getattr(self, key) for key in PRUNERS[self.name]}}

    def build(self) -> Any:
        """The Optuna pruner."""
        import optuna

        if self.name == "median":
            return optuna.pruners.MedianPruner(n_startup_trials=self.n_startup_trials,
                                               n_warmup_steps=self.n_warmup_steps)
        if self.name == "successive_halving":
            return optuna.pruners.SuccessiveHalvingPruner(min_resource=self.min_resource,
                                                          reduction_factor=self.reduction_factor)
        if self.name == "hyperband":
            return optuna.pruners.HyperbandPruner(min_resource=self.min_resource,
                                                  reduction_factor=self.reduction_factor)
        return optuna.pruners.NopPruner()


class TrialLedger:
    """The ledger file at ``path``: :meth:`open` holds its lock and yields its content to read and change."""

    def __init__(self, path: str | os.PathLike, lock_timeout_s: float = 60.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s

    @contextlib.contextmanager
    def open(self, *, create: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """The ledger's content under its lock, written back when the block ends without an error.
        ``create``: the header of a new ledger when there is no file yet (else a missing file is an error)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            self._lock(lock)
            try:
                new = not self.path.exists()
                content = self._read(create)
                before = json.dumps(content, sort_keys=True)
                yield content
                if new or json.dumps(content, sort_keys=True) != before:
                    write_json_atomic(self.path, content)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _lock(self, lock: Any) -> None:
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"{self.path}: the Optuna trial ledger stayed locked by another process for "
                        f"{self.lock_timeout_s:g} s (its lock file {lock.name}). Fix: wait for the search that "
                        "uses it to end, or raise hydra.sweeper.lock_timeout_s") from None
                time.sleep(0.05)

    def _read(self, create: dict[str, Any] | None) -> dict[str, Any]:
        if not self.path.exists():
            if create is None:
                raise ConfigError(f"optuna.ledger={self.path}: no such trial ledger (a pruning search writes it). "
                                  "Fix: run the search with hydra/sweeper=pruning_optuna, or set optuna.ledger=null")
            return {"format": LEDGER_FORMAT, **create, "trials": []}
        try:
            content = json.loads(self.path.read_text())
        except (UnicodeDecodeError, ValueError):
            content = None
        if not isinstance(content, dict) or content.get("format") != LEDGER_FORMAT:
            raise ConfigError(f"{self.path} is not an Optuna trial ledger (damaged, or another kind of file). "
                              "Fix: point hydra.sweeper.storage at a ledger a search wrote, or at a new file name")
        return content


def trial_record(content: dict[str, Any], number: int) -> dict[str, Any]:
    """The record of trial ``number`` in a ledger's content."""
    for record in content["trials"]:
        if record["number"] == number:
            return record
    raise ConfigError(f"optuna.trial={number}: the ledger has no such trial (its trials: "
                      f"{[r['number'] for r in content['trials']]})")


def record_of(trial: Any) -> dict[str, Any]:
    """A new ledger record for an Optuna trial just asked for (running, no values yet)."""
    from optuna.distributions import distribution_to_json

    return {"number": trial.number, "state": "RUNNING", "params": dict(trial.params),
            "distributions": {k: distribution_to_json(d) for k, d in trial.distributions.items()},
            "value": None, "intermediate": {}, "system_attrs": {}, "pruned_at": None}


def frozen_trial(record: dict[str, Any]) -> Any:
    """The Optuna ``FrozenTrial`` of a ledger record (a running one stays running)."""
    optuna = import_optuna()
    from optuna.distributions import json_to_distribution

    state = optuna.trial.TrialState[record["state"]]
    return optuna.trial.create_trial(
        state=state, value=record["value"] if state != optuna.trial.TrialState.FAIL else None,
        params=record["params"],
        distributions={k: json_to_distribution(d) for k, d in record["distributions"].items()},
        system_attrs=record["system_attrs"],
        intermediate_values={int(step): value for step, value in record["intermediate"].items()})


def import_optuna() -> Any:
    """Optuna, quiet: its SQL storage's alembic logs each plugin it sets up, and Optuna a line per study made
    (a job makes one per validation, replaying the ledger)."""
    import logging
    import warnings

    logging.getLogger("alembic").setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # create_trial / add_trial, which the replay is made of, are marked experimental in Optuna 2.x
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def replay(content: dict[str, Any], pruner: Any = None, sampler: Any = None) -> Any:
    """An in-memory Optuna study holding the ledger's trials, in number order (so each keeps its number)."""
    optuna = import_optuna()

    study = optuna.create_study(study_name=content["study"], direction=content["direction"], pruner=pruner,
                                sampler=sampler)
    for record in sorted(content["trials"], key=lambda r: r["number"]):
        study.add_trial(frozen_trial(record))
    return study
