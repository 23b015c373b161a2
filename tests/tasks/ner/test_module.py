"""NerModule end to end with the tiny random BERT: train, score, write files, reload the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from omegaconf import OmegaConf
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.ner.module import NerModule
from sesame.tasks.ner.readers import read_conll
from sesame.tasks.runs.runner import build_datamodule, settings_with_data, train
from tests.conftest import read_conll_predictions

SMALL = ["data.max_train_examples=48", "data.max_eval_examples=40", "data.batch_size=8", "data.eval_batch_size=64"]


def _assert_seqeval_scores(metrics: dict, stage: str, predictions: Path) -> None:
    """Every logged entity score (overall and per type) is seqeval's on the written prediction file."""
    from seqeval.metrics import classification_report

    _, gold, pred = read_conll_predictions(predictions)
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    per_type = {key[len(stage) + 1:-len("_f1")] for key in metrics if key.startswith(f"{stage}_") and key.endswith("_f1")} - {""}
    assert {t for t in report if " avg" not in t} <= per_type  # every type seqeval saw is reported
    want = {f"{stage}_{k}": report["micro avg"][k] for k in ("precision", "recall")}
    want[f"{stage}_f1"] = report["micro avg"]["f1-score"]
    for t in per_type:  # a type neither in the gold nor predicted scores 0
        scores = report.get(t, {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
        want |= {f"{stage}_{t}_precision": scores["precision"], f"{stage}_{t}_recall": scores["recall"],
                 f"{stage}_{t}_f1": scores["f1-score"]}
    assert {k: metrics[k] for k in want} == pytest.approx({k: float(v) for k, v in want.items()}, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("crf", [False, True])
def test_train_eval_files_and_checkpoint(make_cfg, tmp_path: Path, crf: bool) -> None:
    cfg = make_cfg(
        "task=ner",
        *SMALL,
        "data.max_seq_length=24",  # some dev sentences need two windows
        f"head.crf={str(crf).lower()}",
        "data.test_file=${data.validation_file}",
    )
    metrics = train(RunSettings.from_config(cfg), tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert "val_person_f1" in metrics and "test_creative-work_recall" in metrics  # every type of the tag set

    # The prediction file: every dev sentence, word for word, with the gold tags of the data file,
    # and the logged scores are seqeval's on it. The test file is the dev file: the same everything.
    tokens, gold, pred = read_conll_predictions(tmp_path / "val_predictions.conll")
    dev = read_conll(Path(cfg.data.validation_file))
    assert tokens == [[w.replace(" ", "_") for w in s] for s in dev.tokens[:40]]
    assert gold == dev.tags[:40]
    for stage in ("val", "test"):
        _assert_seqeval_scores(metrics, stage, tmp_path / f"{stage}_predictions.conll")
    assert (tmp_path / "test_predictions.conll").read_text() == (tmp_path / "val_predictions.conll").read_text()
    assert {k[5:]: v for k, v in metrics.items() if k.startswith("test_")} == {k[4:]: v for k, v in metrics.items() if k.startswith("val_")}
    if crf:  # the constrained CRF never predicts an I-X that does not continue an X chunk
        for seq in pred:
            for prev, cur in zip(["O", *seq], seq):
                assert not cur.startswith("I-") or prev[2:] == cur[2:], seq

    # The checkpoint rebuilds the module (tag set included) without reading the training file.
    best = tmp_path / "checkpoints" / "best.ckpt"
    assert best.is_file()
    module = load_trained(best).module
    assert module.tag_names[0] == "O" and len(module.tag_names) == 13
    assert (module.head.crf is not None) == crf
    assert "tag_names" in (tmp_path / "config.yaml").read_text()


def test_forward_loss_and_scalar_mix_weights(make_cfg, tmp_path: Path) -> None:
    cfg = make_cfg("task=ner", *SMALL, "fusion=scalar_mix")
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    cfg = OmegaConf.merge(cfg, dm.config_updates())  # what the data decides (label sets)
    module = NerModule(RunSettings.from_config(cfg))
    module.output_dir = tmp_path
    batch = next(iter(dm.train_dataloader()))
    module.eval()  # no dropout: the two forward passes below see the same logits
    logits = module(batch)
    assert logits.shape == (*batch["input_ids"].shape, len(dm.tag_names))
    loss = module.training_step(batch, 0)
    # Token cross-entropy over the labelled sub-tokens only, written out by hand.
    labelled = batch["labels"] != -100
    assert 0 < labelled.sum() < labelled.numel()
    log_probs = F.log_softmax(logits.detach().float(), dim=-1)[labelled]
    want = -log_probs.gather(1, batch["labels"][labelled].unsqueeze(1)).mean()
    assert loss.requires_grad
    torch.testing.assert_close(loss.detach(), want)
    # Fit writes the learned layer weights (one per hidden state, summing to 1).
    metrics = train(RunSettings.from_config(cfg), tmp_path)
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
    metrics = train(RunSettings.from_config(cfg), tmp_path)
    assert metrics["val_f1"] >= 0.8
    _assert_seqeval_scores(metrics, "val", tmp_path / "val_predictions.conll")  # non-zero scores, per type too


def test_unknown_entity_metric_is_an_error(make_cfg) -> None:
    cfg = make_cfg("task=ner", "task.entity_metric=lenient")
    with pytest.raises(ValueError, match="entity_metric"):
        NerModule(RunSettings.from_config(cfg))


# sesame-eval on a Hugging Face BertForTokenClassification folder (NerModule.load_hf_head) --------------


def _hf_tagger(tiny_bert_dir: Path, folder: Path, labels: list[str]) -> Path:
    from transformers import AutoTokenizer, BertForTokenClassification

    torch.manual_seed(2)
    model = BertForTokenClassification.from_pretrained(
        tiny_bert_dir, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={t: i for i, t in enumerate(labels)})
    torch.nn.init.normal_(model.classifier.weight, std=1.0)  # spread the logits: some entities get predicted
    torch.nn.init.normal_(model.classifier.bias, std=1.0)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def test_hf_token_classifier_folder_evaluates_with_transformers_logits(make_cfg, tiny_bert_dir, tmp_path, monkeypatch):
    from transformers import BertForTokenClassification

    from sesame.tasks.runs.evaluation import evaluate

    dm = build_datamodule(RunSettings.from_config(make_cfg("task=ner")))
    dm.setup("fit")
    tags = list(dm.tag_names)
    hf_order = tags[::-1]  # the folder numbers the tags otherwise than sesame does
    folder = _hf_tagger(tiny_bert_dir, tmp_path / "hf", hf_order)
    seen = []
    forward = NerModule.forward

    def recording_forward(self, batch):
        logits = forward(self, batch)
        seen.append(({k: v.clone() for k, v in batch.items()}, logits.detach().clone()))
        return logits

    monkeypatch.setattr(NerModule, "forward", recording_forward)
    metrics = evaluate(RunSettings.from_config(make_cfg("task=ner", f"++model={folder}", "data.max_eval_examples=20")), tmp_path / "eval")
    assert metrics["val_f1"] == json.loads((tmp_path / "eval" / "metrics.json").read_text())["val_f1"]
    _assert_seqeval_scores(metrics, "val", tmp_path / "eval" / "val_predictions.conll")
    _, _, pred = read_conll_predictions(tmp_path / "eval" / "val_predictions.conll")
    assert any(t != "O" for s in pred for t in s)  # entities were predicted, so a tag mix-up would show

    reference = BertForTokenClassification.from_pretrained(folder).eval()
    to_sesame = [hf_order.index(t) for t in tags]
    assert seen
    for batch, logits in seen:
        with torch.no_grad():
            out = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        real = batch["attention_mask"].bool()
        torch.testing.assert_close(logits[real], out[..., to_sesame][real], rtol=1e-5, atol=1e-5)


def test_hf_token_classifier_folder_needs_last_layer_no_crf_and_its_tags(make_cfg, tiny_bert_dir, tmp_path):
    from sesame.tasks.core.errors import ConfigError

    dm = build_datamodule(RunSettings.from_config(make_cfg("task=ner")))
    dm.setup("fit")
    folder = _hf_tagger(tiny_bert_dir, tmp_path / "hf", list(dm.tag_names))
    for override, message in (("fusion=second_to_last", "with fusion=last"), ("head.crf=true", "with head.crf=false")):
        module = NerModule(settings_with_data(RunSettings.from_config(make_cfg("task=ner", override)), dm))
        with pytest.raises(ConfigError, match=message):
            module.load_hf_head(folder)
    other = _hf_tagger(tiny_bert_dir, tmp_path / "other", ["O", "B-PER", "I-PER"])
    with pytest.raises(ConfigError, match=r"config.json: id2label holds the tags \['O', 'B-PER', 'I-PER'\]"):
        NerModule(settings_with_data(RunSettings.from_config(make_cfg("task=ner")), dm)).load_hf_head(other)
