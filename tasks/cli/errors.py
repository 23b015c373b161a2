"""How a console script ends on an error.

- A :class:`sesame.tasks.core.errors.UserError` (bad data, paths, settings): one ``error: <message>`` line
  naming the file, line or key and the fix, exit code 2, no traceback (``SESAME_TRACEBACK=1`` shows it).
  So is a full disk or read-only file system met by any write (``tasks/core/atomic_files.py``'s ``disk_error``).
- :class:`sesame.tasks.core.errors.RunStopped` (a SIGTERM ended the run, its checkpoint saved): its message,
  which says how to resume, and exit code 128 + the signal (143 for SIGTERM), as a killed process has.
- Anything else is a bug in sesame (or in a library under it): the traceback, a line asking to
  report it, exit code 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Iterator

from sesame.tasks.core.atomic_files import disk_error
from sesame.tasks.core.errors import RunStopped, UserError

REPORT = "This is a bug, not a problem with your input: please report it with the command you ran and the traceback above."


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
        if explained is None:
            traceback.print_exc()
            print(f"\ninternal error: {REPORT}", file=sys.stderr)
            sys.exit(1)
        if os.environ.get("SESAME_TRACEBACK") == "1":
            raise
        print(f"error: {explained}\n(set SESAME_TRACEBACK=1 to see the traceback)", file=sys.stderr)
        sys.exit(2)
