"""Folders that several processes write into at once (a shared feature cache, a sweep's encoder store).

A writer builds under a staging name that says who it is (``.<name>.staging-<host>-<pid>-<token>``),
publishes by one rename, and the first published copy wins. A writer killed mid-write (SIGKILL, power
loss) leaves its staging folder behind; :func:`remove_dead_writers_leftovers` deletes those whose writer
(same host, that pid) no longer runs, so they never outlive the next writer's run. An exclusive lock
file per key (:func:`exclusive_lock`, ``flock``: released by the kernel when its holder dies) lets one
writer build a key while the others wait for it rather than computing it twice.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX; elsewhere writers of one key race, and the first rename still wins
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_HOST = socket.gethostname().replace("/", "_")
_STAGING = re.compile(r"^\.(?P<name>.+)\.staging-(?P<host>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]{8})$")


def staging_name(name: str) -> str:
    """The hidden name this process writes ``name`` under until it is whole."""
    return f".{name}.staging-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}"


def staging_folder(parent: Path, name: str) -> Path:
    """A new, empty staging folder for ``parent / name`` (see :func:`staging_name`)."""
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / staging_name(name)
    folder.mkdir()
    return folder


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one we may not signal runs too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_writers_leftovers(parent: Path) -> list[Path]:
    """Delete the staging folders and files directly under ``parent`` whose writer, on this host, is
    dead (another host's are left alone: their pid says nothing here). Returns what was removed."""
    removed = []
    for path in parent.iterdir() if parent.is_dir() else ():
        match = _STAGING.match(path.name)
        if not match or match["host"] != _HOST or process_alive(int(match["pid"])):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def is_staging(path: Path) -> bool:
    """Whether ``path`` is a writer's staging name, not a published one."""
    return _STAGING.match(path.name) is not None


def writer_running(path: Path) -> bool:
    """Whether the writer of the staging folder ``path`` may still be writing it (it runs, or runs on
    another host, where its pid cannot be checked)."""
    match = _STAGING.match(path.name)
    return bool(match) and (match["host"] != _HOST or process_alive(int(match["pid"])))


def publish_folder(staging: Path, target: Path) -> bool:
    """Rename ``staging`` to ``target`` in one step; False (and ``staging`` removed) where another writer
    published ``target`` first: the first copy wins and readers never see a half-written one."""
    try:
        os.rename(staging, target)
        return True
    except OSError:
        if not target.is_dir():  # not a concurrent writer's copy: a real failure
            raise
        shutil.rmtree(staging, ignore_errors=True)
        return False


def discard_folder(folder: Path) -> None:
    """Remove a published folder at once for every reader (renamed to a staging name, then deleted):
    a reader that finds it gone builds afresh, one that holds its files open keeps reading them."""
    doomed = folder.parent / staging_name(folder.name)
    try:
        os.rename(folder, doomed)
    except FileNotFoundError:  # another process discarded it first
        return
    shutil.rmtree(doomed, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created, never deleted) for the block; another process
    or thread taking the same lock waits. The kernel releases it when the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        if fcntl is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
