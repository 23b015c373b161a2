"""TaggingExport (tasks/ner/export.py): probes are the first windows of tasks/ner/windows.py, real tokens
are compared, and the ONNX runner's decoding reads the CRF's scores the export wrote."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sesame.heads.tagger import TokenTaggerHead
from sesame.tasks.base.run_settings import RunSettings
from sesame.tasks.core.errors import MissingFileError
from sesame.tasks.encoders.encoder import load_tokenizer
from sesame.tasks.ner.network import CRF_PARAMETERS, tag_decoder
from sesame.tasks.ner.export import CRF_FILE, PROBES, TaggingExport
from sesame.tasks.ner.windows import WindowTokenizer

TAGS = ["O", "B-person", "I-person"]


def _settings(make_cfg, *overrides):
    return RunSettings.from_config(make_cfg("task=ner", f"data.tag_names=[{','.join(TAGS)}]", *overrides))


def test_each_probe_is_its_first_window_of_whole_words(make_cfg, tiny_bert_dir):
    tokenizer = load_tokenizer(str(tiny_bert_dir))
    export = TaggingExport(_settings(make_cfg, "data.max_seq_length=8"))
    batch = export.probe_batch(tokenizer, (1, 2))
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids"}
    windows = WindowTokenizer(tokenizer, 8)({"tokens": [PROBES[1]], "example_index": [0]})
    assert len(windows["input_ids"]) > 1  # probe 1 needs several windows: the probe keeps the first
    assert batch["input_ids"][0].tolist() == windows["input_ids"][0]
    short = len(tokenizer(PROBES[2], is_split_into_words=True)["input_ids"])  # one window, padded
    assert batch["attention_mask"][1].sum() == short < 8
    logits = torch.randn(2, batch["input_ids"].shape[1], 3)
    keep = export.compared_positions(logits, batch)
    assert keep.shape == logits.shape and keep[1, short:].sum() == 0 and keep[0].all()
    assert export.predictions((logits,), batch).shape == (int(batch["attention_mask"].sum()),)


def test_the_runner_decodes_with_the_crf_scores_the_export_wrote(make_cfg, tmp_path):
    settings = _settings(make_cfg, "head.crf=true")
    head = TokenTaggerHead(4, 3, crf=True, tag_names=TAGS)
    with torch.no_grad():
        for p in (head.crf.start_transitions, head.crf.end_transitions, head.crf.transitions):
            p.copy_(torch.randn_like(p))
    state = {n: getattr(head.crf, n).detach().clone() for n in CRF_PARAMETERS}
    export = TaggingExport(settings, SimpleNamespace(head=head, tag_names=TAGS, decoding_state=lambda: state))
    assert "head.crf=true" in export.refusal_reasons(None)[0]
    with pytest.raises(MissingFileError, match=CRF_FILE):
        TaggingExport(settings).decoding_state(tmp_path)
    assert export.write_files(tmp_path) == [CRF_FILE]
    logits, mask = torch.randn(2, 5, 3), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    decoder = tag_decoder(TAGS, True, True, TaggingExport(settings).decoding_state(tmp_path))
    assert torch.equal(decoder.decode(logits, mask), head.eval().decode(logits, mask))


def test_without_a_crf_tags_are_the_argmax_and_no_file_is_written(make_cfg, tmp_path):
    export = TaggingExport(_settings(make_cfg), SimpleNamespace(head=TokenTaggerHead(4, 3), tag_names=TAGS,
                                                                decoding_state=lambda: {}))
    assert export.write_files(tmp_path) == [] and export.refusal_reasons(None) == []
    logits, mask = torch.randn(1, 4, 3), torch.tensor([[1, 0, 1, 1]], dtype=torch.bool)
    assert TaggingExport(_settings(make_cfg)).decoding_state(tmp_path) == {}
    tags = tag_decoder(TAGS, False, False, {}).decode(logits, mask)
    assert tags[0, 1] == -100 and torch.equal(tags[mask], logits.argmax(-1)[mask])
    assert export.label_row() == ("tags", TAGS)
