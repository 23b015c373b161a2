"""GLUE pair tasks, regression, generic tables, and parity with transformers' own classifier."""

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.runner import build_datamodule, settings_with_data, train


def test_rte_pairs_go_in_as_segments_a_and_b(make_cfg, tmp_path):
    path = tmp_path / "rte.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n0\tthe cat sat\ta cat\tentailment\n")
    cfg = make_cfg("data=rte", f"data.train_file={path}", f"data.validation_file={path}")
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    row = dm.splits["train"][0]
    assert row["token_type_ids"].count(1) == len(dm.tokenizer("a cat")["input_ids"]) - 1  # B tokens + final [SEP]


def test_stsb_regression_end_to_end(make_cfg, tmp_path):
    path = tmp_path / "stsb.tsv"
    rows = [f"{i}\tg\tf\t2012\t{i}\tn\tn\ta man is {w}\ta man {w}\t{i % 5}.0" for i, w in enumerate(["running", "eating", "here", "away", "home", "up"] * 5)]
    path.write_text("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n" + "\n".join(rows) + "\n")
    metrics = train(RunSettings.from_config(make_cfg("data=stsb", f"data.train_file={path}", f"data.validation_file={path}")), tmp_path / "run")
    assert {"val_pearson", "val_spearmanr"} <= set(metrics)
    lines = (tmp_path / "run" / "val_STS-B.tsv").read_text().splitlines()
    float(lines[1].split("\t")[1])


def test_text_classification_takes_labels_from_the_training_file(make_cfg, tmp_path):
    path = tmp_path / "reviews.jsonl"
    path.write_text("\n".join('{"review": "%s", "stars": "%s"}' % (t, s) for t, s in [("great film", "good"), ("dull", "bad"), ("fine", "meh")] * 4))
    cfg = make_cfg(
        "task=text_classification", f"data.train_file={path}", f"data.validation_file={path}",
        "data.text_column=review", "data.label_column=stars",
    )
    metrics = train(RunSettings.from_config(cfg), tmp_path / "run")
    assert "val_accuracy" in metrics
    assert "label_names:\n  - bad\n  - good\n  - meh" in (tmp_path / "run" / "config.yaml").read_text()


def test_pooler_matches_transformers_bert_for_sequence_classification(make_cfg, tiny_bert_dir, tmp_path):
    """A BertForSequenceClassification folder + pooling=pooler gives transformers' own logits."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    from sesame.tasks.glue.module import SentenceClassificationModule

    torch.manual_seed(1)
    hf = BertForSequenceClassification.from_pretrained(tiny_bert_dir, num_labels=2).eval()
    hf.save_pretrained(tmp_path / "hf")
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(tmp_path / "hf")
    cfg = make_cfg("pooling=pooler", f"encoder.name_or_path={tmp_path / 'hf'}")
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    module = SentenceClassificationModule(settings_with_data(RunSettings.from_config(cfg), dm))
    module.load_hf_head(tmp_path / "hf")
    module.eval()
    batch = dm.tokenizer(["a gripping film", "not good at all , sadly"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(module(dict(batch)), hf(**batch).logits)


def test_pooler_on_an_encoder_without_one_is_a_clear_error(make_cfg, tiny_bert_dir, tmp_path):
    from transformers import BertModel

    from sesame.tasks.glue.module import SentenceClassificationModule

    BertModel.from_pretrained(tiny_bert_dir, add_pooling_layer=False).save_pretrained(tmp_path / "nopool")
    cfg = make_cfg("pooling=pooler", f"encoder.name_or_path={tmp_path / 'nopool'}")
    with pytest.raises(ValueError, match="has no pooler"):
        SentenceClassificationModule(RunSettings.from_config(cfg))


def test_mnli_scores_matched_and_mismatched(make_cfg, tmp_path):
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tgold_label\n"
    rows = [("a man sleeps", "a man is awake", "contradiction"), ("a dog runs", "an animal moves", "entailment"),
            ("kids play", "it is sunny", "neutral")] * 4
    def write(name, genre):
        path = tmp_path / name
        path.write_text(header + "".join(f"{i}\t0\t0\t{genre}\t{a}\t{b}\t{g}\n" for i, (a, b, g) in enumerate(rows)))
        return path
    cfg = make_cfg("data=mnli", f"data.train_file={write('train.tsv', 'fiction')}",
                   f"data.validation_file={write('m.tsv', 'fiction')}",
                   f"data.validation_mismatched_file={write('mm.tsv', 'letters')}")
    metrics = train(RunSettings.from_config(cfg), tmp_path / "run")
    assert {"val_accuracy", "val_mm_accuracy", "val_loss", "val_mm_loss"} <= set(metrics)
    for name in ("val_MNLI-m.tsv", "val_mm_MNLI-mm.tsv"):
        lines = (tmp_path / "run" / name).read_text().splitlines()
        assert len(lines) == 13 and lines[1].split("\t")[1] in ("contradiction", "entailment", "neutral")


def test_label_names_set_the_order_and_names_of_a_tables_labels(make_cfg, tmp_path):
    """README "Training options": data.label_names fixes the class ids (the order of class weights and of
    the predictions' probabilities) instead of the sorted label values of the training file."""
    from sesame.tasks.inference.predictor import Predictor

    path = tmp_path / "reviews.jsonl"
    path.write_text("\n".join('{"review": "%s", "stars": "%s"}' % (t, s) for t, s in [("great film", "good"), ("dull", "bad"), ("fine", "meh")] * 4))
    cfg = make_cfg("task=text_classification", f"data.train_file={path}", f"data.validation_file={path}",
                   "data.text_column=review", "data.label_column=stars", "data.label_names=[meh,good,bad]")
    train(RunSettings.from_config(cfg), tmp_path / "run")
    assert "label_names:\n  - meh\n  - good\n  - bad" in (tmp_path / "run" / "config.yaml").read_text()
    [out] = Predictor.from_run(tmp_path / "run")([{"text": "fine"}])
    assert list(out["probabilities"]) == ["meh", "good", "bad"]
