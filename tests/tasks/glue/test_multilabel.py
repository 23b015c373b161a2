"""task=text_classification with data.multi_label=true: label sets, BCE training, per-label thresholds
tuned on dev and saved in best.ckpt, micro / macro F1 checked against scikit-learn on the written files.

The data (tests/fixtures/multilabel/) is synthetic: template sentences labelled with the aspects
they mention (see generate.py there).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained, read_checkpoint
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.glue.metrics import multilabel_metrics, tune_thresholds
from sesame.tasks.runs.runner import build_datamodule, train

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "multilabel"
TRAIN, DEV = FIXTURES / "train.tsv", FIXTURES / "dev.tsv"
LABELS = ["acting", "music", "story", "visuals"]


def multi_label_cfg(make_cfg, train_file=TRAIN, dev_file=DEV, *overrides):
    return make_cfg(
        "task=text_classification", f"data.train_file={train_file}", f"data.validation_file={dev_file}",
        "data.label_column=labels", "data.multi_label=true", "data.metrics=[f1_micro,f1_macro]", *overrides,
    )


def read_label_sets(path: Path, column: int) -> list[set[str]]:
    """Each data row's label set from a TSV with a header, labels joined by "|", read without sesame."""
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    return [{label for label in row.split("\t")[column].split("|") if label} for row in rows]


def multi_hot(sets: list[set[str]]) -> np.ndarray:
    return np.array([[name in s for name in LABELS] for s in sets], dtype=int)


@pytest.fixture(scope="module")
def trained_run(make_cfg, tmp_path_factory):
    """One multi-label run: the tiny encoder fine-tuned for ten epochs of 5 batches (a few seconds);
    it learns the aspects well but not perfectly (dev F1 about 0.8, about 0.7 at 0.5)."""
    folder = tmp_path_factory.mktemp("multilabel")
    cfg = multi_label_cfg(
        make_cfg, TRAIN, DEV, "finetune=full", "finetune.encoder_lr=0.01", "finetune.head_lr=0.01", "pooling=mean",
        "trainer.max_epochs=10", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null",
    )
    metrics = train(RunSettings.from_config(cfg), folder / "run")
    return folder / "run", metrics


def test_f1_of_the_written_predictions_is_scikit_learns(trained_run):
    from sklearn.metrics import f1_score

    run, metrics = trained_run
    assert {"val_f1_micro", "val_f1_macro", "val_f1_micro_at_0.5", "val_f1_macro_at_0.5", "val_loss"} <= set(metrics)
    assert metrics["val_examples_scored"] == 60
    assert 0.5 < metrics["val_f1_micro"] < 1 and 0.3 < metrics["val_f1_micro_at_0.5"] < 1  # it learned, not all
    gold = multi_hot(read_label_sets(DEV, column=1))
    written = {int(row.split("\t")[0]): row.split("\t")[1] for row in (run / "val_predictions.tsv").read_text().splitlines()[1:]}
    assert sorted(written) == list(range(60))
    pred = multi_hot([{label for label in written[i].split("|") if label} for i in range(60)])
    for average in ("micro", "macro"):
        want = f1_score(gold, pred, average=average, zero_division=0)
        assert metrics[f"val_f1_{average}"] == pytest.approx(want, abs=1e-6)
    # Each label's threshold maximises that label's F1 on dev, so the macro F1 at the tuned thresholds
    # is at least the one at 0.5.
    assert metrics["val_f1_macro"] >= metrics["val_f1_macro_at_0.5"] - 1e-6
    assert "label_names:\n  - acting\n  - music\n  - story\n  - visuals" in (run / "config.yaml").read_text()


def test_best_checkpoint_holds_the_thresholds_the_predictions_used(trained_run):
    """Rebuilt from best.ckpt, the model's dev probabilities at its saved thresholds are the written
    predictions, and at 0.5 they score the logged F1 at 0.5."""
    from sklearn.metrics import f1_score

    run, metrics = trained_run
    _, checkpoint = read_checkpoint(run)
    saved = checkpoint["state_dict"]["head.thresholds"]
    written = json.loads((run / "val_thresholds.json").read_text())
    assert list(written) == LABELS
    assert saved.tolist() == pytest.approx(list(written.values()), abs=0)
    assert saved.tolist() != [0.5] * 4  # tuned

    trained = load_trained(run)
    assert trained.module.multi_label and torch.equal(trained.module.thresholds, saved)
    dm = build_datamodule(RunSettings.from_config(OmegaConf.create({**trained.cfg, "data": {**trained.cfg["data"], "train_file": None}})))
    dm.setup("validate")
    index, probs = [], []
    with torch.no_grad():  # the same length-sorted batches as the evaluation: the same float32 values
        for batch in dm.val_dataloader():
            index.append(batch["index"])
            probs.append(trained.module.head.probabilities(trained.module(batch).float()))
    order = torch.cat(index).argsort()
    probs = torch.cat(probs)[order]
    decided = trained.module.head.decide(probs).numpy().astype(int)
    rows = (run / "val_predictions.tsv").read_text().splitlines()[1:]
    assert (decided == multi_hot([{lab for lab in r.split("\t")[1].split("|") if lab} for r in rows])).all()
    gold = multi_hot(read_label_sets(DEV, column=1))
    at_half = (probs.numpy() >= 0.5).astype(int)
    for average in ("micro", "macro"):
        assert metrics[f"val_f1_{average}_at_0.5"] == pytest.approx(f1_score(gold, at_half, average=average, zero_division=0), abs=1e-6)


