"""Two nodes of one process each (``trainer.num_nodes=2 trainer.devices=1``), started as two torchrun commands
on this machine (``MASTER_ADDR=127.0.0.1``, node ranks 0 and 1, each with ``LOCAL_RANK`` 0), train exactly as
one process with the global batch, and write one set of files; a launch that does not match the settings ends."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings, TrainerSettings
from sesame.tasks.cli.ddp_sweeps import SWEEP_DIR_ENV, follow_rank_zero_sweep
from sesame.tasks.core.distributed import RANK_VARIABLES, is_main_process, process_rank_name
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs import runner
from sesame.tasks.runs.process_launch import check_launch, strategy_with_timeout
from sesame.tasks.runs.runner import train
from tests.tasks.core.test_distributed import no_dropout_bert  # noqa: F401 (a fixture)
from tests.tasks.runs.scripted_run import SCRIPTED_RUN, RecordBatches

NODES = ["trainer.strategy=ddp", "trainer.num_nodes=2", "trainer.devices=1", "trainer.accelerator=cpu"]
BASE = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_command(node: int, port: int, run_dir, *overrides: str) -> list[str]:
    """What one would type on node ``node`` of two, the first node's address being this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
            "--master_addr=127.0.0.1", f"--master_port={port}", SCRIPTED_RUN, str(run_dir), *overrides]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*RANK_VARIABLES, "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, **extra}


def test_two_node_ranks_train_on_the_batches_and_end_with_the_weights_of_one_process_with_the_global_batch(
        no_dropout_bert, make_cfg, tmp_path, monkeypatch):  # noqa: F811
    overrides = ["task=glue", "data.max_train_examples=16", "data.max_eval_examples=8", "head.dropout=0",
                 "trainer.limit_train_batches=null", "trainer.limit_val_batches=null"]
    recorder = RecordBatches(tmp_path / "one")
    build = runner.build_trainer
    monkeypatch.setattr(runner, "build_trainer", lambda cfg, run_dir, monitor, extra=None, **kw: build(
        cfg, run_dir, monitor, [*(extra or []), recorder], **kw))
    one = train(RunSettings.from_config(make_cfg(*overrides, f"encoder.name_or_path={no_dropout_bert}",
                                                 "data.batch_size=8")), tmp_path / "one")

    port, run = free_port(), tmp_path / "two"
    args = [*BASE, f"encoder.name_or_path={no_dropout_bert}", *overrides, "data.batch_size=4", *NODES]
    nodes = [subprocess.Popen(node_command(k, port, run, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=clean_env(RECORD_BATCHES="1")) for k in (0, 1)]
    outputs = [n.communicate(timeout=300)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)

    # node 0's k-th batch then node 1's is one process's k-th batch, example for example
    single, *ranks = (json.loads((d / f"train_batches_rank{r}.json").read_text()) for d, r in (
        (tmp_path / "one", 0), (run, 0), (run, 1)))
    assert len(single) == 2 and all(len(b) == 8 for b in single)
    assert [a + b for a, b in zip(*ranks, strict=True)] == single
    weights = [torch.load(d / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"] for d in (tmp_path / "one", run)]
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=0, atol=1e-6, msg=key)
    two = json.loads((run / "metrics.json").read_text())
    assert two["val_examples_scored"] == one["val_examples_scored"] == 8
    for key, value in one.items():
        if key.startswith("val_"):
            assert two[key] == pytest.approx(value, abs=1e-6), key
    # one writer: the files of the one-process run (node 1, LOCAL_RANK 0 too, wrote nothing but its batches)
    files = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())  # noqa: E731
    assert "train_batches_rank1.json" in files(run) and "checkpoints/last.ckpt" in files(run)
    assert [f for f in files(run) if f != "train_batches_rank1.json"] == files(tmp_path / "one")
    assert sum(json.dumps(one, indent=2, sort_keys=True).splitlines()[1] in o for o in outputs) == 1  # metrics printed once


def test_a_node_started_alone_ends_at_the_timeout_with_one_clear_line(tiny_bert_dir, tmp_path):
    args = [*BASE, f"encoder.name_or_path={tiny_bert_dir}", "data.max_train_examples=16", "data.max_eval_examples=8",
            *NODES, "trainer.ddp_timeout_s=3"]
    # node 0 of 2 without node 1, started the way Lightning's environment reads it (no torchrun: its own rendezvous
    # would wait for the other node first, torchrun --rdzv_conf timeout=<s> bounds that)
    alone = subprocess.run([sys.executable, SCRIPTED_RUN, str(tmp_path / "alone"), *args], capture_output=True,
                           text=True, timeout=120, env=clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                                                                 NODE_RANK="0"))
    assert alone.returncode == 1
    assert "waited longer than trainer.ddp_timeout_s" in alone.stderr.splitlines()[-1], alone.stderr[-2000:]
    assert "internal error" not in alone.stderr


