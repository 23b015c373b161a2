"""init_from: a training run starts from a trained model's weights, head included (tasks/saved/checkpoints.py
load_initial_weights, tasks/runs/runner.py)."""

from __future__ import annotations

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.checkpoints import build_module, load_initial_weights, load_trained

SMALL = ["data.max_train_examples=32", "data.max_eval_examples=32"]


@pytest.fixture(scope="module")
def source_run(make_cfg, tmp_path_factory):
    run = tmp_path_factory.mktemp("init_from") / "source"
    train(RunSettings.from_config(make_cfg(*SMALL, "seed=1")), run)
    return run


def test_a_model_gets_every_weight_of_the_run_it_starts_from(make_cfg, source_run):
    module = build_module(RunSettings.from_config(make_cfg(*SMALL, "seed=2")))
    trained = load_trained(source_run).module.state_dict()
    assert not torch.equal(module.state_dict()["head.classifier.weight"], trained["head.classifier.weight"])
    load_initial_weights(module, source_run)
    assert all(torch.equal(v, trained[k]) for k, v in module.state_dict().items())


def test_training_from_a_run_starts_from_its_weights_not_from_a_new_head(make_cfg, source_run, tmp_path):
    steps = ["trainer.max_steps=1", "finetune.encoder_lr=1e-6", "finetune.head_lr=1e-6"]
    start = load_trained(source_run).module.state_dict()["head.classifier.weight"]
    train(RunSettings.from_config(make_cfg(*SMALL, *steps, f"init_from={source_run}")), tmp_path / "from_run")
    train(RunSettings.from_config(make_cfg(*SMALL, *steps)), tmp_path / "fresh")
    near = load_trained(tmp_path / "from_run").module.state_dict()["head.classifier.weight"]
    fresh = load_trained(tmp_path / "fresh").module.state_dict()["head.classifier.weight"]
    assert (near - start).abs().max() < 1e-4 < (fresh - start).abs().max()


def test_weights_of_another_model_are_refused_naming_the_keys(make_cfg, source_run):
    module = build_module(RunSettings.from_config(make_cfg("task=ner")))
    with pytest.raises(ConfigError, match=r"init_from=.*do not fit this model \(not in this model .*pooling.*other shapes head\.classifier"):
        load_initial_weights(module, source_run)
