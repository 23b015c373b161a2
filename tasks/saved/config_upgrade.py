"""Settings a checkpoint predates: a run written before a setting existed gets today's default for it.

Every setting is required (``tasks/core/settings.py``), so a key added to ``conf/`` after a run was saved
would make its checkpoint unreadable. A missing key takes the value that
reproduces what the run did before the setting existed, with a warning naming it: its task's default
(``sesame-train task=<name>``, with that task's data preset) where the setting was added with the old
behaviour as its default (``encoder.init=pretrained``, ``data.group_by_length=false``), and the old
behaviour itself where a default changed later (the task's data settings class says it:
``DataSettings.before_the_setting``).

Two kinds of keys are filled without a warning, as they change nothing the model does: the ``task``
block's class names (``task.predictor``, ``task.export``, ...: the code that serves the task today)
and the top-level keys that only say how a run was started (``resume``, ``overwrite``).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

#: The config blocks whose new keys are filled (the others are the trainer's, the logger's, ...).
UPGRADED_GROUPS = ("encoder", "data", "head", "finetune", "fusion", "pooling")
#: Top-level keys of the run filled where missing (``calibrate=true`` came later: an older run did not calibrate).
UPGRADED_KEYS = ("seed", "calibrate", "resume", "overwrite", "init_from")
#: What is filled silently: the task's class names (``conf/task/*.yaml``), and how a run was started.
QUIET = tuple(f"task.{role}" for role in ("settings", "network", "module", "datamodule", "predictor", "export", "data_settings",
                                          "head_settings")) + ("resume", "overwrite", "init_from")


def task_defaults(task_name: str) -> dict[str, Any]:
    """The composed default config of ``sesame-train task=<task_name>``, not resolved.

    Outside a Hydra app the config is composed from sesame's own ``conf/`` once per task and process:
    every checkpoint a process loads goes through here, and a compose costs about 0.1 s (a process that
    scores or exports several runs, a test session). Inside one (sesame-eval) it is composed on the app's
    search path, which a user may have extended, every time."""
    if GlobalHydra.instance().is_initialized():
        return _composed_task(task_name)
    return copy.deepcopy(_shipped_task_defaults(task_name))


@functools.cache
def _shipped_task_defaults(task_name: str) -> dict[str, Any]:
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        return _composed_task(task_name)


def _composed_task(task_name: str) -> dict[str, Any]:
    """``sesame-train task=<task_name>`` composed on the current search path, unresolved."""
    return OmegaConf.to_container(compose(config_name="config", overrides=[f"task={task_name}"]), resolve=False)


def _missing(saved: Mapping[str, Any], defaults: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for key, value in defaults.items():
        if key not in saved:
            yield f"{prefix}{key}", value
        elif isinstance(value, Mapping) and isinstance(saved[key], Mapping):
            yield from _missing(saved[key], value, f"{prefix}{key}.")


def _put(tree: dict[str, Any], dotted_key: str, value: Any) -> None:
    *parents, leaf = dotted_key.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


def with_added_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` (a checkpoint's config) with every setting it lacks taken from its task's defaults."""
    cfg = copy.deepcopy(dict(cfg))
    task = (cfg.get("task") or {}).get("name")
    if not task:
        return cfg
    defaults = task_defaults(task)
    added: list[str] = []

    def fill(group: str) -> None:
        if not isinstance(cfg.get(group), Mapping) or not isinstance(defaults.get(group), Mapping):
            return
        for key, value in _missing(cfg[group], defaults[group], f"{group}."):
            _put(cfg, key, value)
            if key not in QUIET:
                added.append(f"{key}={value}")

    # The task's classes first: its data settings class says what a run did before a data setting whose
    # default changed later existed (DataSettings.before_the_setting).
    fill("task")
    if isinstance(cfg.get("data"), Mapping) and isinstance(defaults.get("data"), Mapping):
        legacy = get_class(cfg["task"]["data_settings"]).before_the_setting({**defaults["data"], **cfg["data"]})
        defaults["data"] = {**defaults["data"], **legacy}
    for group in UPGRADED_GROUPS:
        fill(group)
    for key in UPGRADED_KEYS:
        if key not in cfg and key in defaults:
            cfg[key] = defaults[key]
            if key not in QUIET:
                added.append(f"{key}={defaults[key]}")
    if added:
        log.warning("the checkpoint predates the settings %s: using what it did before they existed", ", ".join(added))
    return cfg