def test_a_launch_of_another_world_size_is_refused_before_any_work(make_cfg, tmp_path, monkeypatch):
    for k in (*RANK_VARIABLES, "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "3")  # e.g. torchrun --nnodes=3 against trainer.num_nodes=2 x devices=1
    with pytest.raises(ConfigError, match=r"started 3 processes \(WORLD_SIZE\) but trainer.num_nodes=2"):
        train(RunSettings.from_config(make_cfg(*NODES)), tmp_path / "wrong")
    assert not (tmp_path / "wrong" / "config.yaml").exists()


def trainer(**lightning) -> TrainerSettings:
    return TrainerSettings.from_config({"ddp_timeout_s": 5, **lightning}, check=False)


@pytest.mark.parametrize("env, main, name", [
    ({}, True, "0"),
    ({"LOCAL_RANK": "1"}, False, "1"),  # Lightning's copy on one node
    ({"NODE_RANK": "1"}, False, "1.0"),  # node 1 started by hand: LOCAL_RANK 0 (or unset) too
    ({"NODE_RANK": "1", "LOCAL_RANK": "0"}, False, "1.0"),
    ({"RANK": "2", "GROUP_RANK": "1", "LOCAL_RANK": "0"}, False, "2"),  # torchrun, node 1
    ({"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0"}, True, "0"),
    ({"SLURM_PROCID": "3"}, False, "3"),
])
def test_global_rank_zero_is_the_one_writer_on_every_node(monkeypatch, env, main, name):
    for k in RANK_VARIABLES:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert is_main_process() is main
    assert process_rank_name() == name


def test_a_rank_on_another_node_logs_apart_and_follows_the_sweep_folder_given(monkeypatch):
    for k in (*RANK_VARIABLES, SWEEP_DIR_ENV):
        monkeypatch.delenv(k, raising=False)
    argv = ["sesame-train", "--multirun", "hydra.sweep.dir=/shared/sweep", "seed=1,2"]
    assert follow_rank_zero_sweep(argv) == argv  # rank 0
    monkeypatch.setenv("RANK", "1")
    assert follow_rank_zero_sweep(argv)[len(argv):] == [
        "hydra.job.name=train_ddp_process_1", 'hydra.sweep.dir="/shared/sweep/.ddp_rank_1"',
        "hydra.sweep.subdir=../${hydra.job.num}"]
    assert follow_rank_zero_sweep(["sesame-train", "seed=1"])[2:] == ["hydra.job.name=train_ddp_process_1"]


def test_a_launch_that_disagrees_with_the_settings_is_refused(monkeypatch):
    for k in (*RANK_VARIABLES, "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("NODE_RANK", "2")
    with pytest.raises(ConfigError, match="NODE_RANK=2 but trainer.num_nodes=2"):
        check_launch(trainer(num_nodes=2, devices=1))
    monkeypatch.setenv("NODE_RANK", "1")
    check_launch(trainer(num_nodes=2, devices=1))
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="started 2 processes"):
        check_launch(trainer(num_nodes=2, devices=2))
    check_launch(trainer(num_nodes=2, devices="auto"))  # Lightning counts the devices


def test_the_ddp_strategy_gets_the_timeout_and_other_strategies_stay():
    from datetime import timedelta

    strategy = strategy_with_timeout(trainer(strategy="ddp"))
    assert strategy._timeout == timedelta(seconds=5) and strategy._start_method == "popen"
    assert strategy_with_timeout(trainer(strategy="ddp_spawn"))._start_method == "spawn"
    assert strategy_with_timeout(trainer(strategy="auto")) == "auto"
    assert strategy_with_timeout(TrainerSettings.from_config({"strategy": "ddp"}, check=False)) == "ddp"
    with pytest.raises(ConfigError, match="ddp_timeout_s"):
        TrainerSettings.from_config({"ddp_timeout_s": 0}, check=False)


def test_ranks_that_do_not_see_rank_zeros_run_folder_are_all_refused(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from sesame.tasks.runs import shared_run_folder
    from sesame.tasks.runs.run_lock import run_folder_lock

    monkeypatch.setattr(shared_run_folder, "VISIBLE_WITHIN_S", 0.0)
    callback = shared_run_folder.SharedRunFolder(tmp_path)
    with run_folder_lock(tmp_path):  # rank 0 holds it
        mine = {"host": "a", "dir": str(tmp_path), "lock": json.loads((tmp_path / ".sesame.lock").read_text())}
        for other in ({**mine, "host": "b"}, {**mine, "host": "b", "dir": "/elsewhere", "lock": None}):
            monkeypatch.setattr(shared_run_folder, "gather_objects", lambda seen, other=other: [mine, other])
            rank = SimpleNamespace(world_size=2, global_rank=0)
            if other["lock"]:
                callback.setup(rank, None, "fit")  # another host seeing the same lock: one folder
                continue
            with pytest.raises(ConfigError, match=r"rank 1 \(b: /elsewhere\) cannot see.*hydra.run.dir"):
                callback.setup(rank, None, "fit")
