"""``hydra/launcher=ray`` on a real Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head, a worker and
a third node of one CPU each, the third killed mid-sweep): a sweep's jobs land on the nodes and give the basic
launcher's metrics in the basic launcher's folders, the job of the killed node runs again on another; a sweep
rerun with ``resume=true`` skips its finished jobs and finishes the others; an unreachable cluster is one error
line. One sweep serves the first tests, so the module costs about a minute."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sesame.tasks.cli.ray_sweep import RaySettings, read_attempts
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.runs.sweep_report import finish_command, missing_jobs
from tests.conftest import require
from tests import preloaded_commands as preloaded

SEEDS = "seed=1,2,3,4"
#: Four short jobs: 64 examples in batches of 16, 2 epochs of the debug trainer's 4 batches.
JOB = ["trainer=debug", "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false",
       "trainer.max_epochs=2", "data.max_train_examples=64", "data.max_eval_examples=32", "data.batch_size=16"]


def sweep_command(tiny_bert_dir: Path, folder: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", SEEDS, f"encoder.name_or_path={tiny_bert_dir}",
            *JOB, f"hydra.sweep.dir={folder}", *extra]


def metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


@pytest.fixture(scope="module")
def basic_sweep(tiny_bert_dir, tmp_path_factory) -> tuple[subprocess.Popen, Path]:
    """The sweep under Hydra's basic launcher (one job after the other, in one process), started first: it runs
    while the cluster starts."""
    require("ray")
    folder = tmp_path_factory.mktemp("basic")
    with (folder.parent / "basic.err").open("w") as err:  # a file, not a pipe nobody reads while it runs
        process = preloaded.popen(sweep_command(tiny_bert_dir, folder / "sweep"), stdout=subprocess.DEVNULL, stderr=err)
    yield process, folder
    process.kill()
    process.wait()


@pytest.fixture(scope="module")
def basic_metrics(basic_sweep) -> dict[str, dict]:
    """Each job's metrics.json under the basic launcher."""
    process, folder = basic_sweep
    assert process.wait(timeout=600) == 0, (folder.parent / "basic.err").read_text()[-3000:]
    return {job: metrics(folder / "sweep" / job) for job in "0123"}


@pytest.fixture(scope="module")
def cluster(basic_sweep):
    """A head and a worker node, and a third node to kill during the sweep: one CPU and a small object store each."""
    from ray.cluster_utils import Cluster

    store = 80 * 2**20
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                           "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1, object_store_memory=store)
    doomed = cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    yield cluster, worker, doomed
    cluster.shutdown()


@dataclass
class RaySweep:
    folder: Path
    stdout: str
    stderr: str
    victim: str  # the job that ran on the node killed mid-job
    nodes: dict[str, str]  # "head", "worker", "doomed" -> Ray's node id
    address: str  # the cluster's


@pytest.fixture(scope="module")
def ray_sweep(cluster, tiny_bert_dir, tmp_path_factory) -> RaySweep:
    """The sweep on the cluster: its four jobs start on the three nodes (one CPU each); the third node is removed
    (its processes killed) as soon as a job starts there."""
    ray_cluster, worker, doomed = cluster
    folder = tmp_path_factory.mktemp("ray") / "sweep"
    command = sweep_command(tiny_bert_dir, folder, "hydra/launcher=ray", f"hydra.launcher.address={ray_cluster.address}")
    with preloaded.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as driver:
        deadline, victim = time.monotonic() + 300, None
        while victim is None and driver.poll() is None and time.monotonic() < deadline:
            victim = next((job for job in "0123" if any(a["node_id"] == doomed.node_id
                                                        for a in read_attempts(folder / job))), None)
            time.sleep(0.05)
        assert victim is not None, "no job started on the node to kill"
        assert not (folder / victim / "metrics.json").exists()  # killed before it finished
        ray_cluster.remove_node(doomed)
        out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, err[-3000:]
    nodes = {"head": ray_cluster.head_node.node_id, "worker": worker.node_id, "doomed": doomed.node_id}
    return RaySweep(folder, out, err, victim, nodes, ray_cluster.address)


