"""A tiny multiple-choice run on the shipped SWAG-format sample (trained once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import train

#: The sample, every question; a few steps, a learning rate that moves a random tiny encoder.
RUN = ["task=multiple_choice", "trainer.max_steps=8", "trainer.limit_train_batches=4", "finetune.head_lr=1e-2"]


@pytest.fixture(scope="session")
def choice_run(make_cfg, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("run_multiple_choice")
    train(RunSettings.from_config(make_cfg(*RUN)), folder)
    return folder
