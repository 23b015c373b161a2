"""Checksums of the files of an entry on disk, recorded in its manifest and checked when it is opened.

xxh3-128 (the ``xxhash`` package, which ``datasets`` also needs) hashes at memory speed, several times
faster than sha256 (``benchmarks/feature_cache_checksum.py`` gives the cost of checking an entry), and
catches truncation and flipped bits; it is no defence against someone forging a file on purpose.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
_BLOCK = 16 << 20  # 16 MiB reads: a large file is hashed without holding it in memory


def file_digest(path: Path) -> str:
    """The xxh3-128 hex digest of the file at ``path``."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path) -> dict[str, int | str]:
    """What a manifest records of one file: its size in bytes and its digest."""
    return {"bytes": path.stat().st_size, ALGORITHM: file_digest(path)}


def file_problem(path: Path, record: dict) -> str | None:
    """Why the file at ``path`` is not the one ``record`` (:func:`file_record`) describes, or None.
    The size is compared first, so a truncated file is named without reading it."""
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    if size != record.get("bytes"):
        return f"{path.name} has {size} bytes, the manifest says {record.get('bytes')}"
    if file_digest(path) != record.get(ALGORITHM):
        return f"{path.name} does not match its {ALGORITHM} checksum"
    return None
