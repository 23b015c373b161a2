"""Two-process DDP evaluation (gloo, CPU) scores every example exactly once: same metrics as one process."""

import json
import shutil
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
# GLUE and NER evaluation under DDP are covered by the training test below; QA's windows here.
TASKS = [("squad_v1", "val_f1", "predictions.json")]


@pytest.mark.parametrize("task, metric, predictions", TASKS, ids=[t[0] for t in TASKS])
def test_ddp_on_two_processes_gives_the_single_process_metrics(make_cfg, tiny_bert_dir, tmp_path, task, metric, predictions):
    train(make_cfg(f"task={task}", "data.max_train_examples=32", "data.max_eval_examples=41"), tmp_path / "run")
    single = _eval(tmp_path / "run", tmp_path / "one", tiny_bert_dir, task)
    ddp = _eval(tmp_path / "run", tmp_path / "two", tiny_bert_dir, task,
                "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
    assert ddp[metric] == pytest.approx(single[metric], abs=1e-6)
    # 41 examples over 2 ranks: the sampler repeats one; each is still predicted exactly once
    assert (tmp_path / "two" / predictions).read_text() == (tmp_path / "one" / predictions).read_text()


@pytest.fixture(scope="module")
def no_dropout_bert(tiny_bert_dir, tmp_path_factory):
    """The tiny BERT without dropout: one process and two then see the same model function."""
    folder = tmp_path_factory.mktemp("no_dropout")
    for f in tiny_bert_dir.iterdir():
        shutil.copy(f, folder / f.name)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _train(out, encoder, task, batch_size, *extra):
    dropout = [] if task == "squad_v1" else ["head.dropout=0"]
    subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", f"task={task}", f"encoder.name_or_path={encoder}",
         "trainer=debug", "trainer.limit_train_batches=3", "trainer.limit_val_batches=null",
         "trainer.enable_progress_bar=false", "data.max_train_examples=32", "data.max_eval_examples=24",
         f"data.batch_size={batch_size}", f"hydra.run.dir={out}", *dropout, *extra],
        check=True, capture_output=True, text=True, timeout=600,
    )
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("task, metric", [("glue", "val_accuracy"), ("ner", "val_f1"), ("squad_v1", "val_f1")])
def test_ddp_training_on_two_processes_matches_one_process_with_the_same_global_batch(no_dropout_bert, tmp_path, task, metric):
    one = _train(tmp_path / "one", no_dropout_bert, task, 8)
    two = _train(tmp_path / "two", no_dropout_bert, task, 4, "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu")
    assert two[metric] == pytest.approx(one[metric], abs=1e-6)
    # 3 full global batches: the same examples per optimiser step, gradients averaged over ranks, so
    # the same model up to float noise (NER: each rank averages its loss over its own tokens; a last
    # partial batch or the sampler's padding would differ too: README "Scale and faults").
    if task == "squad_v1":  # no evaluation loss: every official score instead
        assert two["val_exact_match"] == pytest.approx(one["val_exact_match"], abs=1e-6)
    else:
        assert two["val_loss"] == pytest.approx(one["val_loss"], rel=1e-3)
    assert two["val_examples_scored"] == one["val_examples_scored"] == 24


def test_a_ddp_sweep_runs_each_job_once_per_rank_and_writes_once(tiny_bert_dir, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "pooling=cls,mean",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.enable_progress_bar=false",
         "data.max_train_examples=16", "data.max_eval_examples=8", "trainer.strategy=ddp", "trainer.devices=2",
         "trainer.accelerator=cpu", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        check=True, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    sweep = tmp_path / "sweep"
    # report.*: the sweep summary (tasks/cli/sweep_summary.py), written by rank 0 only
    assert sorted(p.name for p in sweep.iterdir() if not p.name.startswith("report.")) == [".ddp_rank_1", "0", "1", "multirun.yaml"]
    assert (sweep / "report.md").is_file() and out.stdout.count("sweep summary") == 1
    assert [p.name for p in (sweep / ".ddp_rank_1").iterdir()] == ["multirun.yaml"]  # rank 1's own bookkeeping
    assert "train_ddp_process" not in (sweep / "multirun.yaml").read_text()  # rank 0's, not overwritten
    for job in ("0", "1"):
        # rank 0 wrote the run files; rank 1 ran the same job there (its log) and wrote nothing else
        assert {"config.yaml", "metrics.json", "val_SST-2.tsv", "train.log", "train_ddp_process_1.log"} <= {
            p.name for p in (sweep / job).iterdir()}
    assert out.stdout.count("run folder:") == 2
    assert not (tmp_path / "multirun").exists()  # no second sweep folder under another timestamp


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
