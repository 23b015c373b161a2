"""Files that are either complete or absent: write to a temporary name in the same folder, then rename.

A run killed mid-write leaves the previous version (or nothing), never a truncated file. A write the
user's machine refuses (full disk or quota, read-only or unwritable folder, a file where a folder
should be) is a :class:`~sesame.tasks.core.errors.WriteError` naming the file and saying what was kept.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from sesame.tasks.core.errors import WriteError

_NO_SPACE = "free space on that disk, or write somewhere else"
_NO_PERMISSION = "write into a folder this user may write to"
#: errno of a refused write the user fixes (their disk, folder or path) -> (what happened, the fix);
#: any other OSError is not explained: it stays a bug report.
WRITE_PROBLEMS = {
    errno.ENOSPC: ("no space left on the device", _NO_SPACE),
    errno.EDQUOT: ("the disk quota is used up", _NO_SPACE),
    errno.EFBIG: ("the file is larger than the file system allows", "write somewhere else"),
    errno.EROFS: ("the file system is read-only", _NO_PERMISSION),
    errno.EACCES: ("permission denied", _NO_PERMISSION),
    errno.EPERM: ("operation not permitted", _NO_PERMISSION),
}


#: errno that only the machine causes (never a read, never sesame's mistake), whichever code wrote.
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def file_in_the_way(path: Path) -> Path | None:
    """The nearest existing parent of ``path`` that is not a folder (``some_file`` of ``some_file/out``), or None."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def first_missing_folder(path: Path) -> Path | None:
    """The outermost folder above ``path`` that does not exist (``/proc/nope`` of ``/proc/nope/out.jsonl``), or None."""
    missing = None
    for parent in path.parents:
        if parent.exists():
            return missing
        missing = parent
    return missing


def write_error(err: OSError, path: Path, kept: str) -> WriteError | None:
    """The :class:`WriteError` that tells the user why ``path`` could not be written, and ``kept``
    (a sentence on what is still there, or ""); None where ``err`` is not theirs to fix."""
    if isinstance(err, WriteError):
        return err
    blocker = file_in_the_way(path) if err.errno in (errno.ENOTDIR, errno.EEXIST) else None
    missing = first_missing_folder(path) if err.errno == errno.ENOENT else None
    if blocker is not None:
        what, fix = f"{blocker} is a file, not a folder", "choose a path whose parents are folders, or move that file"
    elif missing is not None:  # its folder could not be made (under /proc, a dangling mount, a folder removed meanwhile)
        what, fix = f"the folder {missing} cannot be created there", "write under a folder that exists or can be created"
    elif err.errno in WRITE_PROBLEMS:
        what, fix = WRITE_PROBLEMS[err.errno]
    else:
        return None
    return WriteError(f"cannot write {path}: {what} ({err.strerror}). {kept}Fix: {fix}")


def disk_error(err: OSError) -> WriteError | None:
    """A full disk or read-only file system met by a write outside :func:`atomic_open` (Lightning's
    logger, the feature cache) as a :class:`WriteError`; None for any other error."""
    if err.errno not in DISK_ERRNOS:
        return None
    return write_error(err, Path(err.filename or "a file"), kept="")


@contextlib.contextmanager
def write_errors_explained(path: Path, kept: str) -> Iterator[None]:
    """Raise a refused write inside the block as :func:`write_error`'s :class:`WriteError`."""
    try:
        yield
    except OSError as err:
        explained = write_error(err, path, kept)
        if explained is None:
            raise
        raise explained from err


#: The name :func:`atomic_open` writes ``name`` under until it is whole: ``.<name>.<random>.tmp`` beside it.
TEMPORARY_GLOB = ".*.tmp"


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Delete the half-written files that writers killed mid-write (SIGKILL, power loss) left below ``folder``; call it
    only while no writer can be running there (a held run folder). Returns what was removed."""
    stale = [p for p in Path(folder).rglob(TEMPORARY_GLOB) if p.is_file()]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """``with atomic_open(path, "wb") as f: ...``: ``path`` appears, whole, only when the block succeeds."""
    path = Path(path)
    kept = f"The previous {path.name} is intact. " if path.is_file() else "Nothing was written. "
    with write_errors_explained(path, kept):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # TEMPORARY_GLOB
        try:
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes it private (0600); a run's files are as readable as any
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def staged_folder(output: Path, check: Callable[[Path], object], kept: str) -> Iterator[Path]:
    """``with staged_folder(out, check, kept) as tmp: <write into tmp>``: the folder ``out`` appears, whole,
    only when the block succeeds (``tmp`` is a hidden folder next to it, renamed into place; an empty
    folder at ``out`` is replaced; ``tmp`` is removed on any error). ``check(out)`` raises where ``out``
    may not be written; it runs before and again just before the rename (someone may have written it
    meanwhile). ``kept``: what a refused write leaves, for its :class:`WriteError`."""
    check(output)
    with write_errors_explained(output, kept):  # a full disk, a read-only folder: one clear line
        output.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.", suffix=".partial"))
        try:
            tmp.chmod(0o777 & ~current_umask())  # mkdtemp makes it private; the output is an ordinary folder
            yield tmp
            check(output)
            if output.is_dir():
                output.rmdir()  # empty: rename cannot replace it on every platform
            os.replace(tmp, output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
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


class _WriteFailures:
    """A binary file handle that keeps the ``OSError`` of its first failed write. torch's zip writer turns a failed
    write into ``RuntimeError: ... unexpected pos N vs M``, and the cause (a full disk) would be lost."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.handle.flush()


def torch_save_atomic(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (a checkpoint is whole or not there); a write the disk refuses is
    its ``OSError`` (and so a :class:`WriteError`), not torch's ``unexpected pos`` error."""
    import torch  # here: the console scripts' error handling imports this module, and --help must not import torch

    with atomic_open(path, "wb") as handle:
        watched = _WriteFailures(handle)
        try:
            torch.save(obj, watched)
        except RuntimeError as err:
            if watched.error is None:
                raise
            raise watched.error from err
    return Path(path)
