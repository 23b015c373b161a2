"""``--format hf``: transformers' own task models (and pipelines) give sesame's outputs on real dev
examples, with the label names in id2label; settings that do not map are refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import TrainedModel, build_module
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.export.hf import build_hf_model, export_hf
from tests.conftest import SST2_DEV, require
from tests.tasks.export.conftest import dev_data

ATOL = 1e-5


def _inputs(batch: dict) -> dict:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}


def test_sequence_classification_is_transformers_model_and_pipeline(loaded, tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification, pipeline

    trained = loaded("glue")
    report = export_hf(trained.checkpoint, tmp_path / "hf")
    assert report["architecture"] == "BertForSequenceClassification" and report["max_abs_diff"] < ATOL
    hf = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    assert hf.config.id2label == {0: "0", 1: "1"} and hf.config.label2id == {"0": 0, "1": 1}

    batches, _ = dev_data(trained, batch_size=8, limit=16)
    predicted: dict[int, str] = {}
    with torch.inference_mode():
        for batch in batches:
            ours = trained.module(batch)
            torch.testing.assert_close(hf(**_inputs(batch)).logits, ours, atol=ATOL, rtol=0)
            predicted |= {int(i): trained.module.label_names[int(p)] for i, p in zip(batch["index"], ours.argmax(-1))}

    # transformers' pipeline on the raw dev sentences (sesame truncates at data.max_seq_length: so does it here).
    rows = SST2_DEV.read_text(encoding="utf-8").splitlines()[1:]
    indices = sorted(predicted)
    classify = pipeline("text-classification", model=str(tmp_path / "hf"), device="cpu")
    out = classify([rows[i].split("\t")[0] for i in indices], truncation=True, max_length=trained.cfg["data"]["max_seq_length"])
    assert [o["label"] for o in out] == [predicted[i] for i in indices]
    readme = (tmp_path / "hf" / "README.md").read_text()
    assert "pooling | pooler" in readme and "val_accuracy" in readme


def test_question_answering_logits_on_the_context(loaded, tmp_path: Path) -> None:
    from transformers import AutoModelForQuestionAnswering

    trained = loaded("qa")
    export_hf(trained.checkpoint, tmp_path / "hf")
    hf = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
    batches, _ = dev_data(trained, batch_size=8, limit=6)
    with torch.inference_mode():
        for batch in batches:
            start, end = trained.module(batch)
            out = hf(**_inputs(batch))
            context = batch["context_mask"].bool()  # sesame masks everything else; transformers does not
            assert context.any()
            torch.testing.assert_close(out.start_logits[context], start[context], atol=ATOL, rtol=0)
            torch.testing.assert_close(out.end_logits[context], end[context], atol=ATOL, rtol=0)
            # so the best span inside the context is the same
            fill = torch.finfo(start.dtype).min
            assert torch.equal(out.start_logits.masked_fill(~context, fill).argmax(-1), start.argmax(-1))
            assert torch.equal(out.end_logits.masked_fill(~context, fill).argmax(-1), end.argmax(-1))


def test_token_classification_is_transformers_model_and_pipeline(loaded, tmp_path: Path) -> None:
    """The pipeline runs with ``aggregation_strategy="none"`` on the sentences' own words
    (``is_split_into_words=True``, so the sub-tokens are sesame's) and ``ignore_labels=[]``: it then
    returns every sub-token's argmax tag with its position, and sesame's tag for a word is its first
    sub-token's argmax, read here at exactly that position. ``first`` would read the same sub-token
    but finds word starts by comparing token and text lengths (a heuristic) and merges words into
    entity groups, so it cannot be compared word for word."""
    from transformers import AutoModelForTokenClassification, pipeline

    trained = loaded("ner")
    export_hf(trained.checkpoint, tmp_path / "hf")
    hf = AutoModelForTokenClassification.from_pretrained(tmp_path / "hf").eval()
    names = trained.module.tag_names
    assert hf.config.id2label == dict(enumerate(names)) and len(names) == 13

    batches, dm = dev_data(trained, batch_size=8, limit=12)
    words_tags: dict[int, dict[int, str]] = {}
    windows: dict[int, int] = {}
    with torch.inference_mode():
        for batch in batches:
            logits = trained.module(batch)
            real = batch["attention_mask"].bool()
            torch.testing.assert_close(hf(**_inputs(batch)).logits[real], logits[real], atol=ATOL, rtol=0)
            first = batch["word_index"] >= 0
            tags = trained.module.head.decode(logits, first)
            for row in range(len(tags)):
                ex = int(batch["example_index"][row])
                windows[ex] = windows.get(ex, 0) + 1
                for pos in first[row].nonzero().flatten().tolist():
                    words_tags.setdefault(ex, {})[int(batch["word_index"][row, pos])] = names[int(tags[row, pos])]

    sentences = sorted(ex for ex, n in windows.items() if n == 1)[:6]  # whole sentences in one window
    assert sentences
    tokenizer = trained.tokenizer()
    tagger = pipeline("token-classification", model=str(tmp_path / "hf"), aggregation_strategy="none",
                      ignore_labels=[], device="cpu")
    for ex in sentences:
        words = dm.examples["validation"].tokens[ex]
        by_position = {e["index"]: e["entity"] for e in tagger([words], is_split_into_words=True)[0]}
        word_ids = tokenizer(words, is_split_into_words=True).word_ids()
        first_token = {w: i for i, w in reversed(list(enumerate(word_ids))) if w is not None}
        assert [by_position[first_token[w]] for w in range(len(words))] == [words_tags[ex][w] for w in range(len(words))]


def _module(make_cfg, *overrides: str) -> TrainedModel:
    settings = RunSettings.from_config(make_cfg(*overrides))
    return TrainedModel(build_module(settings).eval(), settings, Path("none.ckpt"), "", "")


@pytest.mark.parametrize("overrides, reason", [
    (["pooling=cls"], r"pooling=cls: sesame's classifier reads the \[CLS\] vector directly, but "
                      r"BertForSequenceClassification puts the encoder's pooler \(dense \+ tanh\)"),
    (["pooling=mean"], r"pooling=mean: the sentence vector is the average of every token's features"),
    (["pooling=pooler", "fusion=scalar_mix"], r"fusion.mode=scalar_mix: the head reads a learned, softmax-weighted mix "
                                              r"of all 5 hidden states"),
    (["pooling=pooler", "fusion=second_to_last"], r"fusion.mode=second_to_last: the head reads the second-to-last layer"),
    (["task=ner", "head.crf=true"], r"head.crf=true: the tags are decoded by a CRF"),
    (["task=squad_v1", "data=squad_v1_slice", "fusion=concat_last_4"], r"fusion.mode=concat_last_4"),
])
def test_settings_that_do_not_map_are_refused_with_the_reason(make_cfg, overrides, reason) -> None:
    with pytest.raises(ConfigError, match=reason) as err:
        build_hf_model(_module(make_cfg, *overrides))
    assert "--format onnx" in str(err.value) and "run folder" in str(err.value)


def test_the_last_layer_named_explicitly_maps(make_cfg, tiny_bert_dir) -> None:
    """fusion=layers reading only the last hidden state is fusion=last: it maps."""
    from transformers import AutoTokenizer

    trained = _module(make_cfg, "pooling=pooler", "fusion=layers", "fusion.layers=[-1]")
    hf = build_hf_model(trained)
    batch = dict(AutoTokenizer.from_pretrained(tiny_bert_dir)(["a fine film", "dull"], padding=True, return_tensors="pt"))
    with torch.inference_mode():
        torch.testing.assert_close(hf(**batch).logits, trained.module(batch), atol=ATOL, rtol=0)


def test_the_exported_model_has_transformers_own_attention_not_sesames_training_one(make_cfg) -> None:
    """encoder.low_precision_attention gives sesame's encoder its own attention name; transformers' model built from it
    (and the Trainer side of benchmarks/step_profile.py) runs transformers' SDPA, as the exported folder loads."""
    trained = _module(make_cfg, "pooling=pooler")
    assert trained.module.encoder.model.config._attn_implementation == "sesame_sdpa"
    assert build_hf_model(trained).config._attn_implementation == "sdpa"
    assert trained.module.encoder.model.config._attn_implementation == "sesame_sdpa"  # sesame's own is left alone


def test_regression_maps_onto_one_output(make_cfg, tiny_bert_dir) -> None:
    from transformers import AutoTokenizer

    trained = _module(make_cfg, "data=stsb", "pooling=pooler")
    hf = build_hf_model(trained)
    assert hf.config.num_labels == 1 and hf.config.problem_type == "regression"
    batch = dict(AutoTokenizer.from_pretrained(tiny_bert_dir)(["a man is eating", "a man eats"], ["food", "a meal"],
                                                             padding=True, return_tensors="pt"))
    with torch.inference_mode():
        torch.testing.assert_close(hf(**batch).logits, trained.module(batch), atol=ATOL, rtol=0)


def test_roberta_style_heads_take_the_pooler_as_their_dense_layer(make_cfg, tiny_bert_dir, tmp_path) -> None:
    """RobertaForSequenceClassification's head is dense + tanh on <s>, then out_proj: sesame's
    pooling=pooler (the trained pooler, then the classifier) goes into it exactly."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=520, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    RobertaModel(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    trained = _module(make_cfg, "pooling=pooler", f"encoder.name_or_path={tmp_path / 'roberta'}")
    with torch.no_grad():  # a trained pooler and head, not the pretrained ones
        trained.module.pooling.dense.weight.normal_()
        trained.module.head.classifier.bias.fill_(0.3)
    hf = build_hf_model(trained)
    assert type(hf).__name__ == "RobertaForSequenceClassification"
    batch = dict(tokenizer(["a fine film", "dull and long"], padding=True, return_tensors="pt"))
    with torch.inference_mode():
        torch.testing.assert_close(hf(**batch).logits, trained.module(batch), atol=ATOL, rtol=0)


def test_lora_adapters_are_merged_into_the_weights(make_cfg, tiny_bert_dir) -> None:
    from transformers import AutoTokenizer

    require("peft")
    trained = _module(make_cfg, "task=ner", "finetune=lora")
    with torch.no_grad():  # trained adapters (peft starts lora_B at zero, which would hide a missed merge)
        for name, param in trained.module.named_parameters():
            if "lora_B" in name:
                param.normal_()
    hf = build_hf_model(trained)
    assert not any("lora" in name for name in hf.state_dict())
    batch = dict(AutoTokenizer.from_pretrained(tiny_bert_dir)(["a fine film", "dull"], padding=True, return_tensors="pt"))
    with torch.inference_mode():
        real = batch["attention_mask"].bool()  # a tagger's logits at padding are read by nothing
        torch.testing.assert_close(hf(**batch).logits[real], trained.module(batch)[real], atol=ATOL, rtol=0)
