"""A run killed at any point (SIGKILL, SIGINT or a scheduler's SIGTERM) and resumed with ``resume=true``
ends exactly like an uninterrupted run: the same metrics and the same prediction files. SIGTERM saves
``last.ckpt`` at the next optimiser step and exits 143, saying how to resume."""

import errno
import json
import os
import sys

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.runs.run_lock import resolve_resume
from sesame.tasks.cli.errors import user_errors_are_messages
from sesame.tasks.core.errors import MissingFileError
from sesame.tasks.runs.runner import train
from tests.tasks.runs.scripted_run import SCRIPTED_RUN  # a run that kills itself where $KILL says
from tests import preloaded_commands as preloaded

# 48 examples in batches of 8: 6 steps an epoch, 2 epochs, a periodic checkpoint every 2 steps.
OVERRIDES = [
    "finetune=full", "seed=11", "data.max_train_examples=48", "data.max_eval_examples=32", "data.batch_size=8",
    "trainer.max_epochs=2", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null",
    "checkpoint.every_n_train_steps=2",
]

@pytest.fixture(scope="module")
def straight(make_cfg, tmp_path_factory):
    folder = tmp_path_factory.mktemp("straight")
    return train(RunSettings.from_config(make_cfg(*OVERRIDES)), folder), (folder / "val_SST-2.tsv").read_text()


# where the run dies: (after training step | during the validation after step, global step, signal). A SIGKILL
# mid-epoch one step after a periodic checkpoint: every task's, tests/conformance/test_training.py.
KILLS = [
    "train:1:SIGKILL",       # before the first periodic checkpoint: the run starts over
    "train:6:SIGKILL",       # the epoch's last batch: no periodic checkpoint there, resumes from step 4
    "validation:6:SIGINT",   # during the first validation, with Ctrl-C (Lightning shuts down, exits 1)
    "train:3:SIGTERM",       # a scheduler's notice mid-epoch: last.ckpt saved at step 3, exit 143
    "train:6:SIGTERM",       # at the epoch's last batch: its (one-batch) validation runs and saves last.ckpt, then it stops
    "validation:6:SIGTERM",  # during a validation (of 4 batches here): stops at once, last.ckpt from step 4 stands
]
#: more overrides for the killed process only (evaluation batches change no trained weight)
KILLED_ONLY = {"validation:6:SIGTERM": ["data.eval_batch_size=8"]}
EXIT_CODES = {"SIGKILL": -9, "SIGINT": 1, "SIGTERM": 143}
#: the step of last.ckpt a SIGTERM leaves
SIGTERM_SAVED_AT = {"train:3:SIGTERM": 3, "train:6:SIGTERM": 6, "validation:6:SIGTERM": 4}


@pytest.mark.parametrize("kill", KILLS)
def test_killed_and_resumed_matches_an_uninterrupted_run(make_cfg, tiny_bert_dir, tmp_path, straight, kill):
    run = tmp_path / "killed"
    base = ["trainer=debug", "trainer.enable_progress_bar=false", f"encoder.name_or_path={tiny_bert_dir}"]
    killed = preloaded.run([sys.executable, SCRIPTED_RUN, str(run), *base, *OVERRIDES, *KILLED_ONLY.get(kill, [])],
                            env={**os.environ, "KILL": kill}, capture_output=True, text=True)
    assert killed.returncode == EXIT_CODES[kill.split(":")[2]], killed.stderr[-2000:]
    assert not (run / "metrics.json").exists()
    if kill in SIGTERM_SAVED_AT:
        assert f"hydra.run.dir={run} resume=true" in killed.stderr and "Traceback" not in killed.stderr
        # sesame saves the full state on purpose: no "`weights_only` was not set, defaulting to `False`" from Lightning
        assert "was not set, defaulting" not in killed.stderr + killed.stdout
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == SIGTERM_SAVED_AT[kill]

    resumed = train(RunSettings.from_config(make_cfg(*OVERRIDES, "resume=true")), run)
    metrics, predictions = straight
    assert resumed == metrics  # bit-identical
    assert json.loads((run / "metrics.json").read_text()) == resumed
    assert (run / "val_SST-2.tsv").read_text() == predictions


