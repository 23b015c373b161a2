"""``cfg.optuna`` (``conf/config.yaml``): the Optuna trial a run is, when a pruning search started it.

``hydra/sweeper=pruning_optuna`` (``tasks/cli/optuna_sweep.py``) sets ``optuna.ledger`` and ``optuna.trial``
for each job it launches; the job reports each validation's main metric to that trial and stops when the
search's pruner says so (``tasks/runs/trial_pruning.py``). Outside such a search both are null and nothing
is reported. Torch-free: read when the settings are, before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.settings import Settings


@dataclass(frozen=True)
class OptunaTrialSettings(Settings):
    """Where a search's trials are recorded and which of them this run is."""

    group = "optuna"
    ledger: str | None  # the search's trial ledger file (tasks/runs/trial_ledger.py); null: not a trial
    trial: int | None  # this run's trial number in that ledger
    lock_timeout_s: float  # how long a job waits for the ledger's lock before it gives up

    def __post_init__(self) -> None:
        if (self.ledger is None) != (self.trial is None):
            raise ConfigError(f"optuna.ledger={self.ledger!r} and optuna.trial={self.trial!r}: set both (a trial of "
                              "a pruning search, which hydra/sweeper=pruning_optuna does for its jobs) or neither")
        if self.lock_timeout_s <= 0:
            raise ConfigError(f"optuna.lock_timeout_s={self.lock_timeout_s}: use a positive number of seconds")

    @property
    def enabled(self) -> bool:
        return self.ledger is not None
