"""data.holdout_fraction: a recipe is chosen on a held-out share of the training file, never on dev
(tasks/inputs/holdout.py, tasks/glue/data.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inputs.holdout import holdout_indices
from sesame.tasks.runs.runner import build_datamodule, train
from tests.conftest import tsv_labels


def test_the_held_out_share_depends_on_its_seed_alone_and_splits_the_training_examples():
    train_a, held_a = holdout_indices(200, 0.1, seed=0)
    train_b, held_b = holdout_indices(200, 0.1, seed=0)
    assert (held_a == held_b).all() and (train_a == train_b).all()  # no global random state involved
    assert len(held_a) == 20 and sorted([*train_a, *held_a]) == list(range(200))
    _, other = holdout_indices(200, 0.1, seed=1)
    assert set(other) != set(held_a)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_a_fraction_outside_zero_to_one_is_refused_naming_the_key(make_cfg, fraction):
    with pytest.raises(ConfigError, match="data.holdout_fraction"):
        build_datamodule(RunSettings.from_config(make_cfg(f"data.holdout_fraction={fraction}")))


def test_a_share_too_small_to_hold_out_anything_is_refused(make_cfg):
    datamodule = build_datamodule(RunSettings.from_config(make_cfg("data.holdout_fraction=0.01", "data.max_train_examples=20")))
    with pytest.raises(ConfigError, match="holds out 0"):
        datamodule.setup("fit")


def test_training_validates_on_the_held_out_examples_and_never_reads_the_dev_file(make_cfg, tmp_path):
    overrides = ["data.holdout_fraction=0.25", "data.max_train_examples=64", f"data.validation_file={tmp_path / 'absent.tsv'}"]
    datamodule = build_datamodule(RunSettings.from_config(make_cfg(*overrides, "seed=3")))
    datamodule.setup("fit")  # the dev file does not exist: it is not read
    held = list(datamodule.dataset("validation")["index"])
    trained = list(datamodule.dataset("train")["index"])
    assert len(held) == 16 and len(trained) == 48 and not set(held) & set(trained)
    assert sorted(held + trained) == list(range(64))
    other_seed = build_datamodule(RunSettings.from_config(make_cfg(*overrides, "seed=4")))
    other_seed.setup("fit")
    assert list(other_seed.dataset("validation")["index"]) == held  # the run's seed does not move it
    gold = tsv_labels(Path(datamodule.settings.train_file))  # each held-out row keeps its own label
    labels = datamodule.dataset("validation")["labels"]
    names = datamodule.spec.labels
    assert [names[label] for label in labels] == [gold[i] for i in held]
    metrics = train(RunSettings.from_config(make_cfg(*overrides, "trainer.limit_val_batches=null")), tmp_path / "run")
    assert metrics["val_examples_total"] == 16  # validated on the held-out share
