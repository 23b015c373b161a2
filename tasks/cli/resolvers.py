"""The OmegaConf resolvers that ``conf/`` uses; every console script registers them before composing.

- ``${shipped:<path>}``, ``${data_dir:<path>}``: where data lives (``tasks/core/paths.py``);
- whatever each task package gives in the ``RESOLVERS`` dict of its optional ``tasks/<task>/resolvers.py``
  found by listing the packages of ``tasks/`` (no task is named here). A task's resolvers module must
  stay cheap to import (no torch, Lightning or transformers): ``--help`` imports it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from omegaconf import OmegaConf

from sesame.tasks.core.paths import data_dir_path, shipped_path

#: The resolvers of the generic code.
GENERIC_RESOLVERS = MappingProxyType({"shipped": shipped_path, "data_dir": data_dir_path})
#: The module a task package gives its resolvers in (a ``RESOLVERS`` dict: name -> function).
TASK_RESOLVERS_MODULE = "resolvers"


def task_resolver_modules() -> list[str]:
    """``sesame.tasks.<package>.resolvers`` of every package of ``tasks/`` that has one, in name order.

    Found on disk, without importing the packages (a generic package's ``__init__`` may import torch)."""
    tasks = importlib.import_module("sesame.tasks")
    found = []
    for package in pkgutil.iter_modules(tasks.__path__):
        if not package.ispkg:
            continue
        folder = Path(package.module_finder.path) / package.name
        name = f"{tasks.__name__}.{package.name}.{TASK_RESOLVERS_MODULE}"
        if name != __name__ and any(m.name == TASK_RESOLVERS_MODULE for m in pkgutil.iter_modules([str(folder)])):
            found.append(name)
    return found


def all_resolvers() -> dict[str, Callable[..., object]]:
    """The generic resolvers and every task package's; a name given twice is a bug, named."""
    resolvers = dict(GENERIC_RESOLVERS)
    owner = dict.fromkeys(resolvers, __name__)
    for name in task_resolver_modules():
        for key, fn in importlib.import_module(name).RESOLVERS.items():
            if key in resolvers:
                raise RuntimeError(f"the resolver {key!r} is given by both {owner[key]} and {name}")
            resolvers[key], owner[key] = fn, name
    return resolvers


def register_resolvers() -> None:
    for name, fn in all_resolvers().items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
