"""The class behind ``hydra/sweeper=pruning_optuna`` (``conf/hydra/sweeper/pruning_optuna.yaml``'s ``_target_``).

Hydra instantiates sweepers only from the ``hydra_plugins`` package, so the class lives here; what it does is
``sesame.tasks.cli.optuna_sweep`` (imported when the sweep starts: Hydra imports this module at every start
while it looks for plugins, which must stay cheap). An editable install of sesame hides this package from
Hydra's plugin scan, so ``sesame-train`` also registers the class itself
(``sesame.tasks.cli.optuna_sweep.register_sweeper``).
"""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class PruningOptunaSweeper(Sweeper):
    """Hydra's Optuna sweeper with a pruner: ``kwargs`` are ``hydra.sweeper``'s keys (those of Hydra's Optuna
    sweeper, plus ``pruner`` and ``lock_timeout_s``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def sweep(self, arguments: list[str]) -> None:
        from sesame.tasks.cli.optuna_sweep import sweep

        return sweep(self, arguments)
