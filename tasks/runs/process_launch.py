"""Checks of how the run's processes were launched, and the DDP strategy with sesame's timeout.

``trainer.num_nodes`` x ``trainer.devices`` processes make one run. A launcher that starts another count
(torchrun's ``--nnodes`` x ``--nproc_per_node``, SLURM's nodes and tasks, a ``NODE_RANK`` beyond the nodes)
is refused here, on the process that sees it, with the setting to change; a process whose peers never come
(a node not started) waits at most ``trainer.ddp_timeout_s`` for them and then ends with torch's timeout
error, instead of Lightning's 30 minutes.
"""

from __future__ import annotations

import inspect
import os
from datetime import timedelta
from typing import Any

from sesame.tasks.base.run_settings import TrainerSettings
from sesame.tasks.core.errors import ConfigError


def _count(value: Any) -> int | None:
    """``trainer.devices`` / ``num_nodes`` as a number of processes, None where Lightning decides (auto, -1, a list)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return len(value) if isinstance(value, (list, tuple)) else None


def check_launch(trainer: TrainerSettings) -> None:
    """Refuse a launch whose process count or node rank disagrees with ``trainer.num_nodes`` x ``trainer.devices``
    (a :class:`ConfigError` naming both), before any data is read."""
    devices, nodes = _count(trainer.get("devices", 1)), _count(trainer.get("num_nodes", 1)) or 1
    settings = f"trainer.num_nodes={nodes} trainer.devices={trainer.get('devices', 1)}"
    node = os.environ.get("NODE_RANK") or os.environ.get("GROUP_RANK")
    if node is not None and node.isdigit() and int(node) >= nodes:
        raise ConfigError(f"NODE_RANK={node} but {settings}: node ranks run from 0 to num_nodes - 1. Fix: set "
                          "trainer.num_nodes to the number of nodes started, the same on every node")
    if devices is None:
        return
    world = os.environ.get("WORLD_SIZE")  # torchrun's, or set by hand
    if world is not None and world.isdigit() and int(world) != nodes * devices:
        raise ConfigError(f"the launcher started {world} processes (WORLD_SIZE) but {settings} makes {nodes * devices}. "
                          "Fix: trainer.num_nodes = the number of nodes (torchrun --nnodes) and trainer.devices = the "
                          "processes per node (torchrun --nproc_per_node), the same on every node")
    from lightning.fabric.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect():
        try:
            SLURMEnvironment().validate_settings(devices, nodes)
        except ValueError as err:  # Lightning's words, e.g. "...does not match. HINT: Set `num_nodes=2`."
            raise ConfigError(f"{settings} does not match the SLURM job: {err} (the trainer.* key of that name)") from None


def strategy_with_timeout(trainer: TrainerSettings) -> Any:
    """``trainer.strategy`` for ``lightning.Trainer``: a named strategy whose class takes a process-group
    ``timeout`` (ddp and its variants, fsdp, ...) built with ``trainer.ddp_timeout_s``; anything else
    (``auto``, a single device, a timeout of null) as given."""
    name, seconds = trainer.get("strategy", "auto"), trainer.ddp_timeout_s
    if seconds is None or not isinstance(name, str):
        return name
    from lightning.pytorch.strategies import StrategyRegistry

    if name not in StrategyRegistry:
        return name  # Lightning's own error names the choices
    entry = StrategyRegistry[name]
    if "timeout" not in inspect.signature(entry["strategy"]).parameters:
        return name
    return entry["strategy"](**{**entry["init_params"], "timeout": timedelta(seconds=seconds)})
