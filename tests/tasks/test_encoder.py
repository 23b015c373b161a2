import pytest
import torch

from sesame.tasks.encoder import Encoder, load_tokenizer, resolve_name_or_path


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
