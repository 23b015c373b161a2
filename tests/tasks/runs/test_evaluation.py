"""sesame-eval: a trained checkpoint and a Hugging Face model folder give metrics and predictions."""

import json
import sys

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from tests.conftest import SST2_DEV, prediction_accuracy
from tests import preloaded_commands as preloaded


# A run folder evaluates to its run's metrics and prediction files, for every task: tests/conformance/test_training.py.


def test_a_hugging_face_classifier_folder_evaluates(make_cfg, tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2).eval()
    # A random BERT's [CLS] state hardly depends on the sentence (spread ~1e-3), so every sentence would
    # get the same class: centre the pooler on the dev sentences' mean [CLS] state and scale it up.
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    sentences = [line.split("\t")[0] for line in SST2_DEV.read_text(encoding="utf-8").splitlines()[1:]]
    with torch.no_grad():
        batch = tokenizer(sentences[:256], truncation=True, max_length=64, padding=True, return_tensors="pt")
        cls = model.bert(**batch).last_hidden_state[:, 0].mean(0)
        model.bert.pooler.dense.weight.mul_(300.0)
        model.bert.pooler.dense.bias.copy_(-model.bert.pooler.dense.weight @ cls)
        torch.nn.init.normal_(model.classifier.weight)
    model.save_pretrained(tmp_path / "hf")
    tokenizer.save_pretrained(tmp_path / "hf")
    got = evaluate(RunSettings.from_config(make_cfg("pooling=pooler", f"++model={tmp_path / 'hf'}")), tmp_path / "eval")
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text()) == got

    # The written predictions are transformers' own argmax over the evaluated sentences (trainer=debug:
    # two batches of 128), and the accuracy is theirs against the dev labels.
    written = dict(line.split("\t") for line in (tmp_path / "eval" / "val_SST-2.tsv").read_text().splitlines()[1:])
    indices = sorted(map(int, written))
    assert len(indices) == 256
    hf = BertForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    want = []
    with torch.no_grad():
        for start in (0, 128):
            texts = [sentences[i] for i in indices[start:start + 128]]
            batch = tokenizer(texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
            want += hf(**batch).logits.argmax(-1).tolist()
    assert [int(written[str(i)]) for i in indices] == want
    assert 64 < sum(want) < 192  # both classes, often: the comparison sees which
    assert got["val_accuracy"] == pytest.approx(prediction_accuracy(tmp_path / "eval" / "val_SST-2.tsv"), rel=1e-6)


def test_the_console_script_prints_the_run_folder_last(make_cfg, tmp_path, tiny_bert_dir):
    train(RunSettings.from_config(make_cfg()), tmp_path / "run")
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.eval", f"model={tmp_path / 'run'}", f"encoder.name_or_path={tiny_bert_dir}",
         "trainer=debug", "trainer.enable_progress_bar=false", f"hydra.run.dir={tmp_path / 'eval'}"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == str(tmp_path / "eval")
    assert "val_accuracy" in json.loads((tmp_path / "eval" / "metrics.json").read_text())


def test_a_missing_checkpoint_is_one_clear_line(tmp_path):
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.eval", f"model={tmp_path / 'nope'}", f"hydra.run.dir={tmp_path / 'e'}"],
        capture_output=True, text=True,
    )
    assert out.returncode == 2
    assert "error: model=" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("overrides, expected", [([], 24), (["data.max_seq_length=40"], 40)])
def test_a_trained_model_is_evaluated_with_its_own_max_seq_length_unless_the_command_sets_one(
        make_cfg, tmp_path, monkeypatch, caplog, overrides, expected):
    from sesame.tasks.runs import evaluation

    train(RunSettings.from_config(make_cfg("data.max_seq_length=24", "data.max_train_examples=8", "data.max_eval_examples=8")), tmp_path / "run")
    seen = []
    build = evaluation.build_datamodule
    monkeypatch.setattr(evaluation, "build_datamodule", lambda cfg: seen.append(cfg.data.max_seq_length) or build(cfg))
    with caplog.at_level("INFO", logger="sesame.tasks.runs.evaluation"):
        evaluate(RunSettings.from_config(make_cfg(f"++model={tmp_path / 'run'}", "data.max_eval_examples=8", *overrides)), tmp_path / "eval",
                 overrides=overrides)
    assert seen == [expected]  # the command's default (128) is not the model's
    said = "the model's own" if not overrides else "as this command sets it (the model was trained with 24)"
    assert f"data.max_seq_length={expected}, {said}" in caplog.text
