"""The preloaded command server (tests/preloaded_commands.py) runs a command as a fresh process would: the
same output, exit code, signal, standard input, working directory, environment, argv and ``__main__``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests import preloaded_commands as preloaded

PROBE = """
import json, os, signal, sys
import __main__
if sys.argv[1:2] == ["kill"]:
    os.kill(os.getpid(), signal.SIGKILL)
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "stdin": sys.stdin.read(),
                  "env": os.environ.get("SESAME_DATA_DIR"), "main_spec": __main__.__spec__ is None,
                  "main_file": os.path.basename(getattr(__main__, "__file__", ""))}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]) if sys.argv[1:2] and sys.argv[1].isdigit() else None)
"""


def both(argv: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The command run fresh and served preloaded."""
    return (subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs),
            preloaded.run(argv, capture_output=True, text=True, timeout=120, **kwargs))


def test_a_script_served_preloaded_runs_as_a_fresh_process(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**preloaded.BASE_ENV, "SESAME_DATA_DIR": "x"}  # a variable a command may set
    for args in (["3", "a b"], [], ["kill"]):
        fresh, served = both([sys.executable, str(script), *args], cwd=tmp_path, input="some input", env=env)
        assert served.args[:4] == [sys.executable, "-S", str(preloaded.CLIENT), "--path"], "not served"
        assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == -signal.SIGKILL


def test_a_module_served_preloaded_runs_as_python_dash_m(tmp_path):
    package = tmp_path / "probe_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.py").write_text(PROBE)
    fresh, served = both([sys.executable, "-m", "probe_package.probe", "0"], cwd=tmp_path, input="", env=preloaded.BASE_ENV)
    assert served.args[3] == "--module"
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr) == \
        (0, fresh.stdout, "to stderr\n")


def test_a_sesame_command_is_served_by_the_preloaded_children(tmp_path):
    fresh, served = both([sys.executable, "-m", "sesame.tasks.cli.predict", str(tmp_path / "no-such-run")],
                         env=preloaded.BASE_ENV)  # not what earlier tests of this process added to its environment
    assert served.returncode == fresh.returncode == 2
    assert served.stderr == fresh.stderr and "no-such-run" in served.stderr
    served_log = Path(preloaded._SERVER.address + ".imports").read_text()
    assert "sesame.tasks.cli.predict" in served_log  # a child ran it, not the fallback


def test_an_environment_that_imports_read_differently_runs_the_real_process(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**preloaded.BASE_ENV, "OMP_NUM_THREADS": "7"}
    served = preloaded.run([sys.executable, str(script), "5"], capture_output=True, text=True, env=env)
    assert served.returncode == 5
    log = Path(preloaded._SERVER.address).with_name("server.log").read_text()
    assert "OMP_NUM_THREADS" in log.splitlines()[-1]


def test_a_thread_count_equal_to_the_servers_is_served_and_another_is_not(tmp_path):
    """A benchmark's child names its thread count in both OMP_NUM_THREADS and MKL_NUM_THREADS: the server's own count
    (its torch's, from OMP_NUM_THREADS=1 here) changes nothing a fresh process would do differently; another does."""
    import torch

    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    log = Path(preloaded._SERVER.address).with_name("server.log")
    threads = str(torch.get_num_threads())
    assert preloaded.BASE_ENV.get("OMP_NUM_THREADS") == threads == "1"
    declines = log.read_text().count("declined")
    env = {**preloaded.BASE_ENV, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    fresh, served = both([sys.executable, str(script), "3"], env=env)
    assert served.returncode == fresh.returncode == 3 and served.stdout == fresh.stdout
    assert log.read_text().count("declined") == declines  # served by a child
    preloaded.run([sys.executable, str(script), "3"], env={**env, "MKL_NUM_THREADS": "2"}, capture_output=True)
    assert "MKL_NUM_THREADS" in log.read_text().splitlines()[-1]


def test_the_python_shim_serves_files_and_modules_and_runs_anything_else_as_is(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    fresh = subprocess.run([sys.executable, "probe.py", "3", "a b"], cwd=tmp_path, capture_output=True, text=True,
                           input="in", env=preloaded.BASE_ENV, timeout=120)
    with preloaded.command_server(tmp_path / "server", preloaded.BASE_ENV) as env:
        shell = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 120}
        served = subprocess.run(["bash", "-c", "python probe.py 3 'a b'"], input="in", **shell)
        probe = subprocess.run(["bash", "-c", "python -c 'import sys; print(sys.argv)' x"], **shell)
        log = Path(env[preloaded.ADDRESS] + ".imports").read_text()
    assert (served.returncode, served.stdout, served.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert served.returncode == 3
    assert "probe.py" in log  # a child ran it
    assert (probe.returncode, probe.stdout) == (0, "['-c', 'x']\n")  # -c: the real interpreter