def test_a_sweep_runs_on_the_nodes_with_the_basic_launchers_metrics_and_folders(ray_sweep, basic_metrics):
    folder = ray_sweep.folder
    finished_on = {job: read_attempts(folder / job)[-1]["node_id"] for job in "0123"}
    assert {ray_sweep.nodes["head"], ray_sweep.nodes["worker"]} <= set(finished_on.values()), finished_on
    for job in "0123":
        assert metrics(folder / job) == basic_metrics[job], job  # same seed, same numbers
        assert {"config.yaml", "checkpoints", "val_SST-2.tsv", ".hydra"} <= {p.name for p in (folder / job).iterdir()}
    table = (folder / "report.md").read_text()
    assert "| (defaults) |" in table and "Missing" not in table and table in ray_sweep.stdout
    assert missing_jobs(folder) == []


def test_a_job_lost_with_its_node_runs_again_on_a_node_that_is_left(ray_sweep):
    for job in "0123":
        attempts = [a["node_id"] for a in read_attempts(ray_sweep.folder / job)]
        if job == ray_sweep.victim:  # started on the killed node, finished elsewhere
            assert len(attempts) == 2 and attempts[0] == ray_sweep.nodes["doomed"] != attempts[1], attempts
        else:
            assert len(attempts) == 1, (job, attempts)  # no finished job ran again
    assert f"job {ray_sweep.victim}: attempt 2 on node" in ray_sweep.stderr


def test_resume_true_finishes_a_sweep_skipping_its_finished_jobs(basic_sweep, basic_metrics, tmp_path):
    """Job 1 interrupted after its last checkpoint, job 3 never started: the report names both and the command
    that finishes the sweep, which (run as printed) resumes job 1 from its last.ckpt, trains job 3 and leaves
    jobs 0 and 2 as they were. (The basic launcher's sweep: the command is the sweep's own, whatever its launcher.)"""
    folder = tmp_path / "sweep"
    shutil.copytree(basic_sweep[1] / "sweep", folder)
    (folder / "1" / "metrics.json").unlink()
    shutil.rmtree(folder / "3")
    assert [(m.number, m.state.split(",")[0]) for m in missing_jobs(folder)] == [("1", "started"), ("3", "never started")]
    command = finish_command(folder)
    assert command.startswith(f"sesame-train --multirun {SEEDS} ") and command.endswith(f"resume=true hydra.sweep.dir={folder}")
    untouched = {job: (folder / job / "metrics.json").stat().st_mtime_ns for job in "02"}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert {job: (folder / job / "metrics.json").stat().st_mtime_ns for job in "02"} == untouched
    assert "job 0: finished before" in done.stdout and "job 2: finished before" in done.stdout
    assert f"Restoring states from the checkpoint path at {folder / '1' / 'checkpoints' / 'last.ckpt'}" in \
        (folder / "1" / "train.log").read_text()  # the job's own log (Hydra's job logging)
    for job in "0123":
        assert metrics(folder / job) == basic_metrics[job], job
    assert missing_jobs(folder) == [] and "Missing" not in (folder / "report.md").read_text()


def test_the_report_lists_jobs_that_did_not_finish_and_how_to_finish_them(ray_sweep, tmp_path):
    from sesame.tasks.runs.sweep_report import write_table_report

    folder = tmp_path / "sweep"
    shutil.copytree(ray_sweep.folder, folder, ignore=shutil.ignore_patterns("checkpoints", "encoder"))
    (folder / "2" / "metrics.json").unlink()
    table, _ = write_table_report(folder)
    assert "Missing: 1 job without metrics.json" in table and "- job 2 (seed=3): started, did not finish" in table
    # the sweep's own command, on the same cluster
    command = f"sesame-train --multirun hydra/launcher=ray hydra.launcher.address={ray_sweep.address} {SEEDS} "
    assert f"`{command}" in table and f"resume=true hydra.sweep.dir={folder}`" in table
    assert table == (folder / "report.md").read_text()


def test_an_unreachable_cluster_is_one_error_line_and_exit_2(tmp_path):
    require("ray")
    done = preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "seed=1,2", "hydra/launcher=ray",
         "hydra.launcher.address=127.0.0.1:1", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "hydra.launcher.address=127.0.0.1:1: no Ray cluster reachable there" in errors[0]
    assert "Traceback" not in done.stderr and not list((tmp_path / "sweep").glob("*/"))  # no job started


