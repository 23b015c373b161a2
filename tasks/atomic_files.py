"""Files that are either complete or absent: write to a temporary name in the same folder, then rename.

A run killed mid-write leaves the previous version (or nothing), never a truncated file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import torch


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """``with atomic_open(path, "wb") as f: ...``: ``path`` appears, whole, only when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it private (0600); a run's files are as readable as any
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    with atomic_open(path) as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def current_umask() -> int:
    """The process's umask (reading it means setting it: it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def torch_save_atomic(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (a checkpoint is whole or not there)."""
    with atomic_open(path, "wb") as handle:
        torch.save(obj, handle)
    return Path(path)
