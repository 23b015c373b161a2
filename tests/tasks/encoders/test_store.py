"""Self-contained run folders: a run evaluates with its pretrained encoder folder gone; frozen encoder
weights are stored once per run (not per checkpoint) and checked by digest when filled back in; a
trained model's settings take only the overrides that can apply to its weights."""

import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.encoders.store import FROZEN_KEY, weights_digest
from sesame.tasks.core.errors import ConfigError, DataError, MissingFileError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.runs.runner import train
from sesame.tasks.saved.trained_overrides import apply_overrides, override_keys
from tests.conftest import require
from tests import preloaded_commands as preloaded

SMALL = ["data.max_train_examples=64", "data.max_eval_examples=48"]


def _train_on_a_copy(make_cfg, tiny_bert_dir, tmp_path, *overrides):
    """Train on a copy of the tiny encoder, then delete the copy: only the run folder is left."""
    pretrained = tmp_path / "pretrained"
    shutil.copytree(tiny_bert_dir, pretrained)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg(f"encoder.name_or_path={pretrained}", *SMALL, *overrides)), run)
    shutil.rmtree(pretrained)
    return run, metrics


@pytest.mark.parametrize("finetune", ["frozen", "top_k", "bitfit", "lora", "full"])
def test_a_run_evaluates_after_its_pretrained_folder_is_deleted(make_cfg, tiny_bert_dir, tmp_path, finetune):
    if finetune == "lora":
        require("peft")
    extra = {"top_k": ["finetune.top_k=1"], "lora": ["finetune.lora_rank=2"]}.get(finetune, [])
    run, metrics = _train_on_a_copy(make_cfg, tiny_bert_dir, tmp_path, f"finetune={finetune}", *extra)
    got = evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}")), tmp_path / "eval")
    assert got["val_accuracy"] == metrics["val_accuracy"]
    assert got["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-6)
    assert (tmp_path / "eval" / "val_SST-2.tsv").read_text() == (run / "val_SST-2.tsv").read_text()
    assert (run / "encoder" / "config.json").is_file() and (run / "encoder" / "tokenizer.json").is_file()

    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    encoder_keys = [k for k in checkpoint["state_dict"] if k.startswith("encoder.")]
    if finetune == "full":  # every weight trained: all in the checkpoint, none stored beside it
        assert FROZEN_KEY not in checkpoint and not (run / "encoder" / "model.safetensors").exists()
        assert any(k.endswith("embeddings.word_embeddings.weight") for k in encoder_keys)
    else:  # the untrained weights once, in encoder/, and only their names and digest in the checkpoint
        stored = load_file(run / "encoder" / "model.safetensors")  # the plain pretrained model's names
        record = checkpoint[FROZEN_KEY]
        assert record["keys"] and not set(record["keys"]) & set(encoder_keys)
        assert record["digest"] == weights_digest(
            (k, stored[k.removeprefix("encoder.model.").replace(".base_layer.", ".")]) for k in record["keys"])
        assert not any("word_embeddings" in k for k in encoder_keys)
        kept = {"frozen": lambda k: False, "top_k": lambda k: ".layer.3." in k, "bitfit": lambda k: k.endswith(".bias"),
                "lora": lambda k: "lora_" in k}[finetune]
        assert encoder_keys and all(kept(k) for k in encoder_keys) if finetune != "frozen" else not encoder_keys


def test_other_frozen_weights_than_the_trained_ones_are_refused(make_cfg, tiny_bert_dir, tmp_path):
    run, _ = _train_on_a_copy(make_cfg, tiny_bert_dir, tmp_path, "finetune=frozen")
    weights = run / "encoder" / "model.safetensors"
    state = load_file(weights)
    name = next(k for k in state if "word_embeddings" in k)
    state[name] = state[name] + 1e-3
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(DataError, match="differ from those the checkpoint was trained on"):
        load_trained(run)
    # Pointing the encoder at the right weights (the tiny encoder is the same) loads it again.
    trained = load_trained(run, overrides={"encoder.name_or_path": str(tiny_bert_dir)})
    assert trained.encoder_folder == str(tiny_bert_dir)


def test_sesame_eval_honours_encoder_overrides_and_refuses_network_ones(make_cfg, tiny_bert_dir, tmp_path, caplog):
    run, metrics = _train_on_a_copy(make_cfg, tiny_bert_dir, tmp_path, "finetune=frozen")
    missing = tmp_path / "nowhere"
    with pytest.raises(MissingFileError, match="nowhere"):  # an override is used, not silently ignored
        evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}", f"encoder.name_or_path={missing}")), tmp_path / "e0",
                 overrides=[f"encoder.name_or_path={missing}"])
    with caplog.at_level(logging.INFO):
        got = evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}", "encoder.attn_implementation=eager")), tmp_path / "e1",
                       overrides=["encoder.attn_implementation=eager"])
    assert got["val_accuracy"] == metrics["val_accuracy"]
    assert "overriding the trained encoder.attn_implementation=None with eager" in caplog.text
    for override in ("fusion=second_to_last", "pooling=mean", "finetune=full", "head.dropout=0.3"):
        with pytest.raises(ConfigError, match="cannot be overridden"):
            evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}", override)), tmp_path / "e2", overrides=[override])


