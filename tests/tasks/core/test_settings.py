"""``tasks/core/settings.py``: every block is read by one typed class that names unknown and missing keys."""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError, dataclass

import pytest

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.base.run_settings import FusionSettings, TaskSettings
from sesame.tasks.core.settings import Settings


@dataclass(frozen=True)
class Example(Settings):
    group = "example"
    rate: float
    steps: int
    names: tuple[str, ...] | None
    flag: bool
    note: str | None = None  # optional: may be absent


def test_a_block_becomes_a_frozen_typed_object():
    s = Example.from_config({"rate": "5e-5", "steps": 3, "names": [0, "b"], "flag": True})
    assert s == Example(rate=5e-5, steps=3, names=("0", "b"), flag=True, note=None)
    with pytest.raises(FrozenInstanceError):
        s.rate = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("block, message", [
    ({"rate": 1, "steps": 1, "names": None, "flag": True, "stpes": 2}, r"unknown setting example\.stpes"),
    ({"rate": 1, "names": None, "flag": True}, r"missing setting example\.steps"),
    ({"rate": 1, "steps": 1.5, "names": None, "flag": True}, r"example\.steps=1\.5: expected an integer"),
    ({"rate": "fast", "steps": 1, "names": None, "flag": True}, r"example\.rate='fast': expected a number"),
    ({"rate": 1, "steps": 1, "names": None, "flag": "yes"}, r"example\.flag='yes': expected true or false"),
])
def test_bad_blocks_name_the_key(block, message):
    with pytest.raises(ConfigError, match=message):
        Example.from_config(block)


def test_every_preset_of_the_real_config_reads(make_cfg):
    for overrides in (["fusion=layers"], ["fusion=scalar_mix"], ["task=ner"], ["task=squad_v2"]):
        cfg = make_cfg(*overrides)
        TaskSettings.from_config(cfg.task)
        FusionSettings.from_config(cfg.fusion)
    assert FusionSettings.from_config(make_cfg("fusion=layers").fusion).layers == (-2, -1)
    assert TaskSettings.from_config(make_cfg("data=rte").task).main_metric == "val_accuracy"
    assert TaskSettings.from_config(make_cfg("data=cola").task).main_metric == "val_matthews_correlation"
    assert set(make_cfg("fusion=last").fusion) == {"mode"}  # presets carry no key the code ignores


def test_a_task_with_keys_of_its_own_reads_its_block_with_its_class(make_cfg):
    """task.settings names the class of the task block: NER's adds entity_metric; a key no class knows is an error."""
    from sesame.tasks.ner.settings import NerTaskSettings

    ner = TaskSettings.from_config(make_cfg("task=ner", "task.entity_metric=strict").task)
    assert isinstance(ner, NerTaskSettings) and ner.entity_metric == "strict"
    assert type(TaskSettings.from_config(make_cfg().task)) is TaskSettings
    with pytest.raises(ConfigError, match="unknown setting task.entity_metric"):
        TaskSettings.from_config(make_cfg("+task.entity_metric=strict").task)  # glue has no such key
    with pytest.raises(ConfigError, match="task.settings='sesame.tasks.nowhere.X' names no class"):
        TaskSettings.from_config(make_cfg("task.settings=sesame.tasks.nowhere.X").task)


@pytest.mark.parametrize("override", ["head.dropout=nan", "finetune.weight_decay=nan", "finetune.weight_decay=inf",
                                      "head.label_smoothing=-inf", "data.holdout_fraction=1e999"])
def test_a_number_that_is_not_finite_is_refused_naming_the_key(make_cfg, override):
    # Found by fuzzing (tests/test_fuzz_inputs.py): NaN passed every range check (each comparison with it is
    # false), so head.dropout=nan and finetune.weight_decay=nan were accepted and trained on.
    from sesame.tasks.base.run_settings import RunSettings

    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key}=.*: expected a finite number"):
        RunSettings.from_config(make_cfg(override))


@pytest.mark.parametrize("override, message", [
    ("seed=null", "seed=null: expected int; this setting cannot be null"),
    ("seed=nan", "seed=nan: expected an integer"), ("seed=inf", "seed=inf: expected an integer"),
    ("seed=abc", "seed='abc': expected an integer"),
    ("data.max_seq_length=null", "data.max_seq_length=null: expected int"),
    ("finetune.head_lr=null", "finetune.head_lr=null: expected float"),
    ("head.label_smoothing=null", "head.label_smoothing=null: expected float"),
    ("trainer.early_stopping.min_delta=null", "trainer.early_stopping.min_delta=null: expected float"),
    ("calibrate=abc", "calibrate='abc': expected true or false"),
])
def test_null_or_a_wrong_type_on_a_required_setting_is_refused_naming_the_key(make_cfg, override, message):
    # Found by fuzzing (tests/test_fuzz_inputs.py): null reached the range checks as None (TypeError), and
    # seed=nan / inf / abc failed in int() (ValueError, OverflowError): internal errors, exit 1.
    from sesame.tasks.base.run_settings import RunSettings

    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        RunSettings.from_config(make_cfg(override))
