"""Frozen-encoder features on disk: run the encoder once, train heads on what it gave.

With ``finetune=frozen`` the encoder is a fixed function of its input, so its hidden states for every
example of a run can be computed once and memory-mapped from disk by every later epoch, run and
``--multirun`` job (cache hits need the same encoder weights and the same token ids, i.e. the same
tokenizer, data contents, max length and stride).

An entry, ``<cache_dir>/<key>.L<layers>/``, holds only the hidden states the head reads
(``cache.layers=fusion``: one for ``fusion=last``, four for ``sum_last_4``, all for ``scalar_mix``; or
``cache.layers=all``): ``features.npy`` [N_tokens, len(layers), H], ``index.npz`` (per-example content
keys and token offsets) and ``meta.json``, the manifest: the layers held, sizes, and the xxh3-128
checksum of each array file. ``<key>`` digests the encoder weights, the examples and the dtype; the
folder name and the manifest say which layers are held, and an entry holding more layers than a run
reads serves it too.

Several sweeps may share one cache folder (``tasks/core/shared_writes.py``): an entry is built in a
staging folder named by host and pid, then renamed into place, so no reader ever sees a half-written
one; builders of one key take turns on a lock file (``.<key>.lock``), so the second finds the first's
entry instead of building its own; a builder killed mid-write leaves a staging folder that the next
builder deletes (its pid is dead). Opening an entry checks its files against the manifest
(``tasks/core/file_checksums.py``): a truncated or bit-flipped entry is named in one warning and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sesame.tasks.core.errors import ConfigError
from sesame.tasks.core.file_checksums import file_problem, file_record
from sesame.tasks.core.shared_writes import (discard_folder, exclusive_lock, is_staging, publish_folder,
                                             remove_dead_writers_leftovers, staging_folder, writer_running)
from sesame.tasks.encoders.encoder import Encoder, encoder_inputs
from sesame.tasks.inputs.cache_settings import DTYPES

log = logging.getLogger(__name__)
# 2: features from before the encoder passed token_type_ids to BERT (transformers 5) are stale;
# 3: entries hold a layer subset and a manifest with checksums.
FORMAT_VERSION = 3
#: The array files of an entry, each checked against the manifest's record when the entry is opened.
ARRAY_FILES = ("features.npy", "index.npz")
MANIFEST = "meta.json"


def default_cache_dir() -> Path:
    root = os.environ.get("SESAME_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "sesame")
    return Path(root).expanduser() / "features"


def sequence_keys(inputs: Mapping[str, torch.Tensor]) -> list[bytes]:
    """One digest per row of the encoder's ``inputs`` ([N, T], :func:`encoder_inputs`) of its real
    tokens (ids and segment ids), whatever the padding."""
    ids = inputs["input_ids"].cpu().numpy()
    lengths = inputs["attention_mask"].sum(dim=1).cpu().numpy()
    types = inputs["token_type_ids"].cpu().numpy() if "token_type_ids" in inputs else None
    keys = []
    for row, n in enumerate(lengths):
        h = hashlib.blake2b(ids[row, :n].astype(np.int64).tobytes(), digest_size=16)
        if types is not None:
            h.update(types[row, :n].astype(np.int8).tobytes())
        keys.append(h.digest())
    return keys


def example_keys(batch: Mapping[str, torch.Tensor]) -> list[bytes]:
    """One digest per example (batch row) of its real tokens, whatever the padding: for a group of
    sequences ([B, G, T]) the digest of its members' digests, in order."""
    keys = sequence_keys(encoder_inputs(batch))
    members = len(keys) // max(len(batch["input_ids"]), 1)
    if members == 1:
        return keys
    return [hashlib.blake2b(b"".join(keys[i : i + members]), digest_size=16).digest()
            for i in range(0, len(keys), members)]


