"""The errors a user can fix: bad data files, bad settings. Anything else raised is a bug.

The console scripts turn a :class:`UserError` into one ``error: ...`` line and exit code 2
(``tasks/cli/errors.py``). Each subclass also derives from ``ValueError`` so library callers that
catch ``ValueError`` keep working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class UserError(Exception):
    """Input or configuration the user must fix; the message names the file, line or key and the fix."""


class DataError(UserError, ValueError):
    """A data file or example that cannot be used as configured."""


class ConfigError(UserError, ValueError):
    """A setting that is unknown, missing, or impossible for this model or task."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder named in the config or on the command line does not exist."""


def refused_global(err: BaseException) -> str | None:
    """The code global (``posix.system``) that torch's weights-only unpickler refused in ``err``, or None: how a
    pickle in a checkpoint or a model file reaches code, named in the refusal sesame reports."""
    import re

    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    return found.group(1) if found else None


class RunStopped(Exception):
    """A run ended early on purpose (a scheduler's SIGTERM): not a bug, not bad input. The console
    scripts print the message (which says how to resume) and exit with ``exit_code`` (128 + signal)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class WriteError(UserError, OSError):
    """A file that cannot be written where it was asked for: a full disk or quota, a read-only or
    unwritable folder, a regular file where a folder should be (``tasks/core/atomic_files.py``)."""


@contextlib.contextmanager
def settings_check() -> Iterator[None]:
    """Turn a ``ValueError`` raised while building a part from settings (``heads/`` are plain torch and
    raise ``ValueError`` for impossible arguments, e.g. ``fusion=concat_last_4`` on a 2-layer encoder)
    into a :class:`ConfigError`."""
    try:
        yield
    except UserError:
        raise
    except ValueError as err:
        raise ConfigError(str(err)) from err
