"""Each family's model through sesame's ``Encoder``: hidden states, right padding, the encoder half of
encoder-decoder models, Longformer's global attention, and the errors where a family cannot do
something (each names the family, the setting and the fix)."""

from __future__ import annotations

import pytest
import torch
from transformers import PretrainedConfig

from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.inputs.batching import PaddingCollator
from sesame.tasks.encoders.encoder import Encoder, encoder_inputs, load_tokenizer
from sesame.tasks.encoders.families import encoder_class, global_attention_mask
from sesame.tasks.encoders.store import save_encoder_folder
from sesame.tasks.core.errors import ConfigError
from tests.families.builders import FAMILY_SPECS

FAMILIES = list(FAMILY_SPECS)


def pair_batch(tokenizer, pairs):
    enc = tokenizer([a for a, _ in pairs], [b for _, b in pairs])
    return PaddingCollator({"input_ids": tokenizer.pad_token_id})([{k: enc[k][i] for k in enc} for i in range(len(pairs))])


@pytest.mark.parametrize("name", FAMILIES)
def test_hidden_states_of_every_layer_and_right_padding(name, family_dir):
    """num_hidden_layers + 1 states of [B, T, H] (Longformer's padding to its attention window taken
    off again), and a short row padded on the right gives what it gives alone: sesame pads on the
    right for every family, XLNet's included."""
    folder = str(family_dir(name))
    encoder, tokenizer = Encoder(folder).eval(), load_tokenizer(folder)
    batch = pair_batch(tokenizer, [("who won the prize in physics ?", "marie curie won it in 1903 , with pierre ."),
                                   ("who ?", "curie .")])
    alone = pair_batch(tokenizer, [("who ?", "curie .")])
    with torch.inference_mode():
        states = encoder(**encoder_inputs(batch))
        single = encoder(**encoder_inputs(alone))
        last_only = encoder(**encoder_inputs(batch), all_layers=False)
    length = int(alone["attention_mask"].sum())
    assert len(states) == encoder.num_hidden_states == encoder.config.num_hidden_layers + 1
    for state, own in zip(states, single, strict=True):
        assert state.shape == (2, batch["input_ids"].shape[1], encoder.hidden_size)
        torch.testing.assert_close(state[1, :length], own[0, :length], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(last_only[0], states[-1])


@pytest.mark.parametrize(("name", "cls"), [("bart", "BartEncoder"), ("t5", "T5EncoderModel")])
def test_encoder_decoder_models_load_their_encoder_half(name, cls, family_dir, tmp_path):
    """A whole BartModel / T5Model checkpoint gives its encoder, with every weight read; saved as a
    run's encoder/ folder it loads back as that encoder (and builds from its config alone)."""
    encoder = Encoder(str(family_dir(name)))
    assert type(encoder.model).__name__ == cls and not encoder.missing_weights
    assert not any("decoder" in n for n, _ in encoder.model.named_parameters())
    assert not encoder.takes_token_types
    tokenizer = load_tokenizer(str(family_dir(name)))
    save_encoder_folder(encoder.model, tokenizer, tmp_path / "encoder", with_weights=True)
    again = Encoder(str(tmp_path / "encoder"))
    assert type(again.model).__name__ == cls and not again.missing_weights
    for (k, a), (_, b) in zip(encoder.model.state_dict().items(), again.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    save_encoder_folder(encoder.model, tokenizer, tmp_path / "config_only", with_weights=False)
    assert type(Encoder(str(tmp_path / "config_only"), load_weights=False).model).__name__ == cls


def test_an_encoder_decoder_family_without_an_encoder_class_is_a_clear_error():
    class Seq2Seq(PretrainedConfig):
        model_type = "made_up_seq2seq"

    with pytest.raises(ConfigError, match=r"encoder-decoder model.*Fix: save the encoder half"):
        encoder_class(Seq2Seq(is_encoder_decoder=True))
    assert encoder_class(Seq2Seq()) is None


def test_longformer_global_attention_follows_the_task(family_dir, family_cfg):
    """The first token for classification, the question for QA (transformers' Longformer QA rule:
    every token before the first separator), none for tagging."""
    from sesame.tasks.glue.module import SentenceClassificationModule
    from sesame.tasks.ner.module import NerModule
    from sesame.tasks.qa.module import SquadModule

    tokenizer = load_tokenizer(str(family_dir("longformer")))
    batch = pair_batch(tokenizer, [("who won ?", "marie curie won ."), ("when ?", "in 1903 .")])
    question = global_attention_mask(batch["input_ids"], "question", tokenizer.sep_token_id)
    for row, ids in zip(question, batch["input_ids"]):
        first_sep = ids.tolist().index(tokenizer.sep_token_id)
        assert row.tolist() == [1] * first_sep + [0] * (len(ids) - first_sep)
    assert global_attention_mask(batch["input_ids"], "first", 2)[:, 0].tolist() == [1, 1]
    assert global_attention_mask(batch["input_ids"], None, 2) is None
    assert SentenceClassificationModule(RunSettings.from_config(family_cfg("longformer", "glue"))).encoder.global_attention == "first"
    assert SquadModule(RunSettings.from_config(family_cfg("longformer", "squad_v2"))).encoder.global_attention == "question"
    assert NerModule(RunSettings.from_config(family_cfg("longformer", "ner"))).encoder.global_attention is None
    encoder = Encoder(str(family_dir("longformer"))).eval()
    outputs = {}
    for mode in ("first", "question", None):
        encoder.global_attention = mode
        with torch.inference_mode():
            outputs[mode] = encoder(**encoder_inputs(batch))[-1]
    assert not torch.equal(outputs["first"], outputs["question"]) and not torch.equal(outputs["first"], outputs[None])


def test_qa_windows_need_the_question_first(family_dir):
    """Position 0 is the no-answer pointer of every family; a tokenizer whose template put the context
    there would label answers and no-answers alike."""
    from datasets import Dataset
    from tokenizers import processors

    from sesame.tasks.qa.windows import encode_windows

    tokenizer = load_tokenizer(str(family_dir("bert")))
    sep = tokenizer.sep_token_id
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="$A [SEP]", pair="$B:1 [SEP]:1 $A:0 [SEP]:0", special_tokens=[("[SEP]", sep)])
    questions = Dataset.from_dict({"id": ["q"], "question": ["who won ?"], "context": ["marie curie won ."],
                                   "answers": [{"text": ["marie curie"], "answer_start": [0]}]})
    with pytest.raises(ConfigError, match="question first"):
        encode_windows(questions, tokenizer, max_seq_length=32, doc_stride=8, train=True)


@pytest.mark.parametrize(("config_class", "model_class"), [("T5Config", "T5ForQuestionAnswering"),
                                                           ("BartConfig", "BartForQuestionAnswering")])
def test_hf_export_refuses_task_models_that_run_a_decoder(config_class, model_class):
    """transformers' T5 / BART question answering models run the decoder; sesame's model is the encoder."""
    import transformers

    from sesame.tasks.export.hf import structure_reasons

    small = {"vocab_size": 50, "d_model": 8, "num_layers": 1, "num_heads": 1, "d_kv": 8, "d_ff": 8,
             "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 1, "decoder_attention_heads": 1,
             "encoder_ffn_dim": 8, "decoder_ffn_dim": 8}
    config = getattr(transformers, config_class)(**small)
    model = getattr(transformers, model_class)(config)
    reasons = structure_reasons(model, "qa_outputs")  # the layer a QA head fills
    assert any(f"{model_class} is an encoder-decoder model that runs its decoder too" in r for r in reasons)


def test_a_pooler_without_a_dense_layer_is_no_pooler(family_dir, family_cfg, tmp_path):
    """MobileBERT with classifier_activation=false has a pooler that only picks [CLS]: nothing for
    pooling=pooler to start from, so it is refused like a missing pooler."""
    import json
    import shutil

    from sesame.tasks.glue.module import SentenceClassificationModule

    folder = tmp_path / "mobilebert"
    shutil.copytree(family_dir("mobilebert"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "classifier_activation": False}))
    with pytest.raises(ConfigError, match=r"pooling=pooler: the encoder has no pooler.*mobilebert family.*Fix: pooling=cls"):
        SentenceClassificationModule(RunSettings.from_config(family_cfg("mobilebert", "glue", "pooling=pooler", f"encoder.name_or_path={folder}")))