def test_a_top_k_run_resumes_exactly_from_checkpoints_without_its_frozen_weights(make_cfg, tiny_bert_dir, tmp_path):
    # Its checkpoints leave the untrained encoder weights to <run>/encoder/ (tasks/encoders/store.py).
    overrides = [*OVERRIDES, "finetune=top_k", "finetune.top_k=1"]
    metrics = train(RunSettings.from_config(make_cfg(*overrides)), tmp_path / "straight")
    run = tmp_path / "killed"
    base = ["trainer=debug", "trainer.enable_progress_bar=false", f"encoder.name_or_path={tiny_bert_dir}"]
    killed = preloaded.run([sys.executable, SCRIPTED_RUN, str(run), *base, *overrides],
                            env={**os.environ, "KILL": "train:3:SIGKILL"}, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert "sesame_frozen_encoder" in torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert train(RunSettings.from_config(make_cfg(*overrides, "resume=true")), run) == metrics
    assert (run / "val_SST-2.tsv").read_text() == (tmp_path / "straight" / "val_SST-2.tsv").read_text()


def test_last_ckpt_follows_every_validation_even_without_improvement(make_cfg, tmp_path, monkeypatch):
    from sesame.tasks.glue.module import SentenceClassificationModule

    score = SentenceClassificationModule.score
    monkeypatch.setattr(SentenceClassificationModule, "score", lambda self, stage, rows: {
        **score(self, stage, rows), "accuracy": 0.5})  # never improves after the first validation
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg("data.max_train_examples=32", "data.max_eval_examples=32", "data.batch_size=8",
                   "trainer.max_epochs=3", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null")), run)
    step = lambda name: torch.load(run / "checkpoints" / name, weights_only=True)["global_step"]  # noqa: E731
    assert step("best.ckpt") == 4 and step("last.ckpt") == 12


def test_only_last_ckpt_keeps_the_optimiser_state_best_ckpt_is_the_model_size(make_cfg, tmp_path):
    from sesame.tasks.saved.checkpoints import load_trained, state_dict_bytes

    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg("finetune=full")), run)
    best = torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert {"optimizer_states", "lr_schedulers", "callbacks", "sesame_rng"} <= set(last)  # resume needs them
    assert not {"optimizer_states", "lr_schedulers", "callbacks", "sesame_rng"} & set(best)
    model = state_dict_bytes(load_trained(run).module)
    best_bytes, last_bytes = (os.path.getsize(run / "checkpoints" / n) for n in ("best.ckpt", "last.ckpt"))
    # best.ckpt: the weights and a few KB of config; last.ckpt: AdamW's two moments per weight besides
    assert best_bytes < model + 32_000 < last_bytes < 3 * model + 64_000


def test_resume_without_a_checkpoint_says_where_it_looked(tmp_path):
    with pytest.raises(MissingFileError, match="no checkpoint at .*last.ckpt"):
        resolve_resume(True, tmp_path)
    (tmp_path / "config.yaml").write_text("seed: 1\n")  # a run started here and died before a checkpoint
    assert resolve_resume(True, tmp_path) is None


def test_a_full_disk_while_training_is_one_line_and_keeps_the_last_checkpoint(make_cfg, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.ckpt"
    kept: dict[str, bytes] = {}
    fsync = os.fsync

    def disk_fills_after_the_first_checkpoint(fd: int) -> None:
        if not last.is_file():
            return fsync(fd)
        kept.setdefault("last", last.read_bytes())
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_fills_after_the_first_checkpoint)
    cfg = make_cfg("data.max_train_examples=32", "data.batch_size=8", "checkpoint.every_n_train_steps=1")
    with pytest.raises(SystemExit) as stop, user_errors_are_messages():  # as sesame-train ends
        train(RunSettings.from_config(cfg), run)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "Traceback" not in err
    assert f"error: cannot write {last}: no space left on the device" in err and "previous last.ckpt is intact" in err
    assert last.read_bytes() == kept["last"]
    assert torch.load(last, weights_only=True)["global_step"] == 1  # whole, loadable: resume=true starts from it
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_two_ddp_processes_killed_mid_epoch_resume_exactly(tiny_bert_dir, tmp_path):
    """2 gloo processes, 32 examples in global batches of 2 x 4: 4 steps an epoch, 2 epochs, dropout on
    (each rank's RNG stream is its own). Both ranks die after step 3; last.ckpt is step 2's, so the
    resumed ranks skip 2 global batches (16 examples), not 2 of their own."""
    overrides = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
                 f"encoder.name_or_path={tiny_bert_dir}", "finetune=full", "seed=11", "data.max_train_examples=32",
                 "data.max_eval_examples=16", "data.batch_size=4", "trainer.max_epochs=2",
                 "trainer.limit_train_batches=null", "trainer.limit_val_batches=null", "checkpoint.every_n_train_steps=1",
                 "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]

    def run(folder, *extra, kill=None):
        env = {**os.environ, **({"KILL": kill} if kill else {})}
        return preloaded.run([sys.executable, SCRIPTED_RUN, str(folder), *overrides, *extra], env=env,
                              capture_output=True, text=True, timeout=600)

    straight = run(tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = run(tmp_path / "killed", kill="train:3:SIGKILL")
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert torch.load(tmp_path / "killed" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
    resumed = run(tmp_path / "killed", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for name in ("metrics.json", "val_SST-2.tsv"):
        assert (tmp_path / "killed" / name).read_text() == (tmp_path / "straight" / name).read_text(), name
