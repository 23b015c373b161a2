"""The SQuAD data settings and data module (tasks/qa/data.py), on tmp files and real dev questions."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.qa.data import SquadDataModule, SquadDataSettings
from sesame.tasks.runs.runner import build_datamodule

from .conftest import CTX, qa, squad_obj, squad_settings


def datamodule(tokenizer, **data) -> SquadDataModule:
    return SquadDataModule(squad_settings(**data), tokenizer, seed=0)


# Settings --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [("task=squad_v1",), ("task=squad_v1", "data=squad_v1"), ("task=squad_v2",)])
def test_presets_build_their_settings(make_cfg, overrides):
    cfg = make_cfg(*overrides)
    settings = SquadDataSettings.from_config(cfg.data)
    assert settings.as_dict() == {k: cfg.data[k] for k in cfg.data}
    assert settings.version_2_with_negative == (overrides[0] == "task=squad_v2")


def test_unknown_data_key_is_named(make_cfg, tokenizer):
    cfg = make_cfg("task=squad_v1", "+data.doc_strid=64")
    with pytest.raises(ConfigError, match=r"data\.doc_strid"):
        build_datamodule(RunSettings.from_config(cfg), tokenizer)


def test_bad_settings_are_config_errors(tokenizer):
    with pytest.raises(ConfigError, match=r"data\.on_bad_example must be one of"):
        squad_settings(on_bad_example="ignore")
    with pytest.raises(ConfigError, match=r"missing setting data\.doc_stride"):
        SquadDataSettings.from_config({k: v for k, v in squad_settings().as_dict().items() if k != "doc_stride"})
    with pytest.raises(ConfigError, match=r"data\.max_seq_length='long': expected an integer"):
        squad_settings(max_seq_length="long")
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    with pytest.raises(ConfigError, match="no pad token"):
        SquadDataModule(squad_settings(), no_pad, seed=0)


def test_datamodule_rejects_windows_longer_than_the_encoder(tokenizer):
    with pytest.raises(ConfigError, match="exceeds the encoder's 512 positions"):
        datamodule(tokenizer, max_seq_length=1024)


# DataModule ------------------------------------------------------------------------------------------
def test_question_too_long(write_json, tokenizer):
    long_q = "why " * 40
    obj = squad_obj((CTX, [qa("short", "When?", CTX, "1903"), qa("long", long_q, CTX, "1911")]))
    data = {"validation_file": str(write_json(obj)), "max_seq_length": 48, "doc_stride": 8}
    with pytest.raises(DataError, match="'long' has 40 tokens.*raise data.max_seq_length"):
        datamodule(tokenizer, **data).setup("validate")
    dm = datamodule(tokenizer, **data, on_bad_example="skip")
    dm.setup("validate")
    assert dm.examples("validation")["id"] == ["short"] and dm.reports["validation"].skipped == 1


def test_datamodule_batches(write_json, real_dev_v1, tokenizer):
    path = str(write_json(real_dev_v1))
    dm = datamodule(tokenizer, train_file=path, validation_file=path, max_seq_length=128, doc_stride=32,
                    batch_size=4, eval_batch_size=8, max_train_examples=10, max_eval_examples=None,
                    drop_train_overlap=False)
    dm.setup("fit")
    assert len(dm.examples("train")) == 10
    assert len(dm.examples("validation")) == sum(len(p["qas"]) for p in real_dev_v1["data"][0]["paragraphs"])
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "context_mask", "example_index",
                          "feature_index", "start_positions", "end_positions"}
    # v1's default trains every window, those without the answer pointing at [CLS] (as run_qa.py)
    assert dm.settings.train_windows == "all" and (batch["start_positions"] >= 0).all()
    lengths = []
    for batch in dm.val_dataloader():
        T = batch["input_ids"].shape[1]
        assert batch["offsets"].shape == (batch["input_ids"].shape[0], T, 2)
        assert batch["attention_mask"].sum(1).max() == T  # padded to the batch's longest, not to 128
        assert (batch["input_ids"][batch["attention_mask"] == 0] == tokenizer.pad_token_id).all()
        assert (batch["offsets"][batch["attention_mask"] == 0] == -1).all()
        lengths += batch["attention_mask"].sum(1).tolist()
    assert lengths == sorted(lengths, reverse=True) and len(set(lengths)) > 1
    assert len(lengths) == len(dm.windows("validation"))


def test_datamodule_v2_keeps_null_windows(write_json, real_dev_v2, tokenizer):
    path = str(write_json(real_dev_v2))
    dm = datamodule(tokenizer, train_file=path, version_2_with_negative=True, max_seq_length=96, doc_stride=32,
                    batch_size=1000, train_windows="all")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    impossible = torch.tensor([not dm.examples("train")[i]["answers"]["text"] for i in batch["example_index"].tolist()])
    assert (batch["start_positions"][impossible] == 0).all() and impossible.any()
    assert (batch["start_positions"][~impossible] == 0).any() and (batch["start_positions"][~impossible] > 0).any()
    assert not dm.has_split("validation")
    # with_answer leaves out the answerable questions' windows without the answer, not the unanswerable ones
    kept = datamodule(tokenizer, train_file=path, version_2_with_negative=True, max_seq_length=96, doc_stride=32,
                      batch_size=1000, train_windows="with_answer")
    kept.setup("fit")
    labels = next(iter(kept.train_dataloader()))
    answerable = torch.tensor([bool(kept.examples("train")[i]["answers"]["text"]) for i in labels["example_index"].tolist()])
    assert (labels["start_positions"][answerable] > 0).all()
    assert int((~answerable).sum()) == int(impossible.sum())
    assert len(labels["start_positions"]) == len(batch["start_positions"]) - int(((batch["start_positions"] == 0) & ~impossible).sum())


@pytest.mark.parametrize("train_windows", ["with_answer", "all"])
def test_v1_train_windows_setting(write_json, real_dev_v1, tokenizer, train_windows):
    """train_windows=all keeps v1 windows without the answer, labelled [CLS], and the v1 head then keeps
    [CLS] as a target (it would be -inf, an infinite loss); with_answer drops them and masks [CLS]."""
    from sesame.heads.span_pointer import SpanPointerHead

    path = str(write_json(real_dev_v1))
    dm = datamodule(tokenizer, train_file=path, max_seq_length=96, doc_stride=32, batch_size=1000,
                    train_windows=train_windows)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert ((batch["start_positions"] == 0).any()) == (train_windows == "all")
    assert dm.settings.trains_null == (train_windows == "all")
    head = SpanPointerHead(8, allow_null=dm.settings.trains_null)
    start, end = head(torch.randn(*batch["input_ids"].shape, 8), batch["context_mask"])
    loss = head.loss(start, end, batch["start_positions"], batch["end_positions"])
    assert torch.isfinite(loss)


def test_a_bad_train_windows_value_is_refused():
    with pytest.raises(ConfigError, match="data.train_windows='answers' is not one of with_answer, all"):
        squad_settings(train_windows="answers")


def test_datamodule_drops_training_paragraphs_that_are_evaluated(write_json, real_dev_v1, tokenizer, caplog):
    paragraphs = real_dev_v1["data"][0]["paragraphs"]
    held_out = {**real_dev_v1, "data": [{**real_dev_v1["data"][0], "paragraphs": paragraphs[2:]}]}
    data = {"train_file": str(write_json(real_dev_v1, "train.json")), "validation_file": str(write_json(held_out, "dev.json")),
            "max_seq_length": 128, "doc_stride": 32}
    with caplog.at_level(logging.WARNING):
        dm = datamodule(tokenizer, **data)
        dm.setup("fit")
    kept = dm.examples("train")
    assert len(kept) == len(paragraphs[0]["qas"]) + len(paragraphs[1]["qas"])
    assert not set(kept["context"]) & set(dm.examples("validation")["context"])
    assert f"left out {len(paragraphs[2]['qas'])} of" in caplog.text
    dm = datamodule(tokenizer, **data, drop_train_overlap=False)
    dm.setup("fit")
    assert len(dm.examples("train")) == sum(len(p["qas"]) for p in paragraphs)


def test_squad_v2_defaults_to_shipped_slices_that_need_no_data_folder(make_cfg, tmp_path, monkeypatch):
    # task=squad_v2 read the full files from $SESAME_DATA_DIR while --help offered it beside the slice-backed tasks
    from sesame.tasks.runs.runner import build_datamodule

    monkeypatch.setenv("SESAME_DATA_DIR", str(tmp_path / "empty"))
    cfg = make_cfg("task=squad_v2")
    assert "squad_v2/train.slice.json" in str(cfg.data.train_file) and cfg.data.version_2_with_negative
    data = build_datamodule(RunSettings.from_config(cfg))
    data.setup("fit")
    answers = data.examples("train")["answers"]
    unanswerable = sum(not a["text"] for a in answers)
    assert len(answers) == 434 and unanswerable == 235
    titles = {json.loads(open(cfg.data.validation_file).read())["data"][i]["title"] for i in range(2)}
    train_titles = {a["title"] for a in json.loads(open(cfg.data.train_file).read())["data"]}
    assert not titles & train_titles  # no article is both trained and validated on
