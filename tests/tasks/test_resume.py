"""A run killed with SIGKILL mid-epoch and resumed ends exactly like an uninterrupted run."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from sesame.tasks.checkpoints import resolve_resume
from sesame.tasks.runner import train

OVERRIDES = [
    "finetune=full", "seed=11", "data.max_train_examples=96", "data.max_eval_examples=64", "data.batch_size=8",
    "trainer.max_epochs=2", "trainer.limit_train_batches=null", "checkpoint.every_n_train_steps=3",
]

KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    import lightning as L
    from hydra import compose, initialize_config_module
    from sesame.tasks import runner
    from sesame.tasks.resolvers import register_resolvers

    class KillAt(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == int(os.environ["KILL_AT_STEP"]):
                os.kill(os.getpid(), signal.SIGKILL)

    build = runner.build_trainer
    runner.build_trainer = lambda cfg, run_dir, monitor, extra_callbacks=None, **kw: build(cfg, run_dir, monitor, [KillAt()], **kw)
    register_resolvers()
    with initialize_config_module(config_module="sesame.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=sys.argv[2:])
    runner.train(cfg, sys.argv[1])
    """
)


def test_killed_mid_epoch_and_resumed_matches_an_uninterrupted_run(make_cfg, tiny_bert_dir, tmp_path):
    straight = train(make_cfg(*OVERRIDES), tmp_path / "straight")

    run = tmp_path / "killed"
    base = ["trainer=debug", "trainer.enable_progress_bar=false", f"encoder.name_or_path={tiny_bert_dir}"]
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(run), *base, *OVERRIDES],
        env={**__import__("os").environ, "KILL_AT_STEP": "17"}, capture_output=True, text=True,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 15 and ckpt["epoch"] == 1  # mid-way through the second epoch
    assert not (run / "metrics.json").exists()

    resumed = train(make_cfg(*OVERRIDES, "resume=true"), run)
    assert resumed == pytest.approx(straight, rel=1e-5, abs=1e-6)
    assert json.loads((run / "metrics.json").read_text()) == resumed
    assert (run / "val_SST-2.tsv").read_text() == (tmp_path / "straight" / "val_SST-2.tsv").read_text()


def test_resume_without_a_checkpoint_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*last.ckpt"):
        resolve_resume(True, tmp_path)
