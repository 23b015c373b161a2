"""How a console script ends on an error.

- A :class:`sesame.tasks.core.errors.UserError` (bad data, paths, settings), or a usage mistake met by a
  :class:`OneLineParser`: one ``error: <message>`` line
  naming the file, line or key and the fix, exit code 2, no traceback (``SESAME_TRACEBACK=1`` shows it).
  So is a full disk or read-only file system met by any write (``tasks/core/atomic_files.py``'s ``disk_error``).
- :class:`sesame.tasks.core.errors.RunStopped` (a SIGTERM ended the run, its checkpoint saved): its message,
  which says how to resume, and exit code 128 + the signal (143 for SIGTERM), as a killed process has.
- A peer of a distributed (DDP) run that ended (killed, out of memory): torch.distributed's error on the
  surviving processes says "Connection reset by peer". One line saying so and how to resume, exit code 1.
- Anything else is a bug in sesame (or in a library under it): the traceback, a line asking to
  report it, exit code 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Iterator
from typing import NoReturn

from sesame.tasks.core.atomic_files import disk_error
from sesame.tasks.core.errors import RunStopped, UserError

REPORT = "This is a bug, not a problem with your input: please report it with the command you ran and the traceback above."


#: torch.distributed's errors of a broken process group (by class name: importing torch here would slow --help).
PEER_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError")


def peer_lost(err: BaseException) -> bool:
    """Whether ``err`` is a distributed run's process group breaking because another process ended: gloo's
    "Connection reset by peer" / "closed by peer", as torch.distributed's error or a plain RuntimeError."""
    text = str(err)
    by_peer = "by peer" in text or "Connection reset" in text or "Broken pipe" in text
    return by_peer and (any(c.__name__ in PEER_ERRORS for c in type(err).__mro__)
                        or (isinstance(err, RuntimeError) and "gloo" in text.lower()))


def peers_late(err: BaseException) -> bool:
    """Whether ``err`` is a distributed run's process waiting past its timeout (``trainer.ddp_timeout_s``) for the
    others: at the start (a node never started, another port or address) or at a collective (a peer stuck)."""
    text = str(err).lower()
    distributed = any(c.__name__ in PEER_ERRORS for c in type(err).__mro__) or "gloo" in text or "nccl" in text
    return distributed and ("timed out" in text or "timeout" in text)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage mistakes (an unknown option, a value of the wrong type) end as
    one ``error:`` line and exit code 2, like every other user error, instead of the usage text."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


@contextlib.contextmanager
def user_errors_are_messages() -> Iterator[None]:
    """Exit 2 with one line for user errors, 128 + signal for a stopped run, exit 1 with the traceback for
    everything else."""
    try:
        yield
    except RunStopped as stop:
        print(f"stopped: {stop}", file=sys.stderr)
        sys.exit(stop.exit_code)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:
        explained = err if isinstance(err, UserError) else disk_error(err) if isinstance(err, OSError) else None
        if explained is None and peer_lost(err):
            if os.environ.get("SESAME_TRACEBACK") == "1":
                raise
            reason = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
            print(f"error: another process of this distributed run ended ({reason}), so this one stopped too. Fix: see "
                  "that process's own output for why it ended, then rerun the same command with resume=true to "
                  "continue from the run's checkpoints/last.ckpt", file=sys.stderr)
            sys.exit(1)
        if explained is None and peers_late(err):
            if os.environ.get("SESAME_TRACEBACK") == "1":
                raise
            reason = str(err).strip().splitlines()[-1][:200]
            print(f"error: this process of a distributed run waited longer than trainer.ddp_timeout_s for the others "
                  f"({reason}). Fix: start trainer.num_nodes x trainer.devices processes in all, one command per node, "
                  "each with the same settings, MASTER_ADDR and MASTER_PORT (torchrun: --master_addr, --master_port) "
                  "and its own NODE_RANK (--node_rank); if one is stuck, see its own output", file=sys.stderr)
            sys.exit(1)
        if explained is None:
            traceback.print_exc()
            print(f"\ninternal error: {REPORT}", file=sys.stderr)
            sys.exit(1)
        if os.environ.get("SESAME_TRACEBACK") == "1":
            raise
        print(f"error: {explained}\n(set SESAME_TRACEBACK=1 to see the traceback)", file=sys.stderr)
        sys.exit(2)
