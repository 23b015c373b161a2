"""The class behind ``hydra/sweeper=pruning_optuna`` (``conf/hydra/sweeper/pruning_optuna.yaml``'s ``_target_``).

Hydra instantiates sweepers only from the ``hydra_plugins`` package, so the class lives here; what it does is
``sesame.tasks.cli.optuna_sweep`` (imported when the sweep starts: Hydra imports this module at every start
while it looks for plugins, which must stay cheap). An editable install of sesame hides this package from
Hydra's plugin scan, so ``sesame-train`` also registers the class itself
(``sesame.tasks.cli.optuna_sweep.register_sweeper``).
"""

from __future__ import annotations

from hydra.plugins.sweeper import Sweeper

from sesame.tasks.cli.hydra_plugin_setup import KeepsHydraSetup


class PruningOptunaSweeper(KeepsHydraSetup, Sweeper):
    """Hydra's Optuna sweeper with a pruner: ``kwargs`` are ``hydra.sweeper``'s keys (those of Hydra's Optuna
    sweeper, plus ``pruner`` and ``lock_timeout_s``)."""

    def sweep(self, arguments: list[str]) -> None:
        from sesame.tasks.cli.optuna_sweep import sweep

        return sweep(self, arguments)