def test_launcher_settings_are_checked():
    """conf/hydra/launcher/ray.yaml as Hydra hands it to the launcher (its keys but _target_), then changed."""
    from importlib.resources import files

    from omegaconf import OmegaConf

    shipped = OmegaConf.create(files("sesame.conf").joinpath("hydra/launcher/ray.yaml").read_text())
    shipped.pop("_target_")

    def settings(**changes) -> RaySettings:
        return RaySettings.from_config(OmegaConf.merge(shipped, changes))

    assert settings().threads == 1 and settings(num_cpus=4).threads == 4  # torch_threads follows num_cpus
    assert settings(num_cpus=0.5).threads == 1  # a fractional CPU: one thread
    with pytest.raises(ConfigError, match="unknown setting hydra.launcher.cpus"):
        settings(cpus=2)
    with pytest.raises(ConfigError, match="max_retries"):
        settings(max_retries=-1)


def test_a_job_asking_for_ddp_is_refused_before_ray_starts():
    from omegaconf import OmegaConf

    from sesame.tasks.cli.ray_sweep import refuse_multi_process_job

    refuse_multi_process_job(OmegaConf.create({"trainer": {"devices": 1, "num_nodes": 1, "strategy": "auto"}}), 0)
    for trainer in ({"devices": 2}, {"num_nodes": 2}, {"strategy": "ddp"}):
        with pytest.raises(ConfigError, match="job 3: .*runs each job as one process"):
            refuse_multi_process_job(OmegaConf.create({"trainer": {"devices": 1, "num_nodes": 1, **trainer}}), 3)


def test_a_retry_takes_over_only_the_lock_of_a_lost_attempt_of_its_job(tmp_path):
    """Ray runs a job again only once its attempt's worker or node is gone, so that attempt's lock is stale even
    when it names another machine, which the lock cannot check; any other holder's lock stays."""
    from sesame.tasks.cli.ray_sweep import _drop_lock_of_a_lost_attempt
    from sesame.tasks.runs.run_lock import LOCK_NAME

    lost = {"launch": "a", "attempt": 0, "node_id": "n1", "host": "other-machine", "pid": 4242}
    lock = tmp_path / LOCK_NAME
    lock.write_text(json.dumps({"pid": 999, "host": "other-machine"}))
    _drop_lock_of_a_lost_attempt(tmp_path, [lost])
    assert lock.exists()  # a run this job did not start
    lock.write_text(json.dumps({"pid": 4242, "host": "other-machine"}))
    _drop_lock_of_a_lost_attempt(tmp_path, [lost])
    assert not lock.exists()


def test_jobs_that_did_not_finish_are_listed_with_the_finishing_command_and_exit_1(tmp_path, capsys):
    """The sweep's callbacks (its summary) run first; then a line per unfinished job, the command, exit 1."""
    from types import SimpleNamespace

    from sesame.tasks.cli.ray_sweep import Outcome, end_with_failures

    ended = []
    launcher = SimpleNamespace(config="cfg", hydra_context=SimpleNamespace(
        callbacks=SimpleNamespace(on_multirun_end=lambda config: ended.append(config))))
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    hydra: [hydra/launcher=ray, hydra.mode=MULTIRUN, hydra.sweep.dir=x]\n"
        "    task: ['seed=1,2', data=sst2]\n")
    lost = Outcome(1, ["seed=2", "data=sst2"], None, "lost by Ray after 0 retries (NodeDiedError: ...)")
    with pytest.raises(SystemExit) as stop:
        end_with_failures(launcher, [lost], 2, tmp_path)
    assert stop.value.code == 1 and ended == ["cfg"]
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "job 1 (seed=2 data=sst2) did not finish: lost by Ray after 0 retries (NodeDiedError: ...)"
    assert lines[1].startswith("error: 1 of 2 jobs of the sweep did not finish") and lines[1].endswith(
        f"sesame-train --multirun hydra/launcher=ray seed=1,2 data=sst2 resume=true hydra.sweep.dir={tmp_path}")