def test_evaluation_uses_the_saved_thresholds(make_cfg, trained_run, tmp_path):
    run, metrics = trained_run
    got = evaluate(RunSettings.from_config(multi_label_cfg(make_cfg, TRAIN, DEV, f"++model={run}")), tmp_path / "eval")
    assert got["val_f1_micro"] == metrics["val_f1_micro"] and got["val_f1_macro"] == metrics["val_f1_macro"]
    assert (tmp_path / "eval" / "val_predictions.tsv").read_text() == (run / "val_predictions.tsv").read_text()
    assert (tmp_path / "eval" / "val_thresholds.json").read_text() == (run / "val_thresholds.json").read_text()


def test_tuned_thresholds_maximise_each_labels_f1():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(0)
    gold = rng.random((80, 5)) < [0.1, 0.3, 0.5, 0.05, 0.0]
    probs = np.clip(gold * 0.3 + rng.random((80, 5)) * 0.7, 0, 1).astype(np.float32)
    probs[:10, 2] = 0.5  # ties
    thresholds = tune_thresholds(probs, gold)
    assert thresholds.dtype == np.float32 and thresholds[4] == np.float32(0.5)  # no positives: the default
    for c in range(4):
        best = max(f1_score(gold[:, c], probs[:, c] >= t, zero_division=0) for t in np.unique(probs[:, c]))
        assert f1_score(gold[:, c], probs[:, c] >= thresholds[c], zero_division=0) == pytest.approx(best)
    metrics = multilabel_metrics(probs, gold, thresholds)
    for average in ("micro", "macro"):
        want = f1_score(gold, probs >= thresholds, average=average, zero_division=0)
        assert metrics[f"f1_{average}"] == pytest.approx(want, abs=1e-6)
        half = f1_score(gold, probs >= 0.5, average=average, zero_division=0)
        assert metrics[f"f1_{average}_at_0.5"] == pytest.approx(half, abs=1e-6)


def test_json_lines_lists_and_the_label_set(make_cfg, tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [("a fine cast", ["acting"]), ("great music and story", ["music", "story"]), ("nothing", [])] * 2
    path.write_text("".join(json.dumps({"text": t, "labels": labels}) + "\n" for t, labels in rows))
    dm = build_datamodule(RunSettings.from_config(multi_label_cfg(make_cfg, path, path, "data.batch_size=3")))
    dm.setup("fit")
    assert dm.spec.labels == ("acting", "music", "story")
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (3, 3)
    assert dm.splits["train"]["labels"][:3] == [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    counts, n = dm.label_counts()
    assert counts.tolist() == [2, 2, 2] and n == 6


def test_a_dev_label_outside_the_label_set_names_file_line_and_column(make_cfg, tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabels\nthe cast is good\tacting\nthe plot is dull\tstory|aliens\n")
    dm = build_datamodule(RunSettings.from_config(multi_label_cfg(make_cfg, TRAIN, dev)))
    with pytest.raises(DataError, match=r"dev.tsv:3: unknown label 'aliens' in column 'labels'"):
        dm.setup("fit")


@pytest.mark.parametrize("overrides, words", [
    (["data.metrics=[accuracy]"], ["data.metrics=['accuracy']", "f1_micro/f1_macro", "data.metrics=[f1_micro,f1_macro]"]),
    (["data.regression=true"], ["data.regression=true", "data.multi_label=true"]),
    (["data.multi_label=false"], ["['f1_micro', 'f1_macro'] cannot score single-label"]),
])
def test_metrics_must_fit_multi_label(make_cfg, overrides, words):
    with pytest.raises(ConfigError) as err:
        build_datamodule(RunSettings.from_config(multi_label_cfg(make_cfg, TRAIN, DEV, *overrides)))
    for word in words:
        assert word in str(err.value)


def test_balanced_weights_are_positive_weights_per_label(make_cfg, tmp_path):
    cfg = multi_label_cfg(make_cfg, TRAIN, DEV, "head.class_weights=balanced", "finetune=frozen")
    train(RunSettings.from_config(cfg), tmp_path / "run")
    _, checkpoint = read_checkpoint(tmp_path / "run")
    gold = multi_hot(read_label_sets(TRAIN, column=1))
    positives = gold.sum(axis=0)
    want = (len(gold) - positives) / positives  # BCE's pos_weight: negatives / positives
    assert checkpoint["hyper_parameters"]["cfg"]["head"]["class_weights"] == pytest.approx(want.tolist())
