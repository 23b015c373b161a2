"""Sesame's console scripts, run by the test suite from a process that has already imported sesame.

A fresh ``sesame-train`` spends about four CPU seconds importing torch, Lightning, transformers and
datasets before it reads its arguments; the suite runs well over a hundred such processes. A server
started by :class:`CommandServer` imports them once and forks a child per command. The child is what a
fresh process would be after its imports: it takes the command's argv, working directory, environment
and standard streams, runs the console script's entry point (or ``python -m MODULE``, or ``python
FILE``) and exits as the interpreter would (``SystemExit``, an uncaught exception, the atexit handlers, a
signal). The command itself is a small client (tests/preloaded_client.py) that exits as its child does.

Two ways in: the tests that run commands through a shell (the README's and the site's) put :func:`shims`
first on ``PATH`` (:func:`command_server`), each ``sesame-*`` there a client; the others call :func:`run` or
:func:`popen` as they would ``subprocess.run`` / ``subprocess.Popen`` with ``[sys.executable, "-m", MODULE,
...]`` or ``[sys.executable, FILE, ...]``, served by one server per test process. Anything else (``-c``
probes, other programs) runs as given.

What a fork does not repeat is the import itself. Commands whose import-time behaviour is the point
(``--help`` without torch, a bad setting reported before torch is imported) are tested in real fresh
processes elsewhere (tests/tasks/cli/test_startup.py). The server declines, and the client runs the real
script, when the command's environment differs from the server's in a variable other than
:data:`PER_COMMAND` (imports read some, e.g. ``OMP_NUM_THREADS`` and the ``HF_*`` switches).

Run as ``python -m tests.preloaded_commands SOCKET``: the server (stops when its parent does).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import runpy
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tests.preloaded_client import ADDRESS

CLIENT = Path(__file__).with_name("preloaded_client.py")
#: Environment variables a command may set differently from the server's: read by sesame (or the tests'
#: scripts) when it runs, not when it is imported, or a shell's own; and what a test process sets in its
#: own environment as it goes, which its commands inherit: pytest's current test, Lightning's seed (read when
#: a run seeds its workers), sklearn's KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK (Intel OpenMP's, which
#: this torch does not load), Ray's client mode and torch.compile's data-pointer switch (read by Ray, which
#: is not preloaded, and by a compile when it runs).
PER_COMMAND = frozenset({
    "PWD", "OLDPWD", "SHLVL", "_", "PATH", "COLUMNS", "LINES",
    "SESAME_DATA_DIR", "SESAME_CACHE_DIR", "SESAME_TRACEBACK", "SESAME_DDP_SWEEP_DIR", "KILL", "RECORD_BATCHES",
    "PYTEST_CURRENT_TEST", "PL_GLOBAL_SEED", "PL_SEED_WORKERS", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK",
    "RAY_CLIENT_MODE", "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    # a DDP rank's, read when the process group starts; Lightning's rank at import: see _import_time_state
    "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE",
})
#: Thread counts: a command may name the count the server's torch runs with (a benchmark's child sets both to
#: its --threads), since a fresh process given it would run as the served child does; any other count is declined.
THREAD_COUNTS = frozenset({"OMP_NUM_THREADS", "MKL_NUM_THREADS"})
#: The test process's environment as it started (tests/conftest.py's defaults set): the per-process server's.
BASE_ENV = dict(os.environ)
#: What the children import before any command: every console script's module and what a run imports later.
PRELOAD = ("hydra", "omegaconf", "lightning", "transformers", "transformers.models.auto.modeling_auto",
           "transformers.models.bert.modeling_bert", "peft", "accelerate", "safetensors.torch", "rich", "datasets",
           "sesame.tasks.runs.runner", "sesame.tasks.runs.evaluation", "sesame.tasks.inference.predictor",
           "sesame.tasks.core.known_noise", "sesame.tasks.encoders.store", "sesame.tasks.runs.run_lock")
#: Preloaded where installed (the ``export`` extra): an ONNX export imports them, about 1.3 s, in a dozen commands.
PRELOAD_IF_INSTALLED = ("onnx", "onnxscript", "onnxruntime", "torch.onnx._internal.exporter._core")


def console_scripts() -> dict[str, str]:
    """``{sesame-train: "sesame.tasks.cli.train:main", ...}``: the installed package's console scripts."""
    return {e.name: e.value for e in entry_points(group="console_scripts") if e.name.startswith("sesame-")}


