"""The feature cache shared by several writers: killed builds, damaged entries, two builders of one key,
layer subsets, ``sesame-cache du``."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sesame.tasks.cli.cache import main as cache_main
from sesame.tasks.core.shared_writes import staging_name
from sesame.tasks.encoders.encoder import Encoder
from sesame.tasks.inputs.feature_cache import build_or_open, entry_problem, list_entries
from tests.tasks.inputs.cache_writer import batches
from tests import preloaded_commands as preloaded

WRITER = Path(__file__).with_name("cache_writer.py")
ROOT = Path(__file__).resolve().parents[3]


def _writer(encoder_dir: Path, cache_dir: Path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return preloaded.popen([sys.executable, str(WRITER), str(encoder_dir), str(cache_dir), *flags], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _published(cache_dir: Path) -> list[Path]:
    return [p for p in cache_dir.iterdir() if not p.name.startswith(".")]


def _uncached(encoder: Encoder, batch: dict) -> tuple[torch.Tensor, ...]:
    encoder.eval()
    with torch.inference_mode():
        return encoder(**batch)


def _assert_equal_where_real(cached, expected, batch, layers) -> None:
    """Every wanted hidden state equal to the encoder's, bit for bit, on real tokens; the others None."""
    mask = batch["attention_mask"].bool()
    assert len(cached) == len(expected)
    for i, (got, want) in enumerate(zip(cached, expected)):
        if i in layers:
            assert torch.equal(got[mask], want[mask]), f"hidden state {i} differs"
        else:
            assert got is None


def test_a_writer_killed_mid_write_leaves_nothing_the_next_build_reads_or_keeps(tiny_bert_dir, tmp_path):
    cache_dir = tmp_path / "cache"
    child = _writer(tiny_bert_dir, cache_dir, "--hang")
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists():
        assert child.poll() is None, child.stdout.read()
        assert time.monotonic() < deadline, "the writer never started"
        time.sleep(0.1)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    (left,) = cache_dir.glob(".*.staging-*")  # its half-written folder, under a name no reader opens
    assert (left / "features.npy").is_file() and not (left / "meta.json").exists() and _published(cache_dir) == []
    encoder = Encoder(str(tiny_bert_dir))
    cache = build_or_open(encoder, [batches()], cache_dir, progress=False)
    assert not left.exists() and list(cache_dir.glob(".*.staging-*")) == []
    assert entry_problem(cache.folder) is None
    batch = batches()[2]
    _assert_equal_where_real(cache.lookup(batch), _uncached(encoder, batch), batch, range(encoder.num_hidden_states))


