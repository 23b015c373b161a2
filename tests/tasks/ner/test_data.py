"""The NER data module (tasks/ner/data.py) on the real config: settings, tag set, splits, batches."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.heads.masking import IGNORE_INDEX
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.core.errors import ConfigError, DataError
from sesame.tasks.ner.data import NerDataModule, NerDataSettings
from sesame.tasks.runs.runner import build_datamodule
from sesame.tasks.ner.tags import encode_tags
from sesame.tasks.ner.windows import stitch_words
from sesame.tasks.core.paths import shipped_path

WNUT_DEV_SLICE = Path(shipped_path("wnut17/dev.300.conll"))
WNUT_TRAIN_SLICE = Path(shipped_path("wnut17/train.1k.conll"))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("minilm_l6")


@pytest.fixture
def datamodule(make_cfg: Callable, tokenizer) -> Callable[..., NerDataModule]:
    """``datamodule("data.train_file=...", ...)``: ``task=ner`` composed with these overrides."""

    def build(*overrides: str) -> NerDataModule:
        return build_datamodule(RunSettings.from_config(make_cfg("task=ner", *overrides)), tokenizer)

    return build


def test_settings_from_the_preset(make_cfg: Callable, tokenizer) -> None:
    cfg = make_cfg("task=ner", "data.tag_names=[O,B-X,I-X]")
    s = NerDataSettings.from_config(cfg.data)
    assert s.train_file == str(WNUT_TRAIN_SLICE) and s.test_file is None
    assert s.tag_names == ("O", "B-X", "I-X")  # lists come back as tuples
    dm = NerDataModule(s, tokenizer, seed=3)
    assert dm.settings is s and dm.seed == 3


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("+data.tag_colum=1", r"unknown setting data\.tag_colum for NerDataSettings"),
        ("data.tag_scheme=bioes", r"data\.tag_scheme='bioes' is not one of auto, iob1, bio"),
        ("data.format=csv", r"data\.format='csv' is not one of auto, conll, jsonl"),
    ],
)
def test_bad_data_settings_are_config_errors(datamodule, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        datamodule(override)


def test_unknown_dev_tag(datamodule, write_file) -> None:
    train = write_file("train.conll", "Bob\tB-PER\nsays\tO\n")
    dev = write_file("dev.conll", "Hi\tO\n\nParis\tO\nrocks\tB-LOC\n")
    dm = datamodule(f"data.train_file={train}", f"data.validation_file={dev}")
    with pytest.raises(DataError, match=r"dev.conll:4: tag 'B-LOC' in the validation file is not in the training"):
        dm.setup("fit")


def test_datamodule_on_shipped_wnut(datamodule, tokenizer) -> None:
    dm = datamodule(
        f"data.train_file={WNUT_TRAIN_SLICE}",
        f"data.validation_file={WNUT_DEV_SLICE}",
        "data.max_seq_length=24",
        "data.batch_size=8",
        "data.eval_batch_size=16",
        "data.max_train_examples=50",
        "data.max_eval_examples=40",
    )
    dm.setup("fit")
    assert dm.config_updates() == {"data": {"tag_names": dm.tag_names}}
    assert len(dm.tag_names) == 13 and dm.tag_names[0] == "O"
    assert len(dm.examples["train"]) == 50 and len(dm.examples["validation"]) == 40
    assert len(dm.splits["validation"]) >= 40  # some sentences need two windows at 24 tokens
    assert dm.has_split("train") and not dm.has_split("test")
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels", "word_index", "example_index"}
    assert all(v.dtype == torch.int64 for v in batch.values())
    assert batch["input_ids"].shape == batch["labels"].shape == batch["word_index"].shape
    assert batch["input_ids"].shape[0] == 8 and batch["input_ids"].shape[1] <= 24
    assert batch["example_index"].shape == (8,)
    pad = batch["attention_mask"] == 0
    assert (batch["labels"][pad] == IGNORE_INDEX).all() and (batch["word_index"][pad] == -1).all()
    assert (batch["input_ids"][pad] == tokenizer.pad_token_id).all()
    # Dynamic padding: the batch is as long as its longest row, not max_seq_length.
    assert batch["attention_mask"].sum(1).max() == batch["input_ids"].shape[1]
    with pytest.raises(ConfigError, match=r"no test data: set data\.test_file"):
        dm.test_dataloader()
    # The eval loader covers every word of every validation sentence once.
    ex, words, vals = [], [], []
    for b in dm.val_dataloader():
        sel = b["word_index"] >= 0
        ex.append(b["example_index"].unsqueeze(1).expand_as(sel)[sel].numpy())
        words.append(b["word_index"][sel].numpy())
        vals.append(b["labels"][sel].numpy())
    stitched = stitch_words(np.concatenate(ex), np.concatenate(words), np.concatenate(vals), [len(t) for t in dm.examples["validation"].tokens])
    gold = encode_tags(dm.examples["validation"], dm.tag_names)
    assert all(a.tolist() == b.tolist() for a, b in zip(stitched, gold))


def test_given_tag_names_take_precedence(datamodule, write_file) -> None:
    train = write_file("train.conll", "Bob\tB-PER\n")
    names = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    dm = datamodule(f"data.train_file={train}", "data.validation_file=null", f"data.tag_names=[{','.join(names)}]")
    dm.setup("fit")
    assert dm.tag_names == names
    assert dm.splits["train"][0]["labels"][1] == 2
