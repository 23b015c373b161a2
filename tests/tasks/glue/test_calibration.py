"""``calibrate=true`` and the calibration error: the temperature is fitted on the dev logits, saved in
best.ckpt, and used by evaluation and export; ECE values equal a per-bin recomputation."""

import json
import logging

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import build_datamodule, train
from tests.conftest import SST2_DEV
from tests.heads.test_calibration import ece_by_loop

RUN = ["pooling=pooler", "finetune.head_lr=5e-2", "data.max_train_examples=128", "data.max_eval_examples=96",
       "trainer.max_epochs=2", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null"]


@pytest.fixture(scope="module")
def calibrated(make_cfg, tmp_path_factory):
    run = tmp_path_factory.mktemp("calibrated")
    return run, train(RunSettings.from_config(make_cfg(*RUN, "calibrate=true")), run)


def _dev_logits(make_cfg, module):
    cfg = make_cfg(*RUN)
    datamodule = build_datamodule(RunSettings.from_config(cfg))
    datamodule.setup("validate")
    logits, labels = [], []
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            logits.append(module(batch))
            labels.append(batch["labels"])
    return torch.cat(logits).double(), torch.cat(labels)


def _ece(logits, labels):
    confidence, predicted = logits.softmax(-1).max(-1)
    return ece_by_loop(confidence.tolist(), (predicted == labels).tolist())


def test_the_temperature_is_fitted_saved_and_used(make_cfg, calibrated, tmp_path):
    run, metrics = calibrated
    temperature = metrics["val_temperature"]
    assert temperature > 0 and temperature != pytest.approx(1.0, abs=1e-3)
    state = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]
    assert float(state["calibration.temperature"]) == pytest.approx(temperature, rel=1e-6)

    module = load_trained(run).module
    calibrated_logits, labels = _dev_logits(make_cfg, module)
    raw = calibrated_logits * temperature
    assert metrics["val_ece"] == pytest.approx(_ece(raw, labels), abs=1e-6)  # before: T = 1
    assert metrics["val_ece_calibrated"] == pytest.approx(_ece(calibrated_logits, labels), abs=1e-6)
    # The fitted temperature minimises the dev NLL: a nearby one does worse.
    nll = lambda t: torch.nn.functional.cross_entropy(raw / t, labels)  # noqa: E731
    assert nll(temperature) <= min(nll(temperature * 1.05), nll(temperature / 1.05))
    assert 0 <= metrics["val_ece_calibrated_crossfit"] <= 1

    evaluated = evaluate(RunSettings.from_config(make_cfg(*RUN, f"++model={run}")), tmp_path / "eval")
    assert evaluated["val_ece"] == pytest.approx(metrics["val_ece_calibrated"], abs=1e-6)
    assert evaluated["val_accuracy"] == metrics["val_accuracy"]  # dividing by T keeps the argmax


def test_the_hugging_face_export_folds_the_temperature_into_the_classifier(calibrated, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from sesame.tasks.export.hf import export_hf

    run, _ = calibrated
    export_hf(run, tmp_path / "hf")  # refuses unless transformers' logits equal sesame's
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    trained = load_trained(run)
    batch = trained.tokenizer()(["a fine film", "dull and long"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(hf(**batch).logits, trained.module(dict(batch)), atol=1e-5, rtol=1e-5)


def test_calibrate_is_refused_where_it_does_not_apply(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="data.validation_file"):
        train(RunSettings.from_config(make_cfg("calibrate=true", "data.validation_file=null")), tmp_path / "a")
    with pytest.raises(ConfigError, match="classification"):
        train(RunSettings.from_config(make_cfg("task=ner", "calibrate=true", "data.max_train_examples=16", "data.max_eval_examples=8")), tmp_path / "b")


def test_a_run_shorter_than_an_epoch_keeps_its_temperature_where_predict_and_export_read_it(make_cfg, tmp_path):
    """trainer.max_steps=2 of a 4-batch epoch: the final step is validated, saved as best.ckpt, and the
    temperature of metrics.json is the one in best.ckpt, which load_trained (predict, export) reads."""
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg("calibrate=true", "trainer.max_steps=2")), run)
    best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["global_step"] == 2
    assert float(best["state_dict"]["calibration.temperature"]) == pytest.approx(metrics["val_temperature"], rel=1e-6)
    trained = load_trained(run)
    assert trained.checkpoint.name == "best.ckpt"
    assert float(trained.module.calibration.temperature) == pytest.approx(metrics["val_temperature"], rel=1e-6)


def test_a_meaningless_calibration_is_warned_about_and_recorded(make_cfg, tmp_path, caplog):
    """A dev set of one class: no model beats always answering it, so the temperature means nothing."""
    lines = SST2_DEV.read_text(encoding="utf-8").splitlines()
    dev = tmp_path / "one_class.tsv"
    dev.write_text("\n".join([lines[0]] + [line for line in lines[1:] if line.endswith("\t1")][:40]) + "\n",
                   encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        metrics = train(RunSettings.from_config(make_cfg("calibrate=true", f"data.validation_file={dev}")), tmp_path / "run")
    assert "at chance" in metrics["val_calibration_warning"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["val_calibration_warning"] == \
        metrics["val_calibration_warning"]
    assert any("calibration is meaningless" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
