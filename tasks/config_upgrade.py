"""Settings a checkpoint predates: a run written before a setting existed gets today's default for it.

Every setting is required (``tasks/settings.py``), so a key added to ``conf/`` after a run was saved
would make its checkpoint unreadable. The defaults of the run's task (``sesame-train task=<name>``,
with that task's data preset) are what every new setting was given when it was added, chosen to keep
the old behaviour (``encoder.init=pretrained``, ``data.group_by_length=false``, SQuAD v1's
``data.train_windows=with_answer``), so a missing key takes that value, with a warning naming it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

#: The config blocks whose new keys are filled (the others are the trainer's, the logger's, ...).
UPGRADED_GROUPS = ("encoder", "data", "head", "finetune", "fusion", "pooling")


def task_defaults(task_name: str) -> dict[str, Any]:
    """The composed default config of ``sesame-train task=<task_name>``, resolved where it can be."""
    overrides = [f"task={task_name}"]
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app (sesame-eval): its search path
        cfg = compose(config_name="config", overrides=overrides)
    else:
        with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=False)


def _missing(saved: Mapping[str, Any], defaults: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in defaults.items():
        if key not in saved:
            yield f"{prefix}{key}", value
        elif isinstance(value, Mapping) and isinstance(saved[key], Mapping):
            yield from _missing(saved[key], value, f"{prefix}{key}.")


def with_added_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` (a checkpoint's config) with every setting it lacks taken from its task's defaults."""
    cfg = copy.deepcopy(dict(cfg))
    task = (cfg.get("task") or {}).get("name")
    if not task:
        return cfg
    defaults = task_defaults(task)
    added = []
    for group in UPGRADED_GROUPS:
        if not isinstance(cfg.get(group), Mapping) or not isinstance(defaults.get(group), Mapping):
            continue
        for key, value in _missing(cfg[group], defaults[group], f"{group}."):
            node = cfg
            *parents, leaf = key.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = value
            added.append(f"{key}={value}")
    if added:
        log.warning("the checkpoint predates the settings %s: using their defaults", ", ".join(added))
    return cfg
