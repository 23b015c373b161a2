"""What checking a feature-cache entry's checksums costs when it is opened, side by side with what
opening it and one epoch's read of its features cost, in one run.

An entry of ``--mib`` MiB of float32 features (random values, as the cache would hold) is written to a
temporary folder; then, each timed ``--repeats`` times (best kept), with the files in the page cache
(a just-built or recently used entry) and, with ``--cold`` (root only: drops the page cache), from disk:

- open: ``FeatureCache(folder)`` (memory-maps the features, reads the index);
- check: ``entry_problem(folder)``: xxh3-128 of every array file against the manifest (what opening adds);
- sha256: the same bytes through hashlib's sha256, for comparison;
- epoch read: every feature row copied out of the memory map once, as one training epoch reads them.

    python benchmarks/feature_cache_checksum.py               # 1024 MiB entry
    python benchmarks/feature_cache_checksum.py --mib 256 --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from sesame.tasks.core.file_checksums import file_record
from sesame.tasks.inputs.feature_cache import ARRAY_FILES, FORMAT_VERSION, MANIFEST, FeatureCache, entry_problem

HIDDEN, LAYERS, TOKENS_PER_EXAMPLE = 384, 7, 32  # MiniLM-L6's width and hidden states


def write_entry(folder: Path, mib: int) -> None:
    """A synthetic entry of about ``mib`` MiB of features, its index and manifest."""
    tokens = mib * (1 << 20) // (HIDDEN * LAYERS * 4)
    features = np.lib.format.open_memmap(folder / "features.npy", mode="w+", dtype=np.float32, shape=(tokens, LAYERS, HIDDEN))
    rng = np.random.default_rng(0)
    for start in range(0, tokens, 4096):
        features[start : start + 4096] = rng.standard_normal(features[start : start + 4096].shape, dtype=np.float32)
    features.flush()
    del features
    examples = tokens // TOKENS_PER_EXAMPLE
    keys = np.array([hashlib.blake2b(i.to_bytes(8, "little"), digest_size=16).digest() for i in range(examples)], dtype="S16")
    starts = np.arange(examples, dtype=np.int64) * TOKENS_PER_EXAMPLE
    np.savez(folder / "index.npz", keys=keys, starts=starts, lengths=np.full(examples, TOKENS_PER_EXAMPLE, dtype=np.int64))
    meta = {"format": FORMAT_VERSION, "num_tokens": tokens, "layers": list(range(LAYERS)), "num_hidden_states": LAYERS,
            "hidden_size": HIDDEN, "dtype": "float32", "files": {name: file_record(folder / name) for name in ARRAY_FILES}}
    (folder / MANIFEST).write_text(json.dumps(meta))


def sha256_files(folder: Path) -> None:
    for name in ARRAY_FILES:
        digest = hashlib.sha256()
        with open(folder / name, "rb") as handle:
            while block := handle.read(16 << 20):
                digest.update(block)


def epoch_read(folder: Path) -> None:
    features = FeatureCache(folder).features
    for start in range(0, features.shape[0], 8192):
        np.array(features[start : start + 8192])


def timed(fn, folder: Path, repeats: int, cold: bool) -> float:
    best = float("inf")
    for _ in range(repeats):
        if cold:
            subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
        start = time.perf_counter()
        fn(folder)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time from disk (drops the page cache: root only)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        folder = Path(tmp)
        write_entry(folder, args.mib)
        size = sum((folder / name).stat().st_size for name in ARRAY_FILES) / (1 << 20)
        steps = {"open": FeatureCache, "check": entry_problem, "sha256": sha256_files, "epoch read": epoch_read}
        for cold in (False, True) if args.cold else (False,):
            times = {name: timed(fn, folder, args.repeats, cold) for name, fn in steps.items()}
            print(f"entry {size:.0f} MiB, {'from disk' if cold else 'in the page cache'} (best of {args.repeats}):")
            for name, seconds in times.items():
                print(f"  {name:<11} {seconds * 1000:9.1f} ms  {size / 1024 / seconds:6.2f} GiB/s  "
                      f"{seconds / times['epoch read']:5.2f}x an epoch's read")


if __name__ == "__main__":
    main()
