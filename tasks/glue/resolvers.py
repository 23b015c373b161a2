"""The OmegaConf resolvers the GLUE task gives ``conf/`` (registered by ``tasks/cli/resolvers.py``).

- ``${glue_main_metric:<task_name>}``: the metric a GLUE task is ranked by (``tasks/glue/specs.py``),
  read by ``task.main_metric`` in ``conf/task/glue.yaml``.

Kept cheap: a console script imports this before ``--help`` (no torch, Lightning or transformers).
"""

from __future__ import annotations

from sesame.tasks.glue.specs import glue_main_metric

RESOLVERS = {"glue_main_metric": glue_main_metric}
