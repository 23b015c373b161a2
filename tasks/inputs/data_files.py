"""The one check every reader makes of a configured data path before opening it."""

from __future__ import annotations

import os
from pathlib import Path

from sesame.tasks.core.errors import DataError, MissingFileError
from sesame.tasks.core.paths import DATA_DIR_ENV, DEFAULT_DATA_DIR, data_dir_path


def check_data_file(path: str | Path, key: str) -> Path:
    """``path`` as a ``Path`` when it is a non-empty file; ``key`` (e.g. ``train_file``) names the
    setting it came from, so the message says which one to fix."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a file (data.{key}). Fix: point data.{key} at a file in it")
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file (data.{key}; relative paths start from {Path.cwd()})"
                               + _data_dir_hint(path, key))
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty (data.{key})")
    return path


def _data_dir_hint(path: Path, key: str) -> str:
    """What to fix when ``path`` lies under ``$SESAME_DATA_DIR`` (a full-data preset, ``${data_dir:...}``
    in ``conf/data/``): where that folder is now, and that the README's "Data" section lists the layout."""
    root = Path(data_dir_path()).expanduser().absolute()
    try:
        relative = path.absolute().relative_to(root)
    except ValueError:
        return ""  # a path of the user's own: the message above says all there is
    source = (f"set to {os.environ[DATA_DIR_ENV]}" if DATA_DIR_ENV in os.environ
              else f"not set: the default {DEFAULT_DATA_DIR}, from {Path.cwd()}")
    return (f". This data preset reads files under ${DATA_DIR_ENV} ({source}). Fix: put {relative.as_posix()} "
            f"there, or set {DATA_DIR_ENV} to the folder that holds {relative.parts[0]}/ (README.md, section "
            f"'Data', lists the files each preset expects), or set data.{key} to your copy")