def test_longformer_qa_gives_what_transformers_own_qa_model_gives(family_dir, family_cfg):
    """sesame's Longformer QA (global attention on the question) equals LongformerForQuestionAnswering
    with the same weights, which computes its global attention from the separators itself."""
    from transformers import LongformerForQuestionAnswering

    from sesame.tasks.qa.module import SquadModule

    module = SquadModule(RunSettings.from_config(family_cfg("longformer", "squad_v2", "fusion=last"))).eval()
    hf = LongformerForQuestionAnswering(module.encoder.model.config).eval()
    missing, _ = hf.longformer.load_state_dict(module.encoder.model.state_dict(), strict=False)
    assert not [k for k in missing if not k.startswith("pooler.")]
    hf.qa_outputs.load_state_dict(module.head.qa_outputs.state_dict())
    tokenizer = load_tokenizer(str(family_dir("longformer")))
    enc = tokenizer(["who won the prize ?", "when ?"], ["marie curie won the prize in 1903 .", "in 1911 ."])
    rows = [{**{k: enc[k][i] for k in enc}, "context_mask": [s == 1 for s in enc.sequence_ids(i)]} for i in range(2)]
    batch = PaddingCollator({"input_ids": tokenizer.pad_token_id, "context_mask": False})(rows)
    with torch.inference_mode():
        start, end = module(batch)
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    context = batch["context_mask"]
    torch.testing.assert_close(start[context], theirs.start_logits[context], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(end[context], theirs.end_logits[context], atol=1e-5, rtol=1e-4)
