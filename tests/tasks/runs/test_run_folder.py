"""A run folder is never written over by accident: a rerun into a folder that holds a run is refused unless
told to resume or overwrite it, and a refused run changes nothing there, Hydra's .hydra/ record included."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.run_lock import LOCK_NAME
from sesame.tasks.runs.runner import train
from tests import preloaded_commands as preloaded

TINY = ["data.max_train_examples=8", "data.max_eval_examples=8"]


def _train_cli(run: Path, encoder: Path, *extra: str) -> subprocess.CompletedProcess:
    return preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", f"encoder.name_or_path={encoder}", "trainer=debug",
         "trainer.enable_progress_bar=false", *TINY, f"hydra.run.dir={run}", *extra],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.suffix != ".log"}  # Hydra appends each attempt to the job's log


def test_a_rerun_is_refused_and_changes_nothing_in_the_folder(tiny_bert_dir, tmp_path):
    run = tmp_path / "run"
    first = _train_cli(run, tiny_bert_dir)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run / ".hydra" / "overrides.yaml").is_file() and (run / ".hydra" / "config.yaml").is_file()
    before = _files(run)
    assert "metrics.json" in before and "checkpoints/best.ckpt" in before

    again = _train_cli(run, tiny_bert_dir, "seed=7")  # a finished run there, no resume
    assert again.returncode == 2, again.stderr[-2000:]
    assert f"{run} already holds a run (metrics.json" in again.stderr
    assert "resume=true" in again.stderr and "overwrite=true" in again.stderr
    assert _files(run) == before

    (run / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))  # a live run holds it
    locked = _train_cli(run, tiny_bert_dir, "seed=7", "overwrite=true")
    assert locked.returncode == 2 and "in use by another run" in locked.stderr, locked.stderr[-2000:]
    assert {k: v for k, v in _files(run).items() if k != LOCK_NAME} == before


def test_overwrite_replaces_the_earlier_run_and_resume_continues_it(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg(*TINY)), run)
    (run / "metrics.json").write_text('{"earlier": 1}')
    with pytest.raises(ConfigError, match="already holds a run"):
        train(RunSettings.from_config(make_cfg(*TINY)), run)
    assert json.loads((run / "metrics.json").read_text()) == {"earlier": 1}

    metrics = train(RunSettings.from_config(make_cfg(*TINY, "overwrite=true", "seed=3")), run)
    assert json.loads((run / "metrics.json").read_text()) == metrics != {"earlier": 1}
    assert train(RunSettings.from_config(make_cfg(*TINY, "resume=true", "seed=3")), run) == metrics  # already at its last step


def test_a_folder_with_results_but_no_config_is_refused_too(make_cfg, tmp_path):
    # what a copied or half-cleaned run folder looks like: its metrics and best weights, its config.yaml gone
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg(*TINY)), run)
    (run / "config.yaml").unlink()
    before = _files(run)
    assert "metrics.json" in before and "checkpoints/best.ckpt" in before
    with pytest.raises(ConfigError, match="already holds a run"):
        train(RunSettings.from_config(make_cfg(*TINY, "seed=7")), run)
    assert _files(run) == before


def test_a_resume_removes_what_a_killed_checkpoint_write_left_half_written(make_cfg, tmp_path):
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg(*TINY)), run)
    # SIGKILL inside atomic_open's write of last.ckpt leaves its temporary beside the previous, whole checkpoint
    half = run / "checkpoints" / ".last.ckpt.k1ll3d.tmp"
    half.write_bytes(b"\x80half a checkpoint")
    assert train(RunSettings.from_config(make_cfg(*TINY, "resume=true")), run) == metrics
    assert not half.exists() and (run / "checkpoints" / "last.ckpt").is_file()
    assert not list(run.rglob(".*.tmp"))


def test_resuming_from_best_ckpt_says_it_holds_weights_only_and_what_to_use(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(RunSettings.from_config(make_cfg(*TINY)), run)
    best = run / "checkpoints" / "best.ckpt"
    before = _files(run)
    with pytest.raises(ConfigError, match="holds the model's weights only") as refused:
        train(RunSettings.from_config(make_cfg(*TINY, f"resume={best}")), tmp_path / "again")
    assert "checkpoints/last.ckpt" in str(refused.value) and f"init_from={best}" in str(refused.value)
    assert _files(run) == before
    # the fix it names works: a new run from those weights
    assert "val_accuracy" in train(RunSettings.from_config(make_cfg(*TINY, f"init_from={best}")), tmp_path / "from_best")



def test_a_sweep_job_with_resume_true_is_skipped_resumed_or_started_by_what_its_folder_holds(tmp_path):
    from sesame.tasks.runs.run_lock import sweep_job_start

    job = tmp_path / "0"
    assert sweep_job_start(True, job) == "fresh"  # never started: no folder
    job.mkdir()
    assert sweep_job_start("true", job) == "fresh"
    (job / "config.yaml").write_text("seed: 1\n")
    assert sweep_job_start(True, job) == "resume"  # started: resolve_resume continues or restarts it
    (job / "metrics.json").write_text("{}")
    assert sweep_job_start(True, job) == "finished"
    assert sweep_job_start(None, job) == sweep_job_start(str(job), job) == "fresh"  # not resume=true: as set
