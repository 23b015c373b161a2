"""The class behind ``hydra/launcher=ray`` (``conf/hydra/launcher/ray.yaml``'s ``_target_``).

Hydra instantiates launchers only from the ``hydra_plugins`` package, so the class lives here; what it does
is ``sesame.tasks.cli.ray_sweep`` (imported when a sweep launches: Hydra imports this module at every start
while it looks for plugins, which must stay cheap). An editable install of sesame hides this package from
Hydra's plugin scan, so ``sesame-train`` also registers the class itself
(``sesame.tasks.cli.ray_sweep.register_launcher``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class RayLauncher(Launcher):
    """Runs each job of a sweep as a Ray task; ``kwargs`` are ``hydra.launcher``'s keys (``RaySettings``)."""

    def __init__(self, **kwargs: Any) -> None:
        self.ray_kwargs = kwargs
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from sesame.tasks.cli.ray_sweep import launch

        return launch(self, job_overrides, initial_job_idx)
