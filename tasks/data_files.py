"""The one check every reader makes of a configured data path before opening it."""

from __future__ import annotations

from pathlib import Path

from sesame.tasks.errors import DataError, MissingFileError


def check_data_file(path: str | Path, key: str) -> Path:
    """``path`` as a ``Path`` when it is a non-empty file; ``key`` (e.g. ``train_file``) names the
    setting it came from, so the message says which one to fix."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a file (data.{key}). Fix: point data.{key} at a file in it")
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file (data.{key}; relative paths start from {Path.cwd()})")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty (data.{key})")
    return path
