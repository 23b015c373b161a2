"""Which settings of a trained model a later command (``sesame-eval``, ``sesame-predict``) may change.

A trained model's config is its own: the commands that read one take its ``encoder``, ``head`` and
``data`` from it, not from their own defaults. What the user names on the command line is applied
over it, and logged, when it can apply to trained weights: the encoder's location, dtype, attention
kernel or tokenizer (``encoder.*``), how outputs are decoded (``head.*``, e.g.
``head.null_score_diff_threshold``, ``head.max_answer_length``, ``head.n_best_size``) and how data
is read (``data.*``). Settings that would change the network the weights belong to are an error.

This file is the one place that says so: ``sesame-predict --set`` / ``Predictor.from_run(overrides=)``
give :func:`apply_overrides` a mapping, ``sesame-eval`` gives :meth:`TrainedOverrides.of_command` its
command line; either is checked once, when the :class:`TrainedOverrides` is made. What data settings a
trained model keeps when it is evaluated on other data is :func:`evaluation_data`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from sesame.tasks.core.errors import ConfigError

log = logging.getLogger(__name__)

#: Config groups whose settings define the trained network: no override can apply to its weights.
FIXED_GROUPS = ("fusion", "pooling", "finetune", "compression")
#: Groups a trained model's settings may be overridden in.
OVERRIDABLE_GROUPS = ("encoder", "head", "data")
# Which head and data settings belong to a trained model is the task's to say: its head settings
# class's ``weight_keys`` (tasks/base/run_settings.py HeadSettings), its data settings class's
# ``output_keys`` and ``tokenisation_keys`` (tasks/inputs/data_settings.py DataSettings).


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The dotted keys of Hydra command-line overrides (``head.n_best_size=5``, ``+data.x=1``,
    ``fusion=last`` -> ``head.n_best_size``, ``data.x``, ``fusion``)."""
    keys = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        keys.append(key.split("@", 1)[0])
    return keys


def check_overridable(keys: Iterable[str], source: str | Path, weight_keys: Iterable[str] = ()) -> None:
    """Raise for keys that cannot apply to the trained model of ``source``: a group that defines the
    network, or one of its head's ``weight_keys`` (known once the trained config is read)."""
    fixed_head = set(weight_keys)
    for key in keys:
        group, _, rest = key.partition(".")
        if group in FIXED_GROUPS or (group == "head" and rest in fixed_head):
            raise ConfigError(
                f"{key} cannot be overridden for the trained model {source}: its weights were trained with the "
                f"{group} it was saved with. Fix: drop the override, or train a model with it (sesame-train {key}=...)"
            )


def select_overrides(config: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``{key: value in config}`` (a command's config as plain data) for the overridable keys of a command
    (a whole group for ``encoder=x``)."""
    cfg = OmegaConf.create(config)
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


@dataclass(frozen=True)
class TrainedOverrides:
    """Settings a command changes of a trained model, checked (:func:`check_overridable`) once, when made.

    ``values``: dotted key -> value, applied over the trained config by :func:`apply_overrides`.
    ``named``: every dotted key the command named, those it keeps for itself included (``sesame-eval``'s
    ``data.*`` settings, which describe its own data: :func:`evaluation_data`).
    """

    values: Mapping[str, Any]
    named: frozenset[str]

    @classmethod
    def of_values(cls, values: Mapping[str, Any], source: str | Path) -> TrainedOverrides:
        """``{"head.n_best_size": 5}`` (``sesame-predict --set``, ``Predictor.from_run(overrides=...)``)."""
        check_overridable(values, source)
        return cls(dict(values), frozenset(values))

    @classmethod
    def of_command(cls, config: Mapping[str, Any], overrides: Sequence[str], source: str | Path) -> TrainedOverrides:
        """The command line ``overrides`` (Hydra's ``key=value`` strings) of a command whose config (as
        plain data) is ``config`` (``sesame-eval``): the ``encoder.*`` / ``head.*`` settings it names, valued
        as there.
        Its ``data.*`` settings are named, not applied: the command's data is its own."""
        keys = override_keys(overrides)
        check_overridable(keys, source)
        values = {k: v for k, v in select_overrides(config, keys).items() if k.split(".", 1)[0] != "data"}
        return cls(values, frozenset(keys))

    def names(self, key: str) -> bool:
        """Whether the command named ``key`` (``data.max_seq_length``)."""
        return key in self.named


def evaluation_data(trained: Any, command: Any, overrides: TrainedOverrides) -> tuple[dict[str, Any], list[str]]:
    """The data settings a trained model (its ``settings.data``: ``trained``) is evaluated with on a command's
    data (the command's ``settings.data``: ``command``): ``({key: value} over the command's data block,
    what was chosen and why, one line a key)``. The training file never (``train_file: None``); what
    defines the model's outputs (its data settings class's ``output_keys``: a label or tag set, a table's
    kind of task and metrics, the main metric being one of them) the model's; how its inputs are cut
    (``tokenisation_keys``) the model's too, unless the command names it."""
    trained_keys = {f.name for f in dataclasses.fields(trained)}
    command_keys = {f.name for f in dataclasses.fields(command)}
    data: dict[str, Any] = {"train_file": None}
    data.update({k: _plain(getattr(trained, k)) for k in type(trained).output_keys if k in trained_keys})
    said = []
    for key in type(trained).tokenisation_keys:
        if key not in trained_keys or key not in command_keys:
            continue
        if overrides.names(f"data.{key}"):
            said.append(f"data.{key}={getattr(command, key)}, as this command sets it "
                        f"(the model was trained with {getattr(trained, key)})")
        else:
            data[key] = getattr(trained, key)
            said.append(f"data.{key}={getattr(trained, key)}, the model's own")
    return data, said


def head_weight_keys(trained: Mapping[str, Any]) -> tuple[str, ...]:
    """The head settings of the trained config's task that belong to its weights (``weight_keys`` of the
    class its ``task.head_settings`` names); none where the config names no head settings class."""
    name = (trained.get("task") or {}).get("head_settings")
    if not name:
        return ()
    return tuple(getattr(get_class(str(name)), "weight_keys", ()))


def _plain(value: Any) -> Any:
    """A settings value as config data (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def apply_overrides(trained: Mapping[str, Any], overrides: Mapping[str, Any] | TrainedOverrides,
                    source: str | Path) -> dict[str, Any]:
    """A copy of the trained config ``trained`` with ``overrides`` (dotted keys) applied; each change is logged.
    A mapping is checked here (:meth:`TrainedOverrides.of_values`); a :class:`TrainedOverrides` was when made."""
    if not isinstance(overrides, TrainedOverrides):
        overrides = TrainedOverrides.of_values(overrides, source)
    check_overridable(overrides.values, source, head_weight_keys(trained))
    cfg = OmegaConf.create(copy.deepcopy(dict(trained)))
    for key, value in overrides.values.items():
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
