"""Frozen-encoder features on disk: run the encoder once, train heads on what it gave.

With ``finetune=frozen`` the encoder is a fixed function of its input, so its hidden states for every
example of a run can be computed once and memory-mapped from disk by every later epoch, run and
``--multirun`` job (cache hits need the same encoder weights and the same token ids, i.e. the same
tokenizer, data contents, max length and stride).

Layout of one entry, ``<cache_dir>/<key>/``: ``features.npy`` [N_tokens, num_hidden_states, H] (all
hidden states, so any fusion can read them), ``index.npz`` (per-example content keys and token
offsets), and ``meta.json``, written last. An entry is built in a temporary folder and renamed into
place, so concurrent builders never corrupt each other and a killed build leaves no entry (a folder
without ``meta.json`` or with the wrong sizes is rebuilt).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sesame.tasks.encoders.encoder import Encoder, encoder_inputs
from sesame.tasks.core.errors import ConfigError
from sesame.tasks.inputs.cache_settings import DTYPES

log = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: features from before the encoder passed token_type_ids to BERT (transformers 5) are stale


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


class FeatureCache:
    """An opened cache entry: ``lookup(batch)`` -> hidden states, or ``None`` if any example is missing."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.meta = json.loads((folder / "meta.json").read_text())
        index = np.load(folder / "index.npz")
        self.features = np.load(folder / "features.npy", mmap_mode="r")
        starts, lengths = index["starts"], index["lengths"]
        # numpy's S16 drops trailing NUL bytes of a digest on the way back: pad them again.
        self.rows = {bytes(k).ljust(16, b"\0"): (int(s), int(n)) for k, s, n in zip(index["keys"], starts, lengths)}
        self.hits = self.misses = 0

    def lookup(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """The hidden states of the encoder's rows of ``batch`` (each [N, T, H], N = B or B * G for
        groups of sequences, as the encoder would give them), or None where any row is not cached."""
        inputs = encoder_inputs(batch)
        spans = [self.rows.get(k) for k in sequence_keys(inputs)]
        if any(s is None for s in spans):
            self.misses += 1
            return None
        self.hits += 1
        rows, width = inputs["input_ids"].shape
        out = np.zeros((rows, width, *self.features.shape[1:]), dtype=np.float32)
        for row, (start, n) in enumerate(spans):
            out[row, :n] = self.features[start : start + n]
        states = torch.from_numpy(out).to(batch["input_ids"].device)  # [B, T, K, H]
        return tuple(states.unbind(dim=2))


def entry_is_complete(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        features = np.load(folder / "features.npy", mmap_mode="r")
        return meta.get("format") == FORMAT_VERSION and features.shape[0] == meta["num_tokens"]
    except (OSError, ValueError, KeyError):
        return False


def build_or_open(
    encoder: Encoder,
    loaders: Iterable[Iterable[Mapping[str, torch.Tensor]]],
    cache_dir: str | Path | None = None,
    dtype: str = "float32",
    progress: bool = True,
) -> FeatureCache:
    """Open the entry for these examples and this encoder, building it first if needed."""
    if dtype not in DTYPES:
        raise ConfigError(f"cache.dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
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
    folder = cache_dir / h.hexdigest()[:32]
    if folder.exists() and not entry_is_complete(folder):
        log.warning("feature cache %s is incomplete (a killed build?); rebuilding it", folder)
        shutil.rmtree(folder, ignore_errors=True)
    if not folder.exists():
        _build(encoder, loaders, keys, [lengths_by_key[k] for k in keys], folder, dtype, progress)
    return FeatureCache(folder)


def _build(
    encoder: Encoder, loaders: list, keys: list[bytes], lengths: list[int], folder: Path, dtype: str, progress: bool
) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.building-"))
    try:
        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        position = {k: i for i, k in enumerate(keys)}
        shape = (int(lengths.sum()), encoder.num_hidden_states, encoder.hidden_size)
        features = np.lib.format.open_memmap(tmp / "features.npy", mode="w+", dtype=DTYPES[dtype], shape=shape)
        done = np.zeros(len(keys), dtype=bool)
        was_training = encoder.training
        encoder.eval()
        total = sum(len(loader) for loader in loaders if hasattr(loader, "__len__"))
        bar = tqdm(total=total or None, desc=f"caching frozen features in {folder}", unit="batch", disable=not progress)
        with preserved_rng(), torch.inference_mode():
            for loader in loaders:
                for inputs in map(encoder_inputs, loader):
                    rows = [(r, position[k]) for r, k in enumerate(sequence_keys(inputs)) if not done[position[k]]]
                    if rows:
                        hidden = torch.stack(encoder(**inputs), dim=2).float().cpu().numpy()  # [B, T, K, H]
                        for r, i in rows:
                            features[starts[i] : starts[i] + lengths[i]] = hidden[r, : lengths[i]]
                            done[i] = True
                    bar.update(1)
        bar.close()
        encoder.train(was_training)
        features.flush()
        del features
        np.savez(tmp / "index.npz", keys=np.array(keys, dtype="S16"), starts=starts, lengths=lengths)
        meta = {
            "format": FORMAT_VERSION, "num_examples": len(keys), "num_tokens": shape[0],
            "num_hidden_states": shape[1], "hidden_size": shape[2], "dtype": dtype,
            "encoder": str(encoder.name_or_path),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        try:
            os.rename(tmp, folder)
        except OSError:  # another job finished the same entry first: theirs is as good as ours
            if not entry_is_complete(folder):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def list_entries(cache_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Every entry (complete or not) with its size in bytes."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    entries = []
    for folder in sorted(cache_dir.glob("*")) if cache_dir.is_dir() else []:
        if not folder.is_dir():
            continue
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        complete = entry_is_complete(folder)
        meta = json.loads((folder / "meta.json").read_text()) if complete else {}
        entries.append({"entry": folder.name, "path": str(folder), "bytes": size, "complete": complete, **meta})
    return entries