def test_head_overrides_apply_to_decoding_settings_only():
    trained = {"task": {"name": "squad_v2"}, "head": {"n_best_size": 20, "max_answer_length": 30,
                                                      "null_score_diff_threshold": 0.0}, "encoder": {"name_or_path": "x"}}
    cfg = apply_overrides(trained, {"head.null_score_diff_threshold": 1.5, "head.n_best_size": 5}, "run")
    assert cfg["head"] == {"n_best_size": 5, "max_answer_length": 30, "null_score_diff_threshold": 1.5}
    assert trained["head"]["n_best_size"] == 20  # the trained config is not changed in place
    with pytest.raises(ConfigError, match="no such head setting"):
        apply_overrides(trained, {"head.n_best": 5}, "run")
    assert override_keys(["+head.x=1", "~data.y", "fusion=last", "encoder@foo=bar"]) == ["head.x", "data.y", "fusion", "encoder"]


def test_a_frozen_sweep_stores_its_encoder_once_and_each_job_folder_still_stands_alone(tiny_bert_dir, tmp_path):
    import hashlib
    import os
    import sys

    sweep = tmp_path / "sweep"
    preloaded.run(
        [sys.executable, "-m", "sesame.tasks.cli.train", "--multirun", "pooling=cls,mean", "finetune=frozen",
         f"encoder.name_or_path={tiny_bert_dir}", "trainer=debug", "trainer.enable_progress_bar=false",
         *SMALL, f"hydra.sweep.dir={sweep}"],
        check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    (entry,) = (sweep / ".encoders").iterdir()  # one set of weights for both jobs
    stored = entry / "model.safetensors"
    assert entry.name == hashlib.sha256(b"model.safetensors\0" + stored.read_bytes()).hexdigest()  # content-addressed
    jobs = [sweep / job / "encoder" / "model.safetensors" for job in ("0", "1")]
    assert all(os.path.samefile(job, stored) for job in jobs) and stored.stat().st_nlink == 3  # hard links: one copy

    # A job folder copied alone (cp -r / rsync -a copy a hard link's content) is self-contained.
    alone = tmp_path / "alone"
    shutil.copytree(sweep / "0", alone)
    assert (alone / "encoder" / "model.safetensors").stat().st_nlink == 1
    expected = load_trained(sweep / "0").module.state_dict()
    # Changed shared weights are caught by the checkpoint's digest, in every job that links them...
    with stored.open("r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        last = handle.read(4)
        handle.seek(-4, os.SEEK_END)
        handle.write(bytes(b ^ 0xFF for b in last))
    with pytest.raises(DataError, match="differ from those the checkpoint was trained on"):
        load_trained(sweep / "1")
    # ... and not in the copy, which holds its own bytes.
    got = load_trained(alone).module.state_dict()
    assert all(torch.equal(got[k], expected[k]) for k in expected)


def test_the_store_removes_a_killed_jobs_staging_folder_and_replaces_a_damaged_entry(tiny_bert_dir, tmp_path, caplog):
    import os
    import threading

    from sesame.tasks.core.shared_writes import staging_name
    from sesame.tasks.encoders.encoder import Encoder
    from sesame.tasks.encoders.store import folder_digest, store_weights

    model = Encoder(str(tiny_bert_dir)).model
    store = tmp_path / ".encoders"
    store.mkdir()
    killed = store / staging_name("weights").replace(f"-{os.getpid()}-", "-999999999-")  # a job killed mid-write
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"half")
    entry = store_weights(model, store)
    assert not killed.exists() and entry.name == folder_digest(entry)
    assert [p for p in store.iterdir() if p != entry] == []

    stored = entry / "model.safetensors"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0x01  # a flipped bit on disk
    stored.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="sesame.tasks.encoders.store"):
        assert store_weights(model, store) == entry
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert entry.name in warning and "damaged" in warning and folder_digest(entry) == entry.name

    # Two jobs storing the same weights at once: one entry, no staging folder left.
    shutil.rmtree(entry)
    results = []
    threads = [threading.Thread(target=lambda: results.append(store_weights(model, store))) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert results == [entry, entry] and list(store.iterdir()) == [entry] and folder_digest(entry) == entry.name
