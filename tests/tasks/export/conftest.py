"""Tiny trained runs shared by the export tests (trained once per session), and real dev batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import TrainedModel, load_trained
from sesame.tasks.inputs.datamodule import SplitDataModule
from sesame.tasks.runs.runner import build_datamodule, train

FAST = ["trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
RUNS = {
    "glue": ["pooling=pooler", "data.max_train_examples=64", "data.max_eval_examples=32", *FAST],
    "qa": ["task=squad_v1", "data=squad_v1_slice", "data.max_seq_length=96", "data.doc_stride=32",
           "data.max_train_examples=24", "data.max_eval_examples=8", "data.batch_size=8", *FAST],
    "ner": ["task=ner", "data.max_train_examples=48", "data.max_eval_examples=24", "data.batch_size=16", *FAST],
    "ner_crf": ["task=ner", "head.crf=true", "data.max_train_examples=48", "data.max_eval_examples=24",
                "data.batch_size=16", *FAST],
}


@pytest.fixture(scope="session")
def trained_run(make_cfg, tmp_path_factory):
    """``trained_run("glue" | "qa" | "ner" | "ner_crf")``: the run folder of a tiny trained model (once each)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            folder = tmp_path_factory.mktemp(f"run_{name}")
            train(RunSettings.from_config(make_cfg(*RUNS[name])), folder)
            made[name] = folder
        return made[name]

    return get


def dev_data(trained: TrainedModel, batch_size: int = 8, limit: int = 16) -> tuple[list[dict], SplitDataModule]:
    """Real validation batches of the run's own dev data (its data module, the first ``limit``
    examples, padded per batch, longest first: sizes and lengths unlike the export's traced example),
    and the data module."""
    cfg = OmegaConf.create(trained.cfg)
    cfg.data.max_eval_examples = limit
    cfg.data.eval_batch_size = batch_size
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("validate")
    return list(dm.val_dataloader()), dm


@pytest.fixture(scope="session")
def loaded(trained_run):
    """``loaded(name)``: the trained model of a run, read back as sesame reads it (once each)."""
    cache: dict[str, TrainedModel] = {}

    def get(name: str) -> TrainedModel:
        if name not in cache:
            cache[name] = load_trained(trained_run(name))
        return cache[name]

    return get
