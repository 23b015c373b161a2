"""Which tasks the conformance suite runs, and what each declares about itself (see ``__init__.py``).

A task is a ``conf/task/<task>.yaml``; what it declares is the ``<task>:`` block of
``tests/tasks/<package>/conformance.yaml``, ``<package>`` read from its ``task.module``
(``sesame.tasks.<package>.module.Class``). Nothing here names a task.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TASK_CONFIGS = ROOT / "conf" / "task"
TASK_TESTS = ROOT / "tests" / "tasks"
DECLARATIONS = "conformance.yaml"
#: The module beside a ``conformance.yaml`` whose functions it names (``predict``).
HOOKS = "conformance"

#: The tiny run every check starts from, before the task's own overrides: 32 training examples in
#: batches of 8, 3 batches an epoch, 4 steps (an epoch and one step), a periodic checkpoint every step
#: (what the resume check kills), the first 16 dev examples all evaluated, a head learning rate that
#: moves a tiny random encoder.
TINY_RUN = (
    "seed=7",
    "data.max_train_examples=32",
    "data.max_eval_examples=16",
    "data.batch_size=8",
    "trainer.max_epochs=2",
    "trainer.max_steps=4",
    "trainer.limit_train_batches=3",
    "trainer.limit_val_batches=null",
    "trainer.limit_test_batches=null",
    "checkpoint.every_n_train_steps=1",
    "finetune.head_lr=1e-2",
)

#: The checks a task may declare it cannot support (``refuses:``), each then asserting the refusal.
REFUSABLE = ("feature_cache", "hf_export", "onnx_export", "int8", "prune", "distill")
#: The generic corruptions of a training file (``test_bad_lines.py``); ``bad_lines:`` may replace one.
CORRUPTIONS = ("garbage_line", "truncated")
KEYS = {"overrides", "predict", "refuses", "bad_lines", "ddp"}
DDP_KEYS = {"noise_parameters", "weights_atol", "unequal_metrics", "unequal_files", "reason"}
#: How far apart one and two processes' weights may end (each parameter, absolute), unless a task declares more.
DDP_WEIGHTS_ATOL = 1e-6

#: ``predict``'s function: (folder holding an evaluation's prediction files, the trained config) ->
#: [(a predictor input, the fields its output must have, as those files give them)], one per dev example.
Expectations = Callable[[Path, Mapping[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]]]


@dataclass(frozen=True)
class TaskSpec:
    """A task of ``conf/task/`` and what its tests folder declares for the suite."""

    name: str
    package: str
    declared_in: Path | None = None
    overrides: tuple[str, ...] = ()
    predict: str | None = None
    refuses: Mapping[str, str] = field(default_factory=dict)
    bad_lines: Mapping[str, str] = field(default_factory=dict)
    ddp_noise_parameters: tuple[str, ...] = ()
    ddp_weights_atol: float = DDP_WEIGHTS_ATOL
    ddp_unequal_metrics: tuple[str, ...] = ()
    ddp_unequal_files: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name

    def run_overrides(self, encoder: Path, *extra: str) -> list[str]:
        """Every override of the task's tiny run on ``encoder``, then ``extra``."""
        return [f"task={self.name}", f"encoder.name_or_path={encoder}", *TINY_RUN, *self.overrides, *extra]

    def expectations(self) -> Expectations | None:
        """The task's ``predict`` function (``tests/tasks/<package>/conformance.py``), if it declares one."""
        if self.predict is None:
            return None
        module = importlib.import_module(f"tests.tasks.{self.package}.{HOOKS}")
        return getattr(module, self.predict)


class DeclarationError(ValueError):
    """A ``conformance.yaml`` the suite cannot read as declared: a typo must not drop a declaration silently."""


def package_of(task_config: Path) -> tuple[str, str]:
    """``(task name, package)`` of a ``conf/task/*.yaml`` (``task=<file stem>``; the package from ``task.module``)."""
    conf = yaml.safe_load(task_config.read_text(encoding="utf-8"))
    module = conf["task"]["module"]
    parts = module.split(".")
    if parts[:2] != ["sesame", "tasks"] or len(parts) < 4:
        raise DeclarationError(f"{task_config}: task.module={module!r} is not sesame.tasks.<package>.<module>.<Class>")
    return task_config.stem, parts[2]


def read_declarations(path: Path) -> dict[str, dict[str, Any]]:
    """The blocks of one ``conformance.yaml``, each checked for unknown keys."""
    blocks = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(blocks, dict):
        raise DeclarationError(f"{path}: expected a mapping of task names to blocks")
    for task, block in blocks.items():
        block = blocks[task] = block or {}
        unknown = set(block) - KEYS
        if unknown:
            raise DeclarationError(f"{path}: {task}: unknown key(s) {sorted(unknown)}; the keys are {sorted(KEYS)}")
        for name, allowed in (("refuses", REFUSABLE), ("bad_lines", CORRUPTIONS)):
            wrong = set(block.get(name) or {}) - set(allowed)
            if wrong:
                raise DeclarationError(f"{path}: {task}.{name}: {sorted(wrong)} are none of {list(allowed)}")
        ddp = block.get("ddp") or {}
        if set(ddp) - DDP_KEYS:
            raise DeclarationError(f"{path}: {task}.ddp: unknown key(s) {sorted(set(ddp) - DDP_KEYS)}")
        if ddp and not ddp.get("reason"):
            raise DeclarationError(f"{path}: {task}.ddp: say why one and two processes differ there (reason:)")
    return blocks


def discover(configs: Path = TASK_CONFIGS, tests: Path = TASK_TESTS) -> list[TaskSpec]:
    """Every task of ``configs`` (sorted by name), with what its package's tests folder declares."""
    specs = []
    for config in sorted(configs.glob("*.yaml")):
        name, package = package_of(config)
        path = tests / package / DECLARATIONS
        block = read_declarations(path).get(name, {}) if path.is_file() else {}
        ddp = block.get("ddp") or {}
        specs.append(TaskSpec(
            name=name, package=package, declared_in=path if path.is_file() else None,
            overrides=tuple(block.get("overrides") or ()), predict=block.get("predict"),
            refuses=dict(block.get("refuses") or {}), bad_lines=dict(block.get("bad_lines") or {}),
            ddp_noise_parameters=tuple(ddp.get("noise_parameters") or ()),
            ddp_weights_atol=float(ddp.get("weights_atol", DDP_WEIGHTS_ATOL)),
            ddp_unequal_metrics=tuple(ddp.get("unequal_metrics") or ()),
            ddp_unequal_files=tuple(ddp.get("unequal_files") or ()),
        ))
    return specs


#: The tasks, found once at collection.
SPECS = discover()