def shims(folder: Path) -> Path:
    """``folder`` holding one executable per console script, each running :mod:`tests.preloaded_client`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in console_scripts():
        shim = folder / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{CLIENT}" --script {name} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    # ``python -m MODULE`` and ``python FILE.py`` (the pages' benchmark commands) served too; anything else runs as is
    python = folder / "python"
    client = f'"{sys.executable}" -S "{CLIENT}"'
    python.write_text(f'#!/bin/sh\ncase "$1" in\n'
                      f'  -m) shift; module="$1"; shift; exec {client} --module "$module" "$@";;\n'
                      f'  *.py) file="$1"; shift; exec {client} --path "$file" "$@";;\n'
                      f'esac\nexec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


class CommandServer:
    """A running server (``python -m tests.preloaded_commands``) with the environment ``env``; its
    address goes to the commands as ``$SESAME_COMMAND_SERVER``."""

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        self.address = str(folder / "server.sock")
        if len(self.address) > 100:  # an AF_UNIX address is at most 107 bytes
            self.address = str(Path(tempfile.mkdtemp(prefix="sesame-commands-")) / "server.sock")
        self.env = {**env, ADDRESS: self.address}
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.address)  # a stale one would be taken for this server's
        self.log = open(folder / "server.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen([sys.executable, "-m", "tests.preloaded_commands", self.address],
                                        cwd=Path(__file__).resolve().parents[1], env=self.env,
                                        stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not os.path.exists(self.address):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the command server did not start: {(folder / 'server.log').read_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.log.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.address)


@contextlib.contextmanager
def command_server(folder: Path, env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """The environment for commands served preloaded: ``env`` with the shims first on ``PATH``."""
    env = {**env, "PATH": f"{shims(folder / 'bin')}{os.pathsep}{env.get('PATH', '')}"}
    server = CommandServer(folder, env)
    try:
        yield server.env
    finally:
        server.stop()


_SERVER: CommandServer | None = None


def client_argv(argv: Sequence[str]) -> list[str] | None:
    """The client's argv for ``[sys.executable, "-m", MODULE, ...]`` or ``[sys.executable, FILE.py, ...]``;
    None for anything else."""
    argv = [str(a) for a in argv]
    if len(argv) < 2 or argv[0] != sys.executable or not (argv[1] == "-m" or argv[1].endswith(".py")):
        return None
    kind, target, rest = ("--module", argv[2], argv[3:]) if argv[1] == "-m" else ("--path", argv[1], argv[2:])
    return [sys.executable, "-S", str(CLIENT), kind, target, *rest]


def preloaded(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str] | None]:
    """``(argv, env)`` for ``subprocess``: a command :func:`client_argv` can serve as a client of this process's
    server (started on first use), anything else as given."""
    served = client_argv(argv)
    if served is None:
        return [str(a) for a in argv], None if env is None else dict(env)
    global _SERVER
    if _SERVER is None:
        _SERVER = CommandServer(Path(tempfile.mkdtemp(prefix="sesame-commands-")), BASE_ENV)
        atexit.register(_SERVER.stop)
    return served, {**(os.environ if env is None else env), ADDRESS: _SERVER.address}


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, **kwargs)``, served preloaded (:func:`preloaded`)."""
    argv, env = preloaded(argv, kwargs.pop("env", None))
    return subprocess.run(argv, env=env, **kwargs)


def popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)``, served preloaded (:func:`preloaded`)."""
    argv, env = preloaded(argv, kwargs.pop("env", None))
    return subprocess.Popen(argv, env=env, **kwargs)


# --- the server -------------------------------------------------------------------------------------------------


def _read(connection: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``connection``; a client that went away before sending them is a ConnectionError."""
    data = b""
    while len(data) < size:
        if not (chunk := connection.recv(size - len(data))):
            raise ConnectionError("the client went away before its request was whole")
        data += chunk
    return data


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    _, fds, _, _ = socket.recv_fds(connection, 1, 3)
    try:
        return json.loads(_read(connection, struct.unpack("!Q", _read(connection, 8))[0])), fds
    except ConnectionError:
        for fd in fds:
            os.close(fd)
        raise


def _declined(request: dict, ours: Mapping[str, str], set_by_imports: Mapping[str, str], threads: int) -> list[str]:
    """The environment variables where ``request`` differs from ``ours`` (the server's before its imports) in a way
    imports may read. What the imports set themselves (``set_by_imports``) they set in a fresh process too; a thread
    count equal to ``threads`` (the server's torch's, which sets OpenMP's and MKL's alike) changes nothing."""
    theirs = request["env"]

    def same_threads(key: str) -> bool:
        return key in THREAD_COUNTS and theirs.get(key) == str(threads) and ours.get(key) in (None, str(threads))

    return sorted(k for k in set(theirs) | set(ours) if k not in PER_COMMAND and k not in set_by_imports
                  and theirs.get(k) != ours.get(k) and not same_threads(k))


