"""What Hydra hands a launcher or sweeper plugin: its config keys when built, its context in ``setup``.

sesame's plugins (``hydra_plugins/sesame_*``) keep both here and leave the work to a module imported when a
sweep starts; plain Python, since Hydra imports every plugin module at each start.
"""

from __future__ import annotations

from typing import Any

from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class KeepsHydraSetup:
    """``kwargs``: the plugin's config keys (``hydra.launcher`` / ``hydra.sweeper``); ``config``,
    ``task_function`` and ``hydra_context``: what Hydra gives ``setup``."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context
