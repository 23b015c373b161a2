"""The class behind ``hydra/launcher=ray`` (``conf/hydra/launcher/ray.yaml``'s ``_target_``).

Hydra instantiates launchers only from the ``hydra_plugins`` package, so the class lives here; what it does
is ``sesame.tasks.cli.ray_sweep`` (imported when a sweep launches: Hydra imports this module at every start
while it looks for plugins, which must stay cheap). An editable install of sesame hides this package from
Hydra's plugin scan, so ``sesame-train`` also registers the class itself
(``sesame.tasks.cli.ray_sweep.register_launcher``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

from sesame.tasks.cli.hydra_plugin_setup import KeepsHydraSetup


class RayLauncher(KeepsHydraSetup, Launcher):
    """Runs each job of a sweep as a Ray task; ``kwargs`` are ``hydra.launcher``'s keys (``RaySettings``)."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from sesame.tasks.cli.ray_sweep import launch

        return launch(self, job_overrides, initial_job_idx)
