"""ClassificationExport (tasks/glue/export.py): probes tokenised as the predictor tokenises, multi-label
thresholds written and read back, what a prediction is, and the pipeline line of each kind of model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.glue.export import PROBES, THRESHOLDS_FILE, ClassificationExport
from sesame.tasks.glue.predict import encode_texts


def _module(labels=("a", "b", "c"), multi_label=False, pairs=False, thresholds=None):
    return SimpleNamespace(label_names=None if labels is None else list(labels), multi_label=multi_label,
                           thresholds=thresholds, spec=SimpleNamespace(text_b="b" if pairs else None))


@pytest.fixture(scope="module")
def settings(make_cfg):
    return RunSettings.from_config(make_cfg("data.max_seq_length=9", "data.label_names=[a,b,c]"))


def test_the_probes_are_the_predictors_tokenisation_of_single_texts_and_pairs(settings, tiny_bert_dir):
    tokenizer = load_tokenizer(str(tiny_bert_dir))
    for pairs in (False, True):
        batch = ClassificationExport(settings, _module(pairs=pairs)).probe_batch(tokenizer, (2, 3, 2))
        enc = encode_texts(tokenizer, [PROBES[i][0] for i in (2, 3, 2)],
                           [PROBES[i][1] for i in (2, 3, 2)] if pairs else None, 9)
        assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"}
        assert batch["input_ids"].shape == (3, 9)  # probe 2 is cut at data.max_seq_length
        for row, ids in enumerate(enc["input_ids"]):
            assert batch["input_ids"][row, : len(ids)].tolist() == ids
            assert batch["attention_mask"][row].sum() == len(ids)
        assert bool(batch["token_type_ids"].any()) == pairs  # segment B only for a pair task


def test_multi_label_thresholds_are_written_read_back_and_decide(settings, tmp_path):
    export = ClassificationExport(settings, _module(multi_label=True, thresholds=torch.tensor([0.25, 0.5, 0.75])))
    assert export.report_entries() == {"decision_thresholds": {"a": 0.25, "b": 0.5, "c": 0.75}}
    assert export.write_files(tmp_path) == [THRESHOLDS_FILE]
    runner_side = ClassificationExport(settings)  # the ONNX runner's: settings only
    assert runner_side.decoding_state(tmp_path)["thresholds"].tolist() == [0.25, 0.5, 0.75]
    logits = torch.logit(torch.tensor([[0.3, 0.4, 0.8]]))
    assert export.predictions((logits,), {}).tolist() == [[True, False, True]]

    single = ClassificationExport(settings, _module())
    assert single.write_files(tmp_path / "none") == [] and single.report_entries() == {}
    assert single.decoding_state(tmp_path / "none") == {}
    assert single.predictions((logits,), {}).tolist() == [2]
    assert ClassificationExport(settings, _module(labels=None)).predictions((logits[:, :1],), {}) is None  # regression


def test_the_card_and_snippet_say_what_kind_of_classifier_it_is(settings):
    regression = ClassificationExport(settings, _module(labels=None))
    assert regression.label_row() == ("labels", "none (regression: one score)")
    assert 'function_to_apply="none"' in regression.hf_usage("out", regression.example_input())
    multi = ClassificationExport(settings, _module(multi_label=True, thresholds=torch.zeros(3)))
    assert multi.label_row() == ("labels (multi-label)", ["a", "b", "c"])
    assert "top_k=None" in multi.pipeline_call(multi.example_input())
    pairs = ClassificationExport(settings, _module(pairs=True))
    assert pairs.example_input() == {"text": pairs.example["text"], "text_pair": pairs.example_pair}
    assert pairs.pipeline_call(pairs.example_input()) == f"print(run({pairs.example_input()!r}))"
    assert pairs.title() == "glue (sst2)"
