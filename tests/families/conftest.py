"""Fixtures of the encoder-family matrix: each family's tiny model folder (built once per session),
its tiny training runs (one per task, trained once per session), and the recorder of each cell's
outcome (``tests/families/cells.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.paths import shipped_path
from tests.conftest import composed
from tests.families import cells
from tests.families.builders import build_family, training_sentences

#: Every run: a couple of optimiser steps and one evaluation batch (``trainer=debug`` plus less).
COMMON = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
          "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "data.batch_size=4"]

#: Per task: the data of its runs (the fusion and finetune settings are :data:`cells.RUN_SETTINGS`').
#: GLUE's pair task is :func:`pair_data`; SQuAD v2 trains on the shipped v1 train slice's questions
#: and evaluates on the shipped v2 dev slice (answerable and unanswerable questions).
TASK_OVERRIDES = {
    "glue": ["task=glue", "data=rte", "data.max_seq_length=64", "data.max_eval_examples=8", "data.eval_batch_size=8"],
    "squad_v2": ["task=squad_v2", f"data.train_file={shipped_path('squad_v1/train.slice.json')}",
                 f"data.validation_file={shipped_path('squad_v2/dev.slice.json')}", "data.max_seq_length=128",
                 "data.doc_stride=32", "data.max_train_examples=8", "data.max_eval_examples=3",
                 "data.eval_batch_size=32"],
    "ner": ["task=ner", "data.max_train_examples=8", "data.max_eval_examples=8", "data.max_seq_length=64",
            "data.eval_batch_size=8"],
}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread for these tiny models: splitting a 32-wide matmul across threads only adds
    synchronisation, which costs seconds per step on CPUs shared with other jobs (measured: 1.7 s
    against 0.04 s for a forward and backward pass of a 128-token batch)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def family_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``family_dir("xlnet")``: the folder of the family's tiny model and tokenizer (built once)."""
    built: dict[str, Path] = {}
    lines: list[str] = []

    def get(name: str) -> Path:
        if name not in built:
            if not lines:
                lines.extend(training_sentences())
            built[name] = build_family(name, tmp_path_factory.mktemp(f"family_{name}"), lines)
        return built[name]

    return get


@pytest.fixture(scope="session")
def pair_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sentence-pair task in GLUE RTE's TSV format, made of shipped SST-2 sentences (no pair
    set is shipped): two reviews "entail" each other when they share their sentiment."""
    folder = tmp_path_factory.mktemp("pairs")
    rows = [r.split("\t") for r in Path(shipped_path("glue/sst2/train.2k.tsv")).read_text(encoding="utf-8").splitlines()[1:81]]
    lines = ["index\tsentence1\tsentence2\tlabel"]
    for i in range(0, len(rows) - 1, 2):
        (a, label_a), (b, label_b) = rows[i][:2], rows[i + 1][:2]
        lines.append(f"{i // 2}\t{a}\t{b}\t{'entailment' if label_a == label_b else 'not_entailment'}")
    (folder / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("\n".join(lines[:17]) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def family_cfg(family_dir: Callable[[str], Path], pair_data: Path) -> Callable[..., DictConfig]:
    """``family_cfg("xlnet", "glue", *overrides)``: the real config of that family's run of a task."""

    def make(name: str, task: str, *overrides: str) -> DictConfig:
        data = [f"data.train_file={pair_data / 'train.tsv'}", f"data.validation_file={pair_data / 'dev.tsv'}"] \
            if task == "glue" else []
        settings = cells.run_settings(name, task)
        return composed([*COMMON, *TASK_OVERRIDES[task], *data, *settings, f"encoder.name_or_path={family_dir(name)}",
                         *overrides])

    return make


@pytest.fixture(scope="session")
def family_run(family_cfg: Callable[..., DictConfig], tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], tuple[Path, dict]]:
    """``family_run("xlnet", "ner")``: ``(run folder, metrics)`` of the family's tiny run of a task (trained once)."""
    from sesame.tasks.runs.runner import train

    runs: dict[tuple[str, str], tuple[Path, dict]] = {}

    def get(name: str, task: str) -> tuple[Path, dict]:
        if (name, task) not in runs:
            folder = tmp_path_factory.mktemp(f"run_{name}_{task}")
            runs[name, task] = folder, train(RunSettings.from_config(family_cfg(name, task)), folder)
        return runs[name, task]

    return get


@pytest.fixture
def record() -> Callable[[str, str, str], None]:
    """``record(family, feature, cell)``: note a cell's outcome for the results file."""
    return cells.record


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``SESAME_FAMILY_RESULTS=<file>``, write every cell's outcome there once all were recorded
    (a partial run leaves the file alone)."""
    path = os.environ.get("SESAME_FAMILY_RESULTS")
    if path:
        cells.write_results(Path(path))