def encoder_fingerprint(encoder: Encoder) -> str:
    """Digest of the encoder's own weights and config: a changed checkpoint never reuses features."""
    h = hashlib.sha256(json.dumps(encoder.config.to_dict(), sort_keys=True, default=str).encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Iterating a shuffling loader draws from the global RNGs; restore them so training order is unchanged."""
    torch_state, np_state, py_state = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.random.set_rng_state(torch_state)
        np.random.set_state(np_state)
        random.setstate(py_state)


def layers_tag(layers: Sequence[int]) -> str:
    """A folder-name form of sorted hidden-state indices: runs as ``a-b``, joined by ``_`` (``0-12``, ``9-12``, ``0_12``)."""
    runs: list[list[int]] = []
    for i in sorted(layers):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return "_".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


class FeatureCache:
    """An opened cache entry: ``lookup(batch)`` -> hidden states, or ``None`` if any example is missing.

    ``layers``: the hidden-state indices the reader wants (default: every one the entry holds); the
    entry must hold them all."""

    def __init__(self, folder: Path, layers: Sequence[int] | None = None) -> None:
        self.folder = folder
        self.meta = json.loads((folder / MANIFEST).read_text())
        index = np.load(folder / "index.npz")
        self.features = np.load(folder / "features.npy", mmap_mode="r")
        held = [int(i) for i in self.meta.get("layers", range(self.features.shape[1]))]
        self.num_hidden_states = int(self.meta.get("num_hidden_states", len(held)))
        self.layers = tuple(sorted(set(held if layers is None else layers)))
        missing = sorted(set(self.layers) - set(held))
        if missing:
            raise ValueError(f"feature cache entry {folder} holds hidden states {held}, not {missing}")
        self._positions = [held.index(i) for i in self.layers]  # where each wanted layer lies in features.npy
        starts, lengths = index["starts"], index["lengths"]
        # numpy's S16 drops trailing NUL bytes of a digest on the way back: pad them again.
        self.rows = {bytes(k).ljust(16, b"\0"): (int(s), int(n)) for k, s, n in zip(index["keys"], starts, lengths)}
        self.hits = self.misses = 0

    def lookup(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor | None, ...] | None:
        """The encoder's hidden states for the rows of ``batch``: ``num_hidden_states`` entries, each
        [N, T, H] (N = B or B * G for groups of sequences, as the encoder would give them) for the wanted
        layers and None for the others (the fusion does not read them); None where any row is not cached."""
        inputs = encoder_inputs(batch)
        spans = [self.rows.get(k) for k in sequence_keys(inputs)]
        if any(s is None for s in spans):
            self.misses += 1
            return None
        self.hits += 1
        rows, width = inputs["input_ids"].shape
        every = self._positions == list(range(self.features.shape[1]))
        out = np.zeros((rows, width, len(self.layers), self.features.shape[2]), dtype=np.float32)
        for row, (start, n) in enumerate(spans):
            out[row, :n] = self.features[start : start + n] if every else self.features[start : start + n][:, self._positions]
        states = torch.from_numpy(out).to(batch["input_ids"].device).unbind(dim=2)  # K x [B, T, H]
        by_layer = dict(zip(self.layers, states))
        return tuple(by_layer.get(i) for i in range(self.num_hidden_states))


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The entry's manifest, or None where it is missing, unreadable or of another format version."""
    try:
        meta = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT_VERSION else None


def entry_problem(folder: Path, verify: bool = True) -> str | None:
    """Why the entry at ``folder`` may not be read (missing or stale manifest, a file of the wrong size,
    or, with ``verify``, a checksum that differs), or None where it is sound."""
    meta = read_manifest(folder)
    if meta is None:
        return f"{MANIFEST} is missing, unreadable or of an older format"
    files = meta.get("files") or {}
    for name in ARRAY_FILES:
        if name not in files:
            return f"the manifest records no {name}"
        problem = file_problem(folder / name, files[name]) if verify else (
            None if (folder / name).is_file() and (folder / name).stat().st_size == files[name].get("bytes")
            else f"{name} is missing or has the wrong size")
        if problem:
            return problem
    return None


def entry_is_complete(folder: Path) -> bool:
    """Whether ``folder`` has a current manifest and files of the recorded sizes (no checksums read)."""
    return entry_problem(folder, verify=False) is None


def build_or_open(
    encoder: Encoder,
    loaders: Iterable[Iterable[Mapping[str, torch.Tensor]]],
    cache_dir: str | Path | None = None,
    dtype: str = "float32",
    progress: bool = True,
    layers: Sequence[int] | None = None,
) -> FeatureCache:
    """Open an entry holding (at least) hidden states ``layers`` (absolute indices; default: all) for these
    examples and this encoder, building it first if there is none; a damaged one is rebuilt."""
    if dtype not in DTYPES:
        raise ConfigError(f"cache.dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    layers = tuple(range(encoder.num_hidden_states)) if layers is None else tuple(sorted(set(int(i) for i in layers)))
    loaders = list(loaders)
    with preserved_rng():
        lengths_by_key = {
            k: int(n)
            for loader in loaders
            for inputs in map(encoder_inputs, loader)
            for k, n in zip(sequence_keys(inputs), inputs["attention_mask"].sum(dim=1).tolist())
        }
    keys = sorted(lengths_by_key)
    h = hashlib.sha256(f"v{FORMAT_VERSION}|{dtype}|{encoder_fingerprint(encoder)}".encode())
    for k in keys:
        h.update(k)
    key = h.hexdigest()[:32]
    remove_dead_writers_leftovers(cache_dir)
    folder = usable_entry(cache_dir, key, layers)
    if folder is None:
        with exclusive_lock(cache_dir / f".{key}.lock"):  # one builder per key; the others wait, then read its entry
            folder = usable_entry(cache_dir, key, layers)
            if folder is None:
                folder = cache_dir / f"{key}.L{layers_tag(layers)}"
                staging = staging_folder(cache_dir, folder.name)
                try:
                    _build(encoder, loaders, keys, [lengths_by_key[k] for k in keys], staging, dtype, progress, layers)
                    publish_folder(staging, folder)
                except BaseException:
                    discard_folder(staging)
                    raise
    return FeatureCache(folder, layers)


def usable_entry(cache_dir: Path, key: str, layers: Sequence[int]) -> Path | None:
    """The published entry of ``key`` holding every one of ``layers`` with the fewest layers, its files
    checked against its manifest; a damaged one found on the way is named in a warning and removed."""
    candidates = []
    for folder in cache_dir.glob(f"{key}.L*"):
        meta = read_manifest(folder)
        held = set(meta.get("layers", ())) if meta else set()
        if meta is None or set(layers) <= held:
            candidates.append((len(held), folder.name, folder))
    for _, _, folder in sorted(candidates):
        problem = entry_problem(folder)
        if problem is None:
            return folder
        log.warning("feature cache entry %s is damaged (%s); rebuilding it", folder, problem)
        discard_folder(folder)
    return None


def _build(encoder: Encoder, loaders: list, keys: list[bytes], lengths: list[int], folder: Path, dtype: str,
           progress: bool, layers: Sequence[int]) -> None:
    """Run the encoder over every example once and write the entry's files into ``folder`` (a staging folder)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    position = {k: i for i, k in enumerate(keys)}
    shape = (int(lengths.sum()), len(layers), encoder.hidden_size)
    last_only = tuple(layers) == (encoder.num_hidden_states - 1,)  # the encoder need not return the others
    features = np.lib.format.open_memmap(folder / "features.npy", mode="w+", dtype=DTYPES[dtype], shape=shape)
    done = np.zeros(len(keys), dtype=bool)
    was_training = encoder.training
    encoder.eval()
    total = sum(len(loader) for loader in loaders if hasattr(loader, "__len__"))
    bar = tqdm(total=total or None, desc=f"caching frozen features in {folder.parent}", unit="batch", disable=not progress)
    with preserved_rng(), torch.inference_mode():
        for loader in loaders:
            for inputs in map(encoder_inputs, loader):
                rows = [(r, position[k]) for r, k in enumerate(sequence_keys(inputs)) if not done[position[k]]]
                if rows:
                    states = encoder(**inputs, all_layers=not last_only)
                    chosen = states if last_only else [states[i] for i in layers]
                    hidden = torch.stack(tuple(chosen), dim=2).float().cpu().numpy()  # [B, T, K, H]
                    for r, i in rows:
                        features[starts[i] : starts[i] + lengths[i]] = hidden[r, : lengths[i]]
                        done[i] = True
                bar.update(1)
    bar.close()
    encoder.train(was_training)
    features.flush()
    del features
    np.savez(folder / "index.npz", keys=np.array(keys, dtype="S16"), starts=starts, lengths=lengths)
    meta = {
        "format": FORMAT_VERSION, "num_examples": len(keys), "num_tokens": shape[0],
        "layers": list(layers), "num_hidden_states": encoder.num_hidden_states, "hidden_size": shape[2],
        "dtype": dtype, "encoder": str(encoder.name_or_path),
        "files": {name: file_record(folder / name) for name in ARRAY_FILES},
    }
    (folder / MANIFEST).write_text(json.dumps(meta, indent=2))  # last: the staging folder is whole now


def all_layers_bytes(meta: Mapping[str, Any]) -> int:
    """The size ``features.npy`` of an entry (manifest ``meta``) would have holding every hidden state."""
    itemsize = np.dtype(DTYPES.get(meta.get("dtype"), np.float32)).itemsize
    return int(meta["num_tokens"]) * int(meta["num_hidden_states"]) * int(meta["hidden_size"]) * itemsize


def list_entries(cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Every published entry (complete or not) with its size in bytes, and the staging folders of
    writers (``staging: True``; ``writing: True`` while their writer runs, else left by a killed one)."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    entries = []
    for folder in sorted(cache_dir.iterdir()) if cache_dir.is_dir() else []:
        if not folder.is_dir():
            continue  # lock files
        staging = is_staging(folder)
        if folder.name.startswith(".") and not staging:
            staging = True  # a staging folder of an older sesame (".<key>.building-...")
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        complete = not staging and entry_is_complete(folder)
        meta = read_manifest(folder) if complete else {}
        entries.append({"entry": folder.name, "path": str(folder), "bytes": size, "complete": complete,
                        "staging": staging, "writing": staging and writer_running(folder), **(meta or {})})
    return entries
