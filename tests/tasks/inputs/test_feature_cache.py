"""The frozen-feature cache: same metrics as without it, reuse, stale and half-built entries, races."""

import threading

import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.cli.cache import main as cache_main
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.encoders.encoder_settings import EncoderSettings
from sesame.tasks.inputs.feature_cache import build_or_open, entry_is_complete, list_entries
from sesame.tasks.runs.runner import build_datamodule, train


def _frozen(make_cfg, cache_dir, *extra):
    return make_cfg("finetune=frozen", "fusion=scalar_mix", "pooling=mean", "seed=3",
                    "data.max_train_examples=96", "data.max_eval_examples=96", f"cache.dir={cache_dir}", *extra)


# A cached run gives the metrics of an uncached one and a second reads the entry without running the encoder,
# for every task: tests/conformance/test_training.py.


def _encoder_and_loaders(make_cfg, cache_dir, *extra):
    cfg = _frozen(make_cfg, cache_dir, *extra)
    dm = build_datamodule(RunSettings.from_config(cfg))
    dm.setup("fit")
    return Encoder.from_settings(EncoderSettings.from_config(cfg.encoder)), [dm.train_dataloader(), dm.val_dataloader()]


def test_lookup_gives_the_encoder_output(make_cfg, tmp_path):
    encoder, loaders = _encoder_and_loaders(make_cfg, tmp_path)
    cache = build_or_open(encoder, loaders, tmp_path, progress=False)
    batch = next(iter(loaders[1]))
    encoder.eval()
    with torch.no_grad():
        expected = encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    got = cache.lookup(batch)
    mask = batch["attention_mask"].bool()
    # Every example of every loader is found (digests ending in NUL bytes included).
    assert all(cache.lookup(b) is not None for loader in loaders for b in loader) and cache.misses == 0
    for g, e in zip(got, expected):
        torch.testing.assert_close(g[mask], e[mask], rtol=1e-4, atol=1e-5)


def test_changed_data_gets_a_new_entry_and_a_half_built_one_is_rebuilt(make_cfg, tmp_path):
    encoder, loaders = _encoder_and_loaders(make_cfg, tmp_path)
    first = build_or_open(encoder, loaders, tmp_path, progress=False).folder
    _, fewer = _encoder_and_loaders(make_cfg, tmp_path, "data.max_train_examples=32")
    assert build_or_open(encoder, fewer, tmp_path, progress=False).folder != first
    (first / "meta.json").unlink()  # as a build killed before its last write would leave it
    assert not entry_is_complete(first)
    rebuilt = build_or_open(encoder, loaders, tmp_path, progress=False)
    assert rebuilt.folder == first and entry_is_complete(first)


def test_two_builders_at_once_leave_one_good_entry(make_cfg, tmp_path):
    encoder, loaders = _encoder_and_loaders(make_cfg, tmp_path)
    results, errors = [], []

    def build():
        try:
            results.append(build_or_open(encoder, loaders, tmp_path / "c", progress=False).folder)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(set(results)) == 1 and entry_is_complete(results[0])
    # no staging folders left (the key's lock file stays: it is empty and never read)
    assert [p.name for p in (tmp_path / "c").iterdir() if not p.name.endswith(".lock")] == [results[0].name]


def test_cache_needs_a_frozen_encoder(make_cfg, tmp_path):
    with pytest.raises(ValueError, match="needs finetune=frozen"):
        train(RunSettings.from_config(make_cfg("finetune=full", "cache.enabled=true", f"cache.dir={tmp_path}")), tmp_path / "run")


def test_cache_cli_lists_and_clears(make_cfg, tmp_path, capsys):
    encoder, loaders = _encoder_and_loaders(make_cfg, tmp_path)
    folder = build_or_open(encoder, loaders, tmp_path, progress=False).folder
    cache_main(["ls", "--dir", str(tmp_path)])
    assert folder.name in capsys.readouterr().out
    cache_main(["clear", "--dir", str(tmp_path)])
    assert not folder.exists()


def test_auto_caches_exactly_the_frozen_runs_of_a_sweep(make_cfg, tmp_path):
    train(RunSettings.from_config(make_cfg("finetune=full", "cache.enabled=auto", f"cache.dir={tmp_path / 'c'}", "data.max_train_examples=32")), tmp_path / "full")
    assert list_entries(tmp_path / "c") == []
    train(RunSettings.from_config(_frozen(make_cfg, tmp_path / "c", "cache.enabled=auto")), tmp_path / "frozen")
    assert len(list_entries(tmp_path / "c")) == 1


def test_digests_ending_in_nul_bytes_survive_the_index(tmp_path):
    import json

    import numpy as np

    from sesame.tasks.inputs.feature_cache import FORMAT_VERSION, FeatureCache

    key = b"\x07" * 14 + b"\0\0"
    np.save(tmp_path / "features.npy", np.ones((3, 2, 4), dtype=np.float32))
    np.savez(tmp_path / "index.npz", keys=np.array([key], dtype="S16"), starts=np.array([0]), lengths=np.array([3]))
    (tmp_path / "meta.json").write_text(json.dumps({"format": FORMAT_VERSION, "num_tokens": 3}))
    assert FeatureCache(tmp_path).rows == {key: (0, 3)}
