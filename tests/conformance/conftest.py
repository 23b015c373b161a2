"""Fixtures of the conformance suite: the tiny encoder (and a copy without dropout), the config of a
task's tiny run, and one trained run per task: each made once per test session, by whichever xdist
worker asks first (the others wait on a file lock and reuse it)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from omegaconf import DictConfig

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import train
from tests.conformance.specs import TaskSpec
from tests.conftest import build_tiny_bert

#: What ``make_cfg`` (tests/conftest.py) puts before every run's overrides: the same run in a subprocess.
MAKE_CFG_BASE = ("trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false")


def made_once(root: Path, name: str, build: Callable[[Path], object]) -> Path:
    """``root/name``, built by ``build(folder)`` unless a worker of this session already built it."""
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            if folder.exists():  # a build that failed half-way
                shutil.rmtree(folder)
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every xdist worker of this session sees (the session's base folder holds the workers')."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "conformance"
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(scope="session")
def encoder(shared: Path) -> Path:
    """The suite's tiny BERT (tests/conftest.py ``build_tiny_bert``), one folder for every worker."""
    return made_once(shared, "tiny_bert", build_tiny_bert)


@pytest.fixture(scope="session")
def still_encoder(shared: Path, encoder: Path) -> Path:
    """The tiny BERT without dropout: one process and two then compute the same function."""

    def build(folder: Path) -> None:
        shutil.copytree(encoder, folder)
        config = json.loads((folder / "config.json").read_text())
        config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        (folder / "config.json").write_text(json.dumps(config))

    return made_once(shared, "tiny_bert_no_dropout", build)


@pytest.fixture(scope="session")
def task_cfg(make_cfg: Callable[..., DictConfig], encoder: Path) -> Callable[..., DictConfig]:
    """``task_cfg(spec, *extra, encoder=None)``: the real config of the task's tiny run (on the suite's
    encoder unless another is given), ``extra`` last."""

    def cfg(spec: TaskSpec, *extra: str, encoder_dir: Path | None = None) -> DictConfig:
        return make_cfg(*spec.run_overrides(encoder_dir or encoder, *extra))

    return cfg


@pytest.fixture(scope="session")
def trained(shared: Path, task_cfg: Callable[..., DictConfig]) -> Callable[[TaskSpec], Path]:
    """``trained(spec)``: the run folder of the task's tiny run, trained once per session. The checks
    read it and write elsewhere."""

    def get(spec: TaskSpec) -> Path:
        return made_once(shared, f"run_{spec.name}", lambda folder: train(RunSettings.from_config(task_cfg(spec)), folder))

    return get
