"""A run saved before a setting existed still loads: the missing keys take their task's defaults,
with a warning, and weights sesame no longer has a place for (the dropped encoder pooler) are left out."""

from __future__ import annotations

import logging

import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.saved.config_upgrade import task_defaults, with_added_settings
from sesame.tasks.runs.runner import train


def test_missing_settings_take_the_tasks_defaults():
    old = {"task": {"name": "squad_v1"}, "encoder": {"name_or_path": "x"}, "data": {"version_2_with_negative": False}}
    new = with_added_settings(old)
    assert new["encoder"]["init"] == "pretrained" and new["encoder"]["name_or_path"] == "x"
    assert new["data"]["group_by_length"] is False
    # v1 runs saved before data.train_windows existed trained on the windows with the answer, although
    # the default is now all
    assert new["data"]["train_windows"] == "with_answer"
    assert task_defaults("squad_v1")["data"]["train_windows"] == "all"
    assert "init" not in old["encoder"]  # the checkpoint's own dict is left alone
    assert with_added_settings({"task": {"name": "squad_v2"}, "data": {}})["data"]["train_windows"] == "all"


def test_the_defaults_composed_once_per_task_are_handed_out_as_copies():
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    first = task_defaults("ner")
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        composed = OmegaConf.to_container(compose(config_name="config", overrides=["task=ner"]), resolve=False)
    assert first == composed  # what a compose of sesame-train task=ner gives, not another task's
    first["data"]["batch_size"] = -1
    first["data"].clear()
    assert task_defaults("ner") == composed  # a caller that changes its copy changes no other caller's


def test_an_older_full_run_loads_to_its_own_predictions(make_cfg, tmp_path, caplog):
    train(RunSettings.from_config(make_cfg("trainer.limit_train_batches=2")), tmp_path)
    path = tmp_path / "checkpoints" / "best.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    cfg = checkpoint["hyper_parameters"]["cfg"]
    del cfg["encoder"]["init"], cfg["data"]["group_by_length"]
    # the encoder pooler's weights such a run held (any values: they are never read)
    checkpoint["state_dict"]["encoder.model.pooler.dense.weight"] = torch.zeros(16, 16)
    checkpoint["state_dict"]["encoder.model.pooler.dense.bias"] = torch.zeros(16)
    torch.save(checkpoint, path)
    with caplog.at_level(logging.WARNING):
        trained = load_trained(path)
    assert "predates the settings encoder.init=pretrained, data.group_by_length=False" in caplog.text
    state = trained.module.state_dict()
    for key, value in checkpoint["state_dict"].items():
        if not key.startswith("encoder.model.pooler."):
            torch.testing.assert_close(state[key], value)


def test_a_config_from_before_the_task_contract_gets_its_task_classes_and_run_keys(caplog):
    old = {"task": {"name": "ner", "main_metric": "val_f1", "entity_metric": "strict"}, "seed": 3}
    with caplog.at_level(logging.WARNING):
        new = with_added_settings(old)
    assert new["task"]["predictor"] == "sesame.tasks.ner.predict.TaggingPredictor"
    assert new["task"]["entity_metric"] == "strict" and new["seed"] == 3
    assert new["calibrate"] is False and new["resume"] is None and new["overwrite"] is False
    # calibrate changes what a model does (an older run did not calibrate): said; class names and how a
    # run was started change nothing: filled quietly
    assert "calibrate=False" in caplog.text
    assert "predictor" not in caplog.text and "overwrite" not in caplog.text and "resume" not in caplog.text