def test_a_live_writers_staging_folder_is_left_alone(tiny_bert_dir, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    own = cache_dir / staging_name("somekey.L0-4")  # this process's pid: a writer that runs
    own.mkdir()
    dead = cache_dir / staging_name("otherkey.L4").replace(f"-{os.getpid()}-", "-999999999-")
    dead.mkdir()
    build_or_open(Encoder(str(tiny_bert_dir)), [batches()[:2]], cache_dir, progress=False)
    assert own.is_dir() and not dead.exists()


def test_a_bit_flipped_or_truncated_entry_is_rebuilt_with_one_warning(tiny_bert_dir, tmp_path, caplog):
    encoder = Encoder(str(tiny_bert_dir))
    folder = build_or_open(encoder, [batches()], tmp_path, progress=False).folder
    features = folder / "features.npy"
    data = bytearray(features.read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit of one feature value
    features.write_bytes(bytes(data))
    assert "checksum" in entry_problem(folder)
    with caplog.at_level(logging.WARNING, logger="sesame.tasks.inputs.feature_cache"):
        cache = build_or_open(encoder, [batches()], tmp_path, progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and folder.name in warnings[0] and "damaged" in warnings[0]
    assert cache.folder == folder and entry_problem(folder) is None
    batch = batches()[0]
    _assert_equal_where_real(cache.lookup(batch), _uncached(encoder, batch), batch, range(encoder.num_hidden_states))

    caplog.clear()
    with (folder / "index.npz").open("r+b") as handle:  # truncated
        handle.truncate(100)
    with caplog.at_level(logging.WARNING, logger="sesame.tasks.inputs.feature_cache"):
        build_or_open(encoder, [batches()], tmp_path, progress=False)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "index.npz has 100 bytes" in warning and entry_problem(folder) is None


def test_two_writer_processes_of_one_key_end_with_one_valid_entry(tiny_bert_dir, tmp_path):
    cache_dir = tmp_path / "cache"
    writers = [_writer(tiny_bert_dir, cache_dir) for _ in range(2)]
    for writer in writers:
        out, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0, out
    (entry,) = _published(cache_dir)
    assert entry_problem(entry) is None
    assert [p.name for p in cache_dir.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")] == []


def test_a_layer_subset_is_stored_read_equal_and_served_by_a_superset(tiny_bert_dir, tmp_path):
    encoder = Encoder(str(tiny_bert_dir))
    last = encoder.num_hidden_states - 1
    batch = batches()[1]
    expected = _uncached(encoder, batch)
    only_last = build_or_open(encoder, [batches()], tmp_path, progress=False, layers=[last])
    assert only_last.features.shape[1] == 1 and only_last.folder.name.endswith(f".L{last}")
    _assert_equal_where_real(only_last.lookup(batch), expected, batch, {last})
    # Another layer set is another entry, never the one-layer one.
    four = build_or_open(encoder, [batches()], tmp_path, progress=False, layers=range(last - 3, last + 1))
    assert four.folder != only_last.folder and four.features.shape[1] == 4
    assert json.loads((four.folder / "meta.json").read_text())["layers"] == list(range(last - 3, last + 1))
    _assert_equal_where_real(four.lookup(batch), expected, batch, set(range(last - 3, last + 1)))
    # A subset of the four-layer entry is read from it, nothing is built.
    second_to_last = build_or_open(encoder, [batches()], tmp_path, progress=False, layers=[last - 1])
    assert second_to_last.folder == four.folder and len(_published(tmp_path)) == 2
    _assert_equal_where_real(second_to_last.lookup(batch), expected, batch, {last - 1})


def test_a_cached_fusion_run_reads_what_the_uncached_one_reads(make_cfg, tmp_path):
    from sesame.tasks.base.run_settings import RunSettings
    from sesame.tasks.runs.runner import attach_feature_cache, build_datamodule, build_module

    # pooling=pooler reads [CLS] alone: the uncached encoder gives that token only (encoder.top_layer_at_summary)
    for fusion, held, pooling in (("last", 1, "pooler"), ("sum_last_4", 4, "mean")):
        settings = RunSettings.from_config(make_cfg(
            "finetune=frozen", f"fusion={fusion}", f"pooling={pooling}", "data.max_train_examples=16",
            "data.max_eval_examples=16", f"cache.dir={tmp_path / fusion}", "cache.enabled=true"))
        dm = build_datamodule(settings)
        dm.setup("fit")
        module = build_module(settings).eval()
        batch = next(iter(dm.val_dataloader()))
        with torch.no_grad():
            uncached = module.encode(batch)
            attach_feature_cache(settings.cache, module, dm, progress=False)
            cached = module.encode(batch)
        assert module.reads_summary_only == (pooling == "pooler")
        if module.reads_summary_only:
            assert uncached.shape[1] == 1
            cached = cached[:, :1]
        mask = batch["attention_mask"][:, :uncached.shape[1]].bool()
        assert module.feature_cache.features.shape[1] == held and module.feature_cache.hits == 1
        torch.testing.assert_close(cached[mask], uncached[mask], rtol=1e-5, atol=1e-6)


def test_du_shows_each_entry_its_layers_and_the_saving(tiny_bert_dir, tmp_path, capsys):
    encoder = Encoder(str(tiny_bert_dir))
    last = encoder.num_hidden_states - 1
    one = build_or_open(encoder, [batches()], tmp_path, progress=False, layers=[last]).folder
    every = build_or_open(encoder, [batches()], tmp_path, progress=False).folder
    cache_main(["du", "--dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    by_entry = {line.split()[0]: line for line in lines[:-1]}
    n = encoder.num_hidden_states
    assert f"layers {last} (1 of {n})" in by_entry[one.name]
    assert f"layers 0-{last} ({n} of {n})" in by_entry[every.name] and "saves 0 B (0%)" in by_entry[every.name]
    features = np.load(every / "features.npy", mmap_mode="r")
    saved = features.nbytes - features.nbytes // n  # the one-layer entry's features lack n - 1 of n layers
    assert f"saves {saved / 1024:.1f} KiB" in by_entry[one.name]
    assert lines[-1].endswith("(2 entries)")
    cache_main(["ls", "--dir", str(tmp_path)])
    assert f"layers {last} (1 of {n})" in capsys.readouterr().out
    assert {e["entry"] for e in list_entries(tmp_path)} == {one.name, every.name}
