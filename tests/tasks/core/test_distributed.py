"""Two-process DDP evaluation (gloo, CPU) scores every example exactly once: same metrics as one process."""

import json
import os
import shutil
import sys

import numpy as np
import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs import runner
from sesame.tasks.core.distributed import gather_rows
from sesame.tasks.runs.runner import train
from tests.tasks.runs.scripted_run import SCRIPTED_RUN, RecordBatches
from tests import preloaded_commands as preloaded


def _eval(run, out, tiny_bert_dir, task, *extra):
    preloaded.run(
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
    train(RunSettings.from_config(make_cfg(f"task={task}", "data.max_train_examples=32", "data.max_eval_examples=41")), tmp_path / "run")
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


DDP = ["trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]


def recorded_run(run, encoder, *overrides):
    """A run in a fresh process (``tests/tasks/runs/scripted_run.py``) whose ranks record their training batches."""
    base = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
            f"encoder.name_or_path={encoder}"]
    done = preloaded.run([sys.executable, SCRIPTED_RUN, str(run), *base, *overrides], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RECORD_BATCHES": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run / "metrics.json").read_text())


def train_batches(run, rank):
    return json.loads((run / f"train_batches_rank{rank}.json").read_text())


# training examples (SQuAD: 14 questions, 24 windows) and the full global batches of 8 they make: a
# whole epoch without a partial batch, which only one process would train on
WHOLE_EPOCH = {"glue": (32, 4), "ner": (32, 4), "squad_v1": (14, 3)}
# Parameters whose gradient is 0 in exact arithmetic: a span's start (end) softmax minus its one-hot
# sums to 0 over positions, and so does the gradient of the span head's bias and of the LayerNorm bias
# below it. Adam scales their float noise (~1e-9) to steps of the learning rate, so they move by
# noise alone (1.7e-5 apart after 3 steps), in one process as in two.
ZERO_GRADIENT = {"squad_v1": ("head.qa_outputs.bias", "encoder.model.encoder.layer.3.output.LayerNorm.bias")}


# Shuffled batches (data.group_by_length=false) of every task: tests/conformance/test_training.py's DDP check.
@pytest.mark.parametrize("task", ["glue", "ner", "squad_v1"])
def test_ddp_training_on_two_processes_sees_the_length_grouped_batches_and_metrics_of_one_with_the_global_batch(
        no_dropout_bert, make_cfg, tmp_path, monkeypatch, task):
    examples, steps = WHOLE_EPOCH[task]
    overrides = [f"task={task}", "data.group_by_length=true", f"data.max_train_examples={examples}",
                 "data.max_eval_examples=24",
                 "trainer.limit_train_batches=null", "trainer.limit_val_batches=null",
                 *([] if task == "squad_v1" else ["head.dropout=0"])]
    recorder = RecordBatches(tmp_path / "one")
    build = runner.build_trainer
    monkeypatch.setattr(runner, "build_trainer", lambda cfg, run_dir, monitor, extra=None, **kw: build(
        cfg, run_dir, monitor, [*(extra or []), recorder], **kw))
    one = train(RunSettings.from_config(make_cfg(*overrides, f"encoder.name_or_path={no_dropout_bert}", "data.batch_size=8")), tmp_path / "one")
    two = recorded_run(tmp_path / "two", no_dropout_bert, *overrides, "data.batch_size=4", *DDP)

    # rank 0's k-th batch then rank 1's is one process's k-th batch, example for example, all epoch
    single = train_batches(tmp_path / "one", 0)
    assert len(single) == steps and all(len(b) == 8 for b in single)
    assert [r0 + r1 for r0, r1 in zip(train_batches(tmp_path / "two", 0), train_batches(tmp_path / "two", 1))] == single
    # so the same model up to float noise: DDP averages the two ranks' gradients, each of a loss that
    # is a mean over its 4 examples (GLUE), windows (SQuAD) or labelled tokens (NER: weighted by the
    # rank's share of the global batch's tokens, tasks/core/distributed.py share_of_total; unweighted, the
    # ranks' token means averaged, NER's weights end beyond this tolerance)
    weights = [torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for run in (
        tmp_path / "one", tmp_path / "two")]
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        if key not in ZERO_GRADIENT.get(task, ()):
            torch.testing.assert_close(weights[1][key], value, rtol=0, atol=1e-6, msg=key)
    assert two["val_examples_scored"] == one["val_examples_scored"] == 24
    for key, value in one.items():
        # NER's val_loss is not a training difference: Lightning averages the per-batch losses weighted
        # by examples, and a batch's NER loss is a mean over its tokens, so 2 ranks' evaluation batches
        # of 12 sentences average to another number than one batch of 24 (README "Scale and faults")
        if key.startswith("val_") and not (task == "ner" and key == "val_loss"):
            assert two[key] == pytest.approx(value, abs=1e-6), key


def test_a_ddp_sweep_runs_each_job_once_per_rank_and_writes_once(tiny_bert_dir, tmp_path):
    out = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "pooling=cls,mean",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.enable_progress_bar=false",
         "data.max_train_examples=16", "data.batch_size=8", "data.max_eval_examples=8", "trainer.strategy=ddp", "trainer.devices=2",
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
    from sesame.tasks.core import distributed

    # rank 1 repeats (0, 0), as a distributed sampler pads the last rank with the first examples;
    # its logits are 3 wide where rank 0's are 2 wide (batches padded to their own length)
    rank0 = {"example": np.array([0, 0, 1]), "word": np.array([0, 1, 0]), "logits": np.ones((3, 2))}
    rank1 = {"example": np.array([2, 0]), "word": np.array([0, 0]), "logits": np.full((2, 3), 2.0)}
    monkeypatch.setattr(distributed, "gather_objects", lambda obj: [rank0, rank1])
    got = distributed.gather_rows(rank0, key=("example", "word"), pad_values={"logits": -1.0})
    assert list(zip(got["example"].tolist(), got["word"].tolist())) == [(0, 0), (0, 1), (1, 0), (2, 0)]
    assert got["logits"].tolist() == [[1, 1, -1], [1, 1, -1], [1, 1, -1], [2, 2, 2]]  # (0, 0) from rank 0
