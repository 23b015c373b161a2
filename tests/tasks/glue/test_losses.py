"""head.class_weights and head.label_smoothing: they reach the loss, balanced weights raise the
minority class's recall on imbalanced SST-2, and bad settings are one clear message."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import read_checkpoint
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.glue.module import SentenceClassificationModule
from sesame.tasks.glue.settings import ClassifierHeadSettings
from sesame.tasks.core.paths import shipped_path
from sesame.tasks.runs.runner import build_datamodule, settings_with_data, train
from torch.nn import functional as F

from tests.conftest import tsv_labels


def test_the_presets_hold_every_head_key(make_cfg):
    for task in ("glue", "text_classification"):
        head = ClassifierHeadSettings.from_config(make_cfg(f"task={task}").head)
        assert head == ClassifierHeadSettings(dropout=0.1, class_weights=None, label_smoothing=0.0)
    listed = ClassifierHeadSettings.from_config(make_cfg("head.class_weights=[1,3]").head)
    assert listed.class_weights == (1.0, 3.0)


@pytest.mark.parametrize("overrides, words", [
    (["head.class_weights=[1,2,3]"], ["head.class_weights", "3 weights for 2 labels", "(0, 1)"]),
    (["head.class_weights=heavy"], ["head.class_weights='heavy'", "balanced"]),
    (["head.class_weights=[1,-2]"], ["head.class_weights=[1.0, -2.0]", "positive"]),
    (["head.label_smoothing=1.5"], ["head.label_smoothing=1.5", "below 1"]),
    (["data=stsb", "head.label_smoothing=0.1"], ["regression", "head.label_smoothing=0"]),
    (["data=stsb", "head.class_weights=balanced"], ["regression", "head.class_weights=null"]),
])
def test_bad_loss_settings_are_config_errors(make_cfg, overrides, words):
    with pytest.raises(ConfigError) as err:
        SentenceClassificationModule(RunSettings.from_config(make_cfg(*overrides)))
    for word in words:
        assert word in str(err.value)


def test_label_smoothing_reaches_the_training_loss(make_cfg):
    """The module's training step is torch's smoothed cross-entropy of its logits (and not the plain one)."""
    # The gap between the two is the smoothing times the logits' margins: seeded, so the random head's
    # margins are the same whatever ran before in this process (1.3e-5 after some test orders)
    torch.manual_seed(0)
    cfg = make_cfg("finetune=frozen", "head.dropout=0", "head.label_smoothing=0.2")
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    module = SentenceClassificationModule(settings_with_data(RunSettings.from_config(cfg), dm))
    batch = next(iter(dm.train_dataloader()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a trainer
        loss = module.training_step(batch, 0)
    logits = module(batch)
    torch.testing.assert_close(loss, F.cross_entropy(logits, batch["labels"], label_smoothing=0.2))
    margins = (logits.max(-1).values - logits.min(-1).values).mean()
    assert margins > 1e-2, "the random head's logits are too alike to tell the two losses apart"
    assert abs(float(loss) - float(F.cross_entropy(logits, batch["labels"]))) > 1e-4


def test_label_smoothing_changes_the_logged_training_loss(make_cfg, tmp_path):
    def first_losses(name: str, *overrides: str) -> list[float]:
        train(RunSettings.from_config(make_cfg("finetune=frozen", "trainer.limit_val_batches=1", *overrides)), tmp_path / name)
        lines = (tmp_path / name / "logs" / "metrics.csv").read_text().splitlines()
        column = lines[0].split(",").index("train_loss")
        return [float(row.split(",")[column]) for row in lines[1:] if row.split(",")[column]]

    plain, smoothed = first_losses("plain"), first_losses("smoothed", "head.label_smoothing=0.3")
    assert len(plain) == len(smoothed) == 4  # trainer=debug: 4 steps, the same batches and initial weights
    assert all(abs(a - b) > 1e-4 for a, b in zip(plain, smoothed))


def _imbalanced_sst2(folder: Path) -> tuple[Path, Path]:
    """Training: 400 negative and 40 positive phrases of the shipped SST-2 slice (positives the 10%
    minority); dev: the next 100 of each, from the same slice (the dev set's full sentences read
    differently through a random encoder than the slice's phrases)."""
    rows = Path(shipped_path("glue/sst2/train.2k.tsv")).read_text(encoding="utf-8").splitlines()[1:]
    neg = [r for r in rows if r.endswith("\t0")]
    pos = [r for r in rows if r.endswith("\t1")]
    header = "sentence\tlabel\n"
    train_file, dev_file = folder / "train.tsv", folder / "dev.tsv"
    train_file.write_text(header + "\n".join(neg[:400] + pos[:40]) + "\n", encoding="utf-8")
    dev_file.write_text(header + "\n".join(neg[400:500] + pos[40:140]) + "\n", encoding="utf-8")
    return train_file, dev_file


def _recall(predictions: Path, gold: Path, label: str) -> float:
    """Recall of ``label`` in a prediction file (``index<TAB>label``), read without sesame."""
    labels = tsv_labels(gold)
    rows = [line.split("\t") for line in predictions.read_text(encoding="utf-8").splitlines()[1:]]
    hits = [pred == label for index, pred in rows if labels[int(index)] == label]
    assert hits, f"no {label!r} examples in {gold}"
    return sum(hits) / len(hits)


def test_balanced_class_weights_raise_minority_recall(make_cfg, tmp_path, caplog):
    """Same seed, data and tiny frozen encoder, trained twice: unweighted, the head predicts the 90%
    class for (almost) everything; with head.class_weights=balanced it finds minority examples. The
    features are bag-of-words (embeddings, mean-pooled) and cached, so four epochs take seconds;
    best.ckpt is picked by the minority class's F1 (data.metrics=[f1, accuracy])."""
    train_file, dev_file = _imbalanced_sst2(tmp_path)
    common = (
        "task=text_classification", f"data.train_file={train_file}", f"data.validation_file={dev_file}",
        "data.text_column=sentence", "data.metrics=[f1,accuracy]", "finetune=frozen", "fusion=embeddings",
        "pooling=mean", "cache.enabled=true", f"cache.dir={tmp_path / 'cache'}", "trainer.max_epochs=4",
        "trainer.limit_train_batches=null", "trainer.limit_val_batches=null",
    )
    recall = {}
    for name, weights in (("plain", "null"), ("weighted", "balanced")):
        with caplog.at_level(logging.INFO, logger="sesame.tasks.glue.module"):
            train(RunSettings.from_config(make_cfg(*common, f"head.class_weights={weights}")), tmp_path / name)
        recall[name] = _recall(tmp_path / name / "val_predictions.tsv", dev_file, "1")
    assert recall["weighted"] >= recall["plain"] + 0.1, recall

    # The resolved weights are sklearn's "balanced" ones over the training labels, in the checkpoint's config.
    from sklearn.utils.class_weight import compute_class_weight

    y = np.asarray(tsv_labels(train_file))
    expected = compute_class_weight("balanced", classes=np.asarray(["0", "1"]), y=y)  # 440 / (2 * [400, 40])
    _, checkpoint = read_checkpoint(tmp_path / "weighted")
    assert checkpoint["hyper_parameters"]["cfg"]["head"]["class_weights"] == pytest.approx(expected.tolist())
    _, plain = read_checkpoint(tmp_path / "plain")
    assert plain["hyper_parameters"]["cfg"]["head"]["class_weights"] is None
    assert "head.class_weights=balanced over 440 training examples" in caplog.text


def test_balanced_weights_need_every_label_in_the_training_data(make_cfg, tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("text,label\n" + "".join(f"film {i},{'good' if i % 3 else 'bad'}\n" for i in range(12)))
    cfg = make_cfg("task=text_classification", f"data.train_file={path}", f"data.validation_file={path}",
                   "data.label_names=[bad,good,meh]", "head.class_weights=balanced")
    with pytest.raises(DataError, match=r"\['meh'\] never occur in the training data .*reviews.csv.*3 weights"):
        train(RunSettings.from_config(cfg), tmp_path / "run")


def test_balanced_weights_reach_the_checkpoints_config_not_the_modules(make_cfg):
    """The resolved weights travel as a value: every checkpoint's config records them, the module's own
    config (and the hyper-parameters it was built from) still says balanced."""
    module = SentenceClassificationModule(RunSettings.from_config(make_cfg("head.class_weights=balanced")))
    weights = module.use_balanced_weights([3, 1], 4)
    assert weights == pytest.approx([4 / 6, 4 / 2])
    checkpoint = {"state_dict": {}, "hyper_parameters": dict(module.hparams)}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint["hyper_parameters"]["cfg"]["head"]["class_weights"] == weights
    assert module.settings.head.class_weights == "balanced" and module.hparams["cfg"]["head"]["class_weights"] == "balanced"
