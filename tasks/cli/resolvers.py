"""The OmegaConf resolvers that ``conf/`` uses; every console script registers them before composing.

- ``${shipped:<path>}``, ``${data_dir:<path>}``: where data lives (``tasks/core/paths.py``);
- ``${glue_main_metric:<task_name>}``: the metric a GLUE task is ranked by (``tasks/glue/specs.py``),
  read by ``task.main_metric`` in ``conf/task/glue.yaml``.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from sesame.tasks.glue.specs import glue_main_metric
from sesame.tasks.core.paths import data_dir_path, shipped_path

RESOLVERS = {"shipped": shipped_path, "data_dir": data_dir_path, "glue_main_metric": glue_main_metric}


def register_resolvers() -> None:
    for name, fn in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
