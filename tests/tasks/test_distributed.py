"""Two-process DDP evaluation (gloo, CPU) scores every example exactly once: same metrics as one process."""

import json
import subprocess
import sys

import numpy as np
import pytest

from sesame.tasks.distributed import gather_rows
from sesame.tasks.runner import train


def _eval(run, out, tiny_bert_dir, task, *extra):
    subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.eval", f"task={task}", f"model={run}",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.limit_val_batches=null",
         "trainer.enable_progress_bar=false", "data.max_eval_examples=41", "data.eval_batch_size=8",
         f"hydra.run.dir={out}", *extra],
        check=True, capture_output=True, text=True, timeout=600,
    )
    return json.loads((out / "metrics.json").read_text())


# task, main metric, the prediction file every example must appear in once
TASKS = [("glue", "val_accuracy", "val_SST-2.tsv"), ("ner", "val_f1", "val_predictions.conll"),
         ("squad_v1", "val_f1", "predictions.json")]


@pytest.mark.parametrize("task, metric, predictions", TASKS, ids=[t[0] for t in TASKS])
def test_ddp_on_two_processes_gives_the_single_process_metrics(make_cfg, tiny_bert_dir, tmp_path, task, metric, predictions):
    train(make_cfg(f"task={task}", "data.max_train_examples=32", "data.max_eval_examples=41"), tmp_path / "run")
    single = _eval(tmp_path / "run", tmp_path / "one", tiny_bert_dir, task)
    ddp = _eval(tmp_path / "run", tmp_path / "two", tiny_bert_dir, task,
                "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
    assert ddp[metric] == pytest.approx(single[metric], abs=1e-6)
    # 41 examples over 2 ranks: the sampler repeats one; each is still predicted exactly once
    assert (tmp_path / "two" / predictions).read_text() == (tmp_path / "one" / predictions).read_text()


def test_gather_without_a_process_group_sorts_by_key():
    rows = {"index": np.array([2, 0]), "prediction": np.array(["b", "a"])}
    got = gather_rows(rows, key=("index",))
    assert got["index"].tolist() == [0, 2] and got["prediction"].tolist() == ["a", "b"]


def test_gather_rows_drops_repeated_keys_and_pads_per_token_columns(monkeypatch):
    from sesame.tasks import distributed

    # rank 1 repeats (0, 0), as a distributed sampler pads the last rank with the first examples;
    # its logits are 3 wide where rank 0's are 2 wide (batches padded to their own length)
    rank0 = {"example": np.array([0, 0, 1]), "word": np.array([0, 1, 0]), "logits": np.ones((3, 2))}
    rank1 = {"example": np.array([2, 0]), "word": np.array([0, 0]), "logits": np.full((2, 3), 2.0)}
    monkeypatch.setattr(distributed, "gather_objects", lambda obj: [rank0, rank1])
    got = distributed.gather_rows(rank0, key=("example", "word"), pad_values={"logits": -1.0})
    assert list(zip(got["example"].tolist(), got["word"].tolist())) == [(0, 0), (0, 1), (1, 0), (2, 0)]
    assert got["logits"].tolist() == [[1, 1, -1], [1, 1, -1], [1, 1, -1], [2, 2, 2]]  # (0, 0) from rank 0