def _exit_code(code: object) -> int:
    """What the interpreter exits with for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _lightning_logs_through_the_root() -> None:
    """Lightning's loggers as a fresh process leaves them when Lightning is imported after logging is configured.

    Imported without handlers on the root logger (as the server imports it), ``lightning.pytorch`` and
    ``lightning.fabric`` print through a handler of their own and stop propagating; imported after, they
    propagate to the root's handlers (Hydra's job log, a ``logging.basicConfig``). sesame's commands import
    Lightning only once their logging is set up (tasks/cli/: Hydra's, or basicConfig before the lazy imports);
    a script run by path (``python FILE``) imports it first, as the server did."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:
                logger.removeHandler(handler)
        logger.propagate = True


class _ServedPopen(subprocess.Popen):
    """``subprocess.Popen`` in a served command: the Python processes it starts (Lightning's DDP ranks, a sweep's
    jobs) are served too, when their environment names the server (a copy of the command's does)."""

    def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
        env = kwargs.get("env")
        served = None if isinstance(args, (str, bytes)) else client_argv(args)
        if served and ADDRESS in (os.environ if env is None else env):
            args = served
        super().__init__(args, *rest, **kwargs)


def _import_time_state() -> None:
    """What the preloaded imports read from the environment, read again from the command's: Lightning takes a
    process's rank from ``RANK`` / ``LOCAL_RANK`` when it is imported (a DDP rank started by Lightning has
    ``LOCAL_RANK=1``)."""
    from lightning.fabric.utilities.rank_zero import _get_rank, rank_zero_only

    rank_zero_only.rank = _get_rank() or 0


def _command(request: dict, scripts: dict[str, str]) -> object:
    """Run the request's command as the interpreter would, to its exit code (what ``sys.exit`` was given)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    argv, kind, target = list(request["argv"]), request["kind"], request["target"]
    _import_time_state()
    subprocess.Popen = _ServedPopen
    if kind in ("script", "module") and target.startswith(("sesame-", "sesame.tasks.cli.")):
        _lightning_logs_through_the_root()
    try:
        if kind == "script":  # a console script: sys.argv[0] its file, __main__ its module (no spec)
            sys.argv, sys.path[0] = argv, os.path.dirname(argv[0])
            main = type(sys)("__main__")
            main.__file__, main.__spec__ = argv[0], None  # Lightning relaunches DDP ranks from __main__
            sys.modules["__main__"] = main
            module, function = scripts[target].split(":")
            return getattr(importlib.import_module(module), function)()
        if kind == "module":  # python -m: the module runs afresh as __main__, the working directory first on sys.path
            sys.argv, sys.path[0] = [target, *argv[3:]], os.getcwd()
            sys.modules.pop(target, None)  # as in a fresh process, where only its package was imported
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:  # python FILE: its folder first on sys.path
            sys.argv, sys.path[0] = argv[1:], os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:
        return exit_.code
    except BaseException:  # noqa: BLE001 (the interpreter's own handling of an uncaught exception)
        traceback.print_exc()
        return 1
    return None


def _child(request: dict, fds: list[int], scripts: dict[str, str], imports_log: str) -> None:
    """Become the command: never returns. What it imports beyond the preloaded modules goes to ``imports_log``
    (where :data:`PRELOAD` could save the commands more)."""
    code, before, start = 1, set(sys.modules), time.monotonic()
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _exit_code(_command(request, scripts))
        import threading

        threading._shutdown()  # what the interpreter does before the atexit handlers: join non-daemon threads
        atexit._run_exitfuncs()
        new = sorted({name.split(".")[0] for name in set(sys.modules) - before})
        with open(imports_log, "a") as log:
            command = " ".join(request["argv"][1:4])[:80]
            log.write(f"{time.monotonic() - start:6.1f} s  {request['target']} {command}: {new}\n")
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(address: str) -> None:
    scripts = console_scripts()
    environment = dict(os.environ)  # as the server started: imports set some (TORCHINDUCTOR_CACHE_DIR)
    sys.stdout.flush()
    printed = os.fstat(1).st_size + os.fstat(2).st_size  # the server's log
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        for module in {*PRELOAD, *(value.split(":")[0] for value in scripts.values())}:
            importlib.import_module(module)
        for module in PRELOAD_IF_INSTALLED:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        from hydra.core.plugins import Plugins

        Plugins.instance()  # Hydra's scan of hydra_plugins (a launcher or sweeper is looked up there by name)
    sys.stdout.flush()
    sys.stderr.flush()
    # What imports print (a warning, a log line) a fresh process prints to its command's output: a child could not.
    wrote = os.fstat(1).st_size + os.fstat(2).st_size > printed
    noisy = [str(w.message) for w in warned] or (["output"] if wrote else [])
    # e.g. Lightning's PYTORCH_NVML_BASED_CUDA_CHECK, torch's TORCHINDUCTOR_CACHE_DIR: a fresh process's imports
    # set them
    set_by_imports = {k: v for k, v in os.environ.items() if environment.get(k) != v}
    threads_of_torch = importlib.import_module("torch").get_num_threads()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(16)
    os.rename(address + ".tmp", address)  # the address exists once the server listens
    threads = [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    print(f"serving {sorted(scripts)} at {address} (threads after the imports: {threads})", flush=True)
    running: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, *running.values()], [], [], 0.05)
        for connection in ready:
            if connection is listener:
                client, _ = listener.accept()
                try:
                    request, fds = _receive(client)
                except ConnectionError:  # killed while it sent its request: nothing to run
                    client.close()
                    continue
                declined = _declined(request, environment, set_by_imports, threads_of_torch)
                why = (f"the preloading imports printed {noisy}" if noisy
                       else declined and f"its environment differs in {declined}")
                if why:
                    print(f"declined {request['argv'][:4]}: {why}", flush=True)
                    client.sendall(json.dumps({"fallback": True}).encode())
                    client.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for other in running.values():
                        other.close()
                    client.close()
                    request["env"] = {**set_by_imports, **request["env"]}  # what its imports would have set
                    _child(request, fds, scripts, address + ".imports")
                for fd in fds:
                    os.close(fd)
                running[pid] = client
            else:  # a client closed its end: it was killed; so is its command
                pid = next(p for p, c in running.items() if c is connection)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            client = running.pop(pid)
            answer = {"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status) else {"code": os.WEXITSTATUS(status)}
            with contextlib.suppress(OSError):
                client.sendall(json.dumps(answer).encode())
            client.close()


if __name__ == "__main__":
    serve(sys.argv[1])
