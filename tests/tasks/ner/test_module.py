"""NerModule end to end with the tiny random BERT: train, score, write files, reload the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from sesame.tasks.ner.readers import read_conll
from sesame.tasks.ner.metrics import entity_scores
from sesame.tasks.ner.module import NerModule, complete_sentences
from sesame.tasks.runner import build_datamodule, config_with_data, train

SMALL = ["data.max_train_examples=48", "data.max_eval_examples=40", "data.batch_size=8", "data.eval_batch_size=64"]


def _read_predictions(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
    tokens, gold, pred = [[]], [[]], [[]]
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            tokens.append([]), gold.append([]), pred.append([])
            continue
        t, g, p = line.split(" ")
        tokens[-1].append(t), gold[-1].append(g), pred[-1].append(p)
    return tokens[:-1], gold[:-1], pred[:-1]


@pytest.mark.parametrize("crf", [False, True])
def test_train_eval_files_and_checkpoint(make_cfg, tmp_path: Path, crf: bool) -> None:
    cfg = make_cfg(
        "task=ner",
        *SMALL,
        "data.max_seq_length=24",  # some dev sentences need two windows
        f"head.crf={str(crf).lower()}",
        "data.test_file=${data.validation_file}",
    )
    metrics = train(cfg, tmp_path)
    for stage in ("val", "test"):
        for key in ("f1", "precision", "recall", "person_f1", "creative-work_recall"):
            assert 0.0 <= metrics[f"{stage}_{key}"] <= 1.0, (stage, key)
    assert json.loads((tmp_path / "metrics.json").read_text())["val_f1"] == metrics["val_f1"]

    # The prediction file: every dev sentence, word for word, with the gold tags of the data file,
    # and scores recomputed from it equal the logged ones.
    tokens, gold, pred = _read_predictions(tmp_path / "val_predictions.conll")
    dev = read_conll(Path(cfg.data.validation_file))
    assert tokens == [[w.replace(" ", "_") for w in s] for s in dev.tokens[:40]]
    assert gold == dev.tags[:40]
    scores = entity_scores(gold, pred)
    assert scores.overall.f1 == pytest.approx(metrics["val_f1"])
    assert scores.overall.precision == pytest.approx(metrics["val_precision"])
    if crf:  # the constrained CRF never predicts an I-X that does not continue an X chunk
        for seq in pred:
            for prev, cur in zip(["O", *seq], seq):
                assert not cur.startswith("I-") or prev[2:] == cur[2:], seq

    # The checkpoint rebuilds the module (tag set included) without reading the training file.
    best = tmp_path / "checkpoints" / "best.ckpt"
    assert best.is_file()
    module = NerModule.load_from_checkpoint(best, map_location="cpu")
    assert module.tag_names[0] == "O" and len(module.tag_names) == 13
    assert (module.head.crf is not None) == crf
    assert "tag_names" in (tmp_path / "config.yaml").read_text()


def test_forward_loss_and_scalar_mix_weights(make_cfg, tmp_path: Path) -> None:
    cfg = make_cfg("task=ner", *SMALL, "fusion=scalar_mix")
    dm = build_datamodule(cfg)
    dm.setup("fit")
    cfg = config_with_data(cfg, dm)
    module = NerModule(cfg)
    module.output_dir = tmp_path
    batch = next(iter(dm.train_dataloader()))
    logits = module(batch)
    assert logits.shape == (*batch["input_ids"].shape, len(dm.tag_names))
    loss = module.training_step(batch, 0)
    assert torch.isfinite(loss) and loss.requires_grad
    # Fit writes the learned layer weights (one per hidden state, summing to 1).
    metrics = train(cfg, tmp_path)
    weights = json.loads((tmp_path / "scalar_mix_weights.json").read_text())
    assert [metrics[f"scalar_mix_weight_{i}"] for i in range(len(weights["weights"]))] == weights["weights"]
    assert len(weights["weights"]) == module.encoder.num_hidden_states
    assert sum(weights["weights"]) == pytest.approx(1.0)
    # They were trained (start uniform): the mixing weights are in the optimiser.
    uniform = 1.0 / len(weights["weights"])
    assert max(abs(w - uniform) for w in weights["weights"]) > 1e-7


@pytest.mark.parametrize("crf", [False, True])
def test_overfits_a_few_sentences(make_cfg, tmp_path: Path, crf: bool) -> None:
    """The whole path (alignment, loss, decoding, stitching, scoring) can learn: 8 training
    sentences, scored on themselves, reach a high entity F1."""
    cfg = make_cfg(
        "task=ner",
        "data.max_train_examples=8",
        "data.max_eval_examples=8",
        "data.validation_file=${data.train_file}",
        "data.batch_size=4",
        "trainer.max_epochs=20",
        "trainer.limit_train_batches=null",
        "trainer.limit_val_batches=null",
        "+trainer.check_val_every_n_epoch=20",
        "finetune.head_lr=3e-2",
        "finetune.encoder_lr=3e-3",
        "finetune.warmup_ratio=0",
        "head.dropout=0",
        f"head.crf={str(crf).lower()}",
    )
    dev = read_conll(Path(cfg.data.train_file))
    assert sum(t != "O" for tags in dev.tags[:8] for t in tags) >= 5  # there are entities to find
    metrics = train(cfg, tmp_path)
    assert metrics["val_f1"] >= 0.8


def test_complete_sentences_drops_partly_evaluated_ones() -> None:
    example = np.array([0, 0, 1, 2, 2, 2])
    word = np.array([0, 1, 0, 0, 2, 1])
    keep, complete = complete_sentences(example, word, {0: 2, 1: 3, 2: 3})
    assert complete == {0: 2, 2: 3}
    assert keep.tolist() == [True, True, False, True, True, True]
    # Without lengths from the data, the highest word seen defines the length.
    _, complete = complete_sentences(example, word)
    assert complete == {0: 2, 1: 1, 2: 3}


def test_unknown_entity_metric_is_an_error(make_cfg) -> None:
    cfg = make_cfg("task=ner", "task.entity_metric=lenient")
    with pytest.raises(ValueError, match="entity_metric"):
        NerModule(cfg)
