"""User errors (bad data, bad paths, bad settings) end a command with one clear line, not a traceback."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

USER_ERRORS = (FileNotFoundError, ValueError, KeyError)


@contextlib.contextmanager
def user_errors_are_messages() -> Iterator[None]:
    """Print ``error: <message>`` and exit 2 for user errors; ``SESAME_TRACEBACK=1`` shows the traceback."""
    try:
        yield
    except USER_ERRORS as err:
        if os.environ.get("SESAME_TRACEBACK") == "1":
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {message}\n(set SESAME_TRACEBACK=1 to see the traceback)", file=sys.stderr)
        sys.exit(2)
