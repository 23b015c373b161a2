import pytest
import torch

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.encoders.encoder import Encoder, load_tokenizer, resolve_name_or_path


def test_encoder_gives_embeddings_plus_every_layer(tiny_bert_dir):
    enc = Encoder(str(tiny_bert_dir)).eval()
    tok = load_tokenizer(str(tiny_bert_dir))
    batch = tok(["a short sentence", "another one"], padding=True, return_tensors="pt")
    states = enc(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert len(states) == enc.num_hidden_states == 5
    from transformers import AutoModel

    ref = AutoModel.from_pretrained(tiny_bert_dir).eval()
    out = ref(**batch, output_hidden_states=True)
    torch.testing.assert_close(states[-1], out.last_hidden_state)


def test_missing_local_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        resolve_name_or_path(str(tmp_path / "nope"))


def test_shipped_alias_resolves_to_a_folder_with_weights():
    from pathlib import Path

    folder = Path(resolve_name_or_path("minilm_l6"))
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def test_slow_tokenizer_is_refused(tiny_bert_dir, monkeypatch):
    """Offsets and word ids need a fast tokenizer; a folder that only yields a slow one is refused.
    (transformers 5 builds fast tokenizers for BERT, so a Python-backend one is stood in for.)"""
    import types

    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: types.SimpleNamespace(is_fast=False))
    with pytest.raises(ValueError, match="fast one"):
        load_tokenizer(str(tiny_bert_dir))


def test_the_last_layer_alone_equals_the_last_of_all_hidden_states(tiny_bert_dir):
    enc = Encoder(str(tiny_bert_dir)).eval()
    batch = load_tokenizer(str(tiny_bert_dir))(["a short sentence", "another one here"], padding=True, return_tensors="pt")
    every = enc(**batch)
    (last,) = enc(**batch, all_layers=False)
    torch.testing.assert_close(last, every[-1], rtol=0, atol=0)


@pytest.mark.parametrize(("fusion", "skip", "all_layers"), [
    ("last", "true", False), ("second_to_last", "false", True), ("scalar_mix", "true", True),
    # the encoder stops at the layer read, which is then its last
    ("second_to_last", "true", False), ("sum_last_4", "true", True)])
def test_modules_ask_for_every_hidden_state_only_when_the_fusion_reads_them(make_cfg, fusion, skip, all_layers, monkeypatch):
    from sesame.tasks.saved.checkpoints import build_module

    # transformers' own stack (padding-free layers keep the hidden states the same way: tests/families/test_padding_free.py)
    module = build_module(RunSettings.from_config(make_cfg(f"fusion={fusion}", f"encoder.skip_unread_layers={skip}",
                                                           "encoder.padding_free=false")))
    calls = []
    original = type(module.encoder.model).forward

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("output_hidden_states"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(module.encoder.model), "forward", spy)
    batch = load_tokenizer(module.settings.encoder.name_or_path)(["good film", "bad"], padding=True, return_tensors="pt")
    logits = module(dict(batch))
    assert calls == [all_layers] and logits.shape == (2, 2)


@pytest.mark.parametrize("pooling", ["cls", "pooler"])
def test_the_encoder_pooler_never_runs(make_cfg, pooling, tmp_path):
    """No module keeps the encoder's pooler: unused, or (pooling=pooler) copied into the head, whose copy
    trains and is saved; the run reads back to its own metrics."""
    from sesame.tasks.saved.checkpoints import build_module, load_trained
    from sesame.tasks.runs.runner import train

    module = build_module(RunSettings.from_config(make_cfg(f"pooling={pooling}")))
    assert module.encoder.model.pooler is None
    assert not any(".pooler." in k for k in module.state_dict() if k.startswith("encoder."))
    if pooling == "pooler":
        pretrained = Encoder(str(module.settings.encoder.name_or_path)).model.pooler.dense.weight
        torch.testing.assert_close(module.pooling.dense.weight, pretrained)
        metrics = train(RunSettings.from_config(make_cfg(f"pooling={pooling}", "finetune=frozen")), tmp_path)
        again = load_trained(tmp_path).module
        assert again.encoder.model.pooler is None
        torch.testing.assert_close(again.pooling.dense.weight, torch.load(
            tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["state_dict"]["pooling.dense.weight"])
        assert metrics["val_accuracy"] is not None


@pytest.mark.parametrize(("fusion", "skip", "run"), [("second_to_last", "true", 3), ("second_to_last", "false", None),
                                                     ("embeddings", "true", 0), ("last", "true", None),
                                                     ("scalar_mix", "true", None)])
def test_skip_unread_layers_runs_the_layers_up_to_the_highest_read(make_cfg, fusion, skip, run):
    """The tiny BERT has 4 layers: fusion=second_to_last reads hidden state 3, so layer 4 need not run; the
    same logits either way (the family matrix checks every family: tests/families/test_skip_unread_layers.py)."""
    from sesame.tasks.saved.checkpoints import build_module

    module = build_module(RunSettings.from_config(make_cfg(f"fusion={fusion}", f"encoder.skip_unread_layers={skip}")),
                          network_only=True).eval()
    assert module.encoder_layers_run == run
    batch = dict(load_tokenizer(module.settings.encoder.name_or_path)(["good film", "bad"], padding=True, return_tensors="pt"))
    with torch.no_grad():
        got = module(batch)
        module.encoder_layers_run = None
        assert torch.equal(got, module(batch))
