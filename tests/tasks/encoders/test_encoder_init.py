"""``encoder.init=random``: the pretrained encoder's architecture and tokenizer with freshly initialised
weights (the "why pretrain" baseline), seeded by the run's seed; a random-init run evaluates back to its
own metrics; a bad value is a ConfigError."""

import shutil

import lightning as L
import pytest
import torch
from safetensors.torch import load_file

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.saved.checkpoints import load_trained
from sesame.tasks.encoders.encoder import Encoder, load_tokenizer
from sesame.tasks.encoders.encoder_settings import EncoderSettings
from sesame.tasks.core.errors import ConfigError, MissingFileError
from sesame.tasks.runs.evaluation import evaluate
from sesame.tasks.inputs.feature_cache import encoder_fingerprint
from sesame.tasks.runs.runner import train

SMALL = ["data.max_train_examples=64", "data.max_eval_examples=48"]
SENTENCE = "a gripping , funny and touching film ."


def _build(cfg, seed):
    """The encoder a run with ``seed`` builds: the runner seeds everything before it builds the module."""
    L.seed_everything(seed, verbose=False)
    return Encoder.from_settings(EncoderSettings.from_config(cfg.encoder))


def _weights(encoder):
    return {k: v.detach().clone() for k, v in encoder.model.state_dict().items()}


def _matrices_differ(a, b):
    """Every weight matrix differs (LayerNorm weights and biases start at 1 and 0 under any init)."""
    return all(not torch.equal(a[k], b[k]) for k in a if a[k].dim() >= 2)


def test_random_init_is_the_same_network_and_tokenizer_with_fresh_weights(make_cfg, tiny_bert_dir):
    pretrained = _build(make_cfg(), 1)
    random = _build(make_cfg("encoder.init=random"), 1)
    assert random.config.to_dict() == pretrained.config.to_dict()
    got, stored = _weights(random), load_file(tiny_bert_dir / "model.safetensors")
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in _weights(pretrained).items()}
    assert set(got) <= set(stored) and _matrices_differ(got, stored)
    assert _matrices_differ(got, _weights(pretrained))
    assert not random.missing_weights  # nothing was "missing from a checkpoint": none was read
    # The frozen feature cache is keyed by the weights: a random encoder never reads pretrained features.
    assert encoder_fingerprint(random) != encoder_fingerprint(pretrained)
    # The tokenizer is the pretrained folder's whatever the init.
    settings = EncoderSettings.from_config(make_cfg("encoder.init=random").encoder)
    assert load_tokenizer(settings)(SENTENCE)["input_ids"] == load_tokenizer(str(tiny_bert_dir))(SENTENCE)["input_ids"]


def test_random_init_reads_no_weights(make_cfg, tiny_bert_dir, tmp_path):
    config_only = tmp_path / "config_only"
    shutil.copytree(tiny_bert_dir, config_only, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    encoder = _build(make_cfg(f"encoder.name_or_path={config_only}", "encoder.init=random"), 1)
    assert encoder.hidden_size == 16
    with pytest.raises(OSError):  # the same folder without init=random needs the weights
        _build(make_cfg(f"encoder.name_or_path={config_only}"), 1)


def test_random_init_is_reproducible_for_a_seed_and_differs_across_seeds(make_cfg):
    cfg = make_cfg("encoder.init=random")
    first, again, other = _weights(_build(cfg, 1)), _weights(_build(cfg, 1)), _weights(_build(cfg, 2))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert _matrices_differ(first, other)


def test_a_run_initialises_from_its_own_seed(make_cfg, tiny_bert_dir, tmp_path):
    """train() seeds before it builds the module: the run's seed decides the random encoder (a frozen
    run stores the encoder it never trains in <run>/encoder/, so the initial weights can be read back)."""
    stored = {}
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        train(RunSettings.from_config(make_cfg("encoder.init=random", "finetune=frozen", f"seed={seed}", *SMALL)), tmp_path / name)
        stored[name] = load_file(tmp_path / name / "encoder" / "model.safetensors")
    assert all(torch.equal(stored["a"][k], stored["b"][k]) for k in stored["a"])
    assert _matrices_differ(stored["a"], stored["c"])
    assert _matrices_differ(stored["a"], load_file(tiny_bert_dir / "model.safetensors"))
    assert _matrices_differ(stored["a"], _weights(_build(make_cfg("encoder.init=random"), 2)))  # not seed 2's either
    seed_1 = _weights(_build(make_cfg("encoder.init=random"), 1))  # less the pooler, which the run drops
    assert all(torch.equal(v, seed_1[k]) for k, v in stored["a"].items())


@pytest.mark.parametrize("finetune", ["frozen", "full"])
def test_a_random_init_run_evaluates_to_its_own_metrics(make_cfg, tiny_bert_dir, tmp_path, finetune):
    # Trained on a copy of the encoder folder that is then deleted: the run folder alone must do.
    copy = tmp_path / "pretrained"
    shutil.copytree(tiny_bert_dir, copy)
    run = tmp_path / "run"
    metrics = train(RunSettings.from_config(make_cfg(f"encoder.name_or_path={copy}", "encoder.init=random", f"finetune={finetune}", *SMALL)), run)
    shutil.rmtree(copy)

    got = evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}")), tmp_path / "eval")
    assert got["val_accuracy"] == metrics["val_accuracy"]
    assert got["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-6)
    assert (tmp_path / "eval" / "val_SST-2.tsv").read_text() == (run / "val_SST-2.tsv").read_text()

    trained = load_trained(run)
    assert trained.cfg["encoder"]["init"] == "random"
    tokenizer = trained.tokenizer()  # the run's encoder/ folder holds the pretrained folder's tokenizer
    assert tokenizer(SENTENCE)["input_ids"] == load_tokenizer(str(tiny_bert_dir))(SENTENCE)["input_ids"]
    # Its weights are what random initialisation trained into: the init is fixed.
    with pytest.raises(ConfigError, match="encoder.init cannot be overridden"):
        load_trained(run, overrides={"encoder.init": "pretrained"})
    with pytest.raises(ConfigError, match="encoder.init cannot be overridden"):
        evaluate(RunSettings.from_config(make_cfg(*SMALL, f"++model={run}", "encoder.init=pretrained")), tmp_path / "e2",
                 overrides=["encoder.init=pretrained"])


def test_a_bad_init_is_a_config_error_naming_the_choices(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"encoder.init='scratch' is not one of pretrained, random"):
        EncoderSettings.from_config(make_cfg("encoder.init=scratch").encoder)
    with pytest.raises(ConfigError, match=r"encoder.init='Random' is not one of pretrained, random"):
        train(RunSettings.from_config(make_cfg("encoder.init=Random", *SMALL)), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()
    with pytest.raises(MissingFileError):  # the path is still checked with init=random
        _build(make_cfg(f"encoder.name_or_path={tmp_path / 'nowhere'}", "encoder.init=random"), 1)
