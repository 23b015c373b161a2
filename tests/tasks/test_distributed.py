"""Two-process DDP evaluation (gloo, CPU) scores every example exactly once: same metrics as one process."""

import json
import subprocess
import sys

import pytest

from sesame.tasks.distributed import gather_by_index
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


def test_gather_without_a_process_group_is_the_identity():
    assert gather_by_index({2: "b", 0: "a"}) == {0: "a", 2: "b"}


def test_gather_rows_drops_repeated_keys(monkeypatch):
    import numpy as np

    from sesame.tasks import distributed

    rank0 = (np.array([0, 0, 1]), np.array([0, 1, 0]), np.array([5, 6, 7]))
    rank1 = (np.array([2, 0]), np.array([0, 0]), np.array([8, 5]))  # (0, 0) is padding: a repeat
    monkeypatch.setattr(distributed, "gather_objects", lambda obj: [rank0, rank1])
    example, word, pred = distributed.gather_rows(*rank0, key_columns=2)
    assert sorted(zip(example.tolist(), word.tolist(), pred.tolist())) == [(0, 0, 5), (0, 1, 6), (1, 0, 7), (2, 0, 8)]
