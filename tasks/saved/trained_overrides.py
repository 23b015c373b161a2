"""Which settings of a trained model a later command (``sesame-eval``, ``sesame-predict``) may change.

A trained model's config is its own: the commands that read one take its ``encoder``, ``head`` and
``data`` from it, not from their own defaults. What the user names on the command line is applied
over it, and logged, when it can apply to trained weights: the encoder's location, dtype, attention
kernel or tokenizer (``encoder.*``), how outputs are decoded (``head.*``, e.g.
``head.null_score_diff_threshold``, ``head.max_answer_length``, ``head.n_best_size``) and how data
is read (``data.*``). Settings that would change the network the weights belong to are an error.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sesame.tasks.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Config groups whose settings define the trained network: no override can apply to its weights.
FIXED_GROUPS = ("fusion", "pooling", "finetune", "compression")
#: Groups a trained model's settings may be overridden in.
OVERRIDABLE_GROUPS = ("encoder", "head", "data")
#: Head settings that belong to the trained weights: ``head.crf`` adds transition weights, whose BIO
#: constraints (``head.constrain_bio``) are saved with them; loss settings only act in training.
FIXED_HEAD_KEYS = ("crf", "constrain_bio", "dropout", "class_weights", "label_smoothing")


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The dotted keys of Hydra command-line overrides (``head.n_best_size=5``, ``+data.x=1``,
    ``fusion=last`` -> ``head.n_best_size``, ``data.x``, ``fusion``)."""
    keys = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        keys.append(key.split("@", 1)[0])
    return keys


def check_overridable(keys: Iterable[str], source: str | Path) -> None:
    """Raise for keys that cannot apply to the trained model of ``source``."""
    for key in keys:
        group, _, rest = key.partition(".")
        if group in FIXED_GROUPS or (group == "head" and rest in FIXED_HEAD_KEYS):
            raise ConfigError(
                f"{key} cannot be overridden for the trained model {source}: its weights were trained with the "
                f"{group} it was saved with. Fix: drop the override, or train a model with it (sesame-train {key}=...)"
            )


def select_overrides(cfg: DictConfig, keys: Iterable[str]) -> dict[str, Any]:
    """``{key: value in cfg}`` for the overridable keys of a command (a whole group for ``encoder=x``)."""
    chosen: dict[str, Any] = {}
    for key in keys:
        group = key.split(".", 1)[0]
        if group not in OVERRIDABLE_GROUPS:
            continue
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        if isinstance(value, DictConfig):  # a group choice (encoder=minilm_l6): every key of it
            for sub, sub_value in OmegaConf.to_container(value, resolve=True).items():
                chosen[f"{key}.{sub}"] = sub_value
        else:
            chosen[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return chosen


def apply_overrides(trained: Mapping[str, Any], overrides: Mapping[str, Any], source: str | Path) -> dict[str, Any]:
    """A copy of the trained config ``trained`` with ``overrides`` (dotted keys) applied; each change is logged."""
    check_overridable(overrides, source)
    cfg = OmegaConf.create(copy.deepcopy(dict(trained)))
    for key, value in overrides.items():
        group = key.split(".", 1)[0]
        if group not in OVERRIDABLE_GROUPS:
            raise ConfigError(f"{key}: only {', '.join(g + '.*' for g in OVERRIDABLE_GROUPS)} settings of a trained model "
                              "can be overridden")
        old = OmegaConf.select(cfg, key, default="<unset>")
        if old == "<unset>" and group == "head":
            raise ConfigError(f"{key}: the trained model of {source} has no such head setting "
                              f"(it has: {', '.join(sorted(cfg.get('head') or {}))})")
        if key == "encoder.init" and old != value:  # the weights are what that init trained into
            raise ConfigError(f"encoder.init cannot be overridden for the trained model {source} (trained from "
                              f"{old} initialisation). Fix: drop the override")
        if old != value:
            log.info("overriding the trained %s=%s with %s", key, old, value)
        OmegaConf.update(cfg, key, value, force_add=True)
    return OmegaConf.to_container(cfg)
