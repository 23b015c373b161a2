"""The trainer block (tasks/base/run_settings.py TrainerSettings): sesame's own keys typed, every other key
a lightning.Trainer argument passed on unchanged, a misspelt one refused before anything runs."""

from __future__ import annotations

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.base.run_settings import EarlyStoppingSettings, TrainerSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.runner import train


def test_sesames_own_keys_are_typed_and_the_rest_goes_to_lightning_unchanged(make_cfg):
    trainer = TrainerSettings.from_config(make_cfg("trainer.early_stopping.patience=2", "trainer.max_epochs=3").trainer)
    assert trainer.early_stopping == EarlyStoppingSettings(patience=2, min_delta=0.0) and trainer.compile is False
    kwargs = trainer.trainer_kwargs()
    assert not {"early_stopping", "compile"} & set(kwargs)
    assert kwargs["max_epochs"] == 3 and kwargs["limit_train_batches"] == 4  # trainer=debug
    older = TrainerSettings.from_config({"max_epochs": 1})  # a run saved before early_stopping and compile existed
    assert older.early_stopping is None and older.compile is False
    with pytest.raises(ConfigError, match=r"trainer.callbacks: sesame sets it itself"):
        TrainerSettings.from_config({"callbacks": []})


def test_a_misspelt_trainer_key_names_the_closest_argument_before_anything_runs(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.max_epoch is not a lightning.Trainer argument.*"
                                          r"did you mean trainer.max_epochs\?"):
        train(RunSettings.from_config(make_cfg("+trainer.max_epoch=1")), tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_trained_models_trainer_block_is_a_record_not_checked():
    """A checkpoint whose trainer block holds an argument the installed Lightning lacks still loads: the
    block records how it trained; only a config about to run is checked."""
    recorded = TrainerSettings.from_config({"max_epochs": 1, "a_dropped_argument": 3}, check=False)
    assert recorded.get("a_dropped_argument") == 3
    with pytest.raises(ConfigError, match="a_dropped_argument"):
        TrainerSettings.from_config({"max_epochs": 1, "a_dropped_argument": 3})
