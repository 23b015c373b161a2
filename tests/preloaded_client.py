"""A command run by the test suite's preloaded command server (tests/preloaded_commands.py).

``python -S preloaded_client.py KIND TARGET ARGS...`` with KIND one of ``--script`` (a console script,
e.g. ``sesame-train``), ``--module`` (``python -m TARGET``) or ``--path`` (``python TARGET``): it hands the
command, its working directory, environment and standard streams to the server named by
``$SESAME_COMMAND_SERVER``, which forks a child that has already imported sesame, and exits as that child
exits (its exit code, or the same signal). Without a server, or when the server declines (an environment
that differs where imports read it), it runs the real command instead. Standard library only: it starts
in ~20 ms.
"""

import json
import os
import signal
import socket
import struct
import sys

ADDRESS = "SESAME_COMMAND_SERVER"


def real_command(kind: str, target: str, args: list[str]) -> list[str]:
    """What the command is without the server."""
    if kind == "--script":
        return [os.path.join(os.path.dirname(sys.executable), target), *args]
    return [sys.executable, *(["-m"] if kind == "--module" else []), target, *args]


def run_real(kind: str, target: str, args: list[str]) -> None:
    argv = real_command(kind, target, args)
    os.execv(argv[0], argv)


def main() -> None:
    kind, target, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    address = os.environ.get(ADDRESS)
    if not address:
        run_real(kind, target, args)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
    except OSError:
        run_real(kind, target, args)
    request = json.dumps({"kind": kind.lstrip("-"), "target": target, "argv": real_command(kind, target, args),
                          "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(connection, [b"f"], [0, 1, 2])
    connection.sendall(struct.pack("!Q", len(request)) + request)
    reply = b""
    while chunk := connection.recv(4096):
        reply += chunk
    answer = json.loads(reply or b'{"fallback": true}')
    if answer.get("fallback"):
        run_real(kind, target, args)
    if answer.get("signal"):
        if answer["signal"] not in (signal.SIGKILL, signal.SIGSTOP):  # the two no process can catch
            signal.signal(answer["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), answer["signal"])
    sys.exit(answer["code"])


if __name__ == "__main__":
    main()
