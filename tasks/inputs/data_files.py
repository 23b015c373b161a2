"""The one check every reader makes of a configured data path before opening it."""

from __future__ import annotations

import codecs
import json
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
    check_utf8(path, key)
    return path


def check_utf8(path: Path, key: str, chunk: int = 1 << 20) -> None:
    """A :class:`DataError` naming the line and column of the first byte of ``path`` that is not UTF-8
    (every reader decodes UTF-8; a file saved as Latin-1 or UTF-16 would otherwise fail deep inside one)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, done = 1, 0
    with path.open("rb") as handle:
        while True:
            data = handle.read(chunk)
            try:
                decoder.decode(data, final=not data)
            except UnicodeDecodeError as err:
                bad = done + err.start - len(decoder.getstate()[0])  # bytes held back from the last chunk come first
                with path.open("rb") as again:
                    before = again.read(max(bad, 0))
                line = before.count(b"\n") + 1
                column = len(before) - (before.rfind(b"\n") + 1) + 1
                raise DataError(f"{path}:{line}: byte 0x{err.object[err.start]:02x} at column {column} is not UTF-8 text "
                                f"(data.{key}). Fix: save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
            if not data:
                return
            done += len(data)


def _data_dir_hint(path: Path, key: str) -> str:
    """What to fix when ``path`` lies under ``$SESAME_DATA_DIR`` (a full-data preset, ``${data_dir:...}``
    in ``conf/data/``): where that folder is now, and that the documentation's "Data" section
    (``docs/configuration.md``) lists the layout."""
    root = Path(data_dir_path()).expanduser().absolute()
    try:
        relative = path.absolute().relative_to(root)
    except ValueError:
        return ""  # a path of the user's own: the message above says all there is
    source = (f"set to {os.environ[DATA_DIR_ENV]}" if DATA_DIR_ENV in os.environ
              else f"not set: the default {DEFAULT_DATA_DIR}, from {Path.cwd()}")
    return (f". This data preset reads files under ${DATA_DIR_ENV} ({source}). Fix: put {relative.as_posix()} "
            f"there, or set {DATA_DIR_ENV} to the folder that holds {relative.parts[0]}/ (docs/configuration.md, "
            f"section 'Data', lists the files each preset expects), or set data.{key} to your copy")


def check_json_lines(path: Path, expected: str) -> None:
    """A :class:`DataError` naming the first line of ``path`` that is not one JSON object (``expected``: what
    the object holds, for the message). Read here, by Python, before ``datasets`` hands the file to pyarrow's
    JSON reader: pyarrow's messages name no line, and long fuzzing runs saw that reader end the whole process
    (a segmentation fault) on broken input, which a readable error never may."""
    with path.open(encoding="utf-8-sig") as handle:
        for n, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line, parse_constant=reject_json_constant)
            except ValueError as err:  # json.JSONDecodeError is one, and NaN / Infinity
                reason = err.msg if isinstance(err, json.JSONDecodeError) else str(err)
                raise DataError(f"{path}:{n}: not valid JSON ({reason}); each line must be one JSON object "
                                f"with {expected}") from None
            if not isinstance(record, dict):
                raise DataError(f"{path}:{n}: a JSON {type(record).__name__}, not an object with {expected}")


def reject_json_constant(name: str) -> None:
    """``json.loads``' ``parse_constant`` hook: ``NaN``, ``Infinity`` and ``-Infinity``, which Python reads and
    JSON has none of, are a ValueError."""
    raise ValueError(f"{name} is not a JSON value")
