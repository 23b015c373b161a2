"""Which settings of a trained model belong to it is its task's to say, not a list in generic code: the
head settings class's ``weight_keys`` (never overridden), the data settings class's ``output_keys``
(kept on other data) and ``tokenisation_keys`` (kept unless named). Every task's names exist, and the
generic code obeys them; ``calibrate=true`` is refused by each task that has no temperature to fit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import HeadSettings, TaskSettings, task_class
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.saved.trained_overrides import TrainedOverrides, apply_overrides, evaluation_data
from sesame.tasks.base.run_settings import RunSettings

TASKS = sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "conf" / "task").glob("*.yaml"))


def _classes(task: str):
    raw = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[3] / "conf" / "task" / f"{task}.yaml")["task"])
    settings = TaskSettings.from_config({**raw, "main_metric": "val_main"})  # the metric's interpolation needs data
    return task_class(settings, "head_settings"), task_class(settings, "data_settings")


@pytest.mark.parametrize("task", TASKS)
def test_every_task_names_settings_its_classes_have(task):
    head, data = _classes(task)
    assert issubclass(head, HeadSettings), f"{head.__name__} should subclass HeadSettings"
    head_fields = {f.name for f in dataclasses.fields(head)}
    data_fields = {f.name for f in dataclasses.fields(data)}
    assert set(head.weight_keys) <= head_fields, f"{head.__name__}.weight_keys names no setting of it"
    assert set(data.output_keys) <= data_fields and set(data.tokenisation_keys) <= data_fields
    assert "max_seq_length" in data.tokenisation_keys


def test_a_head_setting_of_the_weights_is_refused_and_a_decoding_one_applies(make_cfg):
    ner = OmegaConf.to_container(make_cfg("task=ner"), resolve=True)
    with pytest.raises(ConfigError, match=r"head.crf cannot be overridden for the trained model run"):
        apply_overrides(ner, {"head.crf": True}, "run")
    choice = OmegaConf.to_container(make_cfg("task=multiple_choice"), resolve=True)
    with pytest.raises(ConfigError, match=r"head.dropout cannot be overridden"):
        apply_overrides(choice, {"head.dropout": 0.3}, "run")
    qa = OmegaConf.to_container(make_cfg("task=squad_v1"), resolve=True)
    assert apply_overrides(qa, {"head.n_best_size": 5}, "run")["head"]["n_best_size"] == 5
    # The same key is a weight of one task and not of another: dropout of a QA head does not exist.
    with pytest.raises(ConfigError, match=r"has no such head setting"):
        apply_overrides(qa, {"head.dropout": 0.3}, "run")


def test_evaluation_keeps_what_the_task_says_defines_its_outputs(make_cfg):
    from sesame.tasks.base.run_settings import RunSettings

    trained = RunSettings.from_config(make_cfg("task=ner", "data.tag_names=[O,B-X,I-X]", "data.max_seq_length=48"))
    command = RunSettings.from_config(make_cfg("task=ner", "data.max_seq_length=96"))
    data, said = evaluation_data(trained.data, command.data, TrainedOverrides({}, frozenset()))
    assert data["tag_names"] == ["O", "B-X", "I-X"] and data["max_seq_length"] == 48
    assert data["label_all_subwords"] == trained.data.label_all_subwords
    named = TrainedOverrides({}, frozenset({"data.max_seq_length"}))
    data, said = evaluation_data(trained.data, command.data, named)
    assert "max_seq_length" not in data and any("as this command sets it" in line for line in said)


@pytest.mark.parametrize("overrides, refusal", [
    (["task=ner"], r"calibrate=true fits a softmax temperature to the dev logits of single-label classification, "
                   r"which task=ner does not have"),
    (["task=multiple_choice"], r"which task=multiple_choice does not have"),
    (["task=text_classification", f"data.train_file={shipped_path('glue/sst2/train.2k.tsv')}",
      f"data.validation_file={shipped_path('glue/sst2/dev.tsv')}", "data.text_column=sentence", "data.regression=true",
      "data.metrics=[pearson]"], r"applies to single-label classification, not to task=text_classification"),
])
def test_calibrate_is_refused_before_training_where_the_task_has_no_temperature(make_cfg, tmp_path, overrides, refusal):
    from sesame.tasks.runs.runner import train

    with pytest.raises(ConfigError, match=refusal + r".*Fix: drop calibrate=true"):
        train(RunSettings.from_config(make_cfg(*overrides, "calibrate=true", "data.max_train_examples=8", "data.max_eval_examples=8")), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("task", TASKS)
def test_every_task_is_named_as_its_conf_file(task):
    """A saved run is upgraded with ``sesame-train task=<task.name>``'s defaults (tasks/saved/config_upgrade.py)."""
    raw = OmegaConf.load(Path(__file__).resolve().parents[3] / "conf" / "task" / f"{task}.yaml")
    assert raw["task"]["name"] == task, f"conf/task/{task}.yaml: task.name must be {task!r}, the file's name"
